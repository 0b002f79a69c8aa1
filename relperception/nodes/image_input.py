# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Subscribe to ``image`` as raw ``sensor_msgs/Image`` or ``sensor_msgs/CompressedImage``.

Like image_transport, the node-local read-only parameter ``image_transport`` chooses the
transport: ``raw`` subscribes to ``image``, ``compressed`` to ``<resolved image>/compressed``
(so remapping ``image`` moves both). The subscription callback only hands the message on (to
:meth:`relperception.nodes.processing.FrameWorker.submit`); decoding happens on the worker
with :meth:`ImageInput.decode`, which raises ``ValueError`` with the reason for a bad message
(unknown encoding, inconsistent step, empty image, truncated JPEG, ...).

QoS defaults to the sensor-data profile (best effort, keep last 5) and can be overridden per
topic with the standard ``qos_overrides.<topic>.subscription.*`` parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data, QoSProfile
from relperception.config import NODE_LOCAL_SPECS, ParameterSpec
from relperception.data.input_counters import FRAMES_16BIT_LOW_RANGE
from relperception.data.messages import stamp_to_ns
from relperception.imaging import (compressed_to_numpy, image_to_numpy, low_range_16bit,
                                   to_mono8)
from relperception.nodes.lost_messages import LostMessages
from relperception.nodes.overridable_qos import create_overridable_subscription
from relperception.nodes.parameters import declare_parameters
from relperception.nodes.processing import ReasonThrottle
from sensor_msgs.msg import CompressedImage, Image

#: Node-local parameter (not in the shared configuration schema).
IMAGE_TRANSPORT: ParameterSpec = NODE_LOCAL_SPECS['visual_odometry_node']['image_transport']


@dataclass(frozen=True)
class GrayImage:
    """A decoded input image.

    Attributes:
        gray: (H, W) uint8 grey image (may be a read-only view of the message data).
        stamp_ns: header stamp in integer nanoseconds.
        header: the message's ``std_msgs/Header`` (stamp and frame_id), for outputs.
    """

    gray: np.ndarray
    stamp_ns: int
    header: Any


def message_to_array(msg):
    """Return ``(array, encoding)`` of an ``Image`` or ``CompressedImage`` message.

    Raises:
        ValueError: an undecodable message or another message type, with the reason.
    """
    if isinstance(msg, CompressedImage):
        return compressed_to_numpy(msg)
    if isinstance(msg, Image):
        return image_to_numpy(msg), msg.encoding
    raise ValueError(f'expected sensor_msgs/Image or CompressedImage, got {type(msg)}')


class ImageInput:
    """The image subscription of a node, raw or compressed by the ``image_transport`` parameter.

    Args:
        node: the subscribing node (``image_transport`` is declared on it).
        callback: called on the executor thread with each message; keep it short (e.g.
            ``FrameWorker.submit``).
        qos: subscription QoS (default: sensor data, best effort, keep last 5).
        topic: base topic name (relative).
        lost: counts the images lost in transport (as input ``image``); None: not counted.
    """

    def __init__(self, node: Node, callback: Callable[[Any], Any],
                 qos: QoSProfile = qos_profile_sensor_data, topic: str = 'image',
                 lost: Optional[LostMessages] = None) -> None:
        declare_parameters(node, [IMAGE_TRANSPORT.name],
                           specs={IMAGE_TRANSPORT.name: IMAGE_TRANSPORT})
        self.transport = node.get_parameter(IMAGE_TRANSPORT.name).value
        if self.transport == 'compressed':
            message_type = CompressedImage
            self.topic = node.resolve_topic_name(topic) + '/compressed'
        else:
            message_type = Image
            self.topic = topic
        self._node = node
        #: 16-bit images whose values stay below the 16-bit range (10/12-bit cameras), warned
        #: about (throttled) and counted in ``frames_16bit_low_range``.
        self.frames_16bit_low_range = 0
        self._throttle = ReasonThrottle(5.0)
        self._subscription = create_overridable_subscription(
            node, message_type, self.topic, callback, qos,
            event_callbacks=None if lost is None else lost.callbacks('image'))

    def decode(self, msg) -> GrayImage:
        """Decode a received message to a grey image and its stamp (16-bit data are checked).

        Args:
            msg: ``sensor_msgs/Image`` (any encoding :func:`relperception.imaging.to_mono8`
                converts) or ``sensor_msgs/CompressedImage`` (``compressed`` formats).

        Raises:
            ValueError: an undecodable message, with the reason (see :meth:`to_array`).
        """
        array, encoding = self.to_array(msg)
        return GrayImage(gray=to_mono8(array, encoding), stamp_ns=stamp_to_ns(msg.header.stamp),
                         header=msg.header)

    def to_array(self, msg):
        """Return ``(array, encoding)`` of a received message, as :func:`message_to_array`.

        A 16-bit image whose values stay below
        :data:`~relperception.imaging.LOW_RANGE_16BIT_MAX` is counted in
        :attr:`frames_16bit_low_range` and warned about (throttled): the scaling to 8 bits
        leaves it a few grey levels.

        Raises:
            ValueError: an undecodable message, with the reason.
        """
        array, encoding = message_to_array(msg)
        problem = low_range_16bit(array, encoding)
        if problem:
            self.frames_16bit_low_range += 1
            text = (f'{problem} ({self.frames_16bit_low_range} such frames, '
                    f'{FRAMES_16BIT_LOW_RANGE} in diagnostics)')
            if self._throttle.ready(text):
                self._node.get_logger().warning(text)
        return array, encoding

    def counts(self) -> dict:
        """Return ``{'frames_16bit_low_range': n}`` for the node's diagnostics counters."""
        return {FRAMES_16BIT_LOW_RANGE: self.frames_16bit_low_range}

    def destroy(self) -> None:
        """Destroy the subscription."""
        self._node.destroy_subscription(self._subscription)
