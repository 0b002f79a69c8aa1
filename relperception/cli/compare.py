# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception compare --bags B... --configs C... -o DIR``: a study over bags x configs."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
import sys

HELP = ('evaluate every bag with every configuration as eval does (a study), in parallel '
        'and resumable; one table and one recommendation')
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``compare``."""
    parser.add_argument('--bags', nargs='+', default=[], metavar='BAG',
                        help='rosbag2 directories or .mcap / .db3 files')
    parser.add_argument('--configs', nargs='+', default=[], metavar='CONFIG',
                        help='configurations: NAME=YAML, YAML (named by its file stem) or '
                             '"default" (the package defaults; NAME=default names them); the '
                             'first is the reference of the recommendation')
    parser.add_argument('--study', metavar='YAML',
                        help='study file with bags: (list) and configs: (name: YAML or '
                             'default), optional mode:, dense: and gt_time_offset: (seconds, or '
                             'BAG: seconds); --bags / --configs add to it')
    parser.add_argument('-o', '--output', required=True,
                        help='study folder: results.csv, results.json, aggregate.json '
                             '(results.parquet with pyarrow) and cells/<bag>__<config>/ as '
                             'eval writes them; a rerun reuses finished cells whose inputs are '
                             'unchanged')
    parser.add_argument('--workers', type=int, default=1,
                        help='local worker processes (default 1); each cell gets cpu_count / '
                             'workers threads')
    parser.add_argument('--ray', metavar='ADDRESS',
                        help='run the cells as tasks on a running Ray cluster instead: auto '
                             '(RAY_ADDRESS, else the local head) or HOST:PORT of its head; bags '
                             'and --output on a filesystem every node sees at the same paths '
                             "(needs pip install 'ray[default]')")
    parser.add_argument('--cpus-per-cell', type=int, default=1, metavar='N',
                        help='with --ray: CPUs each cell reserves and threads it uses '
                             '(default 1); LoFTR on CUDA also reserves one GPU')
    parser.add_argument('--mode', choices=('auto', 'rgbd', 'mono'),
                        help="odometry mode of every cell (default: each configuration's)")
    parser.add_argument('--dense', action='store_true',
                        help="also score each configuration's dense model against the bags' "
                             'depth / label topics, as eval --dense (mIoU, AbsRel, ms)')
    parser.add_argument('--gt-time-offset', action='append', default=[],
                        metavar='[BAG=]SECONDS',
                        help='as eval --gt-time-offset, for every bag (SECONDS) or for one '
                             '(BAG=SECONDS, the bag as given; repeat the option); results.csv '
                             'has gt_time_offset_s and the estimate gt_time_offset_estimate_s '
                             'per cell')
    parser.add_argument('--plots', action='store_true', help="write each cell's PNG plots")
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')


def run(args: argparse.Namespace) -> int:
    """Run the study, write the tables and print the recommendation; 1 if every cell failed."""
    from tqdm import tqdm

    from relperception.cli.common import command_line
    from relperception.evaluation.html_report import study_report, write_report
    from relperception.evaluation.study_report import (aggregate, format_table, pareto_front,
                                                       plot_pareto, recommend, write_results)
    from relperception.pipeline.study import (load_study, parse_config_spec,
                                              parse_gt_time_offsets, plan_cells, run_study,
                                              study_folder_lock)

    if not args.ray and args.cpus_per_cell != 1:
        raise ValueError('--cpus-per-cell applies with --ray (without it, --workers sets how '
                         'many cells run at once)')
    bags, configs, mode, dense, study_offset = [], [], args.mode, args.dense, None
    if args.study:
        bags, configs, options = load_study(args.study)
        mode = mode or options.get('mode')
        dense = dense or options.get('dense', False)
        study_offset = options.get('gt_time_offset')
    bags += args.bags
    configs += [parse_config_spec(spec) for spec in args.configs]
    cells = plan_cells(bags, configs, args.output, mode, dense=dense,
                       gt_time_offsets=parse_gt_time_offsets(args.gt_time_offset, bags,
                                                             study_offset))
    with study_folder_lock(args.output):
        if args.ray and args.workers != 1:
            logger.warning('--workers is not used with --ray (see --cpus-per-cell)')
        with tqdm(total=len(cells), unit='cell', disable=args.no_progress,
                  desc='compare (ray)' if args.ray else 'compare') as bar:
            rows = run_study(cells, workers=args.workers, mode=mode, plots=args.plots,
                             on_row=lambda row: bar.update(1), ray_address=args.ray,
                             cpus_per_cell=args.cpus_per_cell)
        names = [c.name for c in configs]
        aggregates = aggregate(rows, names)
        recommendation = recommend(aggregates)
        written = write_results(rows, aggregates, recommendation, args.output)
        front = pareto_front(aggregates)
        pareto_png = plot_pareto(Path(args.output) / 'pareto.png', aggregates)
        written['report.html'] = write_report(args.output, study_report(
            rows, aggregates, recommendation, front, Path(args.output), command_line(args),
            pareto_png))
    reused = sum(bool(r.get('reused')) for r in rows)
    failed = [r for r in rows if r['status'] != 'ok']
    for row in failed:
        logger.warning('cell %s x %s failed: %s', row['bag'], row['config'], row['error'])
    sys.stdout.write(format_table(aggregates) + '\n' + recommendation + '\n')
    logger.info('%d cells (%d reused from an earlier run, %d failed); written: %s', len(rows),
                reused, len(failed), ', '.join(sorted(written)))
    return 1 if len(failed) == len(rows) else 0
