# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Sanity checks of a depth image before odometry uses it.

The checks are shared by ``eval``, ``replay`` and the live node. :func:`check_depth` decodes
a depth image (:func:`~relperception.imaging.image_encodings.depth_to_metres`) and refuses it,
with one of the named :data:`DEPTH_PROBLEMS` and a sentence, when it cannot be right:

* ``undecodable``: not a depth encoding, or an array that does not fit it;
* ``wrong_size``: another size than the colour image;
* ``byte_swapped``: 16-bit depth whose bytes are in the wrong order (``is_bigendian`` wrong):
  real depth is piecewise smooth, its byte-swapped version is not, so the two are told apart by
  the mean jump between neighbouring pixels;
* ``no_valid_pixel``: all NaN, zero or negative;
* ``implausible_range``: a median valid depth no depth camera reports — beyond
  :data:`MAX_PLAUSIBLE_DEPTH_M` (e.g. millimetres labelled ``32FC1``) or below
  :data:`MIN_PLAUSIBLE_DEPTH_M` (e.g. metres labelled ``16UC1``).

Depth whose encoding lies about self-consistent, plausible values cannot be detected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from relperception.imaging.image_encodings import depth_to_metres

#: Names of the problems :func:`check_depth` reports (keys of the counts in summaries).
DEPTH_PROBLEMS = ('undecodable', 'wrong_size', 'byte_swapped', 'no_valid_pixel',
                  'implausible_range')
#: A median valid depth beyond this (metres) is not from a depth camera.
MAX_PLAUSIBLE_DEPTH_M = 250.0
#: A median valid depth below this (metres) is not from a depth camera.
MIN_PLAUSIBLE_DEPTH_M = 0.02
#: Byte-swapped when the swapped image's mean neighbour jump is this many times smaller.
_SWAP_ROUGHNESS_RATIO = 8.0
#: Fewest neighbouring valid pixel pairs for the byte-order test.
_MIN_PAIRS = 100


@dataclass(frozen=True)
class DepthCheck:
    """Outcome of :func:`check_depth`.

    Attributes:
        depth: (H, W) float32 metres, NaN invalid; None when refused.
        problem: one of :data:`DEPTH_PROBLEMS`, None when the depth is usable.
        message: why it was refused ('' when usable).
    """

    depth: Optional[np.ndarray]
    problem: Optional[str] = None
    message: str = ''


def check_depth(array: np.ndarray, encoding: str,
                image_shape: Tuple[int, int]) -> DepthCheck:
    """Decode a depth image and check that odometry can trust it.

    Args:
        array: (H, W) or (H, W, 1) depth image as decoded from the message: uint16
            millimetres (``16UC1``, ``mono16``) or float32 metres (``32FC1``).
        encoding: the message's encoding.
        image_shape: (height, width) of the colour image it belongs to.

    Returns:
        :class:`DepthCheck` with the metric depth, or the problem and a sentence.
    """
    try:
        depth = depth_to_metres(array, encoding)
    except (ValueError, TypeError) as error:
        return DepthCheck(None, 'undecodable', f'undecodable depth ({error})')
    if depth.shape != tuple(image_shape):
        return DepthCheck(None, 'wrong_size', f'depth is {depth.shape[1]}x{depth.shape[0]}, '
                                              f'the image {image_shape[1]}x{image_shape[0]}')
    raw = np.asarray(array).reshape(depth.shape)
    if raw.dtype == np.uint16 and _looks_byte_swapped(raw):
        return DepthCheck(None, 'byte_swapped', '16-bit depth looks byte-swapped (the '
                                                "message's is_bigendian is probably wrong)")
    valid = depth[np.isfinite(depth)]
    if valid.size == 0:
        return DepthCheck(None, 'no_valid_pixel',
                          'no valid depth pixel (all NaN, zero or negative)')
    median = float(np.median(valid))
    if median > MAX_PLAUSIBLE_DEPTH_M:
        hint = ' (millimetres labelled 32FC1?)' if encoding == '32FC1' else ''
        return DepthCheck(None, 'implausible_range', f'median depth {median:.4g} m is beyond '
                                                     f'{MAX_PLAUSIBLE_DEPTH_M:g} m{hint}')
    if median < MIN_PLAUSIBLE_DEPTH_M:
        hint = ' (metres in a millimetre encoding?)' if encoding != '32FC1' else ''
        return DepthCheck(None, 'implausible_range', f'median depth {median:.4g} m is below '
                                                     f'{MIN_PLAUSIBLE_DEPTH_M:g} m{hint}')
    return DepthCheck(depth)


def _mean_jump(values: np.ndarray) -> Optional[float]:
    """Mean absolute difference of horizontally neighbouring non-zero pixels, or None.

    The mean, not the median: quantised depth has mostly equal neighbours either way.
    """
    left, right = values[:, :-1].astype(np.int32), values[:, 1:].astype(np.int32)
    both = (left > 0) & (right > 0)
    if np.count_nonzero(both) < _MIN_PAIRS:
        return None
    return float(np.mean(np.abs(left[both] - right[both])))


def _looks_byte_swapped(raw: np.ndarray) -> bool:
    """Whether (H, W) uint16 depth is far smoother with its bytes swapped."""
    as_is = _mean_jump(raw)
    swapped = _mean_jump(raw.byteswap())
    if as_is is None or swapped is None:
        return False
    return as_is > _SWAP_ROUGHNESS_RATIO * max(swapped, 1.0)
