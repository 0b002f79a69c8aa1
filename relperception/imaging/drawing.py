# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Debug drawings of correspondences (the ``matches_image`` topic and reports)."""

import cv2
import numpy as np
from relperception.core_types import Matches


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
