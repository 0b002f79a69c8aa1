# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""What TensorRT's ONNX parser accepts, per TensorRT version (data for ``tensorrt_compat``).

Source: the operator support matrix ``docs/operators.md`` of https://github.com/onnx/onnx-tensorrt
(the parser TensorRT ships), at these release tags:

* ``release/8.6-GA``, commit 6ba67d3428e05f690145373ca87fb8d32f98df45 (TensorRT 8.6.1): opsets
  up to 17; the lower bound 7 is the parser's own (``ModelImporter.cpp`` warns below it).
* ``release/10.0-GA``, commit eb43908b02a296ea0594432f06e9d3fac288d672 (TensorRT 10.0): opsets
  9 to 20.
* ``release/10.1-GA``, commit 96e781103cfc4adf4a6bb557e94bac8e693f6f4c (TensorRT 10.1): as 10.0,
  plus ``DeformConv``.

Kept are the names of the operators marked supported (``Y``), the opset range, the tensor
types of the page's data type notes, and, in :mod:`relperception.runtime.tensorrt_compat`, the
restrictions that can be checked on a graph without running it. An operator the page marks
unsupported (``N``) or does not list is unsupported. Newer TensorRT releases add operators
(never removed one up to 10.1), so a graph that passes for a version parses on later ones.
"""

from __future__ import annotations

import dataclasses
from typing import FrozenSet, Tuple

#: Operators marked supported in the TensorRT 8.6 matrix (default ONNX domain).
OPS_8_6 = frozenset((
    'Abs', 'Acos', 'Acosh', 'Add', 'And', 'ArgMax', 'ArgMin', 'Asin', 'Asinh', 'Atan', 'Atanh',
    'AveragePool', 'BatchNormalization', 'Cast', 'Ceil', 'Celu', 'Clip', 'Concat', 'Constant',
    'ConstantOfShape', 'Conv', 'ConvTranspose', 'Cos', 'Cosh', 'CumSum', 'DepthToSpace',
    'DequantizeLinear', 'Div', 'Dropout', 'Einsum', 'Elu', 'Equal', 'Erf', 'Exp', 'Expand',
    'EyeLike', 'Flatten', 'Floor', 'GRU', 'Gather', 'GatherElements', 'GatherND', 'Gemm',
    'GlobalAveragePool', 'GlobalLpPool', 'GlobalMaxPool', 'Greater', 'GreaterOrEqual',
    'GridSample', 'GroupNormalization', 'HardSigmoid', 'HardSwish', 'Identity', 'If',
    'ImageScaler', 'InstanceNormalization', 'IsInf', 'IsNaN', 'LRN', 'LSTM',
    'LayerNormalization', 'LeakyRelu', 'Less', 'LessOrEqual', 'Log', 'LogSoftmax', 'Loop',
    'LpNormalization', 'LpPool', 'MatMul', 'Max', 'MaxPool', 'Mean',
    'MeanVarianceNormalization', 'Min', 'Mod', 'Mul', 'Neg', 'NonMaxSuppression', 'NonZero',
    'Not', 'OneHot', 'Or', 'PRelu', 'Pad', 'ParametricSoftplus', 'Pow', 'QuantizeLinear',
    'RNN', 'RandomNormal', 'RandomNormalLike', 'RandomUniform', 'RandomUniformLike', 'Range',
    'Reciprocal', 'ReduceL1', 'ReduceL2', 'ReduceLogSum', 'ReduceLogSumExp', 'ReduceMax',
    'ReduceMean', 'ReduceMin', 'ReduceProd', 'ReduceSum', 'ReduceSumSquare', 'Relu', 'Reshape',
    'Resize', 'ReverseSequence', 'RoiAlign', 'Round', 'ScaledTanh', 'Scan', 'Scatter',
    'ScatterElements', 'ScatterND', 'Selu', 'Shape', 'Shrink', 'Sigmoid', 'Sign', 'Sin',
    'Sinh', 'Size', 'Slice', 'Softmax', 'Softplus', 'Softsign', 'SpaceToDepth', 'Split',
    'Sqrt', 'Squeeze', 'Sub', 'Sum', 'Tan', 'Tanh', 'ThresholdedRelu', 'Tile', 'TopK',
    'Transpose', 'Trilu', 'Unsqueeze', 'Upsample', 'Where', 'Xor'))
#: The TensorRT 10.0 matrix: 8.6's operators plus these.
OPS_10_0 = OPS_8_6 | {'CastLike', 'Gelu', 'Hardmax', 'Mish'}
#: The TensorRT 10.1 matrix.
OPS_10_1 = OPS_10_0 | {'DeformConv'}

#: ONNX element types (``onnx.TensorProto`` names) of graph inputs and outputs. 8.6: the page's
#: data types (INT32/INT64 with "limited support") and UINT8, a type of its ``Cast`` row;
#: 10.x: the page's list, UINT8 "only as network input or output", INT8 (and FP8, INT4)
#: only through quantisation.
IO_TYPES_8_6 = frozenset(('FLOAT', 'FLOAT16', 'DOUBLE', 'INT32', 'INT64', 'BOOL', 'UINT8'))
IO_TYPES_10 = IO_TYPES_8_6 | {'BFLOAT16'}
#: Zero-point types of QuantizeLinear / DequantizeLinear ("Supported Types" of
#: DequantizeLinear; INT4 needs opset 21, above the supported range).
QUANTIZED_TYPES_8_6 = frozenset(('INT8',))
QUANTIZED_TYPES_10 = frozenset(('INT8', 'FLOAT8E4M3FN'))


@dataclasses.dataclass(frozen=True)
class TensorRTOnnxSupport:
    """What one TensorRT version's ONNX parser accepts.

    Attributes:
        version: the TensorRT version, ``major.minor``.
        source: where the lists come from (onnx-tensorrt tag and commit).
        opsets: (lowest, highest) default-domain opset parsed.
        ops: supported operator names (default domain).
        io_types: element types of graph inputs and outputs.
        quantized_types: zero-point element types of QuantizeLinear / DequantizeLinear.
    """

    version: str
    source: str
    opsets: Tuple[int, int]
    ops: FrozenSet[str]
    io_types: FrozenSet[str]
    quantized_types: FrozenSet[str]

    @property
    def internal_types(self) -> FrozenSet[str]:
        """Element types of tensors inside the graph (UINT8 only at its inputs/outputs)."""
        return self.io_types - {'UINT8'}


_REPO = 'github.com/onnx/onnx-tensorrt docs/operators.md'
#: Supported TensorRT versions, ``major.minor`` -> what its parser accepts.
SUPPORT = {
    '8.6': TensorRTOnnxSupport(
        '8.6', f'{_REPO} @ release/8.6-GA (6ba67d3428e05f690145373ca87fb8d32f98df45)',
        (7, 17), OPS_8_6, IO_TYPES_8_6, QUANTIZED_TYPES_8_6),
    '10.0': TensorRTOnnxSupport(
        '10.0', f'{_REPO} @ release/10.0-GA (eb43908b02a296ea0594432f06e9d3fac288d672)',
        (9, 20), OPS_10_0, IO_TYPES_10, QUANTIZED_TYPES_10),
    '10.1': TensorRTOnnxSupport(
        '10.1', f'{_REPO} @ release/10.1-GA (96e781103cfc4adf4a6bb557e94bac8e693f6f4c)',
        (9, 20), OPS_10_1, IO_TYPES_10, QUANTIZED_TYPES_10),
}
#: The TensorRT version checked by default: the oldest 10.x (JetPack 6.1+ ships 10.3; the
#: TensorRT backend is written against the TensorRT 10 API).
DEFAULT_TENSORRT_VERSION = '10'


def support_for(version: str) -> TensorRTOnnxSupport:
    """Return the parser support of a TensorRT version.

    Args:
        version: ``8.6``, ``10`` / ``10.x`` (every 10.x release: the 10.0 lists), or a full
            version such as ``10.3.0.26`` (its ``major.minor``; 10.1 and later minors get the
            10.1 lists, the newest stored).

    Raises:
        ValueError: a version without stored lists (older than 8.6, 9.x, 11 or later) or not
            a version string.
    """
    text = str(version).strip().lower()
    parts = text.split('.')
    try:
        major = int(parts[0])
        minor = 0 if len(parts) == 1 or parts[1] in ('x', '') else int(parts[1])
    except ValueError:
        raise ValueError(f'TensorRT version {version!r} must look like 10, 10.x, 10.3 or '
                         f'8.6') from None
    if major == 8 and minor == 6:
        return SUPPORT['8.6']
    if major == 10:
        return SUPPORT['10.0' if minor == 0 else '10.1']
    raise ValueError(f'no ONNX operator list stored for TensorRT {version}; known: 8.6, 10.0, '
                     f'10.1 (later 10.x minors use 10.1)')
