# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``visual_odometry_node``: matcher + visual odometry in one node, the tracker ``eval`` scores.

Subscribes:
    ``image`` (``sensor_msgs/Image``; ``image/compressed`` with ``image_transport:=compressed``),
    ``camera_info`` (``sensor_msgs/CameraInfo``, latest kept; while none arrived and a publisher
    latches it (reliable, transient local: published once, maybe before this node started), a
    second subscription with that QoS takes it) and the optional ``depth_in``
    (:mod:`relperception.nodes.depth_input`; the depth nearest the image within
    ``depth_max_dt_s``). Sensor-data QoS (best effort, keep last 5), overridable. The optional
    ``wheel_odom`` (``nav_msgs/Odometry``, :mod:`relperception.nodes.wheel_odometry_input`):
    the distance the camera moved between frames, the tracker's translation hint (the
    monocular scale; with ``odometry.hint_map`` fused into the map).

Publishes:
    ``odom`` (``nav_msgs/Odometry``, ``header.frame_id`` = ``odom_frame_id``,
    ``child_frame_id`` = ``base_frame_id``, stamp = the image's), ``path`` (``nav_msgs/Path``,
    the last ``path_max_length`` poses; built and published only while something subscribes
    to it, the poses are kept in any case), TF ``odom -> base_link`` when ``tf2_ros`` is
    importable and ``publish_tf`` is true, ``correspondences`` (``sensor_msgs/PointCloud2``,
    layout in :mod:`relperception.data.correspondences`: the matches the tracker used, from
    the keyframe (stamp in the points) to this frame (header)) and ``diagnostics``.

Parameters:
    ``matcher``, the matcher sections and ``odometry.*`` (the shared schema,
    :mod:`relperception.config`), and the node-local ``camera_mount_source``,
    ``camera_mount_tf_timeout_s``, ``camera_mount_xyz_qxyzw`` (read only), ``odom_frame_id``,
    ``base_frame_id``, ``path_max_length``, ``depth_max_dt_s``, ``wheel_odom_max_gap_s``,
    ``wheel_odom_max_speed_mps``, ``publish_tf``, ``image_transport`` and ``depth_transport``.

Each image runs through :class:`~relperception.pipeline.vo_pipeline.VOPipeline` — the same
matcher and :class:`~relperception.odometry.vo.VisualOdometry` with the same configuration as
``relperception eval``, so the robot runs what the evaluation scored (keyframes, the motion
prior handed to the matcher, the monocular local map and its bundle adjustment). A parameter
change applies between frames (a new matcher where its parameters changed); the trajectory and
the map are kept.

Frames (REP 103 / 105): with the mount ``T_base_cam`` the published pose is
``T_odom_base = T_base_cam @ T_world_cam @ inv(T_base_cam)``: odom = base_link at the first frame.
The mount (:mod:`relperception.nodes.camera_mount`) is looked up on TF at the first image
(``base_frame_id <- header.frame_id``) where ``tf2_ros`` is importable, else it is
``camera_mount_xyz_qxyzw`` (x y z qx qy qz qw; default the optical-to-body rotation); the log and
``/diagnostics`` (``camera_mount_source``) say which. It is fixed for the run; ``~/reset`` looks
it up again.

Real time: the subscription callback only hands the message to a
:class:`~relperception.nodes.processing.FrameWorker` that keeps the newest frame; tracking runs on
its thread and bundle adjustment in a worker process. Bad input (undecodable image, no
camera_info yet, an image of another size than camera_info, a zero stamp, stamps going
backwards) is logged (throttled), counted as dropped and skipped, and counted by reason in
``/diagnostics`` (``frames_undecodable``, ``frames_without_camera_info``,
``frames_not_matching_camera_info``, ``frames_bad_stamp``; also ``frames_paused`` and
``frames_replaced``, a frame replaced by a newer one while busy); a lost frame is logged and not
published. A stamp that jumps back or far ahead is skipped as a glitch, unless the next frame
follows it (:class:`~relperception.nodes.stamp_order.StampOrder`): then a jump back (a bag
restarted) resets the odometry and the path.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Dict, List, Optional, Tuple

from nav_msgs.msg import Odometry, Path
import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile
from relperception.config import NODE_LOCAL_SPECS, ODOMETRY_TOPIC, ParameterSpec, SPECS
from relperception.core_types import Camera, Frame
from relperception.data.input_counters import (CAMERA_INFO_REFUSED, depth_problem_counter,
                                               FRAMES_NOT_MATCHING_CAMERA_INFO, FRAMES_PAUSED,
                                               FRAMES_UNDECODABLE, FRAMES_WITHOUT_CAMERA_INFO)
from relperception.data.messages import camera_from_camera_info
from relperception.nodes.camera_info_input import CameraInfoInput
from relperception.nodes.camera_mount import CAMERA_MOUNT_PARAMETER, CameraMount, open_tf2_session
from relperception.nodes.depth_input import DepthInput, DepthSync
from relperception.nodes.diagnostics import DiagnosticsPublisher
from relperception.nodes.entrypoint import spin_node
from relperception.nodes.image_input import ImageInput
from relperception.nodes.lost_messages import LostMessages
from relperception.nodes.odometry_control import OdometryControl
from relperception.nodes.parameters import (current_config, declare_parameters,
                                            MATCHER_PARAMETERS)
from relperception.nodes.processing import FrameWorker, ReasonThrottle, SkipFrame
from relperception.nodes.ros_messages import (
    cloud_msg_from_matches,
    odometry_msg,
    pose_stamped_msg,
    transform_stamped_msg,
)
from relperception.nodes.stamp_order import StampOrder
from relperception.nodes.wheel_odometry_input import TOPIC as WHEEL_ODOM_TOPIC
from relperception.nodes.wheel_odometry_input import WheelOdometryInput
from relperception.odometry.covariance import (conjugate_covariance, positive_part,
                                               ros_order, rotate_covariance, twist_from_poses,
                                               UNKNOWN_VARIANCE)
from relperception.odometry.mount import camera_from_odom, odom_from_camera
from relperception.odometry.vo import (METRIC_SCALE_SOURCES, STATUS_LOST, STATUS_REINITIALIZED,
                                       STATUS_TRACKING)
from relperception.pipeline.realtime import (LEVEL_ERROR, LEVEL_OK, LEVEL_WARN, RunningStats,
                                             VersionedConfig)
from relperception.pipeline.vo_pipeline import VOPipeline
from relperception.transforms import invert_transform
from sensor_msgs.msg import CameraInfo, PointCloud2

#: The parameters of this node from the shared schema: the matchers and the odometry.
VO_PARAMETERS: List[str] = MATCHER_PARAMETERS + [
    name for name in SPECS if name.startswith('odometry.')]

#: Node-local parameters declared by this node (the transports by its inputs), from the
#: schema's :data:`relperception.config.NODE_LOCAL_SPECS`.
LOCAL_SPECS: Dict[str, ParameterSpec] = {
    name: spec for name, spec in NODE_LOCAL_SPECS['visual_odometry_node'].items()
    if name not in ('image_transport', 'depth_transport', 'depth_queue_size')}


def build_pipeline(config: Dict[str, Any]) -> VOPipeline:
    """Return the VO pipeline of a flat configuration (matchers and ``odometry.*``).

    Raises:
        ValueError: for an invalid configuration.
    """
    return VOPipeline(_vo_config(config), max_history=1000)


def _vo_config(config: Dict[str, Any]) -> Dict[str, Any]:
    """Return the matcher and odometry entries of a node's flat configuration."""
    return {name: config[name] for name in VO_PARAMETERS if name in config}


class VisualOdometryNode(Node):
    """Track each image with the VO pipeline and publish ``odom``, ``path`` and TF.

    Args:
        node_name: the node name.
        **kwargs: passed to ``rclpy.node.Node`` (``context``, ``namespace``,
            ``parameter_overrides``, ...).
    """

    def __init__(self, node_name: str = 'visual_odometry_node', **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        self._config: Optional[VersionedConfig] = None
        declare_parameters(self, VO_PARAMETERS, on_change=self._on_parameters,
                           check=lambda config: build_pipeline(config).odometry.close())
        declare_parameters(self, list(LOCAL_SPECS), on_change=self._on_parameters,
                           specs=LOCAL_SPECS)
        self._config = VersionedConfig({**current_config(self, VO_PARAMETERS),
                                        **current_config(self, list(LOCAL_SPECS), LOCAL_SPECS)})
        config, self._config_version = self._config.get()
        if config['odom_frame_id'] == config['base_frame_id']:
            # tf2 refuses a transform from a frame to itself (TF_SELF_TRANSFORM, every frame)
            raise ValueError('odom_frame_id and base_frame_id must differ, both are '
                             f"{config['odom_frame_id']!r}")
        own_odometry = self.resolve_topic_name(ODOMETRY_TOPIC)
        if self.resolve_topic_name(WHEEL_ODOM_TOPIC) == own_odometry:
            raise ValueError(f'{WHEEL_ODOM_TOPIC} is remapped to {own_odometry}, where this node '
                             'publishes its own odometry: it would read itself as wheel odometry; '
                             'remap it to the base odometry, or put this node in a namespace')
        #: ``T_base_cam``: from TF at the first image, or the parameter (raises ValueError for a
        #: bad ``camera_mount_xyz_qxyzw``, before any thread or process starts).
        self.camera_mount = CameraMount(
            self.get_logger(), config[CAMERA_MOUNT_PARAMETER], config['base_frame_id'],
            source=config['camera_mount_source'], timeout_s=config['camera_mount_tf_timeout_s'],
            open_tf=lambda: open_tf2_session(self))
        self.pipeline = build_pipeline(config)
        self._rectified_input = config['rectified_input']
        self.odom_frame_id = config['odom_frame_id']
        self.base_frame_id = config['base_frame_id']
        self._path_poses: collections.deque = collections.deque(
            maxlen=config['path_max_length'])
        self._depth_max_dt_ns = round(config['depth_max_dt_s'] * 1e9)
        self._depth_wait_s = config['depth_wait_s']
        #: depth hits and misses per frame while depth arrives (misses run monocular).
        self.depth_sync = DepthSync(self.get_logger(), config['depth_max_miss_rate'])

        self._camera: Optional[Camera] = None
        self._stamp_order = StampOrder()
        #: (T_world_cam, T_odom_base tracked, stamp ns) of the last published pose (twist).
        self._last_published: Optional[tuple] = None
        self._pending_anchor = None
        #: re-anchoring (initialpose): published pose = T_anchor @ tracked pose; published
        #: covariance = the given one + what the tracked one grew by since (None: the tracked
        #: one): (given, tracked at the anchor), each 36 ROS-ordered values.
        self._T_anchor = np.eye(4)
        self._anchor_covariances: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self.status_counts: collections.Counter = collections.Counter()

        self._tf_broadcaster = None
        if config['publish_tf']:
            try:
                from tf2_ros import TransformBroadcaster
            except ImportError:
                self.get_logger().info('tf2_ros is not importable: TF '
                                       f'{self.odom_frame_id} -> {self.base_frame_id} is disabled '
                                       '(odom and path are still published)')
            else:
                self._tf_broadcaster = TransformBroadcaster(self)

        self.stats = RunningStats()
        self._worker: FrameWorker = FrameWorker(
            f'{node_name} tracking', self._process, self.get_logger(), self.stats,
            clock_ns=lambda: self.get_clock().now().nanoseconds)
        self._odom = self.create_publisher(Odometry, ODOMETRY_TOPIC, QoSProfile(depth=10))
        self._odometry_shared = False
        self._odometry_shared_lock = threading.Lock()
        self._path = self.create_publisher(Path, 'path', QoSProfile(depth=1))
        self._correspondences = self.create_publisher(PointCloud2, 'correspondences',
                                                      QoSProfile(depth=5))
        #: messages lost in transport, per input (``message_lost`` events).
        self.lost = LostMessages(self)
        self._input = ImageInput(self, self._worker.submit, lost=self.lost)
        self.depth = DepthInput(self, lambda: self._camera, lost=self.lost)
        #: translation hints from wheel odometry (``wheel_odom``), where it is published.
        self.wheel = WheelOdometryInput(self, self.T_base_cam, config['wheel_odom_max_gap_s'],
                                        config['wheel_odom_max_speed_mps'])
        #: camera_info messages refused (malformed intrinsics or size).
        self.camera_info_refused = 0
        # per reason: a camera_info refused for another reason is logged at once
        self._camera_info_throttle = ReasonThrottle(5.0)
        #: why the ``camera_info`` in use looks like another image size's ('' when it looks
        #: plausible): logged when it changes, in ``/diagnostics`` (WARN) while it holds.
        self.camera_info_suspect = ''
        # per reason: a frame lost for another reason within the period is logged at once
        self._lost_throttle = ReasonThrottle(1.0)
        #: stamp-ordered state of the tracker: last status and scale source, lost streak.
        self.tracking_state = ''
        self.scale_source = ''
        self.frames_lost_in_a_row = 0
        self.control = OdometryControl(self, self.odom_frame_id)
        self._diagnostics = DiagnosticsPublisher(self, [('tracking', self.stats)],
                                                 counters=self.input_problems,
                                                 state=self.tracking_report)
        #: ``camera_info``: sensor-data QoS (overridable), and latched where published so.
        self.camera_info_input = CameraInfoInput(self, self._on_camera_info, lost=self.lost)
        self.get_logger().info(
            f'visual odometry ({config["matcher"]}, {config["odometry.mode"]}) on '
            f'{self.resolve_topic_name(self._input.topic)}, publishing '
            f'{self.resolve_topic_name("odom")} in {self.odom_frame_id}')

    # ------------------------------------------------------------------ properties

    @property
    def T_base_cam(self) -> np.ndarray:
        """The camera mount in use (4, 4): see :class:`CameraMount`."""
        return self.camera_mount.T_base_cam

    @property
    def worker(self) -> FrameWorker:
        """The worker thread that tracks frames (its ``stats`` feed the diagnostics)."""
        return self._worker

    @property
    def camera(self) -> Optional[Camera]:
        """The camera of the latest valid ``camera_info``, or None."""
        return self._camera

    def input_problems(self) -> Dict[str, int]:
        """Refused inputs by kind, for the diagnostics (monotonic counts).

        ``camera_info_refused``, ``frames_16bit_low_range``, ``depth_<problem>`` for every
        :data:`~relperception.imaging.depth_checks.DEPTH_PROBLEMS` met so far and
        ``<input>_lost_in_transport`` for inputs DDS lost messages of, and once wheel
        odometry arrives ``wheel_odom_refused``, ``wheel_odom_restarts`` and
        ``frames_without_wheel_hint``. (Frames
        without depth
        are reported with a rate by :class:`~relperception.nodes.depth_input.DepthSync`.)
        """
        counts = {CAMERA_INFO_REFUSED: self.camera_info_refused}
        counts.update({depth_problem_counter(problem): n
                       for problem, n in self.depth.problems.items()})
        counts.update(self.lost.counts())
        counts.update(self._input.counts())
        hints = self.wheel.hints
        if len(hints) or hints.refused:
            counts.update({'wheel_odom_refused': hints.refused,
                           'wheel_odom_restarts': hints.restarts,
                           'frames_without_wheel_hint': hints.frames_without_hint})
        return counts

    def tracking_report(self) -> Tuple[int, str, Dict[str, str]]:
        """Return the tracking state for ``/diagnostics``: ``(level, message, values)``.

        ERROR while tracking is lost (nothing is published then: the last pose would be stale
        and a held pose would read as a robot standing still); WARN while images are skipped
        for want of a valid ``camera_info`` (:meth:`camera_info_problem` says why), while
        the translation has no metric scale (monocular without depth or a scale hint: its
        covariance is large), while the ``camera_info`` in use looks like another image size's
        (``camera_info_suspect``: why, '' when plausible) and while another node publishes on
        ``odom`` (:meth:`odometry_shared`); OK otherwise. Values: ``tracking_state`` (one of
        :data:`relperception.odometry.vo.TRACKING_STATES`, '' before the first
        frame), ``scale_source`` ('' until a frame of the trajectory measured one, also after
        a reset), ``metric_scale``, ``frames_lost_in_a_row``, ``frames_lost``,
        ``reinitializations``, ``paused``, ``camera_mount_source`` (``tf`` or ``parameter``; ''
        until the first image resolved it) and ``camera_mount_detail`` (the frames, or why the
        parameter), and, from :class:`DepthSync`, ``depth_hits``, ``frames_without_depth`` and
        ``depth_miss_rate`` (WARN above ``depth_max_miss_rate``).
        """
        values = {'tracking_state': self.tracking_state, 'scale_source': self.scale_source,
                  'metric_scale': str(self.scale_source in METRIC_SCALE_SOURCES).lower(),
                  'frames_lost_in_a_row': self.frames_lost_in_a_row,
                  'frames_lost': self.status_counts[STATUS_LOST],
                  'reinitializations': self.status_counts[STATUS_REINITIALIZED],
                  'paused': str(self.control.paused).lower(),
                  'camera_mount_source': self.camera_mount.source,
                  'camera_mount_detail': self.camera_mount.detail,
                  'camera_info_suspect': self.camera_info_suspect}
        depth_level, depth_message, depth_values = self.depth_sync.report()
        values.update(depth_values)
        missing_camera = self.camera_info_problem() if self.stats.snapshot().received else ''
        if self.control.paused:
            level, message = LEVEL_WARN, 'paused (~/pause): frames are skipped'
        elif missing_camera:
            level, message = LEVEL_WARN, f'frames are skipped: {missing_camera}'
        elif self.tracking_state == STATUS_LOST:
            level, message = LEVEL_ERROR, (f'tracking lost for {self.frames_lost_in_a_row} '
                                           'frames: no odometry published until it recovers')
        elif self.tracking_state and self.scale_source not in METRIC_SCALE_SOURCES:
            level, message = LEVEL_WARN, (f'no metric scale (scale from '
                                          f'{self.scale_source or "nothing"}): translation '
                                          'covariance is large')
        else:
            level, message = LEVEL_OK, ''
        if depth_level > LEVEL_OK:
            message = f'{message}; {depth_message}' if message else depth_message
        suspect = self.camera_info_suspect and f'camera_info used, but {self.camera_info_suspect}'
        shared = self.odometry_shared()
        for note in (suspect, shared):
            if note:
                level = max(level, LEVEL_WARN)
                message = f'{message}; {note}' if message else note
        return max(level, depth_level), message, values

    def odometry_shared(self) -> str:
        """Return why ``odom`` carries another odometry too ('' when this node alone publishes it).

        E.g. a base controller's ``/odom`` with this node in no namespace: the subscribers would
        get both odometries. Logged at WARN when it starts; ``/diagnostics`` is WARN meanwhile.
        """
        topic = self._odom.topic_name
        others = self.count_publishers(topic) - 1
        text = ''
        if others > 0:
            text = (f'{others} other publisher(s) on {topic}: its subscribers get two '
                    'odometries; put this node in a namespace or remap its odom')
        with self._odometry_shared_lock:   # the diagnostics timer and callers: one line
            if text and not self._odometry_shared:
                self.get_logger().warning(text)
            self._odometry_shared = bool(text)
        return text

    @property
    def frames_without_depth(self) -> int:
        """Frames processed without a usable depth image while depth arrives."""
        return self.depth_sync.misses

    # ------------------------------------------------------------------ callbacks

    def _on_parameters(self, changes: Dict[str, Any]) -> None:
        if self._config is not None:
            self._config.update(changes)

    def camera_info_problem(self) -> str:
        """Return why no camera is known yet ('' once a valid ``camera_info`` arrived).

        Names the resolved topic and says whether anything publishes it or what was refused,
        for the skipped frames' log line and ``/diagnostics``.
        """
        if self._camera is not None:
            return ''
        topic = self.camera_info_input.topic_name
        if self.camera_info_refused:
            return (f'no valid camera_info yet: all {self.camera_info_refused} received on '
                    f'{topic} were refused (see the warnings)')
        publishers = self.count_publishers(topic)
        if publishers == 0:
            return (f'no camera_info yet: nothing publishes {topic} (remap camera_info to the '
                    "camera's CameraInfo topic)")
        return (f'no camera_info received yet from the {publishers} publisher(s) of {topic} '
                '(a QoS incompatibility is logged when there is one)')

    def _on_camera_info(self, msg: CameraInfo) -> bool:
        warnings: list[str] = []
        try:
            camera = camera_from_camera_info(msg, rectified=self._rectified_input,
                                             warnings=warnings)
        except ValueError as error:
            self.camera_info_refused += 1
            text = f'ignoring camera_info: {error} ({self.camera_info_refused} refused so far)'
            if self._camera_info_throttle.ready(text):
                self.get_logger().warning(text)
            return False
        text = '; '.join(warnings)
        if text and text != self.camera_info_suspect:
            self.get_logger().warning(f'camera_info used, but {text}')
        self.camera_info_suspect = text
        self._camera = camera
        return True

    # ------------------------------------------------------------------ worker thread

    def _apply_parameters(self) -> None:
        config, version = self._config.get()
        if version == self._config_version:
            return
        self._config_version = version
        if self._path_poses.maxlen != config['path_max_length']:
            self._path_poses = collections.deque(self._path_poses,
                                                 maxlen=config['path_max_length'])
        self._depth_max_dt_ns = round(config['depth_max_dt_s'] * 1e9)
        self._depth_wait_s = config['depth_wait_s']
        self.depth_sync.max_miss_rate = config['depth_max_miss_rate']
        self.pipeline.reconfigure(_vo_config(config))
        self.get_logger().info(f'parameters updated (version {version}); the trajectory '
                               'continues')

    def _reset(self) -> None:
        self.pipeline.reset()
        # the new trajectory has no scale yet: the old one's source would read as its own
        self.scale_source = ''
        self._last_published = None
        self._pending_anchor = None   # an initialpose not applied yet: the new trajectory is at 0
        self._T_anchor = np.eye(4)
        self._anchor_covariances = None
        self._path_poses.clear()
        self.depth.clear()
        self.wheel.clear()

    def _process(self, msg) -> None:
        self._apply_parameters()
        reset, anchor = self.control.take()
        if reset:
            self._reset()
            self._stamp_order.reset()
            self.camera_mount.forget()
        if anchor is not None:
            self._pending_anchor = anchor
        if self.control.paused:
            raise SkipFrame('tracking is paused (~/pause); call it with data: false to resume',
                            FRAMES_PAUSED)
        try:
            image = self._input.decode(msg)
        except ValueError as error:
            raise SkipFrame(f'undecodable image: {error}', FRAMES_UNDECODABLE) from None
        camera = self._camera
        if camera is None:
            raise SkipFrame(self.camera_info_problem(), FRAMES_WITHOUT_CAMERA_INFO)
        if image.gray.shape != (camera.height, camera.width):
            raise SkipFrame(f'image is {image.gray.shape[1]}x{image.gray.shape[0]} but '
                            f'camera_info says {camera.width}x{camera.height}',
                            FRAMES_NOT_MATCHING_CAMERA_INFO)
        stamp_ns = image.stamp_ns
        self._check_time_jump(stamp_ns)
        # the first image fixes the mount (a TF lookup may wait camera_mount_tf_timeout_s)
        self.wheel.set_camera_mount(self.camera_mount.resolve(image.header.frame_id, stamp_ns))
        depth = self.depth.lookup(stamp_ns, camera, self._depth_max_dt_ns, self._depth_wait_s)
        if self.depth.newest_stamp_ns is not None:
            self.depth_sync.record(depth is not None, stamp_ns, self._depth_max_dt_ns * 1e-9)
        result = self.pipeline.process(Frame(image.gray, stamp_ns, camera, depth),
                                       translation_norm_m=self.wheel.hint_m(stamp_ns))
        self.status_counts[result.status] += 1
        self.tracking_state = result.status
        self.frames_lost_in_a_row = self.frames_lost_in_a_row + 1 \
            if result.status == STATUS_LOST else 0
        if result.scale_source:
            self.scale_source = result.scale_source
        self._diagnostics.hardware_id = image.header.frame_id
        if result.keyframe_stamp_ns is not None and len(result.matches):
            self._correspondences.publish(cloud_msg_from_matches(
                result.matches, result.keyframe_stamp_ns, image.header))
        if result.status == STATUS_LOST:
            text = f'odometry lost at {stamp_ns} ns: {result.message}'
            if self._lost_throttle.ready(text):
                self.get_logger().warning(text)
            return
        if result.status != 'tracking':
            self.get_logger().info(f'odometry {result.status}: {result.message}')
        self._publish(result, stamp_ns, image.header.stamp)
        self._worker.record_latency(stamp_ns)

    def _check_time_jump(self, stamp_ns: int) -> None:
        """Raise SkipFrame for a stamp that cannot follow the last one; reset on a jump back.

        The rule of :class:`~relperception.nodes.stamp_order.StampOrder`; a confirmed jump back
        (a restarted bag or a clock change) resets the odometry and the path.
        """
        jump_s = self._stamp_order.accept(stamp_ns)
        if jump_s < 0:
            self.get_logger().warning(f'time jumped back by {-jump_s:.3f} s (two frames in a '
                                      'row): resetting the odometry and the path')
            self._reset()
        elif jump_s > 0:
            self.get_logger().warning(f'time jumped ahead by {jump_s:.3f} s (two frames in a '
                                      'row): going on')

    def odom_from_camera(self, T_world_cam: np.ndarray) -> np.ndarray:
        """Return ``T_odom_base = T_base_cam @ T_world_cam @ inv(T_base_cam)`` (4, 4)."""
        return odom_from_camera(T_world_cam, self.T_base_cam)

    def camera_from_odom(self, T_odom_base: np.ndarray) -> np.ndarray:
        """Return ``T_world_cam`` of a published ``T_odom_base`` (4, 4)."""
        return camera_from_odom(T_odom_base, self.T_base_cam)

    def _publish(self, result, stamp_ns: int, stamp) -> None:
        T_world_cam = result.T_world_cam
        T_tracked = self.odom_from_camera(T_world_cam)
        pose_covariance = ros_order(conjugate_covariance(self.T_base_cam, T_world_cam,
                                                         result.pose_covariance))
        if self._pending_anchor is not None:
            T_given, covariance_given = self._pending_anchor
            self._pending_anchor = None
            self._T_anchor = T_given @ invert_transform(T_tracked)
            self._anchor_covariances = (covariance_given, pose_covariance)
            self._path_poses.clear()
            self.get_logger().info('re-anchored at the initialpose; the path restarts')
        T_odom_base = self._T_anchor @ T_tracked
        if self._anchor_covariances is not None:
            # the growth since the anchor, never negative: the tracked covariance can shrink
            # (metric scale from depth or wheel odometry, a bundle adjustment), and the given
            # covariance minus the shrinkage would be no covariance (negative variances); it is
            # in the axes of the tracked frame, turned here into those of the anchored odom
            covariance_given, covariance_at_anchor = self._anchor_covariances
            growth = positive_part((pose_covariance - covariance_at_anchor).reshape(6, 6))
            growth = rotate_covariance(self._T_anchor[:3, :3], growth)
            pose_covariance = covariance_given + growth.reshape(36)
        # velocity unknown (first frame, after a re-initialisation): zero with a huge variance
        twist, twist_covariance = np.zeros(6), UNKNOWN_VARIANCE * np.eye(6).reshape(36)
        previous = self._last_published
        if previous is not None and stamp_ns > previous[2] and result.status == STATUS_TRACKING:
            T_world_prev, T_tracked_prev, stamp_prev_ns = previous
            dt_s = (stamp_ns - stamp_prev_ns) * 1e-9
            twist = twist_from_poses(T_tracked_prev, T_tracked, dt_s)
            twist_covariance = ros_order(conjugate_covariance(
                self.T_base_cam, invert_transform(T_world_prev) @ T_world_cam,
                result.motion_covariance)) / dt_s ** 2
        self._last_published = (T_world_cam, T_tracked, stamp_ns)
        self._odom.publish(odometry_msg(T_odom_base, stamp, self.odom_frame_id,
                                        self.base_frame_id, pose_covariance, twist,
                                        twist_covariance))
        self._path_poses.append(pose_stamped_msg(T_odom_base, stamp, self.odom_frame_id))
        if self._path.get_subscription_count():
            # built only for a listener: its cost grows with the path, on this thread, per frame
            path = Path()
            path.header.stamp = stamp
            path.header.frame_id = self.odom_frame_id
            path.poses = list(self._path_poses)
            self._path.publish(path)
        if self._tf_broadcaster is not None:
            self._tf_broadcaster.sendTransform(transform_stamped_msg(
                T_odom_base, stamp, self.odom_frame_id, self.base_frame_id))

    def destroy_node(self) -> None:
        """Stop the worker (joining its thread), then destroy the node."""
        self._worker.stop()
        self.camera_mount.close()
        self.pipeline.odometry.close()
        self._diagnostics.destroy()
        super().destroy_node()


def main(args=None) -> None:
    """Run ``visual_odometry_node`` until Ctrl-C (console script ``visual_odometry_node``).

    Args:
        args: command-line arguments for ``rclpy.init`` (None: ``sys.argv``).
    """
    spin_node(VisualOdometryNode, args)


if __name__ == '__main__':
    main()
