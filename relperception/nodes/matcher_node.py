# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``matcher_node``: correspondences between consecutive camera frames.

Subscribes:
    ``image`` (``sensor_msgs/Image``; ``image/compressed`` with ``image_transport:=compressed``)
    and ``camera_info`` (optional, cached), sensor-data QoS by default.
Publishes:
    ``correspondences`` (``sensor_msgs/PointCloud2``, layout in
    :mod:`relperception.data.correspondences`; header = the NEWER frame's, the older stamp is in
    the points), ``matches_image`` (``sensor_msgs/Image`` rgb8 debug drawing, only while
    someone subscribes) and ``diagnostics`` (``diagnostic_msgs/DiagnosticArray``, 1 Hz).
ROS parameters:
    ``matcher``, ``ncc.*``, ``loftr.*``, ``klt.*``, ``orb.*`` (see :mod:`relperception.config`;
    changes at run time are applied between frames) and the node-local ``image_transport``.

Only the newest frame is kept; matching runs on a worker thread. A bad message is logged
(throttled), counted as an error and skipped; a duplicate stamp is skipped, a stamp going
backwards restarts the sequence and a change of image size starts over from the new frame.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data, QoSProfile
from relperception.config import section, SPECS
from relperception.imaging.drawing import draw_matches
from relperception.matching import build_matcher
from relperception.nodes.diagnostics import DiagnosticsPublisher
from relperception.nodes.entrypoint import spin_node
from relperception.nodes.image_input import GrayImage, ImageInput
from relperception.nodes.parameters import current_config, declare_parameters
from relperception.nodes.processing import FrameWorker, SkipFrame
from relperception.nodes.ros_messages import cloud_msg_from_matches, image_msg_from_array
from relperception.pipeline.realtime import RunningStats, VersionedConfig
from sensor_msgs.msg import CameraInfo, Image, PointCloud2

#: The parameters of this node from the shared schema.
MATCHER_PARAMETERS: List[str] = ['matcher'] + [
    name for name in SPECS if name.split('.')[0] in ('ncc', 'loftr', 'klt', 'orb')]


def build_matcher_from_config(config: Dict[str, Any]):
    """Build the matcher a flat configuration selects.

    Args:
        config: flat configuration with ``matcher`` and that matcher's section.

    Returns:
        The :class:`relperception.matching.Matcher`.

    Raises:
        ValueError: for an unknown matcher or an invalid section.
    """
    name = config['matcher']
    return build_matcher(name, section(config, name))


class MatcherNode(Node):
    """Match each new frame to the previous one and publish the correspondences.

    Args:
        node_name: the node name.
        **kwargs: passed to ``rclpy.node.Node`` (``context``, ``namespace``,
            ``parameter_overrides``, ...).
    """

    def __init__(self, node_name: str = 'matcher_node', **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        self._config: Optional[VersionedConfig] = None
        declare_parameters(self, MATCHER_PARAMETERS, on_change=self._on_parameters,
                           check=build_matcher_from_config)
        self._config = VersionedConfig(current_config(self, MATCHER_PARAMETERS))
        config, self._matcher_version = self._config.get()
        self._matcher = build_matcher_from_config(config)
        self._previous: Optional[GrayImage] = None
        self._camera_info: Optional[CameraInfo] = None

        self.stats = RunningStats()
        self._worker: FrameWorker = FrameWorker(f'{node_name} matching', self._process,
                                                self.get_logger(), self.stats)
        self._correspondences = self.create_publisher(PointCloud2, 'correspondences',
                                                      QoSProfile(depth=5))
        self._matches_image = self.create_publisher(Image, 'matches_image', QoSProfile(depth=1))
        self._diagnostics = DiagnosticsPublisher(self, [('matching', self.stats)])
        self._input = ImageInput(self, self._worker.submit)
        self._camera_info_subscription = self.create_subscription(
            CameraInfo, 'camera_info', self._on_camera_info, qos_profile_sensor_data)
        self.get_logger().info(
            f'matching with {config["matcher"]} on {self.resolve_topic_name(self._input.topic)} '
            f'({self._input.transport})')

    @property
    def worker(self) -> FrameWorker:
        """The worker thread that matches frames (its ``stats`` feed the diagnostics)."""
        return self._worker

    @property
    def camera_info(self) -> Optional[CameraInfo]:
        """The latest ``CameraInfo`` received, or None."""
        return self._camera_info

    def _on_parameters(self, changes: Dict[str, Any]) -> None:
        if self._config is not None:
            self._config.update(changes)

    def _on_camera_info(self, msg: CameraInfo) -> None:
        self._camera_info = msg

    def _current_matcher(self):
        config, version = self._config.get()
        if version != self._matcher_version:
            self._matcher_version = version
            self._matcher = build_matcher_from_config(config)
            self.get_logger().info(f'matcher rebuilt ({config["matcher"]}, configuration '
                                   f'version {version})')
        return self._matcher

    def _process(self, msg) -> None:
        frame = self._input.decode(msg)
        previous = self._previous
        if previous is not None:
            if frame.stamp_ns == previous.stamp_ns:
                raise SkipFrame(f'duplicate stamp {frame.stamp_ns} ns')
            if frame.stamp_ns < previous.stamp_ns:
                self._previous = None
                raise SkipFrame(f'stamp went backwards ({frame.stamp_ns} ns after '
                                f'{previous.stamp_ns} ns); starting over')
            if frame.gray.shape != previous.gray.shape:
                self.get_logger().warning(
                    f'image size changed from {previous.gray.shape[::-1]} to '
                    f'{frame.gray.shape[::-1]}; starting over')
                previous = None
        self._diagnostics.hardware_id = frame.header.frame_id
        self._previous = frame
        matcher = self._current_matcher()
        if previous is None:
            return
        matches = matcher.match(previous.gray, frame.gray)
        self._correspondences.publish(
            cloud_msg_from_matches(matches, previous.stamp_ns, frame.header))
        if self._matches_image.get_subscription_count() > 0:
            drawing = draw_matches(frame.gray, matches)
            self._matches_image.publish(image_msg_from_array(drawing, 'rgb8', frame.header))
        latency_ns = self.get_clock().now().nanoseconds - frame.stamp_ns
        self.stats.record_latency(latency_ns / 1e6)

    def destroy_node(self) -> None:
        """Stop the worker (joining its thread), then destroy the node."""
        self._worker.stop()
        self._diagnostics.destroy()
        super().destroy_node()


def main(args=None) -> None:
    """Run ``matcher_node`` until Ctrl-C (console script ``matcher_node``).

    Args:
        args: command-line arguments for ``rclpy.init`` (None: ``sys.argv``).
    """
    spin_node(MatcherNode, args)


if __name__ == '__main__':
    main()
