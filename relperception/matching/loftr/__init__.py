# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""LoFTR-style detector-free matcher, weight-compatible with ``kornia.feature.LoFTR``.

``model.LoFTR`` (fixed-shape, exportable network), ``presets`` (``loftr``, ``loftr_lite``),
``contract`` (input / output names of the exported graphs) and ``matcher.LoFTRMatcher`` (the
``Matcher`` protocol on grey uint8 images).

``LoFTR`` and ``LoFTROnnxWrapper`` are imported from ``model`` on first use, so that importing
this package (and running an exported model through ``matcher``) does not import torch.
"""

import importlib
from typing import Any

from relperception.matching.loftr.contract import ONNX_INPUT_NAMES, ONNX_OUTPUT_NAMES
from relperception.matching.loftr.presets import available_presets, preset_conf, PRESETS

#: Names served from ``relperception.matching.loftr.model`` on first access (they need torch).
TORCH_NAMES = ('LoFTR', 'LoFTROnnxWrapper')


def __getattr__(name: str) -> Any:
    """Return the torch model classes on first access (PEP 562), importing torch then."""
    if name in TORCH_NAMES:
        return getattr(importlib.import_module('relperception.matching.loftr.model'), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__all__ = ['LoFTR', 'LoFTROnnxWrapper', 'ONNX_INPUT_NAMES', 'ONNX_OUTPUT_NAMES', 'PRESETS',
           'available_presets', 'preset_conf']
