# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception replay BAG --output DIR``: play a bag live through DDS and score the nodes.

The node set (``visual_odometry_node``; ``depth_in`` when the bag has depth) runs in
this process, or one process per node with ``--separate-processes``; a player publishes the
bag at its recorded rate (``--rate``) with ``/clock``, a recorder stores the node outputs in
``DIR/recorded_bag`` and the report has the files of ``relperception eval`` plus per-topic
frame counts, drops and end-to-end latencies (``summary.json`` ``output_topics``).
"""

from __future__ import annotations

import argparse
import logging

from relperception.cli.common import add_gt_time_offset_argument, float_in_range

HELP = 'replay a rosbag2 recording live through DDS into the nodes, record and score them'
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``replay``.

    Args:
        parser: the verb's parser.
    """
    parser.add_argument('bag', help='rosbag2 directory or .mcap / .db3 file')
    parser.add_argument('-o', '--output', required=True, metavar='DIR',
                        help='report folder (the eval files, latency.csv, recorded_bag/); the '
                             'files of an earlier run there (those its summary.json lists, and '
                             'its recorded_bag/) are replaced')
    parser.add_argument('--config', metavar='YAML',
                        help='parameter file (ROS 2 parameter file, nested or flat YAML)')
    parser.add_argument('--rate', type=float_in_range(0.01, 100.0), default=1.0, metavar='K',
                        help='playback speed factor on the recorded times, 0.01-100 '
                             '(default 1.0)')
    parser.add_argument('--separate-processes', action='store_true',
                        help='run each node in its own process (as ros2 launch does)')
    parser.add_argument('--no-fastdds-profile', action='store_true',
                        help='do not apply the packaged Fast DDS profile')
    parser.add_argument('--startup-s', type=float_in_range(0.001, 3600.0), default=30.0,
                        metavar='S',
                        help='longest wait for the nodes to subscribe (default 30 s)')
    parser.add_argument('--namespace', default='', metavar='NS',
                        help='namespace for the nodes, the replayed inputs, /clock and '
                             'diagnostics (default: root)')
    add_gt_time_offset_argument(parser)
    parser.add_argument('--no-plots', action='store_true', help='do not write the PNG plots')


def run(args: argparse.Namespace) -> int:
    """Replay the bag, write the report and log the key figures.

    Args:
        args: parsed options of ``replay``.

    Returns:
        0 when odometry came out of the nodes, 1 otherwise.
    """
    from relperception.cli.common import command_line, write_report_of_interrupted_run
    from relperception.config import defaults, load_parameter_file
    from relperception.interruption import INTERRUPTIONS
    from relperception.evaluation.html_report import eval_report, write_report
    from relperception.nodes.replay import replay_bag
    from relperception.pipeline.live_eval import latency_text

    parameter_file = load_parameter_file(args.config)
    try:
        summary = replay_bag(args.bag, args.output, parameter_file.config, rate=args.rate,
                             separate_processes=args.separate_processes,
                             fastdds_profile=not args.no_fastdds_profile,
                             startup_s=args.startup_s, namespace=args.namespace,
                             plots=not args.no_plots, parameter_file=parameter_file,
                             gt_time_offset_s=args.gt_time_offset)
    except INTERRUPTIONS:
        write_report_of_interrupted_run(args.output, command_line(args), parameter_file.config)
        raise
    for topic, stats in summary['output_topics'].items():
        logger.info('%s: %d/%d frames out, %d dropped, %s', topic, stats['frames_out'],
                    stats['frames_in'], stats['dropped_frames'], latency_text(stats))
    report = write_report(args.output, eval_report(summary, args.output, command_line(args),
                                                   parameter_file.config, defaults()))
    logger.info('report written to %s (open %s first)', args.output, report)
    if not summary['complete']:
        logger.warning('the bag was damaged; the frames before (and, SQLite 3, past) the damage '
                       'were replayed: results are partial (see summary.json "errors")')
    return 0 if summary['frames_processed'] > 0 else 1
