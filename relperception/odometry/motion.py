# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Match-driven odometry: poses from correspondences computed elsewhere (the matcher node).

In the ROS graph the matcher and the odometry are separate nodes: the odometry receives the
matches between an older frame (stamp0) and a newer one (stamp1), not images.
:class:`MatchOdometry` chains those relative poses into ``T_world_cam``, where *world* is the
camera frame at the older stamp of the first message it accepted (identity there).

The pose of each pair comes from the same estimator as
:class:`~relperception.odometry.vo.VisualOdometry`
(:func:`~relperception.odometry.vo.estimate_pose_from_matches`): RGB-D PnP with the OLDER
frame's depth; otherwise the essential matrix, scaled by depth (older frame, else newer frame;
the message then says 'keyframe depth' / 'frame depth' for older / newer), else by
``translation_norm_m``, else by constant speed (the last metric step length per second times
the elapsed time), else unit norm.

State: a bounded history ``stamp -> T_world_cam`` (``history_size`` entries, oldest evicted).

* first message: ``T_world_cam(stamp0)`` = identity, status ``'initialized'``;
* ``stamp0`` in the history: ``T_world_cam(stamp1) = T_world_cam(stamp0) @ inv(T_cam1_cam0)``,
  status ``'tracking'``. Any earlier stamp works, so a matcher that compares against a
  keyframe instead of the previous frame is served as well;
* ``stamp0`` unknown (a dropped frame, a gap, or the older frame was lost): the older frame is
  placed at the last pose and the step continues from there, status ``'reinitialized'``
  with the reason in ``message`` (the motion during the gap is not observed);
* failure (too few matches or inliers, RANSAC failure, no older stamp because the cloud was
  empty, stamps not increasing, ``stamp1`` already known or older than the last pose): status
  ``'lost'``, the last pose is returned and nothing is added to the history. Bad data never
  raise; only wrong argument types do (``ValueError``).

A monocular pair below ``keyframe_min_parallax_px`` median flow counts as static (pose kept).
Frame-to-frame, slow monocular motion is therefore under-estimated; the matcher side decides
which frame is compared (a keyframe-matching matcher avoids that). ``use_motion_prior`` is
accepted for configuration compatibility; it concerns the matcher and is not used here.
"""

from __future__ import annotations

import collections
import logging
import numbers
import time
import typing

import numpy as np

from relperception.core_types import Camera, Matches
from relperception.odometry.vo import (
    check_odometry_conf,
    check_translation_norm,
    estimate_pose_from_matches,
    ODOMETRY_DEFAULT_CONF,
    PoseFailure,
    sanitize_depth,
    STATUS_INITIALIZED,
    STATUS_LOST,
    STATUS_REINITIALIZED,
    STATUS_TRACKING,
    VOResult,
)
from relperception.transforms import invert_transform

logger = logging.getLogger(__name__)

#: Default number of stamps whose pose is remembered.
DEFAULT_HISTORY_SIZE = 200


def _check_stamp(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f'{name} must be integer nanoseconds, got {value!r}')
    return int(value)


class MatchOdometry:
    """Chain relative poses estimated from matches older frame -> newer frame.

    Args:
        conf: overrides of :attr:`default_conf` (the 'odometry.*' keys without the prefix);
            unknown keys or invalid values raise ``ValueError``.
        history_size: number of stamp -> pose entries kept (>= 2).
    """

    default_conf: typing.ClassVar[dict] = ODOMETRY_DEFAULT_CONF

    def __init__(self, conf: dict | None = None, history_size: int = DEFAULT_HISTORY_SIZE):
        """Validate the configuration and start in the reset state."""
        self.conf = check_odometry_conf(conf, self.default_conf)
        if isinstance(history_size, bool) or not isinstance(history_size, numbers.Integral) \
                or history_size < 2:
            raise ValueError(f'history_size must be an integer >= 2, got {history_size!r}')
        self.history_size = int(history_size)
        self.reset()

    def reset(self) -> None:
        """Forget everything; the next message starts a new world frame at identity."""
        self._history: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()
        self._T_world_last = np.eye(4)
        self._stamp_last: int | None = None
        self._speed_mps: float | None = None
        self._last_step_m: float | None = None
        self._lost_stamp: int | None = None

    @property
    def initialized(self) -> bool:
        """Whether a world frame exists (a message was accepted since the last reset)."""
        return bool(self._history)

    @property
    def last_stamp_ns(self) -> int | None:
        """Stamp of the newest pose in the history (None before the first pose)."""
        return self._stamp_last

    def pose_at(self, stamp_ns: int) -> np.ndarray | None:
        """Return a copy of the (4, 4) ``T_world_cam`` remembered for ``stamp_ns``, or None."""
        pose = self._history.get(int(stamp_ns))
        return None if pose is None else pose.copy()

    # ------------------------------------------------------------------ public API

    def step(self, stamp0_ns: int | None, stamp1_ns: int, matches: Matches, camera: Camera,
             depth0: np.ndarray | None = None, depth1: np.ndarray | None = None,
             translation_norm_m: float | None = None) -> VOResult:
        """Estimate the pose of the newer frame from its matches with the older frame.

        Args:
            stamp0_ns: stamp of the older frame, integer nanoseconds; None when unknown (an
                empty correspondence cloud), which gives 'lost'.
            stamp1_ns: stamp of the newer frame, integer nanoseconds.
            matches: correspondences, ``keypoints0`` in the older image, ``keypoints1`` in
                the newer, float32 pixels.
            camera: intrinsics of both images.
            depth0: optional (H, W) float32 metres of the older frame, NaN invalid.
            depth1: optional (H, W) float32 metres of the newer frame (monocular scale only).
            translation_norm_m: optional distance in metres travelled from the older to the
                newer frame (monocular scale); NaN or negative values are ignored.

        Returns:
            :class:`~relperception.odometry.vo.VOResult` for ``stamp1_ns`` (``is_keyframe``
            is True when the pose entered the history); never raises on bad data.

        Raises:
            ValueError: stamps that are not integers, ``matches`` not :class:`Matches`,
                ``camera`` not :class:`Camera`, or ``translation_norm_m`` not a number.
        """
        stamp1_ns = _check_stamp('stamp1_ns', stamp1_ns)
        if stamp0_ns is not None:
            stamp0_ns = _check_stamp('stamp0_ns', stamp0_ns)
        if not isinstance(matches, Matches):
            raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
                f'matches must be relperception.core_types.Matches, got {type(matches)}')
        if not isinstance(camera, Camera):
            raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
                f'camera must be relperception.core_types.Camera, got {type(camera)}')
        translation_norm_m = check_translation_norm(translation_norm_m)
        start = time.perf_counter()
        result = self._step(stamp0_ns, stamp1_ns, matches, camera, depth0, depth1,
                            translation_norm_m)
        logger.debug('match odometry %s -> %s %s in %.1f ms: %s', stamp0_ns, stamp1_ns,
                     result.status, 1e3 * (time.perf_counter() - start), result.message)
        return result

    # ------------------------------------------------------------------ internals

    def _lost(self, stamp1_ns: int, message: str, matches: Matches | None = None,
              mode: str = '') -> VOResult:
        matches = Matches.empty() if matches is None else matches
        self._lost_stamp = stamp1_ns
        return VOResult(stamp1_ns, self._T_world_last.copy(), STATUS_LOST, len(matches), 0,
                        False, matches, message, np.zeros(len(matches), dtype=bool), mode)

    def _check_depth(self, name: str, depth, camera: Camera) -> tuple[np.ndarray | None, str]:
        """Return the sanitised depth (None if unusable) and a note when it was dropped."""
        if depth is None:
            return None, ''
        depth = np.asarray(depth)
        if depth.shape != (camera.height, camera.width) \
                or not np.issubdtype(depth.dtype, np.floating):
            return None, (f'; {name} ignored ({depth.dtype} {depth.shape}, expected float '
                          f'{(camera.height, camera.width)})')
        return sanitize_depth(depth, self.conf), ''

    def _step(self, stamp0_ns: int | None, stamp1_ns: int, matches: Matches, camera: Camera,
              depth0, depth1, translation_norm_m: float | None) -> VOResult:
        if stamp0_ns is None:
            return self._lost(stamp1_ns, 'no older stamp (empty correspondences): '
                              'no motion information', matches)
        if stamp1_ns <= stamp0_ns:
            return self._lost(stamp1_ns, f'stamps do not increase (stamp0 {stamp0_ns}, '
                              f'stamp1 {stamp1_ns})', matches)
        if stamp1_ns in self._history:
            return self._lost(stamp1_ns, f'stamp1 {stamp1_ns} already has a pose', matches)
        if self._stamp_last is not None and stamp1_ns < self._stamp_last:
            return self._lost(stamp1_ns, f'stamp1 {stamp1_ns} is older than the last pose '
                              f'({self._stamp_last}): out of order', matches)
        depth0, note0 = self._check_depth('depth0', depth0, camera)
        depth1, note1 = self._check_depth('depth1', depth1, camera)

        if not self._history:
            status, reason = STATUS_INITIALIZED, 'first message: world = camera at stamp0'
            T_world_cam0 = self._T_world_last.copy()
        elif stamp0_ns in self._history:
            status, reason = STATUS_TRACKING, ''
            T_world_cam0 = self._history[stamp0_ns]
        else:
            why = ('the older frame was lost' if stamp0_ns == self._lost_stamp
                   else 'older frame unknown (dropped frame or gap)')
            status = STATUS_REINITIALIZED
            reason = f'{why}: re-initialised at the last pose'
            T_world_cam0 = self._T_world_last.copy()

        estimate = estimate_pose_from_matches(
            matches, camera, camera, self.conf, depth0, depth1,
            scale_fallback=lambda: self._fallback_scale(stamp0_ns, stamp1_ns,
                                                        translation_norm_m))
        if isinstance(estimate, PoseFailure):
            message = estimate.message + (f' ({reason})' if reason else '') + note0 + note1
            return self._lost(stamp1_ns, message, matches, estimate.mode)
        if estimate.T_cam1_cam0 is None:
            T_world_cam1 = T_world_cam0.copy()
        else:
            T_world_cam1 = T_world_cam0 @ invert_transform(estimate.T_cam1_cam0)
        if not self._history or stamp0_ns not in self._history:
            self._remember(stamp0_ns, T_world_cam0)
        self._remember(stamp1_ns, T_world_cam1)
        if estimate.T_cam1_cam0 is not None:
            self._update_speed(stamp0_ns, stamp1_ns, estimate)
        self._T_world_last = T_world_cam1.copy()
        self._stamp_last = stamp1_ns
        self._lost_stamp = None
        message = '; '.join(part for part in (reason, estimate.message) if part) + note0 + note1
        return VOResult(stamp1_ns, T_world_cam1.copy(), status, len(matches),
                        estimate.num_inliers, True, matches, message, estimate.inlier_mask,
                        estimate.mode)

    def _remember(self, stamp_ns: int, T_world_cam: np.ndarray) -> None:
        self._history[stamp_ns] = T_world_cam.copy()
        self._history.move_to_end(stamp_ns)
        while len(self._history) > self.history_size:
            self._history.popitem(last=False)

    def _update_speed(self, stamp0_ns: int, stamp1_ns: int, estimate) -> None:
        """Remember the metric step length and speed (monocular scale by constant speed)."""
        distance = float(np.linalg.norm(estimate.T_cam1_cam0[:3, 3]))
        self._last_step_m = distance
        self._speed_mps = distance / ((stamp1_ns - stamp0_ns) * 1e-9)

    def _fallback_scale(self, stamp0_ns: int, stamp1_ns: int,
                        translation_norm_m: float | None) -> tuple[float, str]:
        """Return the monocular translation norm when depth gives none, and its source."""
        if translation_norm_m is not None:
            return translation_norm_m, 'translation_norm_m'
        if self._speed_mps is not None:
            return self._speed_mps * (stamp1_ns - stamp0_ns) * 1e-9, 'constant speed'
        if self._last_step_m is not None:
            return self._last_step_m, 'previous step'
        return 1.0, 'nothing (unit translation, arbitrary scale)'
