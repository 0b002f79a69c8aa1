# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Semantic segmentation metrics from an accumulated confusion matrix.

:class:`ConfusionMatrix` counts pixels: ``matrix[g, p]`` is the number of pixels of ground-truth
class ``g`` predicted as class ``p`` (rows = ground truth, columns = prediction). Pixels whose
ground truth equals ``ignore_index`` are not counted, whatever the prediction.

Metrics (the PASCAL VOC / Cityscapes / CamVid definitions, pooled over every pixel of every
image added, not averaged per image):

* ``IoU_c = TP_c / (TP_c + FP_c + FN_c)``; NaN for a class absent from both the ground truth
  and the prediction (0 / 0);
* ``mIoU``: mean of the per-class IoU over the classes that are NOT NaN, i.e. classes absent
  from both the ground truth and the prediction are excluded. A class predicted but never in
  the ground truth has IoU 0 and does count;
* pixel accuracy: ``trace / sum``; mean class accuracy: mean over the classes present in the
  ground truth of ``TP_c / (TP_c + FN_c)``.
"""

from __future__ import annotations

import numbers
from typing import Dict, Optional, Sequence

import numpy as np


#: Most classes a confusion matrix holds: label images are 8-bit class ids.
MAX_CLASSES = 256


class ConfusionMatrix:
    """Accumulate a ``(num_classes, num_classes)`` confusion matrix over many label images.

    Args:
        num_classes: number of classes; valid ids are ``0 .. num_classes - 1``.
        ignore_index: ground-truth id that is not scored (e.g. 255 for void, 11 for CamVid's
            'Unlabelled'); may lie inside or outside ``0 .. num_classes - 1``; None: none.
        class_names: optional names, one per class (for reports and plots).

    Raises:
        ValueError: ``num_classes`` outside [1, MAX_CLASSES], a non-integer ``ignore_index``
            or the wrong number of class names.
    """

    def __init__(self, num_classes: int, ignore_index: Optional[int] = 255,
                 class_names: Optional[Sequence[str]] = None):
        if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Real) \
                or int(num_classes) != num_classes or not 1 <= num_classes <= MAX_CLASSES:
            raise ValueError(f'num_classes must be an integer in [1, {MAX_CLASSES}], got '
                             f'{num_classes!r}')
        self.num_classes = int(num_classes)
        if ignore_index is not None and (isinstance(ignore_index, bool) or not isinstance(
                ignore_index, numbers.Real) or int(ignore_index) != ignore_index):
            raise ValueError(f'ignore_index must be an integer or None, got {ignore_index!r}')
        self.ignore_index = None if ignore_index is None else int(ignore_index)
        if isinstance(class_names, str):
            raise ValueError('class_names must be a sequence of names, not one string')
        if class_names is not None and len(class_names) != self.num_classes:
            raise ValueError(f'{len(class_names)} class names for {self.num_classes} classes')
        self.class_names = (tuple(str(n) for n in class_names) if class_names is not None
                            else tuple(str(i) for i in range(self.num_classes)))
        self.matrix = np.zeros((self.num_classes, self.num_classes), dtype=np.int64)

    def reset(self) -> None:
        """Zero the matrix."""
        self.matrix[:] = 0

    def update(self, pred, gt) -> None:
        """Add one (or a batch of) prediction / ground-truth label images.

        Args:
            pred: integer class ids, any shape (e.g. (H, W) or (B, H, W)); values at ignored
                pixels are not checked.
            gt: integer class ids of the same shape; ``ignore_index`` marks unscored pixels.

        Raises:
            ValueError: shapes differ, non-integer arrays, or ids outside
                ``0 .. num_classes - 1`` (other than ``ignore_index`` in ``gt``).
        """
        pred = np.asarray(pred)
        gt = np.asarray(gt)
        if pred.shape != gt.shape:
            raise ValueError(f'pred {pred.shape} and gt {gt.shape} differ in shape')
        for name, array in (('pred', pred), ('gt', gt)):
            if array.dtype.kind not in 'iub':
                raise ValueError(f'{name} must hold integer class ids, got dtype {array.dtype}')
        gt = gt.reshape(-1).astype(np.int64)
        pred = pred.reshape(-1).astype(np.int64)
        keep = gt != self.ignore_index if self.ignore_index is not None \
            else np.ones(gt.shape, bool)
        gt, pred = gt[keep], pred[keep]
        if gt.size == 0:
            return
        n = self.num_classes
        for name, array in (('gt', gt), ('pred', pred)):
            low, high = int(array.min()), int(array.max())
            if low < 0 or high >= n:
                raise ValueError(f'{name} ids must be in [0, {n}) (ignore_index '
                                 f'{self.ignore_index} excepted), got [{low}, {high}]')
        self.matrix += np.bincount(gt * n + pred, minlength=n * n).reshape(n, n)

    def merge(self, other: 'ConfusionMatrix') -> None:
        """Add the counts of another confusion matrix with the same number of classes."""
        if other.num_classes != self.num_classes:
            raise ValueError(f'cannot merge {other.num_classes} classes into '
                             f'{self.num_classes}')
        self.matrix += other.matrix

    @property
    def total(self) -> int:
        """Number of scored pixels."""
        return int(self.matrix.sum())

    def per_class_iou(self) -> np.ndarray:
        """Return (num_classes,) float64 IoU; NaN for classes absent from GT and prediction."""
        tp = np.diag(self.matrix).astype(np.float64)
        union = self.matrix.sum(0) + self.matrix.sum(1) - tp
        with np.errstate(invalid='ignore', divide='ignore'):
            return np.where(union > 0, tp / np.maximum(union, 1), np.nan)

    def miou(self) -> float:
        """Return the mean IoU over classes present in GT or prediction (NaN if none)."""
        iou = self.per_class_iou()
        return float(np.nanmean(iou)) if np.isfinite(iou).any() else float('nan')

    def pixel_accuracy(self) -> float:
        """Return correctly labelled / scored pixels (NaN when nothing was scored)."""
        total = self.total
        return float(np.trace(self.matrix) / total) if total else float('nan')

    def per_class_accuracy(self) -> np.ndarray:
        """Return (num_classes,) float64 recall ``TP / (TP + FN)``; NaN for classes not in GT."""
        tp = np.diag(self.matrix).astype(np.float64)
        support = self.matrix.sum(1)
        with np.errstate(invalid='ignore', divide='ignore'):
            return np.where(support > 0, tp / np.maximum(support, 1), np.nan)

    def mean_class_accuracy(self) -> float:
        """Return the mean recall over the classes present in the ground truth (NaN if none)."""
        acc = self.per_class_accuracy()
        return float(np.nanmean(acc)) if np.isfinite(acc).any() else float('nan')

    def normalized(self, by: str = 'gt') -> np.ndarray:
        """Return the matrix as float64 fractions, rows (``'gt'``) or columns (``'pred'``).

        Rows / columns without pixels are zeros.
        """
        if by not in ('gt', 'pred'):
            raise ValueError(f"by must be 'gt' or 'pred', got {by!r}")
        axis = 1 if by == 'gt' else 0
        sums = self.matrix.sum(axis=axis, keepdims=True).astype(np.float64)
        return np.divide(self.matrix, sums, out=np.zeros(self.matrix.shape), where=sums > 0)

    def summary(self) -> Dict[str, object]:
        """Return a JSON-able dict: mIoU, pixel and mean class accuracy, per-class IoU."""
        iou = self.per_class_iou()
        acc = self.per_class_accuracy()
        return {
            'miou': self.miou(),
            'pixel_accuracy': self.pixel_accuracy(),
            'mean_class_accuracy': self.mean_class_accuracy(),
            'num_pixels': self.total,
            'num_classes_scored': int(np.isfinite(iou).sum()),
            'per_class_iou': {name: float(v) for name, v in zip(self.class_names, iou)},
            'per_class_accuracy': {name: float(v) for name, v in zip(self.class_names, acc)},
        }
