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

A pose is refused (counted, with the reason in :attr:`WheelHints.last_refusal`) when it is not
rigid, is not after the newest pose kept, or lies further from it than ``max_speed_mps``
allows: one glitched message cannot put a jump into the hints. When
:data:`RESTART_AFTER_POSES` refused poses in a row agree with each other (each after the
previous one, within the speed), the odometry itself has jumped (a reset, a new clock, or the
pose kept before was the glitch): the poses kept are dropped and the hints go on from those.
"""

from __future__ import annotations

import bisect
import collections

import numpy as np
from relperception.transforms import check_transform
from scipy.spatial.transform import Rotation, Slerp

#: Refused poses in a row, consistent with each other, after which they replace the poses kept.
RESTART_AFTER_POSES = 3


class WheelHints:
    """Recent odometry poses and the camera distance between two stamps.

    Args:
        T_base_cam: (4, 4) mount of the camera on the base (camera -> base).
        max_gap_s: largest gap (seconds) between the two odometry poses a stamp is
            interpolated between (> 0).
        max_poses: poses kept (the oldest are dropped), >= 2.
        max_speed_mps: fastest the base may move between two poses (m/s, > 0); a pose further
            from the newest one kept is refused.

    Raises:
        ValueError: a bad mount, gap, size or speed.
    """

    def __init__(self, T_base_cam: np.ndarray, max_gap_s: float = 0.2, max_poses: int = 2000,
                 max_speed_mps: float = 50.0):
        """Start with no pose."""
        self.T_base_cam = check_transform(T_base_cam, 'T_base_cam').copy()
        if not (np.isfinite(max_gap_s) and max_gap_s > 0):
            raise ValueError(f'max_gap_s must be > 0, got {max_gap_s}')
        if int(max_poses) < 2:
            raise ValueError(f'max_poses must be >= 2, got {max_poses}')
        if not (np.isfinite(max_speed_mps) and max_speed_mps > 0):
            raise ValueError(f'max_speed_mps must be > 0, got {max_speed_mps}')
        self.max_gap_ns = int(round(max_gap_s * 1e9))
        self.max_speed_mps = float(max_speed_mps)
        self._stamps: collections.deque = collections.deque(maxlen=int(max_poses))
        self._poses: collections.deque = collections.deque(maxlen=int(max_poses))
        self._refused_in_a_row: list = []   # (stamp_ns, pose) refused since the last kept
        self._from_stamp_ns: int | None = None   # the last frame with a camera centre
        #: poses refused (not rigid, bad stamp, not after the newest, too far), for diagnostics.
        self.refused = 0
        #: why the last pose was refused ('' before any).
        self.last_refusal = ''
        #: times the poses kept were replaced by refused poses that agree with each other.
        self.restarts = 0
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
        self._refused_in_a_row.clear()
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
        """Keep an odometry pose; return False if refused (counted, reason in ``last_refusal``).

        Args:
            stamp_ns: the pose's stamp (nanoseconds), after the newest one kept.
            T_odom_base: (4, 4) rigid pose of the base in the odometry frame (metres), within
                ``max_speed_mps`` of the newest pose kept.
        """
        try:
            T = check_transform(T_odom_base, 'T_odom_base')
        except ValueError as error:
            return self.refuse(f'not a rigid pose: {error}')
        stamp_ns = int(stamp_ns)
        if not self._stamps:
            self._keep(stamp_ns, T)
            return True
        problem = self._step_problem(self._stamps[-1], self._poses[-1], stamp_ns, T)
        if problem is None:
            self._refused_in_a_row.clear()
            self._keep(stamp_ns, T)
            return True
        row = self._refused_in_a_row
        if row and self._step_problem(*row[-1], stamp_ns, T) is None:
            row.append((stamp_ns, T.copy()))
        else:
            row[:] = [(stamp_ns, T.copy())]
        if len(row) < RESTART_AFTER_POSES:
            return self.refuse(problem)
        poses = list(row)
        self.clear()
        for stamp, pose in poses:
            self._keep(stamp, pose)
        self.restarts += 1
        return True

    def refuse(self, reason: str) -> bool:
        """Count a pose refused before it reached :meth:`add` (e.g. a bad stamp); return False."""
        self.refused += 1
        self.last_refusal = str(reason)
        return False

    def _keep(self, stamp_ns: int, T: np.ndarray) -> None:
        self._stamps.append(stamp_ns)
        self._poses.append(T.copy())

    def _step_problem(self, stamp0_ns: int, T0: np.ndarray, stamp1_ns: int,
                      T1: np.ndarray) -> str | None:
        """Return why pose 1 cannot follow pose 0, or None."""
        if stamp1_ns <= stamp0_ns:
            return (f'stamp {stamp1_ns / 1e9:.3f} s is not after the newest pose kept '
                    f'({stamp0_ns / 1e9:.3f} s)')
        distance = float(np.linalg.norm(T1[:3, 3] - T0[:3, 3]))
        seconds = (stamp1_ns - stamp0_ns) / 1e9
        if distance > self.max_speed_mps * seconds:
            return (f'{distance:.3f} m from the newest pose kept in {seconds:.3f} s, faster '
                    f'than wheel_odom_max_speed_mps ({self.max_speed_mps:g} m/s)')
        return None

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
