# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Export of the package's models to ONNX: parity with torch at other sizes, and the verb.

Models are exported at 64x96 and run at 96x128 and 128x160 (sizes the tracer never saw), so a
size baked into the graph as a constant fails here. The conv and ViT dense models and LoFTR
must export with dynamic height and width (the ViT resamples its position embeddings with
traced resize matrices). A graph that does not follow the input size would be exported
fixed-size by ``export_spec``; such a graph must refuse other sizes with a clear error, and is
then exported again at each run size. Weights are the seeded
random initialisation (``--random-weights``): parity does not depend on training.

LoFTR parity: ``keypoints0`` exact, ``mask`` equal up to a few cells (the mutual-nearest-
neighbour test compares float scores; a tie broken differently by a 1e-7 difference flips a
cell, which is allowed for at most 1 % of the cells), and ``keypoints1`` / ``confidence``
within 1e-3 px / 1e-4 on the cells that both mark as matches.
"""

import importlib.util
import logging
import os
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from relperception.cli.main import main
from relperception.data.synthetic import iter_sequence
from relperception.matching.loftr.matcher import LoFTRMatcher
from relperception.pipeline.export import build_export_model, export_model
from relperception.runtime.model_export import export_spec
from relperception.runtime.onnx_export import find_ops, read_metadata
from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend
from relperception.runtime.torch_backend import TorchBackend
from test_loftr_model import textured

HAS_TENSORRT = importlib.util.find_spec('tensorrt') is not None
EXPORT_SIZE = (64, 96)
RUN_SIZES = [(96, 128), (128, 160)]


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


def _export(tmp_path_factory, config):
    spec = build_export_model(config, random_weights=True)
    path = export_spec(spec, tmp_path_factory.mktemp(config) / f'{config}.onnx',
                       size=EXPORT_SIZE, max_size=(256, 320))
    backends = (TorchBackend(spec['module'], spec['input_names'], spec['output_names']),
                OnnxRuntimeBackend(path, num_threads=1))
    return spec, path, backends


@pytest.fixture(scope='module', params=['conv_small', 'vit_small'])
def dense(request, tmp_path_factory):
    return _export(tmp_path_factory, request.param)


@pytest.fixture(scope='module')
def loftr(tmp_path_factory):
    return _export(tmp_path_factory, 'loftr_lite')


def _rgb_pair(height, width):
    _, frames = iter_sequence(num_frames=3, seed=1, width=160, height=128)
    frames = list(frames)
    return [cv2.resize(f.rgb, (width, height), interpolation=cv2.INTER_AREA)
            for f in (frames[0], frames[2])]


def _dense_input(height, width):
    rgb = _rgb_pair(height, width)[0].astype(np.float32) / 255.0
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    image = ((rgb - mean) / std).astype(np.float32).transpose(2, 0, 1)[None]
    return {'image': np.ascontiguousarray(image)}


def _loftr_input(height, width):
    grey = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY).astype(np.float32)[None, None] / 255.0
            for f in _rgb_pair(height, width)]
    return {'image0': grey[0], 'image1': grey[1]}


class TestDenseExport:
    @pytest.mark.parametrize('size', RUN_SIZES)
    def test_parity_other_sizes(self, dense, size, tmp_path):
        spec, path, (torch_backend, onnx_backend) = dense
        if read_metadata(path)['max_height'] == EXPORT_SIZE[0]:
            # a fixed-size graph must refuse other sizes clearly; export again at this size
            with pytest.raises(ValueError, match='outside the exported bounds'):
                onnx_backend.run(_dense_input(*size))
            path = export_spec(spec, tmp_path / 'at_size.onnx', size=size)
            onnx_backend = OnnxRuntimeBackend(path, num_threads=1)
        inputs = _dense_input(*size)
        expected, got = torch_backend.run(inputs), onnx_backend.run(inputs)
        assert set(got) == {'depth', 'logits', 'labels'}
        assert got['depth'].shape == (1, 1, *size)
        assert got['logits'].shape == (1, 11, *size) and got['labels'].shape == (1, *size)
        assert got['labels'].dtype == np.uint8
        np.testing.assert_allclose(got['depth'], expected['depth'], rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(got['logits'], expected['logits'], rtol=1e-4, atol=1e-3)
        assert np.mean(got['labels'] != expected['labels']) <= 1e-3

    def test_graph_is_size_dynamic(self, dense):
        spec, path, _ = dense
        meta = read_metadata(path)
        assert (meta['min_height'], meta['max_height'], meta['max_width']) == (64, 256, 320)
        for output in onnx.load(str(path)).graph.output:  # symbolic H, W in every output
            dims = output.type.tensor_type.shape.dim
            assert all(d.dim_param and not d.dim_value for d in dims[-2:]), output.name

    def test_graph_and_metadata(self, dense):
        spec, path, _ = dense
        model = onnx.load(str(path))
        assert not find_ops(model, ['NonZero'])
        meta = read_metadata(path)
        assert meta['preset'] == spec['metadata']['preset']
        assert meta['size_multiple'] == 16 and meta['export_size'] == list(EXPORT_SIZE)
        assert meta['input']['mean'] == [0.485, 0.456, 0.406]
        assert meta['class_names'][0] == 'Sky' and meta['depth_mode'] == 'metric'

    def test_rejects_size_outside_bounds(self, dense):
        backend = dense[2][1]
        with pytest.raises(ValueError, match='outside the exported bounds'):
            backend.run({'image': np.zeros((1, 3, 272, 320), np.float32)})
        with pytest.raises(ValueError, match='multiple of 16|outside the exported bounds'):
            backend.run({'image': np.zeros((1, 3, 72, 96), np.float32)})


class TestLoFTRExport:
    @pytest.mark.parametrize('size', RUN_SIZES)
    def test_parity_other_sizes(self, loftr, size):
        _, _, (torch_backend, onnx_backend) = loftr
        inputs = _loftr_input(*size)
        expected, got = torch_backend.run(inputs), onnx_backend.run(inputs)
        cells = size[0] // 8 * size[1] // 8
        assert got['keypoints0'].shape == (1, cells, 2) and got['mask'].dtype == np.bool_
        np.testing.assert_allclose(got['keypoints0'], expected['keypoints0'], atol=1e-4)
        flips = int(np.count_nonzero(got['mask'] != expected['mask']))
        assert flips <= max(2, cells // 100), f'{flips} mask flips'
        both = got['mask'][0] & expected['mask'][0]
        assert both.sum() > cells // 10
        err = np.abs(got['keypoints1'][0][both] - expected['keypoints1'][0][both]).max()
        assert err < 1e-3, f'keypoints1 differ by {err} px'
        np.testing.assert_allclose(got['confidence'][0][both], expected['confidence'][0][both],
                                   atol=1e-4)

    def test_graph_has_no_nonzero(self, loftr):
        assert not find_ops(onnx.load(str(loftr[1])), ['NonZero', 'Loop', 'If'])

    @pytest.mark.parametrize('inputs, message', [
        ({'image0': np.zeros((1, 1, 96, 128), np.float32)}, r"missing \['image1'\]"),
        ({'image': np.zeros((1, 1, 96, 128), np.float32),
          'image1': np.zeros((1, 1, 96, 128), np.float32)}, r"unexpected \['image'\]"),
        ({'image0': np.zeros((1, 3, 96, 128), np.float32),
          'image1': np.zeros((1, 1, 96, 128), np.float32)}, 'dimension 1 must be 1'),
        ({'image0': np.zeros((1, 1, 100, 128), np.float32),
          'image1': np.zeros((1, 1, 100, 128), np.float32)}, 'multiple of 8'),
        ({'image0': np.zeros((1, 1, 96, 128), np.uint8),
          'image1': np.zeros((1, 1, 96, 128), np.uint8)}, 'must be float32, got uint8'),
    ])
    def test_clear_input_errors(self, loftr, inputs, message):
        with pytest.raises(ValueError, match=message):
            loftr[2][1].run(inputs)


def _shipped(name):
    from relperception.models.weights import shipped_weights
    try:
        shipped_weights(name)
    except (FileNotFoundError, ValueError):
        return False
    return True


class TestExportVerb:
    def test_loftr_onnx_end_to_end(self, tmp_path):
        path = tmp_path / 'lite.onnx'
        rc = main(['export', '--config', 'loftr_lite', '--random-weights', '--output', str(path),
                   '--height', '64', '--width', '96', '--min-size', '64', '--max-size',
                   '256x320'])
        assert rc == 0
        meta = read_metadata(path)
        assert meta['preset'] == 'loftr_lite' and meta['kind'] == 'loftr'
        assert (meta['min_height'], meta['max_width'], meta['size_multiple']) == (64, 320, 8)
        out = OnnxRuntimeBackend(path).run(_loftr_input(96, 128))
        assert out['keypoints1'].shape == (1, 192, 2)

    def test_dense_onnx_with_check(self, tmp_path, caplog):
        caplog.set_level(logging.INFO)
        path = tmp_path / 'conv.onnx'
        rc = main(['export', '--config', 'conv_small', '--random-weights', '-o', str(path),
                   '--height', '64', '--width', '96', '--check'])
        assert rc == 0 and path.is_file()
        assert 'max |torch - onnxruntime|' in caplog.text

    @pytest.mark.parametrize('extra, message', [
        (['--config', 'conv_small', '--random-weights', '--height', '72', '--width', '96'],
         'multiples of 16'),
        (['--config', 'no_such_model', '--random-weights'], 'unknown model preset'),
        (['--config', 'conv_small', '--random-weights', '--height', '64'],
         'both --height and --width'),
    ])
    def test_errors_exit_1(self, tmp_path, caplog, extra, message):
        path = tmp_path / 'x.onnx'
        assert main(['export', '-o', str(path), *extra]) == 1
        assert message in caplog.text
        assert not path.exists()

    @pytest.mark.parametrize('name, fmt', [('fs.engine', 'onnx'), ('fs.txt', 'onnx'),
                                           ('fs', 'onnx'), ('fs.onnx', 'tensorrt')])
    def test_output_suffix_must_fit_the_format(self, tmp_path, caplog, name, fmt):
        path = tmp_path / name
        assert main(['export', '--config', 'conv_small', '--random-weights', '--format', fmt,
                     '-o', str(path)]) == 1
        assert f'--format {fmt} writes' in caplog.text
        assert not path.exists()

    def test_an_output_folder_or_a_parameter_file_is_refused_up_front(self, tmp_path, caplog):
        folder = tmp_path / 'models.onnx'
        folder.mkdir()
        assert main(['export', '--config', 'conv_small', '--random-weights', '-o',
                     str(folder)]) == 1
        assert 'is a folder; name the file to write' in caplog.text
        params = tmp_path / 'robot.YAML'
        params.write_text('dense: {model: fast_seg, backend: onnxruntime}\n')
        caplog.clear()
        assert main(['export', '--config', str(params), '--random-weights', '-o',
                     str(tmp_path / 'x.onnx')]) == 1
        assert 'is a parameter file (dense: ...), not a model file: give its dense.model ' \
               '(fast_seg)' in caplog.text

    def test_an_output_under_a_file_or_in_an_unwritable_folder_is_refused_up_front(
            self, tmp_path, caplog):
        (tmp_path / 'notes').write_text('a file, not a folder')
        assert main(['export', '--config', 'conv_small', '--random-weights', '-o',
                     str(tmp_path / 'notes' / 'out' / 'x.onnx')]) == 1
        assert f"{tmp_path / 'notes'} is a file, not a folder; give a path in a folder (e.g. " \
               '-o x.onnx)' in caplog.text
        locked = tmp_path / 'locked'
        locked.mkdir(mode=0o555)
        # root writes into a mode-555 folder; nobody writes into /proc
        unwritable = locked if os.access(locked, os.W_OK) is False else Path('/proc')
        if not unwritable.is_dir():
            pytest.skip('no unwritable folder to try')
        caplog.clear()
        assert main(['export', '--config', 'conv_small', '--random-weights', '-o',
                     str(unwritable / 'x.onnx')]) == 1
        assert f'cannot write into the folder {unwritable}' in caplog.text
        assert 'give a path in a folder you can write to' in caplog.text
        assert 'partial' not in caplog.text

    def test_missing_weights_exit_1(self, tmp_path, caplog):
        # the paper-size preset ships no weights (users bring official / kornia files)
        if _shipped('loftr'):
            pytest.skip('loftr weights are shipped')
        assert main(['export', '--config', 'loftr', '-o', str(tmp_path / 'x.onnx')]) == 1
        assert '--random-weights' in caplog.text
        assert not (tmp_path / 'x.onnx').exists()

    @pytest.mark.skipif(HAS_TENSORRT, reason='tensorrt is installed')
    def test_tensorrt_missing_exit_1(self, tmp_path, caplog):
        rc = main(['export', '--config', 'loftr_lite', '--random-weights', '--format',
                   'tensorrt', '-o', str(tmp_path / 'lite.engine')])
        assert rc == 1
        assert 'tensorrt is not installed' in caplog.text


class TestLoFTRDefaultSize:
    def test_lite_exports_and_runs_at_its_input_size(self, tmp_path):
        """loftr_lite's default input, 240x320, is not a multiple of 32: export and run it."""
        path = export_model('loftr_lite', tmp_path / 'lite.onnx', random_weights=True)
        assert tuple(read_metadata(path)['export_size']) == (240, 320)
        matcher = LoFTRMatcher({'preset': 'loftr_lite', 'backend': 'onnxruntime',
                                'onnx_path': str(path), 'threshold': 0.0})
        assert matcher.input_size == (240, 320)
        image = (textured(480, 640) * 255).astype(np.uint8)
        assert len(matcher.match(image, np.roll(image, 8, axis=1))) > 0
        one_thread = LoFTRMatcher({'preset': 'loftr_lite', 'backend': 'onnxruntime',
                                   'onnx_path': str(path), 'onnxruntime_threads': 1})
        assert one_thread.backend.session.get_session_options().intra_op_num_threads == 1
        for bad in (-1, 257, 1.5, 'two'):
            with pytest.raises(ValueError, match='loftr.onnxruntime_threads'):
                LoFTRMatcher({'preset': 'loftr_lite', 'backend': 'onnxruntime',
                              'onnx_path': str(path), 'onnxruntime_threads': bad})
