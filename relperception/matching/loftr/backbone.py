# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""ResNet-FPN feature extractor of LoFTR with outputs at 1/8 and 1/2 resolution.

Parameter names follow ``kornia.feature.loftr`` (and the official LoFTR code) so their state
dicts load unchanged: ``conv1``, ``bn1``, ``layer1..3`` (two residual blocks each),
``layer3_outconv``, ``layer2_outconv``, ``layer2_outconv2``, ``layer1_outconv``,
``layer1_outconv2``.
"""

from typing import Sequence, Tuple

import torch
from torch import nn
import torch.nn.functional as F


def _conv(in_ch: int, out_ch: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    """Bias-free ``kernel`` x ``kernel`` convolution with 'same' padding."""
    return nn.Conv2d(in_ch, out_ch, kernel_size=kernel, stride=stride, padding=kernel // 2,
                     bias=False)


class ResidualBlock(nn.Module):
    """Two 3x3 conv + BN layers with an identity (or strided 1x1 conv) shortcut."""

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1):
        """Create the block.

        Args:
            in_ch: input channels.
            out_ch: output channels.
            stride: stride of the first convolution (1 or 2).
        """
        super().__init__()
        self.conv1 = _conv(in_ch, out_ch, 3, stride)
        self.conv2 = _conv(out_ch, out_ch, 3)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1:
            self.downsample = nn.Sequential(_conv(in_ch, out_ch, 1, stride),
                                            nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map (B, in_ch, H, W) features to (B, out_ch, H/stride, W/stride)."""
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(shortcut + y)


def _fpn_merge(lateral: nn.Module, head: nn.Module, skip: torch.Tensor,
               coarser: torch.Tensor) -> torch.Tensor:
    """Upsample ``coarser`` by 2 (bilinear, corners aligned), add the lateral ``skip`` and refine.

    The upsampled map is cropped to the skip size; for inputs that are multiples of 8 the crop
    keeps everything (it only matters for odd feature sizes, mirroring the reference).
    """
    lat = lateral(skip)
    up = F.interpolate(coarser, scale_factor=2.0, mode='bilinear', align_corners=True)
    up = up[:, :, :lat.shape[2], :lat.shape[3]]
    return head(lat + up)


class ResNetFPN82(nn.Module):
    """ResNet with an FPN decoder; coarse output at stride 8, fine output at stride 2.

    Input: (B, 1, H, W) grey image in [0, 1]. Output: coarse (B, block_dims[2], H/8, W/8) and
    fine (B, block_dims[0], H/2, W/2) feature maps (``ceil`` for sizes not divisible by 8).
    Cell (x, y) of a map of stride s is centred on pixel (s x, s y) (pixel centres at integers).
    """

    def __init__(self, initial_dim: int, block_dims: Sequence[int]):
        """Create the backbone.

        Args:
            initial_dim: channels of the 7x7 stem convolution.
            block_dims: channels of the three stages (strides 2, 4, 8).

        Raises:
            ValueError: if ``block_dims`` does not have three entries.
        """
        super().__init__()
        if len(block_dims) != 3:
            raise ValueError(f'block_dims needs 3 entries, got {list(block_dims)}')
        d1, d2, d3 = (int(d) for d in block_dims)
        self.conv1 = nn.Conv2d(1, initial_dim, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(initial_dim)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(ResidualBlock(initial_dim, d1, 1), ResidualBlock(d1, d1))
        self.layer2 = nn.Sequential(ResidualBlock(d1, d2, 2), ResidualBlock(d2, d2))
        self.layer3 = nn.Sequential(ResidualBlock(d2, d3, 2), ResidualBlock(d3, d3))
        self.layer3_outconv = _conv(d3, d3, 1)
        self.layer2_outconv = _conv(d2, d3, 1)
        self.layer2_outconv2 = nn.Sequential(_conv(d3, d3, 3), nn.BatchNorm2d(d3), nn.LeakyReLU(),
                                             _conv(d3, d2, 3))
        self.layer1_outconv = _conv(d1, d2, 1)
        self.layer1_outconv2 = nn.Sequential(_conv(d2, d2, 3), nn.BatchNorm2d(d2), nn.LeakyReLU(),
                                             _conv(d2, d1, 3))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, image: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Return (coarse, fine) feature maps of a (B, 1, H, W) image batch."""
        x0 = self.relu(self.bn1(self.conv1(image)))
        x1 = self.layer1(x0)
        x2 = self.layer2(x1)
        x3 = self.layer3(x2)
        coarse = self.layer3_outconv(x3)
        mid = _fpn_merge(self.layer2_outconv, self.layer2_outconv2, x2, coarse)
        fine = _fpn_merge(self.layer1_outconv, self.layer1_outconv2, x1, mid)
        return coarse, fine
