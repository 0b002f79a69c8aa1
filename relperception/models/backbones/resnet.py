# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""ResNet-18/34/50 multi-scale backbone with torchvision parameter names.

The module tree (``conv1``, ``bn1``, ``layer1`` ... ``layer4``; blocks with ``conv1``/``bn1``/
``conv2``/``bn2`` [``conv3``/``bn3``] and ``downsample.0``/``downsample.1``) is the one of
``torchvision.models.resnet`` (ResNet v1.5: the stride of a bottleneck sits on its 3x3 conv),
so a torchvision ImageNet state dict loads with ``load_weights(backbone, path,
key_map={'fc.': None})`` (the classifier ``fc`` is dropped).

``width`` scales every channel count (rounded to a multiple of 8) for small CPU models:
ResNet-18 has 11.2 M parameters (45 MB fp32) without ``fc``; ``width=0.25`` (channels
16/32/64/128) has 0.7 M. Names are unchanged, shapes differ, so torchvision weights only fit
``width=1``.

Outputs (``out_indices``): 0 = stem after conv1/bn1/relu (stride 2), 1..4 = ``layer1`` ..
``layer4`` (strides 4, 8, 16, 32). Any input size works (maps are ``ceil(H / stride)``); sides
that are multiples of 32 keep all maps exactly aligned.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

#: (block type, blocks per stage) of the supported depths.
ARCHITECTURES = {
    18: ('basic', (2, 2, 2, 2)),
    34: ('basic', (3, 4, 6, 3)),
    50: ('bottleneck', (3, 4, 6, 3)),
}


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (expansion 1)."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1,
                 downsample: Optional[nn.Module] = None):
        """Build the block (``downsample`` maps the input to the output shape)."""
        super().__init__()
        self.conv1 = _conv3x3(cin, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the block output (B, planes, H/stride, W/stride)."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand with a residual connection (expansion 4)."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1,
                 downsample: Optional[nn.Module] = None):
        """Build the block (``downsample`` maps the input to the output shape)."""
        super().__init__()
        self.conv1 = _conv1x1(cin, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the block output (B, 4 * planes, H/stride, W/stride)."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _round_channels(channels: float) -> int:
    """Round a scaled channel count to a multiple of 8 (at least 8)."""
    return max(8, int(round(channels / 8.0)) * 8)


class ResNet(nn.Module):
    """ResNet backbone returning a list of multi-scale feature maps.

    Input: ``image`` (B, 3, H, W) float32, normalised (ImageNet mean/std for torchvision
    weights). Output of ``forward``: list of (B, C_i, ceil(H/s_i), ceil(W/s_i)) maps, one per
    ``out_indices`` entry, with ``C_i = out_channels[i]`` and ``s_i = strides[i]``.
    """

    default_conf: Dict[str, Any] = {
        'name': 'resnet',
        'depth': 18,          # 18 | 34 | 50
        'width': 1.0,         # channel multiplier (1.0 = torchvision sizes)
        'out_indices': [1, 2, 3, 4],  # 0 stem (stride 2), 1..4 layer1..layer4
    }

    def __init__(self, conf: Optional[Dict[str, Any]] = None):
        """Build the backbone from ``conf`` merged over ``default_conf``.

        Raises:
            ValueError: unsupported depth, width or out_indices.
        """
        super().__init__()
        self.conf = conf = {**self.default_conf, **(conf or {})}
        if conf['depth'] not in ARCHITECTURES:
            raise ValueError(f'resnet depth must be one of {sorted(ARCHITECTURES)}, '
                             f'got {conf["depth"]!r}')
        if not 0 < float(conf['width']) <= 4:
            raise ValueError(f'resnet width must be in (0, 4], got {conf["width"]!r}')
        out_indices = [int(i) for i in conf['out_indices']]
        if not out_indices or any(not 0 <= i <= 4 for i in out_indices) \
                or sorted(set(out_indices)) != out_indices:
            raise ValueError(f'resnet out_indices must be increasing values in 0..4, '
                             f'got {conf["out_indices"]!r}')
        kind, blocks = ARCHITECTURES[conf['depth']]
        block = BasicBlock if kind == 'basic' else Bottleneck
        planes = [_round_channels(64 * float(conf['width']) * 2 ** i) for i in range(4)]
        stem = planes[0]
        self.conv1 = nn.Conv2d(3, stem, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        cin = stem
        for i, (p, n) in enumerate(zip(planes, blocks)):
            stride = 1 if i == 0 else 2
            downsample = None
            if stride != 1 or cin != p * block.expansion:
                downsample = nn.Sequential(_conv1x1(cin, p * block.expansion, stride),
                                           nn.BatchNorm2d(p * block.expansion))
            layers = [block(cin, p, stride, downsample)]
            cin = p * block.expansion
            layers += [block(cin, p) for _ in range(1, n)]
            self.add_module(f'layer{i + 1}', nn.Sequential(*layers))
        all_channels = [stem] + [p * block.expansion for p in planes]
        all_strides = [2, 4, 8, 16, 32]
        self.out_indices = out_indices
        self.out_channels: List[int] = [all_channels[i] for i in out_indices]
        self.strides: List[int] = [all_strides[i] for i in out_indices]
        self.stride = self.strides[-1]
        self.size_multiple = 1  # any size; multiples of 32 keep the maps aligned
        self.has_class_token = False
        self.num_stages = max(out_indices)
        self._init_weights()

    def _init_weights(self) -> None:
        """Initialise as torchvision does (Kaiming fan-out convs, unit BatchNorm)."""
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward_with_tokens(self, image: torch.Tensor
                            ) -> Tuple[List[torch.Tensor], Optional[List[torch.Tensor]]]:
        """Return ``(maps, None)``: convolutional backbones have no class tokens."""
        return self.forward(image), None

    def forward(self, image: torch.Tensor) -> List[torch.Tensor]:
        """Return the feature maps selected by ``out_indices`` (see the class docstring)."""
        if image.dim() != 4 or image.shape[1] != 3:
            raise ValueError(f'image must be (B, 3, H, W), got {tuple(image.shape)}')
        x = self.relu(self.bn1(self.conv1(image)))
        maps = [x] if 0 in self.out_indices else []
        x = self.maxpool(x)
        for i in range(1, self.num_stages + 1):
            x = getattr(self, f'layer{i}')(x)
            if i in self.out_indices:
                maps.append(x)
        return maps
