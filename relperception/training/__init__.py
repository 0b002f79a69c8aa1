# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Training: the generic :class:`~relperception.training.loop.Trainer` and the dense tasks.

Modules (imported on first use, so ``import relperception.training`` stays light):

* :mod:`~relperception.training.loop` -- ``Trainer`` (AdamW, warm-up + cosine/poly schedule,
  gradient clipping, tqdm progress, checkpoints loadable with ``weights_only=True``, resume,
  time budget, safetensors export), ``seed_everything``, ``item_rng``, ``lr_factor``.
* :mod:`~relperception.training.augment` -- paired image/label/depth augmentation.
* :mod:`~relperception.training.dense_data` -- CamVid-layout folders, RGB-D bags and synthetic
  scenes as training datasets.
* :mod:`~relperception.training.dense_losses` -- cross entropy, SILog + L1 depth losses, mIoU.
* :mod:`~relperception.training.homography`, :mod:`~relperception.training.scene_pairs`,
  :mod:`~relperception.training.loftr_losses`, :mod:`~relperception.training.matcher_train`
  -- LoFTR matcher training: homography pairs, synthetic 3-D scene pairs with depth-warp
  ground truth, negative pairs, LoFTR's losses and ``train matcher``.
"""

from __future__ import annotations

from importlib import import_module

_LAZY = {'Trainer': 'loop', 'FitResult': 'loop', 'seed_everything': 'loop', 'item_rng': 'loop',
         'lr_factor': 'loop'}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f'{__name__}.{_LAZY[name]}'), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
