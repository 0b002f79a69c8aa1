# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The camera mount ``T_base_cam`` of ``visual_odometry_node``: from TF, or from the parameter.

``camera_mount_source: tf`` (the default) looks the mount up on TF as ROS users expect: at the
first image, the transform ``base_frame_id <- header.frame_id`` of that image (the latest one,
waiting at most ``camera_mount_tf_timeout_s``), e.g. the fixed joint ``robot_state_publisher``
puts on ``/tf_static``. The parameter ``camera_mount_xyz_qxyzw`` is used instead, with one log
line naming the frames, the values and why:

* ``tf2_ros`` is not importable (pip-only installs): INFO, decided when the node starts;
* the image's ``header.frame_id`` is empty, or the lookup fails (frame unknown, frames not
  connected, an invalid transform, nothing within the timeout): WARN.

``camera_mount_source: parameter`` uses the parameter without looking at TF.

The mount is fixed for the run: a mount changing under a running odometry would make the
published pose jump. An image with another ``frame_id`` than the first gets a WARN (once per
frame id) and the mount is kept; ``~/reset`` resolves the mount again at the next image
(:meth:`CameraMount.forget`), so a mount that reached TF late is picked up without a restart. A
transform from ``/tf`` (not static) stamped more than :data:`MOUNT_STAMP_TOLERANCE_S` before
(stale) or after the image gets a WARN; it is used as the rigid mount it should be. The source
in use is reported by :attr:`CameraMount.source` and :attr:`CameraMount.detail` (the node's
``/diagnostics``).

Only the TF session (:func:`open_tf2_session`) imports ``tf2_ros``; :class:`CameraMount` takes
any object with its ``buffer``, ``errors`` and ``close()``, so the decision is tested without it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Set, Tuple

import numpy as np
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.time import Time
from relperception.config import CAMERA_MOUNT_SOURCES
from relperception.data.messages import stamp_to_ns
from relperception.odometry.mount import camera_mount_transform
from relperception.transforms import quaternion_xyzw_from_transform

#: The parameter holding the mount used without TF.
CAMERA_MOUNT_PARAMETER = 'camera_mount_xyz_qxyzw'
SOURCE_TF, SOURCE_PARAMETER = CAMERA_MOUNT_SOURCES
#: A transform from ``/tf`` stamped further than this (s) from the image is logged as stale or
#: as later than the image (static transforms carry no stamp and are never logged).
MOUNT_STAMP_TOLERANCE_S = 1.0


class Tf2Session:
    """A ``tf2_ros.Buffer`` filled by a ``TransformListener`` on a node, until :meth:`close`.

    Args:
        node: the node the listener subscribes ``/tf`` and ``/tf_static`` on.

    Raises:
        ImportError: without ``tf2_ros``.
    """

    def __init__(self, node: Node) -> None:
        """Start listening."""
        import tf2_ros

        #: the buffer looked up in: ``lookup_transform(target, source, time, timeout=...)``.
        self.buffer = tf2_ros.Buffer()
        #: what a failed lookup raises (missing frame, not connected, extrapolation, ...).
        self.errors: Tuple[type, ...] = (tf2_ros.TransformException,)
        self._listener = tf2_ros.TransformListener(self.buffer, node)

    def close(self) -> None:
        """Stop listening (the mount is resolved: no ``/tf`` traffic for the rest of the run)."""
        self._listener.unregister()


def open_tf2_session(node: Node) -> Optional[Tf2Session]:
    """Return a :class:`Tf2Session` on ``node``, or None when ``tf2_ros`` is not importable."""
    try:
        return Tf2Session(node)
    except ImportError:
        return None


def mount_text(T_base_cam: np.ndarray) -> str:
    """Return ``T_base_cam`` for a log line: ``xyz 0.100 0.000 0.200 m, qxyzw ...`` (qw >= 0)."""
    q_xyzw = quaternion_xyzw_from_transform(T_base_cam)
    q_xyzw = -q_xyzw if q_xyzw[3] < 0 else q_xyzw
    # + 0.0: no '-0.000'
    xyz = ' '.join(f'{v:.3f}' for v in np.round(T_base_cam[:3, 3], 3) + 0.0)
    qxyzw = ' '.join(f'{v:.4f}' for v in np.round(q_xyzw, 4) + 0.0)
    return f'xyz {xyz} m, qxyzw {qxyzw}'


def _xyz_qxyzw_of_transform_msg(transform) -> list:
    """Return the 7 numbers of a ``geometry_msgs/Transform`` (translation, rotation xyzw)."""
    t, q = transform.translation, transform.rotation
    return [t.x, t.y, t.z, q.x, q.y, q.z, q.w]


class CameraMount:
    """The camera mount of a node, resolved once per run from TF or from the parameter.

    Args:
        logger: the node's logger (``info`` and ``warning`` are called).
        parameter_mount_xyz_qxyzw: ``camera_mount_xyz_qxyzw``: 7 numbers, the mount without TF.
        base_frame_id: the base frame, the lookup's target frame.
        source: ``tf`` or ``parameter`` (``camera_mount_source``).
        timeout_s: longest wait for the lookup (``camera_mount_tf_timeout_s``, >= 0).
        open_tf: returns a new TF session (``buffer``, ``errors``, ``close()``, see
            :class:`Tf2Session`), or None when ``tf2_ros`` is not importable; called when the
            mount is to be looked up at the next image. The default opens none (as without
            ``tf2_ros``); the node passes :func:`open_tf2_session`.

    Raises:
        ValueError: a bad parameter mount, source or timeout.
    """

    def __init__(self, logger, parameter_mount_xyz_qxyzw: Sequence[float], base_frame_id: str,
                 source: str = SOURCE_TF, timeout_s: float = 1.0,
                 open_tf: Callable[[], Optional[Any]] = lambda: None) -> None:
        """Decide now where TF is not used; otherwise open a TF session for the first image."""
        if source not in CAMERA_MOUNT_SOURCES:
            raise ValueError(f'camera_mount_source must be one of {list(CAMERA_MOUNT_SOURCES)}, '
                             f'got {source!r}')
        if not (np.isfinite(timeout_s) and timeout_s >= 0):
            raise ValueError(f'camera_mount_tf_timeout_s must be >= 0, got {timeout_s}')
        #: ``T_base_cam`` of ``camera_mount_xyz_qxyzw``.
        self.T_base_cam_parameter = camera_mount_transform(parameter_mount_xyz_qxyzw)
        self._logger = logger
        self._base_frame_id = base_frame_id
        self._source_wanted = source
        self._timeout_s = float(timeout_s)
        self._open_tf = open_tf
        self._T_base_cam = self.T_base_cam_parameter
        self._session = None
        self._tf_importable = source == SOURCE_TF
        #: the frame id of the first image since the start or the last reset (None: none yet).
        self.frame_id: Optional[str] = None
        self._warned_frame_ids: Set[str] = set()
        #: where the mount in use comes from: ``tf``, ``parameter``, or '' until it is resolved.
        self.source = ''
        #: why (e.g. ``TF base_link <- camera``, ``tf2_ros is not importable``).
        self.detail = ''
        self._start()

    @property
    def T_base_cam(self) -> np.ndarray:
        """The mount in use (4, 4); the parameter's until the first image resolved it."""
        return self._T_base_cam

    @property
    def pending(self) -> bool:
        """Whether the mount is still to be looked up on TF at the next image."""
        return self._session is not None

    def _start(self) -> None:
        if self._source_wanted == SOURCE_PARAMETER:
            self._use_parameter('camera_mount_source is parameter', None, warn=False)
            return
        if self._tf_importable:
            self._session = self._open_tf()
            self._tf_importable = self._session is not None
        if self._session is None:
            self._use_parameter('tf2_ros is not importable (pip-only install)', None, warn=False)
            return
        self.source, self.detail = '', 'to be looked up on TF at the first image'

    def resolve(self, frame_id: str, stamp_ns: int) -> np.ndarray:
        """Return ``T_base_cam`` for an image; the first image after a start or reset fixes it.

        Args:
            frame_id: the image's ``header.frame_id``.
            stamp_ns: the image's stamp (nanoseconds), compared with a ``/tf`` transform's.
        """
        if self.frame_id is None:
            self.frame_id = frame_id
        elif frame_id != self.frame_id and frame_id not in self._warned_frame_ids:
            self._warned_frame_ids.add(frame_id)
            self._logger.warning(
                f'image frame_id changed from {self.frame_id!r} to {frame_id!r}: the camera '
                f'mount stays the one of {self.frame_id!r} ({self.source}: '
                f'{mount_text(self._T_base_cam)}); call ~/reset to resolve it again')
        if self._session is not None:
            try:
                self._look_up(frame_id, stamp_ns)
            finally:
                self._close_session()
                if not self.source:   # the lookup raised something unexpected: say so too
                    self._use_parameter(f'the TF lookup of {frame_id!r} failed', frame_id,
                                        warn=True)
        return self._T_base_cam

    def _look_up(self, frame_id: str, stamp_ns: int) -> None:
        frames = f'{self._base_frame_id} <- {frame_id}'
        if not frame_id:
            self._use_parameter("the image's header.frame_id is empty: nothing to look up on TF",
                                frame_id, warn=True)
            return
        session = self._session
        try:
            transform = session.buffer.lookup_transform(
                self._base_frame_id, frame_id, Time(),
                timeout=Duration(seconds=self._timeout_s))
        except session.errors as error:
            self._use_parameter(f'no TF {frames} within {self._timeout_s:g} s '
                                f'({type(error).__name__}: {error})', frame_id, warn=True)
            return
        try:
            T_base_cam = camera_mount_transform(_xyz_qxyzw_of_transform_msg(transform.transform))
            tf_stamp_ns = stamp_to_ns(transform.header.stamp)
        except ValueError as error:
            self._use_parameter(f'TF {frames} is not a valid transform ({error})', frame_id,
                                warn=True)
            return
        self._T_base_cam = T_base_cam
        self.source, self.detail = SOURCE_TF, f'TF {frames}'
        age_s = (stamp_ns - tf_stamp_ns) * 1e-9
        if tf_stamp_ns and abs(age_s) > MOUNT_STAMP_TOLERANCE_S:
            when = (f'{age_s:.3f} s older than the image (stale)' if age_s > 0 else
                    f'{-age_s:.3f} s later than the image')
            self._logger.warning(
                f'camera mount on TF {frames} is a /tf transform {when}; it is used as a fixed '
                'mount (publish a rigid mount on /tf_static, e.g. a fixed joint in the URDF)')
        unused = ''
        if not np.allclose(T_base_cam, self.T_base_cam_parameter, atol=1e-6):
            unused = (f'; {CAMERA_MOUNT_PARAMETER} ({mount_text(self.T_base_cam_parameter)}) '
                      'is not used')
        self._logger.info(f'camera mount from TF: {frames} ({mount_text(T_base_cam)}){unused}')

    def _use_parameter(self, reason: str, frame_id: Optional[str], warn: bool) -> None:
        self._T_base_cam = self.T_base_cam_parameter
        self.source, self.detail = SOURCE_PARAMETER, reason
        camera = frame_id or "the image's frame"
        line = (f'camera mount from the parameter {CAMERA_MOUNT_PARAMETER}: '
                f'{self._base_frame_id} <- {camera} ({mount_text(self._T_base_cam)}) for this '
                f'run: {reason}')
        if warn:
            self._logger.warning(f'{line}; put the mount on TF (e.g. /tf_static) and call '
                                 '~/reset, or set camera_mount_source: parameter')
        else:
            self._logger.info(line)

    def forget(self) -> None:
        """Resolve the mount again at the next image (``~/reset``: TF may hold it by now)."""
        self.frame_id = None
        self._warned_frame_ids.clear()
        if self._source_wanted == SOURCE_TF and self._tf_importable:
            self._close_session()
            self._start()

    def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def close(self) -> None:
        """Stop listening to TF, if a lookup is still pending (the node is destroyed)."""
        self._close_session()
