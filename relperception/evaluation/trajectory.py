# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Trajectory evaluation with evo: TUM files, time association, alignment, ATE, RPE, drift.

Every metric comes from evo (``evo.core.sync``, ``evo.core.metrics.APE`` / ``RPE``,
``PoseTrajectory3D.align``); this module only converts our conventions (integer nanosecond
stamps, ``T_world_cam`` 4x4 float64 arrays) to evo's and collects the numbers in one dict.

Drift (``drift_percent``, ``rot_drift_deg_per_m``) follows the KITTI odometry devkit: for a
set of path lengths, every sub-sequence of the ground truth of (about) that length is
compared with the estimate; the translational error of the relative motion divided by the
ground-truth path length of the segment is averaged over all segments of all lengths. KITTI
uses 100, 200, ..., 800 m; our development sequences are 5-60 m long, so the lengths are
10 %, 20 %, ..., 80 % of the matched ground-truth path length (8 steps), and a segment is
accepted when its length is within 10 % of the nominal one (evo's path-distance filter).
"""

from __future__ import annotations

import copy
from decimal import Decimal, InvalidOperation
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
from relperception.atomic_files import write_text_atomic
from relperception.transforms import quaternion_xyzw_from_transform

logger = logging.getLogger(__name__)

#: Key of the per-pose arrays in the result of :func:`evaluate_trajectory` (not for JSON).
PER_POSE_KEY = 'per_pose'

#: Fractions of the path length used as KITTI-style drift segment lengths.
DRIFT_LENGTH_FRACTIONS = tuple(np.linspace(0.1, 0.8, 8))

_ALIGNMENTS = ('se3', 'sim3', 'none')
_NS_PER_S = 1_000_000_000


def min_associated_poses(alignment: str) -> int:
    """Return how many associated poses :func:`evaluate_trajectory` needs with ``alignment``.

    2 without alignment (``'none'``), 3 to align (``'se3'``, ``'sim3'``).

    Raises:
        ValueError: an unknown alignment.
    """
    if alignment not in _ALIGNMENTS:
        raise ValueError(f'alignment must be one of {_ALIGNMENTS}, got {alignment!r}')
    return 2 if alignment == 'none' else 3


# --------------------------------------------------------------------------------------------
# input checks and conversions
# --------------------------------------------------------------------------------------------
def _check_poses(name: str, stamps_ns, T_world_cam) -> tuple[np.ndarray, np.ndarray]:
    stamps = np.asarray(stamps_ns)
    poses = np.asarray(T_world_cam, dtype=np.float64)
    if stamps.ndim != 1 or len(stamps) == 0:
        raise ValueError(f'{name}: stamps must be a non-empty (N,) array, got shape '
                         f'{stamps.shape}')
    if not np.issubdtype(stamps.dtype, np.integer):
        if not np.issubdtype(stamps.dtype, np.floating):
            raise ValueError(f'{name}: stamps must be integer nanoseconds, got {stamps.dtype}')
        if not np.all(np.isfinite(stamps)):
            raise ValueError(f'{name}: stamps contain NaN or inf')
        if not np.array_equal(stamps, np.round(stamps)):
            raise ValueError(f'{name}: stamps must be integer nanoseconds, got fractional '
                             f'values (e.g. {stamps[0]!r}; seconds?)')
    stamps = stamps.astype(np.int64)
    if len(np.unique(stamps)) != len(stamps):
        raise ValueError(f'{name}: {len(stamps) - len(np.unique(stamps))} stamps are repeated')
    if poses.ndim != 3 or poses.shape[1:] != (4, 4) or len(poses) != len(stamps):
        raise ValueError(f'{name}: poses must have shape ({len(stamps)}, 4, 4) to match the '
                         f'stamps, got {poses.shape}')
    if not np.all(np.isfinite(poses)):
        raise ValueError(f'{name}: poses contain NaN or inf')
    rotations = poses[:, :3, :3]
    eye = np.broadcast_to(np.eye(3), rotations.shape)
    if not np.allclose(rotations @ np.transpose(rotations, (0, 2, 1)), eye, atol=1e-4):
        raise ValueError(f'{name}: poses must be rigid transforms (orthonormal rotation)')
    if np.any(np.linalg.det(rotations) < 0):
        raise ValueError(f'{name}: poses must be rotations, not reflections (det(R) = -1)')
    if not np.allclose(poses[:, 3], [0.0, 0.0, 0.0, 1.0]):
        raise ValueError(f'{name}: the last row of every pose must be [0, 0, 0, 1]')
    return stamps, poses


def _segment_lookup(stamps_ns: np.ndarray, segment_ids) -> dict[int, int]:
    """Return ``{stamp_ns: segment id}`` of the estimate (all 0 when ``segment_ids`` is None)."""
    if segment_ids is None:
        return {}
    ids = np.asarray(segment_ids)
    if ids.shape != stamps_ns.shape or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f'segment_ids must be ({len(stamps_ns)},) integers like the estimate '
                         f'stamps, got {ids.dtype} {ids.shape}')
    return dict(zip(stamps_ns.tolist(), ids.tolist()))


def _to_evo(stamps_ns: np.ndarray, T_world_cam: np.ndarray, origin_ns: int, name: str):
    from evo.core.trajectory import PoseTrajectory3D

    # Seconds relative to a common origin keep float64 precision far below 1 us.
    seconds = (stamps_ns - origin_ns).astype(np.float64) / _NS_PER_S
    return PoseTrajectory3D(poses_se3=list(T_world_cam), timestamps=seconds, name=name)


def _range_text(stamps_ns: np.ndarray) -> str:
    return f'[{stamps_ns.min() / _NS_PER_S:.6f}, {stamps_ns.max() / _NS_PER_S:.6f}] s'


# --------------------------------------------------------------------------------------------
# TUM files
# --------------------------------------------------------------------------------------------
def _parse_stamp_ns(text: str) -> int:
    try:
        return int((Decimal(text) * _NS_PER_S).to_integral_value())
    except InvalidOperation as exc:
        raise ValueError(f'not a timestamp: {text!r}') from exc


def _format_stamp_ns(stamp_ns: int) -> str:
    stamp_ns = int(stamp_ns)
    sign = '-' if stamp_ns < 0 else ''
    seconds, nanoseconds = divmod(abs(stamp_ns), _NS_PER_S)
    return f'{sign}{seconds}.{nanoseconds:09d}'


def read_tum(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a TUM trajectory file (``timestamp tx ty tz qx qy qz qw`` per line).

    Lines starting with ``#`` and blank lines are skipped. Timestamps are parsed as decimal
    text, so nanoseconds survive exactly.

    Args:
        path: text file; timestamps in seconds, translation in metres, scalar-last quaternion.

    Returns:
        ``(stamps_ns, T_world_cam)``: (N,) int64 nanoseconds and (N, 4, 4) float64 poses.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: on a malformed line (with its number) or an empty file.
    """
    from relperception.transforms import transform_from_quaternion_xyzw

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'trajectory file not found: {path}')
    stamps, poses = [], []
    with open(path, encoding='utf-8') as stream:
        for number, line in enumerate(stream, start=1):
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            fields = line.replace(',', ' ').split()
            if len(fields) != 8:
                raise ValueError(f'{path}:{number}: expected 8 values '
                                 f'(timestamp tx ty tz qx qy qz qw), got {len(fields)}')
            try:
                values = np.array([float(v) for v in fields[1:]])
                stamps.append(_parse_stamp_ns(fields[0]))
                poses.append(transform_from_quaternion_xyzw(values[:3], values[3:]))
            except ValueError as exc:
                raise ValueError(f'{path}:{number}: {exc}') from exc
    if not stamps:
        raise ValueError(f'{path}: no poses in file')
    return np.asarray(stamps, dtype=np.int64), np.stack(poses)


def write_tum(path: str | Path, stamps_ns, T_world_cam) -> None:
    """Write poses as a TUM trajectory file (``timestamp tx ty tz qx qy qz qw``).

    Args:
        path: output text file (parent folders are created).
        stamps_ns: (N,) int nanoseconds; written as seconds with 9 decimals (exact).
        T_world_cam: (N, 4, 4) float64 rigid transforms (metres).
    """
    stamps, poses = _check_poses('write_tum', stamps_ns, T_world_cam)
    lines = ['# timestamp tx ty tz qx qy qz qw']
    for stamp, T in zip(stamps, poses):
        q = quaternion_xyzw_from_transform(T)
        values = ' '.join(f'{v:.9f}' for v in (*T[:3, 3], *q))
        lines.append(f'{_format_stamp_ns(stamp)} {values}')
    write_text_atomic(path, '\n'.join(lines) + '\n')


# --------------------------------------------------------------------------------------------
# interpolation
# --------------------------------------------------------------------------------------------
def _interpolable(stamps: np.ndarray, query: np.ndarray, max_extrapolation_s: float,
                  max_gap_factor: float | None) -> np.ndarray:
    """Return (M,) bool: which ``query`` ns the sorted ``stamps`` cover (see interpolate_poses)."""
    tolerance_ns = round(max_extrapolation_s * _NS_PER_S)
    valid = (query >= stamps[0] - tolerance_ns) & (query <= stamps[-1] + tolerance_ns)
    if max_gap_factor is not None and len(stamps) > 2:
        intervals = np.diff(stamps)
        max_gap_ns = max_gap_factor * float(np.median(intervals))
        after = np.clip(np.searchsorted(stamps, query), 1, len(stamps) - 1)
        gap = (stamps[after] - stamps[after - 1]).astype(np.float64)
        near = np.minimum(np.abs(query - stamps[after - 1]), np.abs(stamps[after] - query))
        valid &= (gap <= max_gap_ns) | (near <= tolerance_ns)
    return valid


def interpolate_poses(stamps_ns, T_world_cam, query_stamps_ns,
                      max_extrapolation_s: float = 0.02,
                      max_gap_factor: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Interpolate poses at other stamps (linear position, slerp rotation; evo).

    Args:
        stamps_ns: (N,) int nanoseconds of the known poses (sorted or not).
        T_world_cam: (N, 4, 4) float64 known poses.
        query_stamps_ns: (M,) int nanoseconds to interpolate at.
        max_extrapolation_s: queries up to this far outside ``[stamps.min(), stamps.max()]``
            take the nearest end pose and are valid; further ones are marked invalid.
        max_gap_factor: if given (> 0), a query between two known poses more than this many
            times their median interval apart, and not within ``max_extrapolation_s`` of
            either, is marked invalid: ground truth is not made up across a gap.

    Returns:
        ``(T_world_cam_query, valid)``: (M, 4, 4) float64 and (M,) bool.
    """
    stamps, poses = _check_poses('interpolate_poses', stamps_ns, T_world_cam)
    if max_gap_factor is not None and not max_gap_factor > 0:
        raise ValueError(f'max_gap_factor must be > 0 or None, got {max_gap_factor}')
    query = np.asarray(query_stamps_ns).astype(np.int64).reshape(-1)
    order = np.argsort(stamps, kind='stable')
    stamps, poses = stamps[order], poses[order]
    valid = _interpolable(stamps, query, max_extrapolation_s, max_gap_factor)
    if len(query) == 0:
        return np.zeros((0, 4, 4)), valid
    if len(stamps) == 1:
        return np.repeat(poses, len(query), axis=0), valid
    origin = int(stamps[0])
    trajectory = _to_evo(stamps, poses, origin, 'interpolate')
    seconds = (query - origin).astype(np.float64) / _NS_PER_S
    result = trajectory.interpolate(seconds, extrapolate=False)
    return np.stack(result.poses_se3), valid


# --------------------------------------------------------------------------------------------
# time offset of the ground truth
# --------------------------------------------------------------------------------------------
#: Fewest frame-to-frame steps with ground truth for a time-offset estimate.
MIN_OFFSET_STEPS = 8


def _angular_rates(seconds: np.ndarray, rotations, steps: np.ndarray) -> np.ndarray:
    """Return the (K,) rad/s of the steps ``steps`` (pose i to pose i + 1).

    ``seconds`` (N,) float64, ``rotations`` a scipy ``Rotation`` of N.
    """
    dt = seconds[steps + 1] - seconds[steps]
    return (rotations[steps].inv() * rotations[steps + 1]).magnitude() / dt


def _correlation(a: np.ndarray, b: np.ndarray) -> float | None:
    """Pearson correlation of ``a`` and ``b``, None when either does not vary."""
    if len(a) < MIN_OFFSET_STEPS or np.std(a) < 1e-9 * (np.mean(np.abs(a)) + 1e-12) \
            or np.std(b) < 1e-9 * (np.mean(np.abs(b)) + 1e-12):
        return None
    return float(np.corrcoef(a, b)[0, 1])


def estimate_time_offset(stamps_est_ns, T_world_cam_est, stamps_gt_ns, T_world_cam_gt,
                         search_s: float, segment_ids=None,
                         max_gap_factor: float | None = None) -> dict[str, Any] | None:
    """Estimate the time offset of the ground truth against the estimate from their motion.

    The angular rate of the estimate from each frame to the next (within one tracking
    segment) is correlated with that of the ground truth interpolated (slerp, as
    :func:`interpolate_poses`) at the frame stamps minus a candidate offset. The angular rate
    depends neither on the world frame nor on the (monocular) scale, and monocular rotation is
    far better estimated than its speed, whose scale wanders. Candidates run over
    ``[-search_s, search_s]`` in steps of half the median frame interval (5-50 ms), then in
    ten times finer steps around the best, down to 1 ms.

    Args:
        stamps_est_ns: (N,) int nanoseconds of the estimated poses (sorted).
        T_world_cam_est: (N, 4, 4) float64 estimated poses (any world frame and scale).
        stamps_gt_ns: (M,) int nanoseconds of the ground truth.
        T_world_cam_gt: (M, 4, 4) float64 ground-truth poses (metres).
        search_s: largest offset tried (seconds, > 0).
        segment_ids: optional (N,) ints, see :func:`evaluate_trajectory`.
        max_gap_factor: see :func:`interpolate_poses`.

    Returns:
        None when the motion does not tell (too few steps with ground truth, no change of
        the angular rate), else a dict: ``offset_s`` (float, seconds to ADD to the
        ground-truth stamps so that they match the estimate), ``correlation`` (float, the
        correlation of the angular rates at that offset, -1..1), ``correlation_at_zero``
        (float or None) and ``steps`` (int, the steps compared).
    """
    from scipy.spatial.transform import Rotation, Slerp

    stamps, poses = _check_poses('estimate', stamps_est_ns, T_world_cam_est)
    gt_stamps, gt_poses = _check_poses('ground truth', stamps_gt_ns, T_world_cam_gt)
    if not search_s > 0:
        raise ValueError(f'search_s must be > 0, got {search_s}')
    if max_gap_factor is not None and not max_gap_factor > 0:
        raise ValueError(f'max_gap_factor must be > 0 or None, got {max_gap_factor}')
    order = np.argsort(stamps, kind='stable')
    stamps, poses = stamps[order], poses[order]
    segments = (np.zeros(len(stamps), dtype=np.int64) if segment_ids is None
                else np.asarray(segment_ids)[order])
    steps = np.flatnonzero(segments[1:] == segments[:-1])
    gt_stamps, first = np.unique(gt_stamps, return_index=True)   # sorted, one pose a stamp
    gt_poses = gt_poses[first]
    if len(steps) < MIN_OFFSET_STEPS or len(gt_stamps) < 2:
        return None
    origin = int(gt_stamps[0])
    seconds = (stamps - origin) / _NS_PER_S
    est_rates = _angular_rates(seconds, Rotation.from_matrix(poses[:, :3, :3]), steps)
    # the ground truth's rotation interpolated like interpolate_poses (slerp), built once
    gt_seconds = (gt_stamps - origin) / _NS_PER_S
    gt_slerp = Slerp(gt_seconds, Rotation.from_matrix(gt_poses[:, :3, :3]))

    def score(offset_s: float) -> tuple[float | None, int]:
        query = stamps - round(offset_s * _NS_PER_S)
        valid = _interpolable(gt_stamps, query, 0.0, max_gap_factor)
        ok = valid[steps] & valid[steps + 1]
        if ok.sum() < MIN_OFFSET_STEPS:
            return None, int(ok.sum())
        at = np.clip((query - origin) / _NS_PER_S, gt_seconds[0], gt_seconds[-1])
        gt_rates = _angular_rates(at, gt_slerp(at), steps[ok])
        return _correlation(est_rates[ok], gt_rates), int(ok.sum())

    def best_of(candidates):
        scored = [(score(float(c)), float(c)) for c in candidates]
        scored = [(value, used, c) for (value, used), c in scored if value is not None]
        return max(scored, key=lambda item: (item[0], -abs(item[2]))) if scored else None

    step_s = float(np.clip(np.median(np.diff(stamps)) / _NS_PER_S / 2, 0.005, 0.05))
    best = best_of(np.arange(-search_s, search_s + step_s / 2, step_s))
    if best is None:
        return None
    while step_s > 1e-3:
        step_s = max(step_s / 10, 1e-3)
        finer = best_of(best[2] + step_s * np.arange(-10, 11))
        if finer is not None and finer[0] >= best[0]:
            best = finer
    value, used, offset = best
    return {'offset_s': round(offset, 6), 'correlation': value,
            'correlation_at_zero': score(0.0)[0], 'steps': used}


# --------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------
def _kitti_drift(traj_ref, traj_est, path_length_m: float,
                 segments: np.ndarray) -> tuple[float, float, int, int]:
    """Return (drift %, rotational drift deg/m, segment count, skipped count) with evo.

    ``segments``: (K,) tracking-segment index of each pose; a sub-sequence whose ends lie in
    different tracking segments is skipped (counted in the last value).
    """
    from evo.core import lie_algebra as lie
    from evo.core.filters import FilterException
    from evo.core.geometry import accumulated_distances
    from evo.core.metrics import RPE, Unit, id_pairs_from_delta

    if traj_ref.num_poses < 2 or path_length_m <= 0:
        return float('nan'), float('nan'), 0, 0
    distances = accumulated_distances(traj_ref.positions_xyz)
    ref_poses, est_poses = traj_ref.poses_se3, traj_est.poses_se3
    trans_ratios, rot_ratios = [], []
    skipped = 0
    for fraction in DRIFT_LENGTH_FRACTIONS:
        length = float(fraction) * path_length_m
        try:
            pairs = id_pairs_from_delta(ref_poses, length, Unit.meters, rel_tol=0.1,
                                        all_pairs=True)
        except FilterException:
            continue
        for i, j in pairs:
            segment = distances[j] - distances[i]
            if segment <= 0:
                continue
            if segments[i] != segments[j]:
                skipped += 1
                continue
            E = RPE.rpe_base(ref_poses[i], ref_poses[j], est_poses[i], est_poses[j])
            trans_ratios.append(np.linalg.norm(E[:3, 3]) / segment)
            rot_ratios.append(abs(lie.so3_log_angle(E[:3, :3], True)) / segment)
    if not trans_ratios:
        return float('nan'), float('nan'), 0, skipped
    return (float(np.mean(trans_ratios) * 100.0), float(np.mean(rot_ratios)),
            len(trans_ratios), skipped)


def _rpe(traj_ref, traj_est, delta_frames: int,
         segments: np.ndarray) -> tuple[float, float, int, int]:
    """Return (RPE translation RMSE m, rotation RMSE deg, pairs used, pairs skipped) with evo.

    ``segments``: (K,) tracking-segment index of each pose. evo's RPE runs on each tracking
    segment on its own and the errors of all segments are pooled, so no pair spans a
    re-initialisation; the pairs that evo would take across one are counted as skipped.
    """
    from evo.core.filters import filter_pairs_by_index
    from evo.core.metrics import RPE, PoseRelation, Unit

    every = filter_pairs_by_index(traj_ref.poses_se3, delta_frames, all_pairs=False)
    skipped = sum(int(segments[i] != segments[j]) for i, j in every)
    errors: dict = {PoseRelation.translation_part: [], PoseRelation.rotation_angle_deg: []}
    for segment in np.unique(segments):
        ids = np.flatnonzero(segments == segment)
        if len(ids) <= delta_frames:
            continue
        part_ref, part_est = copy.deepcopy(traj_ref), copy.deepcopy(traj_est)
        part_ref.reduce_to_ids(ids)
        part_est.reduce_to_ids(ids)
        for relation, found in errors.items():
            metric = RPE(relation, delta=delta_frames, delta_unit=Unit.frames, all_pairs=False)
            metric.process_data((part_ref, part_est))
            found.append(np.asarray(metric.error, dtype=np.float64))
    if not errors[PoseRelation.translation_part]:
        return float('nan'), float('nan'), 0, skipped
    trans, rot = (np.concatenate(found) for found in errors.values())
    return (float(np.sqrt(np.mean(trans ** 2))), float(np.sqrt(np.mean(rot ** 2))),
            len(trans), skipped)


_NO_SIM3_SCALE = ('the ground truth does not move (every matched pose at one position): the '
                  'scale of a Sim(3) alignment is undefined (it would shrink the estimate to a '
                  'point and give an ATE of 0)')


def _align_degenerate(traj_est, traj_gt, with_scale: bool) -> float:
    """Align a (near) collinear estimate, where Umeyama is undefined: first poses, path scale."""
    scale = 1.0
    if with_scale:
        if not float(traj_gt.path_length) > 0:
            raise ValueError(_NO_SIM3_SCALE)
        length_est = float(traj_est.path_length)
        if length_est > 0:
            scale = float(traj_gt.path_length) / length_est
            traj_est.scale(scale)
    traj_est.align_origin(traj_gt)
    logger.warning('positions are (nearly) collinear, Umeyama alignment is undefined; '
                   'aligned the first poses instead%s',
                   f' with path-length scale {scale:.4g}' if with_scale else '')
    return scale


def evaluate_trajectory(stamps_est_ns, T_world_cam_est, stamps_gt_ns, T_world_cam_gt,
                        alignment: str = 'se3', max_time_diff_s: float = 0.02,
                        rpe_delta_frames: int = 1, segment_ids=None) -> dict[str, Any]:
    """Compare an estimated trajectory with ground truth (evo APE / RPE, KITTI-style drift).

    The estimate is associated with the ground truth by nearest stamp (evo), aligned to it
    (Umeyama; ``'se3'`` rigid, ``'sim3'`` rigid + scale, ``'none'`` as is), then scored.
    When the associated positions are collinear (Umeyama undefined), the first poses are
    aligned instead (and, for Sim(3), the path lengths give the scale); the result's
    ``alignment_method`` then reads ``'<alignment>-origin'``.

    Args:
        stamps_est_ns: (N,) int nanoseconds of the estimated poses.
        T_world_cam_est: (N, 4, 4) float64 estimated poses (metres; any world frame when
            aligned, the ground-truth world frame for ``'none'``).
        stamps_gt_ns: (M,) int nanoseconds of the ground-truth poses.
        T_world_cam_gt: (M, 4, 4) float64 ground-truth poses (metres).
        alignment: ``'se3'``, ``'sim3'`` or ``'none'``.
        max_time_diff_s: largest stamp difference of an associated pair (seconds).
        rpe_delta_frames: frame distance of the RPE pairs.
        segment_ids: optional (N,) ints, the tracking segment of each estimated pose (a
            re-initialisation at a held pose starts a new one). RPE and drift take only pairs
            of poses that are consecutive in one segment; the pairs that would cross a
            segment boundary are counted, not scored. None: one segment.

    Returns:
        dict with floats ``ate_rmse_m, ate_mean_m, ate_median_m, ate_max_m,
        rpe_trans_rmse_m, rpe_rot_rmse_deg, drift_percent, rot_drift_deg_per_m, scale,
        path_length_m`` (NaN where undefined, e.g. drift on a too short path), ints
        ``num_poses_matched, num_drift_segments, rpe_pairs, rpe_pairs_skipped,
        drift_segments_skipped, tracking_segments``, str ``alignment``, and under
        :data:`PER_POSE_KEY` a dict of arrays for plots: ``stamps_ns`` (K,) int64,
        ``stamps_s`` (K,) float64 seconds since the first matched pose, ``ape_m`` (K,),
        ``gt_xyz`` (K, 3) and ``est_xyz`` (K, 3) aligned estimate, metres.

    Raises:
        ValueError: on empty or malformed input, an unknown alignment, no time overlap
            (the message gives both stamp ranges), fewer than 2 (3 for alignment)
            associated poses, or ``'sim3'`` against a ground truth that does not move (no
            scale can be estimated).
    """
    from evo.core.geometry import GeometryException
    from evo.core.metrics import APE, PoseRelation, StatisticsType
    from evo.core.sync import SyncException, associate_trajectories

    if alignment not in _ALIGNMENTS:
        raise ValueError(f'alignment must be one of {_ALIGNMENTS}, got {alignment!r}')
    if not max_time_diff_s >= 0:
        raise ValueError(f'max_time_diff_s must be >= 0, got {max_time_diff_s}')
    if int(rpe_delta_frames) < 1:
        raise ValueError(f'rpe_delta_frames must be >= 1, got {rpe_delta_frames}')
    stamps_est, poses_est = _check_poses('estimate', stamps_est_ns, T_world_cam_est)
    stamps_gt, poses_gt = _check_poses('ground truth', stamps_gt_ns, T_world_cam_gt)
    segment_of = _segment_lookup(stamps_est, segment_ids)

    origin = int(min(stamps_est.min(), stamps_gt.min()))
    traj_gt = _to_evo(stamps_gt, poses_gt, origin, 'ground truth')
    traj_est = _to_evo(stamps_est, poses_est, origin, 'estimate')
    no_overlap = ValueError(
        f'no time overlap between estimate {_range_text(stamps_est)} and ground truth '
        f'{_range_text(stamps_gt)} within {max_time_diff_s} s')
    try:
        traj_gt, traj_est = associate_trajectories(traj_gt, traj_est, max_diff=max_time_diff_s)
    except SyncException:
        raise no_overlap from None
    matched = traj_est.num_poses
    matched_ns = origin + np.round(np.asarray(traj_est.timestamps) * _NS_PER_S).astype(np.int64)
    runs = np.array([segment_of.get(int(stamp), 0) for stamp in matched_ns])
    # consecutive runs of one segment id: a segment that comes back later is a new run
    runs = np.concatenate([[0], np.cumsum(runs[1:] != runs[:-1])]) if matched else runs
    minimum = min_associated_poses(alignment)
    if matched < minimum:
        raise ValueError(f'only {matched} poses associated between estimate '
                         f'{_range_text(stamps_est)} and ground truth {_range_text(stamps_gt)}; '
                         f'need at least {minimum} for alignment {alignment!r}')

    traj_est = copy.deepcopy(traj_est)
    scale, alignment_method = 1.0, alignment
    if alignment != 'none':
        try:
            _, _, s = traj_est.align(traj_gt, correct_scale=(alignment == 'sim3'))
            scale = float(s) if alignment == 'sim3' else 1.0
            if not (math.isfinite(scale) and scale > 0):
                raise ValueError(_NO_SIM3_SCALE)
        except GeometryException:
            scale = _align_degenerate(traj_est, traj_gt, with_scale=(alignment == 'sim3'))
            alignment_method = f'{alignment}-origin'

    ape = APE(PoseRelation.translation_part)
    ape.process_data((traj_gt, traj_est))
    stats = {kind: float(ape.get_statistic(getattr(StatisticsType, kind)))
             for kind in ('rmse', 'mean', 'median', 'max')}
    rpe_trans, rpe_rot, rpe_pairs, rpe_skipped = _rpe(traj_gt, traj_est,
                                                      int(rpe_delta_frames), runs)
    path_length = float(traj_gt.path_length)
    drift, rot_drift, segments, drift_skipped = _kitti_drift(traj_gt, traj_est, path_length,
                                                             runs)

    seconds = np.asarray(traj_gt.timestamps, dtype=np.float64)
    stamps_ns = origin + np.round(seconds * _NS_PER_S).astype(np.int64)
    return {
        'ate_rmse_m': stats['rmse'],
        'ate_mean_m': stats['mean'],
        'ate_median_m': stats['median'],
        'ate_max_m': stats['max'],
        'rpe_trans_rmse_m': rpe_trans,
        'rpe_rot_rmse_deg': rpe_rot,
        'rpe_delta_frames': int(rpe_delta_frames),
        'rpe_pairs': rpe_pairs,
        'rpe_pairs_skipped': rpe_skipped,
        'tracking_segments': int(runs[-1]) + 1,
        'drift_percent': drift,
        'rot_drift_deg_per_m': rot_drift,
        'num_drift_segments': segments,
        'drift_segments_skipped': drift_skipped,
        'scale': scale,
        'num_poses_matched': int(matched),
        'path_length_m': path_length,
        'alignment': alignment,
        'alignment_method': alignment_method,
        PER_POSE_KEY: {
            'stamps_ns': stamps_ns,
            'stamps_s': seconds - seconds[0],
            'ape_m': np.asarray(ape.error, dtype=np.float64),
            'gt_xyz': np.asarray(traj_gt.positions_xyz, dtype=np.float64),
            'est_xyz': np.asarray(traj_est.positions_xyz, dtype=np.float64),
        },
    }


def summary_metrics(result: dict[str, Any]) -> dict[str, Any]:
    """Return ``result`` of :func:`evaluate_trajectory` without the per-pose arrays."""
    return {k: v for k, v in result.items() if k != PER_POSE_KEY}
