# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Export the package's models (dense presets and LoFTR presets) to ONNX or TensorRT.

Graph contracts (what ``dense.backend`` / ``loftr.backend`` = onnxruntime/tensorrt run):

* dense models: input ``image`` (1,3,H,W) float32, normalised with the preset's mean/std;
  outputs ``depth`` (1,1,H,W) float32 (metric metres or relative inverse depth, see the
  ``depth_mode`` metadata), and when the model has a segmentation head ``logits``
  (1,C,H,W) float32 and ``labels`` (1,H,W) uint8 (argmax of the logits). H and W are dynamic
  (multiples of ``size_multiple``).
* LoFTR: inputs ``image0``, ``image1`` (1,1,H,W) float32 grey in [0,1]; outputs
  ``keypoints0``, ``keypoints1`` (1,M,2) float32 pixels, ``confidence`` (1,M) float32 and
  ``mask`` (1,M) bool, M = H/8 * W/8; H and W dynamic multiples of 8. The graph is exported
  with confidence threshold 0 (``mask`` = mutual nearest neighbour and border test only): the
  matcher applies ``loftr.threshold`` to ``confidence`` at run time.

The metadata stored in the file (``preset``, ``kind``, size bounds, ``size_multiple``,
preprocessing) is what ``OnnxRuntimeBackend`` checks inputs against.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
from relperception.matching.loftr.contract import ONNX_INPUT_NAMES, ONNX_OUTPUT_NAMES
from relperception.runtime.loftr_two_stage import fine_graph_inputs, fine_graph_path
from relperception.runtime.onnx_export import export_onnx, OPSET
import torch

logger = logging.getLogger(__name__)

LOFTR_PRESETS = ('loftr', 'loftr_lite')
LOFTR_INPUTS = ONNX_INPUT_NAMES
LOFTR_OUTPUTS = ONNX_OUTPUT_NAMES
DENSE_INPUTS = ('image',)
LOFTR_MULTIPLE = 8
DEFAULT_MIN_SIZE = (64, 64)
DEFAULT_MAX_SIZE = (1536, 2048)


class DenseExportWrapper(torch.nn.Module):
    """Dense model -> ``(depth, logits, labels)`` tuple (or ``(depth,)`` without a seg head).

    Args:
        model: a ``DenseModel``; forward(image) -> dict with ``depth`` and maybe ``logits``.
        with_logits: whether the model returns ``logits``.
    """

    def __init__(self, model: torch.nn.Module, with_logits: bool):
        """Wrap ``model``."""
        super().__init__()
        self.model = model
        self.with_logits = with_logits

    def forward(self, image: torch.Tensor):
        """Return ``(depth, logits, labels)`` or ``(depth,)`` for (1,3,H,W) ``image``."""
        out = self.model(image)
        if not self.with_logits:
            return (out['depth'],)
        logits = out['logits']
        return out['depth'], logits, logits.argmax(dim=1).to(torch.uint8)


def dense_output_names(with_logits: bool) -> Tuple[str, ...]:
    """Return the ONNX output names of a dense model export.

    Args:
        with_logits: whether the model has a segmentation head.

    Returns:
        ``('depth', 'logits', 'labels')`` or ``('depth',)``.
    """
    return ('depth', 'logits', 'labels') if with_logits else ('depth',)


def _weights_for(name: str, weights: Optional[str], random_weights: bool) -> Optional[Path]:
    """Return the weights file to load, or None for random weights."""
    from relperception.models.weights import shipped_weights

    if weights:
        return Path(weights)
    if random_weights:
        logger.warning('exporting %s with RANDOM weights (--random-weights, seed 0)', name)
        return None
    try:
        return shipped_weights(name)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f'{exc} (or pass --random-weights to export untrained '
                                f'weights for testing)') from None


def build_export_model(config: str, weights: Optional[str] = None,
                       random_weights: bool = False) -> Dict[str, Any]:
    """Build the module to export for a preset name or model YAML, with its weights.

    Args:
        config: a LoFTR preset (``loftr``, ``loftr_lite``), a dense model preset name or a
            dense model YAML file.
        weights: weights file; None = the shipped weights of the preset.
        random_weights: allow exporting without weights (random initialisation).

    Returns:
        Dict with ``kind`` (``dense`` or ``loftr``), ``module`` (tuple-returning),
        ``input_names``, ``output_names``, ``channels``, ``size_multiple``, ``default_size``
        (H, W) and ``metadata`` (preset name, preprocessing).

    Raises:
        FileNotFoundError: no weights and ``random_weights`` is false.
        ValueError: unknown preset or weights that do not fit.
    """
    if config in LOFTR_PRESETS:
        from relperception.matching.loftr.model import LoFTR, LoFTROnnxWrapper
        from relperception.models.weights import load_state_dict_file

        path = _weights_for(config, weights, random_weights)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # reproducible random initialisation
            model = LoFTR(preset=config).eval()
        if path is not None:
            model.load_weights(load_state_dict_file(path))
        # The confidence threshold is applied by the matcher at run time (loftr.threshold), so
        # the graph's mask only holds mutual-nearest-neighbour and border tests.
        model.threshold = 0.0
        return {'kind': 'loftr', 'module': LoFTROnnxWrapper(model),
                'input_names': LOFTR_INPUTS, 'output_names': LOFTR_OUTPUTS, 'channels': 1,
                'size_multiple': LOFTR_MULTIPLE, 'default_size': model.input_size,
                'metadata': {'kind': 'loftr', 'preset': config, 'threshold_in_graph': 0.0,
                             'input_range': 'grey [0,1]', 'coarse_stride': 8,
                             'keypoint_offset': model.conf['keypoint_offset'],
                             'weights': str(path) if path else 'random'}}
    from relperception.models.dense import build_dense_model
    from relperception.models.presets import load_model_config

    conf = load_model_config(config)
    name = conf.get('name') or Path(config).stem
    source = weights or (None if random_weights else 'shipped')
    if source is None:
        logger.warning('exporting %s with RANDOM weights (--random-weights, seed 0)', name)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # reproducible random initialisation
            model = build_dense_model(conf, weights=source).eval()
    except FileNotFoundError as exc:
        if source != 'shipped':
            raise
        raise FileNotFoundError(f'{exc} (or pass --random-weights to export untrained '
                                f'weights for testing)') from None
    inp = conf.get('input', {})
    multiple = max(int(getattr(model, 'size_multiple', 1)), int(inp.get('multiple', 1)), 1)
    with_logits = getattr(model, 'segmentation_head', None) is not None
    metadata = {'kind': 'dense', 'preset': name, 'weights': str(source or 'random'),
                'depth_mode': conf.get('depth_mode'), 'input': inp,
                'class_names': conf.get('class_names', []),
                'model': json.loads(json.dumps(conf.get('model', {}), default=str))}
    size = (_round(int(inp.get('height', 480)), multiple),
            _round(int(inp.get('width', 640)), multiple))
    return {'kind': 'dense', 'module': DenseExportWrapper(model, with_logits),
            'input_names': DENSE_INPUTS, 'output_names': dense_output_names(with_logits),
            'channels': 3, 'size_multiple': multiple, 'default_size': size,
            'metadata': metadata}


def _round(value: int, multiple: int, up: bool = True) -> int:
    """Return ``value`` rounded to a multiple of ``multiple`` (up or down, at least one)."""
    steps = -(-value // multiple) if up else value // multiple
    return max(steps, 1) * multiple


def export_model(config: str, output, fmt: str = 'onnx', weights: Optional[str] = None,
                 random_weights: bool = False, size: Optional[Tuple[int, int]] = None,
                 min_size: Optional[Tuple[int, int]] = None,
                 max_size: Optional[Tuple[int, int]] = None, fp16: bool = True,
                 opset: int = OPSET, two_stage: bool = False) -> Path:
    """Export a preset to ONNX (``fmt='onnx'``) or a TensorRT engine (``fmt='tensorrt'``).

    Args:
        config: preset name or dense model YAML (see ``build_export_model``).
        output: file to write (``.onnx`` or ``.engine``; for TensorRT the intermediate ONNX
            is written next to it with the suffix ``.onnx``).
        fmt: ``onnx`` or ``tensorrt``.
        weights: weights file; None = the shipped weights of the preset.
        random_weights: allow exporting untrained weights.
        size: (H, W) of the example input and of the TensorRT optimisation profile's optimum
            (default: the preset's input size).
        min_size: smallest (H, W) accepted (default 64x64).
        max_size: largest (H, W) accepted (default 1536x2048).
        fp16: TensorRT only: enable FP16.
        opset: ONNX opset.
        two_stage: LoFTR presets, ONNX only: write a coarse graph to ``output`` and a fine
            graph with a dynamic match count next to it (see ``export_loftr_two_stage``).

    Returns:
        The path written (the coarse graph for ``two_stage``).

    Raises:
        ValueError: bad sizes or format, or an export check failed.
        FileNotFoundError: missing weights.
        RuntimeError: TensorRT requested but not installed.
    """
    if fmt not in ('onnx', 'tensorrt'):
        raise ValueError(f'unknown export format {fmt!r}; choose onnx or tensorrt')
    if two_stage and (fmt != 'onnx' or config not in LOFTR_PRESETS):
        raise ValueError(f'a two-stage export is for the LoFTR presets {LOFTR_PRESETS} in '
                         f'ONNX format (onnxruntime), not {config} / {fmt}')
    if two_stage:
        spec = build_export_model(config, weights, random_weights)
        return export_loftr_two_stage(spec, output, size, min_size, max_size, opset)
    if fmt == 'tensorrt':
        from relperception.runtime.tensorrt_backend import import_tensorrt
        import_tensorrt()  # fail before the (slow) ONNX export
    spec = build_export_model(config, weights, random_weights)
    return export_spec(spec, output, fmt, size, min_size, max_size, fp16, opset)


def export_spec(spec: Dict[str, Any], output, fmt: str = 'onnx',
                size: Optional[Tuple[int, int]] = None,
                min_size: Optional[Tuple[int, int]] = None,
                max_size: Optional[Tuple[int, int]] = None, fp16: bool = True,
                opset: int = OPSET) -> Path:
    """Export the model of a ``build_export_model`` result (see ``export_model``).

    Args:
        spec: the dict returned by ``build_export_model``.
        output: file to write.
        fmt: ``onnx`` or ``tensorrt``.
        size: (H, W) of the example input / TensorRT optimum.
        min_size: smallest (H, W) accepted.
        max_size: largest (H, W) accepted.
        fp16: TensorRT only: enable FP16.
        opset: ONNX opset.

    Returns:
        The path written.

    Raises:
        ValueError: bad sizes, or an export check failed.
        RuntimeError: TensorRT requested but not installed.
    """
    config = spec['metadata'].get('preset', spec['kind'])
    multiple = spec['size_multiple']
    size = tuple(size or spec['default_size'])
    min_size = tuple(min_size or (_round(v, multiple) for v in DEFAULT_MIN_SIZE))
    max_size = tuple(max_size or (_round(v, multiple, up=False) for v in DEFAULT_MAX_SIZE))
    for label, value in (('size', size), ('min size', min_size), ('max size', max_size)):
        if len(value) != 2 or value[0] % multiple or value[1] % multiple or min(value) <= 0:
            raise ValueError(f'{label} {value} must be positive multiples of {multiple} '
                             f'for {config}')
    if not (min_size[0] <= size[0] <= max_size[0] and min_size[1] <= size[1] <= max_size[1]):
        raise ValueError(f'size {size} must lie within min size {min_size} and max size '
                         f'{max_size}')
    output = Path(output)
    onnx_path = output if fmt == 'onnx' else output.with_suffix('.onnx')
    generator = torch.Generator().manual_seed(0)
    example = tuple(torch.rand(1, spec['channels'], *size, generator=generator)
                    for _ in spec['input_names'])
    metadata = dict(spec['metadata'])
    metadata.update({'size_multiple': multiple, 'opset': opset, 'export_size': list(size)})
    dynamic = spec.get('dynamic_size', True)
    if dynamic:
        bounds = {'min_height': min_size[0], 'min_width': min_size[1],
                  'max_height': max_size[0], 'max_width': max_size[1]}
        axes = {n: {2: 'height', 3: 'width'} for n in spec['input_names']}
        export_onnx(spec['module'], example, onnx_path, spec['input_names'],
                    spec['output_names'], dynamic_axes=axes, opset=opset,
                    metadata={**metadata, **bounds})
        problem = _size_problem(onnx_path, spec, size, min_size, max_size)
        if problem:
            logger.warning('%s: the exported graph does not follow the input size (%s); '
                           'exporting a fixed-size %dx%d graph instead', config, problem,
                           *size)
            dynamic = False
    if not dynamic:
        min_size = max_size = size
        bounds = {'min_height': size[0], 'min_width': size[1],
                  'max_height': size[0], 'max_width': size[1]}
        export_onnx(spec['module'], example, onnx_path, spec['input_names'],
                    spec['output_names'], opset=opset, metadata={**metadata, **bounds})
    if fmt == 'onnx':
        return onnx_path
    from relperception.runtime.tensorrt_export import build_engine

    channels = spec['channels']
    shapes = ((1, channels, *min_size), (1, channels, *size), (1, channels, *max_size))
    profile = dict.fromkeys(spec['input_names'], shapes) if dynamic else {}
    return build_engine(onnx_path, output, profile, fp16=fp16)


def export_loftr_two_stage(spec: Dict[str, Any], output,
                           size: Optional[Tuple[int, int]] = None,
                           min_size: Optional[Tuple[int, int]] = None,
                           max_size: Optional[Tuple[int, int]] = None,
                           opset: int = OPSET) -> Path:
    """Export LoFTR as two ONNX graphs: coarse (fixed shapes) and fine (K matches, dynamic).

    The single graph of ``export_spec`` refines a constant K = ``fine_topk`` cells, however
    few match, because TensorRT needs shapes that do not depend on the data. Here the coarse
    graph (``output``; inputs ``image0``/``image1``, outputs ``COARSE_OUTPUT_NAMES``, size
    checks as in ``export_spec``) ends before the fine level, the caller chooses the matches
    to refine outside the graph, and the fine graph (``fine_graph_path(output)``, inputs
    ``FINE_INPUT_NAMES``) refines exactly those: its K axis (``matches``) is an input
    dimension, not computed from data, so the fine work follows the number of matches (the
    fine head runs on the K windows when ``fine_topk`` windows cover fewer pixels than the map
    at the export size, else on the map: the single graph's choice).
    ``relperception.runtime.loftr_two_stage.TwoStageLoFTRBackend`` runs the pair; its outputs
    are those of the single graph.

    Args:
        spec: a LoFTR result of ``build_export_model``.
        output: the coarse graph's file.
        size: (H, W) of the example input (default: the preset's input size).
        min_size: smallest (H, W) accepted.
        max_size: largest (H, W) accepted.
        opset: ONNX opset.

    Returns:
        The coarse graph's path; its metadata names the fine graph (``fine_graph``, relative)
        and the most matches refined per pair (``fine_topk``).

    Raises:
        ValueError: not a LoFTR spec, bad sizes, or the fine graph does not follow K.
    """
    from relperception.matching.loftr.model import (
        COARSE_OUTPUT_NAMES, FINE_INPUT_NAMES, FINE_OUTPUT_NAMES, LoFTRCoarseOnnxWrapper,
        LoFTRFineOnnxWrapper)

    if spec['kind'] != 'loftr':
        raise ValueError(f'a two-stage export needs a LoFTR preset, got {spec["kind"]}')
    model = spec['module'].model
    output = Path(output)
    fine_path = fine_graph_path(output)
    coarse_spec = dict(spec, module=LoFTRCoarseOnnxWrapper(model),
                       output_names=COARSE_OUTPUT_NAMES)
    coarse_spec['metadata'] = dict(spec['metadata'], kind='loftr_coarse',
                                   fine_graph=fine_path.name, fine_topk=int(model.fine_topk))
    coarse_path = export_spec(coarse_spec, output, 'onnx', size, min_size, max_size,
                              opset=opset)
    size = tuple(size or spec['default_size'])
    generator = torch.Generator().manual_seed(0)
    images = [torch.rand(1, 1, *size, generator=generator) for _ in range(2)]
    with torch.no_grad():
        coarse = dict(zip(COARSE_OUTPUT_NAMES, coarse_spec['module'](*images)))
    cells = coarse['keypoints0'].shape[1]
    count = min(int(model.fine_topk) or cells, cells)
    example = fine_graph_inputs(coarse, torch.arange(count))
    axes = {n: {2: 'fine_height', 3: 'fine_width'} for n in FINE_INPUT_NAMES[:2]}
    axes.update({n: {1: 'matches'} for n in FINE_INPUT_NAMES[2:]})
    axes[FINE_OUTPUT_NAMES[0]] = {1: 'matches'}
    fine_module = LoFTRFineOnnxWrapper(model)
    export_onnx(fine_module, tuple(example[n] for n in FINE_INPUT_NAMES), fine_path,
                FINE_INPUT_NAMES, FINE_OUTPUT_NAMES, dynamic_axes=axes, opset=opset,
                metadata={'kind': 'loftr_fine', 'preset': spec['metadata'].get('preset'),
                          'opset': opset, 'fine_topk': int(model.fine_topk)})
    _check_fine_graph(fine_module, fine_path, coarse, cells)
    return coarse_path


def _check_fine_graph(module: torch.nn.Module, path: Path, coarse: Dict[str, Any],
                      cells: int) -> None:
    """Run the fine graph with another match count; raise ValueError if it differs from torch."""
    from relperception.matching.loftr.model import FINE_OUTPUT_NAMES
    from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend

    count = max(1, min(cells, 7))  # a K other than the export's
    inputs = fine_graph_inputs(coarse, torch.arange(cells - count, cells))
    with torch.no_grad():
        expected = module(*inputs.values())[0].numpy()
    backend = OnnxRuntimeBackend(path, num_threads=1)
    got = backend.run({n: v.numpy() for n, v in inputs.items()})[FINE_OUTPUT_NAMES[0]]
    if got.shape != expected.shape or not np.allclose(got, expected, atol=1e-3):
        raise ValueError(f'the exported fine graph {path} does not follow the match count: '
                         f'shape {got.shape} for {expected.shape}')


def _size_problem(path: Path, spec: Dict[str, Any], size: Tuple[int, int],
                  min_size: Tuple[int, int], max_size: Tuple[int, int]) -> str:
    """Run the ONNX model at another size; return why its outputs do not follow ('' if fine).

    Catches models that turn the input size into Python numbers while tracing (the graph then
    keeps the example size as a constant), which would silently give wrong-size outputs.
    """
    import onnxruntime as ort

    multiple = spec['size_multiple']
    step = max(multiple, 8 if spec['kind'] == 'loftr' else 1)
    height = size[0] + step if size[0] + step <= max_size[0] else size[0] - step
    if height < min_size[0] or height <= 0:
        return ''  # only one height is allowed: nothing to check
    inputs = {n: np.zeros((1, spec['channels'], height, size[1]), np.float32)
              for n in spec['input_names']}
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failure is an expected answer here: do not log it
    options.intra_op_num_threads = 1
    run_options = ort.RunOptions()
    run_options.log_severity_level = 4
    try:
        session = ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
        names = [o.name for o in session.get_outputs()]
        outputs = dict(zip(names, session.run(names, inputs, run_options)))
    except Exception as exc:  # noqa: BLE001 (onnxruntime raises its own Fail/InvalidArgument)
        return f'running it at {height}x{size[1]} fails: {str(exc)[:200]}'
    if spec['kind'] == 'loftr':
        expected = (1, (height // 8) * (size[1] // 8), 2)
        got = outputs['keypoints0'].shape
    else:
        expected, got = (1, 1, height, size[1]), outputs['depth'].shape
    return '' if tuple(got) == expected else \
        f'at input {height}x{size[1]} an output has shape {tuple(got)}, expected {expected}'
