# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The local map of visual odometry: keyframes, 3-D points and their observations.

* A **keyframe** has an id, a stamp, a pose ``T_world_cam`` and a *landmark table*: its own
  keypoints (the pixels a matcher returns as ``keypoints0`` when the keyframe is image 0;
  repeatable, since matchers detect them deterministically) with the id of the map point
  each one observes. :meth:`LocalMap.lookup` turns matched keyframe pixels into point ids.
* A **map point** has a world position and its observations ``{keyframe id: (u, v, depth)}``:
  the pixel, and the depth reading (metres) at it where the keyframe had a depth image (RGB-D),
  else NaN. Depth readings enter the bundle adjustment as residuals of their own.

The map keeps the newest ``max_keyframes`` keyframes; points no kept keyframe observes are
dropped. :meth:`LocalMap.window_problem` and :meth:`LocalMap.apply_adjustment` move the last
keyframes and their points in and out of
:func:`~relperception.odometry.bundle_adjustment.bundle_adjust`.

:func:`triangulate_checked` creates points from two posed views with the checks a point must
pass to enter the map (positive depth in both views, parallax angle, reprojection error).
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
from relperception.core_types import Camera
from relperception.odometry import geometry
from relperception.transforms import invert_transform, nearest_rigid
from relperception.validation import as_rows
from scipy.spatial import cKDTree
from scipy.spatial.transform import Rotation

#: Largest distance (pixels) between a matched keyframe pixel and a landmark-table keypoint
#: for the two to be the same keypoint (matchers return the keypoints themselves).
SAME_KEYPOINT_PX = 0.25


@dataclasses.dataclass
class MapKeyframe:
    """A keyframe of the map (see the module docstring)."""

    keyframe_id: int
    stamp_ns: int
    T_world_cam: np.ndarray
    keypoints: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 2)))
    point_ids: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(0, dtype=np.int64))
    tree: cKDTree | None = None
    #: Distance (metres) from the previous keyframe's centre by another sensor (wheel
    #: odometry), or None.
    hint_m: float | None = None
    #: (6, 6) covariance of ``T_world_cam`` (:mod:`relperception.odometry.covariance`): set by
    #: the tracker at insertion, refined by bundle adjustment; None: not known.
    pose_covariance: np.ndarray | None = None
    #: (6, 6) covariance of the step from the previous keyframe (``T_previous_this``, in the
    #: previous keyframe's axes), set by the tracker at insertion; None: not known.
    step_covariance: np.ndarray | None = None


@dataclasses.dataclass
class WindowProblem:
    """A snapshot of the last keyframes for bundle adjustment (arrays are copies).

    Attributes:
        keyframe_ids: (C,) ids of the cameras, window and fixed observers.
        T_cam_world: (C, 4, 4) poses.
        fixed: (C,) bool gauge and out-of-window cameras.
        point_ids: (P,) ids of the points.
        points_world: (P, 3) positions.
        camera_index, point_index: (M,) int indices of every observation.
        pixels: (M, 2) observed pixels.
        depths: (M,) depth readings of the observations (metres), NaN where none.
        distances: (K, 3) ``(camera index, camera index, metres)``: measured distances between
            consecutive keyframes (their ``hint_m``) whose cameras are both in the problem.
    """

    keyframe_ids: np.ndarray
    T_cam_world: np.ndarray
    fixed: np.ndarray
    point_ids: np.ndarray
    points_world: np.ndarray
    camera_index: np.ndarray
    point_index: np.ndarray
    pixels: np.ndarray
    depths: np.ndarray
    distances: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 3)))


def _observation(pixel, depth=None) -> np.ndarray:
    """Return an observation row (u, v, depth) from a (2,) pixel or a (3,) row."""
    row = np.asarray(pixel, dtype=np.float64).reshape(-1)
    if len(row) == 3 and depth is None:
        return row.copy()
    if len(row) != 2:
        raise ValueError(f'a pixel must be (2,) or (u, v, depth), got {row.shape}')
    depth = np.nan if depth is None else float(depth)
    return np.array([row[0], row[1], depth if np.isfinite(depth) and depth > 0 else np.nan])


class LocalMap:
    """Keyframes and points of the local map (see the module docstring).

    Args:
        max_keyframes: keyframes kept (the oldest are dropped with the points only they saw).
    """

    def __init__(self, max_keyframes: int):
        """Start empty."""
        if int(max_keyframes) < 2:
            raise ValueError(f'max_keyframes must be >= 2, got {max_keyframes}')
        self.max_keyframes = int(max_keyframes)
        self.clear()

    def clear(self) -> None:
        """Forget every keyframe and point (ids keep counting up)."""
        self.keyframes: collections.OrderedDict[int, MapKeyframe] = collections.OrderedDict()
        self.points: dict[int, np.ndarray] = {}
        self.observations: dict[int, dict[int, np.ndarray]] = {}
        if not hasattr(self, '_next_keyframe'):
            self._next_keyframe = 0
            self._next_point = 0

    @property
    def num_points(self) -> int:
        """Number of map points."""
        return len(self.points)

    # ------------------------------------------------------------------ keyframes

    def add_keyframe(self, stamp_ns: int, T_world_cam: np.ndarray,
                     hint_m: float | None = None) -> MapKeyframe:
        """Add a keyframe (empty landmark table) and drop the oldest beyond ``max_keyframes``.

        ``hint_m``: the distance from the previous keyframe measured by another sensor
        (metres), or None.
        """
        if hint_m is not None and not (np.isfinite(hint_m) and hint_m >= 0):
            raise ValueError(f'hint_m must be a distance >= 0 or None, got {hint_m}')
        keyframe = MapKeyframe(self._next_keyframe, int(stamp_ns),
                               np.array(T_world_cam, dtype=np.float64),
                               hint_m=None if hint_m is None else float(hint_m))
        self._next_keyframe += 1
        self.keyframes[keyframe.keyframe_id] = keyframe
        while len(self.keyframes) > self.max_keyframes:
            _, old = self.keyframes.popitem(last=False)
            seen = {int(i) for i in old.point_ids if i >= 0} | self._seen_by(old.keyframe_id)
            for point_id in seen:
                views = self.observations.get(point_id)
                if views is not None:
                    views.pop(old.keyframe_id, None)
                    if not any(k in self.keyframes for k in views):
                        self.remove_point(point_id)
        return keyframe

    def _seen_by(self, keyframe_id: int) -> set:
        return {pid for pid, views in self.observations.items() if keyframe_id in views}

    def set_landmarks(self, keyframe: MapKeyframe, keypoints, point_ids) -> None:
        """Set the landmark table of ``keyframe``: (N, 2) own keypoints and (N,) point ids."""
        keypoints = as_rows('keypoints', keypoints, 2)
        point_ids = np.asarray(point_ids, dtype=np.int64)
        if point_ids.shape != (len(keypoints),):
            raise ValueError(f'point_ids must be ({len(keypoints)},), got {point_ids.shape}')
        keyframe.keypoints = keypoints.copy()
        keyframe.point_ids = point_ids.copy()
        keyframe.tree = cKDTree(keypoints) if len(keypoints) else None

    def lookup(self, keyframe: MapKeyframe, pixels) -> np.ndarray:
        """Return the (N,) point ids at ``pixels`` (N, 2) of ``keyframe``, -1 where none."""
        pixels = as_rows('pixels', pixels, 2)
        ids = np.full(len(pixels), -1, dtype=np.int64)
        if keyframe.tree is None or len(pixels) == 0:
            return ids
        finite = np.isfinite(pixels).all(axis=1)
        distance, index = keyframe.tree.query(pixels[finite],
                                              distance_upper_bound=SAME_KEYPOINT_PX)
        hit = np.isfinite(distance)
        found = np.full(np.count_nonzero(finite), -1, dtype=np.int64)
        found[hit] = keyframe.point_ids[index[hit]]
        ids[finite] = found
        ids[~self.known(ids)] = -1
        return ids

    def known(self, point_ids) -> np.ndarray:
        """Return the (N,) bool mask of ``point_ids`` (N,) that are points of the map."""
        point_ids = np.asarray(point_ids, dtype=np.int64).reshape(-1)
        return np.fromiter((int(i) in self.points for i in point_ids), dtype=bool,
                           count=len(point_ids))

    # ------------------------------------------------------------------ points

    def add_point(self, xyz_world, views: dict) -> int:
        """Add a point at ``xyz_world`` (3,) seen at ``views`` {keyframe id: observation}.

        An observation is a (2,) pixel or a (3,) ``(u, v, depth)`` row (depth in metres, NaN
        none).
        """
        point_id = self._next_point
        self._next_point += 1
        self.points[point_id] = np.asarray(xyz_world, dtype=np.float64).reshape(3).copy()
        self.observations[point_id] = {int(k): _observation(v) for k, v in views.items()}
        return point_id

    def add_observation(self, point_id: int, keyframe_id: int, pixel,
                        depth: float | None = None) -> None:
        """Record that keyframe ``keyframe_id`` sees point ``point_id`` at ``pixel`` (2,).

        ``depth``: the depth reading at the pixel (metres), None or NaN when there is none.
        """
        self.observations[int(point_id)][int(keyframe_id)] = _observation(pixel, depth)

    def remove_point(self, point_id: int) -> None:
        """Drop a point and its observations (landmark tables are filtered by lookup)."""
        self.points.pop(int(point_id), None)
        self.observations.pop(int(point_id), None)

    def points_world(self, point_ids) -> np.ndarray:
        """Return (N, 3) positions of ``point_ids`` (N,), NaN rows for -1 or unknown ids."""
        point_ids = np.asarray(point_ids, dtype=np.int64).reshape(-1)
        out = np.full((len(point_ids), 3), np.nan)
        for row, point_id in enumerate(point_ids):
            xyz = self.points.get(int(point_id))
            if xyz is not None:
                out[row] = xyz
        return out

    # ------------------------------------------------------------------ bundle adjustment

    def window_problem(self, window: int, max_points: int,
                       num_fixed: int = 2) -> WindowProblem | None:
        """Return the last ``window`` keyframes and their points as a BA problem, or None.

        The oldest ``num_fixed`` window keyframes and every older keyframe that observes a
        window point are fixed. Points need two observations by kept keyframes; the
        ``max_points`` with the most observations are taken (the rest keep their positions).
        None when there are fewer than ``num_fixed + 1`` keyframes or no point.
        """
        ids = list(self.keyframes)[-int(window):]
        if len(ids) <= num_fixed:
            return None
        in_window = set(ids)
        candidates = []
        for pid, views in self.observations.items():
            if in_window.intersection(views):
                seen = sum(k in self.keyframes for k in views)
                if seen >= 2:
                    candidates.append((-seen, pid))
        point_ids = sorted(pid for _, pid in sorted(candidates)[:int(max_points)])
        if not point_ids:
            return None
        observers = sorted({k for pid in point_ids for k in self.observations[pid]
                            if k in self.keyframes})
        camera_slot = {k: i for i, k in enumerate(observers)}
        fixed = np.array([k not in in_window or k in ids[:num_fixed] for k in observers])
        camera_index, point_index, rows = [], [], []
        for p, pid in enumerate(point_ids):
            for k, row in self.observations[pid].items():
                if k in camera_slot:
                    camera_index.append(camera_slot[k])
                    point_index.append(p)
                    rows.append(row)
        rows = np.array(rows, dtype=np.float64).reshape(-1, 3)
        distances = []
        order = list(self.keyframes)
        for before, after in zip(order[:-1], order[1:]):
            hint = self.keyframes[after].hint_m
            if hint is not None and before in camera_slot and after in camera_slot:
                distances.append((camera_slot[before], camera_slot[after], hint))
        return WindowProblem(
            keyframe_ids=np.array(observers, dtype=np.int64),
            T_cam_world=np.stack([invert_transform(self.keyframes[k].T_world_cam)
                                  for k in observers]),
            fixed=fixed, point_ids=np.array(point_ids, dtype=np.int64),
            points_world=np.stack([self.points[p] for p in point_ids]),
            camera_index=np.array(camera_index, dtype=np.int64),
            point_index=np.array(point_index, dtype=np.int64),
            pixels=rows[:, :2].copy(), depths=rows[:, 2].copy(),
            distances=np.array(distances, dtype=np.float64).reshape(-1, 3))

    def apply_adjustment(self, problem: WindowProblem, T_cam_world: np.ndarray,
                         points_world: np.ndarray, residuals_px: np.ndarray,
                         max_error_px: float) -> np.ndarray | None:
        """Write refined poses and points back; drop observations above ``max_error_px``.

        Keyframes added since the snapshot move rigidly with the newest keyframe of the
        problem. Points that were not in the problem (``max_points``, or created since) move
        rigidly with the newest of their keyframes that moved, so they stay consistent with
        it. Keyframes or points removed since the snapshot are skipped. A point left with fewer
        than two observations is dropped.

        Returns:
            (4, 4) the rigid correction ``T_world_new @ T_old_world`` of the newest keyframe
            of the problem (which the later keyframes received), None if it was removed.
        """
        corrections = {}
        for k, T in zip(problem.keyframe_ids, T_cam_world):
            keyframe = self.keyframes.get(int(k))
            if keyframe is not None:
                T_world_new = nearest_rigid(invert_transform(T))
                corrections[int(k)] = T_world_new @ invert_transform(keyframe.T_world_cam)
                keyframe.T_world_cam = T_world_new
        newest = int(np.max(problem.keyframe_ids))
        correction_newest = corrections.get(newest)
        if correction_newest is not None:
            for k, keyframe in self.keyframes.items():
                if k > newest:
                    keyframe.T_world_cam = correction_newest @ keyframe.T_world_cam
                    corrections[k] = correction_newest
        adjusted = {int(pid) for pid in problem.point_ids}
        for pid, views in self.observations.items():
            if pid in adjusted:
                continue
            moved = [k for k in views if k in corrections]
            if moved:
                correction = corrections[max(moved)]
                self.points[pid] = correction[:3, :3] @ self.points[pid] + correction[:3, 3]
        for pid, xyz in zip(problem.point_ids, points_world):
            if int(pid) in self.points:
                self.points[int(pid)] = xyz.copy()
        bad = residuals_px > max_error_px
        for obs in np.flatnonzero(bad):
            pid = int(problem.point_ids[problem.point_index[obs]])
            views = self.observations.get(pid)
            if views is not None:
                views.pop(int(problem.keyframe_ids[problem.camera_index[obs]]), None)
        for pid in {int(problem.point_ids[problem.point_index[o]]) for o in np.flatnonzero(bad)}:
            if pid in self.observations and len(self.observations[pid]) < 2:
                self.remove_point(pid)
        return correction_newest


def triangulate_checked(pixels_a, pixels_b, T_world_a: np.ndarray, T_world_b: np.ndarray,
                        camera: Camera, min_angle_deg: float,
                        max_error_px: float) -> tuple[np.ndarray, np.ndarray]:
    """Triangulate correspondences of two posed views and check every point.

    Args:
        pixels_a: (N, 2) pixels in view a.
        pixels_b: (N, 2) pixels of the same points in view b.
        T_world_a: (4, 4) pose of view a.
        T_world_b: (4, 4) pose of view b.
        camera: intrinsics of both views.
        min_angle_deg: smallest angle between the two viewing rays (parallax).
        max_error_px: largest reprojection error in either view.

    Returns:
        ``(points_world (N, 3), good (N,) bool)``: a point is good when it is finite, in front
        of both cameras, seen under at least ``min_angle_deg`` and reprojects within
        ``max_error_px`` in both views.
    """
    pixels_a = as_rows('pixels_a', pixels_a, 2)
    pixels_b = as_rows('pixels_b', pixels_b, 2)
    T_b_a = invert_transform(T_world_b) @ T_world_a
    points_a = geometry.triangulate(pixels_a, pixels_b, T_b_a, camera)
    points_b = points_a @ T_b_a[:3, :3].T + T_b_a[:3, 3]
    points_world = points_a @ T_world_a[:3, :3].T + T_world_a[:3, 3]
    with np.errstate(invalid='ignore'):
        good = np.isfinite(points_a).all(axis=1) & (points_a[:, 2] > 0) & (points_b[:, 2] > 0)
        good &= ray_angles_deg(points_world, T_world_a, T_world_b) >= min_angle_deg
        error_a = np.linalg.norm(geometry.project(points_a, camera) - pixels_a, axis=1)
        error_b = np.linalg.norm(geometry.project(points_b, camera) - pixels_b, axis=1)
        good &= (error_a <= max_error_px) & (error_b <= max_error_px)
    return points_world, good


def ray_angles_deg(points_world, T_world_a: np.ndarray, T_world_b: np.ndarray) -> np.ndarray:
    """Return the parallax of points: the angle between their rays from two camera centres.

    Args:
        points_world: (N, 3) points in the world frame.
        T_world_a: (4, 4) pose of view a.
        T_world_b: (4, 4) pose of view b.

    Returns:
        (N,) float64 degrees in [0, 180]; NaN for non-finite points or a point at a centre.
    """
    points_world = as_rows('points_world', points_world, 3)
    rays_a = points_world - T_world_a[:3, 3]
    rays_b = points_world - T_world_b[:3, 3]
    with np.errstate(invalid='ignore', divide='ignore'):
        cosine = np.sum(rays_a * rays_b, axis=1) / (
            np.linalg.norm(rays_a, axis=1) * np.linalg.norm(rays_b, axis=1))
        return np.rad2deg(np.arccos(np.clip(cosine, -1.0, 1.0)))


def rotation_parallax_deg(pixels_a, pixels_b, camera: Camera) -> tuple[float, np.ndarray]:
    """Return the median parallax that no rotation of the camera explains, and that rotation.

    The rotation that best maps the viewing rays of ``pixels_a`` onto those of ``pixels_b``
    is fitted (least squares on unit rays, scipy's ``Rotation.align_vectors``, refitted once
    on the better half); what is left
    is the angle between each ray of b and its rotated ray of a. A camera that only rotated
    between the views (a turn on the spot) leaves pixel noise only, whatever poses the
    tracking gave the views; any translation leaves the parallax of the scene.

    Args:
        pixels_a: (N, 2) pixels in view a.
        pixels_b: (N, 2) the same points' pixels in view b.
        camera: intrinsics of both views.

    Returns:
        ``(parallax_deg, R_b_a)``: the median residual angle in degrees and the (3, 3)
        fitted rotation taking view a's rays to view b's; NaN and the identity with fewer
        than 3 finite pairs.
    """
    pixels_a = as_rows('pixels_a', pixels_a, 2)
    pixels_b = as_rows('pixels_b', pixels_b, 2)
    if len(pixels_a) != len(pixels_b):
        raise ValueError(f'pixels_a and pixels_b differ in length: '
                         f'{len(pixels_a)} != {len(pixels_b)}')
    rays_a = geometry.normalized_rays(pixels_a, camera)
    rays_b = geometry.normalized_rays(pixels_b, camera)
    finite = np.isfinite(rays_a).all(axis=1) & np.isfinite(rays_b).all(axis=1)
    if np.count_nonzero(finite) < 3:
        return float('nan'), np.eye(3)
    rays_a = rays_a[finite] / np.linalg.norm(rays_a[finite], axis=1, keepdims=True)
    rays_b = rays_b[finite] / np.linalg.norm(rays_b[finite], axis=1, keepdims=True)
    use = np.ones(len(rays_a), dtype=bool)
    for _ in range(2):
        R_b_a = Rotation.align_vectors(rays_b[use], rays_a[use])[0].as_matrix()
        cosine = np.sum(rays_b * (rays_a @ R_b_a.T), axis=1)
        angles = np.rad2deg(np.arccos(np.clip(cosine, -1.0, 1.0)))
        use = angles <= np.median(angles)
    return float(np.median(angles)), R_b_a
