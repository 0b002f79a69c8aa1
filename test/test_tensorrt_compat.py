# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""TensorRT compatibility of every exported graph, checked without TensorRT or a GPU.

Every preset ``relperception export`` knows (the dense presets and the LoFTR presets) is
exported through the CLI with ``--random-weights`` at a small size and ``--check-tensorrt``,
which must pass for TensorRT 10 (and the file for 8.6 too); so are a two-stage LoFTR export and
FP16 / INT8 exports. Hand-built graphs then break one rule each (an unsupported operator, a
custom domain, NonZero, a shape computed from data, a profile that does not cover an input, an
opset too new, an asymmetric zero point, a cubic Resize): each must be reported with the node,
operator or input named.
"""

import json

import onnx
from onnx import helper, TensorProto
import pytest
from relperception.cli.main import main
from relperception.matching.loftr.presets import available_presets as loftr_presets
from relperception.models.presets import PRESETS as DENSE_PRESETS
from relperception.runtime.engine_cache import profile_from_onnx
from relperception.runtime.tensorrt_compat import check_tensorrt_compat, stored_profile
from relperception.runtime.tensorrt_onnx_ops import support_for

pytest.importorskip('onnxruntime')
pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py

LOFTR_SIZE = ('64', '96')
BOUNDS = {'min_height': 64, 'min_width': 64, 'export_size': [64, 96], 'max_height': 128,
          'max_width': 192, 'size_multiple': 16}


def _export(tmp_path, config, *extra, name=None):
    """Export ``config`` with the CLI at a small size; return (exit code, path)."""
    path = tmp_path / f'{name or config}.onnx'
    if config in loftr_presets():
        sizes = ['--height', LOFTR_SIZE[0], '--width', LOFTR_SIZE[1], '--max-size', '128x192']
    else:
        m = int(DENSE_PRESETS[config]['input']['multiple'])
        sizes = ['--height', str(4 * m), '--width', str(5 * m), '--min-size', f'{2 * m}',
                 '--max-size', f'{6 * m}x{8 * m}']
    rc = main(['export', '--config', config, '--random-weights', '-o', str(path), *sizes,
               *extra])
    return rc, path


#: Presets whose export takes several times the others' (ViT-B: 86 M parameters).
SLOW_PRESETS = ('vit_b14', 'vit_b16')


@pytest.mark.parametrize('config', [
    pytest.param(c, marks=pytest.mark.slow) if c in SLOW_PRESETS else c
    for c in sorted(DENSE_PRESETS) + loftr_presets()])
def test_every_preset_exports_tensorrt_compatible(config, tmp_path, capsys):
    rc, path = _export(tmp_path, config, '--check-tensorrt')
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert f'{path}: TensorRT 10.0: compatible' in printed
    report = check_tensorrt_compat(path, '8.6')
    assert report.ok, report.lines()
    assert report.ops['Conv'] > 0 and not report.notes


def test_two_stage_loftr(tmp_path, capsys):
    rc, path = _export(tmp_path, 'loftr_lite', '--two-stage', '--check-tensorrt', '10.1')
    printed = capsys.readouterr().out
    assert rc == 0, printed
    fine = path.with_name('loftr_lite.fine.onnx')
    assert f'{path}: TensorRT 10.1: compatible' in printed
    assert f'{fine}: TensorRT 10.1: compatible' in printed
    assert 'optimisation profile not checked' in printed
    # the fine graph is onnxruntime's: its match count has no stored profile
    report = check_tensorrt_compat(fine)
    assert any("input 'keypoints0'" in p and 'no size bounds' in p for p in report.problems)


def test_float16_export(tmp_path, capsys):
    rc, _ = _export(tmp_path, 'conv_small', '--fp16', '--check-tensorrt')
    assert rc == 0, capsys.readouterr().out


@pytest.fixture(scope='module')
def calibration_bag(tmp_path_factory):
    from relperception.data.synthetic_bag import write_synthetic_bag

    path = tmp_path_factory.mktemp('bag') / 'calibration.bag'
    write_synthetic_bag(path, frames=4, seed=3, width=128, height=96)
    return path


def _int8(tmp_path, bag, activations, *extra):
    # calibration runs at the preset's 240x320: this --max-size overrides _export's
    return _export(tmp_path, 'conv_small', '--int8', '--calibration-bag', str(bag),
                   '--calibration-frames', '2', '--int8-activations', activations,
                   '--max-size', '256x320', *extra, name=f'int8_{activations}')


def test_symmetric_int8_export(tmp_path, calibration_bag, capsys):
    rc, _ = _int8(tmp_path, calibration_bag, 'int8', '--check-tensorrt')
    assert rc == 0, capsys.readouterr().out


def test_asymmetric_int8_export_is_refused(tmp_path, calibration_bag, capsys):
    rc, path = _int8(tmp_path, calibration_bag, 'uint8')
    assert rc == 0
    problems = check_tensorrt_compat(path).problems
    assert any(p.startswith('QuantizeLinear zero point of type UINT8') and
               "QuantizeLinear 'image_QuantizeLinear'" in p for p in problems), problems


def test_stored_profile_is_the_engine_caches(tmp_path):
    rc, path = _export(tmp_path, 'conv_small')
    assert rc == 0
    profile, missing = stored_profile(onnx.load(str(path), load_external_data=False))
    assert profile == profile_from_onnx(path) and not missing
    assert profile['image'] == ((1, 3, 32, 32), (1, 3, 64, 80), (1, 3, 96, 128))


def _image(name='image', dims=(1, 3, 'height', 'width')):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))


def _model(nodes, inputs=None, outputs=None, initializers=(), opset=17, metadata=BOUNDS):
    """Return a model of ``nodes`` (input ``image``, output ``out`` by default)."""
    inputs = inputs or [_image()]
    outputs = outputs or [helper.make_tensor_value_info('out', TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, 'g', inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', opset)])
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, json.dumps(value)
    return model


def _problems(model, version='10', **kwargs):
    return check_tensorrt_compat(model, version, **kwargs).problems


def test_hand_built_graph_passes():
    report = check_tensorrt_compat(_model([helper.make_node('Relu', ['image'], ['out'])]))
    assert report.ok and report.ops == {'Relu': 1}, report.lines()


@pytest.mark.parametrize('op, domain, version, expected', [
    ('FancyOp', '', '10', "operator FancyOp is not supported by TensorRT 10.0: FancyOp 'n'"),
    ('Det', '', '10', "operator Det is not supported by TensorRT 10.0: Det 'n'"),
    ('Gelu', '', '8.6', "operator Gelu is not supported by TensorRT 8.6: Gelu 'n'"),
    ('Relu', 'com.example', '10', "operators of domain 'com.example' are not standard ONNX "
                                  "(TensorRT would need a plugin of that name): Relu 'n'"),
])
def test_unsupported_operator(op, domain, version, expected):
    model = _model([helper.make_node(op, ['image'], ['out'], name='n', domain=domain)])
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    assert _problems(model, version) == [expected]


def test_nonzero_is_data_dependent():
    nodes = [helper.make_node('NonZero', ['image'], ['out'], name='nz')]
    out = helper.make_tensor_value_info('out', TensorProto.INT64, [4, 'n'])
    problems = _problems(_model(nodes, outputs=[out]))
    assert problems == ['NonZero: the output shape depends on the data (TensorRT cannot plan its '
                        "outputs before running): NonZero 'nz'"]


def _reshape_model(shape_from_data: bool):
    shape = helper.make_tensor('minus_one', TensorProto.INT64, [1], [-1])
    if shape_from_data:  # the first dimension is the image's largest value
        nodes = [helper.make_node('ReduceMax', ['image'], ['peak'], keepdims=0, axes=[0, 1, 2, 3]),
                 helper.make_node('Cast', ['peak'], ['peak_int'], to=TensorProto.INT64),
                 helper.make_node('Unsqueeze', ['peak_int', 'zero'], ['first']),
                 helper.make_node('Concat', ['first', 'minus_one'], ['shape'], axis=0)]
        extra = [helper.make_tensor('zero', TensorProto.INT64, [1], [0])]
    else:  # the first dimension is the image's channel count
        nodes = [helper.make_node('Shape', ['image'], ['dims']),
                 helper.make_node('Gather', ['dims', 'one'], ['first']),
                 helper.make_node('Concat', ['first', 'minus_one'], ['shape'], axis=0)]
        extra = [helper.make_tensor('one', TensorProto.INT64, [1], [1])]
    nodes.append(helper.make_node('Reshape', ['image', 'shape'], ['out'], name='flatten'))
    return _model(nodes, initializers=[shape, *extra])


def test_shape_computed_from_data():
    problems = _problems(_reshape_model(shape_from_data=True))
    assert len(problems) == 1 and "Reshape 'flatten' input 1 'shape'" in problems[0], problems
    assert 'depends on tensor values' in problems[0]
    assert _problems(_reshape_model(shape_from_data=False)) == []


@pytest.mark.parametrize('change, profile, expected', [
    ({'export_size': [48, 96]}, None,
     "input 'image' axis 2 (height): profile min/opt/max (64, 48, 128) must satisfy"),
    ({'max_height': 120}, None,
     "input 'image' axis 2 (height): profile min/opt/max (64, 64, 120) must be multiples of "
     'the size multiple 16'),
    ({'min_height': None}, None, "input 'image' has dynamic dimensions [1, 3, 'height', "
                                 "'width'] but the file stores no size bounds"),
    ({}, {'image': ((1, 4, 64, 64), (1, 4, 64, 96), (1, 4, 128, 192))},
     "input 'image' axis 1 is fixed at 3 but the profile gives min/opt/max (4, 4, 4)"),
    ({}, {'image': ((1, 3, 64, 64),) * 3, 'other': ((1,),) * 3},
     "the profile names 'other', which is not a graph input"),
    ({}, {'image': ((1, 3, 64), (1, 3, 64), (1, 3, 64))},
     "input 'image' has rank 4, its profile rank 3"),
])
def test_profile_problems(change, profile, expected):
    metadata = {k: v for k, v in {**BOUNDS, **change}.items() if v is not None}
    model = _model([helper.make_node('Relu', ['image'], ['out'])], metadata=metadata)
    problems = _problems(model, profile=profile)
    assert any(p.startswith(expected) for p in problems), problems


def test_shared_dimension_needs_one_range():
    nodes = [helper.make_node('Add', ['image', 'image1'], ['out'])]
    model = _model(nodes, inputs=[_image(), _image('image1')])
    assert _problems(model) == []
    low, high = (1, 3, 64, 64), (1, 3, 128, 192)
    profile = {'image': (low, (1, 3, 64, 96), high), 'image1': (low, (1, 3, 96, 96), high)}
    assert _problems(model, profile=profile) == [
        "input 'image1' axis 2 (height) shares dimension 'height' with input 'image' but gets "
        'profile (64, 96, 128), not (64, 64, 128)']


@pytest.mark.parametrize('version, opset', [('10', 21), ('8.6', 18), ('10', 8)])
def test_opset_outside_the_range(version, opset):
    model = _model([helper.make_node('Relu', ['image'], ['out'])], opset=opset)
    low, high = support_for(version).opsets
    assert _problems(model, version) == [f'opset {opset} is outside the opsets {low}-{high} '
                                         f'TensorRT {support_for(version).version} parses']


def test_asymmetric_zero_point():
    scale = helper.make_tensor('scale', TensorProto.FLOAT, [], [0.1])
    zero = helper.make_tensor('zero', TensorProto.INT8, [], [3])
    nodes = [helper.make_node('QuantizeLinear', ['image', 'scale', 'zero'], ['q'], name='q'),
             helper.make_node('DequantizeLinear', ['q', 'scale', 'zero'], ['out'], name='dq')]
    problems = _problems(_model(nodes, initializers=[scale, zero]))
    assert problems == ['QuantizeLinear zero point not all zero: TensorRT quantises '
                        "symmetrically only: QuantizeLinear 'q' input 'zero'",
                        'DequantizeLinear zero point not all zero: TensorRT quantises '
                        "symmetrically only: DequantizeLinear 'dq' input 'zero'"]


def test_cubic_resize():
    scales = helper.make_tensor('scales', TensorProto.FLOAT, [4], [1, 1, 2, 2])
    node = helper.make_node('Resize', ['image', '', 'scales'], ['out'], name='up', mode='cubic')
    problems = _problems(_model([node], initializers=[scales]))
    assert problems == ["Resize mode 'cubic': TensorRT takes nearest, linear: Resize 'up'"]


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match='no such ONNX file'):
        check_tensorrt_compat(tmp_path / 'missing.onnx')
    (tmp_path / 'text.onnx').write_bytes(b'not an onnx model at all')
    with pytest.raises(ValueError, match='not an ONNX model'):
        check_tensorrt_compat(tmp_path / 'text.onnx')
    (tmp_path / 'empty.onnx').write_bytes(b'')
    with pytest.raises(ValueError, match='not an ONNX model'):
        check_tensorrt_compat(tmp_path / 'empty.onnx')
    with pytest.raises(ValueError, match='expected an .onnx path'):
        check_tensorrt_compat(42)
    model = _model([helper.make_node('Relu', ['image'], ['out'])])
    for version in ('9.0', '11', 'latest', '8.5'):
        with pytest.raises(ValueError, match='TensorRT'):
            check_tensorrt_compat(model, version)
    with pytest.raises(ValueError, match='profile of'):
        check_tensorrt_compat(model, profile={'image': ((1, 3), (1, 3))})


def test_cli_refuses_before_exporting(tmp_path):
    path = tmp_path / 'never.onnx'
    base = ['export', '--config', 'conv_small', '--random-weights', '-o', str(path)]
    assert main([*base, '--check-tensorrt', '7.0']) == 1
    assert main([*base, '--format', 'tensorrt', '--check-tensorrt']) == 1
    assert not path.exists()


def test_the_engine_build_checks_first(tmp_path):
    """``build_engine`` names what the check finds before TensorRT parses (GPU-free part)."""
    from relperception.runtime.tensorrt_export import compatibility_problems

    good, bad = tmp_path / 'good.onnx', tmp_path / 'bad.onnx'
    onnx.save(_model([helper.make_node('Relu', ['image'], ['out'])]), str(good))
    onnx.save(_model([helper.make_node('FancyOp', ['image'], ['out'], name='n')]), str(bad))
    assert compatibility_problems(good, '10.3.0.26') == []
    assert compatibility_problems(bad, '10.3.0.26') == [
        "operator FancyOp is not supported by TensorRT 10.1: FancyOp 'n'"]
    assert compatibility_problems(bad, '9.2.0') == []   # no lists stored: not checked
