# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Conversions between ROS message objects and the core types, without importing ROS.

Every function is duck-typed: it reads attributes by their ROS field names, so it works on
``rosbags`` message dataclasses and on ``rclpy`` messages alike. Functions that build messages
return plain dicts of field values; the caller constructs the message class it has.
"""

from __future__ import annotations

import decimal

import numpy as np

from ..core_types import Camera, check_intrinsics, DISTORTION_MODELS
from ..transforms import (
    check_transform,
    quaternion_xyzw_from_transform,
    transform_from_quaternion_xyzw,
)

NS_PER_SEC = 1_000_000_000


def stamp_to_ns(stamp) -> int:
    """Return a ``builtin_interfaces/Time`` (fields ``sec``, ``nanosec``) as integer nanoseconds.

    Raises:
        ValueError: if ``nanosec`` is outside [0, 1e9).
    """
    sec = int(stamp.sec)
    nanosec = int(stamp.nanosec)
    if not 0 <= nanosec < NS_PER_SEC:
        raise ValueError(f'stamp nanosec must be in [0, 1e9), got {nanosec}')
    return sec * NS_PER_SEC + nanosec


def ns_to_sec_nanosec(ns: int) -> tuple[int, int]:
    """Split integer nanoseconds into ``(sec, nanosec)`` for a ``builtin_interfaces/Time``.

    Raises:
        ValueError: for negative times or times beyond the int32 seconds of ROS 2.
    """
    ns = int(ns)
    if ns < 0:
        raise ValueError(f'time must be >= 0 ns, got {ns}')
    sec, nanosec = divmod(ns, NS_PER_SEC)
    if sec >= 2**31:
        raise ValueError(f'time {ns} ns does not fit the int32 seconds of builtin_interfaces/Time')
    return sec, nanosec


def seconds_to_ns(seconds: str | float) -> int:
    """Return a time in seconds as integer nanoseconds, rounded to the nearest nanosecond.

    A decimal string (``'1341847980.722988'``, ``'1.036594e-01'``) is converted exactly, without
    passing through a binary float, so that dataset file names survive the round trip.

    Raises:
        ValueError: if ``seconds`` is not a finite number.
    """
    try:
        value = decimal.Decimal(seconds.strip() if isinstance(seconds, str) else repr(seconds))
    except (decimal.InvalidOperation, TypeError):
        raise ValueError(f'not a time in seconds: {seconds!r}') from None
    if not value.is_finite():
        raise ValueError(f'time must be finite, got {seconds!r}')
    return int((value * NS_PER_SEC).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))


def _binned_roi_camera(msg, K: np.ndarray, width: int, height: int):
    """Return ``(K, width, height)`` of the image a CameraInfo's binning and ROI describe.

    REP 104, as ``image_geometry`` does: the calibration is of the full-resolution sensor;
    the image is the region of interest (all zeros: the whole sensor), binned by
    ``binning_x`` x ``binning_y`` (0 or 1: none). The principal point moves by the ROI
    offset, then the matrix and the size are divided by the binning. The distortion applies
    to normalised coordinates and is unchanged.

    Raises:
        ValueError: a region of interest outside the sensor, or one smaller than a bin.
    """
    bin_x = max(int(getattr(msg, 'binning_x', 0) or 0), 1)
    bin_y = max(int(getattr(msg, 'binning_y', 0) or 0), 1)
    roi = getattr(msg, 'roi', None)
    x0 = y0 = 0
    roi_width, roi_height = width, height
    if roi is not None and int(roi.width) > 0 and int(roi.height) > 0:
        x0, y0 = int(roi.x_offset), int(roi.y_offset)
        roi_width, roi_height = int(roi.width), int(roi.height)
        if x0 + roi_width > width or y0 + roi_height > height:
            raise ValueError(f'CameraInfo roi {roi_width}x{roi_height} at ({x0}, {y0}) '
                             f'reaches outside the {width}x{height} sensor')
    if (bin_x, bin_y, x0, y0, roi_width, roi_height) == (1, 1, 0, 0, width, height):
        return K, width, height
    if roi_width < bin_x or roi_height < bin_y:
        raise ValueError(f'CameraInfo roi {roi_width}x{roi_height} is smaller than the binning '
                         f'{bin_x}x{bin_y}')
    K = K.copy()
    K[0, 2] -= x0
    K[1, 2] -= y0
    K[0, :] /= bin_x
    K[1, :] /= bin_y
    return K, roi_width // bin_x, roi_height // bin_y


def camera_info_image_size(msg) -> tuple[int, int]:
    """Return ``(width, height)`` in pixels of the images a ``sensor_msgs/CameraInfo`` describes.

    REP 104: ``width`` x ``height`` is the calibrated sensor; a region of interest (``roi``,
    all zeros: the whole sensor) and ``binning_x`` / ``binning_y`` (0 or 1: none) make the
    images smaller, as :func:`camera_from_camera_info` applies them.

    Raises:
        ValueError: a zero size, a region of interest outside the sensor or one smaller than
            a bin.
    """
    width, height = int(msg.width), int(msg.height)
    if width <= 0 or height <= 0:
        raise ValueError(f'CameraInfo has no image size ({width}x{height}); is it calibrated?')
    _, width, height = _binned_roi_camera(msg, np.eye(3), width, height)
    return width, height


def camera_from_camera_info(msg, rectified: bool = False,
                            warnings: list[str] | None = None) -> Camera:
    """Return the :class:`Camera` described by a ``sensor_msgs/CameraInfo``.

    Reads ``k`` (9 values, row-major 3x3, pixels), ``d``, ``distortion_model``, ``width`` and
    ``height``. An empty ``d`` means no distortion. With ``rectified`` (images that are
    already rectified, e.g. ``image_rect``), the camera matrix is the left 3x3 block of ``p``
    and ``d`` is ignored: the image has no distortion left. ``binning_x``/``binning_y`` and
    ``roi`` (REP 104) are applied: the camera is that of the binned region of interest, as
    published by a driver that bins or crops its sensor.

    Args:
        msg: the ``sensor_msgs/CameraInfo``.
        rectified: take the camera matrix from ``p`` (rectified images) and no distortion.
        warnings: a list to append to, one line each, what
            :func:`relperception.core_types.check_intrinsics` finds suspect but possible (a
            principal point far from the image centre: K of another image size?); None: not
            reported. The camera is returned all the same.

    Raises:
        ValueError: for an all-zero or malformed K (the "uncalibrated" CameraInfo), a zero image
            size, a camera matrix :func:`relperception.core_types.check_intrinsics` finds
            impossible (a principal point outside the image, a field of view, fx / fy or skew
            no lens gives), a region of interest outside the image, a
            distortion model that is not handled
            (:data:`relperception.core_types.DISTORTION_MODELS`) or a distortion vector whose
            length does not fit the model.
    """
    width, height = int(msg.width), int(msg.height)
    if width <= 0 or height <= 0:
        raise ValueError(f'CameraInfo has no image size ({width}x{height}); is it calibrated?')
    if rectified:
        p = np.asarray(msg.p, dtype=np.float64).reshape(-1)
        if p.shape != (12,) or not np.any(p):
            raise ValueError('rectified input needs CameraInfo.p (12 values, not all zero)')
        k = p.reshape(3, 4)[:, :3].reshape(-1)
    else:
        k = np.asarray(msg.k, dtype=np.float64).reshape(-1)
    if k.shape != (9,):
        raise ValueError(f'CameraInfo.k must have 9 values, got {k.shape[0]}')
    if not np.any(k):
        p = np.asarray(getattr(msg, 'p', ()), dtype=np.float64).reshape(-1)
        hint = (': its p is set, so if the images are rectified (image_rect) use '
                'rectified_input (eval --rectified-input, the rectified_input parameter)'
                if p.shape == (12,) and np.any(p) else ': the camera is not calibrated')
        raise ValueError(f'CameraInfo.k is all zeros{hint}')
    K = k.reshape(3, 3)
    if not (np.isfinite(K).all() and K[0, 0] > 0 and K[1, 1] > 0):
        raise ValueError(f'CameraInfo camera matrix is singular or not finite: {K.tolist()}')
    problems = check_intrinsics(K, width, height)
    impossible = [p.message for p in problems if p.impossible]
    if impossible:
        raise ValueError('CameraInfo K ' + '; '.join(impossible))
    if warnings is not None:
        warnings.extend(f'CameraInfo K {p.message}' for p in problems)
    K, width, height = _binned_roi_camera(msg, K, width, height)
    if rectified:
        return Camera(K=K, width=width, height=height)
    model = str(msg.distortion_model or 'plumb_bob')
    if model not in DISTORTION_MODELS:
        raise ValueError(f'distortion model {model!r} is not handled; use one of '
                         f'{sorted(DISTORTION_MODELS)}, or rectified images with '
                         'rectified_input')
    d = np.asarray(msg.d, dtype=np.float64).reshape(-1)
    if d.size == 0:
        d = np.zeros(DISTORTION_MODELS[model])
    # Camera refuses a K that is not [[fx, s, cx], [0, fy, cy], [0, 0, 1]], non-finite
    # coefficients and a count the model does not take
    return Camera(K=K, width=width, height=height, distortion=d, distortion_model=model)


def camera_info_fields(camera: Camera) -> dict[str, object]:
    """Return the ``sensor_msgs/CameraInfo`` field values of ``camera`` (header and roi excluded).

    Keys: ``height``, ``width`` (int), ``distortion_model`` (str), ``d`` (N,) float64,
    ``k`` (9,) float64, ``r`` (9,) float64 identity, ``p`` (12,) float64 ``[K | 0]`` (a monocular
    camera), ``binning_x``, ``binning_y`` (0 = no binning).
    """
    if not isinstance(camera, Camera):
        raise TypeError(f'camera must be a relperception Camera, got {type(camera).__name__}')
    p = np.zeros((3, 4))
    p[:, :3] = camera.K
    return {
        'height': camera.height,
        'width': camera.width,
        'distortion_model': camera.distortion_model,
        'd': camera.distortion.astype(np.float64).copy(),
        'k': camera.K.reshape(-1).copy(),
        'r': np.eye(3).reshape(-1),
        'p': p.reshape(-1),
        'binning_x': 0,
        'binning_y': 0,
    }


def transform_from_pose_msg(pose) -> np.ndarray:
    """Return the (4, 4) float64 transform of a ``geometry_msgs/Pose`` (metres, xyzw quaternion).

    A ``PoseStamped``, ``PoseWithCovariance(Stamped)`` or ``nav_msgs/Odometry`` (anything with
    ``pose`` fields down to a Pose) is accepted too. For the ground-truth topic the result is
    ``T_world_cam``.

    Raises:
        ValueError: for a zero or non-finite quaternion or a non-finite position.
    """
    return _rigid_transform(pose, 'pose', ('position', 'orientation'), 'pose position')


def transform_from_transform_msg(transform) -> np.ndarray:
    """Return the (4, 4) float64 transform of a ``geometry_msgs/Transform`` (metres, xyzw).

    A ``TransformStamped`` (anything with ``transform`` fields down to a Transform) is accepted
    too; the result is ``T_parent_child`` (``header.frame_id`` <- ``child_frame_id``).

    Raises:
        ValueError: for a zero or non-finite quaternion or a non-finite translation.
    """
    return _rigid_transform(transform, 'transform', ('translation', 'rotation'),
                            'transform translation')


def _rigid_transform(msg, nested: str, fields: tuple, what: str) -> np.ndarray:
    """Return the transform of the innermost ``nested`` message holding ``fields``.

    ``fields`` are the names of its vector and its quaternion (``position``, ``orientation``
    of a Pose; ``translation``, ``rotation`` of a Transform).
    """
    vector_field, rotation_field = fields
    while not hasattr(msg, vector_field) and hasattr(msg, nested):
        msg = getattr(msg, nested)
    p, q = getattr(msg, vector_field), getattr(msg, rotation_field)
    t = np.array([p.x, p.y, p.z], dtype=np.float64)
    if not np.all(np.isfinite(t)):
        raise ValueError(f'{what} must be finite, got {t.tolist()}')
    return transform_from_quaternion_xyzw(t, [q.x, q.y, q.z, q.w])


def pose_fields(T) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(position, q_xyzw)`` of a rigid transform for a ``geometry_msgs/Pose``.

    Args:
        T: (4, 4) rigid transform, e.g. ``T_world_cam``.

    Returns:
        position (3,) float64 metres and the scalar-last unit quaternion (4,) float64.

    Raises:
        ValueError: if ``T`` is not a finite rigid transform.
    """
    T = check_transform(T, 'T')
    return T[:3, 3].copy(), quaternion_xyzw_from_transform(T)


def decode_image_message(msg, msgtype: str) -> tuple[np.ndarray, str]:
    """Return ``(array, encoding)`` of a ``sensor_msgs/Image`` or ``sensor_msgs/CompressedImage``.

    Args:
        msg: the message object (rosbags or rclpy).
        msgtype: its type name, ``sensor_msgs/msg/Image`` or ``sensor_msgs/msg/CompressedImage``
            (the ``/msg/`` part may be omitted).

    Returns:
        The decoded array, (H, W) or (H, W, C), in the dtype of the encoding, and the encoding
        of that array (for compressed images the encoding of the decoded pixels).

    Raises:
        ValueError: for another message type or an undecodable image.
    """
    name = str(msgtype).replace('/msg/', '/')
    if name == 'sensor_msgs/CompressedImage':
        from relperception.imaging.compressed import compressed_to_numpy
        array, encoding = compressed_to_numpy(msg)
        return array, encoding
    if name == 'sensor_msgs/Image':
        from relperception.imaging.image_encodings import image_to_numpy
        return image_to_numpy(msg), str(msg.encoding)
    raise ValueError(f'not an image message type: {msgtype!r}')
