# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Subscribe to ``camera_info`` as every node does: sensor-data QoS, overridable, and latched.

The subscription uses the sensor-data profile (best effort, keep last 5), overridable with the
standard ``qos_overrides.<topic>.subscription.*`` parameters. A driver whose calibration is
fixed may publish ``camera_info`` once, latched (reliable, transient local), maybe before the
node started: only a transient-local subscription receives that message. While nothing was
accepted and a publisher latches the topic (checked on a steady timer: sim time may not run
yet), a second subscription with that QoS is made. It is made only for a latching publisher,
since volatile publishers (most drivers) are incompatible with it.
"""

from __future__ import annotations

from typing import Callable, Optional

from rclpy.clock import Clock, ClockType
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, qos_profile_sensor_data, QoSProfile, ReliabilityPolicy
from relperception.nodes.lost_messages import LostMessages
from relperception.nodes.overridable_qos import create_overridable_subscription
from sensor_msgs.msg import CameraInfo

#: QoS of a latched ``camera_info`` (published once, e.g. by a driver whose calibration is fixed):
#: only a transient-local subscription receives it when it was published before the node started.
LATCHED_CAMERA_INFO_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                                     durability=DurabilityPolicy.TRANSIENT_LOCAL)

#: How often (s, steady time) the publishers of ``camera_info`` are looked at for a latching one
#: while no camera_info was accepted.
LATCHED_CAMERA_INFO_CHECK_S = 0.25


class CameraInfoInput:
    """The ``camera_info`` subscription of a node, and the latched one where needed.

    Args:
        node: the subscribing node.
        callback: called on the executor thread with each ``sensor_msgs/CameraInfo``; returns
            whether it accepted the message (True once a valid one arrived stops the search for
            a latching publisher).
        lost: counts the messages lost in transport (as input ``camera_info``); None: not
            counted.
        topic: relative topic name.
    """

    def __init__(self, node: Node, callback: Callable[[CameraInfo], bool],
                 lost: Optional[LostMessages] = None, topic: str = 'camera_info') -> None:
        self._node = node
        self._callback = callback
        #: whether a message was accepted.
        self.accepted = False
        self.subscription = create_overridable_subscription(
            node, CameraInfo, topic, self._on_message, qos_profile_sensor_data,
            event_callbacks=None if lost is None else lost.callbacks('camera_info'))
        #: the transient-local subscription, made while nothing was accepted and a publisher
        #: latches the topic.
        self.latched_subscription = None
        self._check = node.create_timer(LATCHED_CAMERA_INFO_CHECK_S, self.subscribe_latched,
                                        clock=Clock(clock_type=ClockType.STEADY_TIME))

    @property
    def topic_name(self) -> str:
        """The resolved topic name."""
        return self.subscription.topic_name

    def _on_message(self, msg: CameraInfo) -> None:
        if self._callback(msg):
            self.accepted = True

    def subscribe_latched(self) -> None:
        """Subscribe with the latched QoS if nothing was accepted and a publisher latches.

        Called by the timer; stops it once a message was accepted or the subscription is made.
        """
        if self.accepted or self.latched_subscription is not None:
            self._check.cancel()
            return
        topic = self.topic_name
        latching = [info for info in self._node.get_publishers_info_by_topic(topic)
                    if info.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
                    and info.qos_profile.reliability == ReliabilityPolicy.RELIABLE]
        if not latching:
            return
        self._check.cancel()
        self._node.get_logger().info(
            f'no camera_info yet and {latching[0].node_name} latches {topic} (reliable, '
            'transient local): subscribing with that QoS too')
        self.latched_subscription = self._node.create_subscription(
            CameraInfo, topic, self._on_message, LATCHED_CAMERA_INFO_QOS,
            event_callbacks=SubscriptionEventCallbacks(use_default_callbacks=False))
