# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Frame-to-frame VO benchmark: NCC against its peers, pyramidal KLT and ORB, in one run.

Every method runs through the same offline pipeline (``evaluate_bag``): the same pose step
(monocular essential matrix + ``recoverPose``, metric scale from the ground-truth step length,
``--gt-scale``), the same bag, the same machine and the same moment; only the correspondences
differ. Results are printed as ratios against KLT, the baseline a robotics engineer would pick
instead of NCC, so that they do not depend on how fast this machine is:

* ``time``: median VO time per frame (matching + pose), and its ratio to KLT;
* ``ATE``: absolute trajectory error after Sim(3) alignment (evo), and its ratio to KLT;
* ``drift``: KITTI-style translational drift over sub-sequences (percent of distance).

Datasets: a synthetic 640x480 recording (always), and KITTI odometry 06 and 01 (1226x370 /
1241x376) and TUM fr3 long_office_household (640x480, frames ~1 s apart) when
``../shared/data`` is present.

Usage::

    .venv/bin/python bench/vo_bench.py [--data ../shared/data] [--output bench_output]
"""

import argparse
import json
import logging
from pathlib import Path
import sys
import tempfile
import time

import cv2
import numpy as np

from relperception.config import load_config, section
from relperception.data.converters import convert_kitti, convert_tum
from relperception.data.synthetic import iter_sequence
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.matching import build_matcher
from relperception.pipeline.offline_eval import evaluate_bag

METHODS = ('ncc', 'klt', 'orb')
BASELINE = 'klt'
REPO_ROOT = Path(__file__).resolve().parents[1]
DATASETS = {
    'kitti06': ('kitti', 'kitti_odometry_06_f0000-0050'),
    'kitti01': ('kitti', 'kitti_odometry_01_f0000-0050'),
    'tum_fr3_1hz': ('tum', 'tum_rgbd_fr3_long_office_household_1hz_17f'),
}


def make_bags(data_dir: Path, work: Path, synthetic_frames: int) -> dict:
    """Return {name: bag path} for the synthetic sequence and every dataset present."""
    bags = {}
    synthetic = work / 'synthetic_640x480'
    write_synthetic_bag(synthetic, frames=synthetic_frames, seed=0)
    bags['synthetic_640x480'] = synthetic
    for name, (kind, folder) in DATASETS.items():
        source = data_dir / folder
        if not source.is_dir():
            logging.warning('%s not found: skipping %s', source, name)
            continue
        convert = convert_kitti if kind == 'kitti' else convert_tum
        convert(source, work / name)
        bags[name] = work / name
    return bags


def matcher_timing(data_dir: Path, repeats: int) -> list:
    """Return rows of median matching time per pair at KITTI size and 640x480 (ms)."""
    pairs = {}
    kitti = data_dir / DATASETS['kitti06'][1] / 'image_l'
    if kitti.is_dir():
        pairs['kitti06 1226x370'] = [cv2.imread(str(kitti / f'{i:06d}.png'), cv2.IMREAD_GRAYSCALE)
                                     for i in (0, 1)]
    _, frames = iter_sequence(num_frames=2, seed=0)
    pairs['synthetic 640x480'] = [cv2.cvtColor(f.rgb, cv2.COLOR_RGB2GRAY) for f in frames]
    config = load_config()
    rows = []
    for pair_name, (image0, image1) in pairs.items():
        times = {}
        for method in METHODS:
            matcher = build_matcher(method, section(config, method))
            matcher.match(image0, image1)  # warm-up
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                matches = matcher.match(image0, image1)
                samples.append((time.perf_counter() - start) * 1e3)
            times[method] = (float(np.median(samples)), len(matches))
        for method in METHODS:
            ms, count = times[method]
            rows.append({'pair': pair_name, 'method': method, 'match_ms': ms,
                         'ratio_to_klt': ms / times[BASELINE][0], 'matches': count})
    return rows


def run(data_dir: Path, output: Path, synthetic_frames: int, repeats: int) -> dict:
    """Run every method on every bag; return the results (also written to output)."""
    output.mkdir(parents=True, exist_ok=True)
    results = {'vo': [], 'matching': matcher_timing(data_dir, repeats)}
    with tempfile.TemporaryDirectory() as tmp:
        bags = make_bags(data_dir, Path(tmp), synthetic_frames)
        for name, bag in bags.items():
            per_method = {}
            for method in METHODS:
                config = load_config(overrides={'matcher': method})
                summary = evaluate_bag(bag, output / name / method, config, mode='mono',
                                       gt_scale=True, progress=False, plots=True)
                per_method[method] = summary
            base = per_method[BASELINE]
            for method, s in per_method.items():
                results['vo'].append({
                    'dataset': name, 'method': method,
                    'frames': s['frames_processed'], 'lost': s['frames_lost'],
                    'ms_median': s['timing_median_ms'],
                    'time_ratio_to_klt': s['timing_median_ms'] / base['timing_median_ms'],
                    'ate_rmse_m': s['ate_rmse_m'],
                    'ate_ratio_to_klt': _ratio(s['ate_rmse_m'], base['ate_rmse_m']),
                    'drift_percent': s['drift_percent'],
                    'rpe_rot_rmse_deg': s['rpe_rot_rmse_deg'],
                })
    with open(output / 'results.json', 'w', encoding='utf-8') as stream:
        json.dump(results, stream, indent=2)
    return results


def _ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def _fmt(value, spec):
    return 'n/a' if value is None else format(value, spec)


def format_results(results: dict) -> str:
    """Return the results as two plain-text tables."""
    lines = ['Matching only (median over repeats; ratio = time / KLT time in this run)',
             f'{"pair":<20} {"method":<6} {"ms":>8} {"x KLT":>7} {"matches":>8}']
    for r in results['matching']:
        lines.append(f'{r["pair"]:<20} {r["method"]:<6} {r["match_ms"]:8.2f} '
                     f'{r["ratio_to_klt"]:7.2f} {r["matches"]:8d}')
    lines += ['', 'Frame-to-frame monocular VO with ground-truth step length (same pose step)',
              f'{"dataset":<18} {"method":<6} {"frames":>6} {"lost":>4} {"ms/frame":>9} '
              f'{"x KLT":>6} {"ATE m":>8} {"x KLT":>6} {"drift %":>8} {"RPE deg":>8}']
    for r in results['vo']:
        lines.append(
            f'{r["dataset"]:<18} {r["method"]:<6} {r["frames"]:6d} {r["lost"]:4d} '
            f'{r["ms_median"]:9.2f} {r["time_ratio_to_klt"]:6.2f} '
            f'{_fmt(r["ate_rmse_m"], "8.4f")} {_fmt(r["ate_ratio_to_klt"], "6.2f")} '
            f'{_fmt(r["drift_percent"], "8.2f")} {_fmt(r["rpe_rot_rmse_deg"], "8.3f")}')
    return '\n'.join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data', type=Path, default=REPO_ROOT.parent / 'shared' / 'data',
                        help='folder with the development datasets (optional)')
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output')
    parser.add_argument('--synthetic-frames', type=int, default=60)
    parser.add_argument('--repeats', type=int, default=20)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
    results = run(args.data, args.output, args.synthetic_frames, args.repeats)
    sys.stdout.write(format_results(results) + '\n')
    sys.stdout.write(f'results: {args.output / "results.json"}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
