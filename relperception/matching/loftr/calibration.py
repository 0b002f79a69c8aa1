# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""INT8 calibration inputs of a LoFTR export, prepared as ``LoFTRMatcher`` prepares them.

Calibration samples are pairs of grey images: an image and the image
``LOFTR_CALIBRATION_GAP`` messages later on the topic. :func:`loftr_preprocessor` turns a pair
into the export's input dict with the matcher's own ``infer`` (grey, resized to the preset's
input size, [0, 1]); the samples and the quantiser are :mod:`relperception.runtime.quantize`'s.
No torch.
"""

from __future__ import annotations

from typing import Callable, Dict, Mapping, Sequence, Tuple

import numpy as np

#: LoFTR calibration pairs: an image and the image this many messages later on the topic.
LOFTR_CALIBRATION_GAP = 1


class _InputRecorder:
    """Stands in for a matcher's backend: keeps the inputs it is given, runs nothing."""

    def __init__(self, output_names: Sequence[str]):
        self.output_names = tuple(output_names)
        self.inputs: Dict[str, np.ndarray] = {}

    def run(self, inputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        self.inputs = {name: np.array(value) for name, value in inputs.items()}
        return {name: np.zeros((1, 1), np.float32) for name in self.output_names}


def loftr_preprocessor(float_path) -> Callable[[Tuple[np.ndarray, np.ndarray]],
                                               Dict[str, np.ndarray]]:
    """Return ``(grey0, grey1) -> {'image0', 'image1'}`` as ``LoFTRMatcher`` prepares them.

    The matcher's own ``infer`` prepares the pair (resize to the preset's input size, [0, 1]);
    its backend is replaced by a recorder that keeps those inputs without running the model.

    Args:
        float_path: a LoFTR ``relperception export`` (single graph).

    Returns:
        A function of two (H, W) uint8 grey images.

    Raises:
        ValueError: the file is not a LoFTR single-graph export.
    """
    from relperception.matching.loftr.contract import ONNX_OUTPUT_NAMES
    from relperception.matching.loftr.matcher import LoFTRMatcher
    from relperception.runtime.onnx_metadata import read_metadata

    meta = read_metadata(float_path)
    if meta.get('kind') != 'loftr':
        raise ValueError(f'{float_path} is not a single-graph LoFTR export (metadata kind '
                         f'{meta.get("kind")!r}; two-stage exports are not quantised)')
    matcher = LoFTRMatcher({'preset': meta.get('preset'), 'backend': 'onnxruntime',
                            'onnx_path': str(float_path)})
    recorder = _InputRecorder(ONNX_OUTPUT_NAMES)
    matcher.backend = recorder

    def prepare(pair: Tuple[np.ndarray, np.ndarray]) -> Dict[str, np.ndarray]:
        matcher.infer(pair[0], pair[1])
        return dict(recorder.inputs)

    return prepare
