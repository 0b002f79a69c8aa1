# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""ONNX export with the checks a deployment needs.

``OPSET = 17`` is the single place the opset is chosen: 17 is the first opset with
``LayerNormalization`` as one op (ViT and transformer layers export as one node instead of a
ReduceMean/Sub/Pow chain), it is fully supported by onnxruntime >= 1.14 and by TensorRT 8.6 /
10 (JetPack 6), and nothing in our models needs a newer op.

The TorchScript exporter (``torch.onnx.export(..., dynamo=False)``) is used: it traces the
module once and records symbolic height/width for the convolution, interpolation and attention
graphs of our models, so one file serves every input size within the recorded bounds. The
exported graph is checked with ``onnx.checker`` and refused when it contains ``NonZero`` (a
data-dependent output shape TensorRT cannot plan for; fixed-shape outputs with a ``mask`` are
the contract instead). Metadata such as the size bounds, preprocessing and preset name is
stored in the model's ``metadata_props`` (JSON-encoded values), where
``OnnxRuntimeBackend`` reads it back to check inputs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence
import warnings

import numpy as np
import onnx
from relperception.atomic_files import atomic_path
from relperception.runtime.onnx_metadata import read_metadata  # noqa: F401 (re-exported)
import torch

logger = logging.getLogger(__name__)

OPSET = 17
FORBIDDEN_OPS = ('NonZero',)


def export_onnx(module: torch.nn.Module, example_inputs: tuple, path, input_names: Sequence[str],
                output_names: Sequence[str], dynamic_axes: Optional[Mapping] = None,
                opset: int = OPSET, metadata: Optional[Mapping[str, Any]] = None) -> Path:
    """Export ``module`` to ONNX, check the graph and store ``metadata``.

    Args:
        module: the network (put in eval mode here); it returns a tensor, a tuple in
            ``output_names`` order, or a dict (wrap dict-returning modules so the order is
            explicit; see ``OutputsAsTuple``).
        example_inputs: tuple of example tensors, one per input name (any valid size).
        path: the ``.onnx`` file to write (parent folders are created).
        input_names: names of the graph inputs.
        output_names: names of the graph outputs.
        dynamic_axes: ``{name: {axis: symbol}}`` of the dynamic dimensions, e.g.
            ``{'image': {2: 'height', 3: 'width'}}`` (default: all static).
        opset: ONNX opset (default ``OPSET``).
        metadata: stored in ``metadata_props`` (non-string values JSON-encoded). The keys
            ``min_height``, ``max_height``, ``min_width``, ``max_width`` and ``size_multiple``
            are enforced by ``OnnxRuntimeBackend`` on 4-D inputs.

    Returns:
        The path written.

    Raises:
        ValueError: the number of example inputs differs from the input names, or the graph
            contains a forbidden op (``NonZero``), named in the message.
        onnx.checker.ValidationError: the exported model is invalid.
    """
    if not isinstance(example_inputs, tuple):
        raise ValueError('example_inputs must be a tuple of tensors')
    if len(example_inputs) != len(input_names):
        raise ValueError(f'{len(example_inputs)} example inputs for {len(input_names)} input '
                         f'names {list(input_names)}')
    path = Path(path)
    module = module.eval()
    with atomic_path(path) as temporary:
        model = _export_checked(module, example_inputs, temporary, input_names, output_names,
                                dynamic_axes, opset, metadata)
    logger.info('exported %s (opset %d, %d nodes)', path, opset, len(model.graph.node))
    return path


def _export_checked(module, example_inputs, path: Path, input_names, output_names,
                    dynamic_axes, opset, metadata) -> onnx.ModelProto:
    """Export ``module`` to ``path``, refuse forbidden ops, add the metadata, check the file."""
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated in favour of dynamo but is the one that keeps
        # symbolic H/W through our conv/attention graphs; tracer warnings are expected.
        warnings.simplefilter('ignore', category=DeprecationWarning)
        warnings.simplefilter('ignore', category=torch.jit.TracerWarning)
        # nn.MultiheadAttention / TransformerEncoderLayer take a fused "fast path" in eval
        # mode that has no ONNX symbolic; the plain path exports (and computes the same).
        fastpath = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            with torch.no_grad():
                torch.onnx.export(module, example_inputs, str(path),
                                  input_names=list(input_names),
                                  output_names=list(output_names),
                                  dynamic_axes=dict(dynamic_axes or {}),
                                  opset_version=int(opset), do_constant_folding=True,
                                  dynamo=False)
        finally:
            torch.backends.mha.set_fastpath_enabled(fastpath)
    model = onnx.load(str(path))
    bad = find_ops(model, FORBIDDEN_OPS)
    if bad:
        raise ValueError(f'the exported graph contains {sorted({op for op, _ in bad})} nodes '
                         f'(data-dependent shapes, not TensorRT friendly): '
                         f'{[name for _, name in bad]}; return fixed-shape outputs with a mask '
                         f'instead of indexing with a boolean mask / nonzero()')
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key = str(key)
        entry.value = value if isinstance(value, str) else json.dumps(value)
    onnx.save(model, str(path))
    onnx.checker.check_model(str(path))
    return model


def find_ops(model: onnx.ModelProto, op_types: Iterable[str]) -> List[tuple]:
    """Return ``(op_type, node name)`` of every node of the given types, subgraphs included.

    Args:
        model: the ONNX model.
        op_types: op type names, e.g. ``('NonZero',)``.

    Returns:
        List of ``(op_type, name)`` pairs (name may be empty for unnamed nodes).
    """
    wanted = set(op_types)
    found = []

    def visit(graph):
        for node in graph.node:
            if node.op_type in wanted:
                found.append((node.op_type, node.name or f'<unnamed {node.op_type}>'))
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    visit(attribute.g)
                for sub in attribute.graphs:
                    visit(sub)

    visit(model.graph)
    return found


class OutputsAsTuple(torch.nn.Module):
    """Wrap a module returning a dict so that it returns a tuple in a fixed order.

    Args:
        module: the wrapped module.
        output_names: the dict keys to return, in order.
        casts: optional ``{name: torch.dtype}`` applied to those outputs (e.g. ``mask`` to
            ``torch.bool``).
    """

    def __init__(self, module: torch.nn.Module, output_names: Sequence[str],
                 casts: Optional[Mapping[str, torch.dtype]] = None):
        """Store the module, the output order and the casts."""
        super().__init__()
        self.module = module
        self.output_names = tuple(output_names)
        self.casts = dict(casts or {})

    def forward(self, *inputs):
        """Return the wrapped module's outputs as a tuple in ``output_names`` order."""
        result = self.module(*inputs)
        return tuple(result[n].to(self.casts[n]) if n in self.casts else result[n]
                     for n in self.output_names)


def check_parity(module: torch.nn.Module, path, inputs_list: Sequence[Dict[str, np.ndarray]],
                 atol: Optional[float] = None,
                 num_threads: Optional[int] = None) -> Dict[str, float]:
    """Compare torch eager with onnxruntime on several inputs.

    Args:
        module: the torch module that was exported (same outputs in the same order).
        path: the ``.onnx`` file.
        inputs_list: list of input dicts (use sizes other than the export example).
        atol: when given, a ValueError is raised if a floating output differs by more.
        num_threads: onnxruntime intra-op threads.

    Returns:
        ``{output name: max abs difference over all inputs}`` (boolean and integer outputs:
        the number of differing elements, summed over inputs).

    Raises:
        ValueError: a floating output differs by more than ``atol``.
    """
    from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend
    from relperception.runtime.torch_backend import TorchBackend

    onnx_backend = OnnxRuntimeBackend(path, num_threads=num_threads)
    torch_backend = TorchBackend(module, onnx_backend.input_names, onnx_backend.output_names)
    diffs = dict.fromkeys(onnx_backend.output_names, 0.0)
    for inputs in inputs_list:
        expected = torch_backend.run(inputs)
        got = onnx_backend.run(inputs)
        for name in diffs:
            a, b = expected[name], got[name]
            if a.shape != b.shape:
                raise ValueError(f'output {name!r}: torch shape {a.shape}, onnx {b.shape}')
            if np.issubdtype(a.dtype, np.floating):
                diffs[name] = max(diffs[name], float(np.max(np.abs(a - b), initial=0.0)))
            else:
                diffs[name] += float(np.count_nonzero(a != b))
    if atol is not None:
        over = {n: d for n, d in diffs.items()
                if np.issubdtype(expected[n].dtype, np.floating) and d > atol}
        if over:
            raise ValueError(f'onnxruntime differs from torch by more than {atol}: {over}')
    return diffs
