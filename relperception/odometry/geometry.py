# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Two-view geometry on top of OpenCV: essential matrix, PnP, triangulation, projection.

All functions take pixel coordinates in the convention of :mod:`relperception.core_types`
(x right, y down, centre of the top-left pixel at (0, 0)) and camera-frame points in the
REP 103 optical frame (z forward). Relative poses are returned as ``T_cam1_cam0``: the 4x4
float64 transform that maps a point from camera 0 coordinates into camera 1 coordinates.

Lens distortion is honoured everywhere, with the model the camera names
(:data:`relperception.core_types.DISTORTION_MODELS`): points are undistorted
(``cv2.undistortPoints``, or ``cv2.fisheye.undistortPoints`` for ``equidistant``) before the
essential matrix and triangulation; ``cv2.solvePnPRansac`` and ``cv2.projectPoints`` get the
coefficients of OpenCV's standard model directly, while fisheye pixels are undistorted first
(:func:`pnp_view`) and projected with ``cv2.fisheye.projectPoints``.
"""

from __future__ import annotations

import logging

import cv2
import numpy as np

from relperception.core_types import Camera, FISHEYE_MODELS
from relperception.transforms import check_transform, make_transform
from relperception.validation import as_rows

logger = logging.getLogger(__name__)

#: Fewest finite correspondences :func:`relative_pose_essential` works with.
MIN_POINTS_ESSENTIAL = 8
#: Fewest finite 3-D/2-D correspondences :func:`relative_pose_pnp` works with.
MIN_POINTS_PNP = 6

#: Cheirality test range of ``cv2.recoverPose`` in baselines (points beyond count as infinite).
_RECOVER_POSE_MAX_DISTANCE = 1e4

PoseAndInliers = tuple[np.ndarray, np.ndarray]


def _check_camera(camera) -> Camera:
    if not isinstance(camera, Camera):
        raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
            f'camera must be a relperception.core_types.Camera, got {type(camera)}')
    return camera


def _check_pair(points0, points1) -> tuple[np.ndarray, np.ndarray]:
    points0 = as_rows('points0', points0, 2)
    points1 = as_rows('points1', points1, 2)
    if len(points0) != len(points1):
        raise ValueError(f'points0 ({len(points0)}) and points1 ({len(points1)}) must have '
                         'the same length')
    return points0, points1


def _check_ransac(threshold_px: float, confidence: float) -> None:
    if not (np.isfinite(threshold_px) and threshold_px > 0):
        raise ValueError(f'threshold_px must be > 0, got {threshold_px}')
    if not 0.0 < confidence < 1.0:
        raise ValueError(f'confidence must be in (0, 1), got {confidence}')


def undistort_pixels(points, camera: Camera) -> np.ndarray:
    """Return ``points`` (N, 2) pixels with the lens distortion of ``camera`` removed.

    Args:
        points: (N, 2) pixel coordinates (any float dtype) in the distorted image.
        camera: intrinsics; with no distortion the points come back unchanged.

    Returns:
        (N, 2) float64 pixel coordinates of the ideal pinhole camera with matrix ``camera.K``.
    """
    points = as_rows('points', points, 2)
    camera = _check_camera(camera)
    if not camera.has_distortion or len(points) == 0:
        return points.copy()
    if camera.distortion_model in FISHEYE_MODELS:
        undistorted = cv2.fisheye.undistortPoints(points.reshape(-1, 1, 2), camera.K,
                                                  camera.distortion, P=camera.K)
    else:
        undistorted = cv2.undistortPoints(points.reshape(-1, 1, 2), camera.K,
                                          camera.distortion, P=camera.K)
    return undistorted.reshape(-1, 2).astype(np.float64)


def pnp_view(points, camera: Camera) -> tuple[np.ndarray, np.ndarray | None]:
    """Return pixels and the distortion coefficients to give OpenCV's PnP functions.

    OpenCV's PnP and ``projectPoints`` know only its standard model: fisheye pixels are
    undistorted here (ideal pinhole pixels of ``camera.K``) and given without coefficients.

    Args:
        points: (N, 2) pixel coordinates in the (distorted) image.
        camera: their camera.

    Returns:
        ``(pixels, distortion)``: (N, 2) float64 and the coefficients, or None.
    """
    points = as_rows('points', points, 2)
    camera = _check_camera(camera)
    if camera.distortion_model in FISHEYE_MODELS and camera.has_distortion:
        return undistort_pixels(points, camera), None
    return points, camera.distortion


def normalized_rays(points, camera: Camera) -> np.ndarray:
    """Return the viewing rays ``(x, y, 1)`` of ``points`` (N, 2) pixels, undistorted.

    Returns:
        (N, 3) float64 rays in the camera frame with z = 1 (NaN rows for NaN input).
    """
    pixels = undistort_pixels(points, camera)
    K = camera.K
    rays = np.ones((len(pixels), 3))
    rays[:, 1] = (pixels[:, 1] - K[1, 2]) / K[1, 1]
    rays[:, 0] = (pixels[:, 0] - K[0, 2] - K[0, 1] * rays[:, 1]) / K[0, 0]
    rays[~np.isfinite(pixels).all(axis=1)] = np.nan
    return rays


def backproject(points, depth, camera: Camera) -> np.ndarray:
    """Lift pixels to 3-D camera-frame points with a depth image.

    Depth is sampled at the *nearest* pixel (no interpolation, so no invented depth across
    object boundaries); the ray of the exact sub-pixel position is then scaled to that depth.

    Args:
        points: (N, 2) pixel coordinates (x, y).
        depth: (H, W) float32 depth in metres along the optical axis, NaN (or <= 0) invalid.
        camera: intrinsics of the image ``points`` and ``depth`` belong to.

    Returns:
        (N, 3) float64 camera-frame points in metres; a row is NaN where the point is NaN,
        outside the image, or its depth is invalid.
    """
    points = as_rows('points', points, 2)
    camera = _check_camera(camera)
    depth = np.asarray(depth)
    if depth.shape != (camera.height, camera.width):
        raise ValueError(f'depth must have the shape (H, W) of the camera, '
                         f'{(camera.height, camera.width)}, got {depth.shape}')
    if not np.issubdtype(depth.dtype, np.floating):
        raise ValueError(f'depth must be floating-point metres, got {depth.dtype} (convert '
                         'millimetre images with depth_to_metres)')
    height, width = depth.shape
    out = np.full((len(points), 3), np.nan)
    if len(points) == 0:
        return out
    finite = np.isfinite(points).all(axis=1)
    cols = np.full(len(points), -1, dtype=np.int64)
    rows = np.full(len(points), -1, dtype=np.int64)
    cols[finite] = np.floor(points[finite, 0] + 0.5).astype(np.int64)
    rows[finite] = np.floor(points[finite, 1] + 0.5).astype(np.int64)
    inside = finite & (cols >= 0) & (cols < width) & (rows >= 0) & (rows < height)
    z = np.full(len(points), np.nan)
    z[inside] = depth[rows[inside], cols[inside]]
    valid = inside & np.isfinite(z) & (z > 0)
    if np.any(valid):
        rays = normalized_rays(points[valid], camera)
        out[valid] = rays * z[valid, None]
    return out


def project(points_cam, camera: Camera) -> np.ndarray:
    """Project camera-frame points into the (distorted) image.

    Args:
        points_cam: (N, 3) points in metres in the camera optical frame.
        camera: intrinsics, distortion applied by ``cv2.projectPoints``.

    Returns:
        (N, 2) float64 pixel coordinates; NaN rows for non-finite points and for points with
        z <= 0 (behind the camera). Points outside the image are returned, not masked.
    """
    points_cam = as_rows('points_cam', points_cam, 3)
    camera = _check_camera(camera)
    out = np.full((len(points_cam), 2), np.nan)
    valid = np.isfinite(points_cam).all(axis=1)
    valid[valid] = points_cam[valid, 2] > 1e-12
    if not np.any(valid):
        return out
    if camera.has_distortion and camera.distortion_model in FISHEYE_MODELS:
        pixels, _ = cv2.fisheye.projectPoints(points_cam[valid].reshape(-1, 1, 3), np.zeros(3),
                                              np.zeros(3), camera.K, camera.distortion)
        out[valid] = pixels.reshape(-1, 2)
    elif camera.has_distortion:
        pixels, _ = cv2.projectPoints(points_cam[valid].reshape(-1, 1, 3), np.zeros(3),
                                      np.zeros(3), camera.K, camera.distortion)
        out[valid] = pixels.reshape(-1, 2)
    else:
        homogeneous = points_cam[valid] @ camera.K.T
        out[valid] = homogeneous[:, :2] / homogeneous[:, 2:3]
    return out


def relative_pose_essential(points0, points1, camera: Camera, threshold_px: float = 1.0,
                            confidence: float = 0.999) -> PoseAndInliers | None:
    """Estimate the relative pose of two views of a calibrated camera (5-point RANSAC).

    ``cv2.findEssentialMat`` with ``USAC_MAGSAC`` (RANSAC with local optimisation and a final
    least-squares polish; on small-baseline video it is ~20x more accurate in translation
    direction than plain ``RANSAC``), on undistorted pixels, followed by ``cv2.recoverPose``
    (cheirality check). Monocular: the translation has unit norm, its scale is unknown.

    Args:
        points0: (N, 2) pixel coordinates in image 0.
        points1: (N, 2) pixel coordinates of the same points in image 1.
        camera: intrinsics shared by both images.
        threshold_px: RANSAC inlier threshold (distance to the epipolar line) in pixels.
        confidence: RANSAC confidence in (0, 1).

    Returns:
        ``(T_cam1_cam0, inlier_mask)`` with ``T_cam1_cam0`` (4, 4) float64 whose translation
        has unit norm and ``inlier_mask`` (N,) bool (RANSAC inliers that also pass the
        cheirality test); ``None`` with fewer than 8 finite correspondences, a degenerate
        configuration (no motion, all points identical) or when OpenCV finds no solution.
        Pure rotation is *not* detected here: check the parallax before calling.
    """
    points0, points1 = _check_pair(points0, points1)
    camera = _check_camera(camera)
    _check_ransac(threshold_px, confidence)
    finite = np.isfinite(points0).all(axis=1) & np.isfinite(points1).all(axis=1)
    if np.count_nonzero(finite) < MIN_POINTS_ESSENTIAL:
        return None
    index = np.flatnonzero(finite)
    pixels0 = undistort_pixels(points0[index], camera)
    pixels1 = undistort_pixels(points1[index], camera)
    if (np.ptp(pixels0, axis=0).max() < 1e-6 or np.ptp(pixels1, axis=0).max() < 1e-6
            or np.abs(pixels1 - pixels0).max() < 1e-9):
        return None
    try:
        for method in (cv2.USAC_MAGSAC, cv2.RANSAC):
            # MAGSAC++ is the most accurate here, but when it returns no model at all
            # (seen with a strided K, since fixed in Camera), plain RANSAC is the fallback.
            E, ransac_mask = cv2.findEssentialMat(pixels0, pixels1, camera.K, method=method,
                                                  prob=confidence, threshold=threshold_px)
            if E is not None and E.shape[0] >= 3 and ransac_mask is not None:
                break
        else:
            return None
        E = E[:3]
        if not np.all(np.isfinite(E)):
            return None
        # distanceThresh in units of the (unit) baseline: OpenCV's default of 50 rejects
        # every point farther than 50 baselines, i.e. most of the scene for small motions.
        num_good, R, t, pose_mask, _ = cv2.recoverPose(
            E, pixels0, pixels1, camera.K, distanceThresh=_RECOVER_POSE_MAX_DISTANCE,
            mask=ransac_mask.copy())
    except cv2.error as error:
        logger.debug('essential matrix estimation failed: %s', error)
        return None
    if num_good < 5 or not (np.all(np.isfinite(R)) and np.all(np.isfinite(t))):
        return None
    t = t.reshape(3)
    norm = np.linalg.norm(t)
    if not norm > 0:
        return None
    inliers = np.zeros(len(points0), dtype=bool)
    inliers[index] = pose_mask.reshape(-1) > 0
    return make_transform(R, t / norm), inliers


def relative_pose_pnp(points3d_cam0, points1, camera: Camera, threshold_px: float = 2.0,
                      confidence: float = 0.999) -> PoseAndInliers | None:
    """Estimate the metric pose of camera 1 from 3-D points in camera 0 and their pixels.

    ``cv2.solvePnPRansac`` (SQPnP minimal solver) then ``cv2.solvePnPRefineLM`` on the inliers;
    the inlier mask is recomputed with the refined pose.

    Args:
        points3d_cam0: (N, 3) points in metres in the frame of camera 0 (NaN rows ignored).
        points1: (N, 2) pixel coordinates of the same points in image 1.
        camera: intrinsics of image 1 (distortion honoured).
        threshold_px: RANSAC reprojection-error threshold in pixels.
        confidence: RANSAC confidence in (0, 1).

    Returns:
        ``(T_cam1_cam0, inlier_mask)``: (4, 4) float64 metric transform and (N,) bool;
        ``None`` with fewer than 6 usable correspondences or when no solution is found.
    """
    points3d_cam0 = as_rows('points3d_cam0', points3d_cam0, 3)
    points1 = as_rows('points1', points1, 2)
    if len(points3d_cam0) != len(points1):
        raise ValueError(f'points3d_cam0 ({len(points3d_cam0)}) and points1 ({len(points1)}) '
                         'must have the same length')
    camera = _check_camera(camera)
    _check_ransac(threshold_px, confidence)
    finite = np.isfinite(points3d_cam0).all(axis=1) & np.isfinite(points1).all(axis=1)
    if np.count_nonzero(finite) < MIN_POINTS_PNP:
        return None
    index = np.flatnonzero(finite)
    object_points = np.ascontiguousarray(points3d_cam0[index])
    image_points = np.ascontiguousarray(points1[index])
    if np.ptp(object_points, axis=0).max() < 1e-9:
        return None
    view_points, view_distortion = pnp_view(image_points, camera)
    view_points = np.ascontiguousarray(view_points)
    try:
        ok, rvec, tvec, ransac_inliers = cv2.solvePnPRansac(
            object_points, view_points, camera.K, view_distortion, iterationsCount=200,
            reprojectionError=float(threshold_px), confidence=float(confidence),
            flags=cv2.SOLVEPNP_SQPNP)
        if not ok or ransac_inliers is None or len(ransac_inliers) < MIN_POINTS_PNP:
            return None
        chosen = ransac_inliers.reshape(-1)
        rvec, tvec = cv2.solvePnPRefineLM(object_points[chosen], view_points[chosen],
                                          camera.K, view_distortion, rvec, tvec)
    except cv2.error as error:
        logger.debug('PnP failed: %s', error)
        return None
    if not (np.all(np.isfinite(rvec)) and np.all(np.isfinite(tvec))):
        return None
    T_cam1_cam0 = make_transform(cv2.Rodrigues(rvec)[0], tvec.reshape(3))
    points_cam1 = object_points @ T_cam1_cam0[:3, :3].T + T_cam1_cam0[:3, 3]
    errors = np.linalg.norm(project(points_cam1, camera) - image_points, axis=1)
    inliers = np.zeros(len(points1), dtype=bool)
    inliers[index] = np.nan_to_num(errors, nan=np.inf) <= threshold_px
    if np.count_nonzero(inliers) < MIN_POINTS_PNP:
        return None
    return T_cam1_cam0, inliers


def triangulate(points0, points1, T_cam1_cam0, camera: Camera) -> np.ndarray:
    """Triangulate correspondences of two views (linear, ``cv2.triangulatePoints``).

    Args:
        points0: (N, 2) pixel coordinates in image 0.
        points1: (N, 2) pixel coordinates in image 1.
        T_cam1_cam0: (4, 4) pose of camera 0 in camera 1 (translation sets the scale).
        camera: intrinsics shared by both images (distortion removed first).

    Returns:
        (N, 3) float64 points in the frame of camera 0 in the units of ``T_cam1_cam0``; NaN
        rows for NaN input, points at infinity, or a ``T_cam1_cam0`` without translation.
        Points behind a camera are *not* masked: check ``z > 0`` (camera 0) yourself where it
        matters.
    """
    points0, points1 = _check_pair(points0, points1)
    camera = _check_camera(camera)
    T_cam1_cam0 = check_transform(T_cam1_cam0, 'T_cam1_cam0')
    out = np.full((len(points0), 3), np.nan)
    finite = np.isfinite(points0).all(axis=1) & np.isfinite(points1).all(axis=1)
    if not np.any(finite) or np.linalg.norm(T_cam1_cam0[:3, 3]) == 0.0:
        return out   # no baseline: no depth
    pixels0 = undistort_pixels(points0[finite], camera)
    pixels1 = undistort_pixels(points1[finite], camera)
    P0 = camera.K @ np.eye(4)[:3]
    P1 = camera.K @ T_cam1_cam0[:3]
    homogeneous = cv2.triangulatePoints(P0, P1, pixels0.T, pixels1.T).T
    w = homogeneous[:, 3:4]
    with np.errstate(divide='ignore', invalid='ignore'):
        points = np.where(np.abs(w) > 1e-12, homogeneous[:, :3] / w, np.nan)
    out[finite] = points
    return out
