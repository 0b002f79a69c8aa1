# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""ESPNet (Mehta et al., ECCV 2018) re-implemented for timing only: architecture, no weights.

The layers follow the authors' reference implementation (``ESPNet`` with the ESP module
``DilatedParllelResidualBlockB``, the strided ``DownSamplerB``, input reinforcement by average
pooling, PReLU activations and BatchNorm eps 1e-3), with ``p = 2`` ESP modules at stride 4 and
``q = 8`` at stride 8 (the paper's ESPNet, alpha_2 = 2, alpha_3 = 8) and its decoder
(projection to the classes, transposed-convolution upsampling, one ESP module and a stride-2
skip) back to the input size. It is built with the seeded random initialisation and never
trained or shipped: ``bench/dense_bench.py`` times it next to the presets, in the same run, as
the "what people deploy at this size" reference.

Input ``image`` (B, 3, H, W) float32 with H and W multiples of 8; output logits
(B, num_classes, H, W).
"""

from __future__ import annotations

import torch
from torch import nn

#: Layer counts of the paper's ESPNet: ESP modules at stride 4 (p) and stride 8 (q).
ESPNET_P, ESPNET_Q = 2, 8


class CBR(nn.Module):
    """Convolution, BatchNorm, PReLU."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1):
        """Build the block (padding keeps the size at stride 1)."""
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3)
        self.act = nn.PReLU(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the activated output."""
        return self.act(self.bn(self.conv(x)))


class BR(nn.Module):
    """BatchNorm, PReLU."""

    def __init__(self, channels: int):
        """Build the block."""
        super().__init__()
        self.bn = nn.BatchNorm2d(channels, eps=1e-3)
        self.act = nn.PReLU(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the activated input."""
        return self.act(self.bn(x))


def _dilated(cin: int, cout: int, dilation: int) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, 1, dilation, dilation=dilation, bias=False)


class ESPModule(nn.Module):
    """Reduce, split into dilated 3x3 branches (1, 2, 4, 8, 16), hierarchical sum, merge.

    With ``stride`` 2 the reduction is a strided 3x3 convolution (``DownSamplerB``), else a
    1x1 convolution with an optional residual connection (``DilatedParllelResidualBlockB``).
    """

    def __init__(self, cin: int, cout: int, stride: int = 1, residual: bool = True):
        """Build the module."""
        super().__init__()
        n = cout // 5
        n1 = cout - 4 * n
        kernel = 3 if stride == 2 else 1
        self.reduce = nn.Conv2d(cin, n, kernel, stride, (kernel - 1) // 2, bias=False)
        self.branches = nn.ModuleList([_dilated(n, n1, 1)] +
                                      [_dilated(n, n, d) for d in (2, 4, 8, 16)])
        self.residual = residual and stride == 1 and cin == cout
        self.out = BR(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the module output."""
        reduced = self.reduce(x)
        outs = [branch(reduced) for branch in self.branches]
        for i in range(2, len(outs)):
            outs[i] = outs[i] + outs[i - 1]
        merged = torch.cat(outs, 1)
        if self.residual:
            merged = merged + x
        return self.out(merged)


class InputProjection(nn.Module):
    """Downsample the image ``times`` times by 3x3 average pooling (stride 2)."""

    def __init__(self, times: int):
        """Build the pooling chain."""
        super().__init__()
        self.pools = nn.Sequential(*[nn.AvgPool2d(3, 2, 1) for _ in range(times)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the pooled image."""
        return self.pools(x)


class ESPNet(nn.Module):
    """ESPNet encoder + decoder (see the module docstring)."""

    def __init__(self, num_classes: int = 11, p: int = ESPNET_P, q: int = ESPNET_Q):
        """Build the network for ``num_classes`` classes."""
        super().__init__()
        c = int(num_classes)
        self.level1 = CBR(3, 16, 3, 2)
        self.sample1 = InputProjection(1)
        self.sample2 = InputProjection(2)
        self.b1 = BR(16 + 3)
        self.level2_0 = ESPModule(16 + 3, 64, stride=2)
        self.level2 = nn.Sequential(*[ESPModule(64, 64) for _ in range(p)])
        self.b2 = BR(128 + 3)
        self.level3_0 = ESPModule(128 + 3, 128, stride=2)
        self.level3 = nn.Sequential(*[ESPModule(128, 128) for _ in range(q)])
        self.b3 = BR(256)
        self.classifier_l3 = nn.Conv2d(256, c, 1, bias=False)
        self.level3_c = nn.Conv2d(128 + 3, c, 1, bias=False)
        self.br = nn.BatchNorm2d(c, eps=1e-3)
        self.conv = CBR(19 + c, c, 3, 1)
        self.up_l3 = nn.ConvTranspose2d(c, c, 2, stride=2, bias=False)
        self.combine_l2_l3 = nn.Sequential(BR(2 * c), ESPModule(2 * c, c, residual=False))
        self.up_l2 = nn.Sequential(nn.ConvTranspose2d(c, c, 2, stride=2, bias=False), BR(c))
        self.classifier = nn.ConvTranspose2d(c, c, 2, stride=2, bias=False)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        """Return logits (B, num_classes, H, W) for ``image`` (B, 3, H, W)."""
        out0 = self.level1(image)
        inp1, inp2 = self.sample1(image), self.sample2(image)
        out0_cat = self.b1(torch.cat([out0, inp1], 1))
        out1_0 = self.level2_0(out0_cat)
        out1 = self.level2(out1_0)
        out1_cat = self.b2(torch.cat([out1, out1_0, inp2], 1))
        out2_0 = self.level3_0(out1_cat)
        out2 = self.level3(out2_0)
        out2_cat = self.b3(torch.cat([out2_0, out2], 1))
        out2_c = self.up_l3(self.br(self.classifier_l3(out2_cat)))
        out1_c = self.level3_c(out1_cat)
        comb = self.up_l2(self.combine_l2_l3(torch.cat([out1_c, out2_c], 1)))
        return self.classifier(self.conv(torch.cat([comb, out0_cat], 1)))


class ESPNetExport(nn.Module):
    """ESPNet -> ``(logits, labels)`` as the dense graphs give them (labels: uint8 argmax)."""

    def __init__(self, num_classes: int = 11):
        """Build a seeded random ESPNet in eval mode."""
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.net = ESPNet(num_classes).eval()

    def forward(self, image: torch.Tensor):
        """Return ``(logits (1, C, H, W), labels (1, H, W) uint8)``."""
        logits = self.net(image)
        return logits, logits.argmax(dim=1).to(torch.uint8)


def espnet_export_spec(num_classes: int = 11) -> dict:
    """Return the ``runtime.model_export`` spec of the ESPNet peer (random weights)."""
    module = ESPNetExport(num_classes).eval()
    return {'kind': 'dense', 'module': module, 'input_names': ('image',),
            'output_names': ('logits', 'labels'), 'channels': 3, 'size_multiple': 8,
            'default_size': (360, 480),
            'metadata': {'kind': 'dense', 'preset': 'espnet_peer', 'weights': 'random'},
            'output_shape': lambda h, w: ('logits', (1, num_classes, h, w))}
