# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Light semantic segmentation head on a list of multi-scale feature maps.

For each selected input i: 1x1 conv + BatchNorm + ReLU (``projects.i``) to ``features``
channels, a resize layer (``resize_layers.i``, same factors as the DPT head: a ViT's single-scale
maps are spread to strides p/4 .. 2p, a ResNet's maps are used as they are), bilinear
upsampling to the finest map, concatenation, 3x3 conv + BN + ReLU (``fuse``), dropout and a 1x1
``classifier``; the logits are bilinearly upsampled (align_corners=False) to the input size.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from relperception.models.heads.dpt import make_resize_layer
import torch
from torch import nn
import torch.nn.functional as F


class SegmentationHead(nn.Module):
    """Multi-scale fusion segmentation head.

    Inputs of ``forward``: ``maps`` list of (B, C_i, H_i, W_i) (the backbone outputs; the head
    uses the entries listed in ``inputs``), ``image_size`` (H, W). Output: logits
    (B, num_classes, H, W) float32 (softmax over dim 1 gives class probabilities).
    """

    default_conf: Dict[str, Any] = {
        'num_classes': 11,
        'in_channels': [384, 384, 384, 384],   # of every backbone output
        'inputs': [0, 1, 2, 3],                # which backbone outputs are used
        'resize_factors': [1, 1, 1, 1],        # per used input (see dpt.make_resize_layer)
        'features': 64,
        'dropout': 0.1,
    }

    def __init__(self, conf: Optional[Dict[str, Any]] = None):
        """Build the head from ``conf`` merged over ``default_conf``.

        Raises:
            ValueError: inconsistent ``inputs``/``resize_factors`` or ``num_classes`` < 1.
        """
        super().__init__()
        self.conf = conf = {**self.default_conf, **(conf or {})}
        self.inputs = [int(i) for i in conf['inputs']]
        in_ch = list(conf['in_channels'])
        factors = list(conf['resize_factors'])
        if not self.inputs or any(not 0 <= i < len(in_ch) for i in self.inputs):
            raise ValueError(f'segmentation inputs {self.inputs} must index the '
                             f'{len(in_ch)} backbone outputs')
        if len(factors) != len(self.inputs):
            raise ValueError(f'resize_factors {factors} must have one entry per input '
                             f'{self.inputs}')
        if int(conf['num_classes']) < 1:
            raise ValueError(f'num_classes must be >= 1, got {conf["num_classes"]!r}')
        f = int(conf['features'])
        self.projects = nn.ModuleList(
            nn.Sequential(nn.Conv2d(in_ch[i], f, 1, bias=False), nn.BatchNorm2d(f),
                          nn.ReLU(True)) for i in self.inputs)
        self.resize_layers = nn.ModuleList(make_resize_layer(f, k) for k in factors)
        self.fuse = nn.Sequential(nn.Conv2d(f * len(self.inputs), f, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(f), nn.ReLU(True))
        self.dropout = nn.Dropout2d(float(conf['dropout']))
        self.classifier = nn.Conv2d(f, int(conf['num_classes']), 1)

    def forward(self, maps: Sequence[torch.Tensor], image_size: Tuple[int, int]) -> torch.Tensor:
        """Return logits (B, num_classes, H, W) at ``image_size``."""
        feats = [resize(project(maps[i]))
                 for i, project, resize in zip(self.inputs, self.projects, self.resize_layers)]
        size = max((x.shape[-2:] for x in feats), key=lambda s: s[0] * s[1])
        feats = [x if x.shape[-2:] == size else
                 F.interpolate(x, size=tuple(size), mode='bilinear', align_corners=False)
                 for x in feats]
        x = self.classifier(self.dropout(self.fuse(torch.cat(feats, dim=1))))
        return F.interpolate(x, size=tuple(image_size), mode='bilinear', align_corners=False)
