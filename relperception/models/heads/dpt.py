# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""DPT depth head with the module names of Depth Anything V2's ``DPTHead``.

Inputs are four feature maps (B, C_i, H_i, W_i) (finest first) and optionally the backbone's
class tokens. Per input i: optional class-token readout (``readout_projects.i``: Linear(2C, C) +
GELU on ``[token, class token]``), 1x1 projection (``projects.i``) to ``out_channels[i]``, then a
resize layer (``resize_layers.i``) by ``resize_factors[i]``: 4 or 2 = ConvTranspose2d with kernel
= stride = factor, 1 = identity, 0.5 = 3x3 stride-2 conv. A ViT gives four maps of one scale
and uses ``[4, 2, 1, 0.5]`` (Depth Anything V2); a ResNet already gives strides 4..32 and uses
``[1, 1, 1, 1]`` (no parameters).

Then the RefineNet-style fusion of DPT: ``scratch.layerN_rn`` (3x3 convs to ``features``
channels), ``scratch.refinenet4`` .. ``refinenet1`` (FeatureFusionBlock: two residual conv
units ``resConfUnit1/2``, bilinear upsampling with align_corners=True to the next finer map,
1x1 ``out_conv``), ``scratch.output_conv1`` (3x3, features -> features/2), bilinear resize
(align_corners=True) to the input image size, and ``scratch.output_conv2`` (3x3 ->
``head_features`` (32), ReLU, 1x1 -> 1, final activation). The final activation is ReLU for
relative inverse depth (Depth Anything V2) or a sigmoid times ``max_depth`` for metric depth
(Depth Anything V2 metric).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn
import torch.nn.functional as F


def make_resize_layer(channels: int, factor: float) -> nn.Module:
    """Return a layer changing the resolution of a (B, C, H, W) map by ``factor``.

    Args:
        channels: channel count C (kept).
        factor: 4 or 2 (and any integer > 1): transposed conv with kernel = stride = factor;
            1: identity; 0.5: 3x3 stride-2 conv (padding 1).

    Returns:
        The layer.

    Raises:
        ValueError: unsupported factor.
    """
    if factor == 1:
        return nn.Identity()
    if factor == 0.5:
        return nn.Conv2d(channels, channels, kernel_size=3, stride=2, padding=1)
    if factor > 1 and float(factor).is_integer():
        k = int(factor)
        return nn.ConvTranspose2d(channels, channels, kernel_size=k, stride=k, padding=0)
    raise ValueError(f'resize factor must be an integer >= 1 or 0.5, got {factor!r}')


class ResidualConvUnit(nn.Module):
    """ReLU-conv3x3[-BN]-ReLU-conv3x3[-BN] plus the input (``conv1``, ``conv2``, ``bn1/2``)."""

    def __init__(self, features: int, use_bn: bool):
        """Build the unit on ``features`` channels."""
        super().__init__()
        self.conv1 = nn.Conv2d(features, features, 3, padding=1, bias=True)
        self.conv2 = nn.Conv2d(features, features, 3, padding=1, bias=True)
        if use_bn:
            self.bn1 = nn.BatchNorm2d(features)
            self.bn2 = nn.BatchNorm2d(features)
        self.use_bn = use_bn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the unit output (same shape as ``x``)."""
        out = self.conv1(F.relu(x))
        if self.use_bn:
            out = self.bn1(out)
        out = self.conv2(F.relu(out))
        if self.use_bn:
            out = self.bn2(out)
        return out + x


class FeatureFusionBlock(nn.Module):
    """DPT fusion: add the refined skip map, refine, upsample, 1x1 ``out_conv``."""

    def __init__(self, features: int, use_bn: bool):
        """Build the block on ``features`` channels."""
        super().__init__()
        self.out_conv = nn.Conv2d(features, features, 1, bias=True)
        self.resConfUnit1 = ResidualConvUnit(features, use_bn)  # noqa: N815 (reference name)
        self.resConfUnit2 = ResidualConvUnit(features, use_bn)  # noqa: N815

    def forward(self, x: torch.Tensor, skip: Optional[torch.Tensor] = None,
                size: Optional[Tuple[int, int]] = None) -> torch.Tensor:
        """Fuse ``x`` with ``skip`` and upsample to ``size`` (default: twice the size)."""
        if skip is not None:
            x = x + self.resConfUnit1(skip)
        x = self.resConfUnit2(x)
        if size is None:
            x = F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=True)
        else:
            x = F.interpolate(x, size=tuple(size), mode='bilinear', align_corners=True)
        return self.out_conv(x)


class DPTHead(nn.Module):
    """DPT depth head (see the module docstring).

    Inputs of ``forward``: ``maps`` list of four (B, C_i, H_i, W_i), ``image_size`` (H, W) of the
    network input, ``class_tokens`` list of four (B, C_i) (required when ``use_clstoken``).
    Output: (B, 1, H, W) relative inverse depth (ReLU, >= 0) or metric depth in metres
    (sigmoid * max_depth, in (0, max_depth)).
    """

    default_conf: Dict[str, Any] = {
        'in_channels': [384, 384, 384, 384],
        'features': 64,
        'out_channels': [48, 96, 192, 384],
        'resize_factors': [4, 2, 1, 0.5],
        'use_bn': False,
        'use_clstoken': False,
        'depth_mode': 'relative',   # relative (ReLU) | metric (sigmoid * max_depth)
        'max_depth': 20.0,
        'head_features': 32,        # channels of output_conv2's full-resolution conv (DA-V2: 32)
    }

    def __init__(self, conf: Optional[Dict[str, Any]] = None):
        """Build the head from ``conf`` merged over ``default_conf``.

        Raises:
            ValueError: lists that are not of length 4, or an unknown depth_mode.
        """
        super().__init__()
        self.conf = conf = {**self.default_conf, **(conf or {})}
        in_ch, out_ch = list(conf['in_channels']), list(conf['out_channels'])
        factors = list(conf['resize_factors'])
        if not len(in_ch) == len(out_ch) == len(factors) == 4:
            raise ValueError('DPT head needs 4 inputs: in_channels, out_channels and '
                             f'resize_factors must have 4 entries, got {in_ch}, {out_ch}, '
                             f'{factors}')
        if conf['depth_mode'] not in ('relative', 'metric'):
            raise ValueError(f"depth_mode must be 'relative' or 'metric', "
                             f'got {conf["depth_mode"]!r}')
        features = int(conf['features'])
        self.use_clstoken = bool(conf['use_clstoken'])
        self.metric = conf['depth_mode'] == 'metric'
        self.max_depth = float(conf['max_depth'])
        self.projects = nn.ModuleList(nn.Conv2d(c, o, 1) for c, o in zip(in_ch, out_ch))
        self.resize_layers = nn.ModuleList(make_resize_layer(o, f)
                                           for o, f in zip(out_ch, factors))
        if self.use_clstoken:
            self.readout_projects = nn.ModuleList(
                nn.Sequential(nn.Linear(2 * c, c), nn.GELU()) for c in in_ch)
        self.scratch = nn.Module()
        for i, o in enumerate(out_ch):
            setattr(self.scratch, f'layer{i + 1}_rn', nn.Conv2d(o, features, 3, padding=1,
                                                                bias=False))
        for i in range(4):
            setattr(self.scratch, f'refinenet{i + 1}', FeatureFusionBlock(features,
                                                                          conf['use_bn']))
        self.scratch.output_conv1 = nn.Conv2d(features, features // 2, 3, padding=1)
        hf = int(conf['head_features'])
        self.scratch.output_conv2 = nn.Sequential(
            nn.Conv2d(features // 2, hf, 3, padding=1), nn.ReLU(True), nn.Conv2d(hf, 1, 1),
            nn.Sigmoid() if self.metric else nn.ReLU(True))

    def forward(self, maps: Sequence[torch.Tensor], image_size: Tuple[int, int],
                class_tokens: Optional[Sequence[torch.Tensor]] = None) -> torch.Tensor:
        """Return depth (B, 1, H, W) at ``image_size`` (see the class docstring)."""
        if len(maps) != 4:
            raise ValueError(f'DPT head needs 4 feature maps, got {len(maps)}')
        if self.use_clstoken and class_tokens is None:
            raise ValueError('use_clstoken needs class tokens (a ViT backbone)')
        layers: List[torch.Tensor] = []
        for i, x in enumerate(maps):
            if self.use_clstoken:
                tokens = x.permute(0, 2, 3, 1)
                readout = class_tokens[i][:, None, None, :].expand_as(tokens)
                x = self.readout_projects[i](torch.cat((tokens, readout), -1))
                x = x.permute(0, 3, 1, 2)
            layers.append(self.resize_layers[i](self.projects[i](x)))
        rn = [getattr(self.scratch, f'layer{i + 1}_rn')(x) for i, x in enumerate(layers)]
        s = self.scratch
        path = s.refinenet4(rn[3], size=rn[2].shape[2:])
        path = s.refinenet3(path, rn[2], size=rn[1].shape[2:])
        path = s.refinenet2(path, rn[1], size=rn[0].shape[2:])
        path = s.refinenet1(path, rn[0])
        out = s.output_conv1(path)
        out = F.interpolate(out, size=tuple(image_size), mode='bilinear', align_corners=True)
        out = s.output_conv2(out)
        return out * self.max_depth if self.metric else out
