# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Export a torch module described by an export spec to ONNX or a TensorRT engine.

The spec, built by a model's own exporter (``relperception.models.export`` for the dense
models, ``relperception.matching.loftr.export`` for LoFTR; ``relperception.pipeline.export``
picks one by preset name), is a dict with:

* ``kind``: the kind of model (``dense``, ``loftr``);
* ``module``: a ``torch.nn.Module`` whose forward takes one (1, C, H, W) float32 tensor per
  input name and returns a tuple, one tensor per output name;
* ``input_names``, ``output_names``, ``channels`` (C);
* ``size_multiple``: H and W must be multiples of it; ``default_size``: (H, W) by default;
* ``metadata``: stored in the file (``preset``, ``kind``, preprocessing, ...);
* ``output_shape``: ``(height, width) -> (output name, shape)``, the shape one output has for an
  input of that size: :func:`export_spec` runs the graph at another size than the example's and
  exports a fixed-size graph instead when the output does not follow;
* ``dynamic_size`` (optional, default True): False exports a fixed-size graph.

The metadata stored in the file (the spec's, size bounds, ``size_multiple``, ``opset``,
``export_size``) is what ``OnnxRuntimeBackend`` checks inputs against.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
from relperception.runtime.onnx_export import export_onnx, OPSET
import torch

logger = logging.getLogger(__name__)

DEFAULT_MIN_SIZE = (64, 64)
DEFAULT_MAX_SIZE = (1536, 2048)


def round_to_multiple(value: int, multiple: int, up: bool = True) -> int:
    """Return ``value`` rounded to a multiple of ``multiple`` (up or down, at least one)."""
    steps = -(-value // multiple) if up else value // multiple
    return max(steps, 1) * multiple


def export_spec(spec: Dict[str, Any], output, fmt: str = 'onnx',
                size: Optional[Tuple[int, int]] = None,
                min_size: Optional[Tuple[int, int]] = None,
                max_size: Optional[Tuple[int, int]] = None, fp16: bool = True,
                opset: int = OPSET) -> Path:
    """Export the model of an export spec (see the module docstring).

    Args:
        spec: the export spec.
        output: file to write.
        fmt: ``onnx`` or ``tensorrt``.
        size: (H, W) of the example input / TensorRT optimum.
        min_size: smallest (H, W) accepted.
        max_size: largest (H, W) accepted.
        fp16: TensorRT only: enable FP16.
        opset: ONNX opset.

    Returns:
        The path written (for TensorRT the intermediate ONNX is written next to ``output``
        with the suffix ``.onnx``).

    Raises:
        ValueError: bad sizes, or an export check failed.
        RuntimeError: TensorRT requested but not installed.
    """
    config = spec['metadata'].get('preset', spec['kind'])
    multiple = spec['size_multiple']
    size = tuple(size or spec['default_size'])
    min_size = tuple(min_size or (round_to_multiple(v, multiple) for v in DEFAULT_MIN_SIZE))
    max_size = tuple(max_size or (round_to_multiple(v, multiple, up=False)
                                  for v in DEFAULT_MAX_SIZE))
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


def _size_problem(path: Path, spec: Dict[str, Any], size: Tuple[int, int],
                  min_size: Tuple[int, int], max_size: Tuple[int, int]) -> str:
    """Run the ONNX model at another size; return why its outputs do not follow ('' if fine).

    Catches models that turn the input size into Python numbers while tracing (the graph then
    keeps the example size as a constant), which would silently give wrong-size outputs.
    """
    import onnxruntime as ort

    step = spec['size_multiple']
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
    name, expected = spec['output_shape'](height, size[1])
    got = outputs[name].shape
    return '' if tuple(got) == tuple(expected) else \
        f'at input {height}x{size[1]} an output has shape {tuple(got)}, expected {expected}'
