# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Metadata of a TensorRT engine, in a JSON file next to it (``<engine>.json``).

A serialised engine carries no user metadata, unlike an ONNX file. ``relperception export
--format tensorrt`` writes the ONNX file's metadata (``preset``, ``kind``, size bounds, ...)
plus ``precision`` (``fp16``, ``fp32`` or ``int8``) and the TensorRT version next to the
engine; the TensorRT backend reads it back, so an engine is checked against the requested preset
like an ONNX file, and its precision is known.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from relperception.atomic_files import write_text_atomic
from relperception.config import ENGINE_PRECISIONS

#: Suffix added to the engine file name for its metadata.
METADATA_SUFFIX = '.json'
#: The precisions an engine is built with (int8: from a QDQ ONNX file).
PRECISIONS = ENGINE_PRECISIONS


def engine_metadata_path(engine_path) -> Path:
    """Return ``<engine>.json`` for an engine file."""
    engine_path = Path(engine_path)
    return engine_path.with_name(engine_path.name + METADATA_SUFFIX)


def write_engine_metadata(engine_path, metadata: Mapping[str, Any]) -> Path:
    """Write the metadata of ``engine_path`` (JSON values); return the metadata file.

    Raises:
        ValueError: ``precision`` missing or not one of :data:`PRECISIONS`.
    """
    if metadata.get('precision') not in PRECISIONS:
        raise ValueError(f'engine metadata needs precision in {PRECISIONS}, got '
                         f'{metadata.get("precision")!r}')
    path = engine_metadata_path(engine_path)
    write_text_atomic(path, json.dumps(dict(metadata), indent=2, sort_keys=True) + '\n')
    return path


def read_engine_metadata(engine_path) -> Optional[Dict[str, Any]]:
    """Return the metadata of ``engine_path``, or None when the engine has no metadata file.

    Raises:
        ValueError: a metadata file that is not a JSON object with a known ``precision``.
    """
    path = engine_metadata_path(engine_path)
    if not path.is_file():
        return None
    try:
        metadata = json.loads(path.read_text(encoding='utf-8'))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f'{path}: not a JSON engine metadata file ({error})') from None
    if not isinstance(metadata, dict) or metadata.get('precision') not in PRECISIONS:
        raise ValueError(f'{path}: engine metadata must be a JSON object with precision in '
                         f'{PRECISIONS}')
    return metadata
