# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""LoFTR on a CUDA GPU: agreement with the CPU float32 result, and time per pair.

For ``loftr`` at 480x640 (seeded random weights, threshold 0, as ``loftr_bench.py``) and
``loftr_lite`` at 240x320 (the shipped weights, threshold 0.2), on the synthetic pair of
``loftr_bench.py``:

* reference: our torch model in float32 on the CPU;
* on the GPU: float32 (TF32 off), float32 with TF32 (PyTorch's default for cuDNN
  convolutions), float16 (``torch.autocast`` around the whole model: the reduced precision
  TensorRT FP16 engines run in; it shows whether LayerNorm and the softmaxes stay finite and
  the matches stay put) and ``compute_dtype: bfloat16``;
* for each: the matches, how many of the CPU matches it reproduces (same cell, keypoint in
  image 1 within 1 px), the largest keypoint difference on those, whether any output is not
  finite, and the median time per pair (CUDA-synchronised);
* ``kornia.feature.LoFTR`` with the same weights on the GPU in float32, when kornia is
  installed (time only).

Ratios and agreement counts are what to compare; absolute times depend on the GPU.

Usage::

    python bench/loftr_cuda_bench.py [--repeats 20] [--output bench_output]
"""

import argparse
import contextlib
import json
import logging
from pathlib import Path
import sys
import time

import numpy as np
from relperception.matching.loftr.model import LoFTR
from relperception.models.weights import load_state_dict_file, shipped_weights
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loftr_bench import load_pair  # noqa: E402, I100

REPO_ROOT = Path(__file__).resolve().parents[1]
CASES = (('loftr', (480, 640)), ('loftr_lite', (240, 320)))


def build(preset: str, compute_dtype: str = 'float32') -> LoFTR:
    """Return the preset's model: shipped weights (threshold 0.2) or seeded random (0)."""
    torch.manual_seed(0)
    model = LoFTR({'compute_dtype': compute_dtype}, preset=preset).eval()
    try:
        model.load_weights(load_state_dict_file(shipped_weights(preset)))
    except (FileNotFoundError, ValueError):
        model.threshold = 0.0
    return model


def run_model(model: LoFTR, inputs: dict, device: str, autocast=None) -> dict:
    """Return the model's outputs (numpy, batch item 0) on ``device``."""
    tensors = [torch.from_numpy(inputs[n]).to(device) for n in ('image0', 'image1')]
    context = torch.autocast('cuda', dtype=autocast) if autocast else contextlib.nullcontext()
    with torch.inference_mode(), context:
        out = model(*tensors)
    return {k: v[0].float().cpu().numpy() if v.is_floating_point() else v[0].cpu().numpy()
            for k, v in out.items()}


def seconds(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` after two warm-up calls, CUDA-synchronised."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def agreement(reference: dict, other: dict) -> dict:
    """Count ``other``'s matches and the CPU matches it reproduces (same cell, within 1 px)."""
    mask0, mask1 = reference['mask'].astype(bool), other['mask'].astype(bool)
    both = mask0 & mask1
    distance = np.linalg.norm(reference['keypoints1'] - other['keypoints1'], axis=1)
    finite = all(np.isfinite(other[k]).all() for k in ('keypoints1', 'confidence'))
    return {'matches': int(mask1.sum()), 'reference_matches': int(mask0.sum()),
            'reproduced_1px': int((both & (distance <= 1.0)).sum()),
            'max_px_difference': float(distance[both].max()) if both.any() else 0.0,
            'finite': bool(finite)}


def run_case(preset: str, size, repeats: int) -> dict:
    """Measure one preset at one size (see the module docstring)."""
    inputs = load_pair(*size)
    model = build(preset)
    reference = run_model(model, inputs, 'cpu')
    results = {'size': list(size), 'threshold': model.threshold, 'variants': {}}
    model = model.cuda()
    half = build(preset, 'bfloat16').cuda()
    variants = {'float32': (model, None, False), 'float32 tf32': (model, None, True),
                'float16 autocast': (model, torch.float16, True),
                'bfloat16 compute_dtype': (half, None, True)}
    for name, (net, autocast, tf32) in variants.items():
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        out = run_model(net, inputs, 'cuda', autocast)
        entry = agreement(reference, out)
        entry['seconds'] = seconds(lambda n=net, a=autocast: run_model(n, inputs, 'cuda', a),
                                   repeats)
        results['variants'][name] = entry
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        import kornia.feature as KF
    except ImportError:
        return results
    kornia_model = KF.LoFTR(pretrained=None).eval().cuda()
    if preset == 'loftr':
        kornia_model.load_state_dict(model.state_dict(), strict=True)
        kornia_model.coarse_matching.thr = model.threshold
        batch = {n: torch.from_numpy(inputs[n]).cuda() for n in ('image0', 'image1')}

        def call():
            with torch.inference_mode():
                return kornia_model(dict(batch))
        results['kornia_float32_seconds'] = seconds(call, repeats)
    return results


def main(argv=None) -> int:
    """Run the checks; print and write ``loftr_cuda_bench.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output')
    parser.add_argument('--repeats', type=int, default=20)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not torch.cuda.is_available():
        sys.stderr.write('no CUDA device: nothing to measure\n')
        return 1
    results = {'device': torch.cuda.get_device_name(0), 'torch': torch.__version__}
    for preset, size in CASES:
        results[preset] = run_case(preset, size, args.repeats)
    args.output.mkdir(parents=True, exist_ok=True)
    with open(args.output / 'loftr_cuda_bench.json', 'w', encoding='utf-8') as stream:
        json.dump(results, stream, indent=2)
    sys.stdout.write(json.dumps(results, indent=2) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
