# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Camera mount and the odometry frames (REP 103 optical camera, REP 105 ``odom``/``base_link``).

The visual odometry estimates ``T_world_cam`` of the camera optical frame (z forward, x right,
y down), with world = the camera at the first frame. With the camera mounted on the robot at
``T_base_cam``, the robot's odometry is ``T_odom_base = T_base_cam @ T_world_cam @
inv(T_base_cam)`` (odom = base_link at the first frame). The default mount is the pure
optical-to-body rotation: camera z forward = base x forward, camera x right = base -y, camera
y down = base -z.
"""

from typing import Sequence

import numpy as np
from relperception.config import DEFAULT_CAMERA_MOUNT_XYZ_QXYZW  # noqa: F401 (re-exported)
from relperception.transforms import invert_transform, transform_from_quaternion_xyzw


def camera_mount_transform(camera_mount_xyz_qxyzw: Sequence[float]) -> np.ndarray:
    """Return ``T_base_cam`` (4, 4) float64 from ``[x, y, z, qx, qy, qz, qw]``.

    Args:
        camera_mount_xyz_qxyzw: 7 numbers: translation of the camera optical frame in the base
            frame (metres) and its rotation as a scalar-last quaternion (normalised here).

    Raises:
        ValueError: not 7 finite numbers, or a zero quaternion.
    """
    values = np.asarray(camera_mount_xyz_qxyzw, dtype=np.float64).reshape(-1)
    if values.shape != (7,) or not np.all(np.isfinite(values)):
        raise ValueError('camera_mount_xyz_qxyzw must be 7 finite numbers '
                         f'[x, y, z, qx, qy, qz, qw], got {values.tolist()}')
    return transform_from_quaternion_xyzw(values[:3], values[3:])


def odom_from_camera(T_world_cam: np.ndarray, T_base_cam: np.ndarray) -> np.ndarray:
    """Return ``T_odom_base = T_base_cam @ T_world_cam @ inv(T_base_cam)``, shape of the input.

    Args:
        T_world_cam: (..., 4, 4) camera poses (world = first camera).
        T_base_cam: (4, 4) camera mount.
    """
    return T_base_cam @ T_world_cam @ invert_transform(T_base_cam)


def camera_from_odom(T_odom_base: np.ndarray, T_base_cam: np.ndarray) -> np.ndarray:
    """Return ``T_world_cam = inv(T_base_cam) @ T_odom_base @ T_base_cam`` (inverse of the above).

    Args:
        T_odom_base: (..., 4, 4) robot poses in ``odom``.
        T_base_cam: (4, 4) camera mount.

    Raises:
        ValueError: when the poses are not (..., 4, 4).
    """
    T_odom_base = np.asarray(T_odom_base, dtype=np.float64)
    if T_odom_base.shape[-2:] != (4, 4):
        raise ValueError(f'T_odom_base must be (..., 4, 4), got {T_odom_base.shape}')
    return invert_transform(T_base_cam) @ T_odom_base @ T_base_cam
