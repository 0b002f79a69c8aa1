# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""End-to-end tests of the ``relperception match`` verb (NCC and, when installed, LoFTR)."""

import importlib.util

import cv2
import numpy as np
import pytest

from relperception.cli.main import main
from relperception.data.synthetic import iter_sequence

from relperception.matching.base import available_matchers

HAVE_LOFTR = (importlib.util.find_spec('relperception.matching.loftr.model') is not None
              and 'loftr' in available_matchers())
WIDTH, HEIGHT = 160, 120


@pytest.fixture(scope='module')
def pair(tmp_path_factory):
    """Two colour frames (2 apart) of a synthetic sequence, written as PNG files."""
    folder = tmp_path_factory.mktemp('pair')
    _, frames = iter_sequence(num_frames=3, seed=2, width=WIDTH, height=HEIGHT)
    frames = list(frames)
    paths = []
    for i, frame in ((0, frames[0]), (1, frames[2])):
        path = folder / f'image{i}.png'
        assert cv2.imwrite(str(path), cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2BGR))
        paths.append(str(path))
    return paths


def _check_outputs(folder, shape0, shape1):
    with np.load(folder / 'matches.npz') as data:
        assert sorted(data.files) == ['confidence', 'keypoints0', 'keypoints1']
        kp0, kp1, conf = data['keypoints0'], data['keypoints1'], data['confidence']
    count = len(conf)
    assert kp0.shape == (count, 2) and kp1.shape == (count, 2) and conf.shape == (count,)
    assert kp0.dtype == kp1.dtype == conf.dtype == np.float32
    for points, (height, width) in ((kp0, shape0), (kp1, shape1)):
        assert np.all(np.isfinite(points))
        assert np.all((points[:, 0] >= -0.5) & (points[:, 0] <= width - 0.5))
        assert np.all((points[:, 1] >= -0.5) & (points[:, 1] <= height - 0.5))
    assert np.all((conf >= 0) & (conf <= 1))
    drawing = cv2.imread(str(folder / 'matches.png'), cv2.IMREAD_UNCHANGED)
    # side by side under a title bar
    assert drawing is not None and drawing.ndim == 3
    assert drawing.shape[0] > max(shape0[0], shape1[0])
    assert drawing.shape[1] > shape0[1] + shape1[1]
    return kp0, kp1, conf


class TestMatchNCC:

    def test_smoke_outputs(self, pair, tmp_path, capsys):
        assert main(['match', '--config', 'ncc', *pair, '--output', str(tmp_path),
                     '--runs', '2']) == 0
        kp0, kp1, conf = _check_outputs(tmp_path, (HEIGHT, WIDTH), (HEIGHT, WIDTH))
        assert len(conf) >= 20
        out = capsys.readouterr().out
        assert f'ncc: {len(conf)} matches in ' in out and 'median of runs 2..2' in out

    def test_reference_translation(self, tmp_path):
        # image 1 = image 0 shifted by (+3, -2) px: every match moves by that shift
        rng = np.random.default_rng(0)
        texture = cv2.GaussianBlur(rng.random((HEIGHT + 20, WIDTH + 20)).astype(np.float32),
                                   (0, 0), 1.5)
        texture = np.uint8(255 * (texture - texture.min()) / np.ptp(texture))
        image0 = texture[10:10 + HEIGHT, 10:10 + WIDTH]
        image1 = texture[12:12 + HEIGHT, 7:7 + WIDTH]
        paths = [str(tmp_path / 'a.png'), str(tmp_path / 'b.png')]
        cv2.imwrite(paths[0], image0)
        cv2.imwrite(paths[1], image1)
        assert main(['match', '--config', 'ncc', *paths, '-o', str(tmp_path / 'out')]) == 0
        kp0, kp1, _ = _check_outputs(tmp_path / 'out', (HEIGHT, WIDTH), (HEIGHT, WIDTH))
        assert len(kp0) >= 20
        np.testing.assert_allclose(np.median(kp1 - kp0, axis=0), [3.0, -2.0], atol=0.05)

    def test_degenerate_missing_file(self, pair, tmp_path, caplog):
        assert main(['match', '--config', 'ncc', pair[0], str(tmp_path / 'none.png'),
                     '-o', str(tmp_path)]) == 1
        assert 'image file not found' in caplog.text

    def test_degenerate_not_an_image(self, pair, tmp_path, caplog):
        bad = tmp_path / 'bad.png'
        bad.write_text('not an image')
        assert main(['match', '--config', 'ncc', pair[0], str(bad), '-o', str(tmp_path)]) == 1
        assert 'could not decode' in caplog.text

    @pytest.mark.parametrize('config', ['ncc', 'loftr_lite'])
    def test_degenerate_tiny_image(self, tmp_path, caplog, config):
        # LoFTR put 101 matches, some outside the image, on a 7x7 image matched with itself
        tiny = tmp_path / 'tiny.png'
        cv2.imwrite(str(tiny), np.random.default_rng(0).integers(0, 255, (7, 7), np.uint8))
        assert main(['match', '--config', config, str(tiny), str(tiny), '-o',
                     str(tmp_path / 'out')]) == 1
        assert 'tiny.png: the image is 7x7; give at least 16x16 pixels' in caplog.text

    def test_degenerate_size_mismatch(self, pair, tmp_path, caplog):
        small = tmp_path / 'small.png'
        cv2.imwrite(str(small), np.zeros((60, 80), np.uint8))
        assert main(['match', '--config', 'ncc', pair[0], str(small), '-o', str(tmp_path)]) == 1
        assert 'same size' in caplog.text

    def test_exif_rotation_is_named(self, pair, tmp_path, caplog):
        # a portrait phone photo: landscape pixels with EXIF orientation 6 (rotate 90 degrees)
        ok, jpeg = cv2.imencode('.jpg', cv2.imread(pair[1]))
        tiff = (b'MM\x00\x2a' + (8).to_bytes(4, 'big') + (1).to_bytes(2, 'big')
                + bytes.fromhex('0112 0003 00000001 0006 0000') + (0).to_bytes(4, 'big'))
        app1 = b'Exif\x00\x00' + tiff
        rotated = tmp_path / 'portrait.jpg'
        rotated.write_bytes(jpeg.tobytes()[:2] + b'\xff\xe1' + (len(app1) + 2).to_bytes(2, 'big')
                            + app1 + jpeg.tobytes()[2:])
        assert ok and cv2.imread(str(rotated)).shape[:2] == (WIDTH, HEIGHT)
        assert main(['match', '--config', 'ncc', pair[0], str(rotated), '-o',
                     str(tmp_path)]) == 1
        assert f'got {WIDTH}x{HEIGHT} and {HEIGHT}x{WIDTH} (one is rotated: an EXIF' \
            in caplog.text

    def test_degenerate_runs(self, pair, tmp_path, caplog):
        assert main(['match', '--config', 'ncc', *pair, '--runs', '0', '-o', str(tmp_path)]) == 1
        assert '--runs must be >= 1' in caplog.text

    def test_degenerate_loftr_options_with_ncc(self, pair, tmp_path, caplog):
        assert main(['match', '--config', 'ncc', *pair, '--threshold', '0.5',
                     '-o', str(tmp_path)]) == 1
        assert '--threshold' in caplog.text


@pytest.fixture(scope='module')
def weights(tmp_path_factory):
    """Return randomly initialised loftr_lite weights saved as safetensors."""
    import torch

    from relperception.matching.loftr.model import LoFTR
    from relperception.models.weights import save_weights

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp('weights') / 'loftr_lite_random.safetensors'
    save_weights(LoFTR(preset='loftr_lite'), path)
    return path


@pytest.fixture(scope='module')
def params(tmp_path_factory):
    """Return a parameter file with a small network input (fast on a CPU)."""
    path = tmp_path_factory.mktemp('params') / 'small.yaml'
    path.write_text('loftr.input_width: 128\nloftr.input_height: 96\n')
    return str(path)


@pytest.fixture(scope='module')
def torch_run(pair, weights, params, tmp_path_factory):
    """Run ``match --config loftr_lite`` (torch backend, threshold 0) once; return its folder."""
    folder = tmp_path_factory.mktemp('loftr_torch')
    assert main(['match', '--config', 'loftr_lite', '--weights', str(weights), *pair,
                 '--threshold', '0.0', '--params', params, '--output', str(folder)]) == 0
    return folder


@pytest.mark.skipif(not HAVE_LOFTR, reason='relperception.matching.loftr not installed')
class TestMatchLoFTR:

    def test_smoke_random_weights(self, torch_run):
        _, _, conf = _check_outputs(torch_run, (HEIGHT, WIDTH), (HEIGHT, WIDTH))
        assert len(conf) >= 1

    def test_reference_equals_matcher(self, pair, weights, torch_run):
        # the matcher itself on the files read as grey gives the same matches
        from relperception.matching.loftr.matcher import LoFTRMatcher

        kp0, kp1, conf = _check_outputs(torch_run, (HEIGHT, WIDTH), (HEIGHT, WIDTH))
        matcher = LoFTRMatcher({'preset': 'loftr_lite', 'weights': str(weights),
                                'threshold': 0.0, 'input_width': 128, 'input_height': 96})
        expected = matcher.match(cv2.imread(pair[0], cv2.IMREAD_GRAYSCALE),
                                 cv2.imread(pair[1], cv2.IMREAD_GRAYSCALE))
        np.testing.assert_allclose(kp0, expected.keypoints0, atol=1e-4)
        np.testing.assert_allclose(kp1, expected.keypoints1, atol=1e-4)
        np.testing.assert_allclose(conf, expected.confidence, atol=1e-5)

    @pytest.mark.filterwarnings('ignore:Constant folding')
    def test_onnxruntime_backend_equals_torch(self, pair, weights, params, torch_run, tmp_path):
        import torch

        from relperception.matching.loftr.model import (LoFTR, LoFTROnnxWrapper,
                                                        ONNX_INPUT_NAMES, ONNX_OUTPUT_NAMES)
        from relperception.models.weights import load_state_dict_file
        from relperception.runtime.onnx_export import export_onnx

        model = LoFTR(preset='loftr_lite')
        model.load_weights(load_state_dict_file(weights))
        model.threshold = 0.0
        example = torch.rand(1, 1, 96, 128)
        onnx_path = export_onnx(LoFTROnnxWrapper(model).eval(), (example, example),
                                tmp_path / 'lite.onnx', ONNX_INPUT_NAMES, ONNX_OUTPUT_NAMES)
        assert main(['match', *pair, '--config', 'loftr_lite', '--threshold', '0.0', '--params',
                     params, '--backend', 'onnxruntime', '--onnx', str(onnx_path),
                     '-o', str(tmp_path / 'ort')]) == 0
        ort = _check_outputs(tmp_path / 'ort', (HEIGHT, WIDTH), (HEIGHT, WIDTH))
        ref = _check_outputs(torch_run, (HEIGHT, WIDTH), (HEIGHT, WIDTH))
        assert len(ort[2]) == len(ref[2]) >= 1
        for got, expected in zip(ort, ref):
            np.testing.assert_allclose(got, expected, atol=1e-2)
        # loftr.max_matches holds for the exported model too: its most confident matches
        limit = len(ref[2]) // 3
        limited = tmp_path / 'limited.yaml'
        limited.write_text(open(params).read() + f'loftr.max_matches: {limit}\n')
        for name, options in (('torch_k', ['--weights', str(weights)]),
                              ('ort_k', ['--backend', 'onnxruntime', '--onnx', str(onnx_path)])):
            assert main(['match', *pair, '--config', 'loftr_lite', '--threshold', '0.0',
                         '--params', str(limited), *options, '-o', str(tmp_path / name)]) == 0
        torch_k = _check_outputs(tmp_path / 'torch_k', (HEIGHT, WIDTH), (HEIGHT, WIDTH))
        ort_k = _check_outputs(tmp_path / 'ort_k', (HEIGHT, WIDTH), (HEIGHT, WIDTH))
        assert len(ort_k[2]) == len(torch_k[2]) == limit
        np.testing.assert_allclose(np.sort(ort_k[2]), np.sort(torch_k[2]), atol=1e-4)
        assert np.sort(ort_k[2])[0] >= np.sort(ref[2])[-limit] - 1e-4   # the most confident

    def test_onnx_options_that_would_be_ignored_are_refused(self, pair, weights, tmp_path,
                                                            caplog):
        onnx_file = tmp_path / 'any.onnx'
        onnx_file.write_bytes(b'')
        conflicting = tmp_path / 'conflicting.yaml'
        conflicting.write_text('loftr.preset: loftr\n')
        for argv, words in (
                (['--onnx', str(onnx_file)], 'read by --backend onnxruntime only'),
                (['--backend', 'onnxruntime', '--onnx', str(onnx_file), '--weights',
                  str(weights)], '--weights is read by the torch backend only'),
                (['--device', 'banana'], 'loftr.device must be cpu, cuda or cuda:N'),
                (['--params', str(conflicting)], 'disagree')):
            caplog.clear()
            assert main(['match', *pair, '--config', 'loftr_lite', *argv,
                         '-o', str(tmp_path / 'out')]) == 1, argv
            assert words in caplog.text, argv

    def test_degenerate_onnx_backend_without_file(self, pair, tmp_path, caplog):
        assert main(['match', '--config', 'loftr_lite', '--backend', 'onnxruntime', *pair,
                     '-o', str(tmp_path)]) == 1
        assert 'needs --onnx' in caplog.text

    def test_different_sizes(self, pair, weights, params, tmp_path):
        big = tmp_path / 'big.png'
        cv2.imwrite(str(big), cv2.resize(cv2.imread(pair[1]), (2 * WIDTH, 2 * HEIGHT)))
        code = main(['match', '--config', 'loftr_lite', '--weights', str(weights), pair[0],
                     str(big), '--threshold', '0.0', '--params', params,
                     '--output', str(tmp_path)])
        assert code == 0
        _check_outputs(tmp_path, (HEIGHT, WIDTH), (2 * HEIGHT, 2 * WIDTH))

    def test_degenerate_missing_weights(self, pair, tmp_path, caplog):
        assert main(['match', '--config', 'loftr_lite', '--weights', str(tmp_path / 'no.pt'),
                     *pair, '-o', str(tmp_path)]) == 1
        assert 'weights file not found' in caplog.text
