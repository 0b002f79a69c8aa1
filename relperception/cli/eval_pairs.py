# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception eval-pairs``: two-view relative-pose evaluation of matchers, side by side.

Pairs come from bags (``--bag``, sampled at ``--gaps``), pair lists (``--pairs``: the
project's ``.npz`` format or a SuperGlue / LoFTR ``pairs_with_gt.txt`` whose image names are
relative to ``--image-dir``, see :func:`relperception.data.pairs.load_pairs`) and / or rendered
synthetic pairs (``--synthetic N``). Every matcher of ``--matchers`` is
built with ``build_matcher(name, section(config, name))`` and scored with the LoFTR /
SuperGlue protocol (:mod:`relperception.evaluation.pairs`): pose AUC@5/10/20, epipolar
precision, matches and time per pair, per source and gap. Writes into ``--output``:
``report.html`` (open it first), ``pairs_results.json`` (summaries and per-pair rows),
``pairs_table.txt``,
``pairs_auc.png`` and ``match_drawings/`` (``--drawings`` pairs per matcher and group drawn
side by side, coloured by the ground truth). A matcher that cannot be built is reported in the
JSON and makes the exit code 1; the others are still evaluated.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from relperception.atomic_files import write_text_atomic
from relperception.cli.common import int_at_least, positive_float

HELP = ('two-view relative pose evaluation (LoFTR protocol: pose AUC, epipolar precision, '
        'time per pair) of several matchers on pairs from bags, .npz / SuperGlue .txt pair lists '
        'or synthetic scenes')
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``eval-pairs``."""
    parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter   # --help shows defaults
    parser.add_argument('--bag', action='append', default=[],
                        help='rosbag2 recording with image, CameraInfo and ground-truth pose '
                             'topics (repeatable)')
    parser.add_argument('--gaps', type=int, nargs='+', default=[1],
                        help='frame gaps of the pairs sampled from bags / synthetic scenes')
    parser.add_argument('--stride', type=int_at_least(1), default=1,
                        help='bags: first frames of pairs are every STRIDE-th frame')
    parser.add_argument('--max-pairs', type=int_at_least(1),
                        help='bags: at most this many pairs per bag and gap')
    parser.add_argument('--pairs', action='append', default=[],
                        help='pair list (repeatable): .npz with K0, K1, T_0to1 and images or '
                             'image paths, or SuperGlue / LoFTR pairs_with_gt.txt (name0 name1 '
                             'rot0 rot1 K0 K1 T_0to1 per line)')
    parser.add_argument('--image-dir', metavar='DIR',
                        help="base folder of image names in .txt pair lists; default the list's "
                             'folder')
    parser.add_argument('--synthetic', type=int, default=0, metavar='N',
                        help='also evaluate N rendered synthetic first frames per gap')
    parser.add_argument('--synthetic-size', type=int, nargs=2, default=(640, 480),
                        metavar=('W', 'H'), help='size of the synthetic images')
    parser.add_argument('--seed', type=int, default=0, help='synthetic scene seed')
    parser.add_argument('--matchers', nargs='+', default=['ncc', 'loftr', 'orb'],
                        help='matchers to compare (names of build_matcher: ncc loftr orb klt)')
    parser.add_argument('--config', help='YAML configuration (matcher sections, topics.*)')
    parser.add_argument('--threshold-px', type=positive_float, default=0.5,
                        help='RANSAC threshold for the essential matrix, pixels (LoFTR: 0.5)')
    parser.add_argument('--epipolar-threshold', type=positive_float, default=5e-4,
                        help='symmetric epipolar distance threshold, normalised coordinates '
                             '(LoFTR: 5e-4 ScanNet, 1e-4 MegaDepth)')
    parser.add_argument('-o', '--output', required=True,
                        help='output folder (report.html, pairs_results.json, pairs_table.txt, '
                             'pairs_auc.png)')
    parser.add_argument('--drawings', type=int, default=2, metavar='N',
                        help='draw N pairs per matcher and group side by side into '
                             'match_drawings/ (green: right by the ground-truth epipolar '
                             'distance, red: wrong)')
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')


def collect_pairs(args: argparse.Namespace, config) -> dict:
    """Return {group name: [ImagePair, ...]} for every pair source of ``args``."""
    import numpy as np
    from relperception.data.pairs import load_pairs, synthetic_pairs
    from relperception.evaluation.bag_pairs import pairs_from_bag

    groups: dict = {}

    def add(prefix: str, pairs) -> None:
        still = sum(float(np.linalg.norm(p.T_0to1[:3, 3])) == 0.0 for p in pairs)
        if still:
            logger.warning('%s: %d of %d pairs have a zero ground-truth translation; as in '
                           "LoFTR's protocol (pure rotation) their translation error counts as "
                           '0, so they score on the rotation alone: check those poses if the '
                           'camera moved', prefix, still, len(pairs))
        gaps = sorted({p.gap for p in pairs if p.gap is not None})
        if len(gaps) > 1:
            for gap in gaps:
                groups[f'{prefix} gap {gap}'] = [p for p in pairs if p.gap == gap]
            rest = [p for p in pairs if p.gap is None]
            if rest:
                groups[prefix] = rest
        elif pairs:
            groups[prefix if not gaps else f'{prefix} gap {gaps[0]}'] = list(pairs)

    for bag in args.bag:
        pairs = pairs_from_bag(bag, args.gaps, config, stride=args.stride,
                               max_pairs=args.max_pairs)
        if not pairs:
            logger.warning('%s: no pair with ground truth at gaps %s', bag, args.gaps)
        add(Path(bag).name, pairs)
    for path in args.pairs:
        pairs = load_pairs(path, args.image_dir)
        if not pairs:
            logger.warning('%s lists no pairs', path)
        _warn_suspect_intrinsics(path, pairs)
        add(Path(path).stem, pairs)
    if args.synthetic:
        width, height = args.synthetic_size
        add('synthetic', synthetic_pairs(args.synthetic, args.gaps, seed=args.seed,
                                         width=width, height=height))
    return groups


def _warn_suspect_intrinsics(path, pairs) -> None:
    """Warn once per problem about the K of ``pairs`` that check_intrinsics finds suspect.

    :class:`~relperception.data.pairs.ImagePair` refuses the impossible ones; a suspect K
    (a principal point far from the centre: K of another image size) scores wrong rays.
    """
    from collections import Counter

    from relperception.core_types import check_intrinsics

    found: Counter = Counter()
    for pair in pairs:
        for name, K, image in (('K0', pair.K0, pair.image0), ('K1', pair.K1, pair.image1)):
            for problem in check_intrinsics(K, image.shape[1], image.shape[0]):
                found[f'{name} {problem.message}'] += 1
    for message, count in found.items():
        logger.warning('%s: %d of %d pairs: %s', path, count, len(pairs), message)


def run(args: argparse.Namespace) -> int:
    """Evaluate every matcher on every pair group; print and write the comparison."""
    from relperception.cli.common import command_line
    from relperception.config import load_config, section
    from relperception.evaluation.html_report import pairs_report, write_report
    from relperception.evaluation.pairs import (evaluate_pairs, format_pairs_table,
                                                plot_pairs_summary)
    from relperception.evaluation.report import write_json
    from relperception.matching.base import build_matcher, describe_matcher

    if not (args.bag or args.pairs or args.synthetic):
        raise ValueError('no pairs: give --bag, --pairs and/or --synthetic N')
    if args.synthetic < 0:
        raise ValueError(f'--synthetic must be >= 0, got {args.synthetic}')
    matchers = list(dict.fromkeys(args.matchers))
    if len(matchers) < len(args.matchers):
        repeated = [name for name in matchers if args.matchers.count(name) > 1]
        logger.warning('--matchers names %s more than once: each matcher is evaluated once',
                       ', '.join(repeated))
    config = load_config(args.config)
    groups = collect_pairs(args, config)
    if not groups:
        raise ValueError('no pair with ground truth was found in the given sources')
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    summaries: dict = {}
    details: dict = {}
    failed: dict = {}
    for name in matchers:
        try:
            matcher = build_matcher(name, section(config, name))
        except (ValueError, RuntimeError, OSError, ImportError) as exc:
            failed[name] = f'{type(exc).__name__}: {exc}'
            logger.error('matcher %s cannot be built: %s', name, exc)
            continue
        described = describe_matcher({**config, 'matcher': name})   # e.g. the LoFTR preset
        label = described['matcher']
        for group, pairs in groups.items():
            logger.info('%s on %s: %d pairs', label, group, len(pairs))
            key = f'{label} | {group}'
            result = evaluate_pairs(matcher, pairs, threshold_px=args.threshold_px,
                                    epipolar_threshold=args.epipolar_threshold,
                                    progress=not args.no_progress,
                                    drawings_dir=output / 'match_drawings',
                                    num_drawings=args.drawings, label=key)
            summaries[key] = {**described, 'pairs': group, **result['summary']}
            details[key] = result['rows']
    if summaries:
        table = format_pairs_table(summaries)
        print(table)
        write_text_atomic(output / 'pairs_table.txt', table + '\n')
        plot_pairs_summary(output / 'pairs_auc.png', summaries)
    results = {
        'matchers': matchers, 'groups': {g: len(p) for g, p in groups.items()},
        'summaries': summaries, 'failed_matchers': failed, 'rows': details,
        'protocol': {'ransac_threshold_px': args.threshold_px, 'ransac_confidence': 0.99999,
                     'epipolar_threshold': args.epipolar_threshold, 'motion_prior': None,
                     'auc': 'SuperGlue pose_auc of max(R error, t error) at 5/10/20 deg'},
    }
    write_json(output / 'pairs_results.json', results)
    write_report(output, pairs_report(results, output, command_line(args)))
    logger.info('results written to %s', output)
    if failed:
        logger.error('matchers not evaluated: %s', ', '.join(sorted(failed)))
        return 1
    return 0
