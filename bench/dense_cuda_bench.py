# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Dense models on a CUDA GPU: agreement with the CPU float32 result, and time per frame.

For each preset (the shipped ``fast_seg`` and ``vit_hybrid``, the ``dense.backbone`` defaults,
and ``conv_small`` and ``vit_small``, with their weights; ``resnet18`` and
``depth_anything_v2_vits`` with seeded random weights, as ``dense_bench.py``), on one
synthetic 640x480 frame prepared as the dense pipeline prepares it (``prepare_image``: the
preset's input size) and at 480x640:

* reference: the torch model in float32 on the CPU;
* on the device: float32 (TF32 off), float32 with TF32 (PyTorch's default for cuDNN
  convolutions), float16 and bfloat16 (``torch.autocast`` around the whole model: the reduced
  precision a TensorRT FP16 engine runs in; it shows whether the ViT's LayerNorm and
  softmaxes stay finite);
* for each: the median and largest relative depth difference from the reference (on pixels
  where the reference depth is finite and positive), the share of labels equal to the
  reference's, whether every output is finite, and the median time per frame
  (device-synchronised).

Ratios and agreement figures are what to compare; absolute times depend on the GPU.
``--device cpu`` runs the same code against itself on the CPU (a smoke test of the script).

Usage::

    python bench/dense_cuda_bench.py [--repeats 20] [--output bench_output] [--device cuda]
"""

import argparse
import contextlib
import json
import logging
from pathlib import Path
import sys
import time

import numpy as np
from relperception.data.synthetic import iter_sequence
from relperception.models.dense import build_dense_model
from relperception.models.preprocess import prepare_image
from relperception.models.presets import load_model_config, with_input_size
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
#: (preset, shipped weights) measured.
PRESETS = (('fast_seg', True), ('vit_hybrid', True), ('conv_small', True), ('vit_small', True),
           ('resnet18', False), ('depth_anything_v2_vits', False))
#: The second input size (H, W), rounded up to the preset's size multiple.
LARGE_SIZE = (480, 640)
#: Variants: name -> (autocast dtype or None, TF32 allowed).
VARIANTS = {'float32': (None, False), 'float32 tf32': (None, True),
            'float16 autocast': (torch.float16, True),
            'bfloat16 autocast': (torch.bfloat16, True)}


def build(preset: str, shipped: bool, size=None) -> torch.nn.Module:
    """Return the preset's model in eval mode: shipped weights, or seeded random ones."""
    conf = load_model_config(preset)
    if size is not None:
        conf = with_input_size(conf, *size)
    torch.manual_seed(0)
    model = build_dense_model(conf, 'shipped' if shipped else None)
    return model.eval(), conf


def frame_input(conf: dict) -> torch.Tensor:
    """Return the (1, 3, h, w) input of one synthetic 640x480 frame for the model ``conf``."""
    _, frames = iter_sequence(num_frames=1, seed=7, width=640, height=480)
    return prepare_image(next(iter(frames)).rgb, conf)


def run_model(model, image: torch.Tensor, device: str, autocast=None) -> dict:
    """Return the model's outputs as float32 numpy arrays (batch item 0)."""
    context = torch.autocast(device.split(':')[0], dtype=autocast) if autocast \
        else contextlib.nullcontext()
    with torch.inference_mode(), context:
        out = model(image.to(device))
    return {k: v[0].float().cpu().numpy() for k, v in out.items()}


def synchronise(device: str) -> None:
    """Wait for the device's queued work (no-op on the CPU)."""
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def seconds(fn, device: str, repeats: int) -> float:
    """Median seconds of ``fn()`` after two warm-up calls, device-synchronised."""
    for _ in range(2):
        fn()
    synchronise(device)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronise(device)
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def agreement(reference: dict, other: dict) -> dict:
    """Compare outputs with the CPU float32 reference (see the module docstring)."""
    entry = {'finite': bool(all(np.isfinite(v).all() for v in other.values()))}
    if 'depth' in reference:
        ref, out = reference['depth'][0], other['depth'][0]
        valid = np.isfinite(ref) & (ref > 0)
        relative = np.abs(out[valid] - ref[valid]) / ref[valid]
        entry['depth_rel_diff_median'] = float(np.median(relative)) if relative.size else None
        entry['depth_rel_diff_max'] = float(np.max(relative)) if relative.size else None
    if 'logits' in reference:
        labels_ref = reference['logits'].argmax(axis=0)
        entry['labels_equal'] = float(np.mean(other['logits'].argmax(axis=0) == labels_ref))
    return entry


def run_case(preset: str, shipped: bool, size, device: str, repeats: int) -> dict:
    """Measure one preset at one input size (None: the preset's) on ``device``."""
    model, conf = build(preset, shipped, size)
    image = frame_input(conf)
    reference = run_model(model, image, 'cpu')
    result = {'input': list(image.shape[-2:]),
              'weights': 'shipped' if shipped else 'random', 'variants': {}}
    model = model.to(device)
    for name, (autocast, tf32) in VARIANTS.items():
        if device == 'cpu' and autocast is torch.float16:
            continue   # float16 autocast is a GPU path
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        entry = agreement(reference, run_model(model, image, device, autocast))
        entry['ms'] = 1e3 * seconds(
            lambda a=autocast: run_model(model, image, device, a), device, repeats)
        result['variants'][name] = entry
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return result


def _cell(entry: dict, key: str, spec: str) -> str:
    value = entry.get(key)
    return format(value, spec) if value is not None else '-'


def format_results(results: dict) -> str:
    """Return the results as a plain-text table."""
    lines = [f"device {results['device']}, torch {results['torch']}",
             f"{'preset':24s} {'input':>9s} {'variant':18s} {'ms':>8s} {'depth rel med':>13s} "
             f"{'depth rel max':>13s} {'labels eq':>9s} finite"]
    for row in results['rows']:
        for name, entry in row['variants'].items():
            lines.append(f"{row['preset']:24s} {'x'.join(map(str, row['input'])):>9s} "
                         f"{name:18s} {entry['ms']:8.2f} "
                         f"{_cell(entry, 'depth_rel_diff_median', '13.2e')} "
                         f"{_cell(entry, 'depth_rel_diff_max', '13.2e')} "
                         f"{_cell(entry, 'labels_equal', '9.4f')} {entry['finite']}")
    return '\n'.join(lines)


def main(argv=None) -> int:
    """Run the checks; print and write ``dense_cuda_bench.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output')
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--device', default='cuda', help="'cuda' (default) or 'cpu' (smoke)")
    parser.add_argument('--presets', nargs='+', default=[p for p, _ in PRESETS])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        sys.stderr.write('no CUDA device: nothing to measure\n')
        return 1
    shipped = dict(PRESETS)
    unknown = sorted(set(args.presets) - set(shipped))
    if unknown:
        parser.error(f'unknown presets {unknown}; known: {sorted(shipped)}')
    device_name = torch.cuda.get_device_name(0) if args.device.startswith('cuda') else 'cpu'
    results = {'device': device_name, 'torch': torch.__version__, 'rows': []}
    args.output.mkdir(parents=True, exist_ok=True)
    for preset in args.presets:
        for size in (None, LARGE_SIZE):
            row = run_case(preset, shipped[preset], size, args.device, args.repeats)
            results['rows'].append({'preset': preset, **row})
        # written after every preset: a run stopped by a time limit keeps what it measured
        with open(args.output / 'dense_cuda_bench.json', 'w', encoding='utf-8') as stream:
            json.dump(results, stream, indent=2)
    sys.stdout.write(format_results(results) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
