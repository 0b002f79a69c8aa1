# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Windowed bundle adjustment: camera poses and 3-D points from their pixel observations.

:func:`bundle_adjust` minimises the robust (Huber) reprojection error of every observation over
the free camera poses and all points with gtsam (Levenberg-Marquardt on a factor graph of
``GenericProjectionFactorCal3_S2``, METIS ordering). An observation with a depth reading
(RGB-D) is a ``GenericStereoFactor3D`` instead: the pixel plus a virtual right-camera pixel
whose noise stands for the depth reading's (``depth_sigma_rel`` of the depth), so depth and
reprojection are weighed in one robust residual. A distance between two camera centres
measured by another sensor (wheel odometry) is a ``RangeFactorPose3``. gtsam installs from PyPI
on x86-64 and, as ``gtsam==4.3a1``, on a Jetson (aarch64, Python 3.10); without it
:func:`bundle_adjust` raises :class:`BundleAdjustmentUnavailable` and visual odometry runs
without bundle adjustment.

Gauge: the poses flagged ``fixed`` are held; fix at least two cameras with distinct centres in
a monocular problem (that fixes the scale too), at least one with metric points.

Observations are undistorted once (``cv2.undistortPoints``), so the residual is the pinhole
reprojection error in pixels of the undistorted image.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from relperception.core_types import Camera
from relperception.odometry.covariance import rotate_covariance
from relperception.odometry.geometry import undistort_pixels
from relperception.transforms import invert_transform
from relperception.validation import as_rows

#: Baseline of the virtual stereo camera that carries depth readings (map units). Any value
#: gives the same optimum: the right pixel's noise is scaled with it.
_VIRTUAL_BASELINE = 1.0

#: Smallest standard deviation of a measured distance between cameras (metres).
_MIN_DISTANCE_SIGMA_M = 1e-3

#: Standard deviation of the stiff priors that stand for the fixed poses when the covariances
#: are computed (radians, map units): far below any measured uncertainty.
_GAUGE_SIGMA = 1e-7

#: gtsam keys: symbol 'x' (cameras) and 'l' (points), as gtsam.symbol() builds them.
_CAMERA_SYMBOL = ord('x') << 56
_POINT_SYMBOL = ord('l') << 56


class BundleAdjustmentUnavailable(ImportError):
    """gtsam, the bundle-adjustment library, is not installed."""


@dataclasses.dataclass
class BundleAdjustmentResult:
    """Outcome of :func:`bundle_adjust`.

    Attributes:
        T_cam_world: (C, 4, 4) float64 refined poses (fixed ones unchanged).
        points_world: (P, 3) float64 refined points.
        residuals_px: (M,) float64 reprojection error of every observation after the
            optimisation (pixels).
        initial_rmse_px: RMS reprojection error before (pixels).
        final_rmse_px: RMS reprojection error after (pixels).
        iterations: Levenberg-Marquardt iterations used.
        elapsed_ms: wall time of the call.
        success: whether the solver reported convergence.
        depth_errors_rel: (M,) float64 relative error ``z / depth - 1`` of every observation
            with a depth reading after the optimisation, NaN for the others.
        pose_covariances: (C, 6, 6) float64 covariance of every refined ``T_world_cam`` given
            the fixed poses (zero for those), from the information matrix of the robust
            problem at the optimum (gtsam ``Marginals``); left perturbation in world axes,
            rotation first (radians, map units), as :mod:`relperception.odometry.covariance`.
            NaN where the problem is singular; None unless asked for (``covariances``).
    """

    T_cam_world: np.ndarray
    points_world: np.ndarray
    residuals_px: np.ndarray
    initial_rmse_px: float
    final_rmse_px: float
    iterations: int
    elapsed_ms: float
    success: bool
    depth_errors_rel: np.ndarray
    pose_covariances: np.ndarray | None = None


def _check_inputs(T_cam_world, points_world, camera_index, point_index, pixels, fixed):
    T_cam_world = np.asarray(T_cam_world, dtype=np.float64)
    if T_cam_world.ndim != 3 or T_cam_world.shape[1:] != (4, 4) or len(T_cam_world) == 0:
        raise ValueError(f'T_cam_world must be (C, 4, 4) with C >= 1, got {T_cam_world.shape}')
    points_world = as_rows('points_world', points_world, 3)
    pixels = as_rows('pixels', pixels, 2)
    camera_index = np.asarray(camera_index)
    point_index = np.asarray(point_index)
    fixed = np.asarray(fixed, dtype=bool)
    if camera_index.shape != (len(pixels),) or point_index.shape != (len(pixels),):
        raise ValueError(f'camera_index {camera_index.shape} and point_index '
                         f'{point_index.shape} must be ({len(pixels)},), one per observation')
    if not (np.issubdtype(camera_index.dtype, np.integer)
            and np.issubdtype(point_index.dtype, np.integer)):
        raise ValueError('camera_index and point_index must be integer arrays')
    if len(pixels) and (camera_index.min() < 0 or camera_index.max() >= len(T_cam_world)
                        or point_index.min() < 0 or point_index.max() >= len(points_world)):
        raise ValueError('camera_index / point_index out of range')
    if fixed.shape != (len(T_cam_world),):
        raise ValueError(f'fixed must be ({len(T_cam_world)},) bool, got {fixed.shape}')
    for name, values in (('T_cam_world', T_cam_world), ('points_world', points_world),
                         ('pixels', pixels)):
        if not np.all(np.isfinite(values)):
            raise ValueError(f'{name} must be finite')
    return (T_cam_world, points_world, camera_index.astype(np.int64),
            point_index.astype(np.int64), pixels, fixed)


def bundle_adjust(T_cam_world, points_world, camera_index, point_index, pixels,
                  camera: Camera, fixed, huber_px: float = 1.0,
                  max_iterations: int = 10, depths=None,
                  depth_sigma_rel: float = 0.02, distances=None,
                  distance_sigma_rel: float = 0.02,
                  covariances: bool = False) -> BundleAdjustmentResult:
    """Refine camera poses and points by robust reprojection-error minimisation.

    Args:
        T_cam_world: (C, 4, 4) poses of the cameras (world -> camera transforms).
        points_world: (P, 3) points in the world frame (same units as the poses).
        camera_index: (M,) int index into ``T_cam_world`` of every observation.
        point_index: (M,) int index into ``points_world`` of every observation.
        pixels: (M, 2) observed pixel positions (distorted image; undistorted here).
        camera: intrinsics shared by all cameras.
        fixed: (C,) bool, poses held constant (the gauge; see the module docstring).
        huber_px: Huber loss scale in pixels (errors beyond it count linearly).
        max_iterations: most Levenberg-Marquardt iterations.
        depths: optional (M,) depth reading of every observation in metres (the point's z in
            that camera), NaN where there is none; the poses and points must then be metric.
        depth_sigma_rel: standard deviation of a depth reading as a share of the depth.
        distances: optional (K, 3) rows ``(camera i, camera j, metres)``: the distance between
            the two camera centres measured by another sensor (wheel odometry), each a range
            factor with standard deviation ``distance_sigma_rel`` of the distance (at least
            1 mm); the poses and points must then be metric.
        distance_sigma_rel: standard deviation of a measured distance as a share of it.
        covariances: also return the covariance of every refined pose
            (``BundleAdjustmentResult.pose_covariances``; one more factorisation).

    Returns:
        :class:`BundleAdjustmentResult`.

    Raises:
        ValueError: shapes or indices that do not fit, non-finite input, no observation,
            ``huber_px`` <= 0, depth readings <= 0, ``depth_sigma_rel`` <= 0, distances that
            are not (K, 3) rows of two camera indices and a distance >= 0, or
            ``distance_sigma_rel`` <= 0.
    """
    started = time.perf_counter()
    (T_cam_world, points_world, camera_index, point_index, pixels,
     fixed) = _check_inputs(T_cam_world, points_world, camera_index, point_index, pixels, fixed)
    if not isinstance(camera, Camera):
        raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
            f'camera must be a relperception.core_types.Camera, got {type(camera)}')
    if len(pixels) == 0:
        raise ValueError('bundle adjustment needs at least one observation')
    if not (np.isfinite(huber_px) and huber_px > 0):
        raise ValueError(f'huber_px must be > 0, got {huber_px}')
    depths = _check_depths(depths, len(pixels))
    if not (np.isfinite(depth_sigma_rel) and depth_sigma_rel > 0):
        raise ValueError(f'depth_sigma_rel must be > 0, got {depth_sigma_rel}')
    distances = _check_distances(distances, len(T_cam_world))
    if not (np.isfinite(distance_sigma_rel) and distance_sigma_rel > 0):
        raise ValueError(f'distance_sigma_rel must be > 0, got {distance_sigma_rel}')
    try:
        import gtsam
    except ImportError as error:
        raise BundleAdjustmentUnavailable(
            'bundle adjustment needs gtsam (pip install gtsam; on a Jetson gtsam==4.3a1)'
        ) from error
    observed = undistort_pixels(pixels, camera)
    K = camera.K
    calibration = gtsam.Cal3_S2(K[0, 0], K[1, 1], K[0, 1], K[0, 2], K[1, 2])
    noise = gtsam.noiseModel.Robust.Create(gtsam.noiseModel.mEstimator.Huber.Create(huber_px),
                                           gtsam.noiseModel.Isotropic.Sigma(2, 1.0))
    graph = gtsam.NonlinearFactorGraph()
    values = gtsam.Values()
    T_world_cam = np.stack([invert_transform(T) for T in T_cam_world])
    for c, T in enumerate(T_world_cam):
        values.insert(_camera_key(c), gtsam.Pose3(T))
    for p, xyz in enumerate(points_world):
        values.insert(_point_key(p), xyz)
    stereo = gtsam.Cal3_S2Stereo(K[0, 0], K[1, 1], K[0, 1], K[0, 2], K[1, 2],
                                 _VIRTUAL_BASELINE)
    huber = gtsam.noiseModel.mEstimator.Huber.Create(huber_px)
    disparity_m = K[0, 0] * _VIRTUAL_BASELINE
    for pixel, c, p, depth in zip(observed, camera_index.tolist(), point_index.tolist(),
                                  depths.tolist()):
        if depth == depth:   # a depth reading: virtual stereo pixel
            # uR = uL - disparity: uR carries the pixel's noise plus the disparity's.
            sigma_disparity = disparity_m * depth_sigma_rel / depth
            covariance = np.array([[1.0, 1.0, 0.0],
                                   [1.0, 1.0 + sigma_disparity ** 2, 0.0],
                                   [0.0, 0.0, 1.0]])
            measured = gtsam.StereoPoint2(pixel[0], pixel[0] - disparity_m / depth, pixel[1])
            stereo_noise = gtsam.noiseModel.Robust.Create(
                huber, gtsam.noiseModel.Gaussian.Covariance(covariance))
            graph.add(gtsam.GenericStereoFactor3D(measured, stereo_noise, _camera_key(c),
                                                  _point_key(p), stereo))
        else:
            graph.add(gtsam.GenericProjectionFactorCal3_S2(pixel, noise, _camera_key(c),
                                                           _point_key(p), calibration))
    for i, j, metres in distances:
        sigma = max(distance_sigma_rel * metres, _MIN_DISTANCE_SIGMA_M)
        graph.add(gtsam.RangeFactorPose3(_camera_key(int(i)), _camera_key(int(j)), metres,
                                         gtsam.noiseModel.Isotropic.Sigma(1, sigma)))
    initial_errors = reprojection_errors(T_cam_world, points_world, camera_index, point_index,
                                         observed, K)
    measurements = gtsam.NonlinearFactorGraph(graph)
    for c in np.flatnonzero(fixed):
        graph.add(gtsam.NonlinearEqualityPose3(_camera_key(int(c)), gtsam.Pose3(T_world_cam[c])))
    params = gtsam.LevenbergMarquardtParams()
    params.setMaxIterations(int(max_iterations))
    params.setOrderingType('METIS')
    params.setRelativeErrorTol(1e-3)
    optimizer = gtsam.LevenbergMarquardtOptimizer(graph, values, params)
    result = optimizer.optimize()
    refined_world_cam = np.stack([result.atPose3(_camera_key(c)).matrix()
                                  for c in range(len(T_cam_world))])
    refined = np.stack([invert_transform(T) for T in refined_world_cam])
    refined[fixed] = T_cam_world[fixed]
    points = np.stack([np.asarray(result.atPoint3(_point_key(p)), dtype=np.float64)
                       for p in range(len(points_world))])
    final_errors = reprojection_errors(refined, points, camera_index, point_index, observed, K)
    z = np.einsum('mj,mj->m', refined[camera_index, 2, :3], points[point_index]) \
        + refined[camera_index, 2, 3]
    with np.errstate(invalid='ignore'):
        depth_errors = z / depths - 1.0
    pose_covariances = _pose_covariances(gtsam, measurements, result, refined_world_cam,
                                         fixed) if covariances else None
    return BundleAdjustmentResult(
        T_cam_world=refined, points_world=points, residuals_px=final_errors,
        initial_rmse_px=_rmse(initial_errors), final_rmse_px=_rmse(final_errors),
        iterations=int(optimizer.iterations()),
        elapsed_ms=1e3 * (time.perf_counter() - started),
        success=bool(np.all(np.isfinite(refined)) and np.all(np.isfinite(points))),
        depth_errors_rel=depth_errors, pose_covariances=pose_covariances)


def _pose_covariances(gtsam, measurements, solution, T_world_cam: np.ndarray,
                      fixed: np.ndarray) -> np.ndarray:
    """(C, 6, 6) covariances of the free poses given the fixed ones (see the result).

    gtsam's ``Marginals`` cannot factorise the hard equality constraints of the gauge, so the
    fixed poses get stiff priors instead. gtsam perturbs a pose on the right, ``T exp(xi)``
    with ``xi = (w, v)`` in camera axes; to first order that is the left perturbation
    ``(R w, R v)`` in world axes used here.
    """
    count = len(T_world_cam)
    covariances = np.zeros((count, 6, 6))
    graph = gtsam.NonlinearFactorGraph(measurements)
    stiff = gtsam.noiseModel.Isotropic.Sigma(6, _GAUGE_SIGMA)
    for c in np.flatnonzero(fixed):
        key = _camera_key(int(c))
        graph.add(gtsam.PriorFactorPose3(key, solution.atPose3(key), stiff))
    try:
        marginals = gtsam.Marginals(graph, solution)
    except RuntimeError:   # indeterminate system (gtsam raises it as RuntimeError)
        covariances[~fixed] = np.nan
        return covariances
    for c in np.flatnonzero(~fixed):
        covariances[c] = rotate_covariance(T_world_cam[c, :3, :3],
                                           marginals.marginalCovariance(_camera_key(int(c))))
    return 0.5 * (covariances + covariances.transpose(0, 2, 1))


def _check_depths(depths, num_observations: int) -> np.ndarray:
    """Return (M,) float64 depth readings (NaN none) or raise ValueError."""
    if depths is None:
        return np.full(num_observations, np.nan)
    depths = np.asarray(depths, dtype=np.float64)
    if depths.shape != (num_observations,):
        raise ValueError(f'depths must be ({num_observations},), one per observation, '
                         f'got {depths.shape}')
    if np.any(np.isinf(depths)) or np.any(depths[np.isfinite(depths)] <= 0):
        raise ValueError('depths must be > 0 metres, or NaN where there is no reading')
    return depths


def _check_distances(distances, num_cameras: int) -> np.ndarray:
    """Return (K, 3) float64 ``(i, j, metres)`` rows (K may be 0) or raise ValueError."""
    if distances is None:
        return np.zeros((0, 3))
    distances = np.asarray(distances, dtype=np.float64)
    if distances.size == 0:
        return np.zeros((0, 3))
    if distances.ndim != 2 or distances.shape[1] != 3:
        raise ValueError(f'distances must be (K, 3) rows (i, j, metres), got {distances.shape}')
    if not np.all(np.isfinite(distances)):
        raise ValueError('distances must be finite')
    cameras = distances[:, :2]
    if np.any(cameras != np.round(cameras)) or np.any(cameras < 0) \
            or np.any(cameras >= num_cameras) or np.any(cameras[:, 0] == cameras[:, 1]):
        raise ValueError('distances must name two different cameras (indices) per row')
    if np.any(distances[:, 2] < 0):
        raise ValueError('distances must be >= 0 metres')
    return distances


def _camera_key(index: int) -> int:
    return int(_CAMERA_SYMBOL + index)


def _point_key(index: int) -> int:
    return int(_POINT_SYMBOL + index)


def _rmse(errors: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(errors)))) if len(errors) else 0.0


def reprojection_errors(T_cam_world, points_world, camera_index, point_index, pixels,
                        K) -> np.ndarray:
    """Return the (M,) pinhole reprojection errors (pixels) of undistorted observations.

    Args:
        T_cam_world: (C, 4, 4) poses; points_world: (P, 3); camera_index, point_index: (M,)
            int; pixels: (M, 2) undistorted observed pixels; K: (3, 3) intrinsics.

    Returns:
        (M,) float64 errors; infinite for points at or behind a camera.
    """
    R = T_cam_world[camera_index, :3, :3]
    t = T_cam_world[camera_index, :3, 3]
    points_cam = np.einsum('mij,mj->mi', R, points_world[point_index]) + t
    z = points_cam[:, 2]
    with np.errstate(divide='ignore', invalid='ignore'):
        projected = (points_cam @ K.T)[:, :2] / z[:, None]
        errors = np.linalg.norm(projected - pixels, axis=1)
    return np.where(z > 1e-9, errors, np.inf)
