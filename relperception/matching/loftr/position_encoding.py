# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""2-D sinusoidal position encoding of LoFTR, computed for the feature size of every call.

Channel ``4k`` holds ``sin(x w_k)``, ``4k+1`` ``cos(x w_k)``, ``4k+2`` ``sin(y w_k)`` and
``4k+3`` ``cos(y w_k)`` with 1-based cell positions x, y, as in the reference. Nothing is stored
in the state dict (kornia keeps its table as a non-persistent buffer too), and the encoding is
built from the feature map itself, so traced/exported graphs accept any input size.
"""

import math

import torch
from torch import nn


class PositionEncodingSine(nn.Module):
    """Add the sinusoidal 2-D position encoding to a (B, C, H, W) feature map."""

    def __init__(self, d_model: int, temp_bug_fix: bool = False):
        """Create the encoding.

        Args:
            d_model: channels C (a multiple of 4).
            temp_bug_fix: False reproduces the frequencies of the original LoFTR release (and
                kornia's default, used by the outdoor/indoor checkpoints): ``exp(-2k)``; True the
                corrected ``10000^(-2k / (C/2))`` of LoFTR issue #41 ('indoor_new' checkpoint).

        Raises:
            ValueError: if ``d_model`` is not a positive multiple of 4.
        """
        super().__init__()
        if d_model <= 0 or d_model % 4:
            raise ValueError(f'd_model must be a positive multiple of 4, got {d_model}')
        self.d_model = d_model
        self.temp_bug_fix = temp_bug_fix
        if temp_bug_fix:
            factor = -math.log(10000.0) / (d_model // 2)
        else:  # the released models' formula: (-log(1e4) / C) // 2 == -1
            factor = -math.log(10000.0) / d_model // 2
        freqs = torch.exp(torch.arange(0, d_model // 2, 2).float() * factor)
        self.register_buffer('freqs', freqs.view(1, -1, 1, 1), persistent=False)

    def encoding(self, feat: torch.Tensor) -> torch.Tensor:
        """Return the (1, C, H, W) float32 encoding for the size of ``feat`` (B, C, H, W)."""
        ones = torch.ones_like(feat[:1, :1], dtype=torch.float32)  # (1, 1, H, W)
        x = ones[:, :, :1].cumsum(3)  # (1, 1, 1, W), 1-based
        y = ones[:, :, :, :1].cumsum(2)  # (1, 1, H, 1)
        ex = torch.stack([torch.sin(x * self.freqs), torch.cos(x * self.freqs)], 2)
        ey = torch.stack([torch.sin(y * self.freqs), torch.cos(y * self.freqs)], 2)
        # broadcast by multiplying with ones (exact) instead of expand: no size arithmetic
        ex = ex * ones.unsqueeze(2)
        ey = ey * ones.unsqueeze(2)
        return torch.cat([ex, ey], 2).flatten(1, 2)  # (1, C/4, 4, H, W) -> (1, C, H, W)

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        """Return ``feat`` (B, C, H, W) plus the encoding, in the dtype of ``feat``.

        Raises:
            ValueError: if the channel count differs from ``d_model``.
        """
        if feat.shape[1] != self.d_model:
            raise ValueError(f'expected {self.d_model} channels, got {feat.shape[1]}')
        return feat + self.encoding(feat).to(feat.dtype)
