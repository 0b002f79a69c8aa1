# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""LoFTR-style detector-free matcher, weight-compatible with ``kornia.feature.LoFTR``.

``model.LoFTR`` (fixed-shape, exportable network), ``presets`` (``loftr``, ``loftr_lite``) and
``matcher.LoFTRMatcher`` (the ``Matcher`` protocol on grey uint8 images).
"""

from relperception.matching.loftr.model import (LoFTR, LoFTROnnxWrapper, ONNX_INPUT_NAMES,
                                                ONNX_OUTPUT_NAMES)
from relperception.matching.loftr.presets import available_presets, preset_conf, PRESETS

__all__ = ['LoFTR', 'LoFTROnnxWrapper', 'ONNX_INPUT_NAMES', 'ONNX_OUTPUT_NAMES', 'PRESETS',
           'available_presets', 'preset_conf']
