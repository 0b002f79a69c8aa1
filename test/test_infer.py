# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception infer`` end to end on a couple of PNGs with tiny random models."""

import cv2
import numpy as np
import pytest

torch = pytest.importorskip('torch')
pytest.importorskip('relperception.models.preprocess')

from relperception.cli.infer import collect_images, output_stems  # noqa: E402
from relperception.cli.main import main  # noqa: E402
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.pipeline.dense_pipeline import DensePipeline  # noqa: E402
from test_dense_pipeline import tiny_config, write_tiny_model  # noqa: E402

WIDTH, HEIGHT = 72, 56


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


@pytest.fixture(scope='module')
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp('infer_images')
    _, sequence = iter_sequence(2, seed=4, width=WIDTH, height=HEIGHT)
    paths = []
    for index, frame in enumerate(sequence):
        path = folder / f'frame_{index}.png'
        cv2.imwrite(str(path), cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2BGR))
        paths.append(path)
    return paths


@pytest.fixture(scope='module')
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp('infer_models')
    return {'metric': write_tiny_model(folder, 'conv'),
            'relative': write_tiny_model(folder, 'conv', relative=True, segmentation=False)}


def rgb_of(path):
    return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)


class TestInfer:

    def test_metric_model_outputs(self, images, models, tmp_path):
        yaml_path, weights = models['metric']
        out = tmp_path / 'out'
        code = main(['infer', '--config', yaml_path, '--weights', weights,
                     str(images[0].parent), '--output', str(out)])
        assert code == 0
        pipeline = DensePipeline(tiny_config(yaml_path, weights))
        for path in images:
            stem = path.stem
            depth = np.load(out / f'{stem}_depth.npy')
            assert depth.dtype == np.float32 and depth.shape == (HEIGHT, WIDTH)
            expected = pipeline.run(rgb_of(path))
            np.testing.assert_allclose(depth, expected.raw_depth, rtol=1e-5, atol=1e-6)
            colour = cv2.imread(str(out / f'{stem}_depth.png'))
            assert colour.shape == (HEIGHT, WIDTH, 3)
            labels = cv2.imread(str(out / f'{stem}_labels.png'), cv2.IMREAD_UNCHANGED)
            assert labels.shape == (HEIGHT, WIDTH) and labels.dtype == np.uint8
            np.testing.assert_array_equal(labels, expected.labels)
            overlay = cv2.imread(str(out / f'{stem}_labels_color.png'))
            np.testing.assert_array_equal(cv2.cvtColor(overlay, cv2.COLOR_BGR2RGB),
                                          expected.labels_color)

    def test_a_16_bit_file_gets_the_model_input_of_the_nodes(self, images, models, tmp_path,
                                                             caplog):
        # a 12-bit camera's picture (values 0..4080) as a 16-bit PNG: before, infer scaled it
        # from its range (by 1/16), the nodes and eval scale the same picture by 1/256
        from relperception.imaging import low_range_16bit, to_rgb8
        yaml_path, weights = models['metric']
        rgb16 = rgb_of(images[0]).astype(np.uint16) * 16
        path = tmp_path / 'twelve.png'
        cv2.imwrite(str(path), cv2.cvtColor(rgb16, cv2.COLOR_RGB2BGR))
        with caplog.at_level('WARNING'):
            assert main(['infer', '--config', yaml_path, '--weights', weights, str(path),
                         '-o', str(tmp_path / 'out')]) == 0
        assert low_range_16bit(rgb16, 'rgb16').split(' image ')[1] in caplog.text
        expected = DensePipeline(tiny_config(yaml_path, weights)).run(to_rgb8(rgb16, 'rgb16'))
        np.testing.assert_allclose(np.load(tmp_path / 'out' / 'twelve_depth.npy'),
                                   expected.raw_depth, rtol=1e-5, atol=1e-6)

    def test_relative_model_writes_inverse_depth(self, images, models, tmp_path):
        yaml_path, weights = models['relative']
        out = tmp_path / 'rel'
        assert main(['infer', '--config', yaml_path, '--weights', weights, str(images[1]),
                     '-o', str(out)]) == 0
        depth = np.load(out / f'{images[1].stem}_depth.npy')
        expected = DensePipeline(tiny_config(yaml_path, weights)).run(rgb_of(images[1]))
        assert expected.relative
        np.testing.assert_allclose(depth, expected.raw_depth, rtol=1e-5, atol=1e-6)
        assert not (out / f'{images[1].stem}_labels.png').exists()   # no segmentation head
        assert (out / f'{images[1].stem}_depth.png').is_file()

    def test_onnxruntime_backend(self, images, models, tmp_path):
        pytest.importorskip('onnxruntime')
        export = pytest.importorskip('relperception.pipeline.export')
        yaml_path, weights = models['metric']
        onnx_path = export.export_model(yaml_path, tmp_path / 'tiny.onnx', weights=weights,
                                        size=(64, 96))
        out = tmp_path / 'ort'
        assert main(['infer', '--config', yaml_path, '--backend', 'onnxruntime', '--onnx',
                     str(onnx_path), str(images[0]), '-o', str(out)]) == 0
        depth = np.load(out / f'{images[0].stem}_depth.npy')
        expected = DensePipeline(tiny_config(yaml_path, weights)).run(rgb_of(images[0]))
        np.testing.assert_allclose(depth, expected.raw_depth, rtol=1e-4, atol=1e-4)
        assert (out / f'{images[0].stem}_labels.png').is_file()
        # the README's deploy example: a parameter file with a dense: section
        ort = tmp_path / 'ort.yaml'
        ort.write_text(f'dense: {{model: {yaml_path}, backend: onnxruntime, '
                       f'onnx_path: {onnx_path}}}\n')
        out2 = tmp_path / 'ort_file'
        assert main(['infer', '--config', str(ort), str(images[0]), '-o', str(out2)]) == 0
        np.testing.assert_allclose(np.load(out2 / f'{images[0].stem}_depth.npy'), depth,
                                   rtol=1e-6, atol=1e-6)

    def test_an_exported_file_keeps_the_untrained_head_record(self, images, models, tmp_path):
        pytest.importorskip('onnxruntime')
        export = pytest.importorskip('relperception.pipeline.export')
        from relperception.models.weights import (load_state_dict_file, save_weights,
                                                  TRAINED_HEADS_KEY)
        from relperception.runtime.onnx_metadata import read_metadata

        yaml_path, weights = models['metric']
        seg_only = save_weights(load_state_dict_file(weights), tmp_path / 'seg.safetensors',
                                metadata={TRAINED_HEADS_KEY: 'segmentation'})
        onnx_path = export.export_model(yaml_path, tmp_path / 'seg.onnx', weights=seg_only,
                                        size=(64, 96))
        assert read_metadata(onnx_path)[TRAINED_HEADS_KEY] == ['segmentation']
        for name, options in (('torch', ['--weights', str(seg_only)]),
                              ('ort', ['--backend', 'onnxruntime', '--onnx', str(onnx_path)])):
            out = tmp_path / name
            assert main(['infer', '--config', yaml_path, *options, str(images[0]),
                         '-o', str(out)]) == 0
            # the untrained depth head's output is left out by both backends alike
            assert sorted(p.name for p in out.glob('*.png')) == \
                [f'{images[0].stem}_labels.png', f'{images[0].stem}_labels_color.png'], name

    def test_every_input_gets_its_own_outputs(self, images, models, tmp_path):
        names = [tmp_path / 'in' / name for name in ('a.jpg', 'a.png', 'a_1.png')]
        names[0].parent.mkdir()
        for path, size in zip(names, ((40, 30), (72, 56), (48, 32))):
            cv2.imwrite(str(path), cv2.resize(cv2.imread(str(images[0])), size))
        assert output_stems(sorted(names)) == ['a', 'a_2', 'a_1']   # a_1 is an input's own
        yaml_path, weights = models['metric']
        out = tmp_path / 'out'
        assert main(['infer', '--config', yaml_path, '--weights', weights, str(names[0].parent),
                     '-o', str(out)]) == 0
        shapes = sorted(np.load(path).shape for path in out.glob('*_depth.npy'))
        assert shapes == [(30, 40), (32, 48), (56, 72)]

    def test_unreadable_image_gives_exit_code_1(self, images, models, tmp_path):
        broken = tmp_path / 'broken.png'
        broken.write_bytes(b'not a png')
        yaml_path, weights = models['metric']
        tiny = tmp_path / 'tiny.png'   # was given depth and a label for its one pixel
        cv2.imwrite(str(tiny), np.full((1, 1, 3), 128, np.uint8))
        code = main(['infer', '--config', yaml_path, '--weights', weights, str(broken),
                     str(tiny), str(images[0]), '-o', str(tmp_path / 'out')])
        assert code == 1
        assert (tmp_path / 'out' / f'{images[0].stem}_depth.npy').is_file()
        assert not list((tmp_path / 'out').glob('tiny*'))

    def test_degenerate_arguments(self, images, models, tmp_path, caplog):
        yaml_path, weights = models['metric']
        out = str(tmp_path / 'out')
        # Depth Anything V2 ships no weights: --weights is required.
        assert main(['infer', '--config', 'depth_anything_v2_vits', str(images[0]),
                     '-o', out]) == 1
        assert main(['infer', '--config', yaml_path, '--weights', weights, '--backend',
                     'onnxruntime', str(images[0]), '-o', out]) == 1
        assert main(['infer', '--config', yaml_path, '--weights', weights,
                     str(tmp_path / 'missing.png'), '-o', out]) == 1
        # settings the chosen backend would ignore are refused
        onnx_file = tmp_path / 'any.onnx'
        onnx_file.write_bytes(b'')
        in_file = tmp_path / 'onnx_in_file.yaml'
        in_file.write_text(f'dense: {{model: {yaml_path}, onnx_path: {onnx_file}}}\n')
        for argv, words in ((['--config', str(in_file)], 'read by --backend onnxruntime only'),
                            (['--config', yaml_path, '--weights', weights, '--backend',
                              'onnxruntime', '--onnx', str(onnx_file)],
                             '--weights is read by the torch backend only')):
            caplog.clear()
            assert main(['infer', *argv, str(images[0]), '-o', out]) == 1
            assert words in caplog.text
        with pytest.raises(ValueError, match='no images'):
            collect_images([str(tmp_path)])
