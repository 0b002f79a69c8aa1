# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Check an ONNX graph against what TensorRT's ONNX parser takes, without TensorRT or a GPU.

:func:`check_tensorrt_compat` reads a graph and returns a :class:`CompatReport` whose
``problems`` name each node, operator or input that would stop a TensorRT engine build or
change what the engine computes. The lists per TensorRT version (operators, opsets, types) are
those of onnx-tensorrt's support matrix, see :mod:`relperception.runtime.tensorrt_onnx_ops`.

Checked:

* the default-domain opset lies within the version's range; nodes of any other domain are
  refused (TensorRT would look for a plugin of that name; relperception ships none, and the
  QuantizeLinear / DequantizeLinear TensorRT takes are the default-domain ones);
* every node's operator, subgraphs included, is marked supported for the version;
* the documented restrictions that can be read off the graph: ``axes`` / ``axis`` / ``depth``
  inputs that must be constants (Pad, Reduce*, Slice, Squeeze, Unsqueeze, CumSum, OneHot);
  QuantizeLinear / DequantizeLinear zero points constant, all zero and of a quantised type
  (int8; FP8 from 10.0), and quantised weights of such a type; no MaxPool ``Indices`` output;
  pooling 2-D or 3-D with unit dilations; LayerNormalization's first output only; Resize modes;
  TopK ``sorted`` and a constant K below 3840; no ScatterND reduction (nor ScatterElements
  reduction for 8.6); Dropout not training; Constant without sparse or string values; Einsum
  without ellipsis or diagonal (8.6). Restrictions the matrix gives for 10.x only are applied
  to 8.6 too (later versions lifted none but the ScatterElements one, by the changelog);
* tensor types: graph inputs and outputs of a type TensorRT takes; initializers, constants and
  ``Cast`` targets of a type TensorRT computes in (int8 / FP8 only as quantised data, uint8
  only as a graph input or output);
* no data-dependent shapes: a value-flow analysis of the main graph marks each tensor whose
  *value* follows from the input shapes and constants alone, and each whose *shape* does. A
  node of an operator whose output shape depends on data (NonZero, NonMaxSuppression, Unique,
  Compress, StringSplit) is reported, and so is every node whose shape-giving input
  (Reshape's shape, Slice's starts/ends/axes/steps, Resize's scales/sizes, TopK's K, Range,
  Expand, Tile, Pad, ConstantOfShape, Split, Squeeze/Unsqueeze/Reduce* axes, OneHot's depth)
  is computed from tensor values. The relperception TensorRT backend allocates outputs from the
  shapes the engine resolves once the input shapes are set, which such nodes prevent;
* the optimisation profile: by default the one ``relperception export`` stores (the
  ``min_height`` / ``min_width``, ``export_size`` and ``max_height`` / ``max_width`` metadata,
  read as ``engine_cache.profile_from_onnx`` reads them). Every input with a dynamic dimension
  needs a profile; fixed dimensions must equal the profile's; dynamic ones need 1 <= min <= opt
  <= max, height and width multiples of the stored ``size_multiple``, and inputs that share a
  symbolic dimension (TensorRT takes equal names as equal sizes) the same range.

Not checked: the per-operator type columns of the matrix; restrictions that need tensor shapes
(GridSample's 4-D input, EyeLike's static input, Einsum broadcasting, Resize ``axes`` against
the input rank); recurrent-layer and DeformConv attributes; the subgraphs of If / Loop / Scan
for data-dependent shapes (a note says when the graph has them); whether the graph computes
the right shapes at the profile's minimum and maximum; builder limits (memory, tactics,
precision). The TensorRT build stays the final word.
"""

from __future__ import annotations

from collections import Counter
import dataclasses
import os
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import onnx
from onnx import numpy_helper
from relperception.runtime.onnx_metadata import model_metadata
from relperception.runtime.tensorrt_onnx_ops import (DEFAULT_TENSORRT_VERSION, support_for,
                                                     TensorRTOnnxSupport)

Shape = Sequence[int]
#: ``{input name: (min shape, opt shape, max shape)}``, as ``tensorrt_export.build_engine``.
Profile = Mapping[str, Tuple[Shape, Shape, Shape]]

DEFAULT_DOMAINS = ('', 'ai.onnx')
#: Operators whose output shape depends on input values, whatever their inputs.
DATA_DEPENDENT_SHAPE_OPS = ('NonZero', 'NonMaxSuppression', 'Unique', 'Compress', 'StringSplit')
_REDUCE_OPS = ('ReduceL1', 'ReduceL2', 'ReduceLogSum', 'ReduceLogSumExp', 'ReduceMax',
               'ReduceMean', 'ReduceMin', 'ReduceProd', 'ReduceSum', 'ReduceSumSquare')
#: Inputs (index) whose values give the output shape.
SHAPE_INPUTS = {'Reshape': (1,), 'Expand': (1,), 'Tile': (1,), 'Range': (0, 1, 2),
                'ConstantOfShape': (0,), 'Slice': (1, 2, 3, 4), 'Resize': (2, 3),
                'Upsample': (1,), 'Pad': (1, 3), 'TopK': (1,), 'OneHot': (1,), 'Squeeze': (1,),
                'Unsqueeze': (1,), 'Split': (1,), 'CenterCropPad': (1, 2), 'Col2Im': (1, 2),
                'MaxUnpool': (2,), 'AffineGrid': (1,), 'DFT': (1,),
                **dict.fromkeys(_REDUCE_OPS, (1,))}
#: Inputs (index, name) the matrix says must be constants.
CONSTANT_INPUTS = {'Pad': ((3, 'axes'),), 'Slice': ((3, 'axes'),), 'Squeeze': ((1, 'axes'),),
                   'Unsqueeze': ((1, 'axes'),), 'CumSum': ((1, 'axis'),),
                   'OneHot': ((1, 'depth'),), **dict.fromkeys(_REDUCE_OPS, ((1, 'axes'),))}
RANDOM_OPS = ('RandomNormal', 'RandomNormalLike', 'RandomUniform', 'RandomUniformLike',
              'Bernoulli', 'Multinomial')
CONTROL_FLOW_OPS = ('If', 'Loop', 'Scan')
QDQ_OPS = ('QuantizeLinear', 'DequantizeLinear')
RESIZE_MODES = ('nearest', 'linear')
RESIZE_COORDINATES = ('half_pixel', 'pytorch_half_pixel', 'tf_half_pixel_for_nn', 'asymmetric',
                      'align_corners')
RESIZE_NEAREST_MODES = ('floor', 'ceil', 'round_prefer_floor', 'round_prefer_ceil')
TOPK_MAX_K = 3840
#: Constants with more elements are not read: the values checked (zero points, K, flags) are
#: small.
_LARGEST_VALUE_READ = 1 << 16
#: Subjects listed per problem before "(+N more)".
_SUBJECTS_SHOWN = 6


@dataclasses.dataclass
class CompatReport:
    """The result of :func:`check_tensorrt_compat`.

    Attributes:
        source: the checked file (or ``<ModelProto>``).
        tensorrt_version: the TensorRT version whose lists were used (``major.minor``).
        lists_source: where those lists come from.
        problems: one line per kind of problem, naming the nodes / inputs concerned.
        notes: what was not checked for this graph.
        ops: node count per operator (``domain::op`` outside the default domain).
    """

    source: str
    tensorrt_version: str
    lists_source: str
    problems: List[str] = dataclasses.field(default_factory=list)
    notes: List[str] = dataclasses.field(default_factory=list)
    ops: Counter = dataclasses.field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def lines(self) -> List[str]:
        """Return the report as text: a verdict line, the lists' source, problems, notes."""
        verdict = 'compatible' if self.ok else f'{len(self.problems)} problem(s)'
        head = (f'{self.source}: TensorRT {self.tensorrt_version}: {verdict} '
                f'({sum(self.ops.values())} nodes, {len(self.ops)} operators)')
        return ([head, f'  lists: {self.lists_source}']
                + [f'  problem: {p}' for p in self.problems]
                + [f'  note: {n}' for n in self.notes])


class _Problems:
    """Collect problems, grouping the subjects (nodes, inputs) of each message."""

    def __init__(self):
        self.subjects: Dict[str, List[str]] = {}

    def add(self, message: str, subject: str = '') -> None:
        self.subjects.setdefault(message, [])
        if subject:
            self.subjects[message].append(subject)

    def lines(self) -> List[str]:
        result = []
        for message, subjects in self.subjects.items():
            if not subjects:
                result.append(message)
                continue
            shown = ', '.join(subjects[:_SUBJECTS_SHOWN])
            more = len(subjects) - _SUBJECTS_SHOWN
            result.append(f'{message}: {shown}' + (f' (+{more} more)' if more > 0 else ''))
        return result


def check_tensorrt_compat(model: Union[str, os.PathLike, onnx.ModelProto],
                          tensorrt_version: str = DEFAULT_TENSORRT_VERSION,
                          profile: Optional[Profile] = None,
                          check_profile: bool = True) -> CompatReport:
    """Check that TensorRT can build an engine from an ONNX graph (see the module docstring).

    Args:
        model: an ``.onnx`` file or a loaded ``onnx.ModelProto`` (external weights are not
            read: their values are not needed).
        tensorrt_version: the TensorRT version targeted (``10`` = every 10.x, ``10.3``,
            ``8.6``; see ``tensorrt_onnx_ops.support_for``).
        profile: ``{input name: (min, opt, max)}`` shapes of the engine's optimisation
            profile; None reads the one stored by ``relperception export``.
        check_profile: False skips the profile check (a graph that is run by onnxruntime only,
            such as the fine graph of a two-stage LoFTR export); a note says so.

    Returns:
        The report; ``report.ok`` when no problem was found.

    Raises:
        ValueError: a missing file, a file that is not an ONNX model, an unknown TensorRT
            version or a malformed ``profile``.
    """
    support = support_for(tensorrt_version)
    model, source = _load(model)
    if profile is not None:
        profile = _checked_profile(profile)
    problems = _Problems()
    report = CompatReport(source, support.version, support.source)
    graph = model.graph
    constants = _constants(graph)
    _check_opset(model, support, problems)
    for node, label, scope_constants, outputs in _walk(graph, constants):
        domain = node.domain if node.domain not in DEFAULT_DOMAINS else ''
        report.ops[f'{domain}::{node.op_type}' if domain else node.op_type] += 1
        if domain:
            problems.add(f'operators of domain {domain!r} are not standard ONNX (TensorRT '
                         f'would need a plugin of that name)', label)
        elif node.op_type not in support.ops:
            problems.add(f'operator {node.op_type} is not supported by TensorRT '
                         f'{support.version}', label)
        else:
            _check_restrictions(node, label, scope_constants, outputs, support, problems)
    _check_types(graph, constants, support, problems)
    _check_data_dependent_shapes(graph, constants, problems, report.notes)
    if check_profile:
        _check_profile(model, profile, problems)
    else:
        report.notes.append('optimisation profile not checked (check_profile=False)')
    report.problems = problems.lines()
    return report


def _load(model) -> Tuple[onnx.ModelProto, str]:
    """Return (model, name) of a path or ModelProto; raise ValueError for anything else."""
    if isinstance(model, onnx.ModelProto):
        source = '<ModelProto>'
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise ValueError(f'{path}: no such ONNX file')
        source = str(path)
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as error:  # noqa: BLE001 (protobuf raises DecodeError and others)
            raise ValueError(f'{path}: not an ONNX model ({type(error).__name__}: '
                             f'{str(error)[:200]})') from None
    else:
        raise ValueError(f'expected an .onnx path or an onnx.ModelProto, got '
                         f'{type(model).__name__}')
    if not model.HasField('graph') or not model.opset_import:
        raise ValueError(f'{source}: not an ONNX model (no graph or no opset)')
    return model, source


def _checked_profile(profile: Profile) -> Dict[str, Tuple[Tuple[int, ...], ...]]:
    """Return ``profile`` as int tuples; raise ValueError when malformed."""
    result = {}
    for name, shapes in dict(profile).items():
        try:
            shapes = tuple(tuple(int(d) for d in shape) for shape in shapes)
        except (TypeError, ValueError):
            raise ValueError(f'profile of {name!r} must be (min, opt, max) integer shapes, got '
                             f'{shapes!r}') from None
        if len(shapes) != 3 or len({len(s) for s in shapes}) != 1:
            raise ValueError(f'profile of {name!r} must be 3 shapes (min, opt, max) of one '
                             f'rank, got {shapes!r}')
        result[str(name)] = shapes
    return result


def _label(node: onnx.NodeProto, index: int, scope: str) -> str:
    name = repr(node.name) if node.name else f'#{index}'
    return f'{scope}{node.op_type} {name}'


def _subgraphs(node: onnx.NodeProto) -> Iterator[Tuple[str, onnx.GraphProto]]:
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.name, attribute.g
        for graph in attribute.graphs:
            yield attribute.name, graph


def _walk(graph: onnx.GraphProto, constants: Dict, scope: str = ''):
    """Yield (node, label, constants in scope, graph outputs) of a graph and its subgraphs."""
    outputs = {o.name for o in graph.output}
    for index, node in enumerate(graph.node):
        label = _label(node, index, scope)
        yield node, label, constants, outputs
        for name, sub in _subgraphs(node):
            inner = {**constants, **_constants(sub)}
            yield from _walk(sub, inner, f'{label} {name}: ')


def _tensor_value(tensor: onnx.TensorProto) -> Optional[np.ndarray]:
    """Return a small tensor's value; None for large or external ones (never needed)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL or \
            int(np.prod(tensor.dims, dtype=np.int64)) > _LARGEST_VALUE_READ:
        return None
    return numpy_helper.to_array(tensor)


def _constants(graph: onnx.GraphProto) -> Dict[str, Tuple[int, Optional[np.ndarray]]]:
    """Return ``{name: (element type, value or None)}`` of initializers and Constant outputs.

    Identity of a constant counts as that constant (TensorRT's parser looks through it).
    Values are None where unknown (external data, sparse or string constants).
    """
    result = {i.name: (i.data_type, _tensor_value(i)) for i in graph.initializer}
    for node in graph.node:
        if node.domain not in DEFAULT_DOMAINS or not node.output:
            continue
        if node.op_type == 'Constant':
            result[node.output[0]] = _constant_node_value(node)
        elif node.op_type == 'Identity' and node.input and node.input[0] in result:
            result[node.output[0]] = result[node.input[0]]
    return result


def _constant_node_value(node: onnx.NodeProto) -> Tuple[int, Optional[np.ndarray]]:
    for attribute in node.attribute:
        if attribute.name == 'value':
            return attribute.t.data_type, _tensor_value(attribute.t)
        if attribute.name in ('value_float', 'value_floats'):
            value = attribute.f if attribute.name == 'value_float' else list(attribute.floats)
            return onnx.TensorProto.FLOAT, np.array(value, np.float32)
        if attribute.name in ('value_int', 'value_ints'):
            value = attribute.i if attribute.name == 'value_int' else list(attribute.ints)
            return onnx.TensorProto.INT64, np.array(value, np.int64)
    return onnx.TensorProto.UNDEFINED, None


def _type_name(data_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(data_type)
    except ValueError:
        return f'type {data_type}'


def _attribute(node: onnx.NodeProto, name: str, default=None):
    for attribute in node.attribute:
        if attribute.name == name:
            value = onnx.helper.get_attribute_value(attribute)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _input(node: onnx.NodeProto, index: int) -> str:
    """Return the name of input ``index`` ('' when absent or omitted)."""
    return node.input[index] if index < len(node.input) else ''


def _check_opset(model: onnx.ModelProto, support: TensorRTOnnxSupport,
                 problems: _Problems) -> None:
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    low, high = support.opsets
    if not versions:
        problems.add('the model imports no default-domain (ai.onnx) opset')
    for version in versions:
        if not low <= version <= high:
            problems.add(f'opset {version} is outside the opsets {low}-{high} TensorRT '
                         f'{support.version} parses')


def _check_restrictions(node: onnx.NodeProto, label: str, constants: Dict, outputs: set,
                        support: TensorRTOnnxSupport, problems: _Problems) -> None:
    """Add the documented restrictions ``node`` breaks (see the module docstring)."""
    op = node.op_type
    for index, what in CONSTANT_INPUTS.get(op, ()):
        name = _input(node, index)
        if name and name not in constants:
            problems.add(f'{op} {what} must be a constant (initializer) for TensorRT',
                         f'{label} input {name!r}')
    if op in QDQ_OPS:
        _check_quantize(node, label, constants, support, problems)
    elif op in ('MaxPool', 'AveragePool', 'LpPool'):
        if op != 'LpPool' and len(_attribute(node, 'kernel_shape', [])) not in (2, 3):
            problems.add(f'{op}: TensorRT pools in 2-D or 3-D only', label)
        if any(d != 1 for d in _attribute(node, 'dilations', [])):
            problems.add(f'{op}: TensorRT needs unit dilations', label)
        if op == 'MaxPool' and len(node.output) > 1 and node.output[1]:
            problems.add('MaxPool: TensorRT has no Indices output', label)
    elif op == 'LayerNormalization' and any(node.output[1:]):
        problems.add('LayerNormalization: TensorRT gives the first output (Y) only', label)
    elif op == 'Resize':
        _check_resize(node, label, problems)
    elif op == 'TopK':
        if _attribute(node, 'sorted', 1) != 1:
            problems.add('TopK: TensorRT needs sorted=1', label)
        k = constants.get(_input(node, 1), (None, None))[1]
        if k is not None and k.size and int(k.reshape(-1)[0]) >= TOPK_MAX_K:
            problems.add(f'TopK: TensorRT needs K < {TOPK_MAX_K}',
                         f'{label} (K {int(k.reshape(-1)[0])})')
    elif op == 'ScatterND' or (op == 'ScatterElements' and support.version == '8.6'):
        if _attribute(node, 'reduction', 'none') != 'none':
            problems.add(f'{op}: TensorRT {support.version} has no reduction', label)
    elif op == 'Dropout':
        name = _input(node, 2)
        value = constants.get(name, (None, None))[1]
        if name and (value is None or bool(np.any(value))):
            problems.add('Dropout: training_mode must be a constant False for TensorRT', label)
    elif op == 'Constant':
        if {a.name for a in node.attribute} & {'sparse_value', 'value_string', 'value_strings'}:
            problems.add('Constant: TensorRT takes no sparse or string values', label)
    elif op == 'Einsum' and support.version == '8.6':
        terms = str(_attribute(node, 'equation', '')).replace(' ', '').split('->')[0]
        if '...' in terms or any(len(set(t)) != len(t) for t in terms.split(',')):
            problems.add('Einsum: TensorRT 8.6 takes no ellipsis or diagonal', label)
    elif op == 'Cast':
        _check_cast(node, label, outputs, support, problems)


def _check_quantize(node, label, constants, support, problems) -> None:
    op = node.op_type
    types = '/'.join(sorted(support.quantized_types))
    data = _input(node, 0)
    if op == 'DequantizeLinear' and data in constants:
        data_type = _type_name(constants[data][0])
        if data_type not in support.quantized_types:
            hint = ' (a quantised bias: TensorRT takes float biases)' if data_type == 'INT32' \
                else ''
            problems.add(f'DequantizeLinear of {data_type} data: TensorRT {support.version} '
                         f'dequantises {types} only{hint}', f'{label} input {data!r}')
            return
    zero_point = _input(node, 2)
    if not zero_point:
        problems.add(f'{op} without a zero point: ONNX then quantises to uint8, TensorRT to '
                     f'int8', label)
        return
    if zero_point not in constants:
        problems.add(f'{op} zero point must be a constant for TensorRT',
                     f'{label} input {zero_point!r}')
        return
    data_type, value = constants[zero_point]
    type_name = _type_name(data_type)
    if type_name not in support.quantized_types:
        hint = ' (asymmetric uint8: export with --int8-activations int8)' \
            if type_name == 'UINT8' else ''
        problems.add(f'{op} zero point of type {type_name}: TensorRT {support.version} '
                     f'quantises to {types} only{hint}', label)
    elif value is not None and np.any(value != 0):
        problems.add(f'{op} zero point not all zero: TensorRT quantises symmetrically only',
                     f'{label} input {zero_point!r}')


def _check_resize(node, label, problems) -> None:
    checks = (('mode', 'nearest', RESIZE_MODES),
              ('coordinate_transformation_mode', 'half_pixel', RESIZE_COORDINATES),
              ('nearest_mode', 'round_prefer_floor', RESIZE_NEAREST_MODES),
              ('keep_aspect_ratio_policy', 'stretch', ('stretch',)))
    for name, default, allowed in checks:
        value = _attribute(node, name, default)
        if value not in allowed:
            problems.add(f'Resize {name} {value!r}: TensorRT takes {", ".join(allowed)}', label)
    if _attribute(node, 'antialias', 0):
        problems.add('Resize: TensorRT has no antialiasing', label)
    axes = _attribute(node, 'axes')
    if axes is not None and _input(node, 2) and list(axes) != list(range(len(axes))):
        problems.add('Resize with scales: TensorRT needs axes 0..rank-1 in order', label)


def _check_cast(node, label, outputs, support, problems) -> None:
    target = _type_name(_attribute(node, 'to', 0))
    if target == 'UINT8':
        if node.output[0] not in outputs:
            problems.add('Cast to UINT8: TensorRT takes uint8 only as a graph input or output',
                         label)
    elif target not in support.internal_types:
        problems.add(f'Cast to {target}: not a type TensorRT {support.version} computes in',
                     label)


def _check_types(graph: onnx.GraphProto, constants: Dict, support: TensorRTOnnxSupport,
                 problems: _Problems) -> None:
    """Add graph inputs/outputs, initializers and constants of types TensorRT does not take."""
    initializers = {i.name for i in graph.initializer}
    for kind, values in (('input', graph.input), ('output', graph.output)):
        for value in values:
            if value.name in initializers or not value.type.HasField('tensor_type'):
                continue
            if kind == 'input' and not value.type.tensor_type.HasField('shape'):
                problems.add('graph input without a shape: TensorRT needs its rank',
                             repr(value.name))
            type_name = _type_name(value.type.tensor_type.elem_type)
            if type_name not in support.io_types:
                problems.add(f'graph {kind} of type {type_name}: TensorRT {support.version} '
                             f'takes {", ".join(sorted(support.io_types))}', repr(value.name))
    consumers: Dict[str, set] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, set()).add(node.op_type)
    for name, (data_type, _) in constants.items():
        type_name = _type_name(data_type)
        if type_name in support.internal_types or data_type == onnx.TensorProto.UNDEFINED:
            continue
        if consumers.get(name) and consumers[name] <= set(QDQ_OPS):
            continue  # quantised data: the QuantizeLinear / DequantizeLinear checks apply
        problems.add(f'constant of type {type_name} outside quantisation: TensorRT '
                     f'{support.version} computes in {", ".join(sorted(support.internal_types))}',
                     repr(name))


def _check_data_dependent_shapes(graph: onnx.GraphProto, constants: Dict, problems: _Problems,
                                 notes: List[str]) -> None:
    """Add the nodes of the main graph whose output shapes depend on tensor values.

    A tensor's value is *known* when it follows from the graph input shapes and constants
    alone; its shape is *known* when it follows from the input shapes. Graph inputs have known
    shapes and unknown values; constants known both; Shape and Size give known values of a
    tensor of known shape; random operators unknown values.
    """
    value_known = dict.fromkeys(constants, True)
    shape_known = dict.fromkeys(constants, True)
    for graph_input in graph.input:
        value_known.setdefault(graph_input.name, False)
        shape_known.setdefault(graph_input.name, True)
    for index, node in enumerate(graph.node):
        label = _label(node, index, '')
        inputs = [n for n in node.input if n]
        shapes_in = all(shape_known.get(n, True) for n in inputs)
        op = node.op_type if node.domain in DEFAULT_DOMAINS else None
        shape_ok = shapes_in
        if op in DATA_DEPENDENT_SHAPE_OPS:
            problems.add(f'{op}: the output shape depends on the data (TensorRT cannot plan '
                         f'its outputs before running)', label)
            shape_ok = False
        for position in SHAPE_INPUTS.get(op, ()):
            name = _input(node, position)
            if name and not value_known.get(name, False) and shape_known.get(name, True):
                problems.add('the output shape depends on tensor values: a shape-giving input '
                             'is computed from data, not from input shapes and constants',
                             f'{label} input {position} {name!r}')
                shape_ok = False
        if op in CONTROL_FLOW_OPS:
            notes.append(f'{label}: subgraphs not checked for data-dependent shapes')
        if op == 'Constant':
            value = True
        elif op in ('Shape', 'Size'):
            value = shape_known.get(_input(node, 0), True)
        elif op in RANDOM_OPS or op in CONTROL_FLOW_OPS or op is None or not inputs:
            value = False
        else:
            value = all(value_known.get(n, False) for n in inputs)
        for output in node.output:
            value_known[output] = value
            shape_known[output] = shape_ok


def _input_dims(model: onnx.ModelProto) -> Dict[str, List[Union[int, str]]]:
    """Return ``{input: dims}`` (int when fixed, the symbolic name or '' when dynamic)."""
    initializers = {i.name for i in model.graph.initializer}
    result = {}
    for graph_input in model.graph.input:
        if graph_input.name in initializers:
            continue
        dims = graph_input.type.tensor_type.shape.dim
        result[graph_input.name] = [d.dim_value if d.dim_value > 0 else d.dim_param
                                    for d in dims]
    return result


def stored_profile(model: onnx.ModelProto) -> Tuple[Dict[str, Tuple], Dict[str, str]]:
    """Return the optimisation profile ``relperception export`` stored, and why it lacks one.

    As ``engine_cache.profile_from_onnx``: every input with a dynamic dimension gets
    ``((1, C, min_height, min_width), (1, C, *export_size), (1, C, max_height, max_width))``.

    Args:
        model: the loaded ONNX model.

    Returns:
        ``({input: (min, opt, max)}, {input: why it has none})`` (dynamic inputs without size
        bounds stored, or not (N, C, H, W) with a fixed C).
    """
    metadata = model_metadata(model)
    profile, missing = {}, {}
    for name, dims in _input_dims(model).items():
        if all(isinstance(d, int) for d in dims):
            continue
        try:
            opt = tuple(int(v) for v in metadata['export_size'])
            low = (int(metadata['min_height']), int(metadata['min_width']))
            high = (int(metadata['max_height']), int(metadata['max_width']))
        except (KeyError, TypeError, ValueError):
            missing[name] = (f'input {name!r} has dynamic dimensions {dims} but the file '
                             f'stores no size bounds (min/max height and width, export_size): '
                             f'no optimisation profile')
            continue
        if len(dims) != 4 or not isinstance(dims[1], int) or len(opt) != 2:
            missing[name] = (f'input {name!r} with dimensions {dims} is not (N, C, H, W) with '
                             f'a fixed C: the stored size bounds give it no profile')
            continue
        profile[name] = ((1, dims[1], *low), (1, dims[1], *opt), (1, dims[1], *high))
    return profile, missing


def _check_profile(model: onnx.ModelProto, profile: Optional[Dict], problems: _Problems) -> None:
    """Add inputs whose dimensions the optimisation profile does not cover."""
    missing = {}
    if profile is None:
        profile, missing = stored_profile(model)
    dims_of = _input_dims(model)
    for name in sorted(set(profile) - set(dims_of)):
        problems.add(f'the profile names {name!r}, which is not a graph input')
    multiple = model_metadata(model).get('size_multiple')
    ranges: Dict[str, Tuple[str, Tuple[int, int, int]]] = {}
    for name, dims in dims_of.items():
        if name not in profile:
            if not all(isinstance(d, int) for d in dims):
                problems.add(missing.get(name) or f'input {name!r} has dynamic dimensions '
                                                  f'{dims} but no profile')
            continue
        shapes = profile[name]
        if len(shapes[0]) != len(dims):
            problems.add(f'input {name!r} has rank {len(dims)}, its profile rank '
                         f'{len(shapes[0])}')
            continue
        for axis, dim in enumerate(dims):
            bounds = tuple(int(s[axis]) for s in shapes)
            where = f'input {name!r} axis {axis}' + (f' ({dim})' if isinstance(dim, str) and dim
                                                     else '')
            if isinstance(dim, int):
                if bounds != (dim,) * 3:
                    problems.add(f'{where} is fixed at {dim} but the profile gives min/opt/max '
                                 f'{bounds}')
                continue
            if not 1 <= bounds[0] <= bounds[1] <= bounds[2]:
                problems.add(f'{where}: profile min/opt/max {bounds} must satisfy 1 <= min <= '
                             f'opt <= max')
            if isinstance(multiple, int) and multiple > 1 and len(dims) == 4 and axis >= 2 \
                    and any(b % multiple for b in bounds):
                problems.add(f'{where}: profile min/opt/max {bounds} must be multiples of the '
                             f'size multiple {multiple} (TensorRT builds at each)')
            if dim:
                first = ranges.setdefault(dim, (name, bounds))
                if first[1] != bounds:
                    problems.add(f'{where} shares dimension {dim!r} with input {first[0]!r} '
                                 f'but gets profile {bounds}, not {first[1]}')
