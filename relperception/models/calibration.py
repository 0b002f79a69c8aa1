# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""INT8 calibration inputs of a dense model export, prepared as the dense pipeline prepares them.

:func:`dense_preprocessor` turns a calibration image into the export's input dict through
:func:`relperception.models.preprocess.prepare_image_array`, with the preprocessing stored in
the export's metadata (the preset's network input size, normalisation); the samples and the
quantiser are :mod:`relperception.runtime.quantize`'s. No torch.
"""

from __future__ import annotations

from typing import Callable, Dict

import numpy as np
from relperception.models.preprocess import INPUT_NAME, prepare_image_array


def dense_preprocessor(float_path) -> Callable[[np.ndarray], Dict[str, np.ndarray]]:
    """Return ``rgb -> {'image': (1, 3, h, w) float32}`` as the dense pipeline prepares images.

    Args:
        float_path: a dense ``relperception export`` (its metadata holds the preprocessing:
            network input size, resize rule, mean and std).

    Returns:
        A function of an (H, W, 3) uint8 RGB image.

    Raises:
        ValueError: the file is not a dense export.
    """
    from relperception.runtime.onnx_metadata import read_metadata

    meta = read_metadata(float_path)
    if meta.get('kind') != 'dense' or not isinstance(meta.get('input'), dict):
        raise ValueError(f'{float_path} is not a dense model export (metadata kind '
                         f'{meta.get("kind")!r})')
    model_conf = {'input': meta['input']}

    def prepare(rgb: np.ndarray) -> Dict[str, np.ndarray]:
        return {INPUT_NAME: prepare_image_array(rgb, model_conf)}

    return prepare
