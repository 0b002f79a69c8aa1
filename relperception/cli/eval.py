# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception eval BAG --output DIR``: run visual odometry on a bag and score it with evo."""

from __future__ import annotations

import argparse
import logging

from relperception.cli.common import add_gt_time_offset_argument

HELP = 'run visual odometry over a rosbag2 recording and score it against its ground truth'
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``eval``."""
    parser.add_argument('bag', help='rosbag2 directory or .mcap / .db3 file')
    parser.add_argument('-o', '--output', required=True,
                        help='output folder (report.html, trajectory.tum, groundtruth.tum, '
                             'summary.json, timing.csv, trajectory.png, errors.png); the files '
                             'of an earlier run there (those its summary.json lists) are '
                             'removed first')
    parser.add_argument('--config', help='YAML configuration (flat, nested or ROS params file)')
    parser.add_argument('--mode', choices=('auto', 'rgbd', 'mono'),
                        help='odometry mode (default: odometry.mode of the configuration; '
                             'auto = RGB-D when the bag has depth)')
    parser.add_argument('--gt-scale', action='store_true',
                        help='monocular benchmark option: take the scale from the ground-truth '
                             'distance between frames')
    parser.add_argument('--gt-scale-noise', type=float, nargs=2, metavar=('SIGMA', 'BIAS'),
                        help='with --gt-scale: multiply each ground-truth step by (1 + BIAS) '
                             '(1 + N(0, SIGMA)), seeded, to see what wheel odometry of that '
                             'quality gives (e.g. 0.05 0.02)')
    parser.add_argument('--rectified-input', action='store_true',
                        help="the bag's images are already rectified (image_rect): use the "
                             "camera matrix of camera_info's p and no distortion, as the node's "
                             'rectified_input parameter does')
    parser.add_argument('--max-frames', type=int, help='stop after this many images')
    add_gt_time_offset_argument(parser)
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')
    parser.add_argument('--no-plots', action='store_true', help='do not write the PNG plots')
    parser.add_argument('--dense', action='store_true',
                        help="also score the dense model (dense.* keys) against the bag's "
                             'ground-truth depth and label topics (depth metrics, mIoU, '
                             'confusion matrix, sample images)')
    parser.add_argument('--depth-from', choices=('bag', 'dense'), default='bag',
                        dest='depth_from',
                        help="depth of the RGB-D odometry: the bag's depth topic (default) or "
                             'the dense model (dense.* keys) run on each image, i.e. metric '
                             'monocular VO, aligned with SE(3); the shipped models learnt '
                             'depth on synthetic rooms only, so only synthetic bags give '
                             'meaningful numbers')
    parser.add_argument('--dense-stride', type=int, default=1, metavar='N',
                        help='run the dense model on every N-th image only (default 1)')


def run(args: argparse.Namespace) -> int:
    """Evaluate the bag, write the report and log the key metrics; 1 if nothing was tracked."""
    from relperception.cli.common import command_line, write_report_of_interrupted_run
    from relperception.config import (DEFAULT_BASE_FRAME_ID, DEFAULT_CAMERA_MOUNT_XYZ_QXYZW,
                                      defaults, load_parameter_file)
    from relperception.interruption import INTERRUPTIONS
    from relperception.evaluation.html_report import (dense_key_figures, eval_report,
                                                      write_report)
    from relperception.pipeline.offline_eval import evaluate_bag

    if args.dense_stride != 1 and not args.dense:
        raise ValueError('--dense-stride applies with --dense (the dense model is not run '
                         'otherwise)')
    if args.gt_scale and args.mode == 'rgbd':
        raise ValueError('--gt-scale gives monocular odometry its scale; --mode rgbd takes it '
                         'from the depth images (use --mode mono)')
    parameter_file = load_parameter_file(args.config)
    config = parameter_file.config
    # the odometry node's frames: ground truth of the robot base is moved to the camera
    odometry = parameter_file.for_node('visual_odometry_node')
    try:
        summary = evaluate_bag(args.bag, args.output, config, mode=args.mode,
                               max_frames=args.max_frames, progress=not args.no_progress,
                               gt_scale=args.gt_scale, plots=not args.no_plots,
                               dense=args.dense, dense_stride=args.dense_stride,
                               depth_source=args.depth_from,
                               gt_scale_noise=args.gt_scale_noise,
                               rectified_input=args.rectified_input,
                               camera_mount_xyz_qxyzw=odometry.get(
                                   'camera_mount_xyz_qxyzw', DEFAULT_CAMERA_MOUNT_XYZ_QXYZW),
                               base_frame_id=odometry.get('base_frame_id',
                                                          DEFAULT_BASE_FRAME_ID),
                               gt_time_offset_s=args.gt_time_offset)
    except INTERRUPTIONS:
        write_report_of_interrupted_run(args.output, command_line(args), config)
        raise
    report = write_report(args.output, eval_report(summary, args.output, command_line(args),
                                                   config, defaults()))
    if summary.get('dense'):
        logger.info('%s', dense_key_figures(summary['dense']))
    logger.info('report written to %s (open %s first)', args.output, report)
    if summary['num_errors']:
        logger.warning('%d problem%s met (see summary.json "errors")', summary['num_errors'],
                       '' if summary['num_errors'] == 1 else 's')
    if not summary['complete']:
        logger.warning('the bag was damaged or processing stopped early; results are partial')
    return 0 if summary['frames_processed'] > 0 else 1
