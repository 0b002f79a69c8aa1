# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Losses of the dense heads: cross entropy for labels, SILog + L1 for metric depth.

Scale-invariant log loss (Eigen et al. 2014, with the variance focus of BTS / Depth Anything
metric fine-tuning), per image over its valid pixels ``i`` with ``g_i = ln d_i - ln t_i``::

    silog = sqrt(mean(g^2) - lambda * mean(g)^2)

``lambda = 1`` is fully scale invariant, ``lambda = 0`` an RMS log error; the default 0.85 keeps
some absolute-scale supervision. The L1 term ``mean(|d - t|)`` (metres) on the same pixels adds
metric supervision. Images without a valid pixel contribute nothing.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

IGNORE_INDEX = 255


def segmentation_loss(logits: torch.Tensor, labels: torch.Tensor,
                      ignore_index: int = IGNORE_INDEX,
                      class_weights: Optional[torch.Tensor] = None,
                      label_smoothing: float = 0.0) -> torch.Tensor:
    """Return the mean cross entropy over the non-ignored pixels.

    Args:
        logits: (B, C, H, W) float class scores.
        labels: (B, H, W) integer class ids in ``[0, C)`` or ``ignore_index``.
        ignore_index: label that is not scored.
        class_weights: optional (C,) float per-class weights.
        label_smoothing: torch's label smoothing in [0, 1).

    Returns:
        scalar tensor (0 with gradient when every pixel is ignored).

    Raises:
        ValueError: for mismatched shapes.
    """
    if logits.ndim != 4 or labels.shape != (logits.shape[0],) + logits.shape[2:]:
        raise ValueError(f'logits (B, C, H, W) and labels (B, H, W) expected, got '
                         f'{tuple(logits.shape)} and {tuple(labels.shape)}')
    labels = labels.long()
    if not (labels != ignore_index).any():
        return logits.sum() * 0.0
    weight = None if class_weights is None else class_weights.to(logits)
    return F.cross_entropy(logits, labels, weight=weight, ignore_index=ignore_index,
                           label_smoothing=label_smoothing)


def median_frequency_weights(counts: Sequence[float], max_weight: float = 10.0) -> torch.Tensor:
    """Return median-frequency class weights (Eigen & Fergus 2015, as SegNet/ENet use on CamVid).

    Args:
        counts: per-class pixel counts (classes with 0 pixels get weight 0).
        max_weight: upper clip of the weights.

    Returns:
        (C,) float32 tensor ``median(freq) / freq_c``.
    """
    counts = torch.as_tensor(counts, dtype=torch.float64)
    if counts.ndim != 1 or (counts < 0).any() or counts.sum() <= 0:
        raise ValueError('counts must be a 1-D non-negative vector with a positive sum')
    freq = counts / counts.sum()
    present = freq > 0
    weights = torch.zeros_like(freq)
    weights[present] = freq[present].median() / freq[present]
    return weights.clamp(max=max_weight).float()


def valid_depth(target: torch.Tensor, min_depth: float = 1e-3,
                max_depth: float = float('inf')) -> torch.Tensor:
    """Return the bool mask of finite ground truth inside ``(min_depth, max_depth)``."""
    return torch.isfinite(target) & (target > min_depth) & (target < max_depth)


def silog_loss(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor,
               variance_focus: float = 0.85, eps: float = 1e-6) -> torch.Tensor:
    """Return the scale-invariant log loss averaged over images (see the module docstring).

    Args:
        pred: (B, 1, H, W) predicted depth, metres (clamped to >= ``eps`` before the log).
        target: (B, 1, H, W) ground-truth depth, metres (invalid pixels may hold anything).
        valid: (B, 1, H, W) bool mask of the pixels to score.
        variance_focus: ``lambda`` in [0, 1].
        eps: small positive number.

    Returns:
        scalar tensor.
    """
    _check_depth(pred, target, valid)
    if not 0 <= variance_focus <= 1:
        raise ValueError(f'variance_focus must be in [0, 1], got {variance_focus}')
    safe_target = torch.where(valid, target, torch.ones_like(target))
    g = torch.log(pred.clamp(min=eps)) - torch.log(safe_target.clamp(min=eps))
    g = torch.where(valid, g, torch.zeros_like(g))
    n = valid.flatten(1).sum(1)
    has = n > 0
    if not has.any():
        return pred.sum() * 0.0
    n = n.clamp(min=1).to(pred.dtype)
    mean = g.flatten(1).sum(1) / n
    mean_sq = (g * g).flatten(1).sum(1) / n
    per_image = torch.sqrt((mean_sq - variance_focus * mean * mean).clamp(min=0) + eps)
    return per_image[has].mean()


def l1_depth_loss(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Return the mean absolute depth error (metres) over the valid pixels of the batch."""
    _check_depth(pred, target, valid)
    if not valid.any():
        return pred.sum() * 0.0
    return (pred[valid] - target[valid]).abs().mean()


def depth_loss(pred: torch.Tensor, target: torch.Tensor, valid: Optional[torch.Tensor] = None,
               silog_weight: float = 1.0, l1_weight: float = 0.1,
               variance_focus: float = 0.85) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Return ``silog_weight * silog + l1_weight * l1`` and the parts as floats.

    Args:
        pred: (B, 1, H, W) predicted metric depth.
        target: (B, 1, H, W) ground-truth depth; NaN / <= 0 are invalid.
        valid: optional (B, 1, H, W) bool mask; default :func:`valid_depth` of ``target``.
        silog_weight: weight of :func:`silog_loss`.
        l1_weight: weight of :func:`l1_depth_loss`.
        variance_focus: ``lambda`` of the SILog loss.

    Returns:
        (loss, {'silog': float, 'l1': float}).
    """
    if valid is None:
        valid = valid_depth(target)
    silog = silog_loss(pred, target, valid, variance_focus)
    l1 = l1_depth_loss(pred, target, valid)
    loss = silog_weight * silog + l1_weight * l1
    return loss, {'silog': float(silog.detach()), 'l1': float(l1.detach())}


def _check_depth(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> None:
    if pred.ndim != 4 or pred.shape[1] != 1 or pred.shape != target.shape \
            or valid.shape != pred.shape or valid.dtype != torch.bool:
        raise ValueError(f'pred, target (B, 1, H, W) and a bool valid mask of the same shape '
                         f'expected, got {tuple(pred.shape)}, {tuple(target.shape)}, '
                         f'{tuple(valid.shape)} {valid.dtype}')
