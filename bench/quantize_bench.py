# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""INT8 and FP16 exports on the CPU: speed and accuracy against the float32 export, in one run.

Every file is made with the ``relperception export`` command a user runs
(``--format onnx``, ``--int8 --calibration-bag B --calibration-frames N``, the same with
``--int8-quantize-outputs`` for dense models, ``--fp16``) and run with ``OnnxRuntimeBackend``
on ``--threads`` threads (default 2).

* **Speed**: milliseconds per image (LoFTR: per pair) at the preset's input size and at
  480x640 (rounded up to the preset's size multiple), median of ``--repeats`` runs, the files
  alternating so that a load change on the machine hits all of them; ratio =
  float32 time / other time (> 1: faster). The ratio of the fastest runs (least disturbed by
  other processes) and the process CPU time are reported too.
* **Segmentation**: mIoU on the CamVid validation images (``camvid_segnet_val_101``, converted to
  a bag with the ``relperception convert images`` converter and scored by
  ``relperception.pipeline.dense_eval.evaluate_dense``, the code of ``relperception eval
  --dense``; ``--val-images`` spread over the 101 images).
* **Depth**: AbsRel of the metric depth on synthetic rooms of seeds 1000-1001 (10 frames each,
  320x240), the validation scenes of the shipped depth heads (they learnt synthetic rooms:
  CamVid has no depth).
* **INT8 calibration**: the CamVid *training* images (``camvid_segnet_train_367`` as a bag),
  never the validation images; LoFTR: pairs from a synthetic bag of scene seed 1.
* **LoFTR** (``loftr_lite``): matches and relative-pose AUC@5/10/20 on synthetic pairs of scene
  seed 100 (held out), :mod:`relperception.evaluation.pairs` protocol.

Presets without shipped weights (``resnet18``: the ResNet-18 DPT preset) are exported with
random weights and timed only: their accuracy would mean nothing.

Usage::

    .venv/bin/python bench/quantize_bench.py [--data ../shared/data] [--output bench_output]
        [--presets conv_small resnet18 vit_small loftr_lite] [--threads 2] [--repeats 20]
        [--val-images 101] [--calibration-frames 64]
"""

import argparse
import datetime
import functools
import json
import logging
import os
from pathlib import Path
import platform
import sys
import tempfile
import time

import cv2
import numpy as np
from relperception.cli.main import main as cli_main
from relperception.config import load_config, section
from relperception.data.converters import convert_image_folder
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.data.topics import IMAGE
from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved_times  # noqa: E402, I100

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Files compared: float32, INT8 (output layers float32, the default), INT8 with the output
#: layers quantised too (``--int8-quantize-outputs``; dense models only) and FP16.
VARIANTS = ('float32', 'int8', 'int8_q', 'float16')
LABELS = {'float32': 'float32', 'int8': 'int8', 'int8_q': 'int8 -q', 'float16': 'float16'}
PRESETS = ('conv_small', 'resnet18', 'vit_small', 'loftr_lite')
LOFTR = ('loftr_lite', 'loftr')
LARGE_SIZE = (480, 640)
DEPTH_SEEDS = (1000, 1001)
DEPTH_FRAMES_PER_SEED = 10
LOFTR_PAIRS = 8
LOFTR_GAP = 5
LOFTR_EVAL_SEED = 100
LOFTR_CALIBRATION_SEED = 1

logger = logging.getLogger('quantize_bench')


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def has_shipped_weights(preset: str) -> bool:
    """Return whether weights ship with the package for ``preset``."""
    from relperception.models.presets import load_model_config
    from relperception.models.weights import shipped_weights

    name = preset if preset in LOFTR else (load_model_config(preset).get('weights') or '')
    if not name:
        return False
    try:
        shipped_weights(name)
    except (FileNotFoundError, ValueError):
        return False
    return True


def export_all(preset: str, work: Path, calibration_bag: Path, frames: int) -> dict:
    """Export the files of ``VARIANTS`` for ``preset`` with the CLI; return their paths."""
    extra = [] if has_shipped_weights(preset) else ['--random-weights']
    int8 = ['--int8', '--calibration-bag', str(calibration_bag), '--calibration-frames',
            str(frames)]
    options = {'float32': [], 'int8': int8, 'int8_q': int8 + ['--int8-quantize-outputs'],
               'float16': ['--fp16']}
    variants = [v for v in VARIANTS if v != 'int8_q' or preset not in LOFTR]
    paths = {v: work / f'{preset}.{v}.onnx' for v in variants}
    seconds = {}
    for precision, path in paths.items():
        start = time.perf_counter()
        rc = cli_main(['export', '--config', preset, '-o', str(path), *extra,
                       *options[precision]])
        seconds[precision] = time.perf_counter() - start
        if rc != 0:
            raise RuntimeError(f'relperception export {preset} {precision} failed ({rc})')
    return {'paths': paths, 'export_s': seconds, 'weights': 'random' if extra else 'shipped'}


def time_backends(paths: dict, inputs: dict, threads: int, repeats: int) -> dict:
    """Return {precision: (median wall ms, median CPU ms, fastest wall ms)}, alternating."""
    backends = {p: OnnxRuntimeBackend(path, num_threads=threads, allow_spinning=False)
                for p, path in paths.items()}
    times = interleaved_times({p: functools.partial(b.run, inputs) for p, b in backends.items()},
                              repeats)
    return {p: [1e3 * t['wall_s'], 1e3 * t['cpu_s'], 1e3 * t['best_wall_s']]
            for p, t in times.items()}


def speed(preset: str, paths: dict, threads: int, repeats: int) -> list:
    """Time the three files at the preset size and at 480x640; return one row per size."""
    from relperception.runtime.onnx_metadata import read_metadata

    meta = read_metadata(paths['float32'])
    multiple = int(meta['size_multiple'])
    export_size = tuple(meta['export_size'])
    large = tuple(_round_up(v, multiple) for v in LARGE_SIZE)
    rng = np.random.default_rng(0)
    rows = []
    for size in dict.fromkeys([export_size, large]):
        if preset in LOFTR:
            from relperception.data.synthetic import iter_sequence

            _, frames = iter_sequence(num_frames=6, seed=LOFTR_EVAL_SEED, width=size[1],
                                      height=size[0])
            frames = list(frames)
            grey = [cv2.cvtColor(f.rgb, cv2.COLOR_RGB2GRAY).astype(np.float32)[None, None]
                    / 255.0 for f in (frames[0], frames[5])]
            inputs = {'image0': grey[0], 'image1': grey[1]}
        else:
            inputs = {'image': rng.standard_normal((1, 3, *size), dtype=np.float32)}
        ms = time_backends(paths, inputs, threads, repeats)
        rows.append({'size': list(size),
                     **{f'{p}_ms': ms[p][0] for p in paths},
                     **{f'{p}_cpu_ms': ms[p][1] for p in paths},
                     **{f'{p}_best_ms': ms[p][2] for p in paths},
                     **{f'{p}_speedup': ms['float32'][0] / ms[p][0] for p in paths},
                     **{f'{p}_best_speedup': ms['float32'][2] / ms[p][2] for p in paths}})
    return rows


def dense_accuracy(preset: str, paths: dict, val_bag: Path, val_images: int, threads: int,
                   work: Path) -> dict:
    """Return {precision: {'miou', 'abs_rel', ...}} of a dense preset's three files."""
    from relperception.data.bag import BagReader
    from relperception.data.error_log import ErrorLog
    from relperception.evaluation.depth import DepthMetricsAccumulator
    from relperception.pipeline.dense_eval import evaluate_dense
    from relperception.pipeline.dense_pipeline import DensePipeline
    from relperception.training.dense_data import synthetic_frames

    images, depths = synthetic_frames(DEPTH_SEEDS, DEPTH_FRAMES_PER_SEED, width=320, height=240)
    result = {}
    for precision, path in paths.items():
        config = load_config(overrides={'dense.model': preset, 'dense.backend': 'onnxruntime',
                                        'dense.onnx_path': str(path)})
        pipeline = DensePipeline(config, backend=OnnxRuntimeBackend(path, num_threads=threads))
        errors = ErrorLog()
        with BagReader(val_bag) as reader:
            total = reader.message_counts.get(IMAGE, 0)
            stride = max(1, total // max(1, val_images))
            dense = evaluate_dense(reader, IMAGE, config, work / f'eval_{preset}_{precision}',
                                   errors, max_frames=stride * val_images, stride=stride,
                                   plots=False, pipeline=pipeline)
        conf = section(config, 'dense')
        depth_acc = DepthMetricsAccumulator(min_depth=float(conf['min_depth_m']) or 1e-3,
                                            max_depth=float(conf['max_depth_m']))
        for rgb, gt in zip(images, depths):
            depth_acc.update(pipeline.run(rgb, colors=False).depth, gt)
        depth = depth_acc.compute()
        seg = dense.get('segmentation') or {}
        result[precision] = {'miou': seg.get('miou'), 'pixel_accuracy': seg.get('pixel_accuracy'),
                             'val_images': dense['frames_evaluated'],
                             'abs_rel': depth.get('abs_rel'), 'delta1': depth.get('delta1'),
                             'depth_frames': len(images), 'errors': errors.count}
    return result


def loftr_accuracy(preset: str, paths: dict) -> dict:
    """Return {precision: pairs summary} of a LoFTR preset's three files on synthetic pairs."""
    from relperception.data.pairs import synthetic_pairs
    from relperception.evaluation.pairs import evaluate_pairs
    from relperception.matching.loftr.matcher import LoFTRMatcher

    pairs = synthetic_pairs(LOFTR_PAIRS, (LOFTR_GAP,), seed=LOFTR_EVAL_SEED)
    result = {}
    for precision, path in paths.items():
        # the matcher's onnxruntime backend (one thread per core: 2 on the 2-core machine)
        matcher = LoFTRMatcher({'preset': preset, 'backend': 'onnxruntime',
                                'onnx_path': str(path)})
        summary = evaluate_pairs(matcher, pairs)['summary']
        result[precision] = {k: summary[k] for k in ('num_pairs', 'auc@5', 'auc@10', 'auc@20',
                                                     'matches_mean', 'epi_precision',
                                                     'pose_failures', 'match_ms_median')}
    return result


def make_bags(data: Path, work: Path, presets) -> dict:
    """Convert the CamVid folders to bags and write the LoFTR calibration bag."""
    bags = {'train': work / 'camvid_train.bag', 'val': work / 'camvid_val.bag'}
    convert_image_folder(data / 'camvid_segnet_train_367' / 'images', bags['train'])
    convert_image_folder(data / 'camvid_segnet_val_101' / 'images', bags['val'],
                         labels_dir=data / 'camvid_segnet_val_101' / 'labels')
    if any(p in LOFTR for p in presets):
        bags['synthetic'] = work / f'synthetic{LOFTR_CALIBRATION_SEED}.bag'
        write_synthetic_bag(bags['synthetic'], frames=60, seed=LOFTR_CALIBRATION_SEED)
    return bags


def run(args) -> dict:
    """Run the benchmark; return the results (also written to OUTPUT/quantize_bench.json)."""
    args.output.mkdir(parents=True, exist_ok=True)
    results = {'date': datetime.date.today().isoformat(), 'machine': platform.processor()
               or platform.machine(), 'cpus': os.cpu_count(), 'threads': args.threads,
               'repeats': args.repeats, 'calibration_frames': args.calibration_frames,
               'load_average_before': os.getloadavg()[0], 'presets': {}}
    with tempfile.TemporaryDirectory(prefix='quantize_bench_') as folder:
        work = Path(folder)
        bags = make_bags(args.data, work, args.presets)
        for preset in args.presets:
            start = time.perf_counter()
            loftr = preset in LOFTR
            calibration = bags['synthetic' if loftr else 'train']
            made = export_all(preset, work, calibration, args.calibration_frames)
            row = {'weights': made['weights'], 'export_s': made['export_s'],
                   'calibration': 'synthetic seed 1 pairs' if loftr else 'CamVid train',
                   'file_mb': {p: path.stat().st_size / 1e6 for p, path in made['paths'].items()},
                   'speed': speed(preset, made['paths'], args.threads, args.repeats)}
            if made['weights'] == 'shipped':
                row['accuracy'] = (loftr_accuracy(preset, made['paths']) if loftr
                                   else dense_accuracy(preset, made['paths'], bags['val'],
                                                       args.val_images, args.threads, work))
            row['seconds'] = time.perf_counter() - start
            results['presets'][preset] = row
            logger.warning('%s done in %.0f s', preset, row['seconds'])
    results['load_average_after'] = os.getloadavg()[0]
    with open(args.output / 'quantize_bench.json', 'w', encoding='utf-8') as stream:
        json.dump(results, stream, indent=2)
    return results


def _fmt(value, spec: str) -> str:
    return '-' if value is None else format(value, spec)


def format_results(results: dict) -> str:
    """Return the results as plain-text tables."""
    lines = [f'{results["date"]}, {results["cpus"]} CPUs, {results["threads"]} onnxruntime '
             f'threads, {results["repeats"]} runs each; load average '
             f'{results["load_average_before"]:.1f} before, {results["load_average_after"]:.1f}'
             f' after; INT8 calibrated on {results["calibration_frames"]} images (LoFTR: '
             f'pairs); int8 -q = --int8-quantize-outputs',
             'speed: median ms per image (LoFTR: per pair); x = float32 median / median (> 1: '
             'faster); best x = the same with the fastest run of each (least disturbed by '
             'other processes)',
             f'{"preset":<11} {"weights":<8} {"size":>8} {"variant":<8} {"ms":>8} {"x":>5} '
             f'{"best x":>6} {"cpu ms":>7}']
    for preset, row in results['presets'].items():
        for s in row['speed']:
            size = f'{s["size"][0]}x{s["size"][1]}'
            for variant in VARIANTS:
                if f'{variant}_ms' not in s:
                    continue
                lines.append(f'{preset:<11} {row["weights"]:<8} {size:>8} '
                             f'{LABELS[variant]:<8} {s[f"{variant}_ms"]:8.1f} '
                             f'{s[f"{variant}_speedup"]:5.2f} '
                             f'{s[f"{variant}_best_speedup"]:6.2f} '
                             f'{s[f"{variant}_cpu_ms"]:7.0f}')
    lines.append('')
    lines.append('accuracy (dense: CamVid val mIoU %, synthetic AbsRel; LoFTR: synthetic '
                 'pairs AUC@5/10/20 %, matches)')
    for preset, row in results['presets'].items():
        accuracy = row.get('accuracy')
        if not accuracy:
            lines.append(f'{preset:<11} random weights: speed only')
            continue
        for variant, a in accuracy.items():
            label = LABELS[variant]
            if 'miou' in a:
                lines.append(f'{preset:<11} {label:<8} mIoU {_fmt(100 * a["miou"], ".2f")} '
                             f'({a["val_images"]} images)  AbsRel {_fmt(a["abs_rel"], ".4f")} '
                             f'delta1 {_fmt(a["delta1"], ".3f")} ({a["depth_frames"]} frames)')
            else:
                auc = '/'.join(f'{100 * a[f"auc@{t}"]:.1f}' for t in (5, 10, 20))
                lines.append(f'{preset:<11} {label:<8} AUC {auc}  matches '
                             f'{a["matches_mean"]:.0f}  epi precision '
                             f'{a["epi_precision"]:.3f}  failures {a["pose_failures"]} of '
                             f'{a["num_pairs"]}  {a["match_ms_median"]:.0f} ms/pair')
    return '\n'.join(lines)


def main(argv=None) -> int:
    """Run the benchmark from the command line; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data', type=Path, default=REPO_ROOT.parent / 'shared' / 'data')
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output')
    parser.add_argument('--presets', nargs='+', default=list(PRESETS))
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--val-images', type=int, default=101,
                        help='CamVid validation images scored, spread over the 101')
    parser.add_argument('--calibration-frames', type=int, default=64)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
    for name in ('relperception', 'root'):
        logging.getLogger(name).setLevel(logging.WARNING)
    results = run(args)
    sys.stdout.write(format_results(results) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
