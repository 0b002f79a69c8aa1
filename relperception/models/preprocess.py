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

Without torch: :func:`prepare_image_array` is ``prepare_image`` as a numpy array (bit for bit:
``prepare_image`` wraps it), and :func:`resize_output_array` is ``resize_output`` in numpy.
The latter computes what torch's CPU kernel computes (``torch.nn.functional.interpolate``:
the same float32 source coordinates and weights, each two-tap sum as a fused multiply-add):
bit for bit equal to torch builds that fuse them (measured: x86-64 torch 2.13), else within
3 float32 ulp (``labels``: equal). Only ``prepare_image`` and ``resize_output`` import torch.
"""

from __future__ import annotations

from typing import Any, Mapping, Tuple, TYPE_CHECKING

import cv2
import numpy as np

if TYPE_CHECKING:  # returned / taken by prepare_image and resize_output only
    import torch

_INTERPOLATION = {'area': cv2.INTER_AREA, 'linear': cv2.INTER_LINEAR, 'cubic': cv2.INTER_CUBIC}
#: Values of ``resize_output``'s ``kind``.
OUTPUT_KINDS = ('depth', 'logits', 'labels')
#: Name of the network input of the dense models' exports (``prepare_image_array``'s result).
INPUT_NAME = 'image'


def _constrain(value: float, multiple: int, min_value: int) -> int:
    """Round ``value`` to a multiple of ``multiple``, rounding up if that is below the minimum."""
    out = int(np.round(value / multiple) * multiple)
    if out < min_value:
        out = int(np.ceil(value / multiple) * multiple)
    return out


#: Most elongated image (long side / short side) the lower-bound resize takes: it keeps the
#: aspect, so a 1 x 4000 image would become 518 x 2,072,000 pixels.
MAX_ASPECT_RATIO = 16.0


def network_input_size(image_hw: Tuple[int, int], model_conf: Mapping[str, Any]
                       ) -> Tuple[int, int]:
    """Return the network input size (h, w) for an image of size ``image_hw`` (H, W).

    Args:
        image_hw: original image (height, width) in pixels.
        model_conf: a model config (``load_model_config``); its ``input`` entry is used.

    Returns:
        (h, w), both multiples of ``input.multiple``.

    Raises:
        ValueError: non-positive image size, unknown resize rule, or (lower-bound rule) an
            image more elongated than :data:`MAX_ASPECT_RATIO`.
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
    if max(height, width) > MAX_ASPECT_RATIO * min(height, width):
        raise ValueError(f'a {width}x{height} image is more than {MAX_ASPECT_RATIO:g} times '
                         'wider than high (or the reverse); its lower-bound resize would '
                         'be huge: crop it first')
    scale = max(target_h / height, target_w / width)
    return (_constrain(scale * height, multiple, target_h),
            _constrain(scale * width, multiple, target_w))


def prepare_image(rgb: np.ndarray, model_conf: Mapping[str, Any]) -> torch.Tensor:
    """Return the normalised network input for one RGB image as a torch tensor.

    Args:
        rgb: (H, W, 3) uint8 RGB image (convert BGR with ``cv2.cvtColor`` first).
        model_conf: a model config (``load_model_config``).

    Returns:
        (1, 3, h, w) float32 CPU tensor, (h, w) = ``network_input_size((H, W), model_conf)``:
        :func:`prepare_image_array`'s array.

    Raises:
        ValueError: ``rgb`` is not an (H, W, 3) uint8 array.
    """
    import torch

    return torch.from_numpy(prepare_image_array(rgb, model_conf))


def prepare_image_array(rgb: np.ndarray, model_conf: Mapping[str, Any]) -> np.ndarray:
    """Return the normalised network input for one RGB image as a numpy array (no torch).

    Args:
        rgb: (H, W, 3) uint8 RGB image (convert BGR with ``cv2.cvtColor`` first).
        model_conf: a model config (``load_model_config``): resize rule, interpolation,
            ``input.mean`` / ``input.std``.

    Returns:
        (1, 3, h, w) C-contiguous float32, (h, w) = ``network_input_size((H, W), model_conf)``.

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
    return np.ascontiguousarray(image.transpose(2, 0, 1), np.float32)[None]


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
    import torch.nn.functional as F

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


def resize_output_array(output: np.ndarray, size: Tuple[int, int], kind: str = 'depth'
                        ) -> np.ndarray:
    """Resize a network output (B, C, h, w) to the image size (H, W) in numpy (no torch).

    :func:`resize_output` on numpy arrays, with torch's CPU arithmetic (see the module
    docstring for how close): ``depth`` bilinear with align_corners=True, ``logits`` bilinear
    with align_corners=False (sources clamped at 0, no antialiasing), ``labels`` nearest
    (source ``floor(i * h / H)``).

    Args:
        output: (B, C, h, w) array: depth (C = 1) or logits (C = classes), float (computed in
            float32), or integer labels.
        size: target (H, W), both >= 1.
        kind: ``depth``, ``logits`` or ``labels``.

    Returns:
        (B, C, H, W): float32 for ``depth`` / ``logits``, ``output``'s dtype for ``labels``
        (``output`` itself when it has the target size already).

    Raises:
        ValueError: not a 4-D array, an empty input, a non-positive size or an unknown kind.
    """
    output = np.asarray(output)
    if output.ndim != 4:
        raise ValueError(f'output must be (B, C, h, w), got {output.shape}')
    if kind not in OUTPUT_KINDS:
        raise ValueError(f"kind must be 'depth', 'logits' or 'labels', got {kind!r}")
    size = (int(size[0]), int(size[1]))
    if min(size) < 1 or min(output.shape[-2:]) < 1:
        raise ValueError(f'sizes must be positive: {output.shape[-2:]} -> {size}')
    if tuple(output.shape[-2:]) == size:
        return output
    if kind == 'labels':
        rows = _nearest_sources(output.shape[2], size[0])
        cols = _nearest_sources(output.shape[3], size[1])
        return np.ascontiguousarray(output[:, :, rows][..., cols])
    align_corners = kind == 'depth'
    x = output.astype(np.float32, copy=False)
    top, bottom, w_top, w_bottom = _linear_sources(x.shape[2], size[0], align_corners)
    left, right, w_left, w_right = _linear_sources(x.shape[3], size[1], align_corners)
    upper, lower = x[:, :, top], x[:, :, bottom]
    upper = _two_tap(upper[..., left], w_left, upper[..., right], w_right)
    lower = _two_tap(lower[..., left], w_left, lower[..., right], w_right)
    return _two_tap(upper, w_top[:, None], lower, w_bottom[:, None])


def _nearest_sources(in_size: int, out_size: int) -> np.ndarray:
    """Return torch's nearest source index of each output index (float32 scale in/out)."""
    scale = np.float32(in_size) / np.float32(out_size)
    index = np.floor(np.arange(out_size, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(index, in_size - 1)


def _linear_sources(in_size: int, out_size: int, align_corners: bool):
    """Return torch's bilinear taps along one axis: (index0, index1, weight0, weight1).

    The source coordinate is computed in float32 as torch does, ``scale * (i + 0.5) - 0.5`` as
    one fused multiply-add (the float64 product of two float32 numbers is exact).
    """
    if in_size == out_size:  # torch copies: both taps on the same pixel
        index = np.arange(out_size)
        return index, index, np.ones(out_size, np.float32), np.zeros(out_size, np.float32)
    index = np.arange(out_size, dtype=np.float64)
    if align_corners:
        scale = np.float32((in_size - 1) / (out_size - 1)) if out_size > 1 else np.float32(0)
        source = (np.float64(scale) * index).astype(np.float32)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
        source = (np.float64(scale) * (index + 0.5) - 0.5).astype(np.float32)
        source = np.maximum(source, np.float32(0))
    index0 = np.minimum(np.floor(source).astype(np.int64), in_size - 1)
    weight1 = np.clip(source - index0.astype(np.float32), 0, 1).astype(np.float32)
    index1 = np.where(index0 < in_size - 1, index0 + 1, index0)
    return index0, index1, np.float32(1) - weight1, weight1


def _two_tap(a: np.ndarray, weight_a: np.ndarray, b: np.ndarray, weight_b: np.ndarray
             ) -> np.ndarray:
    """Return float32 ``a * weight_a + b * weight_b`` as ``fma(a, weight_a, b * weight_b)``."""
    second = (b * weight_b).astype(np.float32)
    return (a.astype(np.float64) * weight_a + second).astype(np.float32)


def check_network_input(image, size_multiple: int, model: str):
    """Check a network input tensor; return its (H, W) as shape values (traceable).

    Args:
        image: (B, 3, H, W) float tensor.
        size_multiple: H and W must be positive multiples of it.
        model: the model's name, for the message.

    Returns:
        ``image.shape[-2:]``: shape values rather than Python ints, so that a graph traced
        into ONNX keeps its input size dynamic.

    Raises:
        ValueError: another rank or channel count, a non-float tensor, or a size that is not a
            positive multiple of ``size_multiple``.
    """
    if image.dim() != 4 or image.shape[1] != 3:
        raise ValueError(f'image must be (B, 3, H, W) float, got {tuple(image.shape)}')
    if not image.is_floating_point():
        raise ValueError(f'image must be a float tensor, got {image.dtype}')
    size = image.shape[-2:]
    if size[0] % size_multiple or size[1] % size_multiple or size[0] == 0 or size[1] == 0:
        raise ValueError(f'image size {size[0]}x{size[1]} must be a positive multiple of '
                         f'{size_multiple} for {model}')
    return size
