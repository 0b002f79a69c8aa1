# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Colour maps for depth and label images, and alpha blending for overlays.

Every function returns (H, W, 3) uint8 RGB, ready for an ``rgb8`` image message.
"""

from __future__ import annotations

import logging

import cv2
import numpy as np

logger = logging.getLogger(__name__)

#: The 11 classes of the SegNet CamVid benchmark, in label order 0..10.
CAMVID_CLASS_NAMES = ('Sky', 'Building', 'Pole', 'Road', 'Pavement', 'Tree', 'SignSymbol',
                      'Fence', 'Car', 'Pedestrian', 'Bicyclist')

_CAMVID_RGB = ((128, 128, 128), (128, 0, 0), (192, 192, 128), (128, 64, 128), (60, 40, 222),
               (128, 128, 0), (192, 128, 128), (64, 64, 128), (64, 0, 128), (64, 64, 0),
               (0, 128, 192))


def _build_palette() -> np.ndarray:
    # PASCAL VOC bit-interleaved colours for the ids after the CamVid ones; 255 (ignore) black.
    ids = np.arange(256)
    palette = np.zeros((256, 3), dtype=np.int64)
    for shift in range(8):
        for channel in range(3):
            bit = (ids >> (3 * shift + channel)) & 1
            palette[:, channel] |= bit << (7 - shift)
    palette[:len(_CAMVID_RGB)] = _CAMVID_RGB
    palette[255] = 0
    palette = palette.astype(np.uint8)
    palette.flags.writeable = False
    return palette


#: (256, 3) uint8 RGB palette: CamVid colours for ids 0..10, distinct colours after, 255 black.
CAMVID_PALETTE: np.ndarray = _build_palette()

_PERCENTILE_SAMPLES = 65536


def colorize_depth(depth_m: np.ndarray, min_m: float | None = None,
                   max_m: float | None = None, percentiles=(2.0, 98.0)) -> np.ndarray:
    """Colour a depth image with the turbo colour map (near blue, far red), NaN black.

    Args:
        depth_m: (H, W) float depth in metres; NaN/inf (and values <= 0) are invalid.
        min_m: depth shown as the first turbo colour; default: ``percentiles[0]`` of the valid
            depths (estimated from at most 65536 evenly spaced valid pixels).
        max_m: depth shown as the last turbo colour; default: ``percentiles[1]`` of the valid
            depths. Depths outside [min_m, max_m] are clipped.
        percentiles: (low, high) percentiles in [0, 100] for the automatic range.

    Returns:
        (H, W, 3) uint8 RGB; invalid pixels are (0, 0, 0). An image without valid depth is all
        black.

    Raises:
        ValueError: not a 2-D real array, or ``max_m <= min_m``.
    """
    depth = np.asarray(depth_m)
    if depth.ndim != 2 or depth.dtype.kind not in 'fiu':
        raise ValueError(f'depth_m must be a 2-D real array, got {depth.dtype} of shape '
                         f'{depth.shape}')
    depth = depth.astype(np.float32, copy=False)
    with np.errstate(invalid='ignore'):
        valid = np.isfinite(depth) & (depth > 0)
    if not valid.any():
        return np.zeros(depth.shape + (3,), dtype=np.uint8)
    if min_m is None or max_m is None:
        values = depth[valid]
        if values.size > _PERCENTILE_SAMPLES:  # evenly spaced subsample: fast, deterministic
            values = values[::values.size // _PERCENTILE_SAMPLES]
        low, high = np.percentile(values, percentiles)
        min_m = float(low) if min_m is None else float(min_m)
        max_m = float(high) if max_m is None else float(max_m)
        if max_m <= min_m:  # constant depth: any positive span gives one colour
            max_m = min_m + 1e-6
    if not max_m > min_m:
        raise ValueError(f'max_m must be greater than min_m, got {min_m} and {max_m}')
    scaled = (depth - np.float32(min_m)) * np.float32(255.0 / (max_m - min_m))
    index = np.clip(np.nan_to_num(scaled, nan=0.0, posinf=255.0, neginf=0.0), 0, 255)
    bgr = cv2.applyColorMap(index.astype(np.uint8), cv2.COLORMAP_TURBO)
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    rgb[~valid] = 0
    return rgb


def colorize_labels(labels: np.ndarray, palette: np.ndarray | None = None) -> np.ndarray:
    """Colour a label image with a palette.

    Args:
        labels: (H, W) integer class ids (e.g. uint8 ``mono8`` labels), 0 <= id < len(palette).
        palette: (N, 3) uint8 RGB colours; default :data:`CAMVID_PALETTE` (256 entries).

    Returns:
        (H, W, 3) uint8 RGB.

    Raises:
        ValueError: labels not 2-D integers, ids outside the palette, or a bad palette.
    """
    labels = np.asarray(labels)
    if labels.ndim != 2 or labels.dtype.kind not in 'iub':
        raise ValueError(f'labels must be a 2-D integer array, got {labels.dtype} of shape '
                         f'{labels.shape}')
    palette = CAMVID_PALETTE if palette is None else np.asarray(palette)
    if palette.ndim != 2 or palette.shape[1] != 3 or palette.shape[0] == 0 \
            or palette.dtype != np.uint8:
        raise ValueError(f'palette must be an (N, 3) uint8 array, got {palette.dtype} of shape '
                         f'{palette.shape}')
    if labels.size and (labels.min() < 0 or labels.max() >= palette.shape[0]):
        raise ValueError(f'label ids must be in [0, {palette.shape[0]}), got '
                         f'[{labels.min()}, {labels.max()}]')
    return palette[labels]


def overlay(rgb: np.ndarray, color: np.ndarray, alpha: float = 0.5,
            mask: np.ndarray | None = None) -> np.ndarray:
    """Blend ``color`` over ``rgb``: ``(1 - alpha) * rgb + alpha * color``, rounded.

    Args:
        rgb: (H, W, 3) uint8 image.
        color: (H, W, 3) uint8 image of the same shape (e.g. from :func:`colorize_labels`).
        alpha: weight of ``color`` in [0, 1].
        mask: optional (H, W) bool; where False the output keeps ``rgb`` unchanged.

    Returns:
        (H, W, 3) uint8 new image.

    Raises:
        ValueError: shape or dtype mismatch, ``alpha`` outside [0, 1], bad mask shape.
    """
    rgb = np.asarray(rgb)
    color = np.asarray(color)
    if rgb.dtype != np.uint8 or color.dtype != np.uint8:
        raise ValueError(f'rgb and color must be uint8, got {rgb.dtype} and {color.dtype}')
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape != color.shape:
        raise ValueError(f'rgb and color must both be (H, W, 3), got {rgb.shape} and '
                         f'{color.shape}')
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f'alpha must be in [0, 1], got {alpha}')
    blended = cv2.addWeighted(rgb, 1.0 - float(alpha), color, float(alpha), 0.0)
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != rgb.shape[:2]:
            raise ValueError(f'mask must have shape {rgb.shape[:2]}, got {mask.shape}')
        blended[~mask] = rgb[~mask]
    return blended
