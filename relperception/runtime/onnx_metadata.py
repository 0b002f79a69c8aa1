# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Read the metadata an ONNX file carries (needs the ``onnx`` package only, not torch)."""

from __future__ import annotations

import json
from typing import Any, Dict


def read_metadata(path) -> Dict[str, Any]:
    """Return the ``metadata_props`` of an ONNX file (values JSON-decoded when possible).

    Args:
        path: the ``.onnx`` file.

    Returns:
        Dict key -> value.
    """
    import onnx

    return model_metadata(onnx.load(str(path), load_external_data=False))


def model_metadata(model) -> Dict[str, Any]:
    """Return the ``metadata_props`` of a loaded ``onnx.ModelProto`` (as read_metadata)."""
    result = {}
    for entry in model.metadata_props:
        try:
            result[entry.key] = json.loads(entry.value)
        except ValueError:
            result[entry.key] = entry.value
    return result
