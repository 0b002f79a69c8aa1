# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The record of which dense heads a weights file trained (torch-free: ONNX runtimes read it).

``relperception train`` writes it into the safetensors metadata and ``export`` copies it into
the ONNX metadata (and a TensorRT engine's metadata file), so every backend leaves out the
outputs of a head that never trained.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

#: Metadata entry listing the dense heads whose weights were trained: comma separated in a
#: safetensors file (e.g. ``'segmentation'`` after ``train seg`` from scratch,
#: ``'depth,segmentation'`` after ``train depth --init <seg weights>``), a list in ONNX metadata.
TRAINED_HEADS_KEY = 'trained_heads'
#: Names of the dense heads in :data:`TRAINED_HEADS_KEY` (``DenseModel.depth_head`` and
#: ``DenseModel.segmentation_head``).
HEAD_NAMES = ('depth', 'segmentation')


def parse_trained_heads(value: Any, source: Any) -> Optional[Tuple[str, ...]]:
    """Return the sorted head names of a :data:`TRAINED_HEADS_KEY` entry (None: no entry).

    Args:
        value: the entry: a comma-separated string, a list of names, or None.
        source: the file it comes from, for the error message.

    Raises:
        ValueError: an entry that is neither, or names an unknown head.
    """
    if value is None:
        return None
    if isinstance(value, str):
        names = value.split(',')
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        names = list(value)
    else:
        raise ValueError(f'{source}: metadata {TRAINED_HEADS_KEY}={value!r} is not a list of '
                         'head names')
    heads = tuple(sorted({h.strip() for h in names if h.strip()}))
    unknown = [h for h in heads if h not in HEAD_NAMES]
    if unknown:
        raise ValueError(f'{source}: metadata {TRAINED_HEADS_KEY}={value!r} names unknown heads '
                         f'{unknown} (known: {", ".join(HEAD_NAMES)})')
    return heads
