# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Rigid transforms as 4x4 float64 matrices named ``T_<to>_<from>``.

Quaternion order is always in the function name: ``xyzw`` is scalar-last (ROS, TUM).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation


def make_transform(R, t) -> np.ndarray:
    """Return the 4x4 transform with rotation ``R`` (3, 3) and translation ``t`` (3,) metres."""
    R = np.asarray(R, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    if R.shape != (3, 3) or t.shape != (3,):
        raise ValueError(f'R must be (3, 3) and t (3,), got {R.shape} and {t.shape}')
    if not (np.all(np.isfinite(R)) and np.all(np.isfinite(t))):
        raise ValueError('R and t must be finite')
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = t
    return T


def check_transform(T, name: str = 'T') -> np.ndarray:
    """Return ``T`` as float64 (4, 4); ``ValueError`` unless it is a finite rigid transform."""
    T = np.asarray(T, dtype=np.float64)
    if T.shape != (4, 4):
        raise ValueError(f'{name} must have shape (4, 4), got {T.shape}')
    if not np.all(np.isfinite(T)):
        raise ValueError(f'{name} contains NaN or inf')
    R = T[:3, :3]
    if not np.allclose(R @ R.T, np.eye(3), atol=1e-5) or not np.allclose(T[3], [0, 0, 0, 1]):
        raise ValueError(f'{name} is not a rigid transform')
    if np.linalg.det(R) < 0:
        raise ValueError(f'{name} is a reflection (det(R) = -1), not a rotation')
    return T


def invert_transform(T) -> np.ndarray:
    """Return the inverse of rigid transform ``T`` (4, 4): ``T_a_b -> T_b_a``.

    Raises:
        ValueError: ``T`` is not a finite rigid (4, 4) transform.
    """
    T = check_transform(T)
    R = T[:3, :3]
    t = T[:3, 3]
    out = np.eye(4)
    out[:3, :3] = R.T
    out[:3, 3] = -R.T @ t
    return out


def nearest_rigid(T) -> np.ndarray:
    """Return ``T`` (4, 4) with its rotation block replaced by the nearest rotation (SVD).

    Products of many transforms drift off SO(3) by rounding; this puts them back.

    Raises:
        ValueError: ``T`` is not a finite (4, 4) matrix.
    """
    T = np.array(T, dtype=np.float64)
    if T.shape != (4, 4) or not np.all(np.isfinite(T)):
        raise ValueError(f'T must be a finite (4, 4) matrix, got shape {T.shape}')
    U, _, Vt = np.linalg.svd(T[:3, :3])
    R = U @ Vt
    if np.linalg.det(R) < 0:
        R = U @ np.diag([1.0, 1.0, -1.0]) @ Vt
    T[:3, :3] = R
    T[3] = (0.0, 0.0, 0.0, 1.0)
    return T


def transform_from_quaternion_xyzw(t, q_xyzw) -> np.ndarray:
    """Return the 4x4 transform from translation (3,) and a scalar-last quaternion (4,)."""
    q = np.asarray(q_xyzw, dtype=np.float64).reshape(-1)
    if q.shape != (4,) or not np.isfinite(q).all() or np.linalg.norm(q) < 1e-9:
        raise ValueError(f'quaternion must be 4 finite values with non-zero norm, got {q}')
    return make_transform(Rotation.from_quat(q / np.linalg.norm(q)).as_matrix(), t)


def quaternion_xyzw_from_transform(T) -> np.ndarray:
    """Return the scalar-last unit quaternion (4,) of the rotation of rigid ``T`` (4, 4)."""
    return Rotation.from_matrix(check_transform(T)[:3, :3]).as_quat()


def rotation_angle_deg(T) -> float:
    """Return the rotation angle of rigid ``T`` (4, 4) in degrees."""
    R = check_transform(T)[:3, :3]
    return float(np.degrees(np.arccos(np.clip((np.trace(R) - 1.0) / 2.0, -1.0, 1.0))))
