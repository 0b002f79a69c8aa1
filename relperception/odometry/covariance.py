# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Covariance of visual-odometry poses: from reprojection residuals, chained along keyframes.

A pose ``T`` (4, 4) is perturbed on the left, in the frame it maps into:
``R' = exp([dtheta]x) R`` and ``t' = t + dt``. Its covariance is the 6x6 covariance of
``(dtheta, dt)`` (radians, metres), rotation first. That is the convention of
``nav_msgs/Odometry`` pose covariance (fixed axes of the header frame) up to the order of the
blocks, which :func:`ros_order` swaps (ROS: x, y, z, rotation x, y, z).

* :func:`pnp_covariance`: Gauss-Newton covariance ``s^2 (J^T J)^-1`` of a camera pose from
  3-D/2-D correspondences, with the Jacobian of ``cv2.projectPoints`` and ``s^2`` the residual
  variance (floored at :data:`MIN_RESIDUAL_PX`).
* :func:`invert_covariance`, :func:`compose_covariance`: first-order propagation through
  ``inv(T)`` and ``T_a_b @ T_b_c`` (independent factors).
* :func:`twist_from_poses`: body-frame velocity of two consecutive poses.
"""

from __future__ import annotations

import cv2
import numpy as np
from relperception.core_types import Camera
from relperception.odometry import geometry
from relperception.transforms import check_transform, invert_transform
from relperception.validation import as_rows

#: Floor of the reprojection residual standard deviation (pixels): matches are never exact.
MIN_RESIDUAL_PX = 0.5
#: Fewest correspondences for a covariance (more equations than the 6 unknowns).
MIN_POINTS = 4
#: Variance that stands for "unknown" in a published covariance (no information).
UNKNOWN_VARIANCE = 1e6
#: Translation standard deviation (m) added to each keyframe step without metric scale, plus
#: 100 % of the step length: the step is known in direction, not in length.
NON_METRIC_SIGMA_M = 1.0


def _check_covariance(name: str, cov) -> np.ndarray:
    cov = np.asarray(cov, dtype=np.float64)
    if cov.shape != (6, 6) or not np.all(np.isfinite(cov)):
        raise ValueError(f'{name} must be a finite (6, 6) covariance, got shape {cov.shape}')
    return cov


def _skew(v: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def _left_jacobian_so3(rvec: np.ndarray) -> np.ndarray:
    """Left Jacobian of SO(3): ``exp(r + dr) ~ exp(J_l(r) dr) exp(r)``."""
    angle = float(np.linalg.norm(rvec))
    K = _skew(rvec)
    if angle < 1e-8:
        return np.eye(3) + 0.5 * K
    return (np.eye(3) + (1.0 - np.cos(angle)) / angle ** 2 * K
            + (angle - np.sin(angle)) / angle ** 3 * (K @ K))


def pnp_covariance(points3d, points2d, T_cam_points, camera: Camera) -> np.ndarray | None:
    """Covariance of a camera pose from its 3-D/2-D correspondences.

    Args:
        points3d: (N, 3) points in metres in the frame ``T_cam_points`` maps from.
        points2d: (N, 2) observed pixels of those points (with lens distortion).
        T_cam_points: (4, 4) estimated pose: points frame -> camera optical frame.
        camera: intrinsics and distortion of the observing camera.

    Returns:
        (6, 6) covariance of ``T_cam_points`` (left perturbation in the camera frame, rotation
        first), or None with fewer than :data:`MIN_POINTS` finite correspondences in front of
        the camera or a degenerate geometry (e.g. all points on one ray).

    Raises:
        ValueError: malformed arrays or transform.
    """
    points3d = as_rows('points3d', points3d, 3)
    points2d = as_rows('points2d', points2d, 2)
    if len(points3d) != len(points2d):
        raise ValueError(f'points3d ({len(points3d)}) and points2d ({len(points2d)}) must have '
                         'the same length')
    T = check_transform(T_cam_points, 'T_cam_points')
    if not isinstance(camera, Camera):
        raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
            f'camera must be a relperception.core_types.Camera, got {type(camera)}')
    finite = np.isfinite(points3d).all(axis=1) & np.isfinite(points2d).all(axis=1)
    in_front = np.zeros(len(points3d), dtype=bool)
    in_front[finite] = (points3d[finite] @ T[:3, :3].T + T[:3, 3])[:, 2] > 1e-6
    if np.count_nonzero(in_front) < MIN_POINTS:
        return None
    rvec, _ = cv2.Rodrigues(T[:3, :3])
    observed, distortion = geometry.pnp_view(points2d[in_front], camera)
    projected, jacobian = cv2.projectPoints(points3d[in_front].reshape(-1, 1, 3), rvec,
                                            T[:3, 3].copy(), camera.K, distortion)
    residuals = projected.reshape(-1, 2) - observed
    J = jacobian[:, :6]   # d(pixels) / d(rvec, tvec)
    dof = 2 * len(residuals) - 6
    variance = max(float(np.sum(residuals ** 2)) / dof, MIN_RESIDUAL_PX ** 2)
    information = J.T @ J
    if np.linalg.cond(information) > 1e12:
        return None
    cov_rvec_t = variance * np.linalg.inv(information)
    # rvec perturbation -> left rotation perturbation: dtheta = J_l(rvec) drvec.
    A = np.eye(6)
    A[:3, :3] = _left_jacobian_so3(rvec.reshape(3))
    cov = A @ cov_rvec_t @ A.T
    return 0.5 * (cov + cov.T)


def invert_covariance(T, cov) -> np.ndarray:
    """Return the covariance of ``inv(T)`` given the covariance ``cov`` of ``T``.

    Args:
        T: (4, 4) rigid transform.
        cov: (6, 6) covariance of ``T`` (left perturbation, rotation first).

    Returns:
        (6, 6) covariance of ``inv(T)`` (left perturbation in the frame ``inv(T)`` maps into).
    """
    T = check_transform(T)
    cov = _check_covariance('cov', cov)
    R_t = T[:3, :3].T
    J = np.zeros((6, 6))
    J[:3, :3] = -R_t
    J[3:, :3] = -R_t @ _skew(T[:3, 3])
    J[3:, 3:] = -R_t
    return J @ cov @ J.T


def compose_covariance(T_a_b, cov_a_b, T_b_c, cov_b_c) -> np.ndarray:
    """Return the covariance of ``T_a_c = T_a_b @ T_b_c`` (independent factors).

    Args:
        T_a_b: (4, 4) transform b -> a; ``cov_a_b`` its (6, 6) covariance (frame a).
        T_b_c: (4, 4) transform c -> b; ``cov_b_c`` its (6, 6) covariance (frame b).

    Returns:
        (6, 6) covariance of ``T_a_c`` (left perturbation in frame a, rotation first).
    """
    T_a_b = check_transform(T_a_b, 'T_a_b')
    T_b_c = check_transform(T_b_c, 'T_b_c')
    cov_a_b = _check_covariance('cov_a_b', cov_a_b)
    cov_b_c = _check_covariance('cov_b_c', cov_b_c)
    R_a_b = T_a_b[:3, :3]
    A = np.eye(6)
    A[3:, :3] = -_skew(R_a_b @ T_b_c[:3, 3])
    B = np.zeros((6, 6))
    B[:3, :3] = R_a_b
    B[3:, 3:] = R_a_b
    return A @ cov_a_b @ A.T + B @ cov_b_c @ B.T


def conjugate_covariance(T_a_b, T, cov) -> np.ndarray:
    """Return the covariance of ``T_a_b @ T @ inv(T_a_b)``, with ``T_a_b`` exact.

    E.g. a camera pose expressed for the body the camera is mounted on.

    Args:
        T_a_b: (4, 4) exact transform (e.g. ``T_base_cam``).
        T: (4, 4) transform (e.g. ``T_world_cam``).
        cov: (6, 6) covariance of ``T``.

    Returns:
        (6, 6) covariance of ``T_a_b @ T @ inv(T_a_b)`` (left perturbation, rotation first).
    """
    zero = np.zeros((6, 6))
    T_a_b = check_transform(T_a_b, 'T_a_b')
    inner = compose_covariance(T_a_b, zero, T, cov)
    return compose_covariance(T_a_b @ check_transform(T), inner, invert_transform(T_a_b), zero)


def rotate_covariance(R_b_a, cov) -> np.ndarray:
    """Return a left-perturbation covariance given in the axes of frame a in those of frame b.

    Args:
        R_b_a: (3, 3) rotation from frame a's axes to frame b's.
        cov: (6, 6) covariance of ``(dtheta, dt)`` in frame a's axes (rotation first).

    Returns:
        (6, 6) ``B @ cov @ B.T`` with ``B = blockdiag(R_b_a, R_b_a)``.
    """
    cov = _check_covariance('cov', cov)
    R_b_a = np.asarray(R_b_a, dtype=np.float64)
    if R_b_a.shape != (3, 3) or not np.all(np.isfinite(R_b_a)):
        raise ValueError(f'R_b_a must be a finite (3, 3) rotation, got shape {R_b_a.shape}')
    blocks = np.kron(np.eye(2), R_b_a)
    return blocks @ cov @ blocks.T


def inflate_translation(cov, sigma_m: float) -> np.ndarray:
    """Return ``cov`` with ``sigma_m**2`` added to each translation variance (e.g. no scale)."""
    cov = _check_covariance('cov', cov).copy()
    if not (np.isfinite(sigma_m) and sigma_m >= 0):
        raise ValueError(f'sigma_m must be finite and >= 0, got {sigma_m}')
    cov[3:, 3:] += sigma_m ** 2 * np.eye(3)
    return cov


def positive_part(matrix) -> np.ndarray:
    """Return the positive semi-definite part of a symmetric matrix (negative eigenvalues zeroed).

    Args:
        matrix: (n, n) finite, (nearly) symmetric matrix, e.g. the difference of two
            covariances; it is symmetrised first.

    Returns:
        (n, n) float64 symmetric positive semi-definite matrix; zero where ``matrix`` has no
        positive eigenvalue.

    Raises:
        ValueError: not a finite square matrix.
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or \
            not np.all(np.isfinite(matrix)):
        raise ValueError(f'matrix must be a finite square matrix, got shape {matrix.shape}')
    values, vectors = np.linalg.eigh(0.5 * (matrix + matrix.T))
    positive = (vectors * np.clip(values, 0.0, None)) @ vectors.T
    return 0.5 * (positive + positive.T)


def ros_order(cov) -> np.ndarray:
    """Reorder a (6, 6) covariance from (rotation, translation) to ROS (x, y, z, rx, ry, rz).

    Returns:
        (36,) float64 row-major values for ``PoseWithCovariance.covariance`` or
        ``TwistWithCovariance.covariance``.
    """
    cov = _check_covariance('cov', cov)
    order = [3, 4, 5, 0, 1, 2]
    return cov[np.ix_(order, order)].reshape(36).copy()


def twist_from_poses(T_world_body0, T_world_body1, dt_s: float) -> np.ndarray:
    """Body-frame velocity that moves ``T_world_body0`` to ``T_world_body1`` in ``dt_s``.

    Args:
        T_world_body0: (4, 4) earlier pose.
        T_world_body1: (4, 4) later pose.
        dt_s: seconds between them (> 0).

    Returns:
        (6,) float64 ``(vx, vy, vz, wx, wy, wz)`` in m/s and rad/s in the body frame (the
        ``child_frame_id`` convention of ``nav_msgs/Odometry``): the step ``body0 -> body1``
        in the axes of ``body0`` over ``dt_s``, first order in the rotation of the step.
    """
    if not (np.isfinite(dt_s) and dt_s > 0):
        raise ValueError(f'dt_s must be > 0, got {dt_s}')
    T_0_1 = invert_transform(check_transform(T_world_body0, 'T_world_body0')) @ check_transform(
        T_world_body1, 'T_world_body1')   # body1 in body0
    rvec, _ = cv2.Rodrigues(T_0_1[:3, :3])
    linear = T_0_1[:3, 3] / dt_s
    angular = rvec.reshape(3) / dt_s
    return np.concatenate([linear, angular])


def step_covariance(keypoints_kf, keypoints_cur, T_kf_cur, camera_kf: Camera,
                    camera_cur: Camera, depth_kf=None) -> np.ndarray | None:
    """Covariance of a keyframe -> frame motion from its inlier matches.

    The 3-D points are the keyframe pixels lifted with the keyframe depth (RGB-D) or, without
    depth, triangulated with the estimated motion (monocular: the covariance is then in the
    units of that motion, whatever their scale); :func:`pnp_covariance` of the current camera
    against them gives the covariance of ``T_cur_kf``, inverted here.

    Args:
        keypoints_kf: (N, 2) inlier pixels in the keyframe.
        keypoints_cur: (N, 2) the matching pixels in the current frame.
        T_kf_cur: (4, 4) estimated pose of the current camera in the keyframe camera.
        camera_kf: intrinsics of the keyframe; ``camera_cur`` those of the current frame.
        depth_kf: (H, W) float32 metres of the keyframe (NaN invalid), or None.

    Returns:
        (6, 6) covariance of ``T_kf_cur`` (left perturbation in the keyframe camera frame,
        rotation first), or None when the geometry gives none (too few points, no baseline).
    """
    keypoints_kf = as_rows('keypoints_kf', keypoints_kf, 2)
    keypoints_cur = as_rows('keypoints_cur', keypoints_cur, 2)
    T_cur_kf = invert_transform(check_transform(T_kf_cur, 'T_kf_cur'))
    if depth_kf is not None:
        points = geometry.backproject(keypoints_kf, depth_kf, camera_kf)
    else:
        if np.linalg.norm(T_cur_kf[:3, 3]) < 1e-9:
            return None   # no baseline, nothing to triangulate
        points = geometry.triangulate(keypoints_kf, keypoints_cur, T_cur_kf, camera_cur)
        points[~(points[:, 2] > 0)] = np.nan
    cov_cur_kf = pnp_covariance(points, keypoints_cur, T_cur_kf, camera_cur)
    if cov_cur_kf is None:
        return None
    return invert_covariance(T_cur_kf, cov_cur_kf)
