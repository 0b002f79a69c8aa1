# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Bad input through the CLI: one clear line and an exit code, never a traceback or a hang.

Each test crafts the input of one defect found by the bad-input campaign (configuration files,
ONNX files, devices, checkpoints, special files, interruptions, stale outputs) and runs the
real command or function on it.
"""

import json
import logging
import os
from pathlib import Path
import signal

import numpy as np
import pytest

from relperception.cli.main import (EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED,
                                    main as cli_main)
from relperception.config import load_config, MAX_CONFIG_DEPTH
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.interruption import raise_on_sigterm, Terminated


def _run_cli(argv, caplog):
    """Run the CLI in this process; return (exit code, the error lines it logged)."""
    caplog.clear()
    with caplog.at_level(logging.INFO):
        code = cli_main(argv)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    return code, errors


def _one_clear_line(errors, *words):
    assert len(errors) == 1, [e.getMessage() for e in errors]
    record = errors[0]
    assert not record.exc_info, 'a traceback was logged'
    text = record.getMessage()
    assert '\n' not in text and 'Traceback' not in text
    for word in words:
        assert word in text, text


@pytest.fixture(scope='module')
def small_bag(tmp_path_factory):
    bag = tmp_path_factory.mktemp('bad_input') / 'bag'
    write_synthetic_bag(bag, frames=12, seed=3, width=320, height=240)
    return bag


@pytest.fixture(scope='module')
def long_bag(tmp_path_factory):
    bag = tmp_path_factory.mktemp('bad_input_long') / 'bag'
    write_synthetic_bag(bag, frames=250, seed=3, width=320, height=240)
    return bag


@pytest.fixture(scope='module')
def exports(tmp_path_factory):
    """Small ONNX exports of conv_small and loftr_lite (random weights)."""
    folder = tmp_path_factory.mktemp('exports')
    for preset in ('conv_small', 'loftr_lite'):
        assert cli_main(['export', '--config', preset, '--random-weights', '-o',
                         str(folder / f'{preset}.onnx'), '--height', '64', '--width',
                         '96']) == 0
    return folder


class TestConfigurationFiles:
    CASES = {
        'syntax': ('matcher: [ncc\n', 'not a valid configuration file'),
        'python_tag': ('matcher: !!python/object/apply:os.system ["touch pwned"]\n',
                       'could not determine a constructor'),
        'nan': ('klt:\n  max_forward_backward_px: .nan\n', 'finite'),
        'infinity': ('odometry:\n  ransac_threshold_px: .inf\n', 'finite'),
        'top_level_list': ('- matcher\n', 'expected a mapping'),
        'unknown_key': ('odometry:\n  no_such_key: 1\n', 'unknown parameter'),
    }

    @pytest.mark.parametrize('case', sorted(CASES))
    def test_refused_with_one_line(self, case, small_bag, tmp_path, caplog):
        text, words = self.CASES[case]
        config = tmp_path / f'{case}.yaml'
        config.write_text(text)
        code, errors = _run_cli(['eval', str(small_bag), '-o', str(tmp_path / 'out'),
                                 '--config', str(config), '--no-progress'], caplog)
        assert code == EXIT_BAD_INPUT
        _one_clear_line(errors, config.name, words)
        assert not (tmp_path / 'pwned').exists() and not Path('pwned').exists()

    def test_alias_bomb_is_refused_before_it_expands(self, tmp_path):
        lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        for previous, name in zip('abcdefgh', 'bcdefghi'):
            lines.append(f'{name}: &{name} [' + ', '.join([f'*{previous}'] * 9) + ']')
        bomb = tmp_path / 'bomb.yaml'
        bomb.write_text('\n'.join(lines) + '\n')
        assert bomb.stat().st_size < 1000   # 9**9 strings once expanded
        with pytest.raises(ValueError, match='aliases'):
            load_config(bomb)

    def test_depth_size_and_encoding_are_bounded(self, tmp_path):
        deep = tmp_path / 'deep.yaml'
        levels = MAX_CONFIG_DEPTH + 2
        deep.write_text('a: ' + '{a: ' * levels + '1' + '}' * levels + '\n')
        with pytest.raises(ValueError, match='nesting deeper'):
            load_config(deep)
        big = tmp_path / 'big.yaml'
        big.write_text('# padding\n' * 200_000)
        with pytest.raises(ValueError, match='more than a configuration file'):
            load_config(big)
        binary = tmp_path / 'binary.yaml'
        binary.write_bytes(b'matcher: \xff\xfe\n')
        with pytest.raises(ValueError, match='UTF-8'):
            load_config(binary)

    def test_a_fifo_is_refused_not_waited_on(self, tmp_path):
        fifo = tmp_path / 'config.yaml'
        os.mkfifo(fifo)
        with pytest.raises(ValueError, match='not a regular file'):
            load_config(fifo)   # opening it would block forever

    def test_valid_file_still_loads(self, tmp_path):
        good = tmp_path / 'good.yaml'
        good.write_text('/**:\n  ros__parameters:\n    odometry:\n      min_matches: 12\n')
        assert load_config(good)['odometry.min_matches'] == 12


class TestModelFiles:
    @pytest.mark.parametrize('content', [b'', b'garbage' * 20], ids=['empty', 'garbage'])
    def test_bad_onnx_to_infer(self, content, tmp_path, caplog):
        import cv2

        model = tmp_path / 'model.onnx'
        model.write_bytes(content)
        image = tmp_path / 'image.png'
        cv2.imwrite(str(image), np.zeros((64, 64, 3), np.uint8))
        code, errors = _run_cli(['infer', str(image), '--backend', 'onnxruntime', '--onnx',
                                 str(model), '-o', str(tmp_path / 'out')], caplog)
        assert code == EXIT_BAD_INPUT
        _one_clear_line(errors, 'model.onnx', 'not a usable ONNX model')

    def test_bad_onnx_to_match(self, tmp_path, caplog):
        import cv2

        model = tmp_path / 'loftr.onnx'
        model.write_bytes(b'\x08\x01garbage')
        images = []
        for i in range(2):
            images.append(tmp_path / f'{i}.png')
            cv2.imwrite(str(images[-1]), np.zeros((64, 64), np.uint8))
        code, errors = _run_cli(['match', *map(str, images), '--config', 'loftr_lite',
                                 '--backend', 'onnxruntime', '--onnx', str(model),
                                 '-o', str(tmp_path / 'out')], caplog)
        assert code == EXIT_BAD_INPUT
        _one_clear_line(errors, 'loftr.onnx', 'not a usable ONNX model')

    def test_bad_onnx_in_eval_dense_keeps_the_vo_pass(self, small_bag, tmp_path, caplog):
        model = tmp_path / 'dense.onnx'
        model.write_bytes(b'garbage')
        config = tmp_path / 'dense.yaml'
        config.write_text(f'dense:\n  backend: onnxruntime\n  onnx_path: {model}\n')
        output = tmp_path / 'out'
        code, _ = _run_cli(['eval', str(small_bag), '--dense', '--config', str(config), '-o',
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
        code, errors = _run_cli(['match', *map(str, images), '--config', 'loftr_lite',
                                 '--device', 'cuda:7', '-o', str(tmp_path / 'out')], caplog)
        assert code == EXIT_BAD_INPUT
        _one_clear_line(errors, "'cuda:7'", 'CUDA')

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

    def test_onnx_of_another_dense_preset_is_refused(self, exports, tmp_path, caplog):
        import cv2

        image = tmp_path / 'image.png'
        cv2.imwrite(str(image), np.zeros((64, 96, 3), np.uint8))
        code, errors = _run_cli(['infer', str(image), '--config', 'vit_small', '--backend',
                                 'onnxruntime', '--onnx', str(exports / 'conv_small.onnx'),
                                 '-o', str(tmp_path / 'out')], caplog)
        assert code == EXIT_BAD_INPUT
        _one_clear_line(errors, 'conv_small.onnx', "preset 'conv_small'", "'vit_small'")
        code, errors = _run_cli(['infer', str(image), '--config', 'conv_small', '--backend',
                                 'onnxruntime', '--onnx', str(exports / 'conv_small.onnx'),
                                 '-o', str(tmp_path / 'out')], caplog)
        assert code == 0 and not errors

    def test_onnx_of_another_loftr_preset_is_refused(self, exports, tmp_path, caplog):
        import cv2

        images = []
        for i in range(2):
            images.append(tmp_path / f'{i}.png')
            cv2.imwrite(str(images[-1]), np.zeros((64, 96), np.uint8))
        code, errors = _run_cli(['match', *map(str, images), '--config', 'loftr',
                                 '--backend', 'onnxruntime', '--onnx',
                                 str(exports / 'loftr_lite.onnx'), '-o', str(tmp_path / 'out')],
                                caplog)
        assert code == EXIT_BAD_INPUT
        _one_clear_line(errors, 'loftr_lite.onnx', "preset 'loftr_lite'", "'loftr'")

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


class TestBags:
    def test_fifo_bag_is_refused(self, tmp_path, caplog):
        for path in (tmp_path / 'fifo.mcap', tmp_path / 'bagdir' / 'bagdir_0.mcap'):
            path.parent.mkdir(exist_ok=True)
            os.mkfifo(path)
            target = path if path.name == 'fifo.mcap' else path.parent
            code, errors = _run_cli(['eval', str(target), '-o', str(tmp_path / 'out')], caplog)
            assert code == EXIT_BAD_INPUT
            _one_clear_line(errors, 'not a regular file')

    def test_missing_bag_and_debug_traceback(self, tmp_path, caplog):
        code, errors = _run_cli(['eval', str(tmp_path / 'nope'), '-o', str(tmp_path)], caplog)
        assert code == EXIT_BAD_INPUT
        _one_clear_line(errors, 'does not exist')
        code, errors = _run_cli(['--debug', 'eval', str(tmp_path / 'nope'), '-o',
                                 str(tmp_path)], caplog)
        assert code == EXIT_BAD_INPUT and errors[0].exc_info

    @staticmethod
    def _damaged_sqlite_bag(folder, start_fraction, pages):
        """Write a 30-frame SQLite 3 bag; overwrite ``pages`` 4 KiB pages from a fraction on."""
        bag = folder / 'bag'
        write_synthetic_bag(bag, frames=30, seed=3, width=160, height=120, storage='sqlite3')
        db_file = next(bag.glob('*.db3'))
        data = bytearray(db_file.read_bytes())
        first = int(len(data) // 4096 * start_fraction) * 4096
        data[first:first + pages * 4096] = b'\xa5' * (pages * 4096)
        db_file.write_bytes(bytes(data))
        return bag

    @pytest.mark.parametrize('start_fraction, pages', [(0.5, 3), (0.5, 8)],
                             ids=['read_fails_midway', 'open_fails'])
    def test_damaged_sqlite_bag_is_read_past_the_damage(self, start_fraction, pages, tmp_path):
        from relperception.data.bag import BagReader
        from relperception.pipeline.offline_eval import evaluate_bag

        bag = self._damaged_sqlite_bag(tmp_path, start_fraction, pages)
        with BagReader(bag) as reader:
            images = [m for m in reader.messages() if m.topic == '/camera/image_raw']
            assert reader.storage_damaged
            assert all('()' not in e for e in reader.errors), reader.errors
        stamps = [m.log_time_ns for m in images]
        assert len(images) >= 28 and stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
        summary = evaluate_bag(bag, tmp_path / 'eval', None, progress=False, plots=False)
        assert summary['frames_read'] >= 28
        # complete is false exactly when the topics eval reads met the damage
        damaged = any('SQLite' in e or 'storage damaged' in e for e in summary['errors'])
        assert summary['complete'] is not damaged
        assert damaged or start_fraction == 0.5 and pages == 3   # the labels' pages only

    def test_damaged_record_inside_an_mcap_chunk_is_reported(self, tmp_path):
        import struct

        from relperception.pipeline.offline_eval import evaluate_bag

        bag = tmp_path / 'bag'
        write_synthetic_bag(bag, frames=30, seed=3, width=160, height=120)
        mcap = next(bag.glob('*.mcap'))
        data = bytearray(mcap.read_bytes())
        chunks, offset = [], 8
        while offset < len(data) - 9:   # walk the records: opcode (1 byte), length (8 bytes)
            opcode, = struct.unpack_from('<B', data, offset)
            length, = struct.unpack_from('<Q', data, offset + 1)
            if opcode == 0x06:
                chunks.append(offset)
            if opcode == 0x0F or length > len(data):   # data end
                break
            offset += 9 + length
        assert len(chunks) > 2
        # the first records of a middle chunk (after its 40-byte uncompressed chunk header)
        start = chunks[len(chunks) // 2] + 9 + 40
        data[start:start + 80] = bytes(80)
        mcap.write_bytes(bytes(data))
        summary = evaluate_bag(bag, tmp_path / 'out', {'odometry.mode': 'mono'},
                               progress=False, plots=False)
        assert summary['complete'] is False
        assert 0 < summary['frames_read'] < 30
        assert any('could not be read (damaged storage)' in e for e in summary['errors'])

    def test_repeated_image_stamps_are_named_not_tracked(self, tmp_path):
        from relperception.data import topics
        from relperception.data.bag import BagWriter
        from relperception.data.synthetic import iter_sequence
        from relperception.pipeline.offline_eval import evaluate_bag

        camera, frames = iter_sequence(num_frames=6, seed=3, width=160, height=120)
        with BagWriter(tmp_path / 'bag') as writer:
            for frame in frames:   # every frame carries the first frame's stamp
                writer.write_camera_info(topics.CAMERA_INFO, 1_000_000_000, camera,
                                         topics.CAMERA_FRAME)
                writer.write_image(topics.IMAGE, 1_000_000_000, frame.rgb, 'rgb8',
                                   topics.CAMERA_FRAME)
        summary = evaluate_bag(tmp_path / 'bag', tmp_path / 'eval', {'odometry.mode': 'mono'},
                               progress=False, plots=False)
        assert summary['frames_read'] == 6 and summary['frames_processed'] == 1
        assert summary['frames_skipped'] == 5
        assert sum('stamps repeated or out of order' in e for e in summary['errors']) == 5

    def test_replay_reads_a_truncated_mcap_as_eval_does(self, small_bag, tmp_path):
        from relperception.data.bag import BagReader
        from relperception.pipeline.live_eval import iter_raw_messages

        truncated = tmp_path / 'truncated.mcap'
        original = next(Path(small_bag).glob('*.mcap')).read_bytes()
        truncated.write_bytes(original[:len(original) * 6 // 10])
        with BagReader(truncated) as reader:
            expected = [(m.topic, m.log_time_ns) for m in reader.messages()]
        damage = []
        played = [(m.topic, m.log_time_ns) for m in iter_raw_messages(truncated, damage=damage)]
        assert played == expected and len(expected) > 10
        assert damage and any('damaged MCAP' in d for d in damage)


class TestOutputs:
    def test_earlier_run_files_are_replaced(self, small_bag, tmp_path, caplog):
        output = tmp_path / 'out'
        code, _ = _run_cli(['eval', str(small_bag), '-o', str(output), '--no-progress'],
                           caplog)
        assert code == 0 and (output / 'trajectory.png').is_file()
        (output / 'notes.txt').write_text('mine')
        code, _ = _run_cli(['eval', str(small_bag), '-o', str(output), '--no-progress',
                            '--no-plots'], caplog)
        assert code == 0
        assert not (output / 'trajectory.png').exists()   # not stale next to the new summary
        assert (output / 'notes.txt').read_text() == 'mine'   # not the earlier run's
        summary = json.loads((output / 'summary.json').read_text())
        assert 'trajectory_plot' not in summary['outputs']
        assert not list(output.glob('.*.partial'))

    def test_interrupted_eval_keeps_what_it_computed(self, long_bag, tmp_path):
        from relperception.pipeline.offline_eval import evaluate_bag

        # Like KeyboardInterrupt: the bag reader's "keep what was read" handler (except
        # Exception) must not swallow it, wherever the signal lands.
        assert not issubclass(Terminated, Exception)

        previous = raise_on_sigterm()
        signal.setitimer(signal.ITIMER_REAL, 3.0)
        alarm = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
        try:
            with pytest.raises(Terminated):
                evaluate_bag(long_bag, tmp_path / 'out', load_config(), progress=False,
                             plots=False)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, alarm)
            signal.signal(signal.SIGTERM, previous)
        summary = json.loads((tmp_path / 'out' / 'summary.json').read_text())
        assert summary['complete'] is False
        assert summary['interrupted'] == 'terminated (SIGTERM)'
        assert 0 < summary['frames_processed'] < 250
        assert any('SIGTERM' in e for e in summary['errors'])
        assert (tmp_path / 'out' / 'trajectory.tum').is_file()

    def test_exit_codes_are_documented(self, capsys):
        with pytest.raises(SystemExit):
            cli_main(['--help'])
        text = capsys.readouterr().out
        assert f'{EXIT_INTERRUPTED} interrupted' in text
        assert f'{EXIT_TERMINATED} terminated' in text
