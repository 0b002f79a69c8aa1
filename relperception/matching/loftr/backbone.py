# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""ResNet-FPN feature extractor of LoFTR with outputs at 1/8 and 1/2 resolution.

Parameter names follow ``kornia.feature.loftr`` (and the official LoFTR code) so their state
dicts load unchanged: ``conv1``, ``bn1``, ``layer1..3`` (two residual blocks each),
``layer3_outconv``, ``layer2_outconv``, ``layer2_outconv2``, ``layer1_outconv``,
``layer1_outconv2``.

Inference fast path: in eval mode (and not while tracing for export) every convolution runs
with its BatchNorm folded into the weights and in the channels-last (NHWC) layout
(``relperception.matching.loftr.fast_path``), which oneDNN runs about 1.5x faster on CPU than
NCHW with separate BatchNorm passes. The folded weights are computed on each call from the
unchanged parameters (cheap next to the convolutions), so state dicts, training and the
exported graphs are exactly as before; the outputs are then channels-last tensors of the usual
(B, C, H, W) shape.
"""

import functools
from typing import Sequence, Tuple

from relperception.matching.loftr.fast_path import channels_last, fast_path, folded_conv
from relperception.matching.loftr.fine_matching import crop_windows
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
        if fast_path(self):
            # in-place activations / sums on the fresh conv outputs: no extra large buffers
            y = folded_conv(folded_conv(x, self.conv1, self.bn1).relu_(), self.conv2, self.bn2)
            shortcut = x if self.downsample is None else \
                folded_conv(x, self.downsample[0], self.downsample[1])
            return y.add_(shortcut).relu_()
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(shortcut + y)


def _fpn_sum(lateral: nn.Module, skip: torch.Tensor, coarser: torch.Tensor) -> torch.Tensor:
    """Upsample ``coarser`` by 2 (bilinear, corners aligned) and add the lateral ``skip``.

    The upsampled map is cropped to the skip size; for inputs that are multiples of 8 the crop
    keeps everything (it only matters for odd feature sizes, mirroring the reference). The sum
    is the input of the level's refining head (``_fpn_head``).
    """
    fast = fast_path(lateral)
    lat = folded_conv(skip, lateral) if fast else lateral(skip)
    up = F.interpolate(coarser, scale_factor=2.0, mode='bilinear', align_corners=True)
    up = up[:, :, :lat.shape[2], :lat.shape[3]]
    return lat.add_(up) if fast else lat + up


def _fpn_head(head: nn.Module, x: torch.Tensor, inside=None) -> torch.Tensor:
    """Apply a refining head (3x3 conv, BN, LeakyReLU, 3x3 conv).

    Args:
        head: the ``nn.Sequential`` (conv, BN, LeakyReLU, conv).
        x: (N, C, H, W) input.
        inside: None for the full map ('same' zero padding, output (N, C', H, W)); or, for
            (N, C, S, S) patches, the pair of (N, 1, S-2, S-2) and (N, 1, S-4, S-4) float masks
            of the patch positions inside the map: both convolutions are then 'valid' (output
            (N, C', S-4, S-4)) and what the 'same' padding of the full map reads as zeros
            outside it is set to zero, so the output equals the full map's on those positions.
    """
    conv_a, bn, act, conv_b = head
    padding = 1 if inside is None else 0
    fast = fast_path(head)
    if fast:
        mixed = F.leaky_relu(folded_conv(x, conv_a, bn, padding), act.negative_slope,
                             inplace=True)
    else:
        mixed = act(bn(F.conv2d(x, conv_a.weight, conv_a.bias, padding=padding)))
    if inside is not None:
        mixed = mixed * inside[0]
    out = folded_conv(mixed, conv_b, padding=padding) if fast else \
        F.conv2d(mixed, conv_b.weight, conv_b.bias, padding=padding)
    return out if inside is None else out * inside[1]


def _fpn_merge(lateral: nn.Module, head: nn.Module, skip: torch.Tensor,
               coarser: torch.Tensor) -> torch.Tensor:
    """``_fpn_head`` of ``_fpn_sum``: one refined FPN level."""
    return _fpn_head(head, _fpn_sum(lateral, skip, coarser))


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
        coarse, fine_input = self.forward_coarse(image)
        return coarse, self.fine_head(fine_input)

    def forward_coarse(self, image: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Return the coarse map and the input of the fine head (B, block_dims[1], H/2, W/2).

        ``fine_head`` of the latter is the fine map; ``fine_head_windows`` computes only
        windows of it.
        """
        if fast_path(self):
            x0 = folded_conv(channels_last(image), self.conv1, self.bn1).relu_()
            coarse_out = functools.partial(folded_conv, conv=self.layer3_outconv)
        else:
            x0 = self.relu(self.bn1(self.conv1(image)))
            coarse_out = self.layer3_outconv
        x1 = self.layer1(x0)
        x2 = self.layer2(x1)
        coarse = coarse_out(self.layer3(x2))
        mid = _fpn_merge(self.layer2_outconv, self.layer2_outconv2, x2, coarse)
        return coarse, _fpn_sum(self.layer1_outconv, x1, mid)

    def fine_head(self, fine_input: torch.Tensor) -> torch.Tensor:
        """Return the (B, block_dims[0], H/2, W/2) fine map from ``forward_coarse``'s input."""
        return _fpn_head(self.layer1_outconv2, fine_input)

    def fine_head_windows(self, fine_input: torch.Tensor, xy: torch.Tensor, window: int,
                          stride: int) -> torch.Tensor:
        """Windows of the fine map around coarse cells, computed on those windows only.

        Equal (up to float rounding) to ``crop_windows(fine_head(fine_input), xy, window,
        stride)``, including zeros outside the map, but the two 3x3 convolutions of the head
        run on (window + 4)^2 patches instead of the whole map: cheaper when
        ``K * (window + 2)^2`` is below the map's pixel count.

        Args:
            fine_input: (B, C, Hf, Wf) from ``forward_coarse``.
            xy: (B, K, 2) coarse cell coordinates (x, y).
            window: odd window size W.
            stride: fine cells per coarse cell.

        Returns:
            (B, K, W*W, block_dims[0]) window features, row-major within a window.
        """
        batch, count = xy.shape[0], xy.shape[1]
        size = window + 4  # two 3x3 convolutions: 2 pixels of context on each side
        patches = crop_windows(fine_input, xy, size, stride)  # (B, K, S*S, C)
        channels = patches.shape[-1]
        patches = patches.reshape(batch * count, size, size, channels).permute(0, 3, 1, 2)
        # map positions of the patch rows / columns: top-left cell of the S x S patch is at
        # stride * xy - S // 2
        centre = (xy.reshape(-1, 2).long() * stride)  # (N, 2) x, y in fine pixels
        masks = []
        for side in (size - 2, size - 4):
            offsets = torch.arange(side, device=xy.device) - side // 2
            cols = centre[:, 0:1] + offsets  # (N, side)
            rows = centre[:, 1:2] + offsets
            inside_x = (cols >= 0) & (cols < fine_input.shape[3])
            inside_y = (rows >= 0) & (rows < fine_input.shape[2])
            inside = inside_y[:, :, None] & inside_x[:, None, :]  # (N, side, side)
            masks.append(inside[:, None].to(fine_input.dtype))
        out = _fpn_head(self.layer1_outconv2, patches, inside=masks)  # (N, C', W, W)
        return out.permute(0, 2, 3, 1).reshape(batch, count, window * window, -1)
