# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception synth``: write a synthetic sequence with full ground truth to a bag."""

from __future__ import annotations

import argparse
import logging

HELP = 'write a synthetic RGB-D sequence with ground-truth depth, labels and poses to a bag'
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``synth``."""
    parser.add_argument('-o', '--output', required=True, help='bag directory to create')
    parser.add_argument('--frames', type=int, default=100, help='number of frames (default 100)')
    parser.add_argument('--seed', type=int, default=0, help='scene and noise seed')
    parser.add_argument('--width', type=int, default=640, help='image width, pixels')
    parser.add_argument('--height', type=int, default=480, help='image height, pixels')
    parser.add_argument('--fps', type=float, default=10.0, help='frame rate, Hz')
    parser.add_argument('--noise', type=float, default=0.0,
                        help='standard deviation of the image noise, grey levels')
    parser.add_argument('--speed-ratio', type=float, default=1.0,
                        help='fastest / slowest cruise speed along the path (default 1)')
    parser.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap')
    parser.add_argument('--overwrite', action='store_true', help='replace an existing bag')


def run(args: argparse.Namespace) -> int:
    """Write the bag and log what was written."""
    from relperception.data.synthetic_bag import write_synthetic_bag

    try:
        summary = write_synthetic_bag(args.output, frames=args.frames, seed=args.seed,
                                      width=args.width, height=args.height, fps=args.fps,
                                      noise=args.noise, storage=args.storage,
                                      overwrite=args.overwrite, speed_ratio=args.speed_ratio)
    except FileExistsError as exc:
        logger.error('%s', exc)
        return 1
    logger.info('wrote %d synthetic frames (%dx%d) to %s (%s)', summary['frames'], args.width,
                args.height, summary['path'], summary['storage'])
    for topic, count in sorted(summary['messages'].items()):
        logger.info('  %-28s %6d messages', topic, count)
    return 0
