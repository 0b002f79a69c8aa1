# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""LoFTR benchmark: our LoFTR (torch eager and onnxruntime) against ``kornia.feature.LoFTR``.

Everything runs in one process, on the same machine, at the same moment, with the SAME weights
(our ``loftr`` preset's state dict is loaded into kornia's LoFTR, whose parameter names it
shares) and the SAME 640x480 synthetic image pair, so the ratios do not depend on how fast
this machine is:

* ``loftr`` at 480x640: median seconds per pair for kornia (the baseline), our torch model and
  our ONNX export on onnxruntime, and the speed-up ``kornia time / our time`` (target >= 2);
  the floating-point operations per pair of both torch models (``FlopCounterMode``, machine
  independent); the match counts and how many of kornia's matches ours reproduces (same cell,
  keypoint in image 1 within 0.1 px), a check that the speed does not come from computing
  less. With random weights both thresholds are set to 0 (mutual nearest neighbours only);
* ``loftr_lite`` at 240x320: pairs per second of our torch model and of onnxruntime
  (target >= 5 pairs/s on 2 cores).

Weights: ``--weights`` / ``--lite-weights`` files, else the shipped weights of the preset,
else a seeded random initialisation (timings are valid, the match counts then mean little).
Threads: torch and onnxruntime both get ``--threads`` (default 2).

On a machine loaded by other processes, multi-threaded torch eager suffers most: its OpenMP
threads meet at a barrier after every operator and wait for a descheduled partner, so small
networks with many operators slow down many times over. The load average is printed with the
results; ``--threads 1`` gives the comparison least affected by load.

Usage::

    .venv/bin/python bench/loftr_bench.py [--threads 2] [--repeats 5] [--output bench_output]
"""

import argparse
import json
import logging
import os
from pathlib import Path
import sys
import tempfile
import time

import cv2
import numpy as np
from relperception.data.synthetic import iter_sequence
from relperception.matching.loftr.model import LoFTR, LoFTROnnxWrapper
from relperception.models.weights import load_state_dict_file, shipped_weights
from relperception.runtime.model_export import LOFTR_INPUTS, LOFTR_OUTPUTS
from relperception.runtime.onnx_export import export_onnx
from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend
from relperception.runtime.torch_backend import TorchBackend
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_pair(height: int, width: int) -> dict:
    """Return two consecutive synthetic frames as (1,1,H,W) float32 grey in [0,1]."""
    _, frames = iter_sequence(num_frames=4, seed=0, width=640, height=480)
    frames = list(frames)
    grey = [cv2.cvtColor(f.rgb, cv2.COLOR_RGB2GRAY) for f in (frames[0], frames[2])]
    grey = [cv2.resize(g, (width, height), interpolation=cv2.INTER_AREA) for g in grey]
    return {n: (g.astype(np.float32) / 255.0)[None, None] for n, g in zip(LOFTR_INPUTS, grey)}


def build_model(preset: str, weights):
    """Return our LoFTR for ``preset`` with weights and where they came from."""
    torch.manual_seed(0)
    model = LoFTR(preset=preset).eval()
    source = 'random (seed 0)'
    if weights is None:
        try:
            weights = shipped_weights(preset)
        except (FileNotFoundError, ValueError) as exc:
            logging.warning('%s: using random weights', exc)
    if weights is not None:
        model.load_weights(load_state_dict_file(weights))
        source = str(weights)
    return model, source


def median_seconds(fn, repeats: int) -> tuple:
    """Return (median wall s, median process CPU s) of ``fn()`` over ``repeats``, warmed up."""
    fn()
    samples = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        samples.append((time.perf_counter() - wall, time.process_time() - cpu))
    return tuple(float(v) for v in np.median(np.array(samples), axis=0))


def gflop(fn) -> float:
    """Return the floating-point operations of one ``fn()`` call (torch ops), in GFLOP."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops() / 1e9


def our_backends(model, inputs, work: Path, threads: int, name: str) -> dict:
    """Return {'torch': backend, 'onnxruntime': backend} for ``model``."""
    wrapped = LoFTROnnxWrapper(model)
    example = tuple(torch.from_numpy(inputs[n]) for n in LOFTR_INPUTS)
    path = export_onnx(wrapped, example, work / f'{name}.onnx', LOFTR_INPUTS, LOFTR_OUTPUTS,
                       dynamic_axes={n: {2: 'height', 3: 'width'} for n in LOFTR_INPUTS})
    return {'torch': TorchBackend(wrapped, LOFTR_INPUTS, LOFTR_OUTPUTS),
            'onnxruntime': OnnxRuntimeBackend(path, num_threads=threads)}


def agreement(ours: dict, kornia_out: dict, width: int) -> dict:
    """Return how many of kornia's matches our fixed-shape output reproduces."""
    mask = ours['mask'][0].astype(bool)
    kp0, kp1 = ours['keypoints0'][0], ours['keypoints1'][0]
    k0 = kornia_out['keypoints0'].numpy()
    k1 = kornia_out['keypoints1'].numpy()
    stride = 8
    cells = (np.floor(k0[:, 1] / stride) * (width // stride) + np.floor(k0[:, 0] / stride))
    cells = cells.astype(int)
    same_cell = mask[cells] & (np.abs(kp0[cells] - k0).max(axis=1) < 1e-3)
    close = same_cell & (np.linalg.norm(kp1[cells] - k1, axis=1) < 0.1)
    return {'ours': int(mask.sum()), 'kornia': int(len(k0)), 'kornia_reproduced': int(close.sum())}


def run(output: Path, threads: int, repeats: int, weights=None, lite_weights=None) -> dict:
    """Run the benchmark; return the results (also written to ``output``/loftr_bench.json)."""
    import kornia.feature as KF

    torch.set_num_threads(threads)
    output.mkdir(parents=True, exist_ok=True)
    results = {'threads': threads, 'repeats': repeats,
               'load_average_before': os.getloadavg()[0], 'full': {}, 'lite': {}}
    with tempfile.TemporaryDirectory() as tmp:
        inputs = load_pair(480, 640)
        model, source = build_model('loftr', weights)
        kornia_model = KF.LoFTR(pretrained=None).eval()
        kornia_model.load_state_dict(model.state_dict(), strict=True)
        if source.startswith('random'):
            # Random features are rarely confident: threshold 0 keeps every mutual nearest
            # neighbour, so kornia's fine stage does realistic work instead of none.
            kornia_model.coarse_matching.thr = model.threshold = 0.0
        batch = {n: torch.from_numpy(inputs[n]) for n in LOFTR_INPUTS}

        def kornia_call():
            with torch.inference_mode():
                return kornia_model(dict(batch))

        backends = our_backends(model, inputs, Path(tmp), threads, 'loftr')
        times = {'kornia': median_seconds(kornia_call, repeats)}
        for name, backend in backends.items():
            times[name] = median_seconds(lambda b=backend: b.run(inputs), repeats)
        full = results['full']
        full.update({'size': [480, 640], 'weights': source,
                     'seconds': {n: t[0] for n, t in times.items()},
                     'cpu_seconds': {n: t[1] for n, t in times.items()},
                     'speedup_vs_kornia': {n: times['kornia'][0] / t[0]
                                           for n, t in times.items() if n != 'kornia'},
                     'cpu_speedup_vs_kornia': {n: times['kornia'][1] / t[1]
                                               for n, t in times.items() if n != 'kornia'}})
        full['matches'] = agreement(backends['torch'].run(inputs), kornia_call(), 640)
        full['gflop'] = {'kornia': gflop(kornia_call),
                         'torch': gflop(lambda: backends['torch'].run(inputs))}
        backends = model = None  # free the large model before the lite one

        inputs = load_pair(240, 320)
        model, source = build_model('loftr_lite', lite_weights)
        backends = our_backends(model, inputs, Path(tmp), threads, 'loftr_lite')
        lite = results['lite']
        lite.update({'size': [240, 320], 'weights': source, 'pairs_per_second': {},
                     'pairs_per_cpu_second': {}})
        for name, backend in backends.items():
            wall, cpu = median_seconds(lambda b=backend: b.run(inputs), max(repeats, 10))
            lite['pairs_per_second'][name] = 1.0 / wall
            lite['pairs_per_cpu_second'][name] = 1.0 / cpu
        lite['matches'] = int(backends['torch'].run(inputs)['mask'].sum())
    results['load_average_after'] = os.getloadavg()[0]
    with open(output / 'loftr_bench.json', 'w', encoding='utf-8') as stream:
        json.dump(results, stream, indent=2)
    return results


def format_results(results: dict) -> str:
    """Return the results as plain text."""
    full, lite = results['full'], results['lite']
    lines = [f'machine load average (1 min) {results["load_average_before"]:.1f} before, '
             f'{results["load_average_after"]:.1f} after the run ({os.cpu_count()} CPUs)']
    lines += [f'LoFTR 480x640, same weights ({full["weights"]}), {results["threads"]} threads; '
              f'speed-up = kornia time / time (target >= 2)',
              'wall = elapsed time; cpu = CPU time of the process (all threads)',
              f'{"implementation":<22} {"s/pair":>8} {"speed-up":>9} {"cpu s":>7} {"cpu x":>6}']
    lines.append(f'{"kornia.feature.LoFTR":<22} {full["seconds"]["kornia"]:8.3f} {1.0:9.2f} '
                 f'{full["cpu_seconds"]["kornia"]:7.3f} {1.0:6.2f}')
    for name, speedup in full['speedup_vs_kornia'].items():
        lines.append(f'{"ours " + name:<22} {full["seconds"][name]:8.3f} {speedup:9.2f} '
                     f'{full["cpu_seconds"][name]:7.3f} '
                     f'{full["cpu_speedup_vs_kornia"][name]:6.2f}')
    m = full['matches']
    lines += [f'GFLOP per pair (torch ops): kornia {full["gflop"]["kornia"]:.1f}, ours '
              f'{full["gflop"]["torch"]:.1f}',
              f'matches: ours {m["ours"]}, kornia {m["kornia"]}, kornia matches reproduced by '
              f'ours {m["kornia_reproduced"]}',
              '', f'loftr_lite 240x320 ({lite["weights"]}), {results["threads"]} threads '
              f'(target >= 5 pairs/s)']
    for name, rate in lite['pairs_per_second'].items():
        lines.append(f'{"ours " + name:<22} {rate:8.2f} pairs/s '
                     f'({lite["pairs_per_cpu_second"][name]:.2f} per CPU second)')
    return '\n'.join(lines)


def main(argv=None) -> int:
    """Run the benchmark from the command line; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--weights', default=None, help='weights of the loftr preset')
    parser.add_argument('--lite-weights', default=None, help='weights of loftr_lite')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
    results = run(args.output, args.threads, args.repeats, args.weights, args.lite_weights)
    sys.stdout.write(format_results(results) + '\n')
    sys.stdout.write(f'results: {args.output / "loftr_bench.json"}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
