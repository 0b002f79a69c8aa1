# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Relation maps made visible: NCC correlation surfaces and attention maps as RGB images.

Both matchers of this package follow the same three steps, and these pictures show the second:

* **compare**: NCC compares a fixed window of raw grey values of image 0 with every window of
  image 1; attention compares a learned, context-aware feature of one coarse cell with the
  features of *all* cells (self: same image, cross: the other image);
* **score**: NCC gives a zero-mean normalised correlation in [-1, 1] per position
  (:func:`ncc_surface`); attention gives a probability distribution over the keys (one row of
  the attention matrix, :func:`attention_grid`);
* **aggregate**: NCC takes the arg-max (plus sub-pixel refinement); attention sums the values
  weighted by the distribution, and LoFTR's matching layer finally takes a mutual nearest
  neighbour of the coarse confidence matrix.

Every ``*_image`` / ``draw_*`` / ``compose_*`` function is pure and returns an (H, W, 3) uint8
RGB array, so a ROS node can publish it unchanged as a ``sensor_msgs/Image`` debug topic with
encoding ``rgb8`` (``relperception.imaging.numpy_to_image_fields``); the ``relperception viz``
verb writes the same arrays as PNG files. No matplotlib, no global state, no I/O.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import cv2
import numpy as np

#: Colours (RGB) of the markers of :func:`draw_markers` when none are given.
MARKER_COLOURS = ((255, 255, 255), (255, 0, 255), (0, 255, 0), (255, 255, 0))

_FONT = cv2.FONT_HERSHEY_SIMPLEX
_BACKGROUND = (24, 24, 24)
_TEXT = (235, 235, 235)


def _check_gray(image: np.ndarray, name: str) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.ndim != 2 or image.size == 0 \
            or image.dtype != np.uint8:
        shape = getattr(image, 'shape', None)
        raise ValueError(f'{name} must be a non-empty (H, W) uint8 grey image, got '
                         f'{getattr(image, "dtype", type(image).__name__)} of shape {shape}')
    return image


def _check_rgb(image: np.ndarray, name: str = 'rgb') -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or image.size == 0:
        raise ValueError(f'{name} must be a non-empty (H, W, 3) uint8 image, got {image.dtype} '
                         f'of shape {image.shape}')
    return image


def _as_rgb(image: np.ndarray, name: str = 'image') -> np.ndarray:
    image = np.asarray(image)
    if image.dtype == np.uint8 and image.ndim == 2 and image.size:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2RGB)
    return _check_rgb(image, name).copy()


def ncc_surface(image0: np.ndarray, image1: np.ndarray, pixel: Sequence[float],
                patch_size: int = 15) -> np.ndarray:
    """Zero-mean NCC of the patch around ``pixel`` in image 0 with every patch of image 1.

    Compare: the (p x p) window of raw grey values centred at ``pixel``; score: zero-mean
    normalised cross-correlation ``sum((a - mean a)(b - mean b)) / (|a - mean a| |b - mean b|)``
    (``cv2.matchTemplate`` with ``TM_CCOEFF_NORMED``) for every window position in image 1;
    aggregate (by the caller): the arg-max, see :func:`surface_peak`.

    Args:
        image0: (H0, W0) uint8 grey image holding the template.
        image1: (H1, W1) uint8 grey image searched; at least p x p pixels.
        pixel: (x, y) template centre in image 0, pixels (x right, y down, pixel centre at
            integer); rounded to the nearest pixel.
        patch_size: odd patch side p in pixels (>= 3).

    Returns:
        (H1, W1) float32 surface indexed [y, x] by the centre of the image-1 window: NCC in
        [-1, 1]; NaN where the window leaves image 1 (within p // 2 of the border).
        OpenCV scores windows of (near) zero variance 0 or +-1.

    Raises:
        ValueError: bad images, an even or too small patch, ``pixel`` outside image 0 or so
            close to its border that the patch leaves it, or a flat (constant) template whose
            NCC is undefined.
    """
    _check_gray(image0, 'image0')
    _check_gray(image1, 'image1')
    if isinstance(patch_size, bool) or int(patch_size) != patch_size or patch_size < 3 \
            or patch_size % 2 == 0:
        raise ValueError(f'patch_size must be an odd integer >= 3, got {patch_size!r}')
    half = int(patch_size) // 2
    x, y = _pixel(pixel, image0.shape, 'image 0')
    if not (half <= x < image0.shape[1] - half and half <= y < image0.shape[0] - half):
        raise ValueError(f'the {patch_size}x{patch_size} patch around pixel ({x}, {y}) leaves '
                         f'image 0 ({image0.shape[1]}x{image0.shape[0]}); choose a pixel at '
                         f'least {half} px from the border')
    if image1.shape[0] < patch_size or image1.shape[1] < patch_size:
        raise ValueError(f'image1 {image1.shape} is smaller than the {patch_size} px patch')
    template = image0[y - half:y + half + 1, x - half:x + half + 1]
    if float(template.std()) < 0.5:
        raise ValueError(f'the patch around pixel ({x}, {y}) is flat (grey-level std '
                         f'{float(template.std()):.2f}); NCC is undefined there')
    scores = cv2.matchTemplate(image1, template, cv2.TM_CCOEFF_NORMED)
    surface = np.full(image1.shape, np.nan, np.float32)
    surface[half:half + scores.shape[0], half:half + scores.shape[1]] = np.clip(scores, -1, 1)
    return surface


def _pixel(pixel: Sequence[float], shape: Tuple[int, int], name: str) -> Tuple[int, int]:
    values = np.asarray(pixel, dtype=np.float64).reshape(-1)
    if values.shape != (2,) or not np.all(np.isfinite(values)):
        raise ValueError(f'pixel must be two finite numbers (x, y), got {pixel!r}')
    x, y = (int(v) for v in np.rint(values))
    if not (0 <= x < shape[1] and 0 <= y < shape[0]):
        raise ValueError(f'pixel ({values[0]:g}, {values[1]:g}) lies outside {name} '
                         f'({shape[1]}x{shape[0]}, valid x in [0, {shape[1] - 1}], y in '
                         f'[0, {shape[0] - 1}])')
    return x, y


def surface_peak(surface: np.ndarray) -> Tuple[float, float, float]:
    """Return (x, y, value) of the largest finite value of a 2-D score surface.

    Args:
        surface: (H, W) float scores, NaN where undefined.

    Returns:
        x, y: integer position (as floats) of the maximum, value: the maximum.

    Raises:
        ValueError: not 2-D, or no finite value.
    """
    surface = np.asarray(surface, dtype=np.float64)
    if surface.ndim != 2:
        raise ValueError(f'surface must be 2-D, got shape {surface.shape}')
    finite = np.isfinite(surface)
    if not finite.any():
        raise ValueError('surface has no finite value')
    index = int(np.argmax(np.where(finite, surface, -np.inf)))
    y, x = divmod(index, surface.shape[1])
    return float(x), float(y), float(surface[y, x])


def attention_grid(weights: np.ndarray, grid_hw: Tuple[int, int]) -> np.ndarray:
    """Reshape one attention row (or a stack of heads) to the key grid, averaging the heads.

    Args:
        weights: (L,) or (heads, L) attention weights of one query over the L = h * w keys
            (row-major over the coarse grid of the key image); each row a probability
            distribution.
        grid_hw: (h, w) coarse grid of the key image.

    Returns:
        (h, w) float32 mean over the heads; it sums to 1 when each head does.

    Raises:
        ValueError: bad shapes, negative or non-finite weights.
    """
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim == 1:
        weights = weights[None]
    h, w = (int(v) for v in grid_hw)
    if weights.ndim != 2 or weights.shape[1] != h * w:
        raise ValueError(f'weights must be (L,) or (heads, L) with L = {h}*{w} = {h * w}, got '
                         f'shape {weights.shape}')
    if not np.all(np.isfinite(weights)) or weights.min() < 0:
        raise ValueError('attention weights must be finite and non-negative')
    return weights.mean(axis=0).reshape(h, w)


def cell_grid_to_image(grid: np.ndarray, image_hw: Tuple[int, int],
                       input_hw: Tuple[int, int], stride: int = 8) -> np.ndarray:
    """Upsample a coarse-cell map to an image, each pixel taking its nearest cell's value.

    The network saw the image resized to ``input_hw``; coarse cell (cx, cy) is centred on
    network pixel (stride * cx, stride * cy) (LoFTR's convention). Every original pixel is
    mapped to network pixels (pixel centres at integers) and takes the value of the nearest
    cell centre, so the picture is aligned with the keypoints the model reports.

    Args:
        grid: (h, w) values per coarse cell, row-major like the model's tokens.
        image_hw: (H, W) of the original image to draw on.
        input_hw: (Hn, Wn) network input size the image was resized to.
        stride: pixels of the network input per coarse cell.

    Returns:
        (H, W) float32.

    Raises:
        ValueError: bad shapes or sizes.
    """
    grid = np.asarray(grid, dtype=np.float32)
    if grid.ndim != 2 or grid.size == 0:
        raise ValueError(f'grid must be a non-empty 2-D array, got shape {grid.shape}')
    (height, width), (in_h, in_w) = image_hw, input_hw
    if min(height, width, in_h, in_w, stride) < 1:
        raise ValueError('image_hw, input_hw and stride must be positive')
    xs = (np.arange(width) + 0.5) * (in_w / width) - 0.5
    ys = (np.arange(height) + 0.5) * (in_h / height) - 0.5
    cols = np.clip(np.floor(xs / stride + 0.5), 0, grid.shape[1] - 1).astype(np.int64)
    rows = np.clip(np.floor(ys / stride + 0.5), 0, grid.shape[0] - 1).astype(np.int64)
    return grid[rows[:, None], cols[None, :]]


def pool_matrix(matrix: np.ndarray, max_size: int = 256) -> np.ndarray:
    """Average-pool a large 2-D matrix (e.g. L0 x L1 attention) to at most ``max_size`` a side.

    Args:
        matrix: (R, C) finite float matrix.
        max_size: largest side of the result (>= 1); a smaller matrix is returned unchanged.

    Returns:
        (r, c) float32 with r <= max_size, c <= max_size; each entry the mean of the block it
        covers (``cv2.INTER_AREA``), so a row of a pooled attention matrix still shows where
        the mass of the covered queries goes.

    Raises:
        ValueError: not 2-D or empty, or ``max_size < 1``.
    """
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim != 2 or matrix.size == 0:
        raise ValueError(f'matrix must be a non-empty 2-D array, got shape {matrix.shape}')
    if int(max_size) < 1:
        raise ValueError(f'max_size must be >= 1, got {max_size}')
    rows, cols = matrix.shape
    out_rows, out_cols = min(rows, int(max_size)), min(cols, int(max_size))
    if (out_rows, out_cols) == (rows, cols):
        return matrix.copy()
    return cv2.resize(matrix, (out_cols, out_rows), interpolation=cv2.INTER_AREA)


def heatmap_image(values: np.ndarray, vmin: Optional[float] = None,
                  vmax: Optional[float] = None,
                  colormap: int = cv2.COLORMAP_TURBO) -> np.ndarray:
    """Colour a 2-D array (low blue, high red with turbo); NaN / inf are black.

    Args:
        values: (H, W) real array.
        vmin: value of the first colour; default: the smallest finite value.
        vmax: value of the last colour; default: the largest finite value.
        colormap: an OpenCV colour map id.

    Returns:
        (H, W, 3) uint8 RGB.

    Raises:
        ValueError: not a 2-D real array, or ``vmax < vmin``.
    """
    values = np.asarray(values)
    if values.ndim != 2 or values.dtype.kind not in 'fiub' or values.size == 0:
        raise ValueError(f'values must be a non-empty 2-D real array, got {values.dtype} of '
                         f'shape {values.shape}')
    values = values.astype(np.float32)
    finite = np.isfinite(values)
    if not finite.any():
        return np.zeros(values.shape + (3,), np.uint8)
    low = float(values[finite].min()) if vmin is None else float(vmin)
    high = float(values[finite].max()) if vmax is None else float(vmax)
    if high < low:
        raise ValueError(f'vmax ({high}) must not be below vmin ({low})')
    span = max(high - low, 1e-12)
    scaled = np.clip((np.where(finite, values, low) - low) * (255.0 / span), 0, 255)
    bgr = cv2.applyColorMap(np.rint(scaled).astype(np.uint8), colormap)
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    rgb[~finite] = 0
    return rgb


def heatmap_overlay(image: np.ndarray, values: np.ndarray, alpha: float = 0.6,
                    vmin: Optional[float] = None, vmax: Optional[float] = None,
                    interpolation: int = cv2.INTER_NEAREST) -> np.ndarray:
    """Blend a heatmap of ``values`` over an image; ``values`` is resized to the image first.

    Args:
        image: (H, W) uint8 grey or (H, W, 3) uint8 RGB image.
        values: (h, w) real array; resized to (H, W) with ``interpolation`` (nearest keeps
            the cells of a coarse attention grid visible).
        alpha: heatmap weight in [0, 1]; where ``values`` is NaN the image shows unchanged.
        vmin: value of the first colour (default: the smallest finite value).
        vmax: value of the last colour (default: the largest finite value).
        interpolation: OpenCV interpolation flag for the resize.

    Returns:
        (H, W, 3) uint8 RGB.

    Raises:
        ValueError: bad image or values, ``alpha`` outside [0, 1].
    """
    base = _as_rgb(image)
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f'alpha must be in [0, 1], got {alpha}')
    values = np.asarray(values, dtype=np.float32)
    if values.ndim != 2 or values.size == 0:
        raise ValueError(f'values must be a non-empty 2-D array, got shape {values.shape}')
    height, width = base.shape[:2]
    if values.shape != (height, width):
        values = cv2.resize(values, (width, height), interpolation=interpolation)
    colour = heatmap_image(values, vmin, vmax)
    blended = cv2.addWeighted(base, 1.0 - float(alpha), colour, float(alpha), 0.0)
    invalid = ~np.isfinite(values)
    blended[invalid] = base[invalid]
    return blended


def draw_markers(rgb: np.ndarray, points: Sequence[Sequence[float]],
                 colours: Optional[Sequence[Tuple[int, int, int]]] = None,
                 labels: Optional[Sequence[str]] = None, size: int = 7) -> np.ndarray:
    """Draw a cross-hair with a dark outline at each point (NaN points are skipped).

    Args:
        rgb: (H, W, 3) uint8 image (not modified).
        points: (N, 2) positions (x, y) in pixels.
        colours: N RGB colours; default :data:`MARKER_COLOURS` in turn.
        labels: N short texts beside the markers (even markers' labels on the right, odd
            ones' on the left, each pair a line lower than the one before, so labels of nearby
            markers do not overlap), or None.
        size: half the cross-hair length in pixels.

    Returns:
        (H, W, 3) uint8 RGB copy with the markers.

    Raises:
        ValueError: bad image, or ``colours``/``labels`` of another length than ``points``.
    """
    canvas = _check_rgb(rgb).copy()
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    colours = list(colours) if colours is not None else [
        MARKER_COLOURS[i % len(MARKER_COLOURS)] for i in range(len(points))]
    if len(colours) != len(points) or (labels is not None and len(labels) != len(points)):
        raise ValueError('colours and labels must have one entry per point')
    for i, (x, y) in enumerate(points):
        if not (np.isfinite(x) and np.isfinite(y)):
            continue
        centre = (int(round(x)), int(round(y)))
        colour = tuple(int(c) for c in colours[i])
        for thickness, col in ((3, (0, 0, 0)), (1, colour)):
            cv2.drawMarker(canvas, centre, col, cv2.MARKER_CROSS, 2 * size + 1, thickness,
                           cv2.LINE_AA)
            cv2.circle(canvas, centre, size, col, thickness, cv2.LINE_AA)
        if labels is not None and labels[i]:
            # alternate sides, then lines, so that nearby markers stay readable
            text = str(labels[i])
            (text_w, _), _ = cv2.getTextSize(text, _FONT, 0.4, 1)
            x = centre[0] + size + 3 if i % 2 == 0 else centre[0] - size - 3 - text_w
            origin = (x, centre[1] + 4 + 13 * (i // 2))
            cv2.putText(canvas, text, origin, _FONT, 0.4, (0, 0, 0), 3, cv2.LINE_AA)
            cv2.putText(canvas, text, origin, _FONT, 0.4, colour, 1, cv2.LINE_AA)
    return canvas


def _wrap(text: str, width_px: int, scale: float) -> list:
    lines = []
    for paragraph in str(text).split('\n'):
        line = ''
        for word in paragraph.split(' '):
            trial = f'{line} {word}'.strip()
            if line and cv2.getTextSize(trial, _FONT, scale, 1)[0][0] > width_px:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
    return lines


def _text_block(lines: Sequence[str], width: int, scale: float) -> np.ndarray:
    step = int(round(26 * scale / 0.5))
    block = np.full((step * len(lines) + step // 2, width, 3), _BACKGROUND, np.uint8)
    for i, line in enumerate(lines):
        cv2.putText(block, line, (6, step * (i + 1) - step // 4), _FONT, scale, _TEXT, 1,
                    cv2.LINE_AA)
    return block


def colour_bar(width: int, vmin: float, vmax: float, label: str = '',
               height: int = 12) -> np.ndarray:
    """Return a horizontal turbo colour bar with its end values written below it.

    Args:
        width: bar width in pixels (>= 16).
        vmin: value of the first colour.
        vmax: value of the last colour.
        label: text written between the end values.
        height: bar height in pixels.

    Returns:
        (height + 20, width, 3) uint8 RGB.
    """
    width = max(int(width), 16)
    ramp = np.tile(np.linspace(0.0, 1.0, width, dtype=np.float32), (int(height), 1))
    bar = heatmap_image(ramp, 0.0, 1.0)
    text = np.full((20, width, 3), _BACKGROUND, np.uint8)
    left, right = f'{vmin:.3g}', f'{vmax:.3g}'
    cv2.putText(text, left, (2, 14), _FONT, 0.4, _TEXT, 1, cv2.LINE_AA)
    right_w = cv2.getTextSize(right, _FONT, 0.4, 1)[0][0]
    cv2.putText(text, right, (width - right_w - 2, 14), _FONT, 0.4, _TEXT, 1, cv2.LINE_AA)
    if label:
        label_w = cv2.getTextSize(label, _FONT, 0.4, 1)[0][0]
        if label_w < width - 2 * right_w - 20:
            cv2.putText(text, label, ((width - label_w) // 2, 14), _FONT, 0.4, _TEXT, 1,
                        cv2.LINE_AA)
    return np.concatenate([bar, text], axis=0)


def titled_panel(rgb: np.ndarray, title: str, caption: str = '',
                 footer: Optional[np.ndarray] = None, min_width: int = 0) -> np.ndarray:
    """Put a title above and an optional caption (and e.g. a colour bar) below an image.

    Args:
        rgb: (H, W, 3) uint8 image; padded to ``min_width`` when narrower.
        title: one line (wrapped to the panel width).
        caption: text below the image, wrapped; a newline character starts a new line.
        footer: optional (h, W', 3) uint8 strip (e.g. :func:`colour_bar`) placed between the
            image and the caption; padded or cropped to the panel width.
        min_width: minimum panel width in pixels.

    Returns:
        (H', W'', 3) uint8 RGB panel.
    """
    image = _check_rgb(rgb)
    width = max(image.shape[1], int(min_width))
    parts = [_text_block(_wrap(title, width - 12, 0.5), width, 0.5), _pad_width(image, width)]
    if footer is not None:
        parts.append(_pad_width(_check_rgb(footer, 'footer')[:, :width], width))
    if caption:
        parts.append(_text_block(_wrap(caption, width - 12, 0.4), width, 0.4))
    return np.concatenate(parts, axis=0)


def _pad_width(image: np.ndarray, width: int) -> np.ndarray:
    if image.shape[1] >= width:
        return image
    pad = width - image.shape[1]
    return cv2.copyMakeBorder(image, 0, 0, pad // 2, pad - pad // 2, cv2.BORDER_CONSTANT,
                              value=_BACKGROUND)


def compose_panels(panels: Sequence[np.ndarray], caption: str = '',
                   gap: int = 8) -> np.ndarray:
    """Place panels side by side (top-aligned) with an optional caption below all of them.

    Args:
        panels: (Hi, Wi, 3) uint8 images.
        caption: text below the row of panels, wrapped to the total width.
        gap: pixels between panels.

    Returns:
        (H, W, 3) uint8 RGB figure.

    Raises:
        ValueError: no panel, or a panel that is not (H, W, 3) uint8.
    """
    if not panels:
        raise ValueError('compose_panels needs at least one panel')
    panels = [_check_rgb(p, f'panels[{i}]') for i, p in enumerate(panels)]
    height = max(p.shape[0] for p in panels)
    row = []
    for i, panel in enumerate(panels):
        if i:
            row.append(np.full((height, gap, 3), _BACKGROUND, np.uint8))
        row.append(cv2.copyMakeBorder(panel, 0, height - panel.shape[0], 0, 0,
                                      cv2.BORDER_CONSTANT, value=_BACKGROUND))
    figure = np.concatenate(row, axis=1)
    if caption:
        width = figure.shape[1]
        figure = np.concatenate(
            [figure, _text_block(_wrap(caption, width - 12, 0.45), width, 0.45)], axis=0)
    return figure


def attention_matrix_image(matrix: np.ndarray, max_size: int = 256, cell_px: int = 0,
                           highlight_row: Optional[int] = None,
                           scale: str = 'log') -> Tuple[np.ndarray, Tuple[float, float]]:
    """Heatmap of an attention matrix (rows: queries i, columns: keys j), pooled to a view.

    Args:
        matrix: (L0, L1) non-negative attention weights (each row a distribution).
        max_size: the matrix is average-pooled to at most this many rows / columns
            (:func:`pool_matrix`).
        cell_px: each pooled entry is drawn as a (cell_px x cell_px) block; 0 chooses the
            largest integer that keeps the image within 512 pixels a side.
        highlight_row: optional query index i (in the unpooled matrix) marked by white ticks
            at both sides of its (pooled) row.
        scale: ``'log'`` colours log10 of the weights (attention spans decades), ``'linear'``
            colours the weights themselves.

    Returns:
        (image, (vmin, vmax)): (H, W, 3) uint8 RGB and the range of the coloured quantity.

    Raises:
        ValueError: bad matrix, row index or scale.
    """
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim != 2 or matrix.size == 0 or not np.all(np.isfinite(matrix)) \
            or matrix.min() < 0:
        raise ValueError('matrix must be a non-empty 2-D array of finite non-negative weights')
    if scale not in ('log', 'linear'):
        raise ValueError(f"scale must be 'log' or 'linear', got {scale!r}")
    pooled = pool_matrix(matrix, max_size)
    shown = np.log10(np.maximum(pooled, 1e-8)) if scale == 'log' else pooled
    vmin, vmax = float(shown.min()), float(shown.max())
    image = heatmap_image(shown, vmin, vmax)
    cell = int(cell_px) or max(1, 512 // max(pooled.shape))
    image = cv2.resize(image, (pooled.shape[1] * cell, pooled.shape[0] * cell),
                       interpolation=cv2.INTER_NEAREST)
    if highlight_row is not None:
        if not 0 <= int(highlight_row) < matrix.shape[0]:
            raise ValueError(f'highlight_row must be in [0, {matrix.shape[0]}), got '
                             f'{highlight_row}')
        row = int(highlight_row) * pooled.shape[0] // matrix.shape[0]
        top, bottom = row * cell, (row + 1) * cell - 1
        image = cv2.copyMakeBorder(image, 0, 0, 10, 10, cv2.BORDER_CONSTANT, value=_BACKGROUND)
        for x0, x1 in ((0, 8), (image.shape[1] - 9, image.shape[1] - 1)):
            cv2.rectangle(image, (x0, max(top - 1, 0)), (x1, bottom + 1), (255, 255, 255), -1)
    return image, (vmin, vmax)


def loftr_cell_attention(matcher, image0: np.ndarray, image1: np.ndarray,
                         pixel: Sequence[float]) -> dict:
    """Cross-attention of the last coarse cross layer of LoFTR for the coarse cell of a pixel.

    Runs the torch model of a :class:`relperception.matching.loftr.matcher.LoFTRMatcher` on
    both images resized to the matcher's input size (as the matcher does) up to the last
    coarse ``cross`` layer and returns that layer's weights for the one query cell.

    Args:
        matcher: a ``LoFTRMatcher`` with ``backend`` ``torch`` (``matcher.model`` is used).
        image0: (H0, W0) uint8 grey image holding the query pixel.
        image1: (H1, W1) uint8 grey image attended to.
        pixel: (x, y) pixel of image 0 (pixel centres at integers).

    Returns:
        dict: ``cell`` (row-major index of the coarse cell of image 0), ``cell_xy`` (column,
        row) of that cell, ``weights`` (heads, h * w) float32 attention of each head over the
        cells of image 1 (rows sum to 1), ``map`` (h, w) float32 mean of the heads
        (:func:`attention_grid`), ``grid_hw`` (h, w), ``input_hw`` (network input height,
        width), ``stride`` (pixels of the input per coarse cell), ``layer`` (index of the
        layer) and ``heads``.

    Raises:
        ValueError: bad images or pixel, or a matcher without a torch model (e.g. the
            onnxruntime backend, whose graph does not expose attention).
    """
    _check_gray(image0, 'image0')
    _check_gray(image1, 'image1')
    x, y = _pixel(pixel, image0.shape, 'image 0')
    model = getattr(matcher, 'model', None)
    if model is None:  # checked before importing torch: an onnxruntime-only install has none
        raise ValueError('attention needs a LoFTR matcher with the torch backend '
                         '(loftr.backend: torch)')
    import torch

    input_hw = tuple(int(v) for v in matcher.input_size)
    stride = int(model.stride_c)
    grid_hw = (input_hw[0] // stride, input_hw[1] // stride)
    names = list(model.loftr_coarse.layer_names)
    layer = max(i for i, name in enumerate(names) if name == 'cross')
    # the original pixel in network-input pixels, then its nearest coarse cell centre
    x_in = (x + 0.5) * input_hw[1] / image0.shape[1] - 0.5
    y_in = (y + 0.5) * input_hw[0] / image0.shape[0] - 0.5
    column = int(np.clip(np.floor(x_in / stride + 0.5), 0, grid_hw[1] - 1))
    row = int(np.clip(np.floor(y_in / stride + 0.5), 0, grid_hw[0] - 1))
    cell = row * grid_hw[1] + column
    device = next(model.parameters()).device
    tensors = [torch.from_numpy(_network_input(image, input_hw)).to(device)
               for image in (image0, image1)]
    with torch.inference_mode():
        weights = model.coarse_attention(*tensors, layer, cell, side=0)
    weights = weights.float().cpu().numpy()
    return {'cell': cell, 'cell_xy': (column, row), 'weights': weights,
            'map': attention_grid(weights, grid_hw), 'grid_hw': grid_hw,
            'input_hw': input_hw, 'stride': stride, 'layer': layer,
            'heads': int(weights.shape[0])}


def _network_input(image: np.ndarray, input_hw: Tuple[int, int]) -> np.ndarray:
    """(H, W) uint8 -> (1, 1, h, w) float32 in [0, 1] resized as ``LoFTRMatcher`` does."""
    height, width = input_hw
    if image.shape != (height, width):
        shrink = image.shape[0] > height and image.shape[1] > width
        image = cv2.resize(image, (width, height),
                           interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    return (image.astype(np.float32) / 255.0)[None, None]


def relation_panel(gray0: np.ndarray, gray1: np.ndarray, pixel: Sequence[float],
                   patch_size: int = 15, attention: Optional[dict] = None,
                   matcher_name: str = '') -> np.ndarray:
    """Image 0 with a pixel, its NCC surface over image 1 and optionally LoFTR's attention.

    The compact figure of the ``relation_image`` debug topic of ``matcher_node``; every panel
    has the size of its image (no scaling), so the figure is deterministic for given inputs.

    Args:
        gray0: (H0, W0) uint8 grey image (the older frame) holding ``pixel``.
        gray1: (H1, W1) uint8 grey image (the newer frame).
        pixel: (x, y) pixel of image 0.
        patch_size: NCC patch side in pixels (odd, >= 3), see :func:`ncc_surface`.
        attention: None, or the dict of :func:`loftr_cell_attention` for the same images and
            pixel: adds a panel with the cross-attention over image 1 (log10 colours).
        matcher_name: name written in the attention panel title.

    Returns:
        (H, W, 3) uint8 RGB figure.

    Raises:
        ValueError: as :func:`ncc_surface` (pixel too close to the border, flat patch, ...).
    """
    surface = ncc_surface(gray0, gray1, pixel, patch_size)
    peak_x, peak_y, peak = surface_peak(surface)
    x, y = _pixel(pixel, gray0.shape, 'image 0')
    half = int(patch_size) // 2
    left = cv2.cvtColor(gray0, cv2.COLOR_GRAY2RGB)
    cv2.rectangle(left, (x - half, y - half), (x + half, y + half), MARKER_COLOURS[1], 1)
    if attention is not None:
        stride, (column, row) = attention['stride'], attention['cell_xy']
        scale_x = gray0.shape[1] / attention['input_hw'][1]
        scale_y = gray0.shape[0] / attention['input_hw'][0]
        box = ((column - 0.5) * stride * scale_x, (row - 0.5) * stride * scale_y,
               (column + 0.5) * stride * scale_x, (row + 0.5) * stride * scale_y)
        cv2.rectangle(left, (int(round(box[0])), int(round(box[1]))),
                      (int(round(box[2])), int(round(box[3]))), MARKER_COLOURS[2], 1)
    panels = [titled_panel(draw_markers(left, [(x, y)], [MARKER_COLOURS[0]], ['query']),
                           f'older frame: pixel ({x}, {y})', min_width=200)]
    overlay = heatmap_overlay(gray1, surface, alpha=0.65, vmin=-1.0, vmax=1.0,
                              interpolation=cv2.INTER_LINEAR)
    panels.append(titled_panel(
        draw_markers(overlay, [(peak_x, peak_y)], [MARKER_COLOURS[1]], ['NCC']),
        f'NCC {patch_size}x{patch_size} over newer frame: peak {peak:.2f}',
        footer=colour_bar(max(gray1.shape[1], 200), -1.0, 1.0, 'NCC'), min_width=200))
    if attention is not None:
        grid = attention['map']
        shown = cell_grid_to_image(np.log10(np.maximum(grid, 1e-8)), gray1.shape,
                                   attention['input_hw'], attention['stride'])
        vmin, vmax = float(shown.min()), float(shown.max())
        peak_row, peak_column = np.unravel_index(int(np.argmax(grid)), grid.shape)
        scale_x = gray1.shape[1] / attention['input_hw'][1]
        scale_y = gray1.shape[0] / attention['input_hw'][0]
        peak_xy = ((peak_column * attention['stride'] + 0.5) * scale_x - 0.5,
                   (peak_row * attention['stride'] + 0.5) * scale_y - 0.5)
        overlay = heatmap_overlay(gray1, shown, alpha=0.65, vmin=vmin, vmax=vmax)
        panels.append(titled_panel(
            draw_markers(overlay, [peak_xy], [MARKER_COLOURS[2]], ['max']),
            f'{matcher_name or "LoFTR"} cross-attention, layer {attention["layer"]}, cell '
            f'{attention["cell"]} (mean of {attention["heads"]} heads)',
            footer=colour_bar(max(gray1.shape[1], 200), vmin, vmax, 'log10 weight'),
            min_width=200))
    return compose_panels(panels)
