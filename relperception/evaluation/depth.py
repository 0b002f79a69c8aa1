# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Monocular depth metrics (Eigen et al. 2014) and alignment of relative predictions.

Definitions, over the valid pixels ``i = 1..n`` of one image, ``d_i`` predicted and ``g_i``
ground-truth depth in metres:

===============  ============================================================
``abs_rel``      mean(|d - g| / g)
``sq_rel``       mean((d - g)^2 / g)
``rmse``         sqrt(mean((d - g)^2)), metres
``rmse_log``     sqrt(mean((ln d - ln g)^2))
``delta1``       fraction of pixels with max(d / g, g / d) < 1.25
``delta2``       ... < 1.25^2
``delta3``       ... < 1.25^3
===============  ============================================================

Valid pixels: ground truth finite and inside ``(min_depth, max_depth)``, the prediction finite
and > 0, and the optional ``valid`` mask true. As in the Eigen / Monodepth2 evaluation the
prediction is clipped to ``[min_depth, max_depth]`` after the optional median scaling.

Relative predictions:

* relative *depth* (defined up to scale): ``median_scale=True`` multiplies the prediction by
  median(g) / median(d) over the valid pixels (Monodepth2's monocular protocol);
* relative *inverse depth* (disparity, defined up to scale and shift, as MiDaS / Depth Anything
  predict): :func:`align_inverse_depth` fits ``s * pred + t`` to ``1 / g`` by least squares in
  inverse-depth space and returns metric depth ``1 / (s * pred + t)`` (disparity capped at
  ``1 / max_depth``), which is then scored with :func:`depth_metrics`.

Several frames: :class:`DepthMetricsAccumulator` averages the per-image metrics over images
(the standard of the KITTI Eigen split, NYUv2 and the MiDaS / Depth Anything evaluations);
``average='pixel'`` pools all valid pixels of all images instead.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import numpy as np

#: Metric keys of :func:`depth_metrics`, in the usual table order.
DEPTH_METRIC_KEYS = ('abs_rel', 'sq_rel', 'rmse', 'rmse_log', 'delta1', 'delta2', 'delta3')

#: Default valid ground-truth range in metres (KITTI Eigen crop convention: 1e-3 .. 80 m).
DEFAULT_MIN_DEPTH = 1e-3
DEFAULT_MAX_DEPTH = 80.0


def _check_depth_pair(pred, gt, valid, name_pred: str = 'pred') -> Tuple[np.ndarray, ...]:
    pred = np.asarray(pred)
    gt = np.asarray(gt)
    for name, array in ((name_pred, pred), ('gt', gt)):
        if array.ndim != 2 or array.dtype.kind not in 'fiu':
            raise ValueError(f'{name} must be a 2-D real (H, W) array, got {array.dtype} of '
                             f'shape {array.shape}')
    if pred.shape != gt.shape:
        raise ValueError(f'{name_pred} {pred.shape} and gt {gt.shape} differ in shape '
                         '(resize the prediction to the ground truth first)')
    if valid is not None:
        valid = np.asarray(valid)
        if valid.shape != gt.shape or valid.dtype != bool:
            raise ValueError(f'valid must be a boolean array of shape {gt.shape}, got '
                             f'{valid.dtype} of shape {valid.shape}')
    return pred.astype(np.float64), gt.astype(np.float64), valid


def _check_range(min_depth: float, max_depth: float) -> None:
    if not (math.isfinite(min_depth) and math.isfinite(max_depth)
            and 0 <= min_depth < max_depth):
        raise ValueError(f'need 0 <= min_depth < max_depth (finite), got {min_depth} and '
                         f'{max_depth}')


def valid_depth_mask(pred, gt, valid: Optional[np.ndarray] = None,
                     min_depth: float = DEFAULT_MIN_DEPTH,
                     max_depth: float = DEFAULT_MAX_DEPTH) -> np.ndarray:
    """Return the (H, W) bool mask of the pixels that :func:`depth_metrics` scores.

    Args:
        pred: (H, W) predicted depth (or inverse depth; only finiteness and > 0 are checked).
        gt: (H, W) ground-truth depth in metres; NaN, inf, 0 or negative are invalid.
        valid: optional (H, W) bool mask of pixels to consider.
        min_depth: ground truth must be > ``min_depth`` (metres).
        max_depth: ground truth must be < ``max_depth`` (metres).

    Raises:
        ValueError: shapes differ, non-2-D or non-real arrays, or a bad depth range.
    """
    pred, gt, valid = _check_depth_pair(pred, gt, valid)
    _check_range(min_depth, max_depth)
    with np.errstate(invalid='ignore'):
        mask = (np.isfinite(gt) & (gt > min_depth) & (gt < max_depth)
                & np.isfinite(pred) & (pred > 0))
    if valid is not None:
        mask &= valid
    return mask


def _errors(pred: np.ndarray, gt: np.ndarray) -> Dict[str, np.ndarray]:
    """Per-pixel error terms of valid 1-D ``pred``, ``gt`` (the summands of the metrics)."""
    diff = pred - gt
    ratio = np.maximum(pred / gt, gt / pred)
    return {
        'abs_rel': np.abs(diff) / gt,
        'sq_rel': diff ** 2 / gt,
        'sq_err': diff ** 2,
        'sq_log': (np.log(pred) - np.log(gt)) ** 2,
        'delta1': (ratio < 1.25).astype(np.float64),
        'delta2': (ratio < 1.25 ** 2).astype(np.float64),
        'delta3': (ratio < 1.25 ** 3).astype(np.float64),
    }


def _image_metrics(terms: Dict[str, np.ndarray]) -> Dict[str, float]:
    """Reduce the per-pixel terms of one image to its metrics."""
    return {
        'abs_rel': float(np.mean(terms['abs_rel'])),
        'sq_rel': float(np.mean(terms['sq_rel'])),
        'rmse': float(np.sqrt(np.mean(terms['sq_err']))),
        'rmse_log': float(np.sqrt(np.mean(terms['sq_log']))),
        'delta1': float(np.mean(terms['delta1'])),
        'delta2': float(np.mean(terms['delta2'])),
        'delta3': float(np.mean(terms['delta3'])),
    }


def _prepare(pred, gt, valid, min_depth, max_depth, median_scale):
    """Return valid 1-D (pred scaled and clipped, gt) and the scale used."""
    mask = valid_depth_mask(pred, gt, valid, min_depth, max_depth)
    pred = np.asarray(pred, dtype=np.float64)[mask]
    gt = np.asarray(gt, dtype=np.float64)[mask]
    scale = 1.0
    if median_scale and len(gt):
        scale = float(np.median(gt) / np.median(pred))
        pred = pred * scale
    return np.clip(pred, max(min_depth, 1e-12), max_depth), gt, scale


def depth_metrics(pred, gt, valid: Optional[np.ndarray] = None,
                  min_depth: float = DEFAULT_MIN_DEPTH, max_depth: float = DEFAULT_MAX_DEPTH,
                  median_scale: bool = False) -> Dict[str, float]:
    """Return the Eigen depth metrics of one image (see the module docstring).

    Args:
        pred: (H, W) float predicted depth in metres (or up to scale with ``median_scale``).
            Non-finite or <= 0 pixels are invalid.
        gt: (H, W) float ground-truth depth in metres; NaN / inf / <= 0 are invalid (e.g. the
            zeros of a Kinect or LiDAR depth map).
        valid: optional (H, W) bool mask, e.g. the Garg / Eigen crop.
        min_depth: ground truth must be > ``min_depth`` (metres); the prediction is clipped to
            it.
        max_depth: ground truth must be < ``max_depth`` (metres); the prediction is clipped to
            it.
        median_scale: multiply the prediction by median(gt) / median(pred) first (relative
            depth predictions).

    Returns:
        dict with the :data:`DEPTH_METRIC_KEYS` (float; NaN when there is no valid pixel),
        ``num_valid`` (int) and ``scale`` (the median scale factor, 1.0 without scaling).

    Raises:
        ValueError: shapes differ, non-2-D or non-real arrays, bad ``valid`` or depth range.
    """
    pred_v, gt_v, scale = _prepare(pred, gt, valid, min_depth, max_depth, median_scale)
    result: Dict[str, float] = dict.fromkeys(DEPTH_METRIC_KEYS, float('nan'))
    result['num_valid'] = int(len(gt_v))
    result['scale'] = scale if len(gt_v) else float('nan')
    if len(gt_v) == 0:
        return result
    result.update(_image_metrics(_errors(pred_v, gt_v)))
    return result


def align_inverse_depth(pred_inv, gt, valid: Optional[np.ndarray] = None,
                        min_depth: float = DEFAULT_MIN_DEPTH,
                        max_depth: float = DEFAULT_MAX_DEPTH
                        ) -> Tuple[np.ndarray, float, float]:
    """Align a relative inverse-depth prediction to metric ground truth (scale and shift).

    Least squares in inverse-depth space, as the MiDaS and Depth Anything evaluations do:
    ``(s, t) = argmin sum_i (s * pred_inv_i + t - 1 / gt_i)^2`` over the valid pixels, then
    ``depth = 1 / max(s * pred_inv + t, 1 / max_depth)``.

    Args:
        pred_inv: (H, W) float relative inverse depth (disparity-like, larger = nearer; any
            scale and shift). Non-finite pixels are invalid; unlike depth, values <= 0 are
            allowed (a shift is fitted).
        gt: (H, W) float ground-truth depth in metres; NaN / inf / <= 0 are invalid.
        valid: optional (H, W) bool mask of pixels to fit.
        min_depth: ground truth must be > ``min_depth`` to be fitted (metres).
        max_depth: ground truth must be < ``max_depth`` to be fitted; aligned inverse depth is
            capped below at ``1 / max_depth``.

    Returns:
        ``(depth, scale, shift)``: (H, W) float32 aligned depth in metres (NaN where
        ``pred_inv`` is not finite), and the fitted ``s`` and ``t``.

    Raises:
        ValueError: bad inputs, or fewer than 2 valid pixels / a constant prediction on them
            (the fit is undetermined).
    """
    pred_inv, gt_arr, valid = _check_depth_pair(pred_inv, gt, valid, 'pred_inv')
    _check_range(min_depth, max_depth)
    with np.errstate(invalid='ignore'):
        mask = (np.isfinite(gt_arr) & (gt_arr > min_depth) & (gt_arr < max_depth)
                & np.isfinite(pred_inv))
    if valid is not None:
        mask &= valid
    x = pred_inv[mask]
    y = 1.0 / gt_arr[mask]
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError(f'cannot fit scale and shift: {len(x)} valid pixels'
                         + (' with a constant prediction' if len(x) >= 2 else ''))
    A = np.stack([x, np.ones_like(x)], axis=1)
    (scale, shift), *_ = np.linalg.lstsq(A, y, rcond=None)
    aligned = scale * pred_inv + shift
    with np.errstate(invalid='ignore', divide='ignore'):
        depth = 1.0 / np.maximum(aligned, 1.0 / max_depth)
    depth[~np.isfinite(pred_inv)] = np.nan
    return depth.astype(np.float32), float(scale), float(shift)


class DepthMetricsAccumulator:
    """Accumulate :func:`depth_metrics` over many frames.

    ``average='image'`` (default, the standard): every metric is computed per image and the
    per-image values are averaged over the images with at least one valid pixel.
    ``average='pixel'``: all valid pixels of all images are pooled (RMSE over every pixel).
    Images without a valid pixel are counted in ``num_skipped`` and do not enter the average.

    Args:
        min_depth: see :func:`depth_metrics`.
        max_depth: see :func:`depth_metrics`.
        median_scale: see :func:`depth_metrics` (the median scale is per image).
        average: ``'image'`` or ``'pixel'``.
    """

    def __init__(self, min_depth: float = DEFAULT_MIN_DEPTH,
                 max_depth: float = DEFAULT_MAX_DEPTH, median_scale: bool = False,
                 average: str = 'image'):
        _check_range(min_depth, max_depth)
        if average not in ('image', 'pixel'):
            raise ValueError(f"average must be 'image' or 'pixel', got {average!r}")
        self.min_depth = float(min_depth)
        self.max_depth = float(max_depth)
        self.median_scale = bool(median_scale)
        self.average = average
        self.reset()

    def reset(self) -> None:
        """Forget every accumulated frame."""
        self._image_sums = dict.fromkeys(DEPTH_METRIC_KEYS, 0.0)
        self._pixel_sums = dict.fromkeys(('abs_rel', 'sq_rel', 'sq_err', 'sq_log', 'delta1',
                                          'delta2', 'delta3'), 0.0)
        self.num_images = 0
        self.num_skipped = 0
        self.num_pixels = 0

    def update(self, pred, gt, valid: Optional[np.ndarray] = None) -> Dict[str, float]:
        """Add one frame; return its own metrics (see :func:`depth_metrics` for the arguments).

        Raises:
            ValueError: as :func:`depth_metrics`.
        """
        pred_v, gt_v, scale = _prepare(pred, gt, valid, self.min_depth, self.max_depth,
                                       self.median_scale)
        if len(gt_v) == 0:
            self.num_skipped += 1
            result = dict.fromkeys(DEPTH_METRIC_KEYS, float('nan'))
            result.update(num_valid=0, scale=float('nan'))
            return result
        terms = _errors(pred_v, gt_v)
        for key in self._pixel_sums:
            self._pixel_sums[key] += float(np.sum(terms[key]))
        result = _image_metrics(terms)
        for key in DEPTH_METRIC_KEYS:
            self._image_sums[key] += result[key]
        self.num_images += 1
        self.num_pixels += len(gt_v)
        result.update(num_valid=int(len(gt_v)), scale=scale)
        return result

    def compute(self) -> Dict[str, float]:
        """Return the averaged metrics plus ``num_images``, ``num_skipped``, ``num_pixels``.

        Metrics are NaN while no image with a valid pixel was added.
        """
        out: Dict[str, float] = dict.fromkeys(DEPTH_METRIC_KEYS, float('nan'))
        if self.num_images:
            if self.average == 'image':
                out.update({k: v / self.num_images for k, v in self._image_sums.items()})
            else:
                s, n = self._pixel_sums, self.num_pixels
                out.update({
                    'abs_rel': s['abs_rel'] / n, 'sq_rel': s['sq_rel'] / n,
                    'rmse': math.sqrt(s['sq_err'] / n), 'rmse_log': math.sqrt(s['sq_log'] / n),
                    'delta1': s['delta1'] / n, 'delta2': s['delta2'] / n,
                    'delta3': s['delta3'] / n,
                })
        out.update(num_images=self.num_images, num_skipped=self.num_skipped,
                   num_pixels=self.num_pixels, average=self.average)
        return out
