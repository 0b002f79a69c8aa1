# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Dense perception models (depth + semantic segmentation) and safe weight handling.

* ``weights``: safe loading/checking/saving of weights, shipped-weights manifest.
* ``backbones``: ResNet (torchvision names) and ViT (DINOv2 names) multi-scale backbones.
* ``heads``: DPT depth head (Depth Anything V2 names) and a segmentation head.
* ``fast_seg``: ``FastSegModel``, a real-time CPU segmentation network with a light depth
  head (preset ``fast_seg``; with self-attention at stride 16, the hybrid ViT ``vit_hybrid``),
  built by ``build_dense_model`` like ``DenseModel``.
* ``dense``: ``DenseModel``/``build_dense_model``; ``presets``: ``load_model_config``;
  ``preprocess``: ``prepare_image``/``resize_output``.
"""
