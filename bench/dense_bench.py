# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Dense model latency: torch eager against onnxruntime, per backbone and input size, in one run.

For every model preset the same module (same weights) runs through ``TorchBackend`` (torch
eager, ``inference_mode``) and through its ONNX export on ``OnnxRuntimeBackend``, on the same
normalised image, with the same number of threads, alternating the two so that a load change
on the machine hits both. Results are printed as the ratio ``torch time / onnxruntime time``
(target >= 1.5 on CPU), so they do not depend on how fast this machine is.

Presets (``--presets``): ``fast_seg`` and ``vit_hybrid`` (the shipped ``dense.backbone``
defaults: the real-time segmentation network and its hybrid-ViT counterpart), ``conv_small``
and ``vit_small`` (the earlier defaults), ``resnet18`` (full-width ResNet-18) and ``vit_s14``
(ViT-S/14, the Depth Anything V2 Small backbone). Sizes (``--sizes``): 240x320, 360x480
(CamVid) and 480x640, rounded up to the preset's size multiple (ViT-S/14: 252x322 ...;
``conv_small`` at 360x480: 368x480). Outputs: ``depth``, ``logits`` and ``labels`` (argmax), as
the pipeline uses them. Latency does not depend on the weights; without shipped weights the
seeded random initialisation is used.

Peer comparison (``--peer-presets``, default ``fast_seg``, ``vit_hybrid`` and ``conv_small``;
``--no-peer`` skips it): at 360x480 every peer preset and ESPNet (``bench/espnet_peer.py``: the
published architecture re-implemented for timing, random weights, outputs ``logits`` and
``labels``) run through torch and onnxruntime in ONE interleaved timing, so that each model's
time can be read against ESPNet's from the same run (``x ESPNet`` = its onnxruntime time /
ESPNet's).

On a machine loaded by other processes, multi-threaded torch eager suffers most: its OpenMP
threads meet at a barrier after every operator and wait for a descheduled partner, so small
networks with many operators slow down many times over. The load average is printed with the
results; ``--threads 1`` gives the comparison least affected by load.

Usage::

    .venv/bin/python bench/dense_bench.py [--threads 2] [--repeats 10] [--output bench_output]
    .venv/bin/python bench/dense_bench.py --presets fast_seg conv_small --sizes 360x480
"""

import argparse
import functools
import json
import logging
import os
from pathlib import Path
import sys
import tempfile

import numpy as np
from relperception.pipeline.export import build_export_model
from relperception.runtime.model_export import export_spec
from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend
from relperception.runtime.torch_backend import TorchBackend
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from espnet_peer import espnet_export_spec  # noqa: E402, I100
from timing import interleaved_times  # noqa: E402, I100

REPO_ROOT = Path(__file__).resolve().parents[1]
PRESETS = ('conv_small', 'fast_seg', 'vit_hybrid', 'resnet18', 'vit_small', 'vit_s14')
SIZES = ((240, 320), (360, 480), (480, 640))
#: Input size of the peer comparison (CamVid's; ESPNet's published timing).
PEER_SIZE = (360, 480)
PEER_PRESETS = ('fast_seg', 'vit_hybrid', 'conv_small')
ESPNET = 'espnet (peer)'


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _size(text: str):
    try:
        height, width = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected HxW, got {text!r}') from None
    return height, width


def export_spec_of(preset: str) -> dict:
    """Return the export spec of a preset (shipped weights, else random) or of ESPNet."""
    if preset == ESPNET:
        return espnet_export_spec()
    try:
        return build_export_model(preset)
    except FileNotFoundError:
        return build_export_model(preset, random_weights=True)


def build(preset: str, size, work: Path, threads: int):
    """Return (torch backend, onnxruntime backend, weights source, parameters) at ``size``.

    One export per size, so each graph is optimised for the size it is timed at.
    """
    spec = export_spec_of(preset)
    name = preset.split()[0]
    path = export_spec(spec, work / f'{name}_{size[0]}x{size[1]}.onnx', size=size,
                       max_size=size)
    torch_backend = TorchBackend(spec['module'], spec['input_names'], spec['output_names'])
    onnx_backend = OnnxRuntimeBackend(path, num_threads=threads, allow_spinning=False)
    params = sum(p.numel() for p in spec['module'].parameters())
    return torch_backend, onnx_backend, spec['metadata']['weights'], params


def size_multiple(preset: str) -> int:
    """Return the input size multiple of a preset (8 for ESPNet)."""
    from relperception.models.presets import load_model_config

    if preset == ESPNET:
        return 8
    conf = load_model_config(preset)
    patch = conf['model']['backbone'].get('patch_size', 1)
    return max(int(conf['input']['multiple']), int(patch))


def run_peers(work: Path, presets, threads: int, repeats: int) -> list:
    """Time ``presets`` and ESPNet at :data:`PEER_SIZE`, all interleaved; return the rows."""
    rng = np.random.default_rng(0)
    fns, info = {}, {}
    for preset in (*presets, ESPNET):
        m = size_multiple(preset)
        size = (_round_up(PEER_SIZE[0], m), _round_up(PEER_SIZE[1], m))
        torch_backend, onnx_backend, weights, params = build(preset, size, work, threads)
        inputs = {'image': rng.standard_normal((1, 3, *size), dtype=np.float32)}
        fns[(preset, 'torch')] = functools.partial(torch_backend.run, inputs)
        fns[(preset, 'onnxruntime')] = functools.partial(onnx_backend.run, inputs)
        info[preset] = {'size': list(size), 'weights': weights, 'parameters': params}
    seconds = interleaved_times(fns, repeats)
    espnet_ort = seconds[(ESPNET, 'onnxruntime')]
    rows = []
    for preset, row in info.items():
        t, o = seconds[(preset, 'torch')], seconds[(preset, 'onnxruntime')]
        rows.append({'preset': preset, **row,
                     'torch_ms': t['wall_s'] * 1e3, 'onnxruntime_ms': o['wall_s'] * 1e3,
                     'torch_best_ms': t['best_wall_s'] * 1e3,
                     'onnxruntime_best_ms': o['best_wall_s'] * 1e3,
                     'torch_cpu_ms': t['cpu_s'] * 1e3, 'onnxruntime_cpu_ms': o['cpu_s'] * 1e3,
                     'vs_espnet': o['wall_s'] / espnet_ort['wall_s'],
                     'vs_espnet_cpu': o['cpu_s'] / espnet_ort['cpu_s']})
    return rows


def run(output: Path, presets, threads: int, repeats: int, sizes=SIZES,
        peer_presets=PEER_PRESETS) -> dict:
    """Run the benchmark; return the results (also written to ``output``/dense_bench.json)."""
    torch.set_num_threads(threads)
    output.mkdir(parents=True, exist_ok=True)
    results = {'threads': threads, 'repeats': repeats,
               'load_average_before': os.getloadavg()[0], 'rows': [], 'peer_rows': []}
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        if peer_presets:
            results['peer_rows'] = run_peers(Path(tmp), peer_presets, threads, repeats)
        for preset in presets:
            m = size_multiple(preset)
            for height, width in sizes:
                size = (_round_up(height, m), _round_up(width, m))
                torch_backend, onnx_backend, weights, _ = build(preset, size, Path(tmp),
                                                                threads)
                image = rng.standard_normal((1, 3, *size), dtype=np.float32)
                inputs = {'image': image}
                seconds = interleaved_times(
                    {'torch': functools.partial(torch_backend.run, inputs),
                     'onnxruntime': functools.partial(onnx_backend.run, inputs)}, repeats)
                torch_wall, torch_cpu = seconds['torch']['wall_s'], seconds['torch']['cpu_s']
                ort_wall = seconds['onnxruntime']['wall_s']
                ort_cpu = seconds['onnxruntime']['cpu_s']
                results['rows'].append({
                    'preset': preset, 'size': list(size), 'weights': weights,
                    'torch_ms': torch_wall * 1e3, 'onnxruntime_ms': ort_wall * 1e3,
                    'speedup': torch_wall / ort_wall,
                    'torch_cpu_ms': torch_cpu * 1e3, 'onnxruntime_cpu_ms': ort_cpu * 1e3,
                    'cpu_speedup': torch_cpu / ort_cpu})
                torch_backend = onnx_backend = None
    results['load_average_after'] = os.getloadavg()[0]
    with open(output / 'dense_bench.json', 'w', encoding='utf-8') as stream:
        json.dump(results, stream, indent=2)
    return results


def format_results(results: dict) -> str:
    """Return the results as a plain-text table."""
    lines = [f'machine load average (1 min) {results["load_average_before"]:.1f} before, '
             f'{results["load_average_after"]:.1f} after the run ({os.cpu_count()} CPUs)']
    lines += [f'Dense model latency, {results["threads"]} threads, median of '
              f'{results["repeats"]}; speed-up = torch eager time / onnxruntime time '
              f'(target >= 1.5)',
              'wall = elapsed time; cpu = CPU time of the process (all threads), which a '
              'loaded machine distorts less',
              f'{"preset":<12} {"size":>9} {"torch ms":>9} {"ort ms":>9} {"speed-up":>9} '
              f'{"torch cpu":>10} {"ort cpu":>8} {"cpu x":>6}']
    for r in results['rows']:
        size = f'{r["size"][0]}x{r["size"][1]}'
        lines.append(f'{r["preset"]:<12} {size:>9} {r["torch_ms"]:9.1f} '
                     f'{r["onnxruntime_ms"]:9.1f} {r["speedup"]:9.2f} {r["torch_cpu_ms"]:10.1f} '
                     f'{r["onnxruntime_cpu_ms"]:8.1f} {r["cpu_speedup"]:6.2f}')
    if results.get('peer_rows'):
        lines += ['', f'Against ESPNet at {PEER_SIZE[0]}x{PEER_SIZE[1]}, all models interleaved '
                  f'in one timing, {results["threads"]} threads, median (best) of '
                  f'{results["repeats"]}; x ESPNet = onnxruntime time / ESPNet\'s (wall, cpu)',
                  f'{"model":<14} {"size":>9} {"params":>8} {"torch ms":>15} '
                  f'{"ort ms":>15} {"torch cpu":>10} {"ort cpu":>8} {"x ESPNet":>9} '
                  f'{"cpu x":>6}']
        for r in results['peer_rows']:
            size = f'{r["size"][0]}x{r["size"][1]}'
            lines.append(
                f'{r["preset"]:<14} {size:>9} {r["parameters"] / 1e6:7.2f}M '
                f'{r["torch_ms"]:7.1f} ({r["torch_best_ms"]:5.1f}) '
                f'{r["onnxruntime_ms"]:7.1f} ({r["onnxruntime_best_ms"]:5.1f}) '
                f'{r["torch_cpu_ms"]:10.1f} {r["onnxruntime_cpu_ms"]:8.1f} '
                f'{r["vs_espnet"]:9.2f} {r["vs_espnet_cpu"]:6.2f}')
    return '\n'.join(lines)


def main(argv=None) -> int:
    """Run the benchmark from the command line; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output')
    parser.add_argument('--presets', nargs='*', default=list(PRESETS),
                        help='presets of the torch / onnxruntime table (none: only the peers)')
    parser.add_argument('--sizes', nargs='+', type=_size, default=list(SIZES),
                        metavar='HxW', help='input sizes of that table')
    parser.add_argument('--peer-presets', nargs='+', default=list(PEER_PRESETS),
                        help='presets timed against ESPNet at 360x480')
    parser.add_argument('--no-peer', action='store_true', help='skip the ESPNet comparison')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--repeats', type=int, default=10)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR, format='%(levelname)s %(name)s: %(message)s')
    results = run(args.output, args.presets, args.threads, args.repeats, args.sizes,
                  () if args.no_peer else args.peer_presets)
    sys.stdout.write(format_results(results) + '\n')
    sys.stdout.write(f'results: {args.output / "dense_bench.json"}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
