# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception export``: export a dense model or LoFTR preset to ONNX or TensorRT.

Examples::

    relperception export --config conv_small --format onnx --output conv_small.onnx
    relperception export --config loftr_lite --output lite.onnx --height 480 --width 640
    relperception export --config loftr_lite --output lite.onnx --min-size 96x128 --max-size 960
    relperception export --config loftr_lite --format tensorrt --output loftr_lite.engine
    relperception export --config loftr --two-stage --output loftr.onnx
    relperception export --config conv_small --int8 --calibration-bag my.bag -o cs.int8.onnx
    relperception export --config conv_small --fp16 -o cs.fp16.onnx
    relperception export --config loftr_lite -o lite.onnx --check-tensorrt 8.6

The ONNX model then runs with ``dense.backend:=onnxruntime dense.onnx_path:=...`` (or the
``loftr.*`` equivalents). ``--two-stage`` (LoFTR, ONNX): a coarse graph in ``--output`` and a
fine graph ``<name>.fine.onnx`` beside it that refines only the matches found (the single
graph refines a constant ``fine_topk`` cells, as TensorRT needs); ``loftr.onnx_path`` names the
coarse file.

``--int8`` (ONNX): static post-training quantisation in QDQ format, calibrated on images of
``--calibration-bag`` (``--calibration-topic``, ``--calibration-frames`` spread over the bag),
see ``relperception.runtime.quantize``; ``--fp16`` (ONNX): float16 weights and activations with
float32 inputs and outputs, see ``relperception.runtime.float16``. Both are made from a float32
export written to a temporary folder; ``dense.onnx_path`` / ``loftr.onnx_path`` take the file
as they take a float32 one.

``--check-tensorrt [VERSION]`` (ONNX): check every graph written against TensorRT's ONNX parser
without TensorRT or a GPU (``relperception.runtime.tensorrt_compat``), print the report and
exit with 1 when it finds problems. ``--format tensorrt`` runs the same check with the installed
TensorRT's version before every build and logs what it finds.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
import tempfile

from relperception.data.calibration import DEFAULT_CALIBRATION_FRAMES
from relperception.data.topics import IMAGE
from relperception.runtime.quantize import ACTIVATION_TYPES

HELP = 'export a dense model or LoFTR preset to ONNX (onnxruntime) or a TensorRT engine'
#: -o names a file (checked before the command runs).
WRITES_FILE = True
#: File suffixes of each --format's output.
OUTPUT_SUFFIXES = {'onnx': ('.onnx',), 'tensorrt': ('.engine', '.plan', '.trt')}

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
    parser.add_argument('--int8', action='store_true',
                        help='ONNX: INT8 static quantisation (QDQ), calibrated on '
                             '--calibration-bag')
    parser.add_argument('--fp16', dest='onnx_fp16', action='store_true',
                        help='ONNX: float16 weights and activations, float32 inputs/outputs '
                             '(TensorRT engines are FP16 by default: see --no-fp16)')
    parser.add_argument('--calibration-bag', default=None,
                        help='--int8: the bag whose images calibrate the activation ranges')
    parser.add_argument('--calibration-topic', default=None,
                        help=f'--int8: image topic of the calibration bag (default {IMAGE})')
    parser.add_argument('--calibration-frames', type=int, default=None,
                        help=f'--int8: calibration images (LoFTR: pairs), spread over the bag '
                             f'(default {DEFAULT_CALIBRATION_FRAMES})')
    parser.add_argument('--int8-activations', choices=ACTIVATION_TYPES, default=None,
                        help=f'--int8: {ACTIVATION_TYPES[0]} (asymmetric, fastest on '
                             f'onnxruntime CPU; default) or int8 (symmetric, the form TensorRT '
                             f'requires)')
    parser.add_argument('--int8-quantize-outputs', action='store_true', default=None,
                        help='--int8: quantise the output layers too (faster; a metric depth '
                             'then has 256 levels over its range)')
    parser.add_argument('--check', action='store_true',
                        help='ONNX: compare onnxruntime with torch on a random input of another '
                             'size and log the largest difference per output')
    parser.add_argument('--check-tensorrt', nargs='?', const=True, default=False,
                        metavar='VERSION',
                        help='ONNX: check every graph written against the ONNX parser of '
                             'TensorRT VERSION (default 10: every 10.x; 8.6, 10.1, ...) without '
                             'TensorRT or a GPU: operators, opset, types, data-dependent shapes, '
                             'the stored optimisation profile; exit code 1 on problems')


def run(args: argparse.Namespace) -> int:
    """Export the model; return 0 on success."""
    from relperception.pipeline.export import export_model

    if (args.height is None) != (args.width is None):
        raise ValueError('give both --height and --width, or neither')
    if args.random_weights and args.weights:
        raise ValueError('choose one of --weights (a file) and --random-weights')
    if args.min_size and args.max_size and any(
            low > high for low, high in zip(args.min_size, args.max_size)):
        raise ValueError(f'--min-size {args.min_size[0]}x{args.min_size[1]} is larger than '
                         f'--max-size {args.max_size[0]}x{args.max_size[1]} (HxW)')
    tensorrt_version = _tensorrt_version(args)  # a bad version fails before the export
    size = (args.height, args.width) if args.height is not None else None
    precision = _precision(args)
    suffixes = OUTPUT_SUFFIXES[args.fmt]
    if Path(args.output).is_dir():
        raise ValueError(f'-o {args.output} is a folder; name the file to write (e.g. '
                         f'{Path(args.output) / ("model" + suffixes[0])})')
    if Path(args.output).suffix.lower() not in suffixes:
        raise ValueError(f'--format {args.fmt} writes {" or ".join(suffixes)} files; -o '
                         f'{args.output} names another kind (a .engine file read as ONNX, or '
                         f'the reverse, fails where it is loaded)')
    export = {'fmt': args.fmt, 'weights': args.weights, 'random_weights': args.random_weights,
              'size': size, 'min_size': args.min_size, 'max_size': args.max_size,
              'fp16': args.fp16, 'two_stage': args.two_stage}
    if precision == 'float32':
        path = export_model(args.config, args.output, **export)
    else:
        path = _export_reduced(args, precision, export)
    logger.info('wrote %s', path)
    if args.check and args.fmt == 'onnx':
        _check(args, path)
    if tensorrt_version:
        return _check_tensorrt(path, tensorrt_version)
    return 0


def _tensorrt_version(args: argparse.Namespace):
    """Return the TensorRT version ``--check-tensorrt`` asks for, or None."""
    if args.check_tensorrt is False:
        return None
    if args.fmt != 'onnx':
        raise ValueError('--check-tensorrt checks ONNX exports; --format tensorrt runs the '
                         'check with the installed TensorRT before it builds the engine')
    from relperception.runtime.tensorrt_onnx_ops import DEFAULT_TENSORRT_VERSION, support_for

    version = DEFAULT_TENSORRT_VERSION if args.check_tensorrt is True else args.check_tensorrt
    support_for(version)  # ValueError for a version without operator lists
    return version


def _check_tensorrt(path, version: str) -> int:
    """Print the TensorRT compatibility of the graph(s) written; return 1 on problems.

    A two-stage export's fine graph (named by the coarse graph's ``fine_graph`` metadata) is
    run by onnxruntime only and has no stored profile: its profile is not checked.
    """
    from relperception.runtime.onnx_metadata import read_metadata
    from relperception.runtime.tensorrt_compat import check_tensorrt_compat

    path = Path(path)
    graphs = [(path, True)]
    fine = read_metadata(path).get('fine_graph')
    if fine:
        graphs.append((path.with_name(str(fine)), False))
    ok = True
    for graph, with_profile in graphs:
        report = check_tensorrt_compat(graph, version, check_profile=with_profile)
        print('\n'.join(report.lines()))
        ok = ok and report.ok
    return 0 if ok else 1


def _precision(args: argparse.Namespace) -> str:
    """Return float32, int8 or float16; raise ValueError for options that do not fit."""
    int8 = bool(args.int8)
    fp16 = bool(args.onnx_fp16)
    calibration = {'--calibration-bag': args.calibration_bag,
                   '--calibration-topic': args.calibration_topic,
                   '--calibration-frames': args.calibration_frames,
                   '--int8-activations': args.int8_activations,
                   '--int8-quantize-outputs': args.int8_quantize_outputs}
    if int8 and fp16:
        raise ValueError('choose one of --int8 and --fp16')
    if int8 and args.fmt != 'onnx':
        raise ValueError(f'--int8 writes a QDQ ONNX file; --format {args.fmt} is not supported '
                         f'with it (for TensorRT export --format onnx --int8 --int8-activations '
                         f'int8 and let backend tensorrt build the engine with '
                         f'engine_precision int8)')
    if fp16 and args.fmt != 'onnx':
        raise ValueError(f'--fp16 writes a float16 ONNX file; --format {args.fmt} is not '
                         f'supported with it (TensorRT engines are built FP16 by default, see '
                         f'--no-fp16)')
    if (int8 or fp16) and args.two_stage:
        raise ValueError(f'--{"int8" if int8 else "fp16"} is for single-graph exports, not '
                         f'--two-stage')
    if not int8:
        given = [name for name, value in calibration.items() if value is not None]
        if given:
            raise ValueError(f'{", ".join(given)} only apply with --int8')
        return 'float16' if fp16 else 'float32'
    if not args.calibration_bag:
        raise ValueError('--int8 needs --calibration-bag: a bag whose images calibrate the '
                         'activation ranges (a few dozen images like those the model will see)')
    if args.calibration_frames is not None and args.calibration_frames < 1:
        raise ValueError(f'--calibration-frames must be >= 1, got {args.calibration_frames}')
    return 'int8'


def _export_reduced(args: argparse.Namespace, precision: str, export: dict) -> Path:
    """Export float32 to a temporary folder, then write the INT8 or float16 file."""
    from relperception.matching.loftr.export import LOFTR_PRESETS
    from relperception.pipeline.export import calibration_reader, export_model, \
        read_calibration

    samples = None
    if precision == 'int8':  # read the bag first: a wrong topic fails before the export
        samples = read_calibration(args.calibration_bag, args.config in LOFTR_PRESETS,
                                   args.calibration_topic or IMAGE,
                                   args.calibration_frames or DEFAULT_CALIBRATION_FRAMES)
    with tempfile.TemporaryDirectory(prefix='relperception_export_') as folder:
        float_path = export_model(args.config, Path(folder) / 'float32.onnx', **export)
        if precision == 'float16':
            from relperception.runtime.float16 import convert_float16

            return convert_float16(float_path, args.output,
                                   check_inputs=[_example_inputs(float_path)])
        from relperception.runtime.quantize import compare_outputs, quantize_int8

        reader = calibration_reader(samples, float_path)
        path = quantize_int8(float_path, args.output, reader,
                             activation_type=args.int8_activations or ACTIVATION_TYPES[0],
                             float_output_layers=not args.int8_quantize_outputs)
        report = compare_outputs(float_path, path, list(reader.inputs(2)))
        for name, row in report.items():
            if 'differing' in row:
                logger.info('on 2 calibration inputs: %s differs from float32 in %.2f %% of '
                            'the elements', name, 100.0 * row['differing'])
            else:
                logger.info('on 2 calibration inputs: %s max |float32 - int8| = %.3g (float32 '
                            'values up to %.3g)', name, row['max_abs'], row['max_reference'])
        return path


def _example_inputs(path) -> dict:
    """Return a seeded random input dict at the export size of an ONNX file."""
    import numpy as np

    from relperception.runtime.onnx_metadata import read_metadata
    from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend

    graph_inputs = OnnxRuntimeBackend(path, num_threads=1).session.get_inputs()
    height, width = read_metadata(path)['export_size']
    rng = np.random.default_rng(0)
    return {i.name: rng.random((1, int(i.shape[1]), height, width), dtype=np.float32)
            for i in graph_inputs}


def _check(args: argparse.Namespace, path) -> None:
    """Log the torch/onnxruntime difference on a random input of another size."""
    import numpy as np

    from relperception.pipeline.export import build_export_model
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

    from relperception.matching.loftr.two_stage import open_loftr_backend

    got = open_loftr_backend('onnxruntime', path, threshold=0.0).run(inputs)
    model.threshold = 0.0
    with torch.no_grad():
        ref = model(*(torch.from_numpy(inputs[n]) for n in ('image0', 'image1')))
    keep = ref['mask'].numpy()
    return {'mask (cells differing)': float((got['mask'] != keep).sum()),
            'keypoints1': float(np.abs(got['keypoints1'][keep]
                                       - ref['keypoints1'].numpy()[keep]).max(initial=0.0))}
