# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Build rclpy messages from core types (the ROS side of the duck-typed converters).

The field layouts live in the ROS-free core (:mod:`relperception.imaging`,
:mod:`relperception.data.correspondences`, :mod:`relperception.data.messages`); this module
only wraps their field dicts into ``sensor_msgs`` / ``geometry_msgs`` / ``nav_msgs`` classes.
Stamps are accepted as integer nanoseconds or as ``builtin_interfaces/Time``. Transforms are
4x4 float64 ``T_<to>_<from>`` (metres); quaternions are written x, y, z, w.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, PoseStamped, TransformStamped, Vector3
from nav_msgs.msg import Odometry
import numpy as np
from relperception.core_types import Matches
from relperception.data.correspondences import correspondence_cloud_fields
from relperception.data.messages import ns_to_sec_nanosec, pose_fields
from relperception.imaging import numpy_to_image_fields
from sensor_msgs.msg import Image, PointCloud2, PointField
from std_msgs.msg import Header

Stamp = Union[int, np.integer, Time]


def time_msg(stamp: Stamp) -> Time:
    """Return ``stamp`` as a ``builtin_interfaces/Time``.

    Args:
        stamp: integer nanoseconds (>= 0) or a ``Time`` (returned as a copy).

    Returns:
        The ``Time`` message.

    Raises:
        ValueError: negative or non-integer nanoseconds, or a time beyond int32 seconds.
    """
    if isinstance(stamp, Time):
        return Time(sec=stamp.sec, nanosec=stamp.nanosec)
    if isinstance(stamp, bool) or not isinstance(stamp, (int, np.integer)):
        raise ValueError(f'stamp must be integer nanoseconds or a Time, got {stamp!r}')
    sec, nanosec = ns_to_sec_nanosec(int(stamp))
    return Time(sec=sec, nanosec=nanosec)


def header_msg(stamp: Stamp, frame_id: str) -> Header:
    """Return a ``std_msgs/Header`` with ``stamp`` (nanoseconds or ``Time``) and ``frame_id``."""
    return Header(stamp=time_msg(stamp), frame_id=str(frame_id))


def image_msg_from_array(array: np.ndarray, encoding: str, header: Header) -> Image:
    """Return a ``sensor_msgs/Image`` holding ``array``.

    Args:
        array: (H, W) or (H, W, C) array whose dtype matches ``encoding`` (e.g. (H, W, 3)
            uint8 for ``rgb8``, (H, W) float32 metres for ``32FC1``, uint16 mm for ``16UC1``).
        encoding: a :data:`relperception.imaging.SUPPORTED_ENCODINGS` name.
        header: the header to copy into the message (the input's stamp and frame).

    Returns:
        The little-endian Image (``data`` filled with one ``tobytes`` copy).

    Raises:
        ValueError: unknown encoding or an array that does not match it.
    """
    fields = numpy_to_image_fields(array, encoding)
    return Image(header=header, height=fields['height'], width=fields['width'],
                 encoding=fields['encoding'], is_bigendian=int(fields['is_bigendian']),
                 step=fields['step'], data=fields['data'].tobytes())


def cloud_msg_from_matches(matches: Matches, stamp0_ns: int, header: Header) -> PointCloud2:
    """Return the ``correspondences`` PointCloud2 of ``matches``.

    Args:
        matches: correspondences older frame -> newer frame (float32 pixels).
        stamp0_ns: the OLDER frame's stamp, integer nanoseconds (carried in the points).
        header: the NEWER frame's header.

    Returns:
        The cloud in the layout of :mod:`relperception.data.correspondences`.

    Raises:
        ValueError: ``matches`` is not :class:`Matches` or ``stamp0_ns`` is invalid.
    """
    fields = correspondence_cloud_fields(matches, stamp0_ns)
    return PointCloud2(
        header=header, height=fields['height'], width=fields['width'],
        fields=[PointField(name=name, offset=offset, datatype=datatype, count=count)
                for name, offset, datatype, count in fields['fields']],
        is_bigendian=bool(fields['is_bigendian']), point_step=fields['point_step'],
        row_step=fields['row_step'], data=fields['data'].tobytes(),
        is_dense=bool(fields['is_dense']))


def pose_msg(T) -> Pose:
    """Return the ``geometry_msgs/Pose`` of a (4, 4) rigid transform (metres, xyzw).

    Args:
        T: (4, 4) float64 rigid transform ``T_<frame>_<child>``.

    Returns:
        The Pose.

    Raises:
        ValueError: ``T`` is not a finite rigid transform.
    """
    position, q_xyzw = pose_fields(T)
    pose = Pose()
    pose.position.x, pose.position.y, pose.position.z = (float(v) for v in position)
    (pose.orientation.x, pose.orientation.y, pose.orientation.z,
     pose.orientation.w) = (float(v) for v in q_xyzw)
    return pose


def pose_stamped_msg(T_frame_child, stamp: Stamp, frame_id: str) -> PoseStamped:
    """Return a ``geometry_msgs/PoseStamped`` of ``T_frame_child`` in ``frame_id``.

    Args:
        T_frame_child: (4, 4) float64 pose of the child (e.g. base_link) in ``frame_id``.
        stamp: integer nanoseconds or ``builtin_interfaces/Time``.
        frame_id: the frame the pose is expressed in (e.g. ``odom``).

    Returns:
        The PoseStamped.

    Raises:
        ValueError: invalid transform or stamp.
    """
    return PoseStamped(header=header_msg(stamp, frame_id), pose=pose_msg(T_frame_child))


def transform_stamped_msg(T_parent_child, stamp: Stamp, frame_id: str,
                          child_frame_id: str) -> TransformStamped:
    """Return the ``geometry_msgs/TransformStamped`` parent -> child (for TF).

    Args:
        T_parent_child: (4, 4) float64 transform mapping child coordinates to parent ones.
        stamp: integer nanoseconds or ``builtin_interfaces/Time``.
        frame_id: parent frame (e.g. ``odom``).
        child_frame_id: child frame (e.g. ``base_link``).

    Returns:
        The TransformStamped.

    Raises:
        ValueError: invalid transform or stamp.
    """
    pose = pose_msg(T_parent_child)
    msg = TransformStamped(header=header_msg(stamp, frame_id), child_frame_id=str(child_frame_id))
    msg.transform.translation.x = pose.position.x
    msg.transform.translation.y = pose.position.y
    msg.transform.translation.z = pose.position.z
    msg.transform.rotation = pose.orientation
    return msg


def odometry_msg(T_odom_base, stamp: Stamp, frame_id: str = 'odom',
                 child_frame_id: str = 'base_link',
                 pose_covariance: Optional[Sequence[float]] = None,
                 twist: Optional[Sequence[float]] = None,
                 twist_covariance: Optional[Sequence[float]] = None) -> Odometry:
    """Return a ``nav_msgs/Odometry`` with the pose of ``child_frame_id`` in ``frame_id``.

    Args:
        T_odom_base: (4, 4) float64 pose of the base in the odometry frame (REP 105).
        stamp: integer nanoseconds or ``builtin_interfaces/Time`` (the input's stamp).
        frame_id: the odometry frame (``header.frame_id``).
        child_frame_id: the body frame.
        pose_covariance: optional 36 row-major values (x, y, z, rot x, rot y, rot z; m^2,
            rad^2); zeros (unknown) when None.
        twist: optional 6 values (vx, vy, vz in m/s, wx, wy, wz in rad/s) in
            ``child_frame_id``; zero when None.
        twist_covariance: optional 36 row-major values in the order of ``twist``; zeros when
            None.

    Returns:
        The Odometry message.

    Raises:
        ValueError: invalid transform, stamp or covariance size.
    """
    msg = Odometry(header=header_msg(stamp, frame_id), child_frame_id=str(child_frame_id))
    msg.pose.pose = pose_msg(T_odom_base)
    if pose_covariance is not None:
        msg.pose.covariance = _covariance_36('pose_covariance', pose_covariance)
    if twist is not None:
        values = np.asarray(twist, dtype=np.float64).reshape(-1)
        if values.shape != (6,) or not np.all(np.isfinite(values)):
            raise ValueError(f'twist must be 6 finite values, got {values.size}')
        msg.twist.twist.linear = Vector3(x=values[0], y=values[1], z=values[2])
        msg.twist.twist.angular = Vector3(x=values[3], y=values[4], z=values[5])
    if twist_covariance is not None:
        msg.twist.covariance = _covariance_36('twist_covariance', twist_covariance)
    return msg


def _covariance_36(name: str, values) -> np.ndarray:
    covariance = np.asarray(values, dtype=np.float64).reshape(-1)
    if covariance.shape != (36,):
        raise ValueError(f'{name} must have 36 values, got {covariance.size}')
    if not np.all(np.isfinite(covariance)):
        raise ValueError(f'{name} must be finite')
    return covariance
