# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""INT8 static post-training quantisation of an ONNX export, calibrated on given inputs.

``quantize_int8`` runs onnxruntime's ``quantize_static`` in the QDQ format: every quantised
tensor is a ``QuantizeLinear`` / ``DequantizeLinear`` pair around the original float op, the
explicit-quantisation form TensorRT consumes, which onnxruntime on the CPU fuses into integer
kernels (``QLinearConv``, ``QLinearAdd``, ...) when it loads the file. Weights are int8,
symmetric, one scale per output channel (``per_channel``); activations have one scale per
tensor, found by running the float32 model on calibration inputs (``CALIBRATION_METHODS``).

Activation type (``ACTIVATION_TYPES``):

* ``uint8`` (default): asymmetric, zero point chosen per tensor. onnxruntime's CPU kernels take
  uint8 activations with int8 weights, fold a ReLU into the quantisation range and fuse every
  convolution.
* ``int8``: symmetric, zero point 0, float biases: the form TensorRT's explicit quantisation
  requires (it dequantises int8 tensors only, so int32 biases would stop its parser). On the
  CPU onnxruntime cannot fold the ReLUs into a symmetric range and leaves part of the
  convolutions in float between Q/DQ pairs, so it runs slower there.

Calibration inputs are a model's input dicts: a :class:`CalibrationReader` prepares samples
one at a time with a function the model's own code provides. ``relperception export --int8``
reads the samples from the user's own recording
(:func:`relperception.data.calibration.read_calibration_images`) and prepares them exactly as
the runtime does (``relperception.models.calibration.dense_preprocessor``,
``relperception.matching.loftr.calibration.loftr_preprocessor``);
``relperception.pipeline.export.calibration_reader_from_bag`` picks them by the export's
metadata. The quantised graph keeps the float32 export's dynamic height and width (Q/DQ are
element-wise); its scales are those seen at the calibration size.

Which ops are quantised (:func:`ops_to_quantize`): in convolutional graphs every op
onnxruntime's quantiser supports (convolutions, additions, concatenations, pooling, resizes,
...); in graphs with attention (LoFTR, the ViT backbones: a node of ``ATTENTION_OPS``) only
the weighted and attention products (``ATTENTION_QUANTIZED_OPS``), so that layer norms,
softmaxes and residual sums stay float32 (quantised, they cost the ViT several mIoU points)
and so does LoFTR's coordinate arithmetic that turns cell indices into pixel positions
(quantised, it moves ``keypoints0`` off the cell centres). In all, the output layers stay
float32 (:func:`output_layers`): the last weighted layer before each output and the ops after
it, which take integer inputs and give float outputs, so that a metric depth is not rounded to
1/256 of its range.

onnxruntime's integer convolutions gain most on wide layers: narrow ones (16-32 channels, as in
``conv_small``) gain far less than 64-512-channel ones, and up-sampling, arg-max and the
float output layers do not shrink. Measure on your model with ``bench/quantize_bench.py``.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from relperception.atomic_files import atomic_path

logger = logging.getLogger(__name__)

#: Metadata key recording the numeric precision of an exported file (absent = float32).
PRECISION_KEY = 'precision'
#: Precisions ``relperception export`` writes for onnxruntime.
PRECISIONS = ('float32', 'int8', 'float16')
#: INT8 activation types (see the module docstring); the first is the default.
ACTIVATION_TYPES = ('uint8', 'int8')
#: Calibration methods (onnxruntime ``CalibrationMethod`` names); the first is the default.
CALIBRATION_METHODS = ('minmax', 'percentile', 'entropy')
#: A graph with one of these ops has attention (transformer layers).
ATTENTION_OPS = ('LayerNormalization', 'Softmax')
#: Op types quantised in graphs with attention (the rest stays float32).
ATTENTION_QUANTIZED_OPS = ('Conv', 'MatMul', 'Gemm')
#: Ops with weights: where :func:`output_layers` stops walking back from an output.
WEIGHTED_OPS = ('Conv', 'ConvTranspose', 'MatMul', 'Gemm')
#: Most nodes :func:`output_layers` keeps in float32 per output.
OUTPUT_LAYER_DEPTH = 8


def set_metadata(model, values: Mapping[str, Any]) -> None:
    """Set entries of an ONNX model's ``metadata_props`` (replacing keys that exist).

    Args:
        model: an ``onnx.ModelProto`` (changed in place).
        values: key -> value; strings are stored as they are, anything else JSON-encoded (as
            ``relperception.runtime.onnx_export.export_onnx`` does).
    """
    import json

    kept = [(e.key, e.value) for e in model.metadata_props if e.key not in values]
    del model.metadata_props[:]
    for key, value in kept + [(k, v if isinstance(v, str) else json.dumps(v))
                              for k, v in values.items()]:
        entry = model.metadata_props.add()
        entry.key, entry.value = str(key), value


def file_precision(path) -> str:
    """Return the precision recorded in an ONNX file's metadata (``float32`` when absent).

    Args:
        path: the ``.onnx`` file.

    Returns:
        One of :data:`PRECISIONS`.
    """
    from relperception.runtime.onnx_metadata import read_metadata

    return str(read_metadata(path).get(PRECISION_KEY, 'float32'))


class CalibrationReader:
    """Feed preprocessed calibration samples to onnxruntime's quantiser, one at a time.

    An ``onnxruntime.quantization.CalibrationDataReader``: that abstract base accepts every
    class with a ``get_next`` method as its subclass, so this module need not import
    onnxruntime (the ``export`` verb imports it for its option defaults).

    Args:
        samples: images (dense: (H, W, 3) uint8 RGB) or pairs (LoFTR: two (H, W) uint8 grey),
            e.g. from ``relperception.data.calibration.read_calibration_images``.
        prepare: turns one sample into the model's input dict
            (``relperception.models.calibration.dense_preprocessor``,
            ``relperception.matching.loftr.calibration.loftr_preprocessor``).

    Raises:
        ValueError: no samples.
    """

    def __init__(self, samples: Sequence[Any], prepare: Callable[[Any], Dict[str, np.ndarray]]):
        """Keep the samples; nothing is preprocessed before it is asked for."""
        if len(samples) == 0:
            raise ValueError('no calibration samples')
        self.samples = list(samples)
        self.prepare = prepare
        self._next = iter(self.samples)

    def __len__(self) -> int:
        """Return the number of calibration samples."""
        return len(self.samples)

    def get_next(self) -> Optional[Dict[str, np.ndarray]]:
        """Return the next input dict, or None after the last sample."""
        sample = next(self._next, None)
        return None if sample is None else self.prepare(sample)

    def __iter__(self) -> 'CalibrationReader':
        """Iterate over the remaining input dicts."""
        return self

    def __next__(self) -> Dict[str, np.ndarray]:
        """Return the next input dict (``StopIteration`` after the last)."""
        item = self.get_next()
        if item is None:
            raise StopIteration
        return item

    def rewind(self) -> None:
        """Start again from the first sample."""
        self._next = iter(self.samples)

    def inputs(self, count: Optional[int] = None) -> Iterator[Dict[str, np.ndarray]]:
        """Yield the input dicts of the first ``count`` samples (all when None)."""
        for sample in self.samples[:count]:
            yield self.prepare(sample)


@contextlib.contextmanager
def _quiet_quantizer():
    """Silence the quantiser's root-logger records below WARNING and its pre-processing advice.

    The pre-processing it advises is done here; records of named loggers are not affected.
    """
    def quiet(record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return record.levelno >= logging.WARNING and 'pre-processing' not in text \
            and 'pre_process' not in text

    root = logging.getLogger()
    root.addFilter(quiet)
    printed = io.StringIO()  # the histogram calibrators print their progress
    try:
        with contextlib.redirect_stdout(printed):
            yield
    finally:
        root.removeFilter(quiet)
        if printed.getvalue().strip():
            logger.debug('onnxruntime quantiser: %s', printed.getvalue().strip())


def quantize_int8(float_path, output, reader, activation_type: str = ACTIVATION_TYPES[0],
                  per_channel: bool = True, method: str = CALIBRATION_METHODS[0],
                  op_types: Optional[Sequence[str]] = None,
                  float_output_layers: bool = True) -> Path:
    """Write a QDQ INT8 copy of a float32 ONNX export, calibrated with ``reader``.

    Args:
        float_path: the float32 ``.onnx`` file (a ``relperception export``).
        output: the INT8 ``.onnx`` file to write (replaced atomically).
        reader: an ``onnxruntime.quantization.CalibrationDataReader`` yielding input dicts of
            the model (e.g. :class:`CalibrationReader`); it is rewound when it can be.
        activation_type: ``uint8`` (asymmetric, onnxruntime CPU) or ``int8`` (symmetric,
            TensorRT), see the module docstring.
        per_channel: one weight scale per output channel (else per tensor).
        method: calibration method, one of :data:`CALIBRATION_METHODS`.
        op_types: op types to quantise (default: :func:`ops_to_quantize`).
        float_output_layers: keep the output layers in float32 (:func:`output_layers`);
            False quantises them too (faster, coarser outputs).

    Returns:
        The path written; its metadata is the float32 file's plus ``precision: int8``,
        ``int8_activations``, ``int8_per_channel``, ``int8_float_output_layers``,
        ``int8_calibration`` (method and number of samples).

    Raises:
        FileNotFoundError: ``float_path`` does not exist.
        ValueError: unknown activation type or method, a file that is not float32, or a
            reader that yields nothing.
    """
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, quantize_static, \
        QuantType
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from relperception.runtime.onnx_metadata import read_metadata

    float_path, output = Path(float_path), Path(output)
    if not float_path.is_file():
        raise FileNotFoundError(f'ONNX model {float_path} does not exist')
    if activation_type not in ACTIVATION_TYPES:
        raise ValueError(f'activation_type must be one of {ACTIVATION_TYPES}, '
                         f'got {activation_type!r}')
    if method not in CALIBRATION_METHODS:
        raise ValueError(f'calibration method must be one of {CALIBRATION_METHODS}, '
                         f'got {method!r}')
    meta = read_metadata(float_path)
    precision = str(meta.get(PRECISION_KEY, 'float32'))
    if precision != 'float32':
        raise ValueError(f'{float_path} is already {precision}; quantise the float32 export')
    if hasattr(reader, 'rewind'):
        reader.rewind()
    samples = _CountingReader(reader)
    symmetric = activation_type == 'int8'
    methods = {'minmax': CalibrationMethod.MinMax, 'percentile': CalibrationMethod.Percentile,
               'entropy': CalibrationMethod.Entropy}
    with atomic_path(output) as temporary:
        prepared = temporary.with_name(temporary.stem + '.prepared.onnx')
        try:
            with _quiet_quantizer():
                # onnxruntime's recommended pre-processing (ONNX shape inference and basic graph
                # optimisations); its symbolic shape inference cannot resolve our dynamic
                # height/width through the ViT and LoFTR graphs, so it is skipped.
                quant_pre_process(str(float_path), str(prepared), skip_symbolic_shape=True)
                graph = onnx.load(str(prepared)).graph
                float_nodes = output_layers(graph) if float_output_layers else []
                if op_types is None:
                    op_types = ops_to_quantize(graph)
                quantize_static(
                    str(prepared), str(temporary), samples, quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=list(op_types) if op_types else None,
                    nodes_to_exclude=float_nodes,
                    per_channel=bool(per_channel),
                    activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                    weight_type=QuantType.QInt8, calibrate_method=methods[method],
                    extra_options={'ActivationSymmetric': symmetric,
                                   'WeightSymmetric': True,
                                   # TensorRT dequantises int8 only: float biases there
                                   'QuantizeBias': not symmetric,
                                   'TensorQuantOverrides': {
                                       name: [{}] for name in batched_matmul_constants(graph)}})
        except ValueError:
            if samples.count == 0:  # onnxruntime says 'No data is collected.'
                raise ValueError('the calibration reader gave no input') from None
            raise
        finally:
            prepared.unlink(missing_ok=True)
        model = onnx.load(str(temporary))
        set_metadata(model, {**_string_metadata(float_path),
                             PRECISION_KEY: 'int8', 'int8_activations': activation_type,
                             'int8_per_channel': bool(per_channel),
                             'int8_float_output_layers': bool(float_output_layers),
                             'int8_calibration': {'method': method,
                                                  'samples': samples.count}})
        onnx.save(model, str(temporary))
        onnx.checker.check_model(str(temporary))
    logger.info('wrote INT8 model %s (QDQ, %s activations, per-channel weights %s, %s '
                'calibration on %d samples)', output, activation_type, bool(per_channel),
                method, samples.count)
    return output


def ops_to_quantize(graph) -> Optional[Tuple[str, ...]]:
    """Return the op types to quantise in a graph (None: all the quantiser supports).

    Args:
        graph: an ``onnx.GraphProto``.

    Returns:
        :data:`ATTENTION_QUANTIZED_OPS` when the graph has a node of :data:`ATTENTION_OPS`,
        else None (see the module docstring).
    """
    if any(node.op_type in ATTENTION_OPS for node in graph.node):
        return ATTENTION_QUANTIZED_OPS
    return None


def batched_matmul_constants(graph) -> List[str]:
    """Return the constant ``B`` inputs of rank > 2 of the graph's ``MatMul`` nodes.

    They are quantised with one scale (per tensor): onnxruntime puts per-channel scales on
    axis 1, a batch axis of such a ``B`` (the ViT's position-embedding product), and
    onnxruntime 1.23 (a Jetson's newest wheel) cannot run the fused ``QLinearMatMul`` then.
    """
    ranks = {init.name: len(init.dims) for init in graph.initializer}
    return sorted({node.input[1] for node in graph.node
                   if node.op_type == 'MatMul' and len(node.input) > 1
                   and ranks.get(node.input[1], 0) > 2})


def output_layers(graph) -> List[str]:
    """Return the names of the nodes from each graph output back to its last weighted layer.

    Walking back from the node producing each graph output along first inputs, through ops
    without weights, up to and including the first ``Conv`` / ``MatMul`` / ``Gemm`` (at most
    ``OUTPUT_LAYER_DEPTH`` nodes). Quantised, a metric depth output would be rounded to 1/255
    of its range (0.31 m for the 80 m of ``conv_small``) and the logits to a step of their
    range; kept in float32, those layers take integer inputs and give float outputs. Integer
    outputs count too: the arg-max behind ``labels`` would otherwise make the quantiser round
    the ``logits`` it reads.

    Args:
        graph: an ``onnx.GraphProto``.

    Returns:
        Node names (unnamed nodes are left out).
    """
    producers = {name: node for node in graph.node for name in node.output}
    names: List[str] = []
    for output in graph.output:
        node = producers.get(output.name)
        for _ in range(OUTPUT_LAYER_DEPTH):
            if node is None:
                break
            if node.name and node.name not in names:
                names.append(node.name)
            if node.op_type in WEIGHTED_OPS or not node.input:
                break
            node = producers.get(node.input[0])
    return names


def _string_metadata(path) -> Dict[str, str]:
    """Return the raw ``metadata_props`` of an ONNX file (values as stored)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return {e.key: e.value for e in model.metadata_props}


class _CountingReader:
    """Pass a calibration reader's inputs on and count them (a ``CalibrationDataReader``)."""

    def __init__(self, reader):
        self.reader = reader
        self.count = 0

    def get_next(self):
        item = self.reader.get_next()
        if item is not None:
            self.count += 1
        return item

    def __iter__(self):
        return self

    def __next__(self):
        item = self.get_next()
        if item is None:
            raise StopIteration
        return item


def compare_outputs(reference_path, path, inputs_list: Sequence[Mapping[str, np.ndarray]],
                    num_threads: Optional[int] = None) -> Dict[str, Dict[str, float]]:
    """Run two ONNX files on the same inputs (onnxruntime, CPU) and compare every output.

    Args:
        reference_path: the float32 file.
        path: the reduced-precision file (same input and output names).
        inputs_list: input dicts to run both on.
        num_threads: onnxruntime intra-op threads.

    Returns:
        ``{output: row}``; a float output's row has ``max_abs`` (largest |difference| where
        both are finite), ``max_reference`` (largest |reference value|), ``nonfinite`` and
        ``reference_nonfinite`` (counts); an integer or boolean output's row has ``differing``
        (share of elements that differ, 0-1).

    Raises:
        ValueError: no inputs, or the files' outputs differ in names or shapes.
    """
    from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend

    if not inputs_list:
        raise ValueError('compare_outputs needs at least one input dict')
    reference = OnnxRuntimeBackend(reference_path, num_threads=num_threads)
    other = OnnxRuntimeBackend(path, num_threads=num_threads)
    if set(reference.output_names) != set(other.output_names):
        raise ValueError(f'outputs differ: {reference.output_names} vs {other.output_names}')
    report: Dict[str, Dict[str, float]] = {}
    for inputs in inputs_list:
        expected, got = reference.run(dict(inputs)), other.run(dict(inputs))
        for name in reference.output_names:
            a, b = expected[name], got[name]
            if a.shape != b.shape:
                raise ValueError(f'output {name!r}: shape {b.shape}, float32 {a.shape}')
            row = report.setdefault(name, {})
            if np.issubdtype(a.dtype, np.floating):
                a, b = a.astype(np.float32), b.astype(np.float32)
                finite = np.isfinite(a) & np.isfinite(b)
                row['max_abs'] = max(row.get('max_abs', 0.0),
                                     float(np.abs(a - b)[finite].max(initial=0.0)))
                row['max_reference'] = max(row.get('max_reference', 0.0),
                                           float(np.abs(a[np.isfinite(a)]).max(initial=0.0)))
                row['nonfinite'] = row.get('nonfinite', 0) + int((~np.isfinite(b)).sum())
                row['reference_nonfinite'] = row.get('reference_nonfinite', 0) + \
                    int((~np.isfinite(a)).sum())
            else:
                row.setdefault('_differing', 0)
                row.setdefault('_total', 0)
                row['_differing'] += int(np.count_nonzero(a != b))
                row['_total'] += int(a.size)
    for row in report.values():
        if '_total' in row:
            row['differing'] = row.pop('_differing') / max(row.pop('_total'), 1)
    return report
