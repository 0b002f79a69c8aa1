# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Translation hints from wheel odometry: how far the camera moved between two image stamps.

:class:`WheelHints` keeps the recent poses ``T_odom_base`` of a wheel (or any other) odometry
and answers :meth:`WheelHints.distance_m`: the distance between the camera centres at two image
stamps, each pose interpolated between the odometry poses around its stamp (position linearly,
rotation by slerp) and moved to the camera with the mount ``T_base_cam``. That distance is the
``translation_norm_m`` of :meth:`relperception.odometry.vo.VisualOdometry.step`; the node and
the offline evaluation feed it the same way, so a bag with a wheel odometry topic is scored as
the robot runs.

A stamp outside the poses kept, or further than ``max_gap_s`` from the poses around it, gives
no distance (None): the frame then runs without a hint.
"""

from __future__ import annotations

import bisect
import collections

import numpy as np
from relperception.transforms import check_transform
from scipy.spatial.transform import Rotation, Slerp


class WheelHints:
    """Recent odometry poses and the camera distance between two stamps.

    Args:
        T_base_cam: (4, 4) mount of the camera on the base (camera -> base).
        max_gap_s: largest gap (seconds) between the two odometry poses a stamp is
            interpolated between (> 0).
        max_poses: poses kept (the oldest are dropped), >= 2.

    Raises:
        ValueError: a bad mount, gap or size.
    """

    def __init__(self, T_base_cam: np.ndarray, max_gap_s: float = 0.2, max_poses: int = 2000):
        """Start with no pose."""
        self.T_base_cam = check_transform(T_base_cam, 'T_base_cam').copy()
        if not (np.isfinite(max_gap_s) and max_gap_s > 0):
            raise ValueError(f'max_gap_s must be > 0, got {max_gap_s}')
        if int(max_poses) < 2:
            raise ValueError(f'max_poses must be >= 2, got {max_poses}')
        self.max_gap_ns = int(round(max_gap_s * 1e9))
        self._stamps: collections.deque = collections.deque(maxlen=int(max_poses))
        self._poses: collections.deque = collections.deque(maxlen=int(max_poses))
        self._from_stamp_ns: int | None = None   # the last frame with a camera centre
        #: poses refused (not rigid, or not after the newest), for diagnostics.
        self.refused = 0
        #: frames given a hint by :meth:`hint_m`, and frames that got none while poses exist.
        self.frames_with_hint = 0
        self.frames_without_hint = 0

    def __len__(self) -> int:
        """Return the number of poses kept."""
        return len(self._stamps)

    def clear(self) -> None:
        """Forget every pose and the last frame (e.g. after a reset or a jump back in time)."""
        self._stamps.clear()
        self._poses.clear()
        self._from_stamp_ns = None

    def hint_m(self, stamp_ns: int) -> float | None:
        """Return the distance (m) the camera moved up to this frame, for ``VisualOdometry``.

        Frames are given in time order. The distance is measured from the last frame whose
        camera centre was known, so a frame without a hint does not lose its share. None for
        the first such frame, without poses, or when the stamp cannot be interpolated
        (counted in ``frames_without_hint``).
        """
        if not self._stamps:
            return None
        if self.camera_centre(stamp_ns) is None:
            self.frames_without_hint += 1
            return None
        start, self._from_stamp_ns = self._from_stamp_ns, int(stamp_ns)
        if start is None:
            return None
        distance = self.distance_m(start, stamp_ns)
        self.frames_with_hint += distance is not None
        return distance

    def add(self, stamp_ns: int, T_odom_base) -> bool:
        """Keep an odometry pose; return False (and count it) if it is refused.

        Args:
            stamp_ns: the pose's stamp (nanoseconds), after the newest one kept.
            T_odom_base: (4, 4) rigid pose of the base in the odometry frame (metres).
        """
        try:
            T = check_transform(T_odom_base, 'T_odom_base')
        except ValueError:
            self.refused += 1
            return False
        if self._stamps and int(stamp_ns) <= self._stamps[-1]:
            self.refused += 1
            return False
        self._stamps.append(int(stamp_ns))
        self._poses.append(T.copy())
        return True

    def camera_centre(self, stamp_ns: int) -> np.ndarray | None:
        """Return the (3,) camera centre in the odometry frame at ``stamp_ns``, or None."""
        stamps = self._stamps
        stamp_ns = int(stamp_ns)
        index = bisect.bisect_left(stamps, stamp_ns)
        if index < len(stamps) and stamps[index] == stamp_ns:
            T = self._poses[index]
        else:
            if index == 0 or index == len(stamps):
                return None
            t0, t1 = stamps[index - 1], stamps[index]
            if t1 - t0 > self.max_gap_ns:
                return None
            T0, T1 = self._poses[index - 1], self._poses[index]
            fraction = (stamp_ns - t0) / (t1 - t0)
            rotations = Rotation.from_matrix(np.stack([T0[:3, :3], T1[:3, :3]]))
            T = np.eye(4)
            T[:3, :3] = Slerp([0.0, 1.0], rotations)([fraction]).as_matrix()[0]
            T[:3, 3] = (1.0 - fraction) * T0[:3, 3] + fraction * T1[:3, 3]
        return T[:3, :3] @ self.T_base_cam[:3, 3] + T[:3, 3]

    def distance_m(self, stamp0_ns: int, stamp1_ns: int) -> float | None:
        """Return how far the camera moved from ``stamp0_ns`` to ``stamp1_ns`` (m), or None."""
        centre0 = self.camera_centre(stamp0_ns)
        centre1 = self.camera_centre(stamp1_ns)
        if centre0 is None or centre1 is None:
            return None
        return float(np.linalg.norm(centre1 - centre0))
