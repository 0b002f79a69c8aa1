# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Command-line interface: ``relperception <verb>``; one module per verb in this package."""
