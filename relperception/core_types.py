# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Core value types shared by every layer: Camera, Frame, Matches.

Conventions
-----------
* Pixel coordinates: x right, y down, the centre of the top-left pixel at (0, 0).
* Camera frame: REP 103 optical frame (z forward, x right, y down).
* Poses are 4x4 float64 homogeneous transforms named ``T_<to>_<from>``: ``T_world_cam``
  maps a point from camera coordinates into world coordinates.
* Depth is float32 metres along the optical axis (z), NaN where invalid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, NamedTuple, Optional

import numpy as np
from relperception.validation import as_rows


def _as_matrix(K) -> np.ndarray:
    # A contiguous copy: OpenCV 5's USAC estimators (findEssentialMat with USAC_MAGSAC) find
    # no model when K is a strided view, e.g. P[:, :3] of a KITTI projection matrix.
    K = np.array(K, dtype=np.float64, order='C', copy=True)
    if K.shape != (3, 3):
        raise ValueError(f'camera matrix K must have shape (3, 3), got {K.shape}')
    if not np.all(np.isfinite(K)) or K[0, 0] <= 0 or K[1, 1] <= 0:
        raise ValueError(f'camera matrix K must be finite with fx, fy > 0, got {K.tolist()}')
    if not np.array_equal(K[2], [0.0, 0.0, 1.0]) or K[1, 0] != 0.0:
        raise ValueError(f'camera matrix K must be [[fx, s, cx], [0, fy, cy], [0, 0, 1]], got '
                         f'{K.tolist()}')
    return K


def _as_size(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            and not (isinstance(value, (float, np.floating)) and float(value).is_integer()):
        raise ValueError(f'camera {name} must be a whole number of pixels, got {value!r}')
    return int(value)


#: ``sensor_msgs/CameraInfo`` distortion models handled, with their number of coefficients:
#: ``plumb_bob`` and ``rational_polynomial`` are OpenCV's standard model (k1 k2 p1 p2 k3
#: [k4 k5 k6]); ``equidistant`` is OpenCV's fisheye model (k1 k2 k3 k4).
DISTORTION_MODELS = {'plumb_bob': 5, 'rational_polynomial': 8, 'equidistant': 4}
#: Coefficient counts each model accepts: OpenCV reads 4, 5, 8, 12 or 14 under ``plumb_bob``
#: (camera_calibration writes them so); a zero vector of any such count means no distortion.
DISTORTION_COEFFICIENT_COUNTS = {'plumb_bob': (4, 5, 8, 12, 14), 'rational_polynomial': (8,),
                                 'equidistant': (4,)}
#: Models OpenCV handles with its fisheye functions; not a pinhole even with every coefficient
#: zero (equidistant: image radius f * theta).
FISHEYE_MODELS = ('equidistant',)


#: Fields of view (degrees, across the image) a camera matrix may give; outside them the focal
#: length is off by orders of magnitude (e.g. in metres, or a placeholder).
FIELD_OF_VIEW_RANGE_DEG = (0.1, 179.0)
#: Largest focal-length ratio fx / fy (or fy / fx), and largest skew as a share of fx.
MAX_FOCAL_ASPECT = 4.0
MAX_SKEW_RATIO = 0.1
#: Farthest the principal point may lie from the image centre, as a share of the image width
#: (for cx) and height (for cy), before the intrinsics are taken to be those of another image
#: size: a K of images twice as large puts it near the edge (half the size away), one of
#: images half as large a quarter of the size away; a calibrated lens puts it near the centre.
MAX_PRINCIPAL_POINT_OFFSET = 0.2
#: Image-size factors (K's size over the images') that :func:`check_intrinsics` names when the
#: principal point fits one of them (a downscaled or upscaled copy of the calibrated images).
IMAGE_SIZE_FACTORS = (4.0, 2.0, 0.5, 0.25)
#: Relative tolerance on those factors (the principal point of a lens is off the centre).
_SIZE_FACTOR_TOLERANCE = 0.15


class IntrinsicsProblem(NamedTuple):
    """One problem :func:`check_intrinsics` found.

    Attributes:
        message: what is wrong, as a predicate the caller puts its subject before (``'K '``,
            ``'--intrinsics '``, ``'CameraInfo K '``): e.g. ``'puts the principal point at
            (607.2, 185.2) px, ...'``; one line.
        impossible: True when no calibration of such images gives it (the caller refuses);
            False when a real camera could give it but it more likely is a mistake (the
            caller warns and goes on).
    """

    message: str
    impossible: bool


def _other_size_hint(K: np.ndarray, width: int, height: int) -> str:
    """Name the image size the principal point of ``K`` fits (it is about half the size)."""
    implied_w, implied_h = 2.0 * K[0, 2] + 1.0, 2.0 * K[1, 2] + 1.0
    for factor in IMAGE_SIZE_FACTORS:
        if abs(implied_w / (factor * width) - 1.0) <= _SIZE_FACTOR_TOLERANCE and \
                abs(implied_h / (factor * height) - 1.0) <= _SIZE_FACTOR_TOLERANCE:
            return (f'intrinsics for {round(factor * width)}x{round(factor * height)} used on '
                    f'{width}x{height} images? Scale fx, fy, cx, cy by {1.0 / factor:g} to the '
                    'images as stored')
    return (f'intrinsics for another image size (about {implied_w:.0f}x{implied_h:.0f})? Give '
            'the K of the images as stored')


def check_intrinsics(K, width: int, height: int) -> List[IntrinsicsProblem]:
    """Return what makes a camera matrix implausible for images of ``width`` x ``height``.

    The one plausibility check of intrinsics (``CameraInfo``, ``convert --intrinsics``, the K
    of ``eval-pairs``); the caller decides whether to refuse or to warn. Impossible: a
    principal point outside the image, a field of view outside
    :data:`FIELD_OF_VIEW_RANGE_DEG` (a focal length in other units than pixels), fx / fy
    beyond :data:`MAX_FOCAL_ASPECT`, a skew beyond :data:`MAX_SKEW_RATIO` of fx. Suspect: a
    principal point farther than :data:`MAX_PRINCIPAL_POINT_OFFSET` of the image size from
    its centre (the K of a larger or smaller copy of the images); the message names the size
    that fits when one of :data:`IMAGE_SIZE_FACTORS` does.

    Args:
        K: (3, 3) camera matrix in pixels, finite, fx, fy > 0.
        width: image width in pixels (> 0).
        height: image height in pixels (> 0).

    Returns:
        the problems found (empty: plausible), impossible ones first.

    Raises:
        ValueError: K not a finite (3, 3) matrix with fx, fy > 0, or a size that is not > 0.
    """
    K = np.asarray(K, dtype=np.float64)
    if K.shape != (3, 3) or not np.isfinite(K).all() or K[0, 0] <= 0 or K[1, 1] <= 0:
        raise ValueError(f'K must be a finite (3, 3) camera matrix with fx, fy > 0, got '
                         f'{K.tolist()}')
    width, height = int(width), int(height)
    if width <= 0 or height <= 0:
        raise ValueError(f'image size must be > 0, got {width}x{height}')
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    problems = []
    where = f'the principal point at ({cx:g}, {cy:g}) px'
    if not (0.0 <= cx <= width and 0.0 <= cy <= height):
        problems.append(IntrinsicsProblem(
            f'puts {where}, outside the {width}x{height} image: '
            f'{_other_size_hint(K, width, height)}', True))
    low, high = FIELD_OF_VIEW_RANGE_DEG
    for name, size, focal in (('horizontal', width, fx), ('vertical', height, fy)):
        fov_deg = float(np.degrees(2.0 * np.arctan2(size / 2.0, focal)))
        if not low <= fov_deg <= high:
            problems.append(IntrinsicsProblem(
                f'has a focal length of {focal:g} px, a {name} field of view of {fov_deg:.3g} '
                f'deg over {size} px, outside [{low:g}, {high:g}] deg: is it in pixels?', True))
    aspect = fx / fy
    if not 1.0 / MAX_FOCAL_ASPECT <= aspect <= MAX_FOCAL_ASPECT:
        problems.append(IntrinsicsProblem(
            f'has fx / fy = {aspect:.3g}, outside [{1.0 / MAX_FOCAL_ASPECT:g}, '
            f'{MAX_FOCAL_ASPECT:g}]', True))
    if abs(K[0, 1]) > MAX_SKEW_RATIO * fx:
        problems.append(IntrinsicsProblem(
            f'has a skew of {K[0, 1]:g} px, more than {MAX_SKEW_RATIO:g} of fx ({fx:g} px)',
            True))
    if problems:
        return problems
    offset_x = (cx - (width - 1) / 2.0) / width
    offset_y = (cy - (height - 1) / 2.0) / height
    if max(abs(offset_x), abs(offset_y)) > MAX_PRINCIPAL_POINT_OFFSET:
        problems.append(IntrinsicsProblem(
            f'puts {where}, {abs(offset_x):.0%} of the width and {abs(offset_y):.0%} of the '
            f'height from the centre of the {width}x{height} image (more than '
            f'{MAX_PRINCIPAL_POINT_OFFSET:.0%}): {_other_size_hint(K, width, height)}', False))
    return problems


@dataclass(frozen=True)
class Camera:
    """Pinhole camera intrinsics.

    Attributes:
        K: (3, 3) float64 camera matrix in pixels.
        width: image width in pixels.
        height: image height in pixels.
        distortion: (N,) float64 distortion coefficients (``plumb_bob``: k1 k2 p1 p2 k3).
        distortion_model: ``sensor_msgs/CameraInfo`` distortion model name, one of
            :data:`DISTORTION_MODELS`.
    """

    K: np.ndarray
    width: int
    height: int
    distortion: np.ndarray = field(default_factory=lambda: np.zeros(5))
    distortion_model: str = 'plumb_bob'

    def __post_init__(self):
        object.__setattr__(self, 'K', _as_matrix(self.K))
        object.__setattr__(self, 'distortion',
                           np.array(self.distortion, dtype=np.float64).reshape(-1))
        width, height = _as_size(self.width, 'width'), _as_size(self.height, 'height')
        if width <= 0 or height <= 0:
            raise ValueError(f'camera size must be positive, got {width}x{height}')
        object.__setattr__(self, 'width', width)
        object.__setattr__(self, 'height', height)
        if not isinstance(self.distortion_model, str) \
                or self.distortion_model not in DISTORTION_MODELS:
            raise ValueError(f'distortion model {self.distortion_model!r} is not handled; use '
                             f'one of {sorted(DISTORTION_MODELS)} (or rectified images)')
        if not np.all(np.isfinite(self.distortion)):
            raise ValueError('distortion coefficients must be finite')
        counts = DISTORTION_COEFFICIENT_COUNTS[self.distortion_model]
        if self.distortion.size not in counts:
            raise ValueError(f'the {self.distortion_model} model needs '
                             f'{" or ".join(map(str, counts))} coefficients, got '
                             f'{self.distortion.size}')

    @classmethod
    def from_intrinsics(cls, fx: float, fy: float, cx: float, cy: float,
                        width: int, height: int) -> 'Camera':
        """Build an undistorted camera from focal lengths and principal point (pixels)."""
        K = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
        return cls(K=K, width=width, height=height)

    @property
    def fx(self) -> float:
        return float(self.K[0, 0])

    @property
    def fy(self) -> float:
        return float(self.K[1, 1])

    @property
    def cx(self) -> float:
        return float(self.K[0, 2])

    @property
    def cy(self) -> float:
        return float(self.K[1, 2])

    @property
    def has_distortion(self) -> bool:
        """Whether pixels differ from the ideal pinhole of ``K``.

        They do with nonzero coefficients, or with a fisheye model (whose image radius is
        ``f * theta`` even with every coefficient 0).
        """
        return self.distortion_model in FISHEYE_MODELS or bool(np.any(self.distortion != 0.0))

    def scaled(self, scale: float) -> 'Camera':
        """Return the camera for an image resized by ``scale`` (pixel-centre convention)."""
        if not scale > 0:
            raise ValueError(f'scale must be > 0, got {scale}')
        K = self.K.copy()
        K[0, 0] *= scale
        K[1, 1] *= scale
        K[0, 2] = (K[0, 2] + 0.5) * scale - 0.5
        K[1, 2] = (K[1, 2] + 0.5) * scale - 0.5
        return Camera(K=K, width=round(self.width * scale), height=round(self.height * scale),
                      distortion=self.distortion, distortion_model=self.distortion_model)


@dataclass
class Frame:
    """One camera frame as the core sees it.

    Attributes:
        image: (H, W) uint8 grey or (H, W, 3) uint8 RGB.
        stamp_ns: acquisition time in integer nanoseconds (the message header stamp).
        camera: intrinsics of ``image``.
        depth: optional (H, W) float32 metric depth registered to ``image``, NaN where invalid.
    """

    image: np.ndarray
    stamp_ns: int
    camera: Camera
    depth: Optional[np.ndarray] = None

    def __post_init__(self):
        if not isinstance(self.image, np.ndarray) or self.image.dtype != np.uint8:
            raise ValueError('Frame.image must be a uint8 numpy array')
        if self.image.ndim not in (2, 3) or (self.image.ndim == 3 and self.image.shape[2] != 3):
            raise ValueError(f'Frame.image must be (H, W) or (H, W, 3), got {self.image.shape}')
        if not isinstance(self.camera, Camera):
            raise ValueError(f'Frame.camera must be a Camera, got {type(self.camera).__name__}')
        h, w = self.image.shape[:2]
        if (w, h) != (self.camera.width, self.camera.height):
            raise ValueError(f'image is {w}x{h} but camera_info says '
                             f'{self.camera.width}x{self.camera.height}')
        if self.depth is not None:
            if not isinstance(self.depth, np.ndarray) or self.depth.shape != (h, w):
                raise ValueError(f'depth {getattr(self.depth, "shape", self.depth)} does not '
                                 f'match image {(h, w)}')
            if not np.issubdtype(self.depth.dtype, np.floating):
                raise ValueError(f'Frame.depth must be floating-point metres, got '
                                 f'{self.depth.dtype} (convert millimetre images with '
                                 'imaging.depth_to_metres)')
            self.depth = np.asarray(self.depth, dtype=np.float32)
        if isinstance(self.stamp_ns, bool) or not isinstance(self.stamp_ns,
                                                             (int, np.integer)):
            raise ValueError(f'Frame.stamp_ns must be integer nanoseconds, got '
                             f'{self.stamp_ns!r}')
        self.stamp_ns = int(self.stamp_ns)

    @property
    def gray(self) -> np.ndarray:
        """(H, W) uint8 grey image (luma of RGB)."""
        if self.image.ndim == 2:
            return self.image
        import cv2
        return cv2.cvtColor(self.image, cv2.COLOR_RGB2GRAY)


@dataclass(frozen=True)
class Matches:
    """Correspondences between image 0 and image 1; every matcher returns this type.

    Attributes:
        keypoints0: (N, 2) float32 pixel coordinates (x, y) in image 0.
        keypoints1: (N, 2) float32 pixel coordinates (x, y) in image 1.
        confidence: (N,) float32 match confidence in [0, 1].
    """

    keypoints0: np.ndarray
    keypoints1: np.ndarray
    confidence: np.ndarray

    def __post_init__(self):
        k0 = as_rows('keypoints0', self.keypoints0, 2, np.float32)
        k1 = as_rows('keypoints1', self.keypoints1, 2, np.float32)
        conf = np.asarray(self.confidence, dtype=np.float32).reshape(-1)
        if not (len(k0) == len(k1) == len(conf)):
            raise ValueError(f'keypoints0 ({len(k0)}), keypoints1 ({len(k1)}) and confidence '
                             f'({len(conf)}) must have the same length')
        object.__setattr__(self, 'keypoints0', k0)
        object.__setattr__(self, 'keypoints1', k1)
        object.__setattr__(self, 'confidence', conf)

    def __len__(self) -> int:
        return len(self.keypoints0)

    @classmethod
    def empty(cls) -> 'Matches':
        """Return a result with no correspondences."""
        return cls(np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32),
                   np.zeros((0,), np.float32))

    def select(self, mask_or_index) -> 'Matches':
        """Return the subset chosen by a boolean mask or an index array."""
        return Matches(self.keypoints0[mask_or_index], self.keypoints1[mask_or_index],
                       self.confidence[mask_or_index])

    def swapped(self) -> 'Matches':
        """Return the same correspondences seen from image 1 to image 0."""
        return Matches(self.keypoints1, self.keypoints0, self.confidence)
