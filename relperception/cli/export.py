# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception export``: export a dense model or LoFTR preset to ONNX or TensorRT.

Examples::

    relperception export --config conv_small --format onnx --output conv_small.onnx
    relperception export --config loftr_lite --output lite.onnx --height 480 --width 640
    relperception export --config loftr_lite --output lite.onnx --min-size 96x128 --max-size 960
    relperception export --config loftr_lite --format tensorrt --output loftr_lite.engine
    relperception export --config loftr --two-stage --output loftr.onnx

The ONNX model then runs with ``dense.backend:=onnxruntime dense.onnx_path:=...`` (or the
``loftr.*`` equivalents). ``--two-stage`` (LoFTR, ONNX): a coarse graph in ``--output`` and a
fine graph ``<name>.fine.onnx`` beside it that refines only the matches found (the single
graph refines a constant ``fine_topk`` cells, as TensorRT needs); ``loftr.onnx_path`` names the
coarse file.
"""

from __future__ import annotations

import argparse
import logging

HELP = 'export a dense model or LoFTR preset to ONNX (onnxruntime) or a TensorRT engine'

logger = logging.getLogger(__name__)


def _size(text: str):
    """Parse ``HxW`` or ``N`` (square) into (H, W)."""
    parts = text.lower().split('x')
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f'size {text!r} must be HxW or N') from None
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or min(values) <= 0:
        raise argparse.ArgumentTypeError(f'size {text!r} must be HxW or N, positive')
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``export``."""
    parser.add_argument('--config', required=True,
                        help='LoFTR preset (loftr, loftr_lite), dense model preset name or '
                             'dense model YAML file')
    parser.add_argument('--weights', default=None,
                        help='weights file (default: the weights shipped for the preset)')
    parser.add_argument('--random-weights', action='store_true',
                        help='export untrained weights when no weights are given or shipped '
                             '(testing only)')
    parser.add_argument('--format', choices=('onnx', 'tensorrt'), default='onnx',
                        dest='fmt', help='output format (default onnx)')
    parser.add_argument('-o', '--output', required=True, help='file to write')
    parser.add_argument('--height', type=int, default=None,
                        help='example/optimum input height (default: the preset input size)')
    parser.add_argument('--width', type=int, default=None,
                        help='example/optimum input width (default: the preset input size)')
    parser.add_argument('--min-size', type=_size, default=None,
                        help='smallest accepted input, HxW (default 64x64)')
    parser.add_argument('--max-size', type=_size, default=None,
                        help='largest accepted input, HxW (default 1536x2048)')
    parser.add_argument('--no-fp16', dest='fp16', action='store_false',
                        help='TensorRT: build an FP32 engine (default FP16 when available)')
    parser.add_argument('--two-stage', action='store_true',
                        help='LoFTR, ONNX only: coarse graph + fine graph with a dynamic match '
                             'count (faster on onnxruntime; the fine file is <output>.fine.onnx)')
    parser.add_argument('--check', action='store_true',
                        help='ONNX: compare onnxruntime with torch on a random input of another '
                             'size and log the largest difference per output')


def run(args: argparse.Namespace) -> int:
    """Export the model; return 0 on success."""
    from relperception.runtime.model_export import export_model

    if (args.height is None) != (args.width is None):
        raise ValueError('give both --height and --width, or neither')
    size = (args.height, args.width) if args.height is not None else None
    path = export_model(args.config, args.output, fmt=args.fmt, weights=args.weights,
                        random_weights=args.random_weights, size=size,
                        min_size=args.min_size, max_size=args.max_size, fp16=args.fp16,
                        two_stage=args.two_stage)
    logger.info('wrote %s', path)
    if args.check and args.fmt == 'onnx':
        _check(args, path)
    return 0


def _check(args: argparse.Namespace, path) -> None:
    """Log the torch/onnxruntime difference on a random input of another size."""
    import numpy as np

    from relperception.runtime.model_export import build_export_model
    from relperception.runtime.onnx_export import check_parity, read_metadata

    spec = build_export_model(args.config, args.weights, args.random_weights)
    meta = read_metadata(path)
    height, width = meta['export_size']
    multiple = meta['size_multiple']
    height = min(height + multiple, meta['max_height'])
    rng = np.random.default_rng(1)
    inputs = {n: rng.random((1, spec['channels'], height, width), dtype=np.float32)
              for n in spec['input_names']}
    if args.two_stage:
        diffs = _two_stage_differences(spec['module'].model, path, inputs)
    else:
        diffs = check_parity(spec['module'], path, [inputs])
    for name, value in diffs.items():
        logger.info('parity at %dx%d: %s max |torch - onnxruntime| = %.3g', height, width,
                    name, value)


def _two_stage_differences(model, path, inputs) -> dict:
    """Largest |torch - onnxruntime| of a two-stage export, on the cells torch keeps."""
    import numpy as np
    import torch

    from relperception.runtime.loftr_two_stage import open_loftr_backend

    got = open_loftr_backend('onnxruntime', path, threshold=0.0).run(inputs)
    model.threshold = 0.0
    with torch.no_grad():
        ref = model(*(torch.from_numpy(inputs[n]) for n in ('image0', 'image1')))
    keep = ref['mask'].numpy()
    return {'mask (cells differing)': float((got['mask'] != keep).sum()),
            'keypoints1': float(np.abs(got['keypoints1'][keep]
                                       - ref['keypoints1'].numpy()[keep]).max(initial=0.0))}
