# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The report of a visual-odometry run: trajectories, metrics, timing and plots.

:func:`write_report` is shared by the offline evaluation and the live replay, so both write the
same files (``trajectory.tum``, ``groundtruth.tum``, ``timing.csv``, ``trajectory.png``,
``errors.png``) and the same summary keys (:data:`METRIC_KEYS`, frame counts, timing, and
``matcher`` / ``matcher_weights`` of :func:`~relperception.matching.base.describe_matcher`: the
LoFTR preset and weights that ran, not just ``loftr``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
import csv
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
from relperception.atomic_files import atomic_open
from relperception.data.bag_frames import (GT_MAX_GAP_FACTOR, GT_OFFSET_MIN_CORRELATION,
                                           GT_OFFSET_MIN_GAIN, GT_OFFSET_SEARCH_S,
                                           GT_TOLERANCE_S)
from relperception.data.error_log import ErrorLog
from relperception.evaluation.report import plot_errors, plot_trajectories
from relperception.evaluation.trajectory import (estimate_time_offset, evaluate_trajectory,
                                                 interpolate_poses, min_associated_poses,
                                                 PER_POSE_KEY, summary_metrics, write_tum)
from relperception.matching.base import describe_matcher
from relperception.odometry.vo import (MAP_SCALE_SOURCES, METRIC_SCALE_SOURCES,
                                       STATUS_INITIALIZED, STATUS_REINITIALIZED,
                                       STATUS_TRACKING)
from relperception.transforms import invert_transform

logger = logging.getLogger(__name__)

#: Metric keys of the summary (None when they cannot be computed, e.g. no ground truth).
METRIC_KEYS = ('ate_rmse_m', 'ate_mean_m', 'ate_median_m', 'ate_max_m', 'rpe_trans_rmse_m',
               'rpe_rot_rmse_deg', 'drift_percent', 'rot_drift_deg_per_m', 'scale',
               'num_poses_matched', 'path_length_m', 'alignment')

#: What a run without ground-truth poses at its frames lacks: the metrics of
#: :data:`METRIC_KEYS` (the dense scores need the depth and label topics, not the poses).
NO_TRAJECTORY_METRICS = 'no trajectory metrics (ATE, RPE, drift, scale)'

#: ``scale_source`` of an RGB-D run in which no frame had usable depth.
NO_DEPTH_USED = ('none metric: RGB-D was chosen but no depth image was usable, so no frame '
                 'had metric depth; Sim(3) alignment')

_NS_PER_S = 1_000_000_000


def _estimated(row: Mapping[str, Any]) -> bool:
    """Whether a frame's pose was estimated by tracking (not held at a (re)initialisation).

    A re-initialised frame that relocalised carries the scale source of its estimate; one
    re-initialised from scratch, like the first frame, only holds the last pose.
    """
    return row['status'] == STATUS_TRACKING or (
        row['status'] == STATUS_REINITIALIZED and bool(row.get('scale_source')))


def tracking_segments(rows: list) -> np.ndarray:
    """Return the (N,) int64 tracking-segment index of each row of a run.

    A frame (re-)initialised at a held pose starts a new segment: the motion from the last
    good pose to it is unknown, so relative errors across it mean nothing. A frame that
    relocalised against a keyframe continues its segment.
    """
    starts = [row['status'] in (STATUS_INITIALIZED, STATUS_REINITIALIZED) and not _estimated(row)
              for row in rows]
    return np.maximum(np.cumsum(np.asarray(starts, dtype=np.int64)) - 1, 0)


def write_timing_csv(path: Path, rows: list) -> None:
    """Write one row per processed frame (``timing.csv``) from the run's row dicts."""
    dense = any(row.get('dense_ms') is not None for row in rows)
    fields = ('frame', 'stamp_ns', 'status', 'num_matches', 'num_inliers', 'is_keyframe',
              'depth', 'process_ms', 'keyframe_wait_ms', 'decode_ms', 'scale_source') + (
                  ('dense_ms',) if dense else ())
    with atomic_open(path, newline='') as stream:
        writer = csv.writer(stream)
        writer.writerow(fields)
        for index, row in enumerate(rows):
            values = [index, row['stamp_ns'], row['status'], row['num_matches'],
                      row['num_inliers'], int(row['is_keyframe']), int(row['depth']),
                      f"{row['process_ms']:.3f}", f"{row.get('keyframe_wait_ms', 0.0):.3f}",
                      f"{row['decode_ms']:.3f}", row.get('scale_source', '')]
            if dense:
                dense_ms = row.get('dense_ms')
                values.append('' if dense_ms is None else f'{dense_ms:.3f}')
            writer.writerow(values)


def percentile(values, q: float) -> float:
    """Return the ``q``-th percentile of ``values``, NaN when there are none."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.percentile(values, q)) if len(values) else float('nan')


def write_report(output_dir: Path, bag_path: Path, config, requested: str, resolved: str,
                 gt_scale: bool, rows: list, poses_vo: list, gt_stamps, gt_poses,
                 errors: ErrorLog, plots: bool,
                 gt_time_offset_s: float = 0.0) -> dict[str, Any]:
    """Write trajectories, metrics, timing and plots; return the summary (without errors).

    Shared by the offline evaluation and the live replay (``live_eval``), so that both write
    the same files. ``gt_stamps`` already carry ``gt_time_offset_s`` (seconds added to the
    recorded ground-truth stamps, reported in the summary); the offset still left between
    ground truth and estimate is estimated from their motion
    (:func:`~relperception.evaluation.trajectory.estimate_time_offset`) and reported as
    ``gt_time_offset_estimate_s`` (the total offset to give), with a warning when it is
    clearly not the one applied.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    statuses = [row['status'] for row in rows]
    process_ms = [row['process_ms'] for row in rows]
    tracking_ms = [row['process_ms'] - row.get('keyframe_wait_ms', 0.0) for row in rows]
    frames_with_depth = sum(bool(row['depth']) for row in rows)
    # The depth that was actually used decides, not the mode chosen from the topics (a run
    # that processed no frame keeps the description of its mode).
    metric_depth = resolved == 'rgbd' and frames_with_depth > 0
    rgbd = resolved == 'rgbd' and (metric_depth or not rows)
    alignment = 'se3' if rgbd else 'sim3'
    # Frames of an RGB-D run that were tracked without depth ('auto' falls back to the
    # monocular map, the constant speed or a unit step): their steps are not in metres.
    not_metric = Counter(row['scale_source'] for row in rows if _estimated(row)
                         and row.get('scale_source')
                         and row['scale_source'] not in (*METRIC_SCALE_SOURCES, 'static'))
    if rgbd and not_metric:
        sources = ', '.join(f'{name} {count}' for name, count in sorted(not_metric.items()))
        scale_source = (f'mixed: depth (metric RGB-D), but {sum(not_metric.values())} frames '
                        f'were tracked without depth in a monocular, non-metric unit '
                        f'({sources}); SE(3) alignment')
        errors.add(f'{sum(not_metric.values())} frames of this RGB-D run were tracked without '
                   f'depth, with a non-metric scale ({sources}): the trajectory mixes metres '
                   'and a monocular unit, and the SE(3) metrics score both as metres')
    elif rgbd:
        scale_source = 'depth (metric RGB-D)'
    elif resolved == 'rgbd':
        scale_source = NO_DEPTH_USED
        errors.add(f'mode rgbd, but not one of the {len(rows)} processed frames had a usable '
                   'depth image (see depth_problems and frames_without_depth): nothing is '
                   'metric, the trajectory is aligned with Sim(3)', logging.ERROR)
    elif gt_scale:
        scale_source = ('ground-truth distance between consecutive frames (benchmark option '
                        '--gt-scale; not available to a real monocular system); the ATE is '
                        'still taken after Sim(3) alignment, whose "scale" is the correction '
                        'left to make (1 = the hinted scale held)')
    else:
        scale_source = ('none metric: monocular trajectory in the unit of its first map '
                        '(the local map carries it), Sim(3) alignment')
    summary: dict[str, Any] = {
        'bag': str(bag_path),
        'output_dir': str(output_dir),
        'requested_mode': requested,
        'mode': resolved,
        'gt_scale': bool(gt_scale),
        'scale_source': scale_source,
        'frames_processed': len(rows),
        'frames_tracked': sum(s == 'tracking' for s in statuses),
        'frames_initialized': sum(s == 'initialized' for s in statuses),
        'frames_with_depth': frames_with_depth,
        'metric_depth_used': metric_depth,
        'frames_lost': sum(s == 'lost' for s in statuses),
        'reinitializations': sum(s == 'reinitialized' for s in statuses),
        'keyframes': sum(bool(row['is_keyframe']) for row in rows),
        # Frames whose step was not measured in metres (all of a monocular run's); None when
        # the rows do not say (a live replay scores the published odometry only).
        'frames_without_metric_scale': sum(not_metric.values()) if any(
            'scale_source' in row for row in rows) or not rows else None,
        'frames_tracked_against_map': sum(row.get('scale_source') in MAP_SCALE_SOURCES
                                          for row in rows),
        'frames_by_scale_source': dict(Counter(
            row['scale_source'] for row in rows if row.get('scale_source'))),
        'timing_median_ms': percentile(process_ms, 50),
        'timing_p95_ms': percentile(process_ms, 95),
        'timing_mean_ms': float(np.mean(process_ms)) if process_ms else float('nan'),
        'timing_max_ms': float(np.max(process_ms)) if process_ms else float('nan'),
        # The per-frame path when frames come slower than keyframes are completed (live).
        'tracking_median_ms': percentile(tracking_ms, 50),
        'tracking_p95_ms': percentile(tracking_ms, 95),
        'ground_truth_poses': len(gt_stamps),
        **describe_matcher(config),
    }
    summary.update(dict.fromkeys(METRIC_KEYS))
    summary['alignment'] = alignment
    write_timing_csv(output_dir / 'timing.csv', rows)

    keep = [i for i, row in enumerate(rows) if row['status'] != 'lost']
    segments = tracking_segments(rows)[keep] if keep else np.zeros(0, dtype=np.int64)
    stamps = np.asarray([rows[i]['stamp_ns'] for i in keep], dtype=np.int64)
    poses = np.stack([poses_vo[i] for i in keep]) if keep else np.zeros((0, 4, 4))
    summary['outputs'] = {}
    summary['gt_time_offset_s'] = float(gt_time_offset_s)
    if not any(_estimated(row) for row in rows):
        placeholders = f' ({len(keep)} initialised at a held pose)' if keep else ''
        errors.add(f'no frame was tracked{placeholders}; no trajectory written, '
                   f'{NO_TRAJECTORY_METRICS}', logging.ERROR)
        return summary
    gt_at_frames, valid = (interpolate_poses(gt_stamps, gt_poses, stamps, GT_TOLERANCE_S,
                                             GT_MAX_GAP_FACTOR)
                           if len(gt_stamps) else (None, np.zeros(len(stamps), bool)))
    summary['frames_with_ground_truth'] = int(valid.sum())
    _estimate_gt_offset(summary, stamps, poses, gt_stamps, gt_poses, segments,
                        float(gt_time_offset_s), errors)
    if valid.any() and not valid.all():
        errors.add(f'ground truth covers only {int(valid.sum())} of the {len(stamps)} frames '
                   f'with a pose (outside its time range, or in gaps longer than '
                   f'{GT_MAX_GAP_FACTOR:g} times its pose interval): the trajectory metrics '
                   'describe those frames only')
    if valid.any():
        first = int(np.flatnonzero(valid)[0])
        T_gtworld_vo = gt_at_frames[first] @ invert_transform(poses[first])
        poses = T_gtworld_vo[None] @ poses
        summary['trajectory_frame'] = 'ground-truth world (VO anchored at the first frame)'
    else:
        summary['trajectory_frame'] = 'first camera (no ground truth at the frame stamps)'
        if len(gt_stamps):
            shifted = (f' (with the ground-truth time offset of {gt_time_offset_s:+g} s added)'
                       if gt_time_offset_s else '')
            errors.add(f'ground truth [{gt_stamps[0]}, {gt_stamps[-1]}] ns{shifted} does not '
                       f'cover the frames [{stamps[0]}, {stamps[-1]}] ns; '
                       f'{NO_TRAJECTORY_METRICS}', logging.ERROR)
    write_tum(output_dir / 'trajectory.tum', stamps, poses)
    summary['outputs']['trajectory'] = 'trajectory.tum'
    if not valid.any():
        return summary
    write_tum(output_dir / 'groundtruth.tum', stamps[valid], gt_at_frames[valid])
    summary['outputs']['groundtruth'] = 'groundtruth.tum'
    minimum = min_associated_poses(alignment)
    if valid.sum() < minimum:   # e.g. a bag of one or two frames
        errors.add(f'only {int(valid.sum())} frame(s) with a pose and ground truth: too '
                   f'few to score the trajectory (alignment {alignment} needs at least '
                   f'{minimum}); {NO_TRAJECTORY_METRICS}', logging.ERROR)
        return summary
    try:
        result = evaluate_trajectory(stamps, poses, stamps[valid], gt_at_frames[valid],
                                     alignment=alignment, max_time_diff_s=GT_TOLERANCE_S,
                                     segment_ids=segments)
    except ValueError as exc:
        errors.add(f'trajectory evaluation failed: {exc}', logging.ERROR)
        return summary
    summary.update(summary_metrics(result))
    if result['rpe_pairs_skipped'] or result['drift_segments_skipped']:
        errors.add(f"tracking was re-initialised {result['tracking_segments'] - 1} time(s): "
                   f"{result['rpe_pairs_skipped']} RPE pairs and "
                   f"{result['drift_segments_skipped']} drift sub-sequences span two tracking "
                   'segments and are not scored (RPE and drift describe the pairs inside one '
                   'segment; the ATE covers all poses)')
    if plots:
        _plot_run(output_dir, result, rows, resolved, alignment, summary, errors)
    return summary


def _estimate_gt_offset(summary: dict, stamps: np.ndarray, poses: np.ndarray, gt_stamps,
                        gt_poses, segments: np.ndarray, applied_s: float,
                        errors: ErrorLog) -> None:
    """Add ``gt_time_offset_estimate_s`` / ``_correlation`` to ``summary``; warn if clearly off."""
    summary['gt_time_offset_estimate_s'] = None
    summary['gt_time_offset_correlation'] = None
    if not len(gt_stamps) or len(stamps) < 2:
        return
    found = estimate_time_offset(stamps, poses, gt_stamps, gt_poses, GT_OFFSET_SEARCH_S,
                                 segment_ids=segments, max_gap_factor=GT_MAX_GAP_FACTOR)
    if found is None:
        return
    at_zero = found['correlation_at_zero']
    if at_zero is not None and found['correlation'] < at_zero + GT_OFFSET_MIN_GAIN:
        # the motion correlates about as well at the applied offset: nothing found
        summary['gt_time_offset_estimate_s'] = applied_s
        summary['gt_time_offset_correlation'] = at_zero
        return
    total = round(applied_s + found['offset_s'], 6)
    summary['gt_time_offset_estimate_s'] = total
    summary['gt_time_offset_correlation'] = found['correlation']
    if found['correlation'] >= GT_OFFSET_MIN_CORRELATION \
            and abs(found['offset_s']) > GT_TOLERANCE_S:
        errors.add(f'the ground truth looks offset in time against the images: its motion '
                   f"matches the estimate's best {found['offset_s']:+.3f} s from the offset "
                   f"applied (correlation {found['correlation']:.2f} there, "
                   f"{'n/a' if at_zero is None else f'{at_zero:.2f}'} at it); the metrics are "
                   f'taken with the applied {applied_s:g} s: rerun with --gt-time-offset '
                   f'{total:g}')


def _alignment_label(alignment, gt_scale: bool) -> str:
    """Return the alignment as the log and plots state it (``--gt-scale``: Sim(3) on top)."""
    if alignment == 'sim3' and gt_scale:
        return 'sim3 alignment on top of the --gt-scale step lengths'
    return f'{alignment} alignment'


def _plot_run(output_dir: Path, result: dict, rows: list, resolved: str, alignment: str,
              summary: dict, errors: ErrorLog) -> None:
    per_pose = result[PER_POSE_KEY]
    alignment = _alignment_label(alignment, summary['gt_scale'])
    title = (f'{resolved} VO, {alignment}: ATE RMSE {result["ate_rmse_m"]:.4f} m, '
             f'{result["num_poses_matched"]} poses')
    origin_ns = int(per_pose['stamps_ns'][0])
    events = {}
    for status in ('lost', 'reinitialized'):
        times = [(row['stamp_ns'] - origin_ns) / _NS_PER_S for row in rows
                 if row['status'] == status]
        if times:
            events[status] = times
    try:
        plot_trajectories(output_dir / 'trajectory.png', per_pose['gt_xyz'], per_pose['est_xyz'],
                          title, est_label=f'{resolved} VO')
        plot_errors(output_dir / 'errors.png', per_pose['stamps_s'], per_pose['ape_m'],
                    title=f'{resolved} VO: absolute position error ({alignment})',
                    events=events)
        summary['outputs'].update({'trajectory_plot': 'trajectory.png',
                                   'errors_plot': 'errors.png'})
    except (ValueError, RuntimeError, OSError) as exc:
        errors.add(f'plotting failed: {exc}', logging.ERROR)


def log_summary(summary: Mapping[str, Any]) -> None:
    """Log the main figures of a run summary."""
    def fmt(value, unit=''):
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return 'n/a'
        return f'{value:.4g}{unit}' if isinstance(value, float) else f'{value}{unit}'

    mode = summary['mode']
    if mode == 'rgbd' and summary.get('metric_depth_used') is False \
            and summary.get('frames_processed'):
        mode = 'rgbd (no usable depth image: monocular)'
    logger.info('%s: %s mode, %d frames processed, %d lost, %d re-initialisations, '
                '%d errors', summary['bag'], mode, summary['frames_processed'],
                summary['frames_lost'], summary['reinitializations'], summary['num_errors'])
    logger.info('ATE RMSE %s, RPE %s / %s, drift %s, scale %s (%s); VO %s median, %s p95',
                fmt(summary.get('ate_rmse_m'), ' m'), fmt(summary.get('rpe_trans_rmse_m'), ' m'),
                fmt(summary.get('rpe_rot_rmse_deg'), ' deg'),
                fmt(summary.get('drift_percent'), ' %'), fmt(summary.get('scale')),
                _alignment_label(summary.get('alignment'), bool(summary.get('gt_scale'))),
                fmt(summary.get('timing_median_ms'), ' ms'),
                fmt(summary.get('timing_p95_ms'), ' ms'))
