# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Pipelines composing the core into jobs: VO pipeline and offline bag evaluation.

Submodules are imported on use (``from relperception.pipeline.vo_pipeline import VOPipeline``)
so that importing this package stays cheap.
"""
