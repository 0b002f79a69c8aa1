# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The classical monocular peer of the VO benchmark: frame-to-frame VO with relative scale.

What a robotics engineer writes in an afternoon with OpenCV (and what the maintainers compared
against): matches between consecutive frames (KLT tracks or ORB descriptors, through the
package's matchers), essential matrix + ``recoverPose`` for rotation and direction, inliers
triangulated with a unit baseline, and the translation length from the points shared with the
previous pair: ``median(depth in the previous pair / depth in this pair)`` in the shared frame.
Until a pair shares points with the previous one the last length is kept (the first pair
defines the unit).
"""

from __future__ import annotations

import numpy as np
from relperception.core_types import Frame
from relperception.odometry import geometry
from relperception.transforms import invert_transform
from scipy.spatial import cKDTree

#: Two keypoints within this distance (pixels) in the shared frame are the same point.
SHARED_PX = 1.5
#: Fewest shared points for a relative scale.
MIN_SHARED = 8


class FrameToFrameVO:
    """Frame-to-frame monocular VO with relative scale from shared triangulated points.

    Args:
        matcher: a relperception matcher (``match(image0, image1) -> Matches``).
        threshold_px: RANSAC threshold of the essential matrix.
    """

    def __init__(self, matcher, threshold_px: float = 1.0):
        """Start with no frame."""
        self.matcher = matcher
        self.threshold_px = threshold_px
        self._previous = None      # (gray, camera)
        self._shared = None        # (pixels in the previous frame (N, 2), depths (N,))
        self._T_world_cam = np.eye(4)
        self._step = 1.0

    def step(self, frame: Frame) -> np.ndarray:
        """Return ``T_world_cam`` (4, 4) of ``frame`` (the held pose when a pair fails)."""
        gray = frame.gray
        if self._previous is None:
            self._previous = (gray, frame.camera)
            return self._T_world_cam.copy()
        previous_gray, camera = self._previous
        matches = self.matcher.match(previous_gray, gray)
        self._previous = (gray, frame.camera)
        result = None
        if len(matches) >= 8:
            result = geometry.relative_pose_essential(matches.keypoints0, matches.keypoints1,
                                                      camera, self.threshold_px, 0.999)
        if result is None:
            self._shared = None
            return self._T_world_cam.copy()
        T_unit, inliers = result
        points0 = geometry.triangulate(matches.keypoints0[inliers], matches.keypoints1[inliers],
                                       T_unit, camera)
        depth0 = points0[:, 2]
        scale = self._relative_scale(matches.keypoints0[inliers], depth0)
        if scale is not None:
            self._step = scale
        T_cam1_cam0 = T_unit.copy()
        T_cam1_cam0[:3, 3] *= self._step
        self._T_world_cam = self._T_world_cam @ invert_transform(T_cam1_cam0)
        # Depths of this pair's points in the newer frame, in the trajectory's unit.
        points1 = points0 * self._step @ T_cam1_cam0[:3, :3].T + T_cam1_cam0[:3, 3]
        valid = np.isfinite(points1).all(axis=1) & (points1[:, 2] > 0) & (depth0 > 0)
        self._shared = (matches.keypoints1[inliers][valid].astype(np.float64),
                        points1[valid, 2])
        return self._T_world_cam.copy()

    def _relative_scale(self, pixels0: np.ndarray, depth_unit: np.ndarray) -> float | None:
        """Return the baseline length that makes shared depths agree, or None."""
        if self._shared is None or len(self._shared[0]) == 0 or len(pixels0) == 0:
            return None
        previous_pixels, previous_depth = self._shared
        distance, index = cKDTree(previous_pixels).query(pixels0, distance_upper_bound=SHARED_PX)
        hit = np.isfinite(distance) & np.isfinite(depth_unit) & (depth_unit > 0)
        if np.count_nonzero(hit) < MIN_SHARED:
            return None
        ratios = previous_depth[index[hit]] / depth_unit[hit]
        scale = float(np.median(ratios))
        return scale if np.isfinite(scale) and scale > 0 else None
