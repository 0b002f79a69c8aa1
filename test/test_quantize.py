# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""INT8 (QDQ, calibrated on a bag) and FP16 exports against the float32 export, on the CPU.

Tiny random-weight models (``test_dense_pipeline.write_tiny_model``: a ResNet at width 0.125
and a 4-block ViT, 64x96 input) are exported with dynamic size, reduced, and run with
onnxruntime on synthetic frames, at the export size and at another size. Tolerances, relative
to the largest float32 value of each output on the same inputs: FP16 0.5 % (float16 keeps 11
significant bits), INT8 15 % worst pixel and 3 % mean (8-bit activations of untrained weights;
the trained models' accuracy is measured by ``bench/quantize_bench.py``), and labels (argmax)
equal on >= 99 % (FP16) / 95 % (INT8) of the pixels.
"""

import logging

import numpy as np
import onnx
import pytest

pytest.importorskip('onnxruntime')
pytest.importorskip('onnxconverter_common')

from relperception.cli.main import main  # noqa: E402
from relperception.data import topics  # noqa: E402
from relperception.data.calibration import read_calibration_images  # noqa: E402
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.data.synthetic_bag import write_synthetic_bag  # noqa: E402
from relperception.models.calibration import dense_preprocessor  # noqa: E402
from relperception.models.preprocess import prepare_image_array  # noqa: E402
from relperception.models.presets import load_model_config  # noqa: E402
from relperception.pipeline.dense_pipeline import DensePipeline  # noqa: E402
from relperception.pipeline.export import (  # noqa: E402
    build_export_model, calibration_reader_from_bag)
from relperception.runtime.float16 import (  # noqa: E402
    convert_float16, float16_ops, float32_cast_nodes)
from relperception.runtime.model_export import export_spec  # noqa: E402
from relperception.runtime.onnx_export import find_ops, read_metadata  # noqa: E402
from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend  # noqa: E402
from relperception.runtime.quantize import (  # noqa: E402
    ATTENTION_QUANTIZED_OPS, batched_matmul_constants, CalibrationReader, compare_outputs,
    file_precision, ops_to_quantize, output_layers, quantize_int8)
from test_dense_pipeline import write_tiny_model  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py

EXPORT_SIZE = (64, 96)
OTHER_SIZE = (96, 128)
FP16_REL = 0.005
INT8_REL_MAX, INT8_REL_MEAN = 0.15, 0.03
FP16_LABELS, INT8_LABELS = 0.99, 0.95


@pytest.fixture(scope='module')
def bag(tmp_path_factory):
    """Write a 12-frame synthetic recording to calibrate with: rgb8 images, 32FC1 depth."""
    path = tmp_path_factory.mktemp('bag') / 'calibration.bag'
    write_synthetic_bag(path, frames=12, seed=3, width=128, height=96)
    return path


def _export(folder, kind):
    yaml_path, weights = write_tiny_model(folder, kind)
    spec = build_export_model(yaml_path, weights)
    path = export_spec(spec, folder / f'{kind}.onnx', size=EXPORT_SIZE, max_size=(256, 320))
    return yaml_path, path


@pytest.fixture(scope='module')
def conv(tmp_path_factory):
    return _export(tmp_path_factory.mktemp('conv'), 'conv')


@pytest.fixture(scope='module')
def vit(tmp_path_factory):
    return _export(tmp_path_factory.mktemp('vit'), 'vit')


@pytest.fixture(scope='module')
def conv_int8(conv, bag):
    _, path = conv
    reader = calibration_reader_from_bag(bag, path, frames=6)
    return quantize_int8(path, path.with_name('conv.int8.onnx'), reader)


def _inputs(yaml_path, size=None, count=2):
    """Preprocessed synthetic frames of another scene than the bag's (seed 7)."""
    conf = load_model_config(yaml_path)
    if size is not None:
        conf['input'].update(height=size[0], width=size[1])
    _, frames = iter_sequence(count, seed=7, width=128, height=96)
    return [{'image': prepare_image_array(f.rgb, conf)} for f in frames]


def _check_close(report, rel_max, labels_agree):
    for name in ('depth', 'logits'):
        row = report[name]
        assert row['nonfinite'] == 0, name
        assert row['max_abs'] <= rel_max * row['max_reference'], (name, row)
    assert 1.0 - report['labels']['differing'] >= labels_agree, report['labels']


def _check_only_products_quantized(float_path, path):
    """Assert that only inputs and outputs of weighted / attention products are quantised."""
    weighted = [n for n in onnx.load(str(float_path)).graph.node
                if n.op_type in ATTENTION_QUANTIZED_OPS]
    ends = {t for n in weighted for t in list(n.input) + list(n.output)}
    model = onnx.load(str(path))
    quantized = [n.input[0] for n in model.graph.node if n.op_type == 'QuantizeLinear']
    assert quantized and set(quantized) <= ends, set(quantized) - ends


class TestCalibrationReader:
    def test_reads_images_spread_over_the_bag(self, bag):
        images = read_calibration_images(bag, frames=4)
        assert len(images) == 4
        assert all(i.shape == (96, 128, 3) and i.dtype == np.uint8 for i in images)
        assert not np.array_equal(images[0], images[-1])  # first and last frame, not 4 alike
        grey = read_calibration_images(bag, frames=50, grey=True)
        assert len(grey) == 12 and grey[0].shape == (96, 128)
        pairs = read_calibration_images(bag, frames=3, grey=True, gap=1)
        assert len(pairs) == 3 and all(len(p) == 2 for p in pairs)

    def test_feeds_what_the_runtime_feeds(self, bag, conv):
        from onnxruntime.quantization import CalibrationDataReader

        yaml_path, path = conv
        reader = calibration_reader_from_bag(bag, path, frames=3)
        assert isinstance(reader, CalibrationDataReader) and len(reader) == 3
        first = reader.get_next()
        expected = prepare_image_array(read_calibration_images(bag, frames=3)[0],
                                       load_model_config(yaml_path))
        np.testing.assert_array_equal(first['image'], expected)
        assert first['image'].shape == (1, 3, *EXPORT_SIZE)  # the model's input size
        assert reader.get_next() is not None and reader.get_next() is not None
        assert reader.get_next() is None
        reader.rewind()
        np.testing.assert_array_equal(reader.get_next()['image'], expected)

    @pytest.mark.parametrize('kwargs, message', [
        ({'topic': '/no/such/topic'}, "no image topic '/no/such/topic'"),
        ({'topic': topics.DEPTH}, 'no calibration image could be read'),  # 32FC1: not colour
        ({'frames': 0}, 'calibration frames must be >= 1'),
    ])
    def test_bad_input(self, bag, kwargs, message):
        with pytest.raises(ValueError, match=message):
            read_calibration_images(bag, **kwargs)

    def test_missing_bag(self, tmp_path):
        with pytest.raises(FileNotFoundError, match='does not exist'):
            read_calibration_images(tmp_path / 'nothing.bag')

    def test_empty_reader(self, conv, tmp_path):
        with pytest.raises(ValueError, match='no calibration samples'):
            CalibrationReader([], dense_preprocessor)

        class Empty:
            def get_next(self):
                return None

        with pytest.raises(ValueError, match='the calibration reader gave no input'):
            quantize_int8(conv[1], tmp_path / 'x.onnx', Empty())
        assert not (tmp_path / 'x.onnx').exists()


class TestInt8:
    def test_qdq_graph_with_per_channel_int8_weights(self, conv_int8):
        model = onnx.load(str(conv_int8))
        ops = {op for op, _ in find_ops(model, ['QuantizeLinear', 'DequantizeLinear'])}
        assert ops == {'QuantizeLinear', 'DequantizeLinear'}
        weights = {i.name: i for i in model.graph.initializer}
        conv_weights = [n.input[1] for n in model.graph.node if n.op_type == 'Conv']
        producers = {o: n for n in model.graph.node for o in n.output}
        dequantized = [producers[w] for w in conv_weights if w in producers]
        assert dequantized and all(d.op_type == 'DequantizeLinear' for d in dequantized)
        for node in dequantized:  # int8 weights, one scale per output channel
            assert weights[node.input[0]].data_type == onnx.TensorProto.INT8
            assert len(weights[node.input[1]].dims) == 1 and weights[node.input[1]].dims[0] > 1

    def test_metadata(self, conv, conv_int8):
        meta = read_metadata(conv_int8)
        assert file_precision(conv_int8) == 'int8' and file_precision(conv[1]) == 'float32'
        assert meta['int8_activations'] == 'uint8' and meta['int8_per_channel'] is True
        assert meta['int8_float_output_layers'] is True
        assert meta['int8_calibration'] == {'method': 'minmax', 'samples': 6}
        assert meta['preset'] == read_metadata(conv[1])['preset']
        assert (meta['min_height'], meta['max_width']) == (64, 320)

    def test_agrees_with_float32(self, conv, conv_int8):
        yaml_path, path = conv
        inputs = _inputs(yaml_path)
        _check_close(compare_outputs(path, conv_int8, inputs), INT8_REL_MAX, INT8_LABELS)
        reference, got = OnnxRuntimeBackend(path), OnnxRuntimeBackend(conv_int8)
        for name in ('depth', 'logits'):
            a, b = reference.run(inputs[0])[name], got.run(inputs[0])[name]
            assert np.abs(a - b).mean() <= INT8_REL_MEAN * np.abs(a).max(), name

    def test_keeps_dynamic_size(self, conv, conv_int8):
        yaml_path, path = conv
        inputs = _inputs(yaml_path, OTHER_SIZE)
        report = compare_outputs(path, conv_int8, inputs)
        _check_close(report, INT8_REL_MAX, INT8_LABELS)
        out = OnnxRuntimeBackend(conv_int8).run(inputs[0])
        assert out['depth'].shape == (1, 1, *OTHER_SIZE)

    def test_output_layers_stay_float(self, conv, conv_int8):
        names = output_layers(onnx.load(str(conv[1])).graph)
        model = onnx.load(str(conv_int8))
        kinds = {n.name: n.op_type for n in model.graph.node}
        assert {kinds[n] for n in names if n in kinds} >= {'Conv', 'Sigmoid', 'Mul'}
        quantized = {n.input[0] for n in model.graph.node if n.op_type == 'QuantizeLinear'}
        outputs = {o for n in model.graph.node if n.name in names for o in n.output}
        assert not outputs & quantized  # no output layer's result is rounded to 8 bits
        assert 'depth' in outputs

    def test_attention_graph_quantizes_products_only(self, conv, vit, bag, tmp_path):
        assert ops_to_quantize(onnx.load(str(conv[1])).graph) is None  # everything
        yaml_path, path = vit
        assert ops_to_quantize(onnx.load(str(path)).graph) == ATTENTION_QUANTIZED_OPS
        reader = calibration_reader_from_bag(bag, path, frames=3)
        out = quantize_int8(path, tmp_path / 'vit.int8.onnx', reader)
        _check_only_products_quantized(path, out)
        _check_close(compare_outputs(path, out, _inputs(yaml_path)), INT8_REL_MAX,
                     INT8_LABELS)
        # the position-embedding product's constant B ([1, C, H, W]) has one scale: with one
        # per channel of its axis 1, onnxruntime 1.23 (a Jetson's) refused to run the model
        model = onnx.load(str(out))
        inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
        producer = {o: n for n in model.graph.node for o in n.output}
        batched = [producer[n.input[1]] for n in model.graph.node if n.op_type == 'MatMul'
                   and n.input[1] in producer and producer[n.input[1]].input[0] in inits
                   and inits[producer[n.input[1]].input[0]].ndim > 2]
        assert batched and all(inits[dq.input[1]].ndim == 0 for dq in batched)
        assert batched_matmul_constants(onnx.load(str(path)).graph)

    def test_symmetric_activations(self, conv, bag, tmp_path):
        _, path = conv
        reader = calibration_reader_from_bag(bag, path, frames=3)
        out = quantize_int8(path, tmp_path / 's8.onnx', reader, activation_type='int8')
        model = onnx.load(str(out))
        weights = {i.name: i for i in model.graph.initializer}
        zero_points = [weights[n.input[2]] for n in model.graph.node
                       if n.op_type == 'QuantizeLinear' and len(n.input) > 2]
        assert zero_points
        assert all(z.data_type == onnx.TensorProto.INT8 for z in zero_points)
        assert all(not onnx.numpy_helper.to_array(z).any() for z in zero_points)
        assert read_metadata(out)['int8_activations'] == 'int8'

    def test_runs_in_the_dense_pipeline(self, conv, conv_int8):
        yaml_path, _ = conv
        pipeline = DensePipeline({'dense.model': yaml_path, 'dense.backend': 'onnxruntime',
                                  'dense.onnx_path': str(conv_int8)})
        _, frames = iter_sequence(1, seed=7, width=128, height=96)
        result = pipeline.run(next(iter(frames)).rgb, colors=False)
        assert result.depth.shape == (96, 128) and np.isfinite(result.depth).any()
        assert result.labels.shape == (96, 128)

    @pytest.mark.parametrize('kwargs, message', [
        ({'activation_type': 'int4'}, 'activation_type must be one of'),
        ({'method': 'magic'}, 'calibration method must be one of'),
    ])
    def test_bad_arguments(self, conv, tmp_path, kwargs, message):
        with pytest.raises(ValueError, match=message):
            quantize_int8(conv[1], tmp_path / 'x.onnx', iter([]), **kwargs)
        assert not (tmp_path / 'x.onnx').exists()

    def test_refuses_reduced_input(self, conv_int8, tmp_path):
        with pytest.raises(ValueError, match='already int8'):
            quantize_int8(conv_int8, tmp_path / 'x.onnx', iter([]))
        with pytest.raises(ValueError, match='already int8'):
            convert_float16(conv_int8, tmp_path / 'y.onnx')


class TestFloat16:
    @pytest.mark.parametrize('model', ['conv', 'vit'])
    def test_agrees_with_float32(self, request, model, tmp_path):
        yaml_path, path = request.getfixturevalue(model)
        out = convert_float16(path, tmp_path / f'{model}.fp16.onnx',
                              check_inputs=_inputs(yaml_path, count=1))
        assert file_precision(out) == 'float16'
        counts = float16_ops(out)
        assert counts.get('Conv', 0) > 0, counts  # the convolutions compute in float16
        if model == 'vit':
            assert counts.get('MatMul', 0) > 0, counts
            # the size arithmetic of the position embeddings casts to float32: the converter
            # alone leaves a graph onnxruntime cannot load (see float16.py)
            assert float32_cast_nodes(onnx.load(str(path)))
        backend = OnnxRuntimeBackend(out)
        for graph_io in list(backend.session.get_inputs()) + list(backend.session.get_outputs()):
            assert graph_io.type != 'tensor(float16)', graph_io.name  # float32 in and out
        for size in (None, OTHER_SIZE):
            report = compare_outputs(path, out, _inputs(yaml_path, size))
            _check_close(report, FP16_REL, FP16_LABELS)


def _export_args(conv, tmp_path, *extra):
    yaml_path, _ = conv
    weights = yaml_path.replace('.yaml', '.safetensors')
    return ['export', '--config', yaml_path, '--weights', weights, '--height',
            str(EXPORT_SIZE[0]), '--width', str(EXPORT_SIZE[1]), '-o',
            str(tmp_path / 'out.onnx'), *extra]


class TestExportVerb:
    def test_int8_from_bag(self, conv, bag, tmp_path, caplog):
        caplog.set_level(logging.INFO)
        rc = main(_export_args(conv, tmp_path, '--int8', '--calibration-bag', str(bag),
                               '--calibration-frames', '4'))
        assert rc == 0
        meta = read_metadata(tmp_path / 'out.onnx')
        assert meta['precision'] == 'int8' and meta['int8_calibration']['samples'] == 4
        assert 'max |float32 - int8|' in caplog.text

    def test_int8_quantize_outputs(self, conv, bag, tmp_path):
        rc = main(_export_args(conv, tmp_path, '--int8', '--calibration-bag', str(bag),
                               '--calibration-frames', '2', '--int8-quantize-outputs'))
        assert rc == 0
        assert read_metadata(tmp_path / 'out.onnx')['int8_float_output_layers'] is False
        model = onnx.load(str(tmp_path / 'out.onnx'))
        producers = {o: n.op_type for n in model.graph.node for o in n.output}
        assert producers['depth'] == 'DequantizeLinear'  # the depth itself is 8-bit

    def test_fp16(self, conv, tmp_path):
        assert main(_export_args(conv, tmp_path, '--fp16')) == 0
        assert file_precision(tmp_path / 'out.onnx') == 'float16'

    @pytest.mark.parametrize('extra, message', [
        (['--int8'], '--int8 needs --calibration-bag'),
        (['--int8', '--fp16', '--calibration-bag', 'B'], 'choose one of --int8 and --fp16'),
        (['--int8', '--format', 'tensorrt', '--calibration-bag', 'B'],
         '--format tensorrt is not supported'),
        (['--fp16', '--format', 'tensorrt'], '--format tensorrt is not supported'),
        (['--calibration-bag', 'B'], 'only apply with --int8'),
        (['--fp16', '--int8-quantize-outputs'], 'only apply with --int8'),
        (['--int8', '--calibration-bag', 'B', '--calibration-frames', '0'],
         '--calibration-frames must be >= 1'),
        (['--int8', '--calibration-bag', 'NOBAG'], 'does not exist'),
        (['--int8', '--calibration-bag', 'BAG', '--calibration-topic', '/nothing'],
         "no image topic '/nothing'"),
        (['--int8', '--calibration-bag', 'BAG', '--calibration-topic', topics.DEPTH],
         'no calibration image could be read'),
    ])
    def test_bad_input_exit_1(self, conv, bag, tmp_path, caplog, extra, message):
        extra = [str(bag) if e == 'BAG' else str(tmp_path / 'none.bag') if e == 'NOBAG'
                 else e for e in extra]
        assert main(_export_args(conv, tmp_path, *extra)) == 1
        assert message in caplog.text
        assert not (tmp_path / 'out.onnx').exists()

    def test_two_stage_refused(self, tmp_path, caplog):
        rc = main(['export', '--config', 'loftr_lite', '--random-weights', '--two-stage',
                   '--fp16', '-o', str(tmp_path / 'l.onnx')])
        assert rc == 1 and 'single-graph exports' in caplog.text


class TestLoFTR:
    def test_int8_keeps_coordinates_float(self, bag, tmp_path):
        spec = build_export_model('loftr_lite', random_weights=True)
        path = export_spec(spec, tmp_path / 'lite.onnx', size=EXPORT_SIZE, max_size=(256, 320))
        reader = calibration_reader_from_bag(bag, path, frames=2)
        pair = reader.get_next()
        assert set(pair) == {'image0', 'image1'}
        assert pair['image0'].shape == (1, 1, 240, 320)  # the preset's input size, grey
        assert 0.0 <= pair['image0'].min() and pair['image0'].max() <= 1.0
        out = quantize_int8(path, tmp_path / 'lite.int8.onnx', reader)
        _check_only_products_quantized(path, out)
        report = compare_outputs(path, out, list(reader.inputs(1)))
        assert report['keypoints0']['max_abs'] == 0.0  # cell centres, not quantised
        assert report['mask']['differing'] <= 0.2
