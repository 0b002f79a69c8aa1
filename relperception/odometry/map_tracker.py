# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tracking against a local map: the scale is carried by the map's points.

:class:`MapTracker` is the map half of :class:`~relperception.odometry.vo.VisualOdometry`. A
map is of one of three kinds (:attr:`MapTracker.kind`): **monocular** (``'mono'``: points
triangulated from parallax; frames with no depth and no translation hint), **monocular with
translation hints** (``'hinted'``: the same points; the first baseline is the hint and the
hinted distance between consecutive keyframes is a bundle-adjustment residual, so the map is
metric) or **RGB-D** (``'rgbd'``: points back-projected with the keyframes' depth images, their
depth readings kept as bundle-adjustment residuals). The steps (``matches`` are always
reference keyframe -> current frame):

1. **Initialisation** (:meth:`MapTracker.initialize`): essential matrix between the reference
   keyframe and the frame; accepted only with enough parallax (``min_matches`` triangulated
   inliers seen under >= ``map_init_min_angle_deg``) and when a homography does not explain
   the matches as well (``map_init_max_homography_ratio``: rotation-only motion or a distant
   plane). The baseline of the very first map is its median parallax in units of
   ``map_init_min_angle_deg`` (this defines the trajectory's unit); a re-initialisation after
   the map's tracking failed puts its points at the depths of the lost map's points in the
   reference keyframe (:meth:`MapTracker.map_depth_baseline`), so the unit is kept and a turn
   on the spot moves no position; without enough of them it takes the constant-speed
   distance. An RGB-D map starts from
   a metric two-view step instead (:meth:`MapTracker.initialize_from_depth`): the keyframe's
   matched pixels with depth are its points.
2. **Tracking** (:meth:`MapTracker.track`): the matched keyframe keypoints are looked up in
   the keyframe's landmark table; the pose is ``cv2.solvePnPRansac`` against those map points
   (world frame). No scale is assumed: it comes from the map. A matcher that can select
   keypoints (``selects_keypoints``, NCC) matches only the keyframe keypoints that carry map
   points, the only ones PnP uses; when tracking fails, VO matches all of them again.
3. **Keyframe insertion** (:meth:`MapTracker.begin_keyframe`, then
   :meth:`MapTracker.complete_keyframe` in the background): the new keyframe's own
   keypoints are matched back into the reference keyframe (the motion prior is the local
   flow of the nearest forward matches, within ``_FLOW_PRIOR_RADIUS_PX``: the forward matches
   are those of the map points, so they are sparser than the keypoints); a keypoint that lands
   on a forward match of a map point, or on a landmark of the reference keyframe, observes
   that point again (checked by reprojection); the others are back-projected with the new
   keyframe's depth (RGB-D map, checked by reprojection into the reference) or triangulated
   with the two poses and kept when they pass
   :func:`~relperception.odometry.local_map.triangulate_checked`.
4. **Windowed bundle adjustment** after every insertion, on the last ``ba_window_keyframes``
   keyframes (:func:`~relperception.odometry.bundle_adjustment.bundle_adjust`; depth
   readings, or hinted distances (``hint_sigma_rel``), as residuals in a metric map, whose
   gauge needs one fixed keyframe, where a monocular one fixes two), in a worker
   process (:mod:`~relperception.odometry.ba_worker`): it is joined at the next insertion, and
   the next one starts then; the keyframe inserted meanwhile moves rigidly with the newest
   adjusted keyframe (:meth:`LocalMap.apply_adjustment
   <relperception.odometry.local_map.LocalMap.apply_adjustment>`).

**Off the per-frame path, deterministic.** :meth:`MapTracker.submit_keyframe` runs the
insertion (and its wait for the previous adjustment) in a thread while the caller returns the
frame's pose and waits for the next frame; :meth:`MapTracker.finish_keyframe` is called before
the next frame touches the map. The order of every map change is therefore fixed by the frame
sequence, not by the machine's speed: a live run at any rate gives the offline trajectory.
When frames arrive faster than a keyframe is completed (offline, back to back), the next frame
waits for it. Observations that stay above the reprojection limit are removed.

Counters for the run summary are in :meth:`MapTracker.stats`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import time

import cv2
import numpy as np
from relperception.core_types import Camera, Matches
from relperception.odometry import covariance, geometry
from relperception.odometry.ba_worker import start_worker, submit_bundle_adjustment
from relperception.odometry.bundle_adjustment import (BundleAdjustmentResult,
                                                      BundleAdjustmentUnavailable)
from relperception.odometry.local_map import (LocalMap, MapKeyframe, ray_angles_deg,
                                              rotation_parallax_deg,
                                              triangulate_checked, WindowProblem)
from relperception.transforms import invert_transform
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

logger = logging.getLogger(__name__)

#: Keyframes a map keeps beyond the bundle-adjustment window (observers that fix the gauge).
_EXTRA_KEYFRAMES = 4
#: A reverse match within this distance (pixels) of a forward match or landmark is that point.
_ASSOCIATION_PX = 1.0
#: Reprojection limit of points (multiple of ``ransac_threshold_px``, at least 2 px).
_POINT_ERROR_FACTOR = 2.0
#: Radius (pixels) within which forward flow predicts a reverse match.
_FLOW_PRIOR_RADIUS_PX = 120.0
#: A keyframe-to-keyframe speed change beyond this factor is reported as a scale jump.
SCALE_JUMP_FACTOR = 2.0
#: A monocular keyframe waits for ``keyframe_min_angle_deg`` of parallax only from this many
#: frames tracked against its reference on (parallax building up slowly); before, it is taken
#: at ``map_min_angle_deg``, so that moderate motion keeps its keyframe rate.
SLOW_PARALLAX_MIN_FRAMES = 3
#: A re-initialisation keeps the unit of the map it replaces when at least this many of its
#: points pair with a point of the map in the reference keyframe's image (nearest projected
#: map point within ``_DEPTH_PAIR_RADIUS_PX``).
MIN_DEPTH_PAIRS = 10
#: A monocular keyframe triangulates no new points when the parallax that no rotation explains
#: (:func:`~relperception.odometry.local_map.rotation_parallax_deg`, median over its matches
#: into the reference keyframe) is below this fraction of ``map_min_angle_deg``.
ROTATION_PARALLAX_FRACTION = 0.5
_DEPTH_PAIR_RADIUS_PX = 20.0


@dataclasses.dataclass
class MapTrack:
    """A frame tracked against the map.

    Attributes:
        T_world_cam: (4, 4) pose of the frame.
        inlier_mask: (N,) bool PnP inliers among the matches.
        point_ids: (N,) map point id of every match (-1 none).
        num_landmarks: landmarks of the reference keyframe still in the map.
        message: how the pose was found.
    """

    T_world_cam: np.ndarray
    inlier_mask: np.ndarray
    point_ids: np.ndarray
    num_landmarks: int
    message: str


@dataclasses.dataclass
class MapInit:
    """A two-view initialisation (accepted or provisional).

    Attributes:
        T_world_cam: (4, 4) pose of the frame (baseline scaled as the tracker chose).
        inlier_mask: (N,) bool essential-matrix inliers.
        accepted: whether the pair has the parallax to start a map.
        points_world: (N, 3) triangulated matches (NaN where not good), when accepted.
        good: (N,) bool points that enter the map.
        message: why (not) accepted.
        depths0: (N,) depth readings (metres) of the points in the reference keyframe, for an
            RGB-D map; None for a monocular one.
        hinted: ``baseline_m`` was a translation hint (a metric map).
        scale_from_map: the baseline came from the depths of the replaced map's points.
    """

    T_world_cam: np.ndarray
    inlier_mask: np.ndarray
    accepted: bool
    points_world: np.ndarray | None
    good: np.ndarray | None
    message: str
    depths0: np.ndarray | None = None
    hinted: bool = False
    #: the baseline came from the depths of the replaced map's points (``previous_map``).
    scale_from_map: bool = False


class MapTracker:
    """Local map, its tracking and its bundle adjustment (see the module docstring).

    Args:
        conf: validated odometry configuration (``check_odometry_conf``).
    """

    def __init__(self, conf: dict):
        """Keep the configuration and start with an empty map."""
        self.conf = conf
        window = conf['ba_window_keyframes']
        self.map = LocalMap(max(window, 2) + _EXTRA_KEYFRAMES)
        self._pending = None   # (problem, future) of the running bundle adjustment
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._insertion: concurrent.futures.Future | None = None   # keyframe being completed
        self._insertion_ms: list[float] = []
        self._insertion_failures = 0
        self._ba_ms: list[float] = []
        self._ba_failures = 0
        self.ba_unavailable = ''   # why bundle adjustment cannot run, once found out
        self.initializations = 0
        self.keyframes_inserted = 0
        self.points_created = 0
        self.scale_jumps = 0
        #: keyframe pose covariances set from a bundle adjustment.
        self.covariances_from_ba = 0
        self._last_speed: float | None = None
        self._last_keyframe: tuple[int, np.ndarray] | None = None
        self._tracked_frames = (-1, 0)   # (reference keyframe id, frames tracked against it)
        #: 'mono', 'hinted' or 'rgbd' while a map exists (see the module docstring), else None.
        self.kind: str | None = None
        uses_map = ((conf['mono_map'] and conf['mode'] != 'rgbd')
                    or (conf['rgbd_map'] and conf['mode'] != 'mono'))
        if uses_map and window >= 3:
            start_worker()   # ready by the first keyframe, not a spike in the first second

    # ------------------------------------------------------------------ state

    def reset(self) -> None:
        """Drop the map (a re-initialisation follows); running work is discarded."""
        if self._insertion is not None:
            future, self._insertion = self._insertion, None
            concurrent.futures.wait([future])   # it may start an adjustment: cancelled below
        if self._pending is not None:
            self._pending[1].cancel()
            try:
                self._pending[1].result()
            except (concurrent.futures.CancelledError, ImportError, ValueError, RuntimeError,
                    np.linalg.LinAlgError, concurrent.futures.process.BrokenProcessPool):
                pass
            self._pending = None
        self.map.clear()
        self.kind = None
        self._last_speed = None
        self._last_keyframe = None
        self._tracked_frames = (-1, 0)

    def reconfigure(self, conf: dict) -> None:
        """Use a new validated configuration from the next frame on; the map is kept."""
        self.conf = conf
        self.map.max_keyframes = max(conf['ba_window_keyframes'], 2) + _EXTRA_KEYFRAMES

    def close(self) -> None:
        """Drop the map and any running work (the shared worker process stays)."""
        self.reset()
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None

    def stats(self) -> dict:
        """Return counters for the run summary (times in milliseconds).

        ``keyframe_insertion_ms_*`` is the background work per keyframe (:meth:`complete_keyframe`,
        including the wait for the previous bundle adjustment).
        """
        ba = np.asarray(self._ba_ms, dtype=np.float64)
        insertion = np.asarray(self._insertion_ms, dtype=np.float64)
        return {
            'map_kind': self.kind,
            'map_initializations': self.initializations,
            'map_keyframes': self.keyframes_inserted,
            'map_points_created': self.points_created,
            'map_points': self.map.num_points,
            'scale_jumps': self.scale_jumps,
            'ba_calls': len(ba),
            'ba_failures': self._ba_failures,
            'ba_unavailable': self.ba_unavailable or None,
            'ba_ms_median': float(np.median(ba)) if len(ba) else None,
            'ba_ms_max': float(np.max(ba)) if len(ba) else None,
            'ba_ms_total': float(np.sum(ba)) if len(ba) else 0.0,
            'ba_keyframe_covariances': self.covariances_from_ba,
            'keyframe_insertion_ms_median': float(np.median(insertion)) if len(insertion)
            else None,
            'keyframe_insertion_ms_max': float(np.max(insertion)) if len(insertion) else None,
            'keyframe_insertion_failures': self._insertion_failures,
        }

    # ------------------------------------------------------------------ prediction

    def predict_points(self, keyframe: MapKeyframe | None, keypoints0: np.ndarray,
                       T_cur_world: np.ndarray, camera: Camera) -> np.ndarray:
        """Project the map points under ``keypoints0`` (N, 2) with a predicted pose.

        Returns (N, 2) float64 pixels, NaN where a keypoint has no map point.
        """
        out = np.full((len(keypoints0), 2), np.nan)
        if keyframe is None:
            return out
        ids = self.map.lookup(keyframe, keypoints0)
        hit = ids >= 0
        if np.any(hit):
            points = self.map.points_world(ids[hit])
            points_cam = points @ T_cur_world[:3, :3].T + T_cur_world[:3, 3]
            out[hit] = geometry.project(points_cam, camera)
        return out

    # ------------------------------------------------------------------ tracking

    def track(self, keyframe: MapKeyframe, matches: Matches,
              camera: Camera) -> MapTrack | str:
        """Return the PnP pose against the map points the matches hit, or why it failed."""
        conf = self.conf
        ids = self.map.lookup(keyframe, matches.keypoints0)
        hit = ids >= 0
        num_landmarks = int(np.count_nonzero(self.map.known(keyframe.point_ids)))
        if np.count_nonzero(hit) < conf['min_matches']:
            return (f'only {np.count_nonzero(hit)} matches hit map points '
                    f'(of {num_landmarks} landmarks)')
        result = geometry.relative_pose_pnp(self.map.points_world(ids[hit]),
                                            matches.keypoints1[hit], camera,
                                            conf['ransac_threshold_px'],
                                            conf['ransac_confidence'])
        if result is None:
            return f'PnP RANSAC failed on {np.count_nonzero(hit)} map points'
        T_cam_world, inliers_hit = result
        inliers = np.zeros(len(matches), dtype=bool)
        inliers[np.flatnonzero(hit)[inliers_hit]] = True
        num_inliers = int(np.count_nonzero(inliers))
        if num_inliers < conf['min_matches']:
            return (f'only {num_inliers} PnP inliers of {np.count_nonzero(hit)} map points '
                    f'(min_matches={conf["min_matches"]})')
        if not np.all(np.isfinite(T_cam_world)):
            return 'non-finite PnP pose'
        ids = np.where(inliers, ids, -1)
        reference_id, count = self._tracked_frames
        self._tracked_frames = (keyframe.keyframe_id,
                                count + 1 if reference_id == keyframe.keyframe_id else 1)
        return MapTrack(invert_transform(T_cam_world), inliers, ids, num_landmarks,
                        f'PnP: {num_inliers} inliers of {np.count_nonzero(hit)} matched map '
                        f'points ({num_landmarks} in the keyframe)')

    def wants_keyframe(self, track: MapTrack, matches: Matches, camera: Camera,
                       reference: MapKeyframe) -> bool:
        """Whether the tracked frame should become a keyframe (coverage and parallax).

        A keyframe is due when fewer than ``keyframe_min_tracked_ratio`` of the reference's
        points are tracked or the median flow exceeds ``keyframe_max_flow_ratio`` of the image
        diagonal, and (monocular map) the tracked points show enough median parallax for the
        new keyframe to triangulate new points (an RGB-D keyframe gets its points from depth):
        ``map_min_angle_deg`` within the first :data:`SLOW_PARALLAX_MIN_FRAMES` - 1 frames
        tracked against the reference, later ``map_min_angle_deg`` per frame tracked or
        ``keyframe_min_angle_deg`` in all, whichever is less (and at least
        ``map_min_angle_deg``). New points need ``map_min_angle_deg``; a keyframe whose median
        parallax is barely above it keeps the points whose pixel noise enlarged their parallax,
        i.e. placed them too near, and the map can shrink keyframe by keyframe (slow motion at
        a high frame rate). With ``keyframe_min_angle_deg`` above ``map_min_angle_deg`` the
        keyframe waits for more where the parallax builds up slowly; a frame that brings
        ``map_min_angle_deg`` within two frames (fast or moderate motion, where waiting would
        thin the keyframes or lose the tracking) is taken at once. Below
        ``2 * min_matches`` tracked points (or a third of the reference's) it is inserted
        regardless, before tracking is lost.
        """
        conf = self.conf
        inliers = track.inlier_mask
        flow = np.linalg.norm(matches.keypoints1[inliers] - matches.keypoints0[inliers], axis=1)
        median_flow = float(np.median(flow)) if len(flow) else 0.0
        if median_flow < conf['keyframe_min_parallax_px']:
            return False
        tracked = int(np.count_nonzero(inliers))
        if tracked < max(2 * conf['min_matches'], track.num_landmarks / 3):
            return True
        diagonal = float(np.hypot(camera.width, camera.height))
        if not (tracked < conf['keyframe_min_tracked_ratio'] * track.num_landmarks
                or median_flow >= conf['keyframe_max_flow_ratio'] * diagonal):
            return False
        if self.kind == 'rgbd':
            return True
        angles = ray_angles_deg(self.map.points_world(track.point_ids[inliers]),
                                reference.T_world_cam, track.T_world_cam)
        reference_id, frames = self._tracked_frames
        frames = frames if reference_id == reference.keyframe_id else 1
        needed = (conf['map_min_angle_deg'] if frames < SLOW_PARALLAX_MIN_FRAMES else
                  min(conf['keyframe_min_angle_deg'], conf['map_min_angle_deg'] * frames))
        return bool(np.nanmedian(angles) >= max(needed, conf['map_min_angle_deg']))

    # ------------------------------------------------------------------ initialisation

    def initialize(self, T_world_kf: np.ndarray, matches: Matches, camera: Camera,
                   baseline_m: float | None, hinted: bool = False,
                   previous_map: MapKeyframe | None = None) -> MapInit | str:
        """Two-view initialisation reference keyframe -> frame (see the module docstring).

        ``baseline_m`` None (the first map): the baseline is the median parallax of the
        map's points (the triangulated inliers over ``map_min_angle_deg``) over
        ``map_init_min_angle_deg``, i.e. the trajectory's unit is the distance at which the
        scene shows that parallax. Frames before the map starts take the median parallax of
        every inlier that triangulates in front of both views and reprojects, whatever its
        parallax (a turn on the spot: no translation; the points with parallax alone would
        give a step biased up, or none at all).
        ``hinted``: ``baseline_m`` is a measured distance (a translation hint): the map
        becomes a ``'hinted'`` (metric) one.
        ``previous_map``: the reference keyframe's keyframe in the current (monocular) map,
        whose tracking failed: the baseline is chosen so that the triangulated points lie at
        the depths (in the reference keyframe) of the map points next to them in its image
        (:meth:`map_depth_baseline`), so the new map keeps the unit of the one it replaces
        and a turn on the spot (no parallax: the points lie far away at unit baseline) gives
        no translation; ``baseline_m`` (constant speed) only where there are too few points.
        """
        conf = self.conf
        keypoints0 = matches.keypoints0.astype(np.float64)
        keypoints1 = matches.keypoints1.astype(np.float64)
        result = geometry.relative_pose_essential(keypoints0, keypoints1, camera,
                                                  conf['ransac_threshold_px'],
                                                  conf['ransac_confidence'])
        if result is None:
            return 'essential matrix RANSAC failed'
        T_unit, inliers = result
        num_inliers = int(np.count_nonzero(inliers))
        if num_inliers < conf['min_matches']:
            return (f'only {num_inliers} essential-matrix inliers '
                    f'(min_matches={conf["min_matches"]})')
        T_kf_cur = invert_transform(T_unit)
        # Every inlier that triangulates in front of both views and reprojects, whatever its
        # parallax: the parallax (which does not depend on the baseline length) of this set
        # measures the motion; the points of the map need map_min_angle_deg on top.
        points, seen = triangulate_checked(
            keypoints0, keypoints1, T_world_kf, T_world_kf @ T_kf_cur, camera, 0.0,
            self.max_point_error_px)
        seen &= inliers
        angles = ray_angles_deg(points, T_world_kf, T_world_kf @ T_kf_cur)
        with np.errstate(invalid='ignore'):
            good = seen & (angles >= conf['map_min_angle_deg'])
            wide = int(np.count_nonzero(good & (angles >= conf['map_init_min_angle_deg'])))
        homography_ratio = self._homography_ratio(keypoints0, keypoints1, inliers, camera)
        reasons = []
        if wide < conf['min_matches']:
            reasons.append(f'only {wide} points with parallax >= map_init_min_angle_deg '
                           f'(min_matches={conf["min_matches"]})')
        if homography_ratio > conf['map_init_max_homography_ratio']:
            reasons.append(f'a homography explains {100 * homography_ratio:.0f} % as many '
                           'matches (rotation or plane)')
        if np.count_nonzero(good) < conf['min_matches']:
            reasons.append(f'only {np.count_nonzero(good)} points pass the triangulation checks')
        accepted = not reasons
        # The map's unit: the parallax of its points. A frame before the map: of every inlier,
        # so a rotation on the spot (no point with parallax) gives no translation instead of a
        # unit step in the essential matrix's arbitrary direction.
        measured = good if accepted else seen
        median_angle = float(np.nanmedian(angles[measured])) if np.any(measured) else 0.0
        from_map = None
        if previous_map is not None and not hinted:
            depths_unit = (points[measured] - T_world_kf[:3, 3]) @ T_world_kf[:3, 2]
            from_map = self.map_depth_baseline(previous_map, keypoints0[measured], depths_unit,
                                               camera)
            if from_map is not None:
                baseline_m = from_map
        if baseline_m is None:
            baseline_m = (median_angle / conf['map_init_min_angle_deg']
                          if conf['map_init_min_angle_deg'] > 0 else 1.0)
        T_kf_cur[:3, 3] *= baseline_m
        T_world_cur = T_world_kf @ T_kf_cur
        # Points scale with the baseline about the keyframe's centre.
        points = T_world_kf[:3, 3] + (points - T_world_kf[:3, 3]) * baseline_m
        message = ('map initialised: ' if accepted else 'initialising the map, not yet: ') + (
            f'{np.count_nonzero(good)} points, median parallax {median_angle:.2f} deg'
            if accepted else '; '.join(reasons))
        return MapInit(T_world_cur, inliers, accepted, points if accepted else None,
                       good if accepted else None, message, hinted=bool(hinted),
                       scale_from_map=from_map is not None)

    def map_depth_baseline(self, reference: MapKeyframe, keypoints0: np.ndarray,
                           depths_unit: np.ndarray, camera: Camera) -> float | None:
        """Return the baseline that puts new points at the depths of the map's points.

        Every map point in front of ``reference`` is projected into its image; a new point
        pairs with the nearest projected one within ``_DEPTH_PAIR_RADIUS_PX`` of its keypoint.
        The baseline is the median ratio of the paired depths (map / new), both in the
        reference keyframe's camera frame: the depth of a point triangulated with a unit
        baseline is proportional to the baseline. With fewer than :data:`MIN_DEPTH_PAIRS`
        pairs (the new points lie where the keyframe's image shows no map point, e.g. after a
        turn on the spot) it is the ratio of the median depths of all of them: the scene is
        taken to be as deep there as where the map is.

        Args:
            reference: a keyframe of the map (its pose gives the depths of the map points).
            keypoints0: (N, 2) pixels of the new points in the reference keyframe.
            depths_unit: (N,) depths of the new points in the reference keyframe's camera
                frame, triangulated with a unit baseline.
            camera: intrinsics of the reference keyframe.

        Returns:
            The baseline (map units), or None with fewer than :data:`MIN_DEPTH_PAIRS` new
            points in front or map points in the image.
        """
        depths_unit = np.asarray(depths_unit, dtype=np.float64)
        front = np.isfinite(depths_unit) & (depths_unit > 0)
        if reference.keyframe_id not in self.map.keyframes or not self.map.points \
                or np.count_nonzero(front) < MIN_DEPTH_PAIRS:
            return None
        T_cam_world = invert_transform(reference.T_world_cam)
        map_cam = np.array(list(self.map.points.values())) @ T_cam_world[:3, :3].T \
            + T_cam_world[:3, 3]
        map_cam = map_cam[map_cam[:, 2] > 0]
        pixels = geometry.project(map_cam, camera)
        inside = np.isfinite(pixels).all(axis=1) & (pixels[:, 0] >= 0) & (pixels[:, 1] >= 0) \
            & (pixels[:, 0] <= camera.width - 1) & (pixels[:, 1] <= camera.height - 1)
        if np.count_nonzero(inside) < MIN_DEPTH_PAIRS:
            return None
        map_depth = map_cam[inside, 2]
        distance, index = cKDTree(pixels[inside]).query(
            np.asarray(keypoints0, dtype=np.float64)[front],
            distance_upper_bound=_DEPTH_PAIR_RADIUS_PX)
        paired = np.isfinite(distance)
        if np.count_nonzero(paired) >= MIN_DEPTH_PAIRS:
            return float(np.median(map_depth[index[paired]] / depths_unit[front][paired]))
        return float(np.median(map_depth) / np.median(depths_unit[front]))

    def initialize_from_depth(self, T_world_kf: np.ndarray, T_world_cur: np.ndarray,
                              matches: Matches, inlier_mask: np.ndarray, depth_kf: np.ndarray,
                              camera: Camera) -> MapInit:
        """Start an RGB-D map from a metric two-view step reference keyframe -> frame.

        The points are the inlier matches back-projected with the keyframe's depth that
        reproject into the frame within the point error limit; the map is accepted with
        ``min_matches`` of them.

        Args:
            T_world_kf: (4, 4) pose of the reference keyframe.
            T_world_cur: (4, 4) pose of the frame (PnP on the keyframe's depth).
            matches: reference keyframe -> frame.
            inlier_mask: (N,) bool PnP inliers.
            depth_kf: (H, W) float32 metres of the keyframe, NaN invalid.
            camera: intrinsics of both images.
        """
        points_kf = geometry.backproject(matches.keypoints0, depth_kf, camera)
        points_world, good = self._points_from_depth(points_kf, matches.keypoints1,
                                                     T_world_kf, T_world_cur, camera)
        good &= np.asarray(inlier_mask, dtype=bool)
        num_good = int(np.count_nonzero(good))
        accepted = num_good >= self.conf['min_matches']
        message = (f'depth map initialised: {num_good} points' if accepted else
                   f'no depth map yet: only {num_good} matches with depth reproject '
                   f'(min_matches={self.conf["min_matches"]})')
        return MapInit(T_world_cur, np.asarray(inlier_mask, dtype=bool), accepted,
                       points_world if accepted else None, good if accepted else None,
                       message, points_kf[:, 2] if accepted else None)

    def _homography_ratio(self, keypoints0, keypoints1, inliers, camera) -> float:
        pixels0 = geometry.undistort_pixels(keypoints0[inliers], camera)
        pixels1 = geometry.undistort_pixels(keypoints1[inliers], camera)
        if len(pixels0) < 4:
            return 1.0
        try:
            H, mask = cv2.findHomography(pixels0, pixels1, cv2.RANSAC,
                                         self.conf['ransac_threshold_px'])
        except cv2.error:
            return 0.0
        if H is None or mask is None:
            return 0.0
        return float(np.count_nonzero(mask)) / len(pixels0)

    @property
    def max_point_error_px(self) -> float:
        """Largest reprojection error of a map point (pixels)."""
        return max(2.0, _POINT_ERROR_FACTOR * self.conf['ransac_threshold_px'])

    def start_map(self, stamp_kf: int, T_world_kf: np.ndarray, matches: Matches,
                  init: MapInit) -> tuple[MapKeyframe, np.ndarray]:
        """Create the map from an accepted initialisation.

        Returns the reference keyframe of the map and the (N,) point id of every match.
        """
        self.reset()
        self.initializations += 1
        self.kind = 'rgbd' if init.depths0 is not None else 'hinted' if init.hinted else 'mono'
        reference = self.map.add_keyframe(stamp_kf, T_world_kf)
        ids = np.full(len(matches), -1, dtype=np.int64)
        depths0 = init.depths0 if init.depths0 is not None else np.full(len(matches), np.nan)
        for i in np.flatnonzero(init.good):
            ids[i] = self.map.add_point(
                init.points_world[i],
                {reference.keyframe_id: (*matches.keypoints0[i], depths0[i])})
        self.points_created += int(np.count_nonzero(ids >= 0))
        self.map.set_landmarks(reference, matches.keypoints0[ids >= 0], ids[ids >= 0])
        self._last_keyframe = (stamp_kf, T_world_kf[:3, 3].copy())
        return reference, ids

    # ------------------------------------------------------------------ keyframes

    def join_adjustment(self) -> np.ndarray | None:
        """Wait for the running bundle adjustment; write its result into the map.

        Returns the (4, 4) rigid correction of the newest adjusted keyframe, which the
        keyframes inserted since the adjustment started received too, or None when the map
        did not change.
        """
        if self._pending is None:
            return None
        problem, future = self._pending
        self._pending = None
        try:
            result = future.result()
        except BundleAdjustmentUnavailable as error:
            self.ba_unavailable = str(error)
            logger.warning('%s: visual odometry runs without it', error)
            return None
        except (ValueError, RuntimeError, np.linalg.LinAlgError,
                concurrent.futures.process.BrokenProcessPool) as error:
            self._ba_failures += 1
            logger.warning('bundle adjustment failed: %s', error)
            return None
        self._ba_ms.append(result.elapsed_ms)
        if not (np.all(np.isfinite(result.T_cam_world))
                and np.all(np.isfinite(result.points_world))):
            self._ba_failures += 1
            return None
        correction = self.map.apply_adjustment(problem, result.T_cam_world,
                                               result.points_world, result.residuals_px,
                                               self.max_point_error_px)
        self._refine_covariances(problem, result)
        return correction

    def _refine_covariances(self, problem: WindowProblem,
                            result: BundleAdjustmentResult) -> None:
        """Set the adjusted keyframes' ``pose_covariance`` from the bundle adjustment.

        The adjustment gives each free keyframe's covariance given the fixed ones, for 1 px
        pixel noise; it is scaled by the residual variance of the observations within the
        Huber threshold (floored, as :func:`~relperception.odometry.covariance.pnp_covariance`
        does) and composed with the covariance of the newest fixed keyframe before the free
        ones (the anchor). A monocular map's translation stays non-metric
        (:data:`~relperception.odometry.covariance.NON_METRIC_SIGMA_M` plus the distance from
        the anchor). Keyframes inserted since the snapshot follow with their step covariances.
        Nothing changes where the anchor's covariance is not known.
        """
        if result.pose_covariances is None:
            return
        keyframes = self.map.keyframes
        ids = [int(k) for k in problem.keyframe_ids]
        free = [i for i in range(len(ids)) if not problem.fixed[i]]
        if not free:
            return
        oldest_free = min(ids[i] for i in free)
        anchors = [i for i in range(len(ids)) if problem.fixed[i] and ids[i] < oldest_free
                   and ids[i] in keyframes and keyframes[ids[i]].pose_covariance is not None]
        if not anchors:
            return
        anchor = keyframes[max(ids[i] for i in anchors)]
        residuals = result.residuals_px[result.residuals_px <= self.conf['ransac_threshold_px']]
        variance = max(float(np.mean(residuals ** 2)) / 2.0 if len(residuals) else 0.0,
                       covariance.MIN_RESIDUAL_PX ** 2)
        T_anchor_world = invert_transform(anchor.T_world_cam)
        for i in free:
            keyframe = keyframes.get(ids[i])
            given_fixed = result.pose_covariances[i]
            if keyframe is None or not np.all(np.isfinite(given_fixed)):
                continue
            relative = variance * covariance.rotate_covariance(T_anchor_world[:3, :3],
                                                               given_fixed)
            T_anchor_keyframe = T_anchor_world @ keyframe.T_world_cam
            if self.kind == 'mono':
                relative = covariance.inflate_translation(
                    relative, covariance.NON_METRIC_SIGMA_M
                    + float(np.linalg.norm(T_anchor_keyframe[:3, 3])))
            keyframe.pose_covariance = covariance.compose_covariance(
                anchor.T_world_cam, anchor.pose_covariance, T_anchor_keyframe, relative)
            self.covariances_from_ba += 1
        previous = keyframes.get(max(ids))
        for k in sorted(k for k in keyframes if k > max(ids)):
            keyframe = keyframes[k]
            if previous is None or previous.pose_covariance is None \
                    or keyframe.step_covariance is None:
                break
            keyframe.pose_covariance = covariance.compose_covariance(
                previous.T_world_cam, previous.pose_covariance,
                invert_transform(previous.T_world_cam) @ keyframe.T_world_cam,
                keyframe.step_covariance)
            previous = keyframe

    def begin_keyframe(self, stamp_ns: int, T_world_cam: np.ndarray,
                       hint_m: float | None = None) -> MapKeyframe:
        """Add the tracked frame to the map as a keyframe; :meth:`submit_keyframe` fills it.

        ``hint_m``: distance travelled since the previous keyframe by the translation hint
        (metres), used by the bundle adjustment of a ``'hinted'`` map; None: not known.
        """
        self.keyframes_inserted += 1
        return self.map.add_keyframe(stamp_ns, T_world_cam, hint_m)

    def submit_keyframe(self, matcher, reference: MapKeyframe, gray_reference: np.ndarray,
                        gray: np.ndarray, keyframe: MapKeyframe, matches: Matches,
                        point_ids: np.ndarray, camera: Camera,
                        depth: np.ndarray | None = None) -> None:
        """Complete the keyframe in the background (:meth:`complete_keyframe`).

        The work runs in this tracker's thread while the caller waits for the next frame;
        :meth:`finish_keyframe` must be called before the map is used again. The images must
        not change meanwhile.
        """
        self.finish_keyframe()
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix='relperception-keyframe')
        self._insertion = self._thread.submit(
            self.complete_keyframe, matcher, reference, gray_reference, gray, keyframe,
            matches, point_ids, camera, depth)

    def finish_keyframe(self) -> np.ndarray | None:
        """Wait for the keyframe submitted last; return its correction (see below) or None.

        The correction is the (4, 4) rigid transform the finished bundle adjustment applied
        to the newest adjusted keyframe, and so to the new keyframe and the frames after it;
        None when no keyframe was pending or no adjustment changed the map.

        A failure inside the insertion is logged and drops the map (tracking re-initialises).
        """
        if self._insertion is None:
            return None
        future, self._insertion = self._insertion, None
        try:
            return future.result()
        except (ValueError, RuntimeError, cv2.error, np.linalg.LinAlgError,
                FloatingPointError) as error:
            logger.warning('keyframe insertion failed (%s): the map is dropped', error)
            self._insertion_failures += 1
            self.reset()
            return None

    def complete_keyframe(self, matcher, reference: MapKeyframe, gray_reference: np.ndarray,
                          gray: np.ndarray, keyframe: MapKeyframe, matches: Matches,
                          point_ids: np.ndarray, camera: Camera,
                          depth: np.ndarray | None = None) -> np.ndarray | None:
        """Fill a keyframe from :meth:`begin_keyframe`: new observations and points, then BA.

        The keyframe's own keypoints are matched back into the reference keyframe (while the
        previous bundle adjustment still runs); then that adjustment is written into the map
        (the new keyframe moves with the newest adjusted keyframe), the matched keypoints
        re-observe map points or become new points (see the module docstring), and the next
        bundle adjustment starts.

        Args:
            matcher: the matcher (its ``match`` runs frame -> reference keyframe once).
            reference: the reference keyframe the frame was tracked against.
            gray_reference: (H, W) uint8 image of the reference keyframe.
            gray: (H, W) uint8 image of the frame.
            keyframe: the frame's keyframe from :meth:`begin_keyframe`.
            matches: the tracking matches reference -> frame.
            point_ids: (N,) map point of each tracking match that was a PnP inlier, -1 else.
            camera: intrinsics.
            depth: (H, W) float32 metres of the frame, NaN invalid (RGB-D map), or None.

        Returns:
            the correction of :meth:`join_adjustment` (None when the map did not move).
        """
        started = time.perf_counter()
        forward1 = matches.keypoints1.astype(np.float64)
        forward0 = matches.keypoints0.astype(np.float64)
        flow_tree = cKDTree(forward1) if len(forward1) else None

        def flow_prior(keypoints: np.ndarray) -> np.ndarray:
            keypoints = np.asarray(keypoints, dtype=np.float64).reshape(-1, 2)
            out = np.full(keypoints.shape, np.nan)
            if flow_tree is None:
                return out.astype(np.float32)
            distance, index = flow_tree.query(keypoints, k=min(4, len(forward1)),
                                              distance_upper_bound=_FLOW_PRIOR_RADIUS_PX)
            distance = distance.reshape(len(keypoints), -1)
            index = index.reshape(len(keypoints), -1)
            valid = np.isfinite(distance)
            shifts = np.zeros((len(keypoints), 2))
            counts = valid.sum(axis=1)
            for column in range(index.shape[1]):
                rows = valid[:, column]
                shifts[rows] += (forward0[index[rows, column]] - forward1[index[rows, column]])
            has = counts > 0
            out[has] = keypoints[has] + shifts[has] / counts[has, None]
            return out.astype(np.float32)

        try:
            reverse = matcher.match(gray, gray_reference, predict=flow_prior)
        except (ValueError, cv2.error, np.linalg.LinAlgError, FloatingPointError) as error:
            logger.warning('keyframe matching failed: %s', error)
            reverse = Matches.empty()
        # The match needs no pose, so it overlaps the running adjustment; the rest does.
        correction = self.join_adjustment()
        T_world_cam = keyframe.T_world_cam
        stamp_ns = keyframe.stamp_ns
        own = reverse.keypoints0.astype(np.float64)
        in_reference = reverse.keypoints1.astype(np.float64)
        ids = np.full(len(own), -1, dtype=np.int64)
        rotation_only = False
        use_depth = self.kind == 'rgbd' and depth is not None
        own_cam = geometry.backproject(own, depth, camera) if use_depth and len(own) \
            else np.full((len(own), 3), np.nan)
        readings = own_cam[:, 2]
        if len(own):
            tracked = point_ids >= 0
            if np.any(tracked):
                distance, index = cKDTree(forward1[tracked]).query(
                    own, distance_upper_bound=_ASSOCIATION_PX)
                hit = np.isfinite(distance)
                ids[hit] = point_ids[tracked][index[hit]]
            if reference.tree is not None:
                distance, index = reference.tree.query(in_reference,
                                                       distance_upper_bound=_ASSOCIATION_PX)
                hit = np.isfinite(distance) & (ids < 0)
                ids[hit] = reference.point_ids[index[hit]]
            ids[~self.map.known(ids)] = -1
            # One keypoint per point, and only where the point reprojects onto it.
            first = np.zeros(len(ids), dtype=bool)
            _, unique_index = np.unique(ids, return_index=True)
            first[unique_index] = True
            ids[~first] = -1
            known = np.flatnonzero(ids >= 0)
            if len(known):
                T_cam_world = invert_transform(T_world_cam)
                points = self.map.points_world(ids[known])
                projected = geometry.project(points @ T_cam_world[:3, :3].T
                                             + T_cam_world[:3, 3], camera)
                error = np.linalg.norm(projected - own[known], axis=1)
                bad = ~(np.nan_to_num(error, nan=np.inf) <= self.max_point_error_px)
                ids[known[bad]] = -1
            for i in np.flatnonzero(ids >= 0):
                self.map.add_observation(ids[i], keyframe.keyframe_id, own[i], readings[i])
            reobserved = int(np.count_nonzero(ids >= 0))
            new = np.flatnonzero(ids < 0)
            if use_depth:   # metric points from depth only: triangulation is far less precise
                points, good = self._points_from_depth(
                    own_cam[new], in_reference[new], T_world_cam, reference.T_world_cam, camera)
            elif self._rotation_only(in_reference, own, reference.T_world_cam, T_world_cam,
                                     camera):
                # A rotation explains the views (a turn on the spot): the baseline between the
                # poses is tracking error, and points triangulated on it take its length.
                points, good = np.zeros((len(new), 3)), np.zeros(len(new), dtype=bool)
                rotation_only = True
            else:
                points, good = triangulate_checked(
                    in_reference[new], own[new], reference.T_world_cam, T_world_cam, camera,
                    self.conf['map_min_angle_deg'], self.max_point_error_px)
            for row in np.flatnonzero(good):
                i = new[row]
                ids[i] = self.map.add_point(points[row], {
                    reference.keyframe_id: in_reference[i],
                    keyframe.keyframe_id: (*own[i], readings[i])})
            created = int(np.count_nonzero(good))
        else:
            reobserved = created = 0
        self.points_created += created
        self.map.set_landmarks(keyframe, own[ids >= 0], ids[ids >= 0])
        note = self._speed_check(stamp_ns, T_world_cam)
        self._start_adjustment(camera)
        self._insertion_ms.append(1e3 * (time.perf_counter() - started))
        note = f'keyframe: {reobserved} map points seen again, {created} new' + (
            ' (a rotation explains the views: no new points)' if rotation_only else '') + note
        logger.debug('keyframe %d: %s', stamp_ns, note)
        return correction

    def _rotation_only(self, pixels_reference: np.ndarray, pixels: np.ndarray,
                       T_world_reference: np.ndarray, T_world_cam: np.ndarray,
                       camera: Camera) -> bool:
        """Whether the camera only rotated between the reference keyframe and the keyframe.

        True when the matches ``pixels_reference`` -> ``pixels`` (N, 2) leave less than
        ``ROTATION_PARALLAX_FRACTION * map_min_angle_deg`` of median parallax after the
        best-fitting rotation, and the tracked poses rotated by about that rotation (a
        camera moving sideways past a wall also fits a rotation, but its poses do not turn).
        """
        parallax, R_fit = rotation_parallax_deg(pixels_reference, pixels, camera)
        if not parallax < ROTATION_PARALLAX_FRACTION * self.conf['map_min_angle_deg']:
            return False
        fitted = Rotation.from_matrix(R_fit)
        tracked = Rotation.from_matrix(T_world_cam[:3, :3].T @ T_world_reference[:3, :3])
        return (fitted.inv() * tracked).magnitude() <= 0.5 * fitted.magnitude()

    def _points_from_depth(self, points_cam: np.ndarray, pixels_reference: np.ndarray,
                           T_world_cam: np.ndarray, T_world_reference: np.ndarray,
                           camera: Camera) -> tuple[np.ndarray, np.ndarray]:
        """Place back-projected points (N, 3, camera frame, NaN none) in the world.

        Returns ``(points_world (N, 3), good (N,) bool)``: good where the point is finite and
        reprojects onto its match ``pixels_reference`` (N, 2) in the other view
        ``T_world_reference``.
        """
        points_world = points_cam @ T_world_cam[:3, :3].T + T_world_cam[:3, 3]
        T_reference_world = invert_transform(T_world_reference)
        points_reference = points_world @ T_reference_world[:3, :3].T + T_reference_world[:3, 3]
        with np.errstate(invalid='ignore'):
            error = np.linalg.norm(geometry.project(points_reference, camera)
                                   - pixels_reference, axis=1)
            good = (np.isfinite(points_world).all(axis=1) & (points_reference[:, 2] > 0)
                    & (np.nan_to_num(error, nan=np.inf) <= self.max_point_error_px))
        return points_world, good

    def _speed_check(self, stamp_ns: int, T_world_cam: np.ndarray) -> str:
        """Count a keyframe-to-keyframe speed change beyond SCALE_JUMP_FACTOR."""
        note = ''
        if self._last_keyframe is not None:
            stamp0, centre0 = self._last_keyframe
            dt = (stamp_ns - stamp0) * 1e-9
            if dt > 0:
                speed = float(np.linalg.norm(T_world_cam[:3, 3] - centre0)) / dt
                last = self._last_speed
                if last is not None and last > 0 and speed > 0 and \
                        max(speed / last, last / speed) > SCALE_JUMP_FACTOR:
                    self.scale_jumps += 1
                    note = (f'; speed changed {speed / last:.2f}x between keyframes '
                            '(scale jump or real acceleration)')
                self._last_speed = speed
        self._last_keyframe = (stamp_ns, T_world_cam[:3, 3].copy())
        return note

    def _start_adjustment(self, camera: Camera) -> None:
        window = self.conf['ba_window_keyframes']
        if window < 3 or self.ba_unavailable:
            return
        metric = self.kind in ('rgbd', 'hinted')
        problem = self.map.window_problem(window, self.conf['ba_max_points'],
                                          num_fixed=1 if metric else 2)
        if problem is None or not np.any(~problem.fixed):
            return
        if self.kind == 'hinted' and not len(problem.distances):
            # No measured distance in the window: two fixed keyframes keep its scale.
            problem = self.map.window_problem(window, self.conf['ba_max_points'], num_fixed=2)
            if problem is None or not np.any(~problem.fixed):
                return
        future = submit_bundle_adjustment(
            problem.T_cam_world, problem.points_world, problem.camera_index,
            problem.point_index, problem.pixels, camera, problem.fixed,
            huber_px=self.conf['ransac_threshold_px'],
            max_iterations=self.conf['ba_max_iterations'],
            depths=problem.depths if self.kind == 'rgbd' else None,
            depth_sigma_rel=self.conf['depth_sigma_rel'],
            distances=problem.distances if self.kind == 'hinted' else None,
            distance_sigma_rel=self.conf['hint_sigma_rel'], covariances=True)
        self._pending = (problem, future)
