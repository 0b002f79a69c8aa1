# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Subscriptions whose QoS the standard ``qos_overrides.<topic>.subscription.*`` parameters set.

rclpy writes the overridden policies into the ``QoSProfile`` object it is given. Given a shared
profile, such as rclpy's module-level ``qos_profile_sensor_data``, one override (say
``camera_info`` made reliable) would change every later subscription of the process that uses
that profile: its image subscription would turn reliable too and hear no best-effort camera.
:func:`create_overridable_subscription` hands rclpy a copy.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Optional

from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.qos_overriding_options import QoSOverridingOptions


def create_overridable_subscription(node: Node, msg_type, topic: str,
                                    callback: Callable[[Any], None], qos: QoSProfile,
                                    event_callbacks: Optional[SubscriptionEventCallbacks] = None):
    """Return ``node.create_subscription`` of a copy of ``qos``, overridable by parameters.

    Args:
        node: the subscribing node.
        msg_type: the message class.
        topic: topic name (relative names resolve in the node's namespace).
        callback: called with each message.
        qos: the default QoS; it is copied, never changed.
        event_callbacks: passed on (e.g. to count messages lost in transport).
    """
    if not isinstance(qos, QoSProfile):
        raise ValueError(f'qos must be an rclpy QoSProfile, got {type(qos).__name__}')
    return node.create_subscription(
        msg_type, topic, callback, copy.copy(qos),
        qos_overriding_options=QoSOverridingOptions.with_default_policies(),
        event_callbacks=event_callbacks)
