# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The ``wheel_odom`` input of ``visual_odometry_node``: translation hints from wheel odometry.

Subscribes ``wheel_odom`` (``nav_msgs/Odometry``, remap it to the base controller's or the
EKF's odometry, reliable, keep last 100; for a best-effort publisher set
``qos_overrides.<topic>.subscription.reliability: best_effort``) and keeps its poses in a
:class:`~relperception.odometry.wheel_hints.WheelHints`. :meth:`WheelOdometryInput.hint_m`
gives each frame the distance the camera moved since the last frame that had one, which the
node hands to the tracker as ``translation_norm_m``; without wheel odometry nothing changes.
Counters (frames with and without a hint, poses refused) feed ``/diagnostics``. The camera mount
is the node's (:meth:`WheelOdometryInput.set_camera_mount` once it is resolved, e.g. from TF).
"""

from __future__ import annotations

import threading

from nav_msgs.msg import Odometry
import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile
from relperception.data.messages import stamp_to_ns, transform_from_pose_msg
from relperception.nodes.overridable_qos import create_overridable_subscription
from relperception.nodes.processing import ReasonThrottle
from relperception.odometry.wheel_hints import WheelHints
from relperception.transforms import check_transform

#: The topic (relative: remap it).
TOPIC = 'wheel_odom'


class WheelOdometryInput:
    """Wheel odometry poses of a node and the translation hint of each frame.

    Args:
        node: the node that subscribes.
        T_base_cam: (4, 4) camera mount on the base.
        max_gap_s, max_speed_mps: see :class:`~relperception.odometry.wheel_hints.WheelHints`.
    """

    def __init__(self, node: Node, T_base_cam: np.ndarray, max_gap_s: float,
                 max_speed_mps: float):
        """Subscribe ``wheel_odom``."""
        self._node = node
        self._lock = threading.Lock()
        #: the poses and the hint bookkeeping (read its counters; call under no lock).
        self.hints = WheelHints(T_base_cam, max_gap_s, max_speed_mps=max_speed_mps)
        # one period per reason: a new kind of refusal is not hidden behind the last one
        self._throttle = ReasonThrottle(5.0)
        self._subscription = create_overridable_subscription(
            node, Odometry, TOPIC, self._on_odometry, QoSProfile(depth=100))

    def _on_odometry(self, msg: Odometry) -> None:
        with self._lock:
            restarts = self.hints.restarts
            try:
                stamp_ns = stamp_to_ns(msg.header.stamp)
                T_odom_base = transform_from_pose_msg(msg.pose.pose)
            except ValueError as error:
                accepted = self.hints.refuse(str(error))
            else:
                accepted = self.hints.add(stamp_ns, T_odom_base)
            reason, restarted = self.hints.last_refusal, self.hints.restarts > restarts
        text = f'wheel_odom pose refused ({self.hints.refused} so far): {reason}'
        if not accepted and self._throttle.ready(text):
            self._node.get_logger().warning(text)
        elif accepted and restarted:
            self._node.get_logger().warning(
                'wheel_odom jumped: the last poses agree with each other but not with the '
                'ones before (an odometry reset?); the translation hints go on from them')

    def hint_m(self, stamp_ns: int) -> float | None:
        """Return the frame's translation hint (m), see ``WheelHints.hint_m``, or None."""
        with self._lock:
            return self.hints.hint_m(stamp_ns)

    def set_camera_mount(self, T_base_cam: np.ndarray) -> None:
        """Move the wheel poses to the camera with this mount from now on (4, 4).

        Raises:
            ValueError: not a rigid transform.
        """
        with self._lock:
            if not np.array_equal(T_base_cam, self.hints.T_base_cam):
                self.hints.T_base_cam = check_transform(T_base_cam, 'T_base_cam').copy()

    def clear(self) -> None:
        """Forget the poses and the last frame (a reset or a jump back in time)."""
        with self._lock:
            self.hints.clear()
