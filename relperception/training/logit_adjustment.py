# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Post-hoc logit adjustment of a segmentation head trained with class weights.

Cross entropy with class weights ``w`` (``train seg --class-weights median``, the default)
learns scores whose softmax is proportional to ``w_c * p(c | x)``: the weights help the rare
classes get learned, but the trained decision then prefers them everywhere, at the expense of
the frequent ones (on CamVid: Pole, SignSymbol, Pedestrian spill into Building, Tree and Road).
Subtracting ``tau * log(w_c)`` from the logits removes that preference (``tau = 1`` exactly, in
theory; Menon et al., "Long-tail learning via logit adjustment", ICLR 2021, post-hoc form).

Because the classifier of both segmentation heads is a 1x1 convolution followed by bilinear
up-sampling (whose weights sum to one), a per-class constant added to the logits is the same as
a change of the classifier's bias: :func:`fold_logit_offsets` writes it there, so the adjusted
weights run at exactly the same cost, in torch and in every export.

:func:`score_logit_offsets` scores several offsets with one forward pass per image, so ``tau``
can be chosen on validation data (``relperception train seg-adjust``).
"""

from __future__ import annotations

from typing import Dict, Hashable, Mapping, Sequence

import numpy as np
import torch

#: ``tau`` values ``train seg-adjust`` scores when none is given (0: the weights as trained).
DEFAULT_TAUS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5)


def logit_offsets(class_weights: Sequence[float], tau: float) -> np.ndarray:
    """Return the per-class logit offsets ``-tau * log(w_c)`` of class weights.

    Args:
        class_weights: (C,) non-negative loss weights the head was trained with; a class of
            weight 0 (absent from the training labels) gets offset 0.
        tau: strength in [0, 10]; 0 leaves the logits as trained, 1 removes the weights'
            preference completely.

    Returns:
        (C,) float32 offsets to add to the logits.

    Raises:
        ValueError: weights not a finite non-negative 1-D vector with a positive entry, or
            ``tau`` out of range.
    """
    weights = np.asarray(class_weights, dtype=np.float64)
    if weights.ndim != 1 or weights.size == 0 or not np.all(np.isfinite(weights)) \
            or (weights < 0).any() or not (weights > 0).any():
        raise ValueError('class weights must be a 1-D vector of finite non-negative values '
                         f'with a positive one, got {np.asarray(class_weights).tolist()}')
    tau = float(tau)
    if not 0.0 <= tau <= 10.0:
        raise ValueError(f'tau must be in [0, 10], got {tau}')
    offsets = np.zeros_like(weights)
    present = weights > 0
    offsets[present] = -tau * np.log(weights[present])
    return offsets.astype(np.float32)


def _classifier(model: torch.nn.Module) -> torch.nn.Conv2d:
    """Return the 1x1 convolution that produces the logits of ``model``'s segmentation head."""
    head = getattr(model, 'segmentation_head', None)
    classifier = getattr(head, 'classifier', None)
    if not isinstance(classifier, torch.nn.Conv2d) or classifier.bias is None \
            or classifier.kernel_size != (1, 1):
        raise ValueError('the model has no segmentation head ending in a 1x1 convolution with '
                         'a bias (segmentation_head.classifier)')
    return classifier


def fold_logit_offsets(model: torch.nn.Module, offsets: Sequence[float]) -> None:
    """Add per-class offsets to the segmentation logits of ``model`` in place (classifier bias).

    Args:
        model: a dense model whose ``segmentation_head.classifier`` is a 1x1 ``Conv2d`` with a
            bias (the ``SegmentationHead`` and ``FastSegHead`` of this package).
        offsets: (C,) values added to the logits, C the number of classes.

    Raises:
        ValueError: no such classifier, or ``offsets`` of the wrong length or not finite.
    """
    classifier = _classifier(model)
    values = torch.as_tensor(np.asarray(offsets, dtype=np.float32))
    if values.shape != classifier.bias.shape or not torch.isfinite(values).all():
        raise ValueError(f'offsets must be {tuple(classifier.bias.shape)} finite values, got '
                         f'{tuple(values.shape)}')
    with torch.no_grad():
        classifier.bias.add_(values.to(classifier.bias))


def score_logit_offsets(model: torch.nn.Module, images: Sequence[np.ndarray],
                        labels: Sequence[np.ndarray], model_conf: dict,
                        offsets: Mapping[Hashable, Sequence[float]], device='cpu'
                        ) -> Dict[Hashable, Dict[str, float]]:
    """Score the segmentation of ``model`` with each set of logit offsets, one pass per image.

    Args:
        model: a dense model with a segmentation head.
        images: (H, W, 3) uint8 RGB images.
        labels: (H, W) class-id images (``ignore_index`` of the config unscored).
        model_conf: the model config (``load_model_config``).
        offsets: ``{key: (C,) offsets}``, e.g. ``{tau: logit_offsets(weights, tau)}``.
        device: torch device of ``model``.

    Returns:
        ``{key: metrics}`` with the keys of ``training.dense_data.evaluate_segmentation``
        (``miou``, ``pixel_accuracy``, ``mean_class_accuracy``, ``iou/<class>``).

    Raises:
        ValueError: no offsets, offsets of the wrong length, or images and labels differ in
            number.
    """
    from relperception.evaluation.segmentation import ConfusionMatrix
    from relperception.training.dense_data import predict_dense, segmentation_summary

    if not offsets:
        raise ValueError('give at least one set of offsets')
    if len(images) != len(labels):
        raise ValueError(f'{len(images)} images but {len(labels)} labels')
    classes = int(model.num_classes)
    table = {}
    for key, value in offsets.items():
        value = torch.as_tensor(np.asarray(value, dtype=np.float32))
        if value.shape != (classes,):
            raise ValueError(f'offsets {key!r} must have {classes} values, got '
                             f'{tuple(value.shape)}')
        table[key] = value.view(classes, 1, 1)
    names = model_conf.get('class_names') or None
    ignore = model_conf.get('ignore_index', 255)
    matrices = {key: ConfusionMatrix(classes, ignore, names) for key in table}
    for image, label in zip(images, labels):
        logits = torch.from_numpy(predict_dense(model, image, model_conf, device,
                                                logits=True)['logits'])
        for key, value in table.items():
            matrices[key].update((logits + value).argmax(0).numpy().astype(np.uint8), label)
    return {key: segmentation_summary(matrix) for key, matrix in matrices.items()}
