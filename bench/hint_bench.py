# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Translation hints (wheel odometry) in monocular VO: two-view steps against the hinted map.

Monocular NCC VO gets the distance travelled between frames from another sensor; here the
ground truth, exact or made noisy like wheel odometry (each step times ``(1 + bias)`` and
``(1 + N(0, sigma))``, seeded: ``relperception eval --gt-scale --gt-scale-noise SIGMA BIAS``).
Two ways to use it, measured in one run on the same recordings:

* ``two_view``: ``odometry.hint_map: false`` (the default): every frame is a two-view step
  (essential matrix) whose length is the hint;
* ``hinted_map``: ``odometry.hint_map: true``: the local map carries the scale; the first
  baseline is the hint and the hinted distance between consecutive keyframes is a residual of
  the windowed bundle adjustment (``odometry.hint_sigma_rel`` of the distance).

Recordings: the demo recording, the long synthetic one of ``vo_bench.py`` and KITTI 06 / 01
when ``../shared/data`` is present. Sim(3)-aligned ATE (the bias is a scale error the
alignment removes; the drift % keeps it) and drift; ``x two-view`` is the map's ATE over the
two-view ATE.

Usage::

    .venv/bin/python bench/hint_bench.py [--data ../shared/data] [--output bench_output/hints]
"""

import argparse
import json
import logging
from pathlib import Path
import sys
import tempfile

from relperception.config import load_config
from relperception.data.converters import convert_kitti
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.pipeline.offline_eval import evaluate_bag

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vo_bench import DATASETS, MONO_SYNTHETIC  # noqa: E402, I100

REPO_ROOT = Path(__file__).resolve().parents[1]
#: (sigma_rel, bias_rel) of the hints: exact, and wheel odometry with 5 % noise, 2 % bias.
HINTS = {'exact': None, 'noisy 5 %, bias 2 %': (0.05, 0.02)}
METHODS = {'two_view': False, 'hinted_map': True}


def make_bags(data_dir: Path, work: Path) -> dict:
    """Return {name: bag} for the synthetic recordings and the KITTI dev frames present."""
    bags = {}
    for name, (frames, seed, speed_ratio) in MONO_SYNTHETIC.items():
        bags[name] = work / name
        write_synthetic_bag(bags[name], frames=frames, seed=seed, speed_ratio=speed_ratio)
    for name, (kind, folder) in DATASETS.items():
        if kind != 'kitti':
            continue
        source = data_dir / folder
        if not source.is_dir():
            logging.warning('%s not found: skipping %s', source, name)
            continue
        convert_kitti(source, work / name)
        bags[name] = work / name
    return bags


def run(data_dir: Path, output: Path) -> list:
    """Evaluate every bag x hint quality x method; return the rows (also written to output)."""
    output.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for bag_name, bag in make_bags(data_dir, Path(tmp)).items():
            for hint_name, noise in HINTS.items():
                results = {}
                for method, hint_map in METHODS.items():
                    config = load_config(overrides={'odometry.hint_map': hint_map})
                    folder = output / bag_name / hint_name.split()[0] / method
                    results[method] = evaluate_bag(bag, folder, config, mode='mono',
                                                   gt_scale=True, gt_scale_noise=noise,
                                                   progress=False, plots=False)
                reference = results['two_view']['ate_rmse_m']
                for method, s in results.items():
                    rows.append({
                        'recording': bag_name, 'hints': hint_name, 'method': method,
                        'ate_rmse_m': s['ate_rmse_m'], 'drift_percent': s['drift_percent'],
                        'ate_ratio_to_two_view': (s['ate_rmse_m'] / reference
                                                  if s['ate_rmse_m'] and reference else None),
                        'frames_lost': s['frames_lost'],
                        'tracking_median_ms': s['tracking_median_ms'],
                        'frames_by_scale_source': s['frames_by_scale_source']})
    with open(output / 'results.json', 'w', encoding='utf-8') as stream:
        json.dump(rows, stream, indent=2)
    return rows


def format_rows(rows: list) -> str:
    """Return the rows as a plain-text table."""
    lines = [f'{"recording":<18} {"hints":<20} {"method":<11} {"ATE m":>8} {"x two-view":>10} '
             f'{"drift %":>8} {"lost":>4}']
    for r in rows:
        ratio = r['ate_ratio_to_two_view']
        lines.append(f'{r["recording"]:<18} {r["hints"]:<20} {r["method"]:<11} '
                     f'{r["ate_rmse_m"]:8.4f} {"n/a" if ratio is None else f"{ratio:.2f}":>10} '
                     f'{r["drift_percent"]:8.2f} {r["frames_lost"]:4d}')
    return '\n'.join(lines)


def main(argv=None) -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data', type=Path, default=REPO_ROOT.parent / 'shared' / 'data',
                        help='folder of the KITTI dev frames (skipped when absent)')
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output' / 'hints')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(format_rows(run(args.data, args.output)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
