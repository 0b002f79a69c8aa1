# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Bad weights, checkpoints, ONNX files and devices: refused in one line, or counted and marked."""

import json
import logging
import os

from bad_input_support import one_clear_line, run_cli, write_bag
import numpy as np
import pytest
from relperception.cli.main import EXIT_BAD_INPUT, main as cli_main


@pytest.fixture(scope='module')
def small_bag(tmp_path_factory):
    return write_bag(tmp_path_factory)


@pytest.fixture(scope='module')
def exports(tmp_path_factory):
    """Small ONNX exports of conv_small and loftr_lite (random weights)."""
    folder = tmp_path_factory.mktemp('exports')
    for preset in ('conv_small', 'loftr_lite'):
        assert cli_main(['export', '--config', preset, '--random-weights', '-o',
                         str(folder / f'{preset}.onnx'), '--height', '64', '--width',
                         '96']) == 0
    return folder


class TestModelFiles:
    @pytest.mark.parametrize('content', [b'', b'garbage' * 20], ids=['empty', 'garbage'])
    def test_bad_onnx_to_infer(self, content, tmp_path, caplog):
        import cv2

        model = tmp_path / 'model.onnx'
        model.write_bytes(content)
        image = tmp_path / 'image.png'
        cv2.imwrite(str(image), np.zeros((64, 64, 3), np.uint8))
        code, errors = run_cli(['infer', str(image), '--backend', 'onnxruntime', '--onnx',
                                str(model), '-o', str(tmp_path / 'out')], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, 'model.onnx', 'not a usable ONNX model')
        # without --backend onnxruntime the file would be ignored: refused instead
        code, errors = run_cli(['infer', str(image), '--onnx', str(model), '-o',
                                str(tmp_path / 'out')], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, '--onnx', '--backend onnxruntime')

    def test_bad_onnx_to_match(self, tmp_path, caplog):
        import cv2

        model = tmp_path / 'loftr.onnx'
        model.write_bytes(b'\x08\x01garbage')
        images = []
        for i in range(2):
            images.append(tmp_path / f'{i}.png')
            cv2.imwrite(str(images[-1]), np.zeros((64, 64), np.uint8))
        code, errors = run_cli(['match', *map(str, images), '--config', 'loftr_lite',
                                '--backend', 'onnxruntime', '--onnx', str(model),
                                '-o', str(tmp_path / 'out')], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, 'loftr.onnx', 'not a usable ONNX model')

    def test_bad_onnx_in_eval_dense_keeps_the_vo_pass(self, small_bag, tmp_path, caplog):
        model = tmp_path / 'dense.onnx'
        model.write_bytes(b'garbage')
        config = tmp_path / 'dense.yaml'
        config.write_text(f'dense:\n  backend: onnxruntime\n  onnx_path: {model}\n')
        output = tmp_path / 'out'
        code, _ = run_cli(['eval', str(small_bag), '--dense', '--config', str(config), '-o',
                           str(output), '--no-progress', '--no-plots'], caplog)
        assert code == 0   # the VO pass is written; the dense part names why it is missing
        summary = json.loads((output / 'summary.json').read_text())
        assert summary['frames_processed'] == 12 and (output / 'trajectory.tum').is_file()
        assert summary['dense']['frames_evaluated'] == 0
        assert any('dense.onnx' in e and 'not a usable ONNX model' in e
                   for e in summary['errors'])

    def test_missing_cuda_device(self, tmp_path, caplog):
        import cv2
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 7:
            pytest.skip('this machine has a cuda:7')
        images = []
        for i in range(2):
            images.append(tmp_path / f'{i}.png')
            cv2.imwrite(str(images[-1]), np.zeros((64, 64), np.uint8))
        code, errors = run_cli(['match', *map(str, images), '--config', 'loftr_lite',
                                '--device', 'cuda:7', '-o', str(tmp_path / 'out')], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, "'cuda:7'", 'CUDA')

    def test_refused_pickle_as_checkpoint(self, tmp_path):
        import torch

        from relperception.training.loop import Trainer

        marker = tmp_path / 'pwned'

        class Payload:
            def __reduce__(self):
                return (os.system, (f'touch {marker}',))

        evil = tmp_path / 'checkpoint.pt'
        torch.save({'model': Payload()}, evil)
        trainer = Trainer(torch.nn.Linear(2, 2), lambda model, batch: model(batch).sum(),
                          tmp_path / 'run', progress=False)
        with pytest.raises(ValueError, match='refused') as error:
            trainer.load_checkpoint(evil)
        assert 'weights_only=False' not in str(error.value)
        assert not marker.exists()
        truncated = tmp_path / 'truncated.pt'
        truncated.write_bytes(evil.read_bytes()[:40])
        with pytest.raises(ValueError, match='not a readable checkpoint'):
            trainer.load_checkpoint(truncated)
        text = tmp_path / 'notes.txt'   # any other file: the unpickler raises KeyError here
        text.write_bytes(b'hello\n')
        with pytest.raises(ValueError, match='not a readable checkpoint'):
            trainer.load_checkpoint(text)

    def test_onnx_of_another_dense_preset_is_refused(self, exports, tmp_path, caplog):
        import cv2

        image = tmp_path / 'image.png'
        cv2.imwrite(str(image), np.zeros((64, 96, 3), np.uint8))
        code, errors = run_cli(['infer', str(image), '--config', 'vit_small', '--backend',
                                'onnxruntime', '--onnx', str(exports / 'conv_small.onnx'),
                                '-o', str(tmp_path / 'out')], caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, 'conv_small.onnx', "preset 'conv_small'", "'vit_small'")
        code, errors = run_cli(['infer', str(image), '--config', 'conv_small', '--backend',
                                'onnxruntime', '--onnx', str(exports / 'conv_small.onnx'),
                                '-o', str(tmp_path / 'out')], caplog)
        assert code == 0 and not errors

    def test_onnx_of_another_loftr_preset_is_refused(self, exports, tmp_path, caplog):
        import cv2

        images = []
        for i in range(2):
            images.append(tmp_path / f'{i}.png')
            cv2.imwrite(str(images[-1]), np.zeros((64, 96), np.uint8))
        code, errors = run_cli(['match', *map(str, images), '--config', 'loftr',
                                '--backend', 'onnxruntime', '--onnx',
                                str(exports / 'loftr_lite.onnx'), '-o', str(tmp_path / 'out')],
                               caplog)
        assert code == EXIT_BAD_INPUT
        one_clear_line(errors, 'loftr_lite.onnx', "preset 'loftr_lite'", "'loftr'")

    def test_weights_with_nan_are_counted_and_marked(self, tmp_path, caplog):
        import torch

        from relperception.models.dense import build_dense_model
        from relperception.models.presets import load_model_config
        from relperception.models.weights import save_weights
        from relperception.pipeline.dense_pipeline import DensePipeline, NONFINITE_LABEL

        model = build_dense_model(load_model_config('conv_small'))
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(float('nan'))
        weights = tmp_path / 'nan.safetensors'
        save_weights(model, weights)
        pipeline = DensePipeline({'dense.model': 'conv_small', 'dense.weights': str(weights),
                                  'dense.input_width': 96, 'dense.input_height': 64})
        rgb = np.full((64, 96, 3), 128, np.uint8)
        with caplog.at_level(logging.WARNING):
            results = [pipeline.run(rgb, colors=False) for _ in range(3)]
        assert pipeline.frames_with_nonfinite_output == 3
        assert all(r.nonfinite_fraction == 1.0 for r in results)
        assert np.isnan(results[0].depth).all()
        assert (results[0].labels == NONFINITE_LABEL).all()
        warnings = [r for r in caplog.records if 'NaN/infinite' in r.getMessage()]
        assert len(warnings) == 1   # the first frame; the count goes on

    def test_loftr_with_nan_weights_is_counted(self, caplog):
        import torch

        from relperception.matching.loftr.matcher import LoFTRMatcher
        from relperception.matching.loftr.model import LoFTR

        model = LoFTR(preset='loftr_lite')
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.fill_(float('nan'))
        matcher = LoFTRMatcher({'preset': 'loftr_lite', 'input_width': 96,
                                'input_height': 64}, model=model)
        image = np.random.default_rng(0).integers(0, 255, (64, 96), dtype=np.uint8)
        with caplog.at_level(logging.WARNING):
            matches = [matcher.match(image, image) for _ in range(2)]
        assert all(len(m) == 0 for m in matches)
        assert matcher.calls_with_nonfinite_output == 2
        assert sum('NaN/infinite' in r.getMessage() for r in caplog.records) == 1


def test_loftr_infer_checks_its_images():
    """``infer`` is public: a float image in [0, 1] was divided by 255 again (0 matches)."""
    from relperception.matching.loftr.matcher import LoFTRMatcher
    from relperception.matching.loftr.model import LoFTR

    matcher = LoFTRMatcher({'preset': 'loftr_lite', 'input_width': 96, 'input_height': 64},
                           model=LoFTR(preset='loftr_lite'))
    image = np.random.default_rng(0).random((64, 96))
    for bad in (image, np.zeros((0, 0), np.uint8), image.tolist()):
        with pytest.raises(ValueError, match='image0'):
            matcher.infer(bad, bad)
