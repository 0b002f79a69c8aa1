# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Coarse matching of LoFTR with fixed-shape outputs.

The confidence matrix between the coarse tokens of both images comes from a dual softmax
(default) or an entropic optimal transport with a dustbin (``'sinkhorn'``). Matches are then
chosen per coarse cell of image 0 without any data-dependent shape: the best cell of image 1,
its confidence and a boolean mask (confidence above the threshold, mutual nearest neighbour,
both cells off the border). The only parameter, ``bin_score`` (sinkhorn only), has kornia's name.
"""

from typing import Tuple

from relperception.matching.loftr.fast_path import fast_path, pointwise_linear
import torch
from torch import nn
import torch.nn.functional as F

MATCH_TYPES = ('dual_softmax', 'sinkhorn')


def log_optimal_transport(scores: torch.Tensor, bin_score: torch.Tensor,
                          iters: int) -> torch.Tensor:
    """Log-domain Sinkhorn with a dustbin row and column (as SuperGlue / LoFTR).

    Args:
        scores: (B, L, S) similarity scores.
        bin_score: scalar dustbin score.
        iters: Sinkhorn iterations.

    Returns:
        (B, L+1, S+1) log assignment matrix; ``exp`` of its first L rows and S columns is the
        soft assignment (rows and columns of the full matrix sum to 1 up to the last iteration).
    """
    zeros = torch.zeros_like(scores)
    bins = F.pad(zeros, (0, 1, 0, 1), value=1.0)  # 1 on the dustbin row and column
    couplings = F.pad(scores, (0, 1, 0, 1)) + bins * bin_score
    rows = torch.ones_like(scores[:, :, 0]).sum(1, keepdim=True)  # (B, 1): L
    cols = torch.ones_like(scores[:, 0, :]).sum(1, keepdim=True)  # (B, 1): S
    norm = -torch.log(rows + cols)
    last_row = F.pad(torch.zeros_like(scores[:, :, 0]), (0, 1), value=1.0)  # (B, L+1)
    last_col = F.pad(torch.zeros_like(scores[:, 0, :]), (0, 1), value=1.0)  # (B, S+1)
    log_mu = norm + last_row * torch.log(cols)
    log_nu = norm + last_col * torch.log(rows)
    u = torch.zeros_like(log_mu)
    v = torch.zeros_like(log_nu)
    for _ in range(iters):
        u = log_mu - torch.logsumexp(couplings + v.unsqueeze(1), dim=2)
        v = log_nu - torch.logsumexp(couplings + u.unsqueeze(2), dim=1)
    return couplings + u.unsqueeze(2) + v.unsqueeze(1) - norm.unsqueeze(2)


def _dual_softmax_inference(feat0: torch.Tensor, feat1: torch.Tensor,
                            factor: float) -> torch.Tensor:
    """``softmax(sim, 1) * softmax(sim, 2)`` of ``sim = factor * feat0 feat1^T`` (inference).

    The same matrix as the plain path up to float rounding, with fewer passes over it: the
    product runs as a oneDNN convolution (:func:`pointwise_linear`), the scale is applied to
    the smaller ``feat0``, and the column softmax is written as exp / sum along dim 1 (about
    half the time of ``F.softmax(sim, 1)`` on a 4800 x 4800 matrix), in place.
    """
    sim = torch.stack([pointwise_linear(f0 * factor, f1) for f0, f1 in zip(feat0, feat1)])
    conf = F.softmax(sim, 2)
    column = sim.sub_(sim.amax(1, keepdim=True)).exp_()
    return conf.mul_(column).div_(column.sum(1, keepdim=True))


class CoarseMatching(nn.Module):
    """Confidence matrix and per-cell best matches of the coarse level."""

    def __init__(self, match_type: str = 'dual_softmax', temperature: float = 0.1,
                 threshold: float = 0.2, border_rm: int = 2, skh_iters: int = 3,
                 skh_init_bin_score: float = 1.0, skh_prefilter: bool = True):
        """Create the matcher.

        Args:
            match_type: ``'dual_softmax'`` or ``'sinkhorn'``.
            temperature: dual-softmax temperature.
            threshold: confidence threshold of the mask (values <= 0 keep every positive
                confidence, as kornia's ``max(thr, 0)``).
            border_rm: cells closer than this to a border (in coarse cells) never match.
            skh_iters: Sinkhorn iterations.
            skh_init_bin_score: initial dustbin score (a learned parameter).
            skh_prefilter: in eval mode, zero rows/columns whose best entry is the dustbin.

        Raises:
            ValueError: for an unknown ``match_type``.
        """
        super().__init__()
        if match_type not in MATCH_TYPES:
            raise ValueError(f'match_type must be one of {MATCH_TYPES}, got {match_type!r}')
        self.match_type = match_type
        self.temperature = float(temperature)
        self.threshold = float(threshold)
        self.border_rm = int(border_rm)
        self.skh_iters = int(skh_iters)
        self.skh_prefilter = bool(skh_prefilter)
        if match_type == 'sinkhorn':
            self.bin_score = nn.Parameter(torch.tensor(float(skh_init_bin_score)))

    def confidence(self, feat0: torch.Tensor, feat1: torch.Tensor) -> torch.Tensor:
        """Return the (B, L, S) confidence matrix of (B, L, C) and (B, S, C) coarse tokens."""
        scale = feat0.shape[-1] ** 0.5
        if self.match_type == 'dual_softmax' and fast_path(self):
            return _dual_softmax_inference(feat0, feat1, 1.0 / (scale * scale * self.temperature))
        sim = (feat0 / scale) @ (feat1 / scale).transpose(1, 2)
        if self.match_type == 'dual_softmax':
            sim = sim / self.temperature
            # softmax subtracts the maximum before exp: safe in float16
            return F.softmax(sim, 1) * F.softmax(sim, 2)
        log_assign = log_optimal_transport(sim, self.bin_score, self.skh_iters)
        assign = log_assign.exp()
        conf = assign[:, :-1, :-1]
        if not self.training and self.skh_prefilter:
            row_bin = assign[:, :-1, -1] > conf.amax(2)  # (B, L) dustbin strictly best
            col_bin = assign[:, -1, :-1] > conf.amax(1)  # (B, S)
            keep = ~(row_bin.unsqueeze(2) | col_bin.unsqueeze(1))
            conf = conf * keep.to(conf.dtype)
        return conf

    def select(self, conf: torch.Tensor, valid0: torch.Tensor,
               valid1: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Choose the best cell of image 1 for every cell of image 0.

        Args:
            conf: (B, L, S) confidence matrix.
            valid0: (1 or B, L) bool, cells of image 0 allowed to match (off the border).
            valid1: (1 or B, S) bool, the same for image 1.

        Returns:
            ``best`` (B, L) int64 index into S, ``score`` (B, L) its confidence and ``mask``
            (B, L) bool: score above the threshold, mutual nearest neighbour, both cells valid.
        """
        score, best = conf.max(dim=2)
        col_max = conf.amax(dim=1)
        mutual = torch.gather(col_max, 1, best) == score
        valid1_best = torch.gather(valid1.expand(best.shape[0], -1), 1, best)
        mask = (score > max(self.threshold, 0.0)) & mutual & valid0 & valid1_best
        return best, score, mask

    def valid_cells(self, feat_map: torch.Tensor) -> torch.Tensor:
        """Return (1, H*W) bool: cells of a (B, C, H, W) map ``border_rm`` off the border."""
        ones = torch.ones_like(feat_map[:1, :1], dtype=torch.float32)[:, 0]  # (1, H, W)
        if self.border_rm <= 0:
            return (ones > 0).flatten(1)
        rows = ones.cumsum(1)  # 1-based
        cols = ones.cumsum(2)
        height = ones.sum(1, keepdim=True)
        width = ones.sum(2, keepdim=True)
        b = float(self.border_rm)
        keep = (rows > b) & (cols > b) & (rows <= height - b) & (cols <= width - b)
        return keep.flatten(1)
