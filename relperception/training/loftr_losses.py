# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""LoFTR training losses: focal loss on the coarse confidence matrix and std-weighted fine L2.

Following the LoFTR paper (Sun et al., CVPR 2021):

* coarse: focal loss (``alpha``, ``gamma``) of the dual-softmax confidence matrix against the
  0/1 ground-truth matrix of mutual-nearest coarse cells. With ``sparse=True`` only the
  ground-truth matches are supervised (the softmax normalisation pushes the rest down), as the
  reference configuration for dual softmax; with ``sparse=False`` every non-match is also
  penalised with ``neg_weight``.
* unmatched cells (negatives, :func:`unmatched_focal_loss`): dual softmax has no dustbin, so
  nothing in the positive term stops a cell without a true correspondence (out of view,
  occluded, or every cell of a pair of unrelated images) from reaching a high confidence with
  some cell of the other image, and the matcher keeps every mutual best cell above the
  threshold. For each such cell (row of image 0 or column of image 1) the focal loss of the
  negative class is applied to its *largest* confidence, ``-alpha * p^gamma * log(1 - p)`` with
  ``p = max_j conf[i, j]`` (``max_i conf[i, j]`` for image 1), averaged over those cells and
  weighted by ``unmatched_weight`` (LoFTR's 'pseudo negative samples' for dual softmax; with
  Sinkhorn LoFTR supervises the dustbin of the same cells). Supervising the row maximum
  rather than the whole row (as the dense ``sparse=False`` term does) spends the gradient on
  the entry the matcher would output. Cells that have a correspondence but no mutual ground
  truth cell are not supervised either way.
* fine: squared L2 between the predicted sub-window expectation and the ground-truth offset
  (both in window units, [-1, 1]), weighted by the inverse predicted standard deviation
  (normalised to mean 1 and detached, so the std cannot be inflated to lower the loss); only
  pairs whose target lies inside the window (``max(|gt|) < correct_threshold``) count.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional, Tuple

import torch


@dataclasses.dataclass(frozen=True)
class LoFTRLossConfig:
    """Weights of the LoFTR losses.

    Attributes:
        focal_alpha: focal loss alpha.
        focal_gamma: focal loss gamma.
        pos_weight: weight of the positive (ground-truth match) term.
        neg_weight: weight of the negative term (dense supervision only).
        sparse: supervise positives only (see the module docstring).
        coarse_weight: weight of the coarse loss in the total.
        fine_weight: weight of the fine loss in the total.
        correct_threshold: fine targets with ``max(|gt|)`` at or above this are ignored.
        unmatched_weight: weight of the unmatched-cell term (0: off, the loss of the homography
            recipe; see the module docstring).
        unmatched_gamma: focal gamma of the unmatched-cell term (None: ``focal_gamma``).
        unmatched_top_fraction: the unmatched-cell term averages over this fraction (0, 1] of
            the unmatched cells of the batch with the largest confidence (hard negatives:
            the cells the matcher would output); 1: all of them.
    """

    focal_alpha: float = 0.25
    focal_gamma: float = 2.0
    pos_weight: float = 1.0
    neg_weight: float = 1.0
    sparse: bool = True
    coarse_weight: float = 1.0
    fine_weight: float = 1.0
    correct_threshold: float = 1.0
    unmatched_weight: float = 0.0
    unmatched_gamma: Optional[float] = None
    unmatched_top_fraction: float = 1.0

    def __post_init__(self):
        """Check the fraction of hard unmatched cells."""
        if not 0.0 < self.unmatched_top_fraction <= 1.0:
            raise ValueError('unmatched_top_fraction must be in (0, 1], got '
                             f'{self.unmatched_top_fraction}')


def coarse_focal_loss(conf: torch.Tensor, conf_gt: torch.Tensor,
                      config: Optional[LoFTRLossConfig] = None,
                      weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Focal loss of a coarse confidence matrix.

    Args:
        conf: (B, L0, L1) predicted match probabilities in [0, 1] (dual softmax).
        conf_gt: (B, L0, L1) ground truth, 1 at matches and 0 elsewhere.
        config: ``LoFTRLossConfig``.
        weight: optional (B, L0, L1) element weights (e.g. 0 for padded cells).

    Returns:
        Scalar loss; 0 (with a gradient path) when there is nothing to supervise.

    Raises:
        ValueError: if the shapes differ.
    """
    cfg = config or LoFTRLossConfig()
    if conf.shape != conf_gt.shape or conf.ndim != 3:
        raise ValueError(f'conf and conf_gt must both be (B, L0, L1), got {tuple(conf.shape)} '
                         f'and {tuple(conf_gt.shape)}')
    conf = conf.clamp(1e-6, 1.0 - 1e-6)
    pos = conf_gt == 1
    total = conf.sum() * 0.0
    if pos.any():
        p = conf[pos]
        loss_pos = -cfg.focal_alpha * torch.pow(1.0 - p, cfg.focal_gamma) * p.log()
        if weight is not None:
            loss_pos = loss_pos * weight[pos]
        total = total + cfg.pos_weight * loss_pos.mean()
    if not cfg.sparse:
        neg = conf_gt == 0
        if neg.any():
            n = conf[neg]
            loss_neg = -cfg.focal_alpha * torch.pow(n, cfg.focal_gamma) * (1.0 - n).log()
            if weight is not None:
                loss_neg = loss_neg * weight[neg]
            total = total + cfg.neg_weight * loss_neg.mean()
    return total


def unmatched_focal_loss(conf: torch.Tensor, unmatched0: torch.Tensor, unmatched1: torch.Tensor,
                         config: Optional[LoFTRLossConfig] = None) -> torch.Tensor:
    """Focal loss that pushes the best confidence of cells without a correspondence to 0.

    Args:
        conf: (B, L0, L1) predicted match probabilities in [0, 1] (dual softmax).
        unmatched0: (B, L0) bool, cells of image 0 without a true correspondence in image 1.
        unmatched1: (B, L1) bool, cells of image 1 without a true correspondence in image 0.
        config: ``LoFTRLossConfig`` (``focal_alpha``, ``unmatched_gamma``).

    Returns:
        Scalar mean of ``-alpha * p^gamma * log(1 - p)`` over the unmatched cells (the
        ``unmatched_top_fraction`` of them with the largest ``p``), ``p`` the cell's largest
        confidence; 0 (with a gradient path) without unmatched cells.

    Raises:
        ValueError: on bad shapes.
    """
    cfg = config or LoFTRLossConfig()
    if conf.ndim != 3 or tuple(unmatched0.shape) != (conf.shape[0], conf.shape[1]) \
            or tuple(unmatched1.shape) != (conf.shape[0], conf.shape[2]):
        raise ValueError(f'conf must be (B, L0, L1) with unmatched0 (B, L0) and unmatched1 '
                         f'(B, L1), got {tuple(conf.shape)}, {tuple(unmatched0.shape)} and '
                         f'{tuple(unmatched1.shape)}')
    unmatched0, unmatched1 = unmatched0.bool(), unmatched1.bool()
    if not (unmatched0.any() or unmatched1.any()):
        return conf.sum() * 0.0
    gamma = cfg.focal_gamma if cfg.unmatched_gamma is None else cfg.unmatched_gamma
    best = torch.cat([conf.amax(2)[unmatched0], conf.amax(1)[unmatched1]])
    if cfg.unmatched_top_fraction < 1.0:
        best = best.topk(max(1, math.ceil(cfg.unmatched_top_fraction * len(best)))).values
    best = best.clamp(1e-6, 1.0 - 1e-6)
    return (-cfg.focal_alpha * torch.pow(best, gamma) * (1.0 - best).log()).mean()


def fine_l2_std_loss(expectation: torch.Tensor, target: torch.Tensor,
                     config: Optional[LoFTRLossConfig] = None) -> torch.Tensor:
    """Std-weighted L2 loss of the fine expectation.

    Args:
        expectation: (K, 3) predicted (dx, dy, std), dx/dy in window units.
        target: (K, 2) ground-truth (dx, dy) in window units.
        config: ``LoFTRLossConfig``.

    Returns:
        Scalar loss; 0 (with a gradient path) when no target lies inside the window.

    Raises:
        ValueError: on bad shapes.
    """
    cfg = config or LoFTRLossConfig()
    if expectation.ndim != 2 or expectation.shape[1] != 3 or target.shape != (len(expectation), 2):
        raise ValueError(f'expectation must be (K, 3) and target (K, 2), got '
                         f'{tuple(expectation.shape)} and {tuple(target.shape)}')
    correct = target.abs().amax(dim=1) < cfg.correct_threshold
    if not correct.any():
        return expectation.sum() * 0.0
    inverse_std = 1.0 / expectation[correct, 2].clamp(min=1e-10)
    weight = (inverse_std / inverse_std.mean()).detach()
    l2 = ((target[correct] - expectation[correct, :2]) ** 2).sum(-1)
    return (l2 * weight).mean()


def loftr_loss(conf: torch.Tensor, conf_gt: torch.Tensor, expectation: Optional[torch.Tensor],
               target: Optional[torch.Tensor], config: Optional[LoFTRLossConfig] = None,
               unmatched0: Optional[torch.Tensor] = None,
               unmatched1: Optional[torch.Tensor] = None
               ) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Return the total LoFTR loss: coarse focal, unmatched-cell and fine terms.

    ``loss = coarse_weight * (coarse + unmatched_weight * unmatched) + fine_weight * fine``.

    Args:
        conf: (B, L0, L1) coarse confidence matrix.
        conf_gt: (B, L0, L1) coarse ground truth.
        expectation: (K, 3) fine expectation with std, or None to skip the fine loss.
        target: (K, 2) fine targets (window units), or None.
        config: ``LoFTRLossConfig``.
        unmatched0: optional (B, L0) bool, cells of image 0 without a correspondence
            (:func:`unmatched_focal_loss`; used when ``config.unmatched_weight`` > 0).
        unmatched1: optional (B, L1) bool, the same for image 1.

    Returns:
        (loss, logs) with logs ``loss_c``, ``loss_f`` and, with the unmatched term, ``loss_u``
        (floats).
    """
    cfg = config or LoFTRLossConfig()
    loss_c = coarse_focal_loss(conf, conf_gt, cfg)
    loss = cfg.coarse_weight * loss_c
    logs = {'loss_c': float(loss_c.detach())}
    if cfg.unmatched_weight > 0 and unmatched0 is not None and unmatched1 is not None:
        loss_u = unmatched_focal_loss(conf, unmatched0, unmatched1, cfg)
        loss = loss + cfg.coarse_weight * cfg.unmatched_weight * loss_u
        logs['loss_u'] = float(loss_u.detach())
    if expectation is not None and target is not None and len(expectation):
        loss_f = fine_l2_std_loss(expectation, target, cfg)
        loss = loss + cfg.fine_weight * loss_f
        logs['loss_f'] = float(loss_f.detach())
    return loss, logs
