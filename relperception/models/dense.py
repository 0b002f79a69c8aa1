# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Dense perception model: one backbone, a DPT depth head and a segmentation head.

``DenseModel(conf)`` follows the LightGlue convention: ``default_conf`` is deep-merged with the
user conf (a head set to ``None`` is not built). Both heads read the same list of backbone
feature maps, selected by ``backbone.out_indices`` (ResNet stages or ViT blocks).

Input of ``forward``: ``image`` (B, 3, H, W) float32, normalised with the preset's mean/std
(see ``relperception.models.preprocess``), H and W multiples of ``backbone.size_multiple``.
Output dict (all at the input resolution H x W):

* ``depth`` (B, 1, H, W) float32: metres when ``depth_mode == 'metric'`` (sigmoid *
  ``max_depth``), else relative inverse depth (>= 0, larger = closer, unknown scale and shift);
  only if a depth head exists.
* ``logits`` (B, num_classes, H, W) float32: only if a segmentation head exists.

Module names: ``backbone`` (DINOv2 / torchvision names), ``depth_head`` (Depth Anything V2's
``DPTHead`` names) and ``segmentation_head``; a Depth Anything V2 state dict therefore loads
with the key map ``{'pretrained.': 'backbone.'}`` (the presets carry it).

A model conf with ``architecture: fast_seg`` builds
:class:`relperception.models.fast_seg.FastSegModel` instead (same calls and outputs);
:func:`build_dense_model` picks the class (:data:`ARCHITECTURES`).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

from relperception.models.backbones import build_backbone
from relperception.models.fast_seg import FastSegModel
from relperception.models.heads.dpt import DPTHead
from relperception.models.heads.segmentation import SegmentationHead
from relperception.models.preprocess import check_network_input
from relperception.models.presets import deep_merge
from relperception.models.weights import load_weights, shipped_weights
import torch
from torch import nn

_LOGGER = logging.getLogger(__name__)

#: DPT resize factors for backbones whose outputs all have one stride (ViT): strides p/4 .. 2p.
VIT_RESIZE_FACTORS = [4, 2, 1, 0.5]


class DenseModel(nn.Module):
    """Backbone + optional depth and segmentation heads (see the module docstring)."""

    default_conf: Dict[str, Any] = {
        'backbone': {'name': 'resnet18', 'width': 0.25, 'out_indices': [1, 2, 3, 4]},
        'depth_mode': 'metric',      # metric (metres) | relative (inverse depth)
        'max_depth': 80.0,           # metric only: depth = sigmoid * max_depth (m)
        'heads': {
            'depth': {
                'features': 64,
                'out_channels': None,    # None: backbone channels (conv) / D/8..D (ViT)
                'resize_factors': None,  # None: [1]*4 (multi-scale backbone) / [4,2,1,.5] (ViT)
                'use_bn': False,
                'use_clstoken': False,
                'head_features': 32,
            },
            'segmentation': {
                'num_classes': 11,
                'features': 64,
                'inputs': [0, 1, 2, 3],
                'resize_factors': None,  # None: as the depth head, for the used inputs
                'dropout': 0.1,
            },
        },
    }

    def __init__(self, conf: Optional[Dict[str, Any]] = None):
        """Build the model from ``conf`` deep-merged over ``default_conf``.

        Raises:
            ValueError: invalid backbone/head options, no head, or unknown depth_mode.
        """
        super().__init__()
        self.conf = conf = deep_merge(self.default_conf, conf)
        if conf['depth_mode'] not in ('metric', 'relative'):
            raise ValueError(f"depth_mode must be 'metric' or 'relative', "
                             f'got {conf["depth_mode"]!r}')
        self.backbone = build_backbone(conf['backbone'])
        channels = list(self.backbone.out_channels)
        single_scale = len(set(self.backbone.strides)) == 1
        default_factors = VIT_RESIZE_FACTORS if single_scale else [1] * len(channels)
        heads = conf.get('heads') or {}
        if not heads.get('depth') and not heads.get('segmentation'):
            raise ValueError('DenseModel needs at least one head (heads.depth or '
                             'heads.segmentation)')
        self.depth_head = None
        self.segmentation_head = None
        if heads.get('depth'):
            dconf = dict(heads['depth'])
            if dconf.get('out_channels') is None:
                dim = channels[-1]
                dconf['out_channels'] = ([dim // 8, dim // 4, dim // 2, dim] if single_scale
                                         else channels)
            if dconf.get('resize_factors') is None:
                dconf['resize_factors'] = default_factors
            if dconf.get('use_clstoken') and not self.backbone.has_class_token:
                raise ValueError('heads.depth.use_clstoken needs a backbone with class tokens '
                                 f'(a ViT), not {conf["backbone"].get("name")!r}')
            max_depth = float(conf['max_depth'])
            if conf['depth_mode'] == 'metric' and not (math.isfinite(max_depth)
                                                       and max_depth > 0):
                raise ValueError(f'max_depth must be finite and > 0 (metres), got '
                                 f'{conf["max_depth"]!r}')
            dconf.update(in_channels=channels, depth_mode=conf['depth_mode'],
                         max_depth=max_depth)
            self.depth_head = DPTHead(dconf)
        if heads.get('segmentation'):
            sconf = dict(heads['segmentation'])
            inputs = [int(i) for i in sconf.get('inputs', range(len(channels)))]
            if sconf.get('resize_factors') is None:
                sconf['resize_factors'] = [default_factors[i] for i in inputs]
            sconf.update(in_channels=channels, inputs=inputs)
            self.segmentation_head = SegmentationHead(sconf)
        self.size_multiple = self.backbone.size_multiple
        self.num_classes = (int(self.segmentation_head.conf['num_classes'])
                            if self.segmentation_head is not None else 0)

    def forward(self, image: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Return ``{'depth': (B,1,H,W), 'logits': (B,K,H,W)}`` (see the module docstring)."""
        size = check_network_input(image, self.size_multiple, 'this backbone')
        need_tokens = self.depth_head is not None and self.depth_head.use_clstoken
        if need_tokens:
            maps, tokens = self.backbone.forward_with_tokens(image)
        else:
            maps, tokens = self.backbone(image), None
        out = {}
        if self.depth_head is not None:
            out['depth'] = self.depth_head(maps, size, tokens)
        if self.segmentation_head is not None:
            out['logits'] = self.segmentation_head(maps, size)
        return out


#: ``model.architecture`` -> model class (no entry: ``dense``).
ARCHITECTURES = {'dense': DenseModel, 'fast_seg': FastSegModel}


def build_dense_model(conf: Mapping[str, Any],
                      weights: Union[None, str, Path, Mapping[str, torch.Tensor]] = None,
                      strict: bool = True) -> DenseModel:
    """Build a ``DenseModel`` and optionally load weights.

    Args:
        conf: a model config from ``load_model_config`` (its ``model`` entry is used, and its
            ``key_map`` renames foreign weights, e.g. Depth Anything V2's ``pretrained.``) or a
            plain ``DenseModel`` conf.
        weights: ``None`` (random initialisation), a weights file or state dict, or
            ``'shipped'`` for the package's weights named by the config's ``weights`` entry.
        strict: passed to ``load_weights``.

    Returns:
        The model (a :class:`DenseModel`, or the class its ``architecture`` names, see
        :data:`ARCHITECTURES`) in eval mode when weights were loaded, else in train mode.

    Raises:
        ValueError: invalid conf, unknown architecture or weights that do not fit (names the
            keys).
        FileNotFoundError: missing weights file or no shipped weights.
    """
    model_conf = dict(conf['model'] if 'model' in conf else conf)
    architecture = model_conf.get('architecture', 'dense')
    if architecture not in ARCHITECTURES:
        raise ValueError(f'unknown model architecture {architecture!r}; choose one of '
                         f'{sorted(ARCHITECTURES)}')
    model = ARCHITECTURES[architecture](model_conf)
    if weights is None:
        return model
    if isinstance(weights, str) and weights == 'shipped':
        name = conf.get('weights') or conf.get('name')
        if not name:
            raise ValueError("weights='shipped' needs a config with a 'weights' or 'name' entry")
        weights = shipped_weights(name)
    load_weights(model, weights, key_map=conf.get('key_map'), strict=strict)
    _LOGGER.info('loaded dense model weights from %s',
                 weights if isinstance(weights, (str, Path)) else 'a state dict')
    return model.eval()


def load_backbone_weights(model: DenseModel, path: Union[str, Path],
                          key_map: Optional[Mapping[str, Any]] = None) -> DenseModel:
    """Load backbone-only weights (torchvision ResNet or DINOv2 file) into ``model.backbone``.

    Args:
        model: the dense model.
        path: weights file with backbone names (``conv1.weight``, ``blocks.0.attn.qkv.weight``).
        key_map: renaming; default drops torchvision's classifier (``fc.``) and DINOv2's
            ``head.``.

    Returns:
        ``model``.
    """
    load_weights(model.backbone, path, key_map=key_map or {'fc.': None, 'head.': None})
    return model
