# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Figures for dense evaluation: confusion matrix plot and input | prediction | GT strips.

matplotlib (Agg) is imported inside :func:`plot_confusion_matrix` only; the strips are plain
numpy / OpenCV images colourised with :mod:`relperception.imaging.colormap`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

import cv2
import numpy as np
from relperception.evaluation.report import pyplot, save_figure
from relperception.evaluation.segmentation import ConfusionMatrix
from relperception.imaging.colormap import (CAMVID_CLASS_NAMES, CAMVID_PALETTE, colorize_depth,
                                            colorize_labels)
from relperception.imaging.drawing import add_caption, depth_colour_bar, label_legend
from relperception.imaging.image_files import write_image

_SEPARATOR_PX = 4


def plot_confusion_matrix(path_png: Union[str, Path], confusion: ConfusionMatrix,
                          normalize: str = 'gt', title: Optional[str] = None,
                          annotate: Optional[bool] = None) -> Path:
    """Save the confusion matrix as a heat map (rows ground truth, columns prediction).

    Args:
        path_png: output PNG (parent folders are created).
        confusion: the accumulated :class:`ConfusionMatrix`.
        normalize: ``'gt'`` (each row sums to 1: recall), ``'pred'`` (each column: precision)
            or ``'none'`` (pixel counts).
        title: figure title; default states mIoU and pixel accuracy.
        annotate: write the value in each cell; default for at most 20 classes.

    Returns:
        the written path.

    Raises:
        ValueError: unknown ``normalize``.
    """
    if normalize not in ('gt', 'pred', 'none'):
        raise ValueError(f"normalize must be 'gt', 'pred' or 'none', got {normalize!r}")
    values = (confusion.matrix.astype(np.float64) if normalize == 'none'
              else confusion.normalized(normalize))
    n = confusion.num_classes
    annotate = n <= 20 if annotate is None else bool(annotate)
    if title is None:
        title = (f'mIoU {100 * confusion.miou():.1f} %, pixel accuracy '
                 f'{100 * confusion.pixel_accuracy():.1f} %, {confusion.total} pixels')
    plt = pyplot()
    size = max(4.0, 0.45 * n + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    try:
        image = ax.imshow(values, cmap='Blues', vmin=0.0,
                          vmax=1.0 if normalize != 'none' else None)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.set_xticklabels(confusion.class_names, rotation=60, ha='right')
        ax.set_yticklabels(confusion.class_names)
        ax.set_xlabel('prediction')
        ax.set_ylabel('ground truth')
        if annotate:
            top = values.max() if values.size else 0.0
            for g in range(n):
                for p in range(n):
                    v = values[g, p]
                    text = f'{v:.2f}' if normalize != 'none' else f'{int(v)}'
                    ax.text(p, g, text, ha='center', va='center', fontsize=7,
                            color='white' if top > 0 and v > 0.5 * top else 'black')
        return save_figure(fig, title, path_png)
    finally:
        plt.close(fig)


def _as_rgb(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim not in (2, 3) or \
            (image.ndim == 3 and image.shape[2] != 3):
        raise ValueError(f'image must be (H, W) or (H, W, 3) uint8, got {image.dtype} of shape '
                         f'{image.shape}')
    return cv2.cvtColor(image, cv2.COLOR_GRAY2RGB) if image.ndim == 2 else image


def sample_strip(image: np.ndarray, prediction: np.ndarray, ground_truth: np.ndarray,
                 kind: str = 'labels', palette: Optional[np.ndarray] = None,
                 depth_range: Optional[Sequence[float]] = None,
                 path_png: Union[str, Path, None] = None, caption: Optional[str] = None,
                 class_names: Optional[Sequence[str]] = None) -> np.ndarray:
    """Return (and optionally save) one image ``input | prediction | ground truth``.

    With a ``caption`` the figure is annotated: a title bar (the caption, then the panel
    names), a depth colour bar in metres on the right (``kind='depth'``) or a legend of the
    classes present below (``kind='labels'``, names from ``class_names``, default the CamVid
    classes).

    Args:
        image: (H, W, 3) uint8 RGB or (H, W) uint8 grey input image.
        prediction: (H, W) integer labels (``kind='labels'``) or float depth in metres
            (``kind='depth'``).
        ground_truth: same kind and shape as ``prediction``; ignored labels (e.g. 255) are
            coloured by the palette (255 is black in the default palette), invalid depth black.
        kind: ``'labels'`` or ``'depth'``.
        palette: (N, 3) uint8 label colours (default ``CAMVID_PALETTE``).
        depth_range: (min_m, max_m) shared by prediction and ground truth; default the 2nd and
            98th percentiles of the valid ground truth (of the prediction if the ground truth
            has no valid pixel).
        path_png: also write the strip there (parent folders are created).

    Returns:
        (H, 3 * W + 2 * 4, 3) uint8 RGB strip (white 4-pixel separators); with a caption,
        taller and wider by the annotations.

    Raises:
        ValueError: bad ``kind`` or shapes that differ.
    """
    if kind not in ('labels', 'depth'):
        raise ValueError(f"kind must be 'labels' or 'depth', got {kind!r}")
    rgb = _as_rgb(image)
    shape = rgb.shape[:2]
    prediction = np.asarray(prediction)
    ground_truth = np.asarray(ground_truth)
    if prediction.shape != shape or ground_truth.shape != shape:
        raise ValueError(f'image {shape}, prediction {prediction.shape} and ground truth '
                         f'{ground_truth.shape} must have the same (H, W)')
    if kind == 'labels':
        pred_rgb = colorize_labels(prediction, palette)
        gt_rgb = colorize_labels(ground_truth, palette)
    else:
        if depth_range is None:
            reference = ground_truth.astype(np.float32)
            with np.errstate(invalid='ignore'):
                ok = np.isfinite(reference) & (reference > 0)
            if not ok.any():
                reference = prediction.astype(np.float32)
                with np.errstate(invalid='ignore'):
                    ok = np.isfinite(reference) & (reference > 0)
            if ok.any():
                low, high = np.percentile(reference[ok], (2.0, 98.0))
                depth_range = (float(low), float(max(high, low + 1e-6)))
        low, high = depth_range if depth_range is not None else (None, None)
        pred_rgb = colorize_depth(prediction, low, high)
        gt_rgb = colorize_depth(ground_truth, low, high)
    separator = np.full((shape[0], _SEPARATOR_PX, 3), 255, np.uint8)
    strip = np.concatenate([rgb, separator, pred_rgb, separator, gt_rgb], axis=1)
    if caption is not None:
        strip = _annotate(strip, caption, kind, prediction, ground_truth, palette,
                          depth_range if kind == 'depth' else None, class_names)
    if path_png is not None:
        write_image(path_png, strip)
    return strip


def _annotate(strip: np.ndarray, caption: str, kind: str, prediction: np.ndarray,
              ground_truth: np.ndarray, palette: Optional[np.ndarray],
              depth_range: Optional[Sequence[float]],
              class_names: Optional[Sequence[str]]) -> np.ndarray:
    """Add the caption bar, and the depth colour bar or the class legend, to a strip."""
    height = strip.shape[0]
    if kind == 'depth' and depth_range is not None and height >= 40:
        bar = depth_colour_bar(height, float(depth_range[0]), float(depth_range[1]))
        strip = np.concatenate([strip, bar], axis=1)
    elif kind == 'labels' and strip.shape[1] >= 100:
        names = list(class_names) if class_names else list(CAMVID_CLASS_NAMES)
        present = np.union1d(np.unique(prediction), np.unique(ground_truth))
        legend = label_legend(names, CAMVID_PALETTE if palette is None else palette,
                              strip.shape[1], present=[int(i) for i in present])
        strip = np.concatenate([strip, legend], axis=0)
    panels = ('input | prediction | ground truth' if kind == 'labels'
              else 'input | predicted depth | ground-truth depth (black: no value)')
    return add_caption(strip, [caption, panels])
