# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Classical matcher: coarse-to-fine zero-mean normalised cross-correlation (NCC).

Pipeline of ``NCCMatcher.match``:

1. Grid-spread Shi-Tomasi keypoints in image 0 (``detect_keypoints``).
2. Gaussian pyramids of both images (``cv2.pyrDown``).
3. Coarse to fine: at the coarsest level the search window is centred on the motion prior
   (or on the keypoint itself); the best zero-mean NCC position within
   +-``search_radius_px`` is propagated (x2) to the next level and searched again within
   +-``refine_radius_px``, down to full resolution. The reach without a prior is
   ``search_radius_px * 2**(levels-1) + refine_radius_px * (2**(levels-1) - 1)`` pixels
   (46 px with the defaults). ``refine_radius_px: 2`` (the default) needs 25 candidates per
   finer level instead of 81 with 4: on KITTI 06/01 and a synthetic sequence the VO accuracy
   of the two is the same within the spread between runs, at ~70 % of the time.
4. Sub-pixel peak: a 1-D parabola in x and in y through the NCC surface around the integer
   maximum; for matches that pass the forward-backward check, through the average of the
   forward and the mirrored backward surface (``_symmetric_refinement``), which removes the
   bias a single finite patch gives (identical images give exactly zero displacement).
5. Forward-backward check: the image-1 positions are matched back into image 0 at full
   resolution, within +-``refine_radius_px`` of the keypoint (the way back starts at the known
   origin, so the coarse levels add nothing; measured on KITTI 06/01 and a synthetic sequence:
   ~25 % less time, same VO accuracy); matches whose round trip misses by more than
   ``max_forward_backward_px``, or whose NCC score (either way) is below ``min_score``, or
   whose patch is too flat (``min_patch_std``), are dropped.
6. Clipping check after an exposure step: when the brightness of the two images differs by
   more than ``EXPOSURE_STEP_RATIO`` (the median ratio of the matched patches' means, i.e. an
   auto-exposure step), a match whose full-resolution patch holds clipped pixels (grey level
   255) in one image and none in the other is dropped. NCC is invariant to a gain change
   only where no pixel saturates: the clipped patches no longer follow the gain and their
   peaks move off the true position. Without such a step (small exposure changes, patches
   clipped in both images) every match is kept.

All correlations of one pyramid level are computed at once (in blocks of 512 points):
patches are gathered into ``(p, p, N)`` arrays (points last, so every reduction runs over
contiguous memory), one ``einsum`` per candidate row gives the numerators, and the window
statistics come from separable sliding sums over the same gathered windows (int32 for uint8
images, else float64). Integer-valued sums are exact, so a flat (zero-variance) patch is
detected exactly and scored 0, not NaN.

``ncc_search`` exposes the single-level search for tests and tools.
"""

from __future__ import annotations

from dataclasses import dataclass
import logging
from typing import List, Optional, Tuple

import cv2
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from relperception.core_types import Matches
from relperception.matching.base import check_gray_pair, Predictor, Selector
from relperception.matching.image_cache import ImageCache
from relperception.matching.keypoints import detect_keypoints
from relperception.validation import as_rows

_LOGGER = logging.getLogger(__name__)

#: Score given to candidate positions whose patch leaves the image (NCC lies in [-1, 1]).
INVALID_SCORE = -2.0
_VALID_ABOVE = -1.5

#: Brightness ratio between two images (either way) from which their exposure differs enough
#: for clipped patches to be dropped (step 6 of the module docstring).
EXPOSURE_STEP_RATIO = 1.2

#: Points correlated together (bounds the size of temporaries, see ``_ncc_surfaces``).
_BLOCK_POINTS = 512


class _Level:
    """One uint8 pyramid level, zero-padded so that patch gathers need no index clamping."""

    def __init__(self, image: np.ndarray, pad: int):
        self.height, self.width = image.shape
        self.pad = pad
        if image.dtype != np.uint8:  # ncc_search accepts integer-valued float images too
            image = np.asarray(image, np.float32)
        padded = cv2.copyMakeBorder(image, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=0)
        self.windows = {}
        self._padded = padded

    def gather(self, left: np.ndarray, top: np.ndarray, size: int) -> np.ndarray:
        """Return (N, size, size) patches (image dtype) with top-left corners (left, top).

        Corners are clamped to the padded area; zeros are read outside the image. Fancy
        indexing a sliding-window view copies whole rows and needs no (size, size, N) index
        array (large temporaries cost page faults on every call).
        """
        view = self.windows.get(size)
        if view is None:
            view = self.windows[size] = sliding_window_view(self._padded, (size, size))
        pad = self.pad
        left = np.clip(left, -pad, self.width + pad - size) + pad
        top = np.clip(top, -pad, self.height + pad - size) + pad
        return view[top, left]

    @property
    def exact_int32(self) -> bool:
        """Whether window statistics of patches up to 15 x 15 fit int32 exactly (uint8 data)."""
        return self._padded.dtype == np.uint8


def _ncc_surfaces(image0: _Level, image1: _Level, template_xy: np.ndarray,
                  centre_xy: np.ndarray, half: int, radius: int
                  ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zero-mean NCC of every template against every candidate offset (see ``_ncc_block``).

    Points are processed in blocks of ``_BLOCK_POINTS``: the temporaries stay small enough to
    be reused by the allocator (bigger ones are fresh pages, i.e. page faults, on every call;
    measured 2.1 ms instead of 4.3 ms for 1000 points).
    """
    count = len(template_xy)
    if count <= _BLOCK_POINTS:
        return _ncc_block(image0, image1, template_xy, centre_xy, half, radius)
    outputs = 2 * radius + 1
    scores = np.empty((outputs, outputs, count), np.float32)
    template_norm = np.empty(count, np.float32)
    template_inside = np.empty(count, bool)
    for start in range(0, count, _BLOCK_POINTS):
        block = slice(start, start + _BLOCK_POINTS)
        scores[:, :, block], template_norm[block], template_inside[block] = _ncc_block(
            image0, image1, template_xy[block], centre_xy[block], half, radius)
    return scores, template_norm, template_inside


def _ncc_block(image0: _Level, image1: _Level, template_xy: np.ndarray,
               centre_xy: np.ndarray, half: int, radius: int
               ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zero-mean NCC of every template against every candidate offset, all points at once.

    Args:
        image0: image holding the templates (integer grey values).
        image1: image searched (integer grey values).
        template_xy: (N, 2) int64 template centres in image 0.
        centre_xy: (N, 2) int64 search-window centres in image 1.
        half: half the patch side (patch side p = 2 * half + 1).
        radius: search radius r; candidates are centre + (dx, dy), |dx|, |dy| <= r.

    Returns:
        scores: (2r + 1, 2r + 1, N) float32 indexed [dy + r, dx + r, n]: NCC in [-1, 1], 0 where
            the candidate patch is flat, ``INVALID_SCORE`` where it leaves image 1.
        template_norm: (N,) float32 L2 norm of the zero-mean template (0: flat template).
        template_inside: (N,) bool, the template lies fully inside image 0.
    """
    count = len(template_xy)
    side = 2 * half + 1
    pixels = side * side
    outputs = 2 * radius + 1
    window = side + 2 * radius
    h0, w0 = image0.height, image0.width
    h1, w1 = image1.height, image1.width
    tx, ty = template_xy[:, 0], template_xy[:, 1]
    template_inside = (tx >= half) & (tx <= w0 - 1 - half) & (ty >= half) & (ty <= h0 - 1 - half)

    template8 = image0.gather(tx - half, ty - half, side)  # (N, p, p)
    template = np.empty((side, side, count), np.float32)
    template[...] = template8.transpose(1, 2, 0)
    flat = template.reshape(pixels, count)
    template_mean = flat.mean(axis=0)
    flat -= template_mean
    template_norm = np.sqrt(np.einsum('kn,kn->n', flat, flat))
    inverse_norm = np.zeros_like(template_norm)
    np.divide(1.0, template_norm, out=inverse_norm, where=template_norm > 0)
    flat *= inverse_norm

    # Candidate windows, gathered once: points last, integer values for the exact statistics.
    cx, cy = centre_xy[:, 0], centre_xy[:, 1]
    exact_int32 = image1.exact_int32 and side <= 15  # 15 * 15 * 255**2 * 15**2 < 2**31
    values = np.empty((window, window, count), np.int32 if exact_int32 else np.float64)
    values[...] = image1.gather(cx - radius - half, cy - radius - half, window).transpose(1, 2, 0)

    # Numerator: sum_k t_k * (s_k - c) with the zero-sum normalised template t; subtracting the
    # template mean c changes nothing mathematically but keeps float32 magnitudes small.
    centred = np.subtract(values, template_mean, dtype=np.float32)
    numerator = np.empty((outputs, outputs, count), np.float32)
    rows = sliding_window_view(centred, side, axis=1)  # [y, dx, n, kx]
    for dy in range(outputs):
        np.einsum('ixnj,ijn->xn', rows[dy:dy + side], template, out=numerator[dy])

    # Sums of the candidate patches and of their squares: separable box sums of the windows,
    # exact in int32 (uint8 images, p <= 15) or float64.
    sums = _box_sums(values, side)
    squares = _box_sums(values * values, side)
    variance_sum = pixels * squares - sums * sums  # n^2 var, exact for integers, >= 0
    patch_norm = np.sqrt(variance_sum.astype(np.float32))
    patch_norm *= np.float32(1.0 / side)
    patch_norm[variance_sum <= 0] = np.inf  # flat candidate patch: score 0
    scores = np.divide(numerator, patch_norm, out=numerator)
    np.clip(scores, -1.0, 1.0, out=scores)

    offsets = np.arange(-radius, radius + 1)
    xs = cx[None, :] + offsets[:, None]
    ys = cy[None, :] + offsets[:, None]
    invalid_x = (xs < half) | (xs > w1 - 1 - half)
    invalid_y = (ys < half) | (ys > h1 - 1 - half)
    if invalid_x.any():
        np.copyto(scores, INVALID_SCORE, where=invalid_x[None, :, :])
    if invalid_y.any():
        np.copyto(scores, INVALID_SCORE, where=invalid_y[:, None, :])
    return scores, template_norm, template_inside


def _sliding_sum(values: np.ndarray, width: int, axis: int) -> np.ndarray:
    """Return the sums of ``width`` consecutive entries along ``axis`` (n -> n - width + 1).

    Sums of 1, 2, 4, ... entries are built by doubling and combined by the binary digits of
    ``width``: a few whole-array additions (``np.cumsum`` along a leading axis is far slower).
    Exact for integers within the dtype's range.
    """
    outputs = values.shape[axis] - width + 1
    lead = (slice(None),) * axis

    def part(array: np.ndarray, start: int, length: int) -> np.ndarray:
        return array[lead + (slice(start, start + length),)]

    result, start, power, size = None, 0, values, 1
    while True:
        if width & size:
            if result is None:
                result = part(power, start, outputs).copy()
            else:
                result += part(power, start, outputs)
            start += size
        if 2 * size > width:
            return result
        length = power.shape[axis] - size
        power = part(power, 0, length) + part(power, size, length)
        size *= 2


def _box_sums(values: np.ndarray, side: int) -> np.ndarray:
    """Return the sums of every ``side`` x ``side`` patch of (W, W, N) windows.

    Shape (W - side + 1, W - side + 1, N), indexed [dy, dx, n] for the patch at window
    offset (dx, dy); exact for integers in the dtype's range.
    """
    return _sliding_sum(_sliding_sum(values, side, 0), side, 1)


def _parabola_offset(before: np.ndarray, peak: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Vertex of the parabola through (-1, before), (0, peak), (1, after), in [-0.5, 0.5]."""
    curvature = before - 2.0 * peak + after
    usable = (before > _VALID_ABOVE) & (after > _VALID_ABOVE) & (curvature < 0)
    offset = np.zeros(peak.shape, np.float64)
    np.divide(0.5 * (before - after), curvature, out=offset, where=usable)
    return np.clip(offset, -0.5, 0.5)


def _peaks(scores: np.ndarray):
    """Integer argmax of (s, s, N) surfaces and the scores around it.

    Returns:
        ix, iy: (N,) int64 argmax column / row.
        around: (5, N) float32 scores at the peak, left, right, above and below it
            (``INVALID_SCORE`` outside the surface).
    """
    outputs, _, count = scores.shape
    index = scores.reshape(outputs * outputs, count).argmax(axis=0)
    iy, ix = np.divmod(index, outputs)
    padded_x = np.clip(np.stack([ix, ix - 1, ix + 1, ix, ix]), 0, outputs - 1)
    padded_y = np.clip(np.stack([iy, iy, iy, iy - 1, iy + 1]), 0, outputs - 1)
    around = scores[padded_y, padded_x, np.arange(count)]
    around[1, ix == 0] = INVALID_SCORE
    around[2, ix == outputs - 1] = INVALID_SCORE
    around[3, iy == 0] = INVALID_SCORE
    around[4, iy == outputs - 1] = INVALID_SCORE
    return ix, iy, around


def _subpixel(around: np.ndarray) -> np.ndarray:
    """(N, 2) float64 parabola vertex offsets (x, y) from (5, N) peak neighbourhoods."""
    around = around.astype(np.float64)
    return np.stack([_parabola_offset(around[1], around[0], around[2]),
                     _parabola_offset(around[3], around[0], around[4])], axis=1)


def _as_points(name: str, points) -> np.ndarray:
    points = as_rows(name, points, 2)
    if not np.all(np.isfinite(points)):
        raise ValueError(f'{name} must be finite')
    return points


def ncc_search(image0: np.ndarray, image1: np.ndarray, points0, centres1, patch_size: int,
               radius: int) -> Tuple[np.ndarray, np.ndarray]:
    """Find, for each point, the best zero-mean NCC position within a window (one level).

    The (patch_size x patch_size) patch of ``image0`` centred at ``points0[i]`` is compared
    with every equally sized patch of ``image1`` centred at ``centres1[i] + (dx, dy)``,
    ``|dx|, |dy| <= radius``, by zero-mean normalised cross-correlation
    ``sum((a - mean a) * (b - mean b)) / sqrt(sum((a - mean a)^2) * sum((b - mean b)^2))``.
    A candidate whose patch is flat (zero variance) scores 0; a candidate whose patch leaves
    ``image1`` is not considered. Ties go to the first candidate in row-major (dy, dx) order.

    Args:
        image0: (H0, W0) uint8 (or integer-valued float) image holding the templates.
        image1: (H1, W1) uint8 (or integer-valued float) image searched.
        points0: (N, 2) template centres (x, y) in image 0, pixels; rounded to integers.
        centres1: (N, 2) search-window centres (x, y) in image 1, pixels; rounded to integers.
        patch_size: odd patch side (pixels).
        radius: search radius (pixels), >= 0.

    Returns:
        best_xy: (N, 2) float64 integer positions (x, y) of the best candidate in image 1.
        best_score: (N,) float32 NCC score of that candidate in [-1, 1].
        Both are NaN for points whose template leaves image 0 or is flat (NCC undefined), or
        that have no candidate inside image 1.

    Raises:
        ValueError: for non-2-D or empty images, badly shaped or non-finite points, an even
            or non-positive patch size, or a negative radius.
    """
    for name, image in (('image0', image0), ('image1', image1)):
        if not isinstance(image, np.ndarray) or image.ndim != 2 or image.size == 0:
            raise ValueError(f'{name} must be a non-empty (H, W) numpy array')
    if int(patch_size) != patch_size or patch_size < 1 or patch_size % 2 == 0:
        raise ValueError(f'patch_size must be a positive odd integer, got {patch_size!r}')
    if int(radius) != radius or radius < 0:
        raise ValueError(f'radius must be an integer >= 0, got {radius!r}')
    points0 = _as_points('points0', points0)
    centres1 = _as_points('centres1', centres1)
    if len(points0) != len(centres1):
        raise ValueError(f'points0 ({len(points0)}) and centres1 ({len(centres1)}) differ in '
                         'length')
    half, radius = int(patch_size) // 2, int(radius)
    pad = 2 * (half + radius) + 1
    level0, level1 = _Level(image0, pad), _Level(image1, pad)
    template_xy = np.clip(np.rint(points0), -pad, np.array(image0.shape[::-1]) + pad)
    template_xy = template_xy.astype(np.int64)
    # Centres further out than radius + half have no candidate inside image 1 either way.
    centre_xy = np.clip(np.rint(centres1), -(radius + half),
                        np.array(image1.shape[::-1]) - 1 + radius + half).astype(np.int64)
    scores, template_norm, template_inside = _ncc_surfaces(level0, level1, template_xy,
                                                           centre_xy, half, radius)
    ix, iy, around = _peaks(scores)
    best_xy = (centre_xy + np.stack([ix, iy], axis=1) - radius).astype(np.float64)
    best_score = around[0].astype(np.float32)
    bad = ~template_inside | (template_norm <= 0) | (best_score <= _VALID_ABOVE)
    best_xy[bad] = np.nan
    best_score[bad] = np.nan
    return best_xy, best_score


def gaussian_pyramid(image: np.ndarray, levels: int) -> List[np.ndarray]:
    """Return ``levels`` uint8 images: ``image`` and successive ``cv2.pyrDown`` halvings.

    Level ``L`` has pixel centres at full-resolution coordinates ``x * 2**L`` (x right,
    y down, pixel centre at integer), i.e. a point (x, y) maps to (x, y) / 2**L.
    """
    pyramid = [image]
    for _ in range(levels - 1):
        pyramid.append(cv2.pyrDown(pyramid[-1]))
    return pyramid


def usable_levels(shape: Tuple[int, int], levels: int, patch_size: int) -> int:
    """Return how many of ``levels`` pyramid levels keep the image >= 2 patches on each side."""
    height, width = shape
    usable = 1
    while usable < levels:
        height, width = (height + 1) // 2, (width + 1) // 2
        if min(height, width) < 2 * patch_size:
            break
        usable += 1
    return usable


@dataclass
class _Tracks:
    """Result of ``_track`` for N points (full-resolution values)."""

    points1: np.ndarray        # (N, 2) float64 sub-pixel positions in image 1
    score: np.ndarray          # (N,) float32 NCC score of the integer peak
    template_std: np.ndarray   # (N,) float32 grey-level std of the template (0: flat)
    found: np.ndarray          # (N,) bool, a peak inside the search window was found
    template_xy: np.ndarray    # (N, 2) int64 template centres in image 0
    peak_xy: np.ndarray        # (N, 2) int64 integer peak positions in image 1
    around: np.ndarray         # (5, N) float32 scores at, left, right, above, below the peak


def _track(pyramid0: List[_Level], pyramid1: List[_Level], points0: np.ndarray,
           prior1: Optional[np.ndarray], half: int, radius: int,
           refine_radius: Optional[int] = None) -> _Tracks:
    """Coarse-to-fine NCC tracking of ``points0`` (N, 2) float64 from pyramid 0 to pyramid 1.

    ``prior1`` (N, 2) float64 (NaN rows: none) centres the coarsest search; without it the
    search starts at the point itself. A point whose template is flat, or that has no valid
    candidate, at a coarse level keeps its displacement estimate for the next level; the
    full-resolution level decides (``found``): a peak on the edge of the search window is
    not bracketed and is not found. The coarsest level searches +-``radius``; every finer
    level only refines the propagated (x2) estimate within +-``refine_radius`` (default:
    ``radius``).
    """
    count = len(points0)
    refine_radius = radius if refine_radius is None else refine_radius
    coarsest = len(pyramid0) - 1
    displacement = np.zeros((count, 2), np.float64)
    if prior1 is not None:
        guess = prior1 - points0
        known = np.all(np.isfinite(guess), axis=1)
        displacement[known] = guess[known]
    for level in range(coarsest, -1, -1):
        scale = float(2 ** level)
        level_radius = radius if level == coarsest else refine_radius
        image0, image1 = pyramid0[level], pyramid1[level]
        h0, w0 = image0.height, image0.width
        h1, w1 = image1.height, image1.width
        template_xy = np.rint(points0 / scale).astype(np.int64)
        # Near the border the template moves inwards; its displacement stands in for the point's.
        template_xy[:, 0] = np.clip(template_xy[:, 0], half, w0 - 1 - half)
        template_xy[:, 1] = np.clip(template_xy[:, 1], half, h0 - 1 - half)
        centre = np.rint(template_xy + displacement / scale)
        centre[:, 0] = np.clip(centre[:, 0], -level_radius - half, w1 + level_radius + half)
        centre[:, 1] = np.clip(centre[:, 1], -level_radius - half, h1 + level_radius + half)
        centre_xy = centre.astype(np.int64)
        scores, template_norm, _ = _ncc_surfaces(image0, image1, template_xy, centre_xy,
                                                 half, level_radius)
        ix, iy, around = _peaks(scores)
        usable = (around[0] > _VALID_ABOVE) & (template_norm > 0)
        peak_xy = centre_xy + np.stack([ix, iy], axis=1) - level_radius
        new_displacement = (peak_xy + _subpixel(around) - template_xy) * scale
        displacement[usable] = new_displacement[usable]
    edge = (ix == 0) | (ix == 2 * level_radius) | (iy == 0) | (iy == 2 * level_radius)
    return _Tracks(points1=points0 + displacement, score=around[0].copy(),
                   template_std=template_norm / (2 * half + 1), found=usable & ~edge,
                   template_xy=template_xy, peak_xy=peak_xy, around=around)


def _symmetric_refinement(forward: _Tracks, backward: _Tracks) -> Tuple[np.ndarray, np.ndarray]:
    """Sub-pixel peaks from the forward and backward NCC surfaces averaged.

    The forward surface F(u) (template at x0, candidates p1 + u in image 1) and the backward
    surface B(v) (template at p1, candidates x0 + v in image 0) measure the same displacement
    for v = -u, so A(u) = (F(u) + B(-u)) / 2 is free of the asymmetry a single finite patch
    gives its correlation surface (identical images give exactly zero displacement). Applies
    where the backward pass started at the forward integer peak and came back to the forward
    template position.

    Returns:
        refined1: (M, 2) float64 positions in image 1 (forward template position + the
            integer displacement + the parabola vertex of A), for the points ...
        usable: (M,) bool ... where the two passes are aligned on the same integer lattice.
    """
    aligned = (np.all(backward.template_xy == forward.peak_xy, axis=1)
               & np.all(backward.peak_xy == forward.template_xy, axis=1))
    mirrored = backward.around[[0, 2, 1, 4, 3]]  # B(-u): left <-> right, above <-> below
    both_valid = (forward.around > _VALID_ABOVE) & (mirrored > _VALID_ABOVE)
    averaged = np.where(both_valid, 0.5 * (forward.around + mirrored), INVALID_SCORE)
    refined1 = forward.peak_xy + _subpixel(averaged)
    return refined1, aligned


class NCCMatcher:
    """Coarse-to-fine zero-mean NCC matcher with forward-backward check (see module doc).

    ``conf`` keys are the ROS parameter names under ``ncc.`` (see ``default_conf``). An image
    passed as a read-only array that owns its data keeps its keypoints and pyramid for the next
    calls (:mod:`relperception.matching.image_cache`): visual odometry passes its keyframe so.
    """

    #: Keypoints are corners of image 0 (see ``relperception.matching.base``).
    repeatable_keypoints = True
    #: ``match`` takes ``select``; every keypoint is tracked independently of the others.
    selects_keypoints = True

    default_conf = {
        'max_keypoints': 1000,          # keypoints per frame
        'cell_size_px': 32,             # grid cell for spreading keypoints (pixels)
        'patch_size': 9,                # correlated patch side (pixels, odd)
        'search_radius_px': 4,          # search radius at the coarsest level (level pixels)
        'refine_radius_px': 2,          # search radius at every finer level (level pixels)
        'pyramid_levels': 4,            # 1 = full resolution only
        'min_score': 0.8,               # minimum NCC score, both directions
        'max_forward_backward_px': 1.0,  # maximum round-trip error (pixels)
        'min_corner_quality': 0.001,    # Shi-Tomasi quality level
        'min_patch_std': 2.0,           # flatter patches (grey-level std) are rejected
    }

    def __init__(self, conf: Optional[dict] = None):
        """Merge ``conf`` over ``default_conf``; unknown keys or bad values raise ValueError."""
        conf = dict(conf or {})
        unknown = set(conf) - set(self.default_conf)
        if unknown:
            raise ValueError(f'unknown NCC configuration keys {sorted(unknown)}; '
                             f'known: {sorted(self.default_conf)}')
        self.conf = {**self.default_conf, **conf}
        self._validate()
        #: Keypoints and pyramids of read-only images (a keyframe matched against every frame).
        self.cache = ImageCache()

    def _validate(self) -> None:
        c = self.conf

        def integer(name: str, minimum: int) -> None:
            value = c[name]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or value < minimum:
                raise ValueError(f'ncc.{name} must be an integer >= {minimum}, got {value!r}')
            c[name] = int(value)

        def number(name: str, low: float, high: float) -> None:
            value = c[name]
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
                    or not low <= value <= high:
                raise ValueError(f'ncc.{name} must be a number in [{low}, {high}], '
                                 f'got {value!r}')
            c[name] = float(value)

        integer('max_keypoints', 0)
        integer('cell_size_px', 1)
        integer('patch_size', 3)
        if c['patch_size'] % 2 == 0:
            raise ValueError(f'ncc.patch_size must be odd, got {c["patch_size"]}')
        integer('search_radius_px', 1)
        integer('refine_radius_px', 1)
        integer('pyramid_levels', 1)
        number('min_score', -1.0, 1.0)
        number('max_forward_backward_px', 0.0, float('inf'))
        number('min_corner_quality', 0.0, 0.999999)
        number('min_patch_std', 0.0, 255.0)

    def match(self, image0: np.ndarray, image1: np.ndarray,
              predict: Optional[Predictor] = None,
              select: Optional[Selector] = None) -> Matches:
        """Match keypoints of ``image0`` into ``image1``.

        Args:
            image0: (H, W) uint8 grey image.
            image1: (H, W) uint8 grey image.
            predict: optional motion prior: (N, 2) float32 keypoints of image 0 (pixels) ->
                (N, 2) float32 predicted positions in image 1 (pixels), NaN where unknown;
                the coarsest search is centred there instead of on the keypoint.
            select: optional (N, 2) float32 keypoints of image 0 -> (N,) bool: only the
                keypoints it keeps are matched (each gets the match it gets among all).

        Returns:
            ``Matches``: keypoints0 (N, 2) float32 integer corner positions in image 0,
            keypoints1 (N, 2) float32 sub-pixel positions in image 1, confidence (N,)
            float32 = the smaller of the forward and backward NCC scores, clipped to [0, 1].

        Raises:
            ValueError: for images that are not equally sized non-empty (H, W) uint8 arrays,
                a prior that does not return (N, 2) or a selection that does not return (N,).
        """
        check_gray_pair(image0, image1)
        c = self.conf
        half = c['patch_size'] // 2
        radius = c['search_radius_px']
        keypoints0 = self.cache.get(
            image0, ('keypoints', c['max_keypoints'], c['cell_size_px'],
                     c['min_corner_quality'], half),
            lambda: _read_only(detect_keypoints(image0, c['max_keypoints'], c['cell_size_px'],
                                                c['min_corner_quality'], border_px=half)))
        if select is not None and len(keypoints0):
            keep = np.asarray(select(keypoints0.copy()))
            if keep.shape != (len(keypoints0),) or keep.dtype != bool:
                raise ValueError(f'select must return a ({len(keypoints0)},) bool array, '
                                 f'got {keep.dtype} {keep.shape}')
            keypoints0 = keypoints0[keep]
        if len(keypoints0) == 0:
            _LOGGER.debug('ncc: no keypoints')
            return Matches.empty()
        prior1 = None
        if predict is not None:
            prior1 = np.asarray(predict(keypoints0.copy()), dtype=np.float64)
            if prior1.shape != keypoints0.shape:
                raise ValueError(f'predict must return ({len(keypoints0)}, 2), '
                                 f'got {prior1.shape}')

        levels = usable_levels(image0.shape, c['pyramid_levels'], c['patch_size'])
        refine_radius = c['refine_radius_px']
        pad = 2 * (half + max(radius, refine_radius)) + 1
        pyramid0 = self._pyramid(image0, levels, pad)
        pyramid1 = self._pyramid(image1, levels, pad)
        points0 = keypoints0.astype(np.float64)
        forward = _track(pyramid0, pyramid1, points0, prior1, half, radius, refine_radius)
        forward_ok = (forward.found & (forward.score >= c['min_score'])
                      & (forward.template_std >= c['min_patch_std']))
        index = np.flatnonzero(forward_ok)
        if len(index) == 0:
            _LOGGER.debug('ncc: %d keypoints, no forward match', len(points0))
            return Matches.empty()
        forward = _Tracks(*(getattr(forward, f)[index] for f in (
            'points1', 'score', 'template_std', 'found', 'template_xy', 'peak_xy')),
            around=forward.around[:, index])

        # The way back starts at the known origin, so the full-resolution level suffices.
        backward = _track(pyramid1[:1], pyramid0[:1], forward.points1, points0[index], half,
                          refine_radius)
        round_trip = np.linalg.norm(backward.points1 - points0[index], axis=1)
        keep = (backward.found & (backward.score >= c['min_score'])
                & (backward.template_std >= c['min_patch_std'])
                & (round_trip <= c['max_forward_backward_px']))
        refined1, aligned = _symmetric_refinement(forward, backward)
        # keypoints0 are integer pixels: the forward template sits exactly on them.
        points1 = np.where(aligned[:, None], refined1, forward.points1)[keep]
        confidence = np.clip(np.minimum(forward.score, backward.score)[keep], 0.0, 1.0)
        index = index[keep]
        if len(index):
            clipped = (_clipped_in_patch(image0, keypoints0[index], half)
                       != _clipped_in_patch(image1, points1, half))
            if clipped.any() and _exposure_step(image0, keypoints0[index], image1, points1, half):
                points1, confidence = points1[~clipped], confidence[~clipped]
                index = index[~clipped]
        _LOGGER.debug('ncc: %d keypoints, %d forward, %d after forward-backward',
                      len(points0), int(forward_ok.sum()), len(index))
        return Matches(keypoints0[index], points1.astype(np.float32),
                       confidence.astype(np.float32))

    def _pyramid(self, image: np.ndarray, levels: int, pad: int) -> List[_Level]:
        return self.cache.get(image, ('pyramid', levels, pad), lambda: [
            _Level(level, pad) for level in gaussian_pyramid(image, levels)])


def _box_filter_at(values: np.ndarray, points: np.ndarray, half: int, normalize: bool,
                   border: int) -> np.ndarray:
    """Return (N,) the square box filter of ``values`` at the nearest pixels of ``points``.

    ``values`` is (H, W) float32, ``points`` (N, 2) pixels (x, y); the box is ``2 * half + 1``
    pixels square: the patch sum, or with ``normalize`` its mean; ``border`` is the OpenCV
    border mode (pixels outside the image).
    """
    side = 2 * half + 1
    filtered = cv2.boxFilter(values, -1, (side, side), normalize=normalize, borderType=border)
    height, width = values.shape
    x = np.clip(np.rint(points[:, 0]).astype(np.int64), 0, width - 1)
    y = np.clip(np.rint(points[:, 1]).astype(np.int64), 0, height - 1)
    return filtered[y, x]


def _clipped_in_patch(image: np.ndarray, points: np.ndarray, half: int) -> np.ndarray:
    """Return (N,) bool: whether a point's patch holds a clipped pixel (grey level 255).

    ``image`` is (H, W) uint8, ``points`` (N, 2) pixels (x, y), rounded to the nearest pixel;
    the patch is ``2 * half + 1`` pixels square and pixels outside the image do not count.
    """
    if len(points) == 0 or int(image.max()) < 255:
        return np.zeros(len(points), dtype=bool)
    return _box_filter_at((image == 255).astype(np.float32), points, half, normalize=False,
                          border=cv2.BORDER_CONSTANT) > 0


def _patch_means(image: np.ndarray, points: np.ndarray, half: int) -> np.ndarray:
    """Return the (N,) mean grey level of the ``2 * half + 1`` square patch at each point."""
    return _box_filter_at(image.astype(np.float32), points, half, normalize=True,
                          border=cv2.BORDER_REPLICATE)


def _exposure_step(image0: np.ndarray, points0: np.ndarray, image1: np.ndarray,
                   points1: np.ndarray, half: int) -> bool:
    """Whether the exposure changed by more than ``EXPOSURE_STEP_RATIO`` between the images.

    The gain is the median ratio of the patch means of the matches (``points0`` and
    ``points1``, (N, 2) pixels in the (H, W) uint8 images), over the patches that are neither
    near black nor near clipped in either image; False when there are none.
    """
    mean0 = _patch_means(image0, points0, half)
    mean1 = _patch_means(image1, points1, half)
    usable = (np.minimum(mean0, mean1) > 8.0) & (np.maximum(mean0, mean1) < 247.0)
    if not usable.any():
        return False
    gain = float(np.median(mean1[usable] / mean0[usable]))
    return abs(np.log(gain)) > np.log(EXPOSURE_STEP_RATIO)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array
