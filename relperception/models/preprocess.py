# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Image preprocessing and output resizing for the dense models, driven by a model config.

``prepare_image(rgb, model_conf)``:

1. RGB uint8 (H, W, 3) -> float64 in [0, 1] (cast to float32 at the end).
2. Resize (OpenCV, ``input.interpolation``: area / linear / cubic) to ``network_input_size``:
   * ``resize: fixed`` -> exactly ``input.height`` x ``input.width`` (our shipped models);
   * ``resize: lower_bound`` (Depth Anything V2) -> keep the aspect ratio with the scale that
     makes both sides >= ``input.height`` / ``input.width`` (518), then round each side to the
     nearest multiple of ``input.multiple`` (14), rounding up instead when that falls below the
     minimum; cv2.INTER_CUBIC. Identical to the reference ``Resize(keep_aspect_ratio=True,
     ensure_multiple_of=14, resize_method='lower_bound')`` used by ``infer_image``.
3. Normalise with ``input.mean`` / ``input.std`` (ImageNet) and return (1, 3, h, w) float32.

``resize_output(tensor, (H, W), kind)`` brings network outputs back to the image size:
``depth`` bilinear with align_corners=True (as Depth Anything V2's ``infer_image``), ``logits``
bilinear (align_corners=False), ``labels`` nearest. Relative Depth Anything output is inverse
depth of unknown scale and shift (larger = closer).
"""

from __future__ import annotations

from typing import Any, Mapping, Tuple

import cv2
import numpy as np
import torch
import torch.nn.functional as F

_INTERPOLATION = {'area': cv2.INTER_AREA, 'linear': cv2.INTER_LINEAR, 'cubic': cv2.INTER_CUBIC}


def _constrain(value: float, multiple: int, min_value: int) -> int:
    """Round ``value`` to a multiple of ``multiple``, rounding up if that is below the minimum."""
    out = int(np.round(value / multiple) * multiple)
    if out < min_value:
        out = int(np.ceil(value / multiple) * multiple)
    return out


def network_input_size(image_hw: Tuple[int, int], model_conf: Mapping[str, Any]
                       ) -> Tuple[int, int]:
    """Return the network input size (h, w) for an image of size ``image_hw`` (H, W).

    Args:
        image_hw: original image (height, width) in pixels.
        model_conf: a model config (``load_model_config``); its ``input`` entry is used.

    Returns:
        (h, w), both multiples of ``input.multiple``.

    Raises:
        ValueError: non-positive image size or unknown resize rule.
    """
    height, width = int(image_hw[0]), int(image_hw[1])
    if height < 1 or width < 1:
        raise ValueError(f'image size must be positive, got {height}x{width}')
    inp = model_conf['input']
    target_h, target_w, multiple = int(inp['height']), int(inp['width']), int(inp['multiple'])
    if inp['resize'] == 'fixed':
        return target_h, target_w
    if inp['resize'] != 'lower_bound':
        raise ValueError(f'unknown input.resize {inp["resize"]!r}')
    scale = max(target_h / height, target_w / width)
    return (_constrain(scale * height, multiple, target_h),
            _constrain(scale * width, multiple, target_w))


def prepare_image(rgb: np.ndarray, model_conf: Mapping[str, Any]) -> torch.Tensor:
    """Return the normalised network input for one RGB image.

    Args:
        rgb: (H, W, 3) uint8 RGB image (convert BGR with ``cv2.cvtColor`` first).
        model_conf: a model config (``load_model_config``).

    Returns:
        (1, 3, h, w) float32 CPU tensor, (h, w) = ``network_input_size((H, W), model_conf)``.

    Raises:
        ValueError: ``rgb`` is not an (H, W, 3) uint8 array.
    """
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f'rgb must be an (H, W, 3) uint8 array, got {rgb.shape} {rgb.dtype}')
    inp = model_conf['input']
    h, w = network_input_size(rgb.shape[:2], model_conf)
    image = rgb / 255.0  # float64, as the Depth Anything V2 reference (OpenCV's float32 cubic
    # resize differs by up to 4e-4 after normalisation)
    if (h, w) != rgb.shape[:2]:
        image = cv2.resize(image, (w, h), interpolation=_INTERPOLATION[inp['interpolation']])
    image = (image - np.asarray(inp['mean'])) / np.asarray(inp['std'])
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1), np.float32))[None]


def resize_output(output: torch.Tensor, size: Tuple[int, int], kind: str = 'depth'
                  ) -> torch.Tensor:
    """Resize a network output (B, C, h, w) to the image size (H, W).

    Args:
        output: (B, C, h, w) tensor: depth (C = 1), logits (C = classes) or integer labels.
        size: target (H, W).
        kind: ``depth`` (bilinear, align_corners=True, as Depth Anything V2), ``logits``
            (bilinear, align_corners=False) or ``labels`` (nearest, dtype kept).

    Returns:
        (B, C, H, W) tensor.

    Raises:
        ValueError: wrong rank or unknown kind.
    """
    if output.dim() != 4:
        raise ValueError(f'output must be (B, C, h, w), got {tuple(output.shape)}')
    size = (int(size[0]), int(size[1]))
    if tuple(output.shape[-2:]) == size:
        return output
    if kind == 'depth':
        return F.interpolate(output, size=size, mode='bilinear', align_corners=True)
    if kind == 'logits':
        return F.interpolate(output, size=size, mode='bilinear', align_corners=False)
    if kind == 'labels':
        return F.interpolate(output.float(), size=size, mode='nearest').to(output.dtype)
    raise ValueError(f"kind must be 'depth', 'logits' or 'labels', got {kind!r}")
