# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Convert a float32 ONNX export to float16 (weights and activations), inputs/outputs float32.

``convert_float16`` runs ``onnxconverter_common.float16.convert_float_to_float16`` with
``keep_io_types=True``: the graph still takes and returns float32 (``image`` in, ``depth`` /
``logits`` out; integer and boolean outputs are unchanged), so the runtime, its input checks
and the metadata-driven size bounds work as for the float32 file. The converter's default
block list (``DEFAULT_FP16_OP_BLOCK_LIST``: ``Resize``, ``Range``, ``Min``, ``Max``, ``TopK``,
``CumSum``, ...) keeps those ops in float32; LayerNorm, Softmax and the position-embedding
resampling of the ViT convert to float16 and stay finite on the shipped models (checked by the
tests and the benchmark).

Two repairs of the converter's output are made here:

* ``Cast`` nodes *to* float32 (the ViT's and LoFTR's size arithmetic: shape -> int64 ->
  float) keep their ``to`` attribute while the converter records their outputs as float16,
  which onnxruntime refuses to load (``Type Error: Type (tensor(float16)) of output arg``).
  They are put on the node block list, so they stay float32 and the converter casts around
  them (:func:`float32_cast_nodes`).
* A float32 graph output that the converter leaves float16 (an output also consumed inside
  the graph, such as ``logits`` feeding the ``labels`` argmax) gets a final ``Cast`` back to
  float32, so the output types are those of the float32 export.

On a CPU, onnxruntime has few float16 kernels and inserts casts around the others, so the file
is meant for GPUs (CUDA execution provider) and for a smaller download; measure it on your
target with ``bench/quantize_bench.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence
import warnings

import numpy as np
import onnx
from relperception.atomic_files import atomic_path
from relperception.runtime.quantize import PRECISION_KEY, set_metadata

logger = logging.getLogger(__name__)


def _converter():
    """Return ``onnxconverter_common.float16``; RuntimeError naming the package if missing."""
    try:
        from onnxconverter_common import float16
    except ImportError:
        raise RuntimeError('FP16 export needs the onnxconverter-common package: pip install '
                           'onnxconverter-common') from None
    return float16


def _default_block_list() -> List[str]:
    return list(_converter().DEFAULT_OP_BLOCK_LIST)


def float32_cast_nodes(model: onnx.ModelProto) -> List[str]:
    """Return the names of the ``Cast`` nodes of the main graph that cast to float32.

    Args:
        model: an ONNX model (float32 export).

    Returns:
        Node names (nodes without a name are named here, ``float32_cast_<i>``, so that they
        can be put on the converter's node block list).
    """
    names = []
    for index, node in enumerate(model.graph.node):
        if node.op_type != 'Cast':
            continue
        to = next((a.i for a in node.attribute if a.name == 'to'), None)
        if to == onnx.TensorProto.FLOAT:
            if not node.name:
                node.name = f'float32_cast_{index}'
            names.append(node.name)
    return names


def convert_float16(float_path, output, op_block_list: Optional[Sequence[str]] = None,
                    node_block_list: Optional[Iterable[str]] = None,
                    check_inputs: Optional[Sequence[Mapping[str, np.ndarray]]] = None) -> Path:
    """Write a float16 copy of a float32 ONNX export (float32 inputs and outputs).

    Args:
        float_path: the float32 ``.onnx`` file (a ``relperception export``).
        output: the float16 ``.onnx`` file to write (replaced atomically).
        op_block_list: op types kept in float32 (default: the converter's
            ``DEFAULT_OP_BLOCK_LIST``).
        node_block_list: further node names kept in float32 (the casts to float32 are always
            kept, see the module docstring).
        check_inputs: input dicts to run both files on (onnxruntime, CPU); a float output
            that is finite in float32 and not in float16 raises ValueError.

    Returns:
        The path written; its metadata is the float32 file's plus ``precision: float16``.

    Raises:
        FileNotFoundError: ``float_path`` does not exist.
        ValueError: the file is already reduced precision, or the float16 outputs are not
            finite on ``check_inputs`` (name the ops to keep in float32 in
            ``op_block_list``).
        RuntimeError: onnxconverter-common is not installed.
    """
    float16 = _converter()
    float_path, output = Path(float_path), Path(output)
    if not float_path.is_file():
        raise FileNotFoundError(f'ONNX model {float_path} does not exist')
    model = onnx.load(str(float_path))
    precision = {e.key: e.value for e in model.metadata_props}.get(PRECISION_KEY, 'float32')
    if precision != 'float32':
        raise ValueError(f'{float_path} is already {precision}; convert the float32 export')
    float_outputs = {o.name for o in model.graph.output
                     if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    blocked = float32_cast_nodes(model) + list(node_block_list or [])
    ops = list(_default_block_list() if op_block_list is None else op_block_list)
    present = sorted({n.op_type for n in model.graph.node} & set(ops))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', UserWarning)
        converted = float16.convert_float_to_float16(model, keep_io_types=True,
                                                     op_block_list=ops,
                                                     node_block_list=blocked)
    truncated = sum('will be truncated' in str(w.message) for w in caught)
    if truncated:
        logger.info('%d weight tensors hold values float16 does not keep: magnitudes below '
                    '1e-7 become 1e-7, above 1e4 become 1e4 (the converter limits)',
                    truncated)
    _restore_float32_outputs(converted, float_outputs)
    set_metadata(converted, {PRECISION_KEY: 'float16', 'float16_op_block_list': ops})
    with atomic_path(output) as temporary:
        onnx.save(converted, str(temporary))
        onnx.checker.check_model(str(temporary))
        if check_inputs:
            _check_finite(float_path, temporary, check_inputs)
    logger.info('wrote float16 model %s (kept in float32: %s nodes of the block list, %d '
                'casts to float32)', output, ', '.join(present) or 'no', len(blocked))
    return output


def _restore_float32_outputs(model: onnx.ModelProto, float_outputs: set) -> None:
    """Cast graph outputs that were float32 and came out float16 back to float32."""
    for graph_output in model.graph.output:
        tensor_type = graph_output.type.tensor_type
        if graph_output.name not in float_outputs or \
                tensor_type.elem_type != onnx.TensorProto.FLOAT16:
            continue
        name = graph_output.name
        internal = f'{name}_float16'
        for node in model.graph.node:
            node.output[:] = [internal if n == name else n for n in node.output]
            node.input[:] = [internal if n == name else n for n in node.input]
        model.graph.node.append(onnx.helper.make_node(
            'Cast', [internal], [name], name=f'{name}_to_float32', to=onnx.TensorProto.FLOAT))
        tensor_type.elem_type = onnx.TensorProto.FLOAT
        for info in model.graph.value_info:
            if info.name == name:
                info.name = internal


def _check_finite(float_path: Path, path: Path,
                  inputs_list: Sequence[Mapping[str, np.ndarray]]) -> None:
    """Raise ValueError if a float output is finite in float32 but not in float16."""
    from relperception.runtime.quantize import compare_outputs

    report = compare_outputs(float_path, path, inputs_list, num_threads=1)
    bad = {name: row['nonfinite'] for name, row in report.items()
           if row.get('nonfinite') and not row.get('reference_nonfinite')}
    if bad:
        raise ValueError(f'the float16 model {path.name} gives NaN/infinite outputs where '
                         f'float32 does not ({bad} values); keep the overflowing ops in '
                         f'float32 (op_block_list, e.g. LayerNormalization, Softmax)')


def float16_ops(path) -> Dict[str, int]:
    """Return ``{op_type: count}`` of the nodes of an ONNX file that output float16 tensors.

    Args:
        path: the ``.onnx`` file.

    Returns:
        Count per op type (``Cast`` nodes that cast to float16 included).
    """
    model = onnx.load(str(path))
    inferred = onnx.shape_inference.infer_shapes(model)
    half = {v.name for v in list(inferred.graph.value_info) + list(inferred.graph.output)
            if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    half |= {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16}
    counts: Dict[str, int] = {}
    for node in model.graph.node:
        if any(o in half for o in node.output):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
