# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Drawings for topics and reports: correspondences, captions, colour bars and legends.

* :func:`draw_matches`: correspondences on the newer image (the ``matches_image`` topic);
* :func:`draw_match_pair`: both images side by side, lines coloured by correctness (green
  right / inlier, red wrong / outlier) as LightGlue's and kornia's drawings, with a title;
* :func:`add_caption`, :func:`depth_colour_bar`, :func:`label_legend`: the parts of
  captioned report figures (plain OpenCV drawing, no matplotlib).
"""

from __future__ import annotations

from typing import Optional, Sequence

import cv2
import numpy as np
from relperception.core_types import Matches

#: RGB colours of right (inlier) and wrong (outlier) correspondences.
RIGHT_RGB = (40, 200, 40)
WRONG_RGB = (230, 40, 40)
_FONT = cv2.FONT_HERSHEY_SIMPLEX
_GAP_PX = 8


def draw_matches(image1: np.ndarray, matches: Matches) -> np.ndarray:
    """Draw correspondences on the newer image.

    Args:
        image1: (H, W) uint8 grey newer image.
        matches: correspondences older -> newer in pixels; each is drawn as a line from
            ``keypoints0`` to ``keypoints1`` with a dot at ``keypoints1``, coloured by
            ``confidence`` (turbo colour map: blue = 0, red = 1).

    Returns:
        (H, W, 3) uint8 RGB image.

    Raises:
        ValueError: ``image1`` is not (H, W) uint8.
    """
    if not isinstance(image1, np.ndarray) or image1.dtype != np.uint8 or image1.ndim != 2:
        raise ValueError('image1 must be an (H, W) uint8 array')
    canvas = cv2.cvtColor(image1, cv2.COLOR_GRAY2BGR)
    if len(matches):
        levels = np.clip(np.nan_to_num(matches.confidence) * 255.0, 0, 255).astype(np.uint8)
        colours = cv2.applyColorMap(levels.reshape(-1, 1), cv2.COLORMAP_TURBO).reshape(-1, 3)
        finite = np.isfinite(matches.keypoints0).all(1) & np.isfinite(matches.keypoints1).all(1)
        start = np.rint(matches.keypoints0).astype(np.int64)
        end = np.rint(matches.keypoints1).astype(np.int64)
        for i in np.flatnonzero(finite):
            colour = tuple(int(c) for c in colours[i])
            p0 = (int(start[i, 0]), int(start[i, 1]))
            p1 = (int(end[i, 0]), int(end[i, 1]))
            cv2.line(canvas, p0, p1, colour, 1, cv2.LINE_AA)
            cv2.circle(canvas, p1, 2, colour, -1, cv2.LINE_AA)
    return cv2.cvtColor(canvas, cv2.COLOR_BGR2RGB)


def _rgb(image: np.ndarray, name: str) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim not in (2, 3) or image.size == 0 or \
            (image.ndim == 3 and image.shape[2] != 3):
        raise ValueError(f'{name} must be a non-empty (H, W) or (H, W, 3) uint8 array, got '
                         f'{image.dtype} of shape {image.shape}')
    return cv2.cvtColor(image, cv2.COLOR_GRAY2RGB) if image.ndim == 2 else image.copy()


def draw_match_pair(image0: np.ndarray, image1: np.ndarray, matches: Matches,
                    correct: Optional[np.ndarray] = None, title: str = '',
                    max_lines: int = 500,
                    names: Sequence[str] = ('right', 'wrong')) -> np.ndarray:
    """Draw two images side by side with a line per correspondence and a title bar.

    Args:
        image0: (H0, W0) uint8 grey or (H0, W0, 3) uint8 RGB image 0 (left).
        image1: (H1, W1) uint8 grey or (H1, W1, 3) uint8 RGB image 1 (right).
        matches: correspondences in pixels of image 0 -> image 1.
        correct: optional (N,) bool: True draws green (right / inlier), False red (wrong /
            outlier). Without it lines are coloured by confidence (turbo: blue 0, red 1).
        title: first line of the title bar; the second line gives the counts.
        max_lines: at most this many lines are drawn (evenly spaced), the counts are exact.
        names: what green and red mean in the counts line (e.g. ``('inliers', 'outliers')``).

    Returns:
        (max(H0, H1) + title height, W0 + 8 + W1, 3) uint8 RGB image.

    Raises:
        ValueError: bad images, ``correct`` of the wrong length, ``max_lines < 1``.
    """
    left, right = _rgb(image0, 'image0'), _rgb(image1, 'image1')
    count = len(matches)
    if correct is not None:
        correct = np.asarray(correct, dtype=bool).reshape(-1)
        if len(correct) != count:
            raise ValueError(f'correct has {len(correct)} entries for {count} matches')
    if int(max_lines) < 1:
        raise ValueError(f'max_lines must be >= 1, got {max_lines}')
    height = max(left.shape[0], right.shape[0])
    offset = left.shape[1] + _GAP_PX
    canvas = np.full((height, offset + right.shape[1], 3), 255, np.uint8)
    canvas[:left.shape[0], :left.shape[1]] = left
    canvas[:right.shape[0], offset:] = right
    if count:
        if correct is None:
            levels = np.clip(np.nan_to_num(matches.confidence) * 255.0, 0, 255).astype(np.uint8)
            colours = cv2.applyColorMap(levels.reshape(-1, 1), cv2.COLORMAP_TURBO)
            colours = colours.reshape(-1, 3)[:, ::-1]
        else:
            colours = np.where(correct[:, None], RIGHT_RGB, WRONG_RGB)
        finite = np.isfinite(matches.keypoints0).all(1) & np.isfinite(matches.keypoints1).all(1)
        shown = np.flatnonzero(finite)
        if len(shown) > max_lines:
            shown = shown[np.linspace(0, len(shown) - 1, int(max_lines)).astype(int)]
        if correct is not None:   # wrong ones on top: they are what a reader looks for
            shown = shown[np.argsort(correct[shown], kind='stable')[::-1]]
        start = np.rint(matches.keypoints0).astype(np.int64)
        end = np.rint(matches.keypoints1).astype(np.int64) + [offset, 0]
        for i in shown:
            colour = tuple(int(c) for c in colours[i])
            p0, p1 = (int(start[i, 0]), int(start[i, 1])), (int(end[i, 0]), int(end[i, 1]))
            cv2.line(canvas, p0, p1, colour, 1, cv2.LINE_AA)
            cv2.circle(canvas, p0, 2, colour, -1, cv2.LINE_AA)
            cv2.circle(canvas, p1, 2, colour, -1, cv2.LINE_AA)
    if correct is None:
        counts = f'{count} matches, coloured by confidence (blue 0 .. red 1)'
    else:
        right_count = int(np.count_nonzero(correct))
        counts = (f'{count} matches: {right_count} {names[0]} (green), '
                  f'{count - right_count} {names[1]} (red)')
    return add_caption(canvas, [title, counts] if title else [counts])


def add_caption(image: np.ndarray, lines: Sequence[str]) -> np.ndarray:
    """Return ``image`` with a white title bar holding ``lines`` of black text above it.

    Args:
        image: (H, W, 3) uint8 RGB or (H, W) uint8 grey.
        lines: text lines (ASCII; others are replaced by '?').

    Returns:
        (H + bar, W, 3) uint8 RGB image.

    Raises:
        ValueError: ``image`` is not uint8 (H, W) or (H, W, 3).
    """
    image = _rgb(image, 'image')
    width = image.shape[1]
    scale = float(np.clip(width / 1400.0, 0.4, 0.7))
    line_px = int(round(28 * scale / 0.6))
    bar = np.full((line_px * len(lines) + line_px // 3, width, 3), 255, np.uint8)
    for row, text in enumerate(lines):
        text = str(text).encode('ascii', 'replace').decode('ascii')
        cv2.putText(bar, text, (6, line_px * (row + 1) - line_px // 4), _FONT, scale,
                    (0, 0, 0), 1, cv2.LINE_AA)
    return np.concatenate([bar, image], axis=0)


def depth_colour_bar(height: int, min_m: float, max_m: float, width: int = 90) -> np.ndarray:
    """Return a vertical turbo colour bar for depth images, labelled in metres.

    Near (``min_m``) is at the bottom, blue; far (``max_m``) at the top, red, as
    :func:`relperception.imaging.colormap.colorize_depth` colours them.

    Args:
        height: bar height in pixels (>= 40).
        min_m: depth of the first colour, metres.
        max_m: depth of the last colour, metres (> ``min_m``).
        width: total width in pixels, ramp and labels (>= 40).

    Returns:
        (height, width, 3) uint8 RGB image.

    Raises:
        ValueError: bad sizes or range.
    """
    if int(height) < 40 or int(width) < 40:
        raise ValueError(f'height and width must be >= 40 px, got {height}, {width}')
    if not (np.isfinite(min_m) and np.isfinite(max_m) and max_m > min_m):
        raise ValueError(f'need finite min_m < max_m, got {min_m}, {max_m}')
    height, width = int(height), int(width)
    bar = np.full((height, width, 3), 255, np.uint8)
    margin = 10
    ramp = np.linspace(255, 0, height - 2 * margin).astype(np.uint8).reshape(-1, 1)
    colours = cv2.applyColorMap(ramp, cv2.COLORMAP_TURBO)[:, :, ::-1]
    bar[margin:height - margin, 2:14] = colours
    for fraction in (0.0, 0.5, 1.0):
        value = max_m - fraction * (max_m - min_m)
        y = int(margin + fraction * (height - 2 * margin - 1))
        cv2.putText(bar, f'{value:.3g} m', (17, y + 4), _FONT, 0.45, (0, 0, 0), 1,
                    cv2.LINE_AA)
    return bar


def label_legend(class_names: Sequence[str], palette: np.ndarray, width: int,
                 present: Optional[Sequence[int]] = None) -> np.ndarray:
    """Return a legend strip: a colour swatch and the name of each class.

    Args:
        class_names: name of class id i at position i.
        palette: (>= N, 3) uint8 RGB colours indexed by class id.
        width: legend width in pixels (>= 100).
        present: class ids to list (default all).

    Returns:
        (rows * 20 + 6, width, 3) uint8 RGB image.

    Raises:
        ValueError: empty names, a palette too short, a bad width.
    """
    palette = np.asarray(palette)
    if not len(class_names) or palette.ndim != 2 or palette.shape[1] != 3 \
            or len(palette) < len(class_names):
        raise ValueError('need class names and an (N, 3) palette with a colour for each')
    if int(width) < 100:
        raise ValueError(f'width must be >= 100 px, got {width}')
    ids = list(range(len(class_names))) if present is None else \
        [int(i) for i in present if 0 <= int(i) < len(class_names)]
    cell = 130
    per_row = max(1, int(width) // cell)
    rows = max(1, -(-len(ids) // per_row))
    legend = np.full((rows * 20 + 6, int(width), 3), 255, np.uint8)
    for k, class_id in enumerate(ids):
        x, y = (k % per_row) * cell + 4, (k // per_row) * 20 + 4
        colour = tuple(int(c) for c in palette[class_id])
        cv2.rectangle(legend, (x, y), (x + 14, y + 14), colour, -1)
        cv2.rectangle(legend, (x, y), (x + 14, y + 14), (0, 0, 0), 1)
        name = str(class_names[class_id]).encode('ascii', 'replace').decode('ascii')
        cv2.putText(legend, name[:16], (x + 19, y + 12), _FONT, 0.4, (0, 0, 0), 1,
                    cv2.LINE_AA)
    return legend
