# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""LoFTR weights vs NCC and ORB: wide-baseline 3-D pairs, unrelated pairs, KITTI dev pairs.

Three measurements, each matcher WITHOUT a motion prior (two-view matching):

1. **Synthetic 3-D pairs** (relative pose AUC@5/10/20, LoFTR / SuperGlue protocol of
   :mod:`relperception.evaluation.pairs`): two views of held-out synthetic rooms (scene seeds
   ``--seeds``, default 5000-5004, never used for training: the shipped ``loftr_lite`` saw
   the rooms of seeds 0-23, with validation on 900-901),
   rendered at 640 x 480 with
   ``training.scene_pairs.render_scene_views`` (the same view generator as the training
   pairs). *wide*: rotation >= 30 deg between the views; *moderate*: 5-30 deg; every pair
   with a camera distance >= 0.3 m and at least 20 % of the coarse cells of image 0 covisible
   with a mutual ground-truth cell (depth-warp ground truth), chosen at random with a fixed
   seed.
2. **Unrelated pairs** (matches returned per pair; all of them are wrong): ``--unrelated``
   pairs of images that share no content: a view of one held-out room against a view of
   another, and a held-out room against a TUM RGB-D or CamVid image (resized to 640 x 480);
   plus the unrelated pair of ``test/test_shipped_loftr_weights.py``; and ``--unrelated-real``
   pairs of two real images from different recordings (TUM RGB-D, CamVid val_40, KITTI 06 and
   01, each centre-cropped to 4:3 and resized to 640 x 480; two streets are the hard case),
   reported in their own columns. LoFTR counts are matches above the configured threshold
   (``loftr.threshold``, default 0.2).
3. **KITTI dev pairs** (pose AUC): KITTI odometry 06 and 01, frames 0-50
   (``<data>/kitti_odometry_0{6,1}_f0000-0050``), frame gaps 1 and 5, converted to bags as in
   ``bench/pairs_bench.py``; skipped when the folders are absent.

Usage::

    .venv/bin/python bench/loftr_scene_bench.py --weights shipped=relperception/weights/\
loftr_lite.safetensors [--weights new=runs/x/model.safetensors] [--matchers ncc orb]
        [--output bench_output/loftr_scene] [--data ../shared/data]

Each ``--weights LABEL=FILE`` is evaluated as the LoFTR matcher ``loftr:LABEL`` (the other
``loftr.*`` settings from ``--config`` or the defaults); ``--matchers`` adds classical ones.
"""

import argparse
import datetime
import logging
import os
from pathlib import Path
import platform
import sys
import tempfile
import time

import cv2
import numpy as np
from relperception.config import load_config, section
from relperception.data.pairs import ImagePair
from relperception.evaluation.pairs import format_pairs_table
from relperception.evaluation.report import write_json
from relperception.matching.base import build_matcher
from relperception.training.homography import list_images

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pairs_bench import evaluate_groups, make_pair_groups  # noqa: E402, I100

REPO_ROOT = Path(__file__).resolve().parents[1]
#: KITTI dev sequences (names of bench/pairs_bench.py's DATASETS).
KITTI = ('kitti06', 'kitti01')
TUM = 'tum_rgbd_fr3_long_office_household_1hz_17f/rgb'
CAMVID = 'camvid_segnet_val_40/images'
#: Real recordings of the real-vs-real unrelated pairs (each pair takes two different ones).
REAL_SOURCES = (TUM, CAMVID, 'kitti_odometry_06_f0000-0050/image_l',
                'kitti_odometry_01_f0000-0050/image_l')
SIZE = (480, 640)


def parse_seeds(text: str):
    """Return the seeds of ``'A-B'`` (inclusive) or ``'A,B,C'``."""
    if '-' in text:
        lo, hi = (int(v) for v in text.split('-'))
        return list(range(lo, hi + 1))
    return [int(v) for v in text.split(',')]


def synthetic_groups(seeds, views_per_seed: int, per_seed: dict, rng: np.random.Generator):
    """Return ({group: [ImagePair]}, {seed: views}) of held-out rendered scene pairs."""
    from relperception.training.scene_pairs import render_scene_views, scene_pair_table

    groups = {name: [] for name in per_seed}
    all_views = {}
    for seed in seeds:
        views = render_scene_views(seed, views_per_seed, SIZE[1], SIZE[0])
        all_views[seed] = views
        table = scene_pair_table(views)
        table = table[(table[:, 3] >= 0.3) & (table[:, 4] >= 0.2)]
        for name, (lo, hi) in (('wide', (30.0, 180.0)), ('moderate', (5.0, 30.0))):
            if name not in per_seed:
                continue
            chosen = table[(table[:, 2] >= lo) & (table[:, 2] < hi)]
            count = min(per_seed[name], len(chosen))
            if count < per_seed[name]:
                logging.warning('seed %d: only %d %s pairs', seed, count, name)
            for a, b, angle, *_ in chosen[rng.choice(len(chosen), count, replace=False)]:
                v0, v1 = views[int(a)], views[int(b)]
                T_0to1 = np.linalg.inv(v1.T_world_cam) @ v0.T_world_cam
                groups[name].append(ImagePair(
                    v0.image, v1.image, v0.K, v1.K, T_0to1,
                    name=f'synthetic{seed}:{int(a)}-{int(b)} ({angle:.0f} deg)',
                    source='synthetic'))
    return groups, all_views


def recording_images(path: Path) -> list:
    """Return the sorted image files of the folder ``path`` ([] when it is absent or empty)."""
    if not path.is_dir():
        return []
    try:
        return list_images(path)
    except ValueError:   # a folder without images
        return []


def load_grey_4x3(path: Path) -> np.ndarray:
    """Return the image at ``path`` as (480, 640) uint8 grey, centre-cropped to 4:3."""
    image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if image is None:
        raise ValueError(f'{path}: not a readable image')
    height, width = image.shape
    crop_w = min(width, height * SIZE[1] // SIZE[0])
    crop_h = min(height, width * SIZE[0] // SIZE[1])
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    return cv2.resize(image[top:top + crop_h, left:left + crop_w], (SIZE[1], SIZE[0]),
                      interpolation=cv2.INTER_AREA)


def real_unrelated_pairs(data_dir: Path, count: int, rng: np.random.Generator):
    """Return [(name, image0, image1)]: ``count`` pairs of images of two different recordings.

    Names start with ``real:``. Fewer than two recordings present: no pairs (a warning).
    """
    recordings = {}
    for folder in REAL_SOURCES:
        files = recording_images(data_dir / folder)
        if files:
            recordings[folder.split('/')[0]] = files
    if count > 0 and len(recordings) < 2:
        logging.warning('fewer than two real recordings under %s: no real unrelated pairs',
                        data_dir)
        return []
    names = sorted(recordings)
    combos = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    pairs = []
    for k in range(count):
        name0, name1 = combos[k % len(combos)]
        path0 = recordings[name0][int(rng.integers(len(recordings[name0])))]
        path1 = recordings[name1][int(rng.integers(len(recordings[name1])))]
        pairs.append((f'real:{name0}:{path0.name} vs {name1}:{path1.name}',
                      load_grey_4x3(path0), load_grey_4x3(path1)))
    return pairs


def unrelated_pairs(all_views: dict, data_dir: Path, count: int, rng: np.random.Generator):
    """Return [(name, image0, image1)] of pairs that share no content (same size each)."""
    seeds = sorted(all_views)
    real = []
    for folder in (TUM, CAMVID):
        path = data_dir / folder
        if not path.is_dir():
            logging.warning('%s not found: unrelated pairs use synthetic rooms only', path)
        real.extend((f'{folder.split("/")[0]}:{p.name}', p) for p in recording_images(path))
    pairs = []
    for k in range(count):
        seed = seeds[k % len(seeds)]
        view = all_views[seed][int(rng.integers(len(all_views[seed])))]
        if k % 2 == 0 or not real:
            other_seed = seeds[(k + 1) % len(seeds)]
            other = all_views[other_seed][int(rng.integers(len(all_views[other_seed])))]
            pairs.append((f'synthetic{seed} vs synthetic{other_seed}', view.image, other.image))
        else:
            name, path = real[int(rng.integers(len(real)))]
            image = cv2.resize(cv2.imread(str(path), cv2.IMREAD_GRAYSCALE), (SIZE[1], SIZE[0]),
                               interpolation=cv2.INTER_AREA)
            pairs.append((f'synthetic{seed} vs {name}', view.image, image))
    sys.path.insert(0, str(REPO_ROOT / 'test'))
    try:
        from test_shipped_loftr_weights import make_pairs
        test_pairs = make_pairs()
        pairs.append(('test_shipped_loftr_weights room vs texture', test_pairs['room'][0],
                      test_pairs['texture'][1]))
    except ImportError as exc:   # the test folder is not installed with the package
        logging.warning('test pair not available: %s', exc)
    finally:
        sys.path.pop(0)
    return pairs


def kitti_groups(data_dir: Path, work: Path, gaps, max_pairs):
    """Return {'<kitti> gap <g>': [ImagePair]} of the KITTI dev sequences present."""
    return make_pair_groups(data_dir, work, gaps, 0, max_pairs, datasets=KITTI)


def build_matchers(args, config):
    """Return {name: matcher} and {name: error} of the requested matchers."""
    matchers, failed = {}, {}
    wanted = [(name, name, section(config, name)) for name in args.matchers]
    for spec in args.weights:
        label, _, path = spec.partition('=')
        if not path:
            label, path = Path(spec).stem, spec
        conf = dict(section(config, 'loftr'), weights=str(path))
        wanted.append((f'loftr:{label}', 'loftr', conf))
    for name, kind, conf in wanted:
        try:
            matchers[name] = build_matcher(kind, conf)
        except (ValueError, RuntimeError, OSError, ImportError) as exc:
            failed[name] = f'{type(exc).__name__}: {exc}'
            logging.error('matcher %s not built: %s', name, exc)
    return matchers, failed


def format_unrelated_table(counts: dict) -> str:
    """Return a table of match counts on unrelated pairs per matcher.

    Columns: median / mean / max / count of the pairs with a synthetic room, the same of the
    real-vs-real pairs (names ``real:...``; ``-`` without them), the test pair's count.
    """
    lines = [['matcher', 'median', 'mean', 'max', 'pairs', 'real median', 'real mean',
              'real max', 'real pairs', 'test pair']]

    def stats(values):
        if not values:
            return ['-', '-', '-', '0']
        values = np.array(values)
        return [f'{np.median(values):.0f}', f'{values.mean():.1f}', f'{values.max():.0f}',
                str(len(values))]

    for name, rows in counts.items():
        synthetic = [r['matches'] for r in rows
                     if not r['name'].startswith(('test_', 'real:'))]
        real = [r['matches'] for r in rows if r['name'].startswith('real:')]
        test = [r['matches'] for r in rows if r['name'].startswith('test_')]
        lines.append([name, *stats(synthetic), *stats(real), str(test[0]) if test else '-'])
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    return '\n'.join('  '.join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(row, widths))) for row in lines)


def main(argv=None) -> int:
    """Run the benchmark, print the tables, write JSON and text."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--weights', action='append', default=[], metavar='LABEL=FILE',
                        help='LoFTR weights to evaluate (repeatable)')
    parser.add_argument('--matchers', nargs='*', default=['ncc', 'orb'],
                        help='classical matchers to compare (default ncc orb)')
    parser.add_argument('--data', type=Path, default=REPO_ROOT.parent / 'shared' / 'data')
    parser.add_argument('--output', type=Path,
                        default=REPO_ROOT / 'bench_output' / 'loftr_scene')
    parser.add_argument('--seeds', default='5000-5004', help='held-out scene seeds')
    parser.add_argument('--views', type=int, default=24, help='rendered views per seed')
    parser.add_argument('--wide', type=int, default=8, help='wide pairs per seed')
    parser.add_argument('--moderate', type=int, default=4, help='moderate pairs per seed')
    parser.add_argument('--unrelated', type=int, default=20,
                        help='unrelated pairs with a synthetic room (20)')
    parser.add_argument('--unrelated-real', type=int, default=12,
                        help='unrelated pairs of two real recordings (12)')
    parser.add_argument('--gaps', type=int, nargs='+', default=[1, 5], help='KITTI gaps')
    parser.add_argument('--max-kitti-pairs', type=int, help='KITTI pairs per sequence and gap')
    parser.add_argument('--no-kitti', action='store_true', help='skip the KITTI pairs')
    parser.add_argument('--config', help='YAML configuration (matcher sections)')
    parser.add_argument('--threads', type=int, default=1, help='torch and OpenCV threads (1)')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')
    cv2.setNumThreads(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    config = load_config(args.config)
    started = time.perf_counter()
    rng = np.random.default_rng(20261202)
    per_seed = {'wide': args.wide, 'moderate': args.moderate}
    per_seed = {k: v for k, v in per_seed.items() if v > 0}
    groups, all_views = synthetic_groups(parse_seeds(args.seeds), args.views, per_seed, rng)
    groups = {f'synthetic {k}': v for k, v in groups.items() if v}
    unrelated = unrelated_pairs(all_views, args.data, args.unrelated, rng)
    unrelated += real_unrelated_pairs(args.data, args.unrelated_real,
                                      np.random.default_rng(20261203))
    if not args.no_kitti:
        with tempfile.TemporaryDirectory(prefix='loftr_scene_bench_') as tmp:
            groups.update(kitti_groups(args.data, Path(tmp), args.gaps, args.max_kitti_pairs))
    matchers, failed = build_matchers(args, config)
    summaries, rows, counts = {}, {}, {}
    for name, matcher in matchers.items():
        evaluate_groups(name, matcher, groups, summaries, rows)
        counts[name] = []
        for pair_name, image0, image1 in unrelated:
            try:
                found = len(matcher.match(image0, image1))
            except (ValueError, RuntimeError, cv2.error) as exc:
                logging.warning('%s on %s failed: %s', name, pair_name, exc)
                found = 0
            counts[name].append({'name': pair_name, 'matches': int(found)})
    ordered = dict(sorted(summaries.items(), key=lambda kv: (kv[1]['pairs'], kv[0])))
    pose_table = format_pairs_table(ordered) if ordered else '(no matcher evaluated)'
    unrelated_table = format_unrelated_table(counts) if counts else ''
    text = (f'relative pose (no motion prior)\n{pose_table}\n\n'
            f'matches on unrelated pairs (all wrong)\n{unrelated_table}\n')
    print(text)
    if failed:
        print('not evaluated: ' + '; '.join(f'{k}: {v}' for k, v in failed.items()))
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / 'loftr_scene_bench.txt').write_text(text, encoding='utf-8')
    write_json(args.output / 'loftr_scene_bench.json', {
        'date_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(),
        'machine': {'platform': platform.platform(), 'cpus': os.cpu_count(),
                    'torch_and_opencv_threads': args.threads},
        'args': {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        'groups': {g: len(p) for g, p in groups.items()},
        'summaries': summaries, 'unrelated': counts, 'failed_matchers': failed, 'rows': rows,
        'loftr_conf': section(config, 'loftr'), 'elapsed_s': time.perf_counter() - started,
    })
    logging.info('wrote %s', args.output)
    return 0 if summaries else 1


if __name__ == '__main__':
    sys.exit(main())
