# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception demo --output DIR``: synthetic recording -> RGB-D and monocular VO -> report.

Writes into DIR:

* ``report.html``: every run side by side (open it first), each run folder with its own;
* ``synthetic_bag/``: the synthetic MCAP recording (as ``relperception synth`` writes it);
* ``rgbd/`` and ``mono/``: the complete :func:`~relperception.pipeline.offline_eval.evaluate_bag`
  report of each mode with the NCC matcher (trajectories, summary.json, timing.csv, plots);
* ``mono_loftr/``: the same monocular run with the shipped LoFTR-lite matcher instead of NCC;
* ``dense/``: the shipped dense model (``dense.backbone``, conv by default) scored against the
  recording's exact depth (AbsRel, RMSE, delta < 1.25^i) with sample strips
  (input | prediction | ground truth); its labels are CamVid street classes, which the synthetic
  room does not have, so they are shown, not scored;
* ``metrics.json``: the key metrics of all runs side by side;
* ``trajectory.png``: ground truth with both aligned estimates.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from relperception.cli.common import int_at_least

HELP = ('end-to-end demo: synthetic bag -> RGB-D and monocular visual odometry -> '
        'report.html')
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)

_TABLE_KEYS = ('ate_rmse_m', 'rpe_trans_rmse_m', 'rpe_rot_rmse_deg', 'drift_percent', 'scale',
               'frames_processed', 'frames_lost', 'timing_median_ms')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``demo``."""
    parser.add_argument('-o', '--output', required=True, help='output folder')
    parser.add_argument('--frames', type=int, default=100, help='number of frames (default 100)')
    parser.add_argument('--seed', type=int, default=0, help='scene seed (default 0)')
    parser.add_argument('--width', type=int, default=640, help='image width (default 640)')
    parser.add_argument('--height', type=int, default=480, help='image height (default 480)')
    parser.add_argument('--config', help='YAML configuration for the VO pipeline')
    parser.add_argument('--no-progress', action='store_true', help='no progress bars')
    parser.add_argument('--dense-stride', type=int_at_least(1), default=10, metavar='N',
                        help='run the dense model on every N-th frame (default 10)')
    parser.add_argument('--no-dense', action='store_true', help='skip the dense-model report')
    parser.add_argument('--no-loftr', action='store_true',
                        help='skip the monocular run with the LoFTR matcher')


def _dense_report(bag: Path, output: Path, config, args: argparse.Namespace) -> dict:
    """Score the shipped dense model on the synthetic recording; return its summary."""
    from relperception.config import validate
    from relperception.data.bag import BagReader
    from relperception.data.error_log import ErrorLog
    from relperception.pipeline.dense_eval import evaluate_dense

    # synthetic class ids are not CamVid's: score depth only, still draw the labels
    config = validate({'topics.ground_truth_labels': ''}, config)
    errors = ErrorLog()
    output.mkdir(parents=True, exist_ok=True)
    with BagReader(bag) as reader:
        summary = evaluate_dense(reader, config['topics.image'], config, output, errors,
                                 stride=args.dense_stride, progress=not args.no_progress)
    summary['num_errors'] = errors.count
    return summary


def _aligned_positions(run_dir: Path, alignment: str):
    """Return (gt_xyz, est_xyz) of a finished run, re-aligned from its TUM files."""
    from relperception.evaluation.trajectory import (evaluate_trajectory, PER_POSE_KEY,
                                                     read_tum)

    stamps_est, poses_est = read_tum(run_dir / 'trajectory.tum')
    stamps_gt, poses_gt = read_tum(run_dir / 'groundtruth.tum')
    per_pose = evaluate_trajectory(stamps_est, poses_est, stamps_gt, poses_gt,
                                   alignment=alignment)[PER_POSE_KEY]
    return per_pose['gt_xyz'], per_pose['est_xyz']


def _fmt(value) -> str:
    return 'n/a' if value is None else f'{value:.3f}'


def run(args: argparse.Namespace) -> int:
    """Write the synthetic bag, evaluate RGB-D and monocular VO on it, write the report."""
    from relperception.cli.common import command_line
    from relperception.data.synthetic_bag import write_synthetic_bag
    from relperception.config import defaults, load_config, validate
    from relperception.evaluation.html_report import demo_report, eval_report, write_report
    from relperception.evaluation.report import (format_metrics_table, plot_trajectories,
                                                 write_json)
    from relperception.pipeline.offline_eval import evaluate_bag

    if args.frames < 3:
        raise ValueError(f'--frames must be >= 3, got {args.frames}')
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    config = load_config(args.config)
    bag = output / 'synthetic_bag'
    logger.info('writing %d synthetic frames (%dx%d, seed %d) to %s', args.frames, args.width,
                args.height, args.seed, bag)
    write_synthetic_bag(bag, frames=args.frames, seed=args.seed, width=args.width,
                        height=args.height, overwrite=True)

    runs = [('rgbd', 'rgbd', config), ('mono', 'mono', config)]
    if not args.no_loftr:
        runs.append(('mono_loftr', 'mono', validate({'matcher': 'loftr'}, config)))
    summaries = {}
    for name, mode, run_config in runs:
        logger.info('evaluating %s visual odometry with the %s matcher', mode,
                    run_config['matcher'])
        summaries[name] = evaluate_bag(bag, output / name, run_config, mode=mode,
                                       progress=not args.no_progress)

    metrics = {mode: {key: summary.get(key) for key in
                      (*_TABLE_KEYS, 'ate_max_m', 'rot_drift_deg_per_m', 'timing_p95_ms',
                       'alignment', 'num_poses_matched', 'path_length_m', 'reinitializations',
                       'num_errors', 'complete')}
               for mode, summary in summaries.items()}
    dense = None
    if not args.no_dense:
        logger.info('evaluating the shipped dense model on every %d-th frame', args.dense_stride)
        dense = _dense_report(bag, output / 'dense', config, args)
        depth = dense.get('depth') or {}
        metrics['dense'] = {'model': dense.get('model'), 'frames': dense.get('frames_evaluated'),
                            **{k: depth.get(k) for k in ('abs_rel', 'rmse', 'delta1')},
                            'timing_median_ms': dense.get('timing_median_ms'),
                            'skipped': dense.get('skipped')}
        logger.info('dense %s on %s frames: AbsRel %s, delta1 %s, %s ms per frame',
                    metrics['dense']['model'], metrics['dense']['frames'],
                    _fmt(depth.get('abs_rel')), _fmt(depth.get('delta1')),
                    _fmt(dense.get('timing_median_ms')))
    metrics['frames'] = args.frames
    metrics['image_size'] = [args.width, args.height]
    metrics['seed'] = args.seed
    write_json(output / 'metrics.json', metrics)

    try:
        gt_xyz, rgbd_xyz = _aligned_positions(output / 'rgbd', 'se3')
        others = {'monocular NCC (Sim(3))': _aligned_positions(output / 'mono', 'sim3')[1]}
        if 'mono_loftr' in summaries:
            others['monocular LoFTR (Sim(3))'] = _aligned_positions(output / 'mono_loftr',
                                                                    'sim3')[1]
        plot_trajectories(output / 'trajectory.png', gt_xyz, rgbd_xyz,
                          f'synthetic sequence, {args.frames} frames',
                          est_label='RGB-D NCC (SE(3))', others=others)
    except (ValueError, FileNotFoundError) as exc:
        logger.error('combined trajectory plot not written: %s', exc)

    command = command_line(args)
    for name, (_, _, run_config) in zip(summaries, runs):   # each run's page, as eval writes
        write_report(output / name, eval_report(summaries[name], output / name, command,
                                                run_config, defaults()))
    report = write_report(output, demo_report(summaries, dense, output, command))
    table = format_metrics_table(summaries, _TABLE_KEYS)
    logger.info('metrics (%s):\n%s', output / 'metrics.json', table)
    logger.info('report: %s (open it first), with %s/{trajectory.png, metrics.json, %s, dense/}',
                report, output, ', '.join(f'{name}/' for name in summaries))
    ok = all(summary['frames_processed'] > 0 for summary in summaries.values())
    return 0 if ok else 1
