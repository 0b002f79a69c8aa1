# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``odometry_node``: visual odometry from the correspondences of the matcher node.

Subscribes:
    ``correspondences`` (``sensor_msgs/PointCloud2``, layout in
    :mod:`relperception.data.correspondences`: header = newer frame, older stamp in the
    points), ``camera_info`` (``sensor_msgs/CameraInfo``, latest kept) and the optional
    ``depth_in`` (``sensor_msgs/Image`` 16UC1 mm or 32FC1 m, registered to the image; or, with
    ``depth_transport: compressedDepth``, ``depth_in/compressedDepth``; the last
    ``DEPTH_CACHE_SIZE`` are kept and looked up by stamp, exact or nearest within
    ``depth_max_dt_s``). Sensor-data QoS (best effort, keep last 5), overridable.

Publishes:
    ``odom`` (``nav_msgs/Odometry``, ``header.frame_id`` = ``odom_frame_id``,
    ``child_frame_id`` = ``base_frame_id``, stamp = the correspondences' stamp), ``path``
    (``nav_msgs/Path``, the last ``path_max_length`` poses), TF ``odom -> base_link`` when
    ``tf2_ros`` is importable and ``publish_tf`` is true, and ``diagnostics``.

Parameters:
    ``odometry.*`` (the shared schema, :mod:`relperception.config`; changes apply between
    messages and keep the trajectory) and the node-local ``camera_mount_xyz_qxyzw`` (read
    only), ``odom_frame_id``, ``base_frame_id``, ``path_max_length``, ``depth_max_dt_s`` and
    ``publish_tf``.

Frames (REP 103 / 105): :class:`~relperception.odometry.motion.MatchOdometry` gives
``T_world_cam`` of the camera optical frame with world = the camera at the first frame. With
the mount ``T_base_cam`` (parameter ``camera_mount_xyz_qxyzw`` = x y z qx qy qz qw; default
the optical-to-body rotation: camera z forward = base x forward, camera x right = base -y,
camera y down = base -z) the published pose is
``T_odom_base = T_base_cam @ T_world_cam @ inv(T_base_cam)``, i.e. odom = base_link at the
first frame.

Real time: the subscription callback only hands the message to a
:class:`~relperception.nodes.processing.FrameWorker`; estimation runs on its thread.
Correspondences are increments (every message carries the motion between two frames), so the
worker keeps up to :data:`CORRESPONDENCE_QUEUE` of them in arrival order rather than only the
newest (estimation takes a few ms, so the queue only bridges short stalls); beyond that the
oldest is dropped and counted. A dropped message makes the next one's older stamp unknown: the
odometry re-initialises at the last pose (the motion of that pair is lost, the trajectory stays
continuous). Bad input (malformed cloud, no camera_info yet, depth
of another size than camera_info, stamps going backwards) is logged (throttled) and skipped;
a lost track is logged and not published. A jump back in time of more than
:data:`TIME_JUMP_RESET_S` (a bag restarted) resets the odometry and the path.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Dict, List, Optional

from nav_msgs.msg import Odometry, Path
import numpy as np
from rcl_interfaces.msg import ParameterDescriptor, ParameterType
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data, QoSProfile
from rclpy.qos_overriding_options import QoSOverridingOptions
from relperception.config import ParameterSpec, section, SPECS
from relperception.core_types import Camera
from relperception.data.correspondences import matches_from_cloud
from relperception.data.messages import camera_from_camera_info, stamp_to_ns
from relperception.imaging import compressed_to_numpy, depth_to_metres, image_to_numpy
from relperception.nodes.diagnostics import DiagnosticsPublisher
from relperception.nodes.entrypoint import spin_node
from relperception.nodes.parameters import current_config, declare_parameters
from relperception.nodes.processing import FrameWorker, SkipFrame
from relperception.nodes.ros_messages import (
    odometry_msg,
    pose_stamped_msg,
    transform_stamped_msg,
)
from relperception.odometry.motion import MatchOdometry
from relperception.odometry.mount import (
    camera_mount_transform,
    DEFAULT_CAMERA_MOUNT_XYZ_QXYZW,
    odom_from_camera,
)
from relperception.odometry.vo import check_odometry_conf, STATUS_LOST
from relperception.pipeline.realtime import RunningStats, VersionedConfig
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2

#: The parameters of this node from the shared schema.
#: Unprocessed correspondences kept (1 s at 30 Hz); see the module docstring.
CORRESPONDENCE_QUEUE = 30

ODOMETRY_PARAMETERS: List[str] = [name for name in SPECS if name.startswith('odometry.')]

#: Default camera mount: translation 0 and the optical-to-body rotation (x y z qx qy qz qw).
DEFAULT_CAMERA_MOUNT = DEFAULT_CAMERA_MOUNT_XYZ_QXYZW
CAMERA_MOUNT_PARAMETER = 'camera_mount_xyz_qxyzw'

#: Node-local parameters (besides the camera mount, a double array).
LOCAL_SPECS: Dict[str, ParameterSpec] = {spec.name: spec for spec in (
    ParameterSpec('odom_frame_id', 'odom', 'frame of the odometry (header.frame_id)',
                  read_only=True),
    ParameterSpec('base_frame_id', 'base_link', 'body frame (child_frame_id)', read_only=True),
    ParameterSpec('path_max_length', 1000, 'number of poses kept in the published path',
                  1, 100000),
    ParameterSpec('depth_max_dt_s', 0.02,
                  'largest stamp difference between a frame and the depth image used for it (s)',
                  0.0, 1.0),
    ParameterSpec('publish_tf', True, 'broadcast odom -> base_link on TF (needs tf2_ros)',
                  read_only=True),
    ParameterSpec('depth_transport', 'raw',
                  'transport of depth_in: raw (sensor_msgs/Image) or compressedDepth '
                  '(sensor_msgs/CompressedImage on depth_in/compressedDepth, as '
                  'compressed_depth_image_transport writes it)',
                  choices=('raw', 'compressedDepth'), read_only=True),
)}

#: Number of depth images kept for the stamp lookup.
DEPTH_CACHE_SIZE = 30
#: A stamp this far (seconds) before the last one resets the odometry (e.g. a replayed bag).
TIME_JUMP_RESET_S = 1.0


class DepthCache:
    """Thread-safe bounded store of depth messages, looked up by stamp.

    Args:
        size: number of messages kept (oldest evicted).
    """

    def __init__(self, size: int = DEPTH_CACHE_SIZE) -> None:
        self._lock = threading.Lock()
        self._items: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._size = int(size)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def put(self, stamp_ns: int, item: Any) -> None:
        """Store ``item`` under ``stamp_ns`` (integer nanoseconds), evicting the oldest."""
        with self._lock:
            self._items[stamp_ns] = item
            self._items.move_to_end(stamp_ns)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Forget every item."""
        with self._lock:
            self._items.clear()

    def nearest(self, stamp_ns: int, max_dt_ns: int) -> Optional[Any]:
        """Return the item with the stamp closest to ``stamp_ns`` within ``max_dt_ns``, or None."""
        with self._lock:
            if stamp_ns in self._items:
                return self._items[stamp_ns]
            if not self._items:
                return None
            best = min(self._items, key=lambda stamp: abs(stamp - stamp_ns))
            return self._items[best] if abs(best - stamp_ns) <= max_dt_ns else None


class OdometryNode(Node):
    """Chain the relative poses of the incoming correspondences into ``odom`` and ``path``.

    Args:
        node_name: the node name.
        **kwargs: passed to ``rclpy.node.Node`` (``context``, ``namespace``,
            ``parameter_overrides``, ...).
    """

    def __init__(self, node_name: str = 'odometry_node', **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        self._config: Optional[VersionedConfig] = None
        declare_parameters(self, ODOMETRY_PARAMETERS, on_change=self._on_parameters,
                           check=lambda config: check_odometry_conf(section(config,
                                                                            'odometry')))
        declare_parameters(self, list(LOCAL_SPECS), on_change=self._on_parameters,
                           specs=LOCAL_SPECS)
        self.declare_parameter(CAMERA_MOUNT_PARAMETER, list(DEFAULT_CAMERA_MOUNT),
                               ParameterDescriptor(
                                   name=CAMERA_MOUNT_PARAMETER,
                                   type=ParameterType.PARAMETER_DOUBLE_ARRAY, read_only=True,
                                   description='camera optical frame in the base frame: '
                                               'x y z (m) qx qy qz qw'))
        self.T_base_cam = camera_mount_transform(
            self.get_parameter(CAMERA_MOUNT_PARAMETER).value)
        self._config = VersionedConfig({**current_config(self, ODOMETRY_PARAMETERS),
                                        **current_config(self, list(LOCAL_SPECS), LOCAL_SPECS)})
        config, self._config_version = self._config.get()
        self.odometry = MatchOdometry(section(config, 'odometry'))
        self.odom_frame_id = config['odom_frame_id']
        self.base_frame_id = config['base_frame_id']
        self._path_poses: collections.deque = collections.deque(
            maxlen=config['path_max_length'])
        self._depth_max_dt_ns = round(config['depth_max_dt_s'] * 1e9)

        self._camera: Optional[Camera] = None
        self._depth = DepthCache()
        self._last_stamp_ns: Optional[int] = None
        self.status_counts: collections.Counter = collections.Counter()
        self.depth_rejected = 0

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
        self._worker: FrameWorker = FrameWorker(f'{node_name} odometry', self._process,
                                                self.get_logger(), self.stats,
                                                capacity=CORRESPONDENCE_QUEUE)
        self._odom = self.create_publisher(Odometry, 'odom', QoSProfile(depth=10))
        self._path = self.create_publisher(Path, 'path', QoSProfile(depth=1))
        self._diagnostics = DiagnosticsPublisher(self, [('odometry', self.stats)])
        overriding = QoSOverridingOptions.with_default_policies()
        self._subscriptions_own = [
            self.create_subscription(PointCloud2, 'correspondences', self._worker.submit,
                                     qos_profile_sensor_data,
                                     qos_overriding_options=overriding),
            self.create_subscription(CameraInfo, 'camera_info', self._on_camera_info,
                                     qos_profile_sensor_data,
                                     qos_overriding_options=overriding),
            self._depth_subscription(overriding),
        ]
        self.get_logger().info(
            f'odometry ({config["odometry.mode"]}) from '
            f'{self.resolve_topic_name("correspondences")}, publishing '
            f'{self.resolve_topic_name("odom")} in {self.odom_frame_id}')

    # ------------------------------------------------------------------ properties

    @property
    def worker(self) -> FrameWorker:
        """The worker thread that estimates poses (its ``stats`` feed the diagnostics)."""
        return self._worker

    @property
    def camera(self) -> Optional[Camera]:
        """The camera of the latest valid ``camera_info``, or None."""
        return self._camera

    @property
    def depth_cache_size(self) -> int:
        """Number of depth images currently cached."""
        return len(self._depth)

    # ------------------------------------------------------------------ callbacks

    def _on_parameters(self, changes: Dict[str, Any]) -> None:
        if self._config is not None:
            self._config.update(changes)

    def _on_camera_info(self, msg: CameraInfo) -> None:
        try:
            camera = camera_from_camera_info(msg)
        except ValueError as error:
            self.get_logger().warning(f'ignoring camera_info: {error}', throttle_duration_sec=5.0)
            return
        self._camera = camera

    def _depth_subscription(self, overriding):
        if self.get_parameter('depth_transport').value == 'compressedDepth':
            topic = self.resolve_topic_name('depth_in') + '/compressedDepth'
            return self.create_subscription(CompressedImage, topic, self._on_depth,
                                            qos_profile_sensor_data,
                                            qos_overriding_options=overriding)
        return self.create_subscription(Image, 'depth_in', self._on_depth,
                                        qos_profile_sensor_data,
                                        qos_overriding_options=overriding)

    def _on_depth(self, msg) -> None:
        camera = self._camera
        if isinstance(msg, CompressedImage):
            # Encoding and size are only known once decoded (on the worker, at lookup).
            self._depth.put(stamp_to_ns(msg.header.stamp), msg)
            return
        try:
            stamp_ns = stamp_to_ns(msg.header.stamp)
            if msg.encoding not in ('16UC1', 'mono16', '32FC1'):
                raise ValueError(f'encoding {msg.encoding!r} is not 16UC1 (mm) or 32FC1 (m)')
            if camera is not None and (msg.width, msg.height) != (camera.width, camera.height):
                raise ValueError(f'depth is {msg.width}x{msg.height} but camera_info says '
                                 f'{camera.width}x{camera.height}')
        except ValueError as error:
            self.depth_rejected += 1
            self.get_logger().warning(f'skipping depth_in message: {error}',
                                      throttle_duration_sec=1.0)
            return
        self._depth.put(stamp_ns, msg)

    # ------------------------------------------------------------------ worker thread

    def _apply_parameters(self) -> None:
        config, version = self._config.get()
        if version == self._config_version:
            return
        self._config_version = version
        self.odometry.conf = check_odometry_conf(section(config, 'odometry'))
        if self._path_poses.maxlen != config['path_max_length']:
            self._path_poses = collections.deque(self._path_poses,
                                                 maxlen=config['path_max_length'])
        self._depth_max_dt_ns = round(config['depth_max_dt_s'] * 1e9)
        self.get_logger().info(f'odometry parameters updated (version {version})')

    def _lookup_depth(self, stamp_ns: int, camera: Camera) -> Optional[np.ndarray]:
        msg = self._depth.nearest(stamp_ns, self._depth_max_dt_ns)
        if msg is None:
            return None
        try:
            if isinstance(msg, CompressedImage):
                array, encoding = compressed_to_numpy(msg)
            else:
                array, encoding = image_to_numpy(msg), msg.encoding
            depth = depth_to_metres(array, encoding)
        except ValueError as error:
            self.get_logger().warning(f'undecodable depth image: {error}',
                                      throttle_duration_sec=1.0)
            return None
        if depth.shape != (camera.height, camera.width):
            self.get_logger().warning(
                f'depth {depth.shape[1]}x{depth.shape[0]} does not match camera_info '
                f'{camera.width}x{camera.height}; ignored', throttle_duration_sec=1.0)
            return None
        return depth

    def _process(self, msg: PointCloud2) -> None:
        self._apply_parameters()
        try:
            stamp1_ns = stamp_to_ns(msg.header.stamp)
            matches, stamp0_ns = matches_from_cloud(msg)
        except ValueError as error:
            raise SkipFrame(f'malformed correspondences: {error}') from None
        camera = self._camera
        if camera is None:
            raise SkipFrame('no valid camera_info received yet')
        last = self._last_stamp_ns
        if last is not None and stamp1_ns <= last:
            if last - stamp1_ns > TIME_JUMP_RESET_S * 1e9:
                self.get_logger().warning(
                    f'time jumped back by {(last - stamp1_ns) * 1e-9:.3f} s: resetting the '
                    'odometry and the path')
                self.odometry.reset()
                self._path_poses.clear()
                self._depth.clear()
            else:
                raise SkipFrame(f'stamp {stamp1_ns} ns is not after the last one ({last} ns)')
        size = np.array([camera.width, camera.height], np.float32)
        if np.any(matches.keypoints0 > size) or np.any(matches.keypoints1 > size):
            raise SkipFrame(f'correspondences lie outside the {camera.width}x{camera.height} '
                            'image of camera_info')
        self._last_stamp_ns = stamp1_ns
        depth0 = self._lookup_depth(stamp0_ns, camera) if stamp0_ns is not None else None
        depth1 = self._lookup_depth(stamp1_ns, camera)
        result = self.odometry.step(stamp0_ns, stamp1_ns, matches, camera, depth0, depth1)
        self.status_counts[result.status] += 1
        self._diagnostics.hardware_id = msg.header.frame_id
        if result.status == STATUS_LOST:
            self.get_logger().warning(f'odometry lost at {stamp1_ns} ns: {result.message}',
                                      throttle_duration_sec=1.0)
            return
        if result.status != 'tracking':
            self.get_logger().info(f'odometry {result.status}: {result.message}')
        self._publish(result.T_world_cam, msg.header.stamp)
        latency_ns = self.get_clock().now().nanoseconds - stamp1_ns
        self.stats.record_latency(latency_ns / 1e6)

    def odom_from_camera(self, T_world_cam: np.ndarray) -> np.ndarray:
        """Return ``T_odom_base = T_base_cam @ T_world_cam @ inv(T_base_cam)`` (4, 4)."""
        return odom_from_camera(T_world_cam, self.T_base_cam)

    def _publish(self, T_world_cam: np.ndarray, stamp) -> None:
        T_odom_base = self.odom_from_camera(T_world_cam)
        self._odom.publish(odometry_msg(T_odom_base, stamp, self.odom_frame_id,
                                        self.base_frame_id))
        self._path_poses.append(pose_stamped_msg(T_odom_base, stamp, self.odom_frame_id))
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
        self._diagnostics.destroy()
        super().destroy_node()


def main(args=None) -> None:
    """Run ``odometry_node`` until Ctrl-C (console script ``odometry_node``).

    Args:
        args: command-line arguments for ``rclpy.init`` (None: ``sys.argv``).
    """
    spin_node(OdometryNode, args)


if __name__ == '__main__':
    main()
