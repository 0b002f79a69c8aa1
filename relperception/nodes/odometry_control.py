# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Operate an odometry node at run time: reset, pause / resume, re-anchor at a given pose.

* ``~/reset`` (``std_srvs/srv/Trigger``): the next frame starts a new trajectory at the origin
  of the odometry frame (the path is cleared).
* ``~/pause`` (``std_srvs/srv/SetBool``): ``data: true`` pauses tracking (frames are skipped
  and counted as dropped, nothing is published), ``false`` resumes; the motion while paused is
  tracked against the last keyframe if it can be, else tracking re-initialises.
* ``initialpose`` (``geometry_msgs/msg/PoseWithCovarianceStamped``, the RViz "2D Pose
  Estimate" convention): from the next frame on, the published pose of the body continues
  from this pose, in the odometry frame (``header.frame_id`` must be that frame or empty: no
  TF lookup is made); the published covariance is the given one at that frame, plus what the
  odometry's grows by from then on.

Requests arrive on the executor thread and are applied by the node's worker at the start of
the next frame (:meth:`OdometryControl.take`), never in the middle of one.
"""

from __future__ import annotations

import threading
from typing import Optional, Tuple

from geometry_msgs.msg import PoseWithCovarianceStamped
import numpy as np
from rclpy.node import Node
from relperception.data.messages import transform_from_pose_msg
from std_srvs.srv import SetBool, Trigger

#: A re-anchoring request: ``(T_odom_base, covariance)``, the covariance as 36 ROS-ordered
#: values (x, y, z, rotation x, y, z).
Anchor = Tuple[np.ndarray, np.ndarray]


class OdometryControl:
    """The reset / pause services and the ``initialpose`` subscription of an odometry node.

    Args:
        node: the odometry node (services ``~/reset``, ``~/pause``; topic ``initialpose``).
        odom_frame_id: the node's odometry frame (accepted ``initialpose`` frame).
    """

    def __init__(self, node: Node, odom_frame_id: str) -> None:
        """Create the services and the subscription."""
        self._logger = node.get_logger()
        self._odom_frame_id = odom_frame_id
        self._lock = threading.Lock()
        self._reset_requested = False
        self._anchor: Optional[Anchor] = None
        #: whether tracking is paused (``~/pause``).
        self.paused = False
        #: requests refused (``initialpose`` in another frame or malformed).
        self.refused = 0
        self._services = [node.create_service(Trigger, '~/reset', self._on_reset),
                          node.create_service(SetBool, '~/pause', self._on_pause)]
        self._subscription = node.create_subscription(
            PoseWithCovarianceStamped, 'initialpose', self._on_initial_pose, 10)

    def take(self) -> Tuple[bool, Optional[Anchor]]:
        """Return and clear the pending requests: ``(reset requested, anchor or None)``."""
        with self._lock:
            reset, anchor = self._reset_requested, self._anchor
            self._reset_requested, self._anchor = False, None
        return reset, anchor

    def _on_reset(self, request, response):
        with self._lock:
            self._reset_requested = True
            self._anchor = None
        response.success = True
        response.message = 'the next frame starts a new trajectory at the origin'
        self._logger.info(f'reset requested: {response.message}')
        return response

    def _on_pause(self, request, response):
        self.paused = bool(request.data)
        response.success = True
        response.message = ('paused: frames are skipped until resumed' if self.paused
                            else 'resumed')
        self._logger.info(f'tracking {response.message}')
        return response

    def _on_initial_pose(self, msg: PoseWithCovarianceStamped) -> None:
        frame = msg.header.frame_id
        if frame not in ('', self._odom_frame_id):
            self.refused += 1
            self._logger.warning(f'ignoring initialpose in frame {frame!r}: only the odometry '
                                 f'frame {self._odom_frame_id!r} is accepted (no TF lookup)')
            return
        covariance = np.asarray(msg.pose.covariance, dtype=np.float64)
        try:
            T_odom_base = transform_from_pose_msg(msg.pose.pose)
            if covariance.shape != (36,) or not np.all(np.isfinite(covariance)):
                raise ValueError('its covariance is not 36 finite values')
            matrix = covariance.reshape(6, 6)
            scale = max(float(np.abs(matrix).max()), 1e-300)
            if not np.allclose(matrix, matrix.T, rtol=0.0, atol=1e-9 * scale):
                raise ValueError('its covariance is not symmetric')
            smallest = float(np.linalg.eigvalsh(matrix).min())
            if smallest < -1e-9 * scale:
                raise ValueError('its covariance is not positive semi-definite (smallest '
                                 f'eigenvalue {smallest:g})')
        except ValueError as error:
            self.refused += 1
            self._logger.warning(f'ignoring initialpose: {error}')
            return
        with self._lock:
            self._anchor = (T_odom_base, covariance)
        self._logger.info('initialpose received: the odometry continues from it at the next '
                          'frame')
