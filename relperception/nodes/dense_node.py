# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``dense_node``: dense depth and semantic labels for every camera frame.

Subscribes:
    ``image`` (``sensor_msgs/Image``; ``image/compressed`` with ``image_transport:=compressed``)
    and ``camera_info`` (optional, cached; only checked against the image size; a latched one
    too: :mod:`relperception.nodes.camera_info_input`), sensor-data QoS by default, overridable.
Publishes (header = the input image's, stamp and frame_id):
    ``depth`` (``sensor_msgs/Image`` ``32FC1`` metres, NaN where invalid, REP 118; a relative
    model's depth is ``dense.depth_scale`` / its inverse depth: a warning says so once),
    ``labels`` (``mono8`` class ids; only with a segmentation head), ``labels_color`` (``rgb8``
    label colours blended over the image) and ``depth_color`` (``rgb8`` turbo colouring; the two
    colour images only with ``dense.publish_color`` and while someone subscribes), and
    ``diagnostics`` (``diagnostic_msgs/DiagnosticArray``, 1 Hz).
ROS parameters:
    ``dense.*`` (see :mod:`relperception.config`; a change rebuilds the model between frames)
    and the node-local ``image_transport``.

Real time: only the newest frame is kept; inference runs on a worker thread
(:class:`~relperception.nodes.processing.FrameWorker`), every replaced frame is counted as a
drop in the diagnostics. A bad message (unknown encoding, wrong step, empty image, corrupt
JPEG) is logged (throttled), counted as an error (and as ``frames_undecodable`` in
``/diagnostics``) and skipped; the node keeps running. A zero, duplicate, out-of-order or
glitched stamp is skipped and counted as dropped (and as ``frames_bad_stamp``)
(:class:`~relperception.nodes.stamp_order.StampOrder`): the outputs' stamps increase, except
after a jump back that the next frame confirms (a restarted bag). A parameter change that passes
the checks but whose model cannot be built (e.g. weights of another architecture) is logged and
the previous model stays in service.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile
from relperception.config import section, SPECS
from relperception.data.input_counters import (FRAMES_NOT_MATCHING_CAMERA_INFO,
                                               FRAMES_UNDECODABLE,
                                               FRAMES_WITH_NONFINITE_OUTPUT,
                                               MODEL_REBUILD_FAILURES)
from relperception.data.messages import camera_info_image_size, stamp_to_ns
from relperception.imaging import to_rgb8
from relperception.nodes.camera_info_input import CameraInfoInput
from relperception.nodes.diagnostics import DiagnosticsPublisher
from relperception.nodes.entrypoint import spin_node
from relperception.nodes.image_input import ImageInput
from relperception.nodes.lost_messages import LostMessages
from relperception.nodes.parameters import current_config, declare_parameters
from relperception.nodes.processing import FrameWorker, SkipFrame
from relperception.nodes.ros_messages import image_msg_from_array
from relperception.nodes.stamp_order import StampOrder
from relperception.pipeline.dense_pipeline import check_dense_config, DensePipeline, model_name
from relperception.pipeline.realtime import RunningStats, VersionedConfig
from sensor_msgs.msg import CameraInfo, Image

#: The parameters of this node from the shared schema.
DENSE_PARAMETERS: List[str] = [name for name in SPECS if name.startswith('dense.')]


def rgb_from_array(array: np.ndarray, encoding: str) -> np.ndarray:
    """Return (H, W, 3) uint8 RGB of a decoded image (``array`` in ``encoding``).

    Raises:
        ValueError: an encoding without colour meaning, or an empty image.
    """
    rgb = to_rgb8(array, encoding)
    if rgb.size == 0:
        raise ValueError('empty image')
    return rgb


class DenseNode(Node):
    """Run the dense model on the newest frame and publish depth and labels.

    Args:
        node_name: the node name.
        **kwargs: passed to ``rclpy.node.Node`` (``context``, ``namespace``,
            ``parameter_overrides``, ...).

    Raises:
        ValueError: when the initial ``dense.*`` parameters do not give a model (no weights,
            missing ONNX file, unknown preset).
    """

    def __init__(self, node_name: str = 'dense_node', **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        self._config: Optional[VersionedConfig] = None
        declare_parameters(self, DENSE_PARAMETERS, on_change=self._on_parameters,
                           check=check_dense_config)
        self._config = VersionedConfig(current_config(self, DENSE_PARAMETERS))
        config, self._pipeline_version = self._config.get()
        self._pipeline = self._build_pipeline(config)
        self._camera_info: Optional[CameraInfo] = None
        #: (width, height) of the images the latest camera_info describes (binning and ROI
        #: applied); None before one, or for one without a usable size.
        self._camera_info_size: Optional[Tuple[int, int]] = None
        #: frames of another size than the latest camera_info describes (processed anyway).
        self.frames_not_matching_camera_info = 0

        self.stats = RunningStats()
        self._worker: FrameWorker = FrameWorker(
            f'{node_name} dense', self._process, self.get_logger(), self.stats,
            clock_ns=lambda: self.get_clock().now().nanoseconds)
        self._depth = self.create_publisher(Image, 'depth', QoSProfile(depth=5))
        self._labels = self.create_publisher(Image, 'labels', QoSProfile(depth=5))
        self._labels_color = self.create_publisher(Image, 'labels_color', QoSProfile(depth=1))
        self._depth_color = self.create_publisher(Image, 'depth_color', QoSProfile(depth=1))
        self._nonfinite_frames = 0
        self._stamp_order = StampOrder()
        #: model rebuilds after a parameter change that failed (the previous model serves).
        self.model_rebuild_failures = 0
        #: messages lost in transport, per input (``message_lost`` events).
        self.lost = LostMessages(self)
        self._diagnostics = DiagnosticsPublisher(
            self, [('dense', self.stats)],
            counters=lambda: {FRAMES_WITH_NONFINITE_OUTPUT: self._nonfinite_frames,
                              MODEL_REBUILD_FAILURES: self.model_rebuild_failures,
                              FRAMES_NOT_MATCHING_CAMERA_INFO:
                                  self.frames_not_matching_camera_info,
                              **self.lost.counts(), **self._input.counts()})
        self._input = ImageInput(self, self._worker.submit, lost=self.lost)
        #: ``camera_info``: sensor-data QoS (overridable), and latched where published so.
        self.camera_info_input = CameraInfoInput(self, self._on_camera_info, lost=self.lost)
        self.get_logger().info(
            f'dense model {model_name(section(config, "dense"))} '
            f'({"relative" if self._pipeline.relative else "metric"} depth'
            f'{", segmentation" if self._pipeline.has_segmentation else ""}) on '
            f'{self.resolve_topic_name(self._input.topic)} ({self._input.transport}), backend '
            f'{config["dense.backend"]}')

    @property
    def worker(self) -> FrameWorker:
        """The worker thread that runs the model (its ``stats`` feed the diagnostics)."""
        return self._worker

    @property
    def pipeline(self) -> DensePipeline:
        """The current :class:`~relperception.pipeline.dense_pipeline.DensePipeline`."""
        return self._pipeline

    @property
    def camera_info(self) -> Optional[CameraInfo]:
        """The latest ``CameraInfo`` received, or None."""
        return self._camera_info

    def _build_pipeline(self, config: Dict[str, Any]) -> DensePipeline:
        pipeline = DensePipeline(config)
        for head, topic in (('depth', 'depth'), ('segmentation', 'labels')):
            if head in pipeline.untrained_heads:
                self.get_logger().error(
                    f'the {head} head of these weights was never trained: nothing is '
                    f'published on {topic} (train it with `relperception train`, or use '
                    'weights that have it)')
        if pipeline.relative:
            self.get_logger().warning(
                f'model {model_name(pipeline.conf)} predicts RELATIVE inverse depth: the '
                f'published depth is dense.depth_scale ({pipeline.conf["depth_scale"]}) / '
                'prediction, so its metric scale is only as right as dense.depth_scale')
        return pipeline

    def _on_parameters(self, changes: Dict[str, Any]) -> None:
        if self._config is not None:
            self._config.update(changes)

    def _on_camera_info(self, msg: CameraInfo) -> bool:
        self._camera_info = msg
        try:
            self._camera_info_size = camera_info_image_size(msg)
        except ValueError as error:
            # only checked against the image size: an uncalibrated one (zero size) is fine
            self._camera_info_size = None
            if msg.width and msg.height:
                self.get_logger().warning(f'camera_info gives no image size to check: {error}',
                                          throttle_duration_sec=5.0)
        return True

    def _current_pipeline(self) -> DensePipeline:
        config, version = self._config.get()
        if version != self._pipeline_version:
            self._pipeline_version = version
            try:
                self._pipeline = self._build_pipeline(config)
            except (ValueError, OSError, RuntimeError) as error:
                # The parameter check cannot load every file up front (e.g. weights of the
                # wrong shape): keep serving with the model that works.
                self.model_rebuild_failures += 1
                self.get_logger().error(f'cannot rebuild the dense model ({error}); keeping '
                                        'the previous one until a parameter change builds '
                                        f'(counted in {MODEL_REBUILD_FAILURES})')
            else:
                self.get_logger().info(f'dense model rebuilt (configuration version {version})')
        return self._pipeline

    def _process(self, msg) -> None:
        try:
            rgb = rgb_from_array(*self._input.to_array(msg))
        except ValueError as error:
            raise SkipFrame(f'undecodable image: {error}', FRAMES_UNDECODABLE,
                            error=True) from None
        header = msg.header
        stamp_ns = stamp_to_ns(header.stamp)
        if self._stamp_order.accept(stamp_ns) < 0:
            self.get_logger().warning('time jumped back (two frames in a row): following it')
        self._diagnostics.hardware_id = header.frame_id
        expected = self._camera_info_size
        if expected is not None and expected != (rgb.shape[1], rgb.shape[0]):
            self.frames_not_matching_camera_info += 1
            self.get_logger().warning(
                f'image is {rgb.shape[1]}x{rgb.shape[0]} but camera_info describes '
                f'{expected[0]}x{expected[1]} (binning and roi applied): the outputs keep the '
                f'image size ({self.frames_not_matching_camera_info} such frames, '
                f'{FRAMES_NOT_MATCHING_CAMERA_INFO} in diagnostics)', throttle_duration_sec=5.0)
        pipeline = self._current_pipeline()
        colors = bool(pipeline.conf['publish_color']) and (
            self._depth_color.get_subscription_count() > 0
            or self._labels_color.get_subscription_count() > 0)
        result = pipeline.run(rgb, colors=colors)
        self._nonfinite_frames += result.nonfinite_fraction > 0
        depth_trained = 'depth' not in pipeline.untrained_heads
        if depth_trained:   # an untrained head's depth is noise: not published (logged once)
            self._depth.publish(image_msg_from_array(result.depth, '32FC1', header))
        if result.labels is not None and 'segmentation' not in pipeline.untrained_heads:
            self._labels.publish(image_msg_from_array(result.labels, 'mono8', header))
        if depth_trained and result.depth_color is not None \
                and self._depth_color.get_subscription_count() > 0:
            self._depth_color.publish(image_msg_from_array(result.depth_color, 'rgb8', header))
        if result.labels_color is not None and 'segmentation' not in pipeline.untrained_heads \
                and self._labels_color.get_subscription_count() > 0:
            self._labels_color.publish(image_msg_from_array(result.labels_color, 'rgb8',
                                                            header))
        self._worker.record_latency(stamp_ns)

    def destroy_node(self) -> None:
        """Stop the worker (joining its thread), then destroy the node."""
        self._worker.stop()
        self._diagnostics.destroy()
        super().destroy_node()


def main(args=None) -> None:
    """Run ``dense_node`` until Ctrl-C (console script ``dense_node``).

    Args:
        args: command-line arguments for ``rclpy.init`` (None: ``sys.argv``).
    """
    spin_node(DenseNode, args)


if __name__ == '__main__':
    main()
