# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Multi-scale backbones behind one interface.

Every backbone is an ``nn.Module`` with

* ``forward(image (B, 3, H, W)) -> List[(B, C_i, H_i, W_i)]`` feature maps (one per
  ``out_indices`` entry) and ``forward_with_tokens(image) -> (maps, class_tokens or None)``;
* ``out_channels`` (C_i), ``strides`` (H / H_i), ``stride`` (coarsest stride) and
  ``size_multiple``: input sides must be multiples of it (ViT: the patch size; ResNet: 1);
* ``has_class_token``: whether ``forward_with_tokens`` returns class tokens (ViT).

``build_backbone(conf)`` picks the class from ``conf['name']``: ``resnet`` (``depth`` 18/34/50,
``width``) or the shortcuts ``resnet18``/``resnet34``/``resnet50``; ``vit`` (all sizes from the
conf) or ``vit_s``/``vit_b`` (ViT-S: 384 dims, 6 heads; ViT-B: 768 dims, 12 heads; 12 blocks).
"""

from __future__ import annotations

from typing import Any, Dict

from relperception.models.backbones.resnet import ResNet
from relperception.models.backbones.vit import VisionTransformer
from torch import nn

#: Shortcut names -> conf entries they imply.
_ALIASES = {
    'resnet18': ('resnet', {'depth': 18}),
    'resnet34': ('resnet', {'depth': 34}),
    'resnet50': ('resnet', {'depth': 50}),
    'vit_s': ('vit', {'embed_dim': 384, 'num_heads': 6, 'depth': 12}),
    'vit_b': ('vit', {'embed_dim': 768, 'num_heads': 12, 'depth': 12}),
}

_CLASSES = {'resnet': ResNet, 'vit': VisionTransformer}


def build_backbone(conf: Dict[str, Any]) -> nn.Module:
    """Build a backbone from its conf.

    Args:
        conf: ``{'name': ..., **options}``; options override the alias defaults and the class
            ``default_conf``.

    Returns:
        The backbone module.

    Raises:
        ValueError: unknown name or invalid options.
    """
    conf = dict(conf)
    name = conf.get('name')
    if name in _ALIASES:
        family, implied = _ALIASES[name]
        conf = {**implied, **conf, 'name': family}
        name = family
    if name not in _CLASSES:
        raise ValueError(f'unknown backbone {name!r}; choose one of '
                         f'{sorted(_CLASSES) + sorted(_ALIASES)}')
    return _CLASSES[name](conf)


__all__ = ['build_backbone', 'ResNet', 'VisionTransformer']
