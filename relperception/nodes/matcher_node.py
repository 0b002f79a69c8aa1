# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``matcher_node``: correspondences between consecutive camera frames.

Subscribes:
    ``image`` (``sensor_msgs/Image``; ``image/compressed`` with ``image_transport:=compressed``)
    and ``camera_info`` (optional, cached; a latched one too:
    :mod:`relperception.nodes.camera_info_input`), sensor-data QoS by default, overridable.
Publishes:
    ``correspondences`` (``sensor_msgs/PointCloud2``, layout in
    :mod:`relperception.data.correspondences`; header = the NEWER frame's, the older stamp is in
    the points), ``matches_image`` (``sensor_msgs/Image`` rgb8 debug drawing, only while
    someone subscribes), ``relation_image`` (``sensor_msgs/Image`` rgb8, header = the newer
    frame's, only while someone subscribes: for the ``relation_pixel`` of the older frame the
    NCC correlation surface over the newer frame and, with ``matcher`` ``loftr`` and the torch
    backend, the last coarse cross-attention map of that pixel's cell; see
    :func:`relperception.visualization.relation.relation_panel`) and ``diagnostics``
    (``diagnostic_msgs/DiagnosticArray``, 1 Hz; stages ``matching`` and ``relation_image``).
ROS parameters:
    ``matcher``, ``ncc.*``, ``loftr.*``, ``klt.*``, ``orb.*`` (see :mod:`relperception.config`;
    changes at run time are applied between frames) and the node-local ``image_transport`` and
    ``relation_pixel`` (integer array [x, y] of the older frame; [-1, -1]: the image centre).

The relation image is drawn on the matching worker after the correspondences are published; a
drawing failure (e.g. a pixel too near the border or on a flat patch) never stops matching: it
is logged once per kind and counted as an error of the ``relation_image`` diagnostics stage.

Only the newest frame is kept; matching runs on a worker thread. A bad message is logged
(throttled), counted as an error and skipped. A zero, duplicate or out-of-order stamp is skipped,
a glitched one too (each counted by reason in ``/diagnostics``: ``frames_undecodable``,
``frames_bad_stamp``, ``frames_replaced``), and a jump back that the next frame confirms (a
restarted bag) starts over (:class:`~relperception.nodes.stamp_order.StampOrder`); so does a
change of image size.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional, Set, Tuple

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.qos import QoSProfile
from relperception.config import NODE_LOCAL_SPECS, section
from relperception.data.input_counters import FRAMES_UNDECODABLE
from relperception.imaging.drawing import draw_matches
from relperception.matching import build_matcher
from relperception.nodes.camera_info_input import CameraInfoInput
from relperception.nodes.diagnostics import DiagnosticsPublisher
from relperception.nodes.entrypoint import spin_node
from relperception.nodes.image_input import GrayImage, ImageInput
from relperception.nodes.lost_messages import LostMessages
from relperception.nodes.parameters import (current_config, declare_parameters,
                                            MATCHER_PARAMETERS)
from relperception.nodes.processing import FrameWorker, SkipFrame
from relperception.nodes.ros_messages import cloud_msg_from_matches, image_msg_from_array
from relperception.nodes.stamp_order import StampOrder
from relperception.pipeline.realtime import RunningStats, VersionedConfig
from relperception.visualization.relation import loftr_cell_attention, relation_panel
from sensor_msgs.msg import CameraInfo, Image, PointCloud2

#: NCC patch side (pixels) of the ``relation_image`` surface.
RELATION_PATCH_SIZE = 15
#: Distinct causes of relation_image failures logged once each (later ones: every time).
RELATION_CAUSES_LOGGED = 20


def check_relation_pixel(value) -> Tuple[int, int]:
    """Return the ``relation_pixel`` parameter as ``(x, y)``, before an image is known.

    Raises:
        ValueError: not two integers, or negative other than [-1, -1] (the image centre).
    """
    values = list(value)
    if len(values) != 2 or any(isinstance(v, bool) or int(v) != v for v in values):
        raise ValueError(f'relation_pixel must be two integers [x, y], got {value!r}')
    x, y = (int(v) for v in values)
    if (x, y) != (-1, -1) and min(x, y) < 0:
        raise ValueError(f'relation_pixel must be a pixel [x, y] >= 0, or [-1, -1] for the '
                         f'image centre, got [{x}, {y}]')
    return x, y


def relation_pixel_for(value, shape: Tuple[int, int]) -> Tuple[int, int]:
    """Resolve the ``relation_pixel`` parameter for an image.

    Args:
        value: [x, y] integers; [-1, -1] chooses the image centre.
        shape: (H, W) of the older frame.

    Returns:
        (x, y) pixel.

    Raises:
        ValueError: not two integers, or a pixel outside the image.
    """
    x, y = check_relation_pixel(value)
    if (x, y) == (-1, -1):
        return shape[1] // 2, shape[0] // 2
    if not (0 <= x < shape[1] and 0 <= y < shape[0]):
        raise ValueError(f'relation_pixel ({x}, {y}) lies outside the {shape[1]}x{shape[0]} '
                         f'image')
    return x, y


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
        self._matcher_name = config['matcher']
        self._previous: Optional[GrayImage] = None
        self._stamp_order = StampOrder()
        self._camera_info: Optional[CameraInfo] = None

        self.stats = RunningStats()
        self._worker: FrameWorker = FrameWorker(
            f'{node_name} matching', self._process, self.get_logger(), self.stats,
            clock_ns=lambda: self.get_clock().now().nanoseconds)
        self._correspondences = self.create_publisher(PointCloud2, 'correspondences',
                                                      QoSProfile(depth=5))
        self._matches_image = self.create_publisher(Image, 'matches_image', QoSProfile(depth=1))
        relation_pixel = NODE_LOCAL_SPECS['matcher_node']['relation_pixel']
        self.add_on_set_parameters_callback(self._check_relation_pixel)
        self.declare_parameter(relation_pixel.name, list(relation_pixel.default),
                               ParameterDescriptor(description=relation_pixel.description))
        self._relation_image = self.create_publisher(Image, 'relation_image',
                                                     QoSProfile(depth=1))
        #: statistics of the relation_image stage (arrival: a matched pair, error: a failure).
        self.relation_stats = RunningStats()
        #: number of relation images drawn and published.
        self.relation_images_drawn = 0
        self._relation_errors_logged: Set[str] = set()
        #: messages lost in transport, per input (``message_lost`` events).
        self.lost = LostMessages(self)
        self._diagnostics = DiagnosticsPublisher(
            self, [('matching', self.stats), ('relation_image', self.relation_stats)],
            counters=lambda: {**self.lost.counts(), **self._input.counts()})
        self._input = ImageInput(self, self._worker.submit, lost=self.lost)
        #: ``camera_info``: sensor-data QoS (overridable), and latched where published so.
        self.camera_info_input = CameraInfoInput(self, self._on_camera_info, lost=self.lost)
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

    def _on_camera_info(self, msg: CameraInfo) -> bool:
        self._camera_info = msg
        return True

    def _current_matcher(self):
        config, version = self._config.get()
        if version != self._matcher_version:
            self._matcher_version = version
            self._matcher = build_matcher_from_config(config)
            self._matcher_name = config['matcher']
            self.get_logger().info(f'matcher rebuilt ({config["matcher"]}, configuration '
                                   f'version {version})')
        return self._matcher

    def _process(self, msg) -> None:
        try:
            frame = self._input.decode(msg)
        except ValueError as error:
            raise SkipFrame(f'undecodable image: {error}', FRAMES_UNDECODABLE,
                            error=True) from None
        if self._stamp_order.accept(frame.stamp_ns) < 0:
            self.get_logger().warning('time jumped back (two frames in a row): starting over')
            self._previous = None
        previous = self._previous
        if previous is not None:
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
        self._worker.record_latency(frame.stamp_ns)
        self._publish_relation(previous, frame, matcher, self._matcher_name)

    def _publish_relation(self, previous: GrayImage, frame: GrayImage, matcher,
                          name: str) -> None:
        """Draw and publish ``relation_image`` if subscribed; never raises."""
        self.relation_stats.record_arrival()
        if self._relation_image.get_subscription_count() == 0:
            return
        start = time.perf_counter()
        try:
            pixel = relation_pixel_for(self.get_parameter('relation_pixel').value,
                                       previous.gray.shape)
            attention = None
            if name == 'loftr':
                attention = loftr_cell_attention(matcher, previous.gray, frame.gray, pixel)
            drawing = relation_panel(previous.gray, frame.gray, pixel, RELATION_PATCH_SIZE,
                                     attention, name)
            self._relation_image.publish(image_msg_from_array(drawing, 'rgb8', frame.header))
        except Exception as error:  # noqa: B902 - a debug drawing must never stop matching
            self.relation_stats.record_error()
            cause = f'{type(error).__name__}: {error}'
            if cause not in self._relation_errors_logged:
                if len(self._relation_errors_logged) < RELATION_CAUSES_LOGGED:
                    self._relation_errors_logged.add(cause)
                self.get_logger().error(
                    f'relation_image not drawn ({cause}); further failures of this cause are '
                    f'only counted in diagnostics')
            return
        self.relation_images_drawn += 1
        self.relation_stats.record_processing(time.perf_counter() - start)

    @staticmethod
    def _check_relation_pixel(parameters) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name == 'relation_pixel':
                try:
                    check_relation_pixel(parameter.value)
                except (TypeError, ValueError) as error:
                    return SetParametersResult(successful=False, reason=str(error))
        return SetParametersResult(successful=True)

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
