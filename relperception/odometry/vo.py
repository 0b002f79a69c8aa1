# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Frame-to-keyframe visual odometry for RGB-D and monocular cameras, with recovery.

:class:`VisualOdometry` takes one :class:`~relperception.core_types.Frame` at a time and returns a
:class:`VOResult` with ``T_world_cam``, where *world* is the camera frame of the first frame
that initialised the tracker (identity there).

Estimation (keyframe ``kf`` -> current frame ``cur``; any :class:`Matcher` gives the matches):

* **RGB-D** (``mode`` 'rgbd', or 'auto' when the keyframe has depth): the matched keyframe
  pixels are back-projected with the keyframe depth (nearest pixel, inside
  ``[min_depth_m, max_depth_m]``) and ``cv2.solvePnPRansac`` gives the metric ``T_cur_kf``.
* **Monocular** (otherwise): essential matrix + ``recoverPose`` give the rotation and the
  translation direction. The metric scale comes, in this order, from

  1. depth, whenever the keyframe (else the current frame) has some: inliers are triangulated
     with the unit-norm translation and the scale is the median of measured / triangulated
     depth;
  2. ``translation_norm_m`` passed to :meth:`VisualOdometry.step` (wheel odometry, or ground
     truth in benchmarks): the distance travelled since the previous call; hints of frames
     that did not become keyframes are summed;
  3. constant speed: the last keyframe-to-keyframe speed (translation norm / time) times the
     time the camera moved since the keyframe (the previous step's norm when stamps do not
     increase): after a frame seen static at the keyframe's pose, the time since that frame,
     stretched by the share of the flow it already showed (a stop is no travel time, a slow
     motion whose flow stayed below ``keyframe_min_parallax_px`` for a while is); this
     keeps the scale of the first pair, it does not observe it. Before any scale is known
     (first pair of a pure monocular run) the translation keeps unit norm, i.e. the
     trajectory is defined up to that scale.

Keyframes: the median flow (pixels) of the matches between keyframe and current frame is the
parallax measure. Below ``keyframe_min_parallax_px`` the camera is considered static: in
monocular mode the essential matrix is *not* estimated (it is degenerate) and the pose and the
keyframe are kept; in RGB-D mode the pose is still estimated by PnP against the kept keyframe
(no drift while static). In RGB-D mode with ``rgbd_keyframe_tracking`` a moving frame becomes
the keyframe only when one is due (the flow or the tracked share, ``_rgbd_keyframe_due``), so
frames are tracked against the keyframe and errors do not add up frame by frame; a frame
without valid depth never becomes
the keyframe (it could not anchor the next PnP). Otherwise (monocular two-view steps) the
current frame becomes the keyframe.

Motion prior (``use_motion_prior``): constant velocity. The last frame-to-frame motion, scaled
to the elapsed time, predicts ``T_cur_kf``; the matcher gets a ``predict`` callable that maps
keyframe pixels to their expected position in the current image, by back-projection with the
keyframe depth (RGB-D) or by the infinite homography ``K R K^-1`` (rotation only, monocular).
NaN is returned where the depth is unknown. No prediction is made before the first motion is
known or when the gap is more than six times the last frame interval (a run of up to five
dropped frames is still predicted: without a prediction the matcher searches around the
keyframe's pixels, and the flow of the gap lost the map).

Recovery: when matching or the pose estimate fails (fewer than ``min_matches`` matches or
inliers, RANSAC failure, non-finite pose, matcher error) the result is ``'lost'`` with a
``message`` and the last good pose is held (no extrapolation). On the next frame the tracker
first tries to relocalise against the last keyframe (its pose is still valid, so the
trajectory stays continuous) and, if that keyframe came from a re-initialisation and was never
tracked against, against the last keyframe that was; if that fails and the frame has texture
(at least ``min_matches`` Shi-Tomasi corners), the frame becomes the new keyframe at the held
pose. Both are reported as ``'reinitialized'`` (the first good pose after a loss). The same
fallback to the confirmed keyframe is tried whenever tracking against an unconfirmed one
fails. A frame whose size or intrinsics differ from the keyframe's re-initialises
the same way. Bad data never raise; only wrong argument types raise ``ValueError``.

The pose-from-matches step (mode choice, PnP / essential matrix, monocular scale, inlier
checks) is :func:`estimate_pose_from_matches`. Monocular frames without depth or a translation
hint are tracked against the local map of :mod:`relperception.odometry.map_tracker` (PnP
against triangulated points, bundle adjustment), which carries the scale; ``mono_map: false``
gives the two-view steps described above instead. With ``rgbd_map: true`` (experimental, off
by default) RGB-D frames are tracked against a map of depth points the same way (bundle
adjustment with depth residuals); the PnP on the keyframe's depth then starts that map and
takes over whenever map tracking fails.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import logging
import numbers
import time
import typing

import cv2
import numpy as np

from relperception.config import SPECS
from relperception.core_types import Camera, Frame, Matches
from relperception.matching.image_cache import frozen_copy
from relperception.odometry import covariance, geometry
from relperception.odometry.map_tracker import MapInit, MapTrack, MapTracker
from relperception.transforms import invert_transform, make_transform

logger = logging.getLogger(__name__)

STATUS_INITIALIZED = 'initialized'
STATUS_TRACKING = 'tracking'
STATUS_LOST = 'lost'
STATUS_REINITIALIZED = 'reinitialized'
#: Every :attr:`VOResult.status`.
TRACKING_STATES = (STATUS_INITIALIZED, STATUS_TRACKING, STATUS_LOST, STATUS_REINITIALIZED)

MODES = ('auto', 'rgbd', 'mono')

#: Where the length of a frame's translation came from (``VOResult.scale_source``).
SCALE_SOURCES = ('map', 'hinted_map', 'depth_map', 'depth', 'translation_norm_m',
                 'previous map', 'constant speed', 'unit', 'static')
#: The scale sources of frames tracked against the local map (monocular, RGB-D).
MAP_SCALE_SOURCES = ('map', 'hinted_map', 'depth_map')
#: The scale sources that give metres; the others (a monocular map's parallax unit, constant
#: speed, unit length) make the translation covariance large
#: (:data:`relperception.odometry.covariance.NON_METRIC_SIGMA_M`).
METRIC_SCALE_SOURCES = ('depth_map', 'hinted_map', 'depth', 'translation_norm_m')
#: Standard deviations (rad, m) added to the held pose when tracking restarts after a loss
#: (the motion while lost is unknown), and of a step whose geometry gives no covariance.
UNKNOWN_MOTION_SIGMA_RAD = 0.1
UNKNOWN_MOTION_SIGMA_M = 1.0

#: Largest ratio (gap / last frame interval) the constant-velocity prior is extrapolated over.
_MAX_PRIOR_EXTRAPOLATION = 6.0
#: Fewest depth-vs-triangulation pairs for a monocular scale from depth.
_MIN_SCALE_SAMPLES = 5

#: Keypoint predictor handed to the matcher: (N, 2) float32 pixels -> (N, 2) float32, NaN unknown.
Predictor = collections.abc.Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass
class VOResult:
    """Output of one :meth:`VisualOdometry.step`.

    Attributes:
        stamp_ns: stamp of the frame (integer nanoseconds).
        T_world_cam: (4, 4) float64 pose of the camera in the world (first camera) frame.
        status: 'initialized' | 'tracking' | 'lost' | 'reinitialized'.
        num_matches: number of matches the matcher returned (keyframe -> frame).
        num_inliers: matches consistent with the estimated motion.
        is_keyframe: whether the frame became the new keyframe.
        matches: the matches keyframe -> frame (all of them, see ``inlier_mask``).
        message: why the frame is lost, or how it was (re)initialised / scaled.
        inlier_mask: (num_matches,) bool inliers of ``matches`` (added field; None if unknown).
        mode: estimator used for this frame: 'rgbd', 'mono' or '' (none).
        scale_source: one of :data:`SCALE_SOURCES` (where the translation length came from),
            '' when no pose was estimated.
        keyframe_stamp_ns: stamp of the keyframe ``matches`` were computed against (their
            ``keypoints0`` lie in it); None when there are none.
        pose_covariance: (6, 6) covariance of ``T_world_cam`` (left perturbation in the world
            frame, rotation in rad first, then translation in m; see
            :mod:`relperception.odometry.covariance`): reprojection residuals of each
            keyframe step, chained along the keyframes; large in translation while the scale
            is not metric.
        motion_covariance: (6, 6) covariance of the motion since the previous good frame,
            ``inv(T_world_prev) @ T_world_cam`` (left perturbation in the previous camera
            frame); the two frames' steps from their keyframe are taken as independent, which
            overestimates it. For velocities (twist).
    """

    stamp_ns: int
    T_world_cam: np.ndarray
    status: str
    num_matches: int = 0
    num_inliers: int = 0
    is_keyframe: bool = False
    matches: Matches = dataclasses.field(default_factory=Matches.empty)
    message: str = ''
    inlier_mask: np.ndarray | None = None
    mode: str = ''
    scale_source: str = ''
    keyframe_stamp_ns: int | None = None
    pose_covariance: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((6, 6)))
    motion_covariance: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros((6, 6)))


@dataclasses.dataclass
class _Keyframe:
    gray: np.ndarray
    depth: np.ndarray | None
    camera: Camera
    T_world_cam: np.ndarray
    stamp_ns: int
    map_keyframe: object = None   # MapKeyframe of the local map, when it has one
    pose_covariance: np.ndarray = dataclasses.field(  # of T_world_cam (see VOResult)
        default_factory=lambda: np.zeros((6, 6)))
    first_inliers: int | None = None   # inliers of the first frame tracked against it


@dataclasses.dataclass
class _Estimate:
    T_world_cam: np.ndarray
    matches: Matches
    inlier_mask: np.ndarray
    is_keyframe: bool
    mode: str
    message: str
    scale_source: str = ''
    map_step: MapTrack | MapInit | None = None


@dataclasses.dataclass
class _Failure:
    message: str
    matches: Matches = dataclasses.field(default_factory=Matches.empty)
    mode: str = ''


def _same_camera(camera0: Camera, camera1: Camera) -> bool:
    return ((camera0.width, camera0.height) == (camera1.width, camera1.height)
            and np.allclose(camera0.K, camera1.K)
            and np.array_equal(camera0.distortion, camera1.distortion))


def _on_map_points(local_map, reference, keypoints0: np.ndarray) -> np.ndarray:
    """Return (N,) bool: which keypoints (N, 2) of ``reference`` carry a map point."""
    return local_map.lookup(reference, keypoints0) >= 0


def _median_flow(keypoints0: np.ndarray, keypoints1: np.ndarray) -> float:
    """Return the median length (px) of the finite matches' flow (N, 2) -> (N, 2), NaN without."""
    flow = np.linalg.norm(keypoints1 - keypoints0, axis=1)
    flow = flow[np.isfinite(flow)]
    return float(np.median(flow)) if len(flow) else float('nan')


def _scale_motion(T_cam1_cam0: np.ndarray, ratio: float) -> np.ndarray:
    """Return the motion ``T_cam1_cam0`` (4, 4) scaled in time by ``ratio`` (rotation vector)."""
    rotvec = cv2.Rodrigues(np.ascontiguousarray(T_cam1_cam0[:3, :3]))[0] * ratio
    return make_transform(cv2.Rodrigues(rotvec)[0], T_cam1_cam0[:3, 3] * ratio)


#: The local map's numeric settings (``odometry.<key>`` in :mod:`relperception.config`).
_MAP_NUMBERS = ('map_init_min_angle_deg', 'map_init_max_homography_ratio', 'map_min_angle_deg',
                'keyframe_min_angle_deg', 'keyframe_min_tracked_ratio', 'keyframe_max_flow_ratio',
                'ba_window_keyframes', 'ba_max_iterations', 'ba_max_points', 'depth_sigma_rel',
                'hint_sigma_rel')

#: Defaults of the 'odometry.*' configuration (``VisualOdometry``).
ODOMETRY_DEFAULT_CONF: dict = {
    'mode': 'auto',                  # 'auto' | 'rgbd' | 'mono'
    'min_matches': 30,               # fewest matches and inliers to accept a pose
    'ransac_threshold_px': 1.0,      # RANSAC threshold (epipolar distance / reprojection)
    'ransac_confidence': 0.999,
    'keyframe_min_parallax_px': 1.0,  # median flow below which the camera is static
    'min_depth_m': 0.1,              # depth outside [min, max] is treated as invalid
    'max_depth_m': 40.0,
    'use_motion_prior': True,        # constant-velocity prediction handed to the matcher
    'mono_map': True,                # monocular local map (map_tracker.py), else 2-view steps
    'rgbd_keyframe_tracking': False,  # RGB-D: keep the keyframe until one is due
    'rgbd_map': False,               # RGB-D local map with depth residuals, else PnP on the kf
    'hint_map': False,               # mono + translation hints: a metric local map, else 2-view
    # The local map's numbers: defaults, bounds and meanings in the schema.
    **{key: SPECS[f'odometry.{key}'].default for key in _MAP_NUMBERS},
}

#: Fallback for the monocular scale: () -> (translation norm in metres, where it came from).
ScaleFallback = collections.abc.Callable[[], tuple[float, str]]


def check_odometry_conf(conf: dict | None,
                        default_conf: dict | None = None) -> dict:
    """Return ``conf`` merged over the odometry defaults, validated and normalised.

    Args:
        conf: overrides (keys of :data:`ODOMETRY_DEFAULT_CONF`, without the ``odometry.``
            prefix), or None.
        default_conf: the defaults to merge over (default :data:`ODOMETRY_DEFAULT_CONF`).

    Returns:
        A new dict with every key; numbers converted to ``int`` / ``float``.

    Raises:
        ValueError: unknown keys or invalid values.
    """
    default_conf = ODOMETRY_DEFAULT_CONF if default_conf is None else default_conf
    conf = dict(conf or {})
    unknown = sorted(set(conf) - set(default_conf))
    if unknown:
        raise ValueError(f'unknown odometry configuration keys: {unknown}; '
                         f'known: {sorted(default_conf)}')
    merged = {**default_conf, **conf}
    if merged['mode'] not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {merged['mode']!r}")
    min_matches = merged['min_matches']
    if isinstance(min_matches, bool) or not isinstance(min_matches, numbers.Integral) \
            or min_matches < 5:
        raise ValueError(f'min_matches must be an integer >= 5, got {min_matches!r}')
    merged['min_matches'] = int(min_matches)
    for key in ('ransac_threshold_px', 'ransac_confidence', 'keyframe_min_parallax_px',
                'min_depth_m', 'max_depth_m'):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not np.isfinite(value):
            raise ValueError(f'{key} must be a finite number, got {value!r}')
        merged[key] = float(value)
    if merged['ransac_threshold_px'] <= 0:
        raise ValueError('ransac_threshold_px must be > 0')
    if not 0.0 < merged['ransac_confidence'] < 1.0:
        raise ValueError('ransac_confidence must be in (0, 1)')
    if merged['keyframe_min_parallax_px'] < 0:
        raise ValueError('keyframe_min_parallax_px must be >= 0')
    if not 0.0 <= merged['min_depth_m'] < merged['max_depth_m']:
        raise ValueError('need 0 <= min_depth_m < max_depth_m')
    for key in ('use_motion_prior', 'mono_map', 'rgbd_map', 'rgbd_keyframe_tracking',
                'hint_map'):
        if not isinstance(merged[key], (bool, np.bool_)):
            raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
                f'{key} must be a bool, got {merged[key]!r}')
        merged[key] = bool(merged[key])
    for key in _MAP_NUMBERS:
        value = merged[key]
        if isinstance(value, numbers.Real) and not np.isfinite(value):
            raise ValueError(f'{key} must be finite, got {value!r}')
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            value = int(value)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            value = float(value)
        merged[key] = SPECS[f'odometry.{key}'].validate(value)
    return merged


def sanitize_depth(depth: np.ndarray | None, conf: dict) -> np.ndarray | None:
    """Return a copy of ``depth`` with values outside the configured range set to NaN.

    Args:
        depth: (H, W) float depth in metres (NaN invalid), or None.
        conf: validated odometry configuration (``min_depth_m``, ``max_depth_m``,
            ``min_matches``).

    Returns:
        (H, W) float32 metres, or None when ``depth`` is None or has fewer than
        ``min_matches`` valid pixels.
    """
    if depth is None:
        return None
    depth = np.array(depth, dtype=np.float32, copy=True)
    with np.errstate(invalid='ignore'):
        invalid = ~((depth >= conf['min_depth_m']) & (depth <= conf['max_depth_m']))
    depth[invalid] = np.nan
    if depth.size - np.count_nonzero(invalid) < conf['min_matches']:
        return None
    return depth


def estimator_mode(conf: dict, has_depth0: bool) -> str | None:
    """Return the estimator for a pair: 'rgbd', 'mono', or None ('rgbd' asked, no depth).

    Args:
        conf: validated odometry configuration (``mode``).
        has_depth0: whether the older frame has valid depth.

    Returns:
        'rgbd' (PnP with the older frame's depth), 'mono' (essential matrix) or None.
    """
    if conf['mode'] == 'rgbd' and not has_depth0:
        return None
    return 'rgbd' if conf['mode'] != 'mono' and has_depth0 else 'mono'


@dataclasses.dataclass
class PoseEstimate:
    """Relative pose between two frames estimated from their matches.

    Attributes:
        T_cam1_cam0: (4, 4) float64 metric transform from the older camera (0) to the newer
            (1); None when the monocular pair is static (the pose is to be kept exactly).
        inlier_mask: (N,) bool inliers of the matches.
        moving: whether the median flow reaches ``keyframe_min_parallax_px``.
        mode: 'rgbd' or 'mono'.
        message: how the pose was found (estimator, flow, scale source).
        scale_source: one of :data:`SCALE_SOURCES`.
    """

    T_cam1_cam0: np.ndarray | None
    inlier_mask: np.ndarray
    moving: bool
    mode: str
    message: str
    scale_source: str = ''

    @property
    def num_inliers(self) -> int:
        """Number of inliers."""
        return int(np.count_nonzero(self.inlier_mask))


@dataclasses.dataclass
class PoseFailure:
    """Why no relative pose could be estimated (``message``) and with which estimator."""

    message: str
    mode: str = ''


def _depth_scale(points0: np.ndarray, points1: np.ndarray, T_unit: np.ndarray,
                 camera0: Camera, camera1: Camera, depth0: np.ndarray | None,
                 depth1: np.ndarray | None) -> tuple[float, str] | None:
    """Return the monocular scale from measured / triangulated depth, or None."""
    if depth0 is None and depth1 is None:
        return None
    X0 = geometry.triangulate(points0, points1, T_unit, camera1)
    if depth0 is not None:
        z_triangulated = X0[:, 2]
        z_measured = geometry.backproject(points0, depth0, camera0)[:, 2]
        source = 'keyframe depth'
    else:
        z_triangulated = (X0 @ T_unit[:3, :3].T + T_unit[:3, 3])[:, 2]
        z_measured = geometry.backproject(points1, depth1, camera1)[:, 2]
        source = 'frame depth'
    valid = np.isfinite(z_triangulated) & np.isfinite(z_measured) & (z_triangulated > 0)
    if np.count_nonzero(valid) >= _MIN_SCALE_SAMPLES:
        scale = float(np.median(z_measured[valid] / z_triangulated[valid]))
        if np.isfinite(scale) and scale > 0:
            return scale, f'{source} ({np.count_nonzero(valid)} points)'
    return None


def _unit_scale() -> tuple[float, str]:
    return 1.0, 'nothing (unit translation, arbitrary scale)'


def scale_source_kind(source: str) -> str:
    """Return the :data:`SCALE_SOURCES` entry of a scale description such as 'frame depth'."""
    if 'depth' in source:
        return 'depth'
    if source.startswith('translation_norm_m'):
        return 'translation_norm_m'
    if source.startswith(('constant speed', 'previous step')):
        return 'constant speed'
    return 'unit'


#: Largest translation hint (metres between two frames) taken; a larger one is no camera's step
#: (1 km/s at 10 Hz) but a unit or glitch error, and is ignored (logged).
MAX_TRANSLATION_NORM_M = 100.0


def check_translation_norm(translation_norm_m) -> float | None:
    """Return the external scale hint as a float, or None when absent or unusable.

    Args:
        translation_norm_m: metres travelled between the two frames (e.g. wheel odometry or
            ground truth in benchmarks), or None. NaN, negative values and values above
            :data:`MAX_TRANSLATION_NORM_M` are ignored (logged).

    Raises:
        ValueError: for a value that is not a number (booleans included).
    """
    if translation_norm_m is None:
        return None
    if isinstance(translation_norm_m, bool) or not isinstance(translation_norm_m, numbers.Real):
        raise ValueError('translation_norm_m must be a number or None, '
                         f'got {translation_norm_m!r}')
    translation_norm_m = float(translation_norm_m)
    if not (np.isfinite(translation_norm_m) and 0 <= translation_norm_m
            <= MAX_TRANSLATION_NORM_M):
        logger.warning('ignoring translation_norm_m=%s (a step between frames is in [0, %g] m)',
                       translation_norm_m, MAX_TRANSLATION_NORM_M)
        return None
    return translation_norm_m


def estimate_pose_from_matches(matches: Matches, camera0: Camera, camera1: Camera, conf: dict,
                               depth0: np.ndarray | None = None,
                               depth1: np.ndarray | None = None,
                               scale_fallback: ScaleFallback | None = None
                               ) -> PoseEstimate | PoseFailure:
    """Estimate the motion ``T_cam1_cam0`` of the newer camera from matches older -> newer.

    RGB-D (``estimator_mode`` 'rgbd'): the older pixels are back-projected with ``depth0``
    and ``cv2.solvePnPRansac`` gives the metric pose. Monocular: essential matrix and
    ``recoverPose``, skipped when the median flow is below ``keyframe_min_parallax_px``
    (static, ``T_cam1_cam0`` None); the translation norm comes from depth (``depth0``, else
    ``depth1``: median of measured / triangulated depth), else from ``scale_fallback``, else
    it is 1 (arbitrary scale).

    Args:
        matches: correspondences, ``keypoints0`` in the older image, ``keypoints1`` in the newer.
        camera0: intrinsics of the older image (back-projection of ``depth0``).
        camera1: intrinsics of the newer image (PnP, essential matrix).
        conf: configuration validated by :func:`check_odometry_conf`.
        depth0: (H, W) float32 metres of the older frame, NaN invalid (see
            :func:`sanitize_depth`), or None.
        depth1: (H, W) float32 metres of the newer frame, or None (monocular scale only).
        scale_fallback: called for the monocular scale when depth gives none; returns
            ``(norm_m, source)``.

    Returns:
        :class:`PoseEstimate`, or :class:`PoseFailure` when there are fewer than
        ``min_matches`` finite matches or inliers, RANSAC fails, or the pose is not finite.
        Bad data never raise.
    """
    mode = estimator_mode(conf, depth0 is not None)
    if mode is None:
        return PoseFailure("mode is 'rgbd' but the keyframe has no valid depth")
    keypoints0 = matches.keypoints0.astype(np.float64)
    keypoints1 = matches.keypoints1.astype(np.float64)
    finite = np.isfinite(keypoints0).all(axis=1) & np.isfinite(keypoints1).all(axis=1)
    num_finite = int(np.count_nonzero(finite))
    if num_finite < conf['min_matches']:
        return PoseFailure(f'only {num_finite} matches (min_matches={conf["min_matches"]})',
                           mode)
    flow = _median_flow(keypoints0[finite], keypoints1[finite])
    moving = flow >= conf['keyframe_min_parallax_px']
    threshold, confidence = conf['ransac_threshold_px'], conf['ransac_confidence']

    if mode == 'rgbd':
        points3d = geometry.backproject(keypoints0, depth0, camera0)
        result = geometry.relative_pose_pnp(points3d, keypoints1, camera1, threshold,
                                            confidence)
        if result is None:
            num_depth = int(np.count_nonzero(np.isfinite(points3d).all(axis=1)))
            return PoseFailure(f'PnP RANSAC failed ({num_depth} matches with depth)', mode)
        T_cam1_cam0, inliers = result
        message = f'PnP, median flow {flow:.2f} px'
        scale_source = 'depth'
    elif not moving:
        T_cam1_cam0 = None   # the pose is kept exactly
        inliers = finite
        scale_source = 'static'
        message = (f'static (median flow {flow:.2f} px < keyframe_min_parallax_px): '
                   'pose and keyframe kept')
    else:
        result = geometry.relative_pose_essential(keypoints0, keypoints1, camera1,
                                                  threshold, confidence)
        if result is None:
            return PoseFailure('essential matrix RANSAC failed', mode)
        T_unit, inliers = result
        if np.count_nonzero(inliers) >= conf['min_matches']:
            scale_source = _depth_scale(keypoints0[inliers], keypoints1[inliers], T_unit,
                                        camera0, camera1, depth0, depth1)
            if scale_source is None:
                scale_source = (scale_fallback or _unit_scale)()
            scale, source = scale_source
            T_cam1_cam0 = T_unit.copy()
            T_cam1_cam0[:3, 3] *= scale
            message = f'essential matrix, scale {scale:.4g} m from {source}'
            scale_source = scale_source_kind(source)
        else:
            T_cam1_cam0 = T_unit
            message = scale_source = ''
    num_inliers = int(np.count_nonzero(inliers))
    if num_inliers < conf['min_matches']:
        return PoseFailure(f'only {num_inliers} inliers of {num_finite} matches '
                           f'(min_matches={conf["min_matches"]})', mode)
    if T_cam1_cam0 is not None and not np.all(np.isfinite(T_cam1_cam0)):
        return PoseFailure('non-finite pose estimate', mode)
    return PoseEstimate(T_cam1_cam0, np.asarray(inliers, dtype=bool), bool(moving), mode,
                        message, scale_source)


class VisualOdometry:
    """Frame-to-keyframe visual odometry (RGB-D PnP, monocular local map, 2-view fallback).

    Args:
        matcher: object with ``match(image0, image1, predict=None) -> Matches`` on (H, W)
            uint8 grey images (see ``relperception.matching``).
        conf: overrides of :attr:`default_conf`; unknown keys raise ``ValueError``.
    """

    default_conf: typing.ClassVar[dict] = ODOMETRY_DEFAULT_CONF

    def __init__(self, matcher, conf: dict | None = None):
        """Validate ``conf`` against :attr:`default_conf` and start in the reset state."""
        if not callable(getattr(matcher, 'match', None)):
            raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
                f'matcher must have a match(image0, image1, predict) method, got {type(matcher)}')
        self.matcher = matcher
        self.conf = self._check_conf(conf)
        self._check_matcher()
        self._map_tracker = MapTracker(self.conf)
        self.reset()

    @classmethod
    def _check_conf(cls, conf: dict | None) -> dict:
        return check_odometry_conf(conf, cls.default_conf)

    def reset(self) -> None:
        """Forget everything; the next frame initialises a new world frame at identity."""
        self._keyframe: _Keyframe | None = None
        self._anchor: _Keyframe | None = None  # last keyframe confirmed by tracking
        self._initialized = False
        self._lost = False
        self._T_world_last = np.eye(4)        # last good (or held) pose
        self._cov_world_last = np.zeros((6, 6))  # its covariance (see VOResult)
        # (keyframe stamp, T_kf_cam, covariance) of the last good frame's keyframe step
        self._last_step: tuple[int, np.ndarray, np.ndarray] | None = None
        self._stamp_last: int | None = None  # stamp of the last good frame
        self._velocity: tuple[np.ndarray, float] | None = None  # (T_cur_prev, dt_s)
        self._speed_mps: float | None = None
        self._last_step_m: float | None = None  # last keyframe-to-keyframe distance
        # (stamp, median flow px) of the last frame seen static at the keyframe's pose
        self._static: tuple[int, float] | None = None
        self._hint_since_keyframe: float | None = None
        self._map_tracker.reset()
        # maps made before: the first map of this trajectory defines its unit (parallax), as
        # at the start; a re-initialisation after a loss keeps the lost map's unit instead
        self._initializations_at_reset = self._map_tracker.initializations
        #: Time the last :meth:`step` waited for the previous keyframe's background work (ms).
        self.last_keyframe_wait_ms = 0.0

    def close(self) -> None:
        """Drop the running keyframe work and bundle adjustment (the object stays usable)."""
        self._map_tracker.close()

    def reconfigure(self, matcher, conf: dict | None) -> None:
        """Change the matcher and the configuration between frames, keeping the state.

        Args:
            matcher: the new matcher (``match(image0, image1, predict)``).
            conf: overrides of :attr:`default_conf`, validated like the constructor's.

        Raises:
            ValueError: an invalid configuration or matcher (nothing is changed then).
        """
        if not callable(getattr(matcher, 'match', None)):
            raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
                f'matcher must have a match(image0, image1, predict) method, got {type(matcher)}')
        conf = self._check_conf(conf)
        self._finish_keyframe()
        self.conf = conf
        self.matcher = matcher
        self._check_matcher()
        self._map_tracker.reconfigure(self.conf)

    def map_stats(self) -> dict:
        """Return the local map's counters (see ``MapTracker.stats``) for a run summary."""
        self._finish_keyframe()
        return self._map_tracker.stats()

    # ------------------------------------------------------------------ public API

    def step(self, frame: Frame, translation_norm_m: float | None = None) -> VOResult:
        """Track one frame and return its pose.

        Args:
            frame: the new frame (``image`` uint8 grey or RGB, ``stamp_ns``, ``camera`` and
                optional ``depth`` (H, W) float32 metres, NaN invalid).
            translation_norm_m: optional distance in metres the camera travelled since the
                previous call (wheel odometry, ground truth); used for the monocular scale
                only. NaN or negative values are ignored.

        Returns:
            :class:`VOResult`; never raises on bad image data.

        Raises:
            ValueError: ``frame`` is not a :class:`Frame` or ``translation_norm_m`` not a number.
        """
        if not isinstance(frame, Frame):
            raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
                f'frame must be a relperception.core_types.Frame, got {type(frame)}')
        translation_norm_m = check_translation_norm(translation_norm_m)
        start = time.perf_counter()
        if translation_norm_m is not None:
            self._hint_since_keyframe = (self._hint_since_keyframe or 0.0) + translation_norm_m
        # Read-only and owned: a keyframe's keypoints and pyramid are computed once.
        gray = frozen_copy(frame.gray)
        depth = self._sanitize_depth(frame.depth)
        self._finish_keyframe()
        result = self._step(frame, gray, depth)
        logger.debug('VO %s %s in %.1f ms: %s', frame.stamp_ns, result.status,
                     1e3 * (time.perf_counter() - start), result.message)
        return result

    # ------------------------------------------------------------------ state machine

    def _step(self, frame: Frame, gray: np.ndarray, depth: np.ndarray | None) -> VOResult:
        if self._keyframe is None:
            return self._start(frame, gray, depth, 'first frame')
        if not _same_camera(self._keyframe.camera, frame.camera):
            self._lost = True
            return self._start(frame, gray, depth, 'image size or intrinsics changed')
        outcome = self._track(frame, gray, depth)
        to_anchor = False
        anchor = self._anchor
        if isinstance(outcome, _Failure) and anchor is not None \
                and anchor is not self._keyframe and _same_camera(anchor.camera, frame.camera):
            # The keyframe was never tracked against (a re-initialisation, maybe on a bad
            # frame): try the last keyframe that was.
            unconfirmed, self._keyframe = self._keyframe, anchor
            retry = self._track(frame, gray, depth)
            if isinstance(retry, _Estimate):
                outcome, to_anchor = retry, True
            else:
                self._keyframe = unconfirmed
        reference_stamp = self._keyframe.stamp_ns
        if isinstance(outcome, _Estimate):
            recovered = self._lost or to_anchor
            status = STATUS_REINITIALIZED if recovered else STATUS_TRACKING
            pose_covariance, motion_covariance = self._pose_covariance(frame, outcome)
            self._accept(frame, gray, depth, outcome, pose_covariance)
            message = outcome.message
            if recovered:
                which = 'last confirmed keyframe' if to_anchor else 'last keyframe'
                message = f'relocalised against the {which}; {message}'
            return VOResult(frame.stamp_ns, outcome.T_world_cam.copy(), status,
                            len(outcome.matches), int(np.count_nonzero(outcome.inlier_mask)),
                            outcome.is_keyframe, outcome.matches, message,
                            outcome.inlier_mask, outcome.mode, outcome.scale_source,
                            reference_stamp, pose_covariance, motion_covariance)
        if self._lost:
            # Second failure in a row: re-initialise from this frame if it has texture.
            return self._start(frame, gray, depth, f'relocalisation failed ({outcome.message})')
        self._lost = True
        return VOResult(frame.stamp_ns, self._T_world_last.copy(), STATUS_LOST,
                        len(outcome.matches), 0, False, outcome.matches, outcome.message,
                        np.zeros(len(outcome.matches), dtype=bool), outcome.mode,
                        keyframe_stamp_ns=reference_stamp,
                        pose_covariance=self._cov_world_last.copy())

    def _start(self, frame: Frame, gray: np.ndarray, depth: np.ndarray | None,
               reason: str) -> VOResult:
        """Make ``frame`` the keyframe at the held pose (identity for the very first)."""
        if not self._has_texture(gray):
            self._lost = self._initialized
            return VOResult(frame.stamp_ns, self._T_world_last.copy(), STATUS_LOST,
                            message=f'{reason}; too little texture to (re)initialise',
                            pose_covariance=self._cov_world_last.copy())
        status = STATUS_REINITIALIZED if self._initialized else STATUS_INITIALIZED
        if self._initialized:
            # The motion since the last good pose is unknown: the held pose is uncertain.
            unknown = np.diag([UNKNOWN_MOTION_SIGMA_RAD ** 2] * 3
                              + [UNKNOWN_MOTION_SIGMA_M ** 2] * 3)
            self._cov_world_last = self._cov_world_last + unknown
        self._map_tracker.reset()
        self._keyframe = _Keyframe(gray, depth, frame.camera, self._T_world_last.copy(),
                                   frame.stamp_ns, pose_covariance=self._cov_world_last.copy())
        self._initialized = True
        self._lost = False
        self._stamp_last = frame.stamp_ns
        self._velocity = None
        self._hint_since_keyframe = None
        self._static = None
        message = reason if status == STATUS_INITIALIZED else \
            f'{reason}; re-initialised from this frame at the held pose'
        return VOResult(frame.stamp_ns, self._T_world_last.copy(), status, is_keyframe=True,
                        message=message, pose_covariance=self._cov_world_last.copy())

    def _accept(self, frame: Frame, gray: np.ndarray, depth: np.ndarray | None,
                estimate: _Estimate, pose_covariance: np.ndarray) -> None:
        """Commit a successful estimate: map, velocity, speed, keyframe, covariance."""
        map_keyframe = None
        if estimate.is_keyframe and estimate.map_step is not None:
            map_keyframe = self._insert_map_keyframe(frame, gray, estimate, depth)
            # The map refines these after its bundle adjustments (_finish_keyframe).
            map_keyframe.pose_covariance = pose_covariance.copy()
            if self._last_step is not None and self._last_step[0] == self._keyframe.stamp_ns:
                map_keyframe.step_covariance = self._last_step[2].copy()
        T_world_cur = estimate.T_world_cam
        if self._stamp_last is not None:
            dt = (frame.stamp_ns - self._stamp_last) * 1e-9
            T_cur_prev = invert_transform(T_world_cur) @ self._T_world_last
            self._velocity = (T_cur_prev, dt)
        if estimate.scale_source == 'static':
            self._static = (frame.stamp_ns, _median_flow(estimate.matches.keypoints0,
                                                         estimate.matches.keypoints1))
        if estimate.is_keyframe:
            kf = self._keyframe
            dt_kf = self._moving_time_s(kf, frame.stamp_ns, estimate.matches)
            distance = float(np.linalg.norm(T_world_cur[:3, 3] - kf.T_world_cam[:3, 3]))
            self._last_step_m = distance
            if dt_kf > 0:
                self._speed_mps = distance / dt_kf
            self._keyframe = _Keyframe(gray, depth, frame.camera, T_world_cur.copy(),
                                       frame.stamp_ns, map_keyframe, pose_covariance.copy())
            self._hint_since_keyframe = None
            self._static = None
        self._anchor = self._keyframe
        self._T_world_last = T_world_cur.copy()
        self._cov_world_last = pose_covariance.copy()
        self._stamp_last = frame.stamp_ns
        self._lost = False

    def _pose_covariance(self, frame: Frame,
                         estimate: _Estimate) -> tuple[np.ndarray, np.ndarray]:
        """Covariances of the estimated ``T_world_cam`` and of the motion since the last frame.

        The pose: the keyframe's covariance, then the keyframe step's (reprojection residuals,
        :func:`relperception.odometry.covariance.step_covariance`), with the translation made
        large when the scale is not metric.
        """
        kf = self._keyframe
        T_kf_cur = invert_transform(kf.T_world_cam) @ estimate.T_world_cam
        length = float(np.linalg.norm(T_kf_cur[:3, 3]))
        step = None
        if estimate.scale_source != 'static':
            inliers = np.asarray(estimate.inlier_mask, dtype=bool)
            step = covariance.step_covariance(
                estimate.matches.keypoints0[inliers], estimate.matches.keypoints1[inliers],
                T_kf_cur, kf.camera, frame.camera,
                kf.depth if estimate.mode == 'rgbd' else None)
        if step is None:   # kept (static) or no geometry: the step is not measured
            step = np.diag([UNKNOWN_MOTION_SIGMA_RAD ** 2] * 3
                           + [(UNKNOWN_MOTION_SIGMA_M + length) ** 2] * 3)
            if estimate.scale_source == 'static':
                step[:3, :3] *= 0.01   # static: the rotation is known to be small
        elif estimate.scale_source not in METRIC_SCALE_SOURCES:
            step = covariance.inflate_translation(step, covariance.NON_METRIC_SIGMA_M + length)
        pose = covariance.compose_covariance(kf.T_world_cam, kf.pose_covariance, T_kf_cur, step)
        T_kf_prev, step_prev = np.eye(4), np.zeros((6, 6))   # the previous frame was the kf
        if self._last_step is not None and self._last_step[0] == kf.stamp_ns:
            _, T_kf_prev, step_prev = self._last_step
        motion = covariance.compose_covariance(
            invert_transform(T_kf_prev), covariance.invert_covariance(T_kf_prev, step_prev),
            T_kf_cur, step)
        self._last_step = (kf.stamp_ns, T_kf_cur, step)
        return pose, motion

    def _insert_map_keyframe(self, frame: Frame, gray: np.ndarray, estimate: _Estimate,
                             depth: np.ndarray | None):
        """Start the map (initialisation) or extend it; return the new map keyframe.

        The keyframe is completed in the background (``MapTracker.submit_keyframe``) and
        joined by :meth:`_finish_keyframe` before the next frame.
        """
        tracker, kf = self._map_tracker, self._keyframe
        if isinstance(estimate.map_step, MapInit):
            reference, point_ids = tracker.start_map(kf.stamp_ns, kf.T_world_cam,
                                                     estimate.matches, estimate.map_step)
            reference.pose_covariance = kf.pose_covariance.copy()
        else:
            reference, point_ids = kf.map_keyframe, estimate.map_step.point_ids
        map_keyframe = tracker.begin_keyframe(frame.stamp_ns, estimate.T_world_cam,
                                              self._hint_since_keyframe)
        tracker.submit_keyframe(self.matcher, reference, kf.gray, gray, map_keyframe,
                                estimate.matches, point_ids, frame.camera,
                                depth if estimate.mode == 'rgbd' else None)
        estimate.message += '; new keyframe (map points added in the background)'
        return map_keyframe

    def _finish_keyframe(self) -> None:
        """Wait for the keyframe completed in the background; apply its pose correction."""
        started = time.perf_counter()
        correction = self._map_tracker.finish_keyframe()
        self.last_keyframe_wait_ms = 1e3 * (time.perf_counter() - started)
        if correction is not None:
            # The finished bundle adjustment moved the reference; what followed moves with it.
            self._T_world_last = correction @ self._T_world_last
            if self._keyframe is not None and self._keyframe.map_keyframe is not None:
                self._keyframe.T_world_cam = self._keyframe.map_keyframe.T_world_cam.copy()
        map_keyframe = self._keyframe.map_keyframe if self._keyframe is not None else None
        if map_keyframe is not None and map_keyframe.pose_covariance is not None:
            # The adjustment may have refined it (MapTracker._refine_covariances).
            self._keyframe.pose_covariance = map_keyframe.pose_covariance.copy()

    # ------------------------------------------------------------------ estimation

    def _match(self, kf: _Keyframe, gray: np.ndarray, predict, mode_name: str,
               select=None):
        """Return the matches keyframe -> frame, or a :class:`_Failure`.

        ``select`` (a ``Selector``) is passed on to the matcher; callers give one only to
        matchers with ``selects_keypoints``.
        """
        kwargs = {'select': select} if select is not None else {}
        try:
            matches = self.matcher.match(kf.gray, gray, predict=predict, **kwargs)
        except (ValueError, cv2.error, np.linalg.LinAlgError, FloatingPointError) as error:
            logger.warning('matcher failed: %s', error)
            return _Failure(f'matcher failed: {error}', mode=mode_name)
        if not isinstance(matches, Matches):
            raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
                f'matcher returned {type(matches)}, expected Matches')
        return matches

    def _map_kind(self, kf: _Keyframe, depth: np.ndarray | None) -> str | None:
        """Return the local map this frame is tracked by: 'mono', 'rgbd' or None (two-view)."""
        conf = self.conf
        if not self._map_capable:
            return None
        if kf.depth is None:
            if (conf['mono_map'] and conf['mode'] != 'rgbd' and depth is None
                    and (self._hint_since_keyframe is None or conf['hint_map'])):
                return 'mono'   # a 'mono' or, with translation hints, a 'hinted' map
            return None
        return 'rgbd' if conf['rgbd_map'] and estimator_mode(conf, True) == 'rgbd' else None

    def _check_matcher(self) -> None:
        """Note whether the matcher's keypoints can be followed by the local map."""
        self._map_capable = bool(getattr(self.matcher, 'repeatable_keypoints', True))
        if (self.conf['mono_map'] or self.conf['rgbd_map']) and not self._map_capable:
            logger.info('%s has no repeatable keypoints: frames use two-view steps '
                        '(PnP on the keyframe depth, or constant-speed scale), not the local map',
                        type(self.matcher).__name__)

    def _track(self, frame: Frame, gray: np.ndarray, depth: np.ndarray | None):
        conf = self.conf
        kf = self._keyframe
        tracker = self._map_tracker
        kind = self._map_kind(kf, depth)
        if kind == 'mono':
            return self._track_map(frame, gray)
        if tracker.kind is not None and tracker.kind != kind:
            tracker.reset()   # depth or a scale hint arrived (or left): another map, or none
        mode_name = estimator_mode(conf, kf.depth is not None)
        if mode_name is None:
            return _Failure("mode is 'rgbd' but the keyframe has no valid depth")
        use_rgbd = mode_name == 'rgbd'
        reference = kf.map_keyframe if kind == 'rgbd' else None
        if reference is not None and reference.keyframe_id not in tracker.map.keyframes:
            reference = None
        predict = self._make_predict(frame, use_rgbd) if conf['use_motion_prior'] else None
        matches = self._match(kf, gray, predict, mode_name)
        if isinstance(matches, _Failure):
            return matches
        note = ''
        if reference is not None:
            track = tracker.track(reference, matches, frame.camera)
            if isinstance(track, MapTrack):
                is_keyframe = depth is not None and tracker.wants_keyframe(
                    track, matches, frame.camera, reference)
                return _Estimate(track.T_world_cam, matches, track.inlier_mask, is_keyframe,
                                 'rgbd', track.message, 'depth_map', track)
            note = f'map tracking failed ({track}); '
        estimate = estimate_pose_from_matches(
            matches, kf.camera, frame.camera, conf, kf.depth, depth,
            scale_fallback=lambda: self._fallback_scale(frame, matches))
        if isinstance(estimate, PoseFailure):
            return _Failure(note + estimate.message, matches, estimate.mode)
        moving, message = estimate.moving, note + estimate.message
        if use_rgbd and depth is None:
            # A frame without depth cannot anchor the next PnP: keep the keyframe.
            moving = False
            message += '; no valid depth in this frame, keyframe kept'
        elif use_rgbd and moving and kind is None and conf['rgbd_keyframe_tracking']:
            moving = self._rgbd_keyframe_due(kf, matches, estimate.inlier_mask, frame.camera)
            if not moving:
                message += '; keyframe kept (enough overlap)'
        if estimate.T_cam1_cam0 is None:
            T_world_cur = self._T_world_last.copy()
        else:
            T_world_cur = kf.T_world_cam @ invert_transform(estimate.T_cam1_cam0)
        map_step = None
        if kind == 'rgbd' and moving:
            init = tracker.initialize_from_depth(kf.T_world_cam, T_world_cur, matches,
                                                 estimate.inlier_mask, kf.depth, frame.camera)
            message += '; ' + init.message
            map_step = init if init.accepted else None
        return _Estimate(T_world_cur, matches, estimate.inlier_mask, bool(moving), mode_name,
                         message, estimate.scale_source, map_step)

    def _track_map(self, frame: Frame, gray: np.ndarray):
        """Monocular step against the local map, or its (re-)initialisation."""
        conf, tracker, kf = self.conf, self._map_tracker, self._keyframe
        reference = kf.map_keyframe
        if reference is not None and reference.keyframe_id not in tracker.map.keyframes:
            reference = None
        predict = self._make_predict(frame, False, reference) \
            if conf['use_motion_prior'] else None
        select = None
        if reference is not None and getattr(self.matcher, 'selects_keypoints', False):
            # Only keypoints on map points serve PnP: the others are matched only if it fails.
            select = functools.partial(_on_map_points, tracker.map, reference)
        matches = self._match(kf, gray, predict, 'mono', select)
        if isinstance(matches, _Failure):
            return matches
        note = ''
        if reference is not None:
            track = tracker.track(reference, matches, frame.camera)
            if isinstance(track, MapTrack):
                return _Estimate(track.T_world_cam, matches, track.inlier_mask,
                                 tracker.wants_keyframe(track, matches, frame.camera,
                                                        reference), 'mono',
                                 track.message,
                                 'hinted_map' if tracker.kind == 'hinted' else 'map', track)
            note = f'map tracking failed ({track}); '
            if select is not None:
                matches = self._match(kf, gray, predict, 'mono')
                if isinstance(matches, _Failure):
                    return matches
        finite = np.isfinite(matches.keypoints0).all(axis=1) \
            & np.isfinite(matches.keypoints1).all(axis=1)
        if np.count_nonzero(finite) < conf['min_matches']:
            return _Failure(f'{note}only {np.count_nonzero(finite)} matches '
                            f'(min_matches={conf["min_matches"]})', matches, 'mono')
        flow = float(np.median(np.linalg.norm(
            matches.keypoints1[finite] - matches.keypoints0[finite], axis=1)))
        if flow < conf['keyframe_min_parallax_px']:
            return _Estimate(self._T_world_last.copy(), matches, finite, False, 'mono',
                             f'{note}static (median flow {flow:.2f} px < '
                             'keyframe_min_parallax_px): pose and keyframe kept', 'static')
        hinted = self._hint_since_keyframe is not None
        if tracker.initializations == self._initializations_at_reset and not hinted:
            baseline, source = None, 'parallax (the first map defines the trajectory unit)'
        else:
            baseline, source = self._fallback_scale(frame, matches)
        init = tracker.initialize(kf.T_world_cam, matches, frame.camera, baseline, hinted,
                                  previous_map=reference)
        if isinstance(init, str):
            return _Failure(note + init, matches, 'mono')
        scale_source = 'unit' if baseline is None else scale_source_kind(source)
        if init.scale_from_map:
            scale_source, source = 'previous map', 'the points of the map it replaces'
        length = np.linalg.norm(init.T_world_cam[:3, 3] - kf.T_world_cam[:3, 3])
        return _Estimate(init.T_world_cam, matches, init.inlier_mask, init.accepted, 'mono',
                         f'{note}{init.message}; baseline {length:.4g} from {source}',
                         scale_source, init)

    def _rgbd_keyframe_due(self, kf: _Keyframe, matches: Matches, inlier_mask: np.ndarray,
                           camera: Camera) -> bool:
        """Whether a frame tracked by PnP on the keyframe's depth becomes the next keyframe.

        Every frame is tracked against the keyframe, not against the frame before it, so
        errors do not add up frame by frame. A new keyframe is due when the median inlier flow
        exceeds ``keyframe_max_flow_ratio`` of the image diagonal, or fewer inliers than
        ``keyframe_min_tracked_ratio`` of the first frame's remain (or below ``2 *
        min_matches``), before tracking is lost.
        """
        conf = self.conf
        inliers = np.asarray(inlier_mask, dtype=bool)
        num_inliers = int(np.count_nonzero(inliers))
        if kf.first_inliers is None:
            kf.first_inliers = num_inliers
        if num_inliers < max(2 * conf['min_matches'],
                             conf['keyframe_min_tracked_ratio'] * kf.first_inliers):
            return True
        flow = np.linalg.norm(matches.keypoints1[inliers] - matches.keypoints0[inliers], axis=1)
        diagonal = float(np.hypot(camera.width, camera.height))
        return bool(len(flow) and np.median(flow) >= conf['keyframe_max_flow_ratio'] * diagonal)

    def _fallback_scale(self, frame: Frame, matches: Matches) -> tuple[float, str]:
        """Return the monocular translation norm when depth gives none, and its source."""
        kf = self._keyframe
        if self._hint_since_keyframe is not None:
            return self._hint_since_keyframe, 'translation_norm_m'
        dt = self._moving_time_s(kf, frame.stamp_ns, matches)
        if self._speed_mps is not None and dt > 0:
            return self._speed_mps * dt, 'constant speed'
        if self._last_step_m is not None:
            return self._last_step_m, 'previous step (no usable stamps)'
        return _unit_scale()

    def _moving_time_s(self, kf: _Keyframe, stamp_ns: int, matches: Matches) -> float:
        """Return the time (s) the camera moved between the keyframe and ``stamp_ns``.

        Without a frame seen static at the keyframe's pose since the keyframe, all of it.
        After one (stamp ``t_s``, median flow ``f_s`` px against the keyframe, below
        ``keyframe_min_parallax_px``), the flow is taken to grow with the distance travelled:
        ``(stamp - t_s) * f / (f - f_s)`` with ``f`` the median flow of ``matches`` (keyframe
        -> this frame), at most the time since the keyframe. A camera that stood still
        (``f_s`` ~ 0) gets the time since it was last seen static, one that moved slowly
        through the static frames the time since the keyframe.
        """
        dt_kf = (stamp_ns - kf.stamp_ns) * 1e-9
        if self._static is None or self._static[0] <= kf.stamp_ns:
            return dt_kf
        static_ns, static_flow = self._static
        dt_static = (stamp_ns - static_ns) * 1e-9
        flow = _median_flow(matches.keypoints0, matches.keypoints1)
        if not (np.isfinite(flow) and np.isfinite(static_flow) and flow > static_flow):
            return dt_static
        return min(dt_kf, dt_static * flow / (flow - static_flow))

    def _make_predict(self, frame: Frame, use_rgbd: bool,
                      reference=None) -> Predictor | None:
        """Return the constant-velocity keypoint predictor keyframe -> frame, or None.

        With a map keyframe ``reference``, keypoints on map points are predicted by
        projecting the points; the others by the rotation (infinite homography).
        """
        if self._velocity is None or self._stamp_last is None:
            return None
        T_cur_prev, dt_last = self._velocity
        dt = (frame.stamp_ns - self._stamp_last) * 1e-9
        if dt_last > 0 and dt >= 0:
            ratio = dt / dt_last
        else:
            ratio = 1.0
        if ratio > _MAX_PRIOR_EXTRAPOLATION:
            return None
        T_cur_world = _scale_motion(T_cur_prev, ratio) @ invert_transform(self._T_world_last)
        kf = self._keyframe
        T_cur_kf = T_cur_world @ kf.T_world_cam
        if not np.all(np.isfinite(T_cur_kf)):
            return None
        camera_cur = frame.camera
        tracker = self._map_tracker

        def predict(keypoints0: np.ndarray) -> np.ndarray:
            keypoints0 = np.asarray(keypoints0, dtype=np.float64).reshape(-1, 2)
            if use_rgbd:
                points = geometry.backproject(keypoints0, kf.depth, kf.camera)
                points = points @ T_cur_kf[:3, :3].T + T_cur_kf[:3, 3]
                return geometry.project(points, camera_cur).astype(np.float32)
            points = geometry.normalized_rays(keypoints0, kf.camera) @ T_cur_kf[:3, :3].T
            predicted = geometry.project(points, camera_cur)
            if reference is not None:
                from_map = tracker.predict_points(reference, keypoints0, T_cur_world,
                                                  camera_cur)
                on_map = np.isfinite(from_map).all(axis=1)
                predicted[on_map] = from_map[on_map]
            return predicted.astype(np.float32)

        return predict

    # ------------------------------------------------------------------ helpers

    def _sanitize_depth(self, depth: np.ndarray | None) -> np.ndarray | None:
        """Return depth with values outside [min, max] set to NaN, or None if too few valid."""
        return sanitize_depth(depth, self.conf)

    def _has_texture(self, gray: np.ndarray) -> bool:
        """Return whether ``gray`` has at least ``min_matches`` corners (is worth a keyframe)."""
        if float(gray.std()) < 1.0:
            return False
        corners = cv2.goodFeaturesToTrack(gray, maxCorners=self.conf['min_matches'],
                                          qualityLevel=0.01, minDistance=3)
        return corners is not None and len(corners) >= self.conf['min_matches']
