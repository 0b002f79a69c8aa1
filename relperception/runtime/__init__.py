# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Inference runtimes: torch eager, onnxruntime and TensorRT behind one interface.

``build_backend(name, ...)`` returns an ``InferenceBackend`` whose ``run`` maps named numpy
arrays to named numpy arrays; ``onnx_export.export_onnx`` writes the ONNX files the onnxruntime
backend runs and ``tensorrt_export.build_engine`` turns them into TensorRT engines. The backend
modules are imported when a backend is built, so importing this package is cheap.
"""

from relperception.runtime.base import BACKENDS, build_backend, check_input_names, \
    InferenceBackend

__all__ = ['BACKENDS', 'InferenceBackend', 'build_backend', 'check_input_names']
