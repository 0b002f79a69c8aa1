# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Fine level of LoFTR: window cropping, coarse-context merge and sub-pixel expectation.

For a coarse match (i, j) the W x W windows of the stride-2 feature maps centred on the cells
(fine cell ``stride * (x, y)`` of coarse cell (x, y), ``stride = 4``) are cropped by a gather
with precomputed indices, fused with the coarse tokens (``down_proj`` + ``merge_feat``, kornia's
names), transformed, and the centre feature of window 0 is correlated with window 1. The soft
argmax of that correlation gives the offset of the match in window units [-1, 1].
"""

from typing import Optional, Tuple

import torch
from torch import nn
import torch.nn.functional as F


def cell_xy(feat_map: torch.Tensor) -> torch.Tensor:
    """Return (1, H*W, 2) float32 (x, y) cell coordinates of a (B, C, H, W) map, row-major."""
    ones = torch.ones_like(feat_map[:1, :1], dtype=torch.float32)[:, 0]  # (1, H, W)
    xs = ones.cumsum(2) - 1.0
    ys = ones.cumsum(1) - 1.0
    return torch.stack([xs, ys], -1).flatten(1, 2)


def window_offsets(window: int, device: torch.device) -> torch.Tensor:
    """Return (W*W, 2) int64 (dx, dy) of a window, row-major (dy slow, dx fast)."""
    r = torch.arange(window, device=device)
    dy, dx = torch.meshgrid(r, r, indexing='ij')
    return torch.stack([dx.reshape(-1), dy.reshape(-1)], -1)


def _window_index(xy: torch.Tensor, height, width, window: int,
                  stride: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Flat indices (..., W*W) into a (height, width) map for the windows of cells ``xy``.

    Returns the indices, clamped into the map, and the (..., W*W) bool mask of the window
    positions inside the map.
    """
    offsets = window_offsets(window, xy.device) - window // 2
    centre = xy.long() * stride
    col = centre[..., None, 0] + offsets[:, 0]
    row = centre[..., None, 1] + offsets[:, 1]
    inside = (col >= 0) & (col < width) & (row >= 0) & (row < height)
    index = row.clamp(0, height - 1) * width + col.clamp(0, width - 1)
    return index, inside


def crop_windows(feat_f: torch.Tensor, xy: torch.Tensor, window: int, stride: int,
                 b_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Crop W x W windows of a fine map around coarse cells.

    Args:
        feat_f: (B, C, Hf, Wf) fine feature map.
        xy: coarse cell coordinates, (B, K, 2) (one set per batch item) or, with ``b_ids``,
            (K, 2).
        window: window size W (odd).
        stride: fine cells per coarse cell (coarse stride / fine stride, 4 for LoFTR).
        b_ids: (K,) batch index of each cell, or None.

    Returns:
        (B, K, W*W, C) or, with ``b_ids``, (K, W*W, C) features; positions outside the map are 0.
    """
    # channels-last map (B, Hf*Wf, C): a window is a gather of whole C-vectors and the result
    # already has the (..., W*W, C) layout the fine transformer reads. Indices are clamped
    # into the map and positions outside it zeroed afterwards (no padded copy of the map).
    pixels = feat_f.permute(0, 2, 3, 1).flatten(1, 2)
    index, inside = _window_index(xy, feat_f.shape[2], feat_f.shape[3], window, stride)
    if b_ids is None:
        batch, count, channels = index.shape[0], index.shape[1], feat_f.shape[1]
        # rows of the (B*Hf*Wf, C) pixel matrix: one index per C-vector (a gather with an
        # index per element is ~10x slower on CPU)
        first = torch.arange(batch, device=index.device).reshape(-1, 1, 1) * pixels.shape[1]
        rows = (index + first).reshape(-1)
        crops = pixels.reshape(-1, channels).index_select(0, rows)
        crops = crops.reshape(batch, count, window * window, channels)
    else:
        crops = pixels[b_ids[:, None], index]  # (K, W*W, C)
    return torch.where(inside.unsqueeze(-1), crops, torch.zeros_like(crops[..., :1, :1]))


def spatial_expectation(feat0: torch.Tensor, feat1: torch.Tensor, window: int) -> torch.Tensor:
    """Soft-argmax of the centre feature of window 0 over window 1.

    Args:
        feat0: (M, W*W, C) transformed window features of image 0.
        feat1: (M, W*W, C) of image 1.
        window: the window size W.

    Returns:
        (M, 3): expected (dx, dy) in window-normalised coordinates [-1, 1] (corners at the
        outer cell centres) and the standard deviation ``std_x + std_y`` of the heat map.
    """
    centre = feat0[:, window * window // 2, :]
    sim = (feat1 @ centre.unsqueeze(-1)).squeeze(-1) / float(feat0.shape[2]) ** 0.5
    heat = F.softmax(sim, dim=1)
    grid = window_offsets(window, feat0.device).to(heat.dtype) * (2.0 / (window - 1)) - 1.0
    coords = heat @ grid  # (M, 2)
    var = heat @ grid.square() - coords.square()
    floor = torch.full_like(var, 1e-10)
    above = var > floor
    std = torch.where(above, torch.where(above, var, torch.ones_like(var)).sqrt(), floor.sqrt())
    return torch.cat([coords, std.sum(-1, keepdim=True)], -1)


class FinePreprocess(nn.Module):
    """Merge the coarse token of a match into every feature of its fine windows."""

    def __init__(self, d_model_c: int, d_model_f: int, concat_coarse: bool = True):
        """Create the projection layers.

        Args:
            d_model_c: coarse channels.
            d_model_f: fine channels.
            concat_coarse: fuse the coarse tokens (LoFTR default); False passes windows through.
        """
        super().__init__()
        self.concat_coarse = concat_coarse
        if concat_coarse:
            self.down_proj = nn.Linear(d_model_c, d_model_f, bias=True)
            self.merge_feat = nn.Linear(2 * d_model_f, d_model_f, bias=True)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.kaiming_normal_(p, mode='fan_out', nonlinearity='relu')

    def forward(self, win0: torch.Tensor, win1: torch.Tensor, tok0: torch.Tensor,
                tok1: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Fuse (M, W*W, Cf) windows with their (M, Cc) coarse tokens; same shapes out."""
        if not self.concat_coarse:
            return win0, win1
        # merge_feat(cat([win, ctx])) = win @ W_win^T + (ctx @ W_ctx^T + b): the context half
        # is computed once per window instead of once per window cell (same math, less work)
        dim = win0.shape[-1]
        weight = self.merge_feat.weight
        w_win, w_ctx = weight[:, :dim], weight[:, dim:]
        ctx0 = F.linear(self.down_proj(tok0), w_ctx, self.merge_feat.bias).unsqueeze(1)
        ctx1 = F.linear(self.down_proj(tok1), w_ctx, self.merge_feat.bias).unsqueeze(1)
        return F.linear(win0, w_win) + ctx0, F.linear(win1, w_win) + ctx1
