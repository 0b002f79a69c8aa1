# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Outputs of bad runs: interrupted runs keep what they computed; files are whole or absent.

SIGINT / SIGTERM are sent to this process at a known point of each run (from the dataset, or
from a log line the run writes) where one exists. Folders of an earlier run are cleaned.
"""

import json
import logging
import os
from pathlib import Path
import signal
import time
import uuid

from bad_input_support import one_clear_line, run_cli, write_bag
import cv2
import numpy as np
import pytest
from relperception.atomic_files import atomic_open, atomic_path, partial_name
from relperception.cli.main import EXIT_INTERRUPTED, EXIT_TERMINATED, main as cli_main
from relperception.config import load_config
from relperception.imaging import write_image
from relperception.interruption import (deferred_interruptions, exit_on_sigterm,
                                        interruption_error, interruption_reason,
                                        raise_on_sigterm, sigterm_received, Terminated)
import torch


class _OnLog(logging.Handler):
    """Call ``action()`` once, when a ``relperception`` record holding ``text`` is logged."""

    def __init__(self, text, action):
        super().__init__(logging.INFO)
        self.text, self.action, self.done = text, action, False

    def emit(self, record):
        if not self.done and self.text in record.getMessage():
            self.done = True
            self.action()

    def __enter__(self):
        logger = logging.getLogger('relperception')
        self.level = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        logger = logging.getLogger('relperception')
        logger.removeHandler(self)
        logger.setLevel(self.level)


def _send(signum):
    return lambda *_: os.kill(os.getpid(), signum)


class TestAtomicFiles:
    def test_written_whole_and_renamed(self, tmp_path):
        target = tmp_path / 'sub' / 'table.csv'
        with atomic_open(target, newline='') as stream:
            stream.write('a,b\n')
            assert not target.exists() and partial_name(target).is_file()
        assert target.read_text() == 'a,b\n'
        assert not partial_name(target).exists()
        assert partial_name(target).suffix == '.csv'   # writers that pick the format by suffix

    def test_failure_keeps_the_earlier_file(self, tmp_path):
        target = tmp_path / 'summary.json'
        target.write_text('earlier')
        for error in (ValueError('disk full'), KeyboardInterrupt()):
            with pytest.raises(type(error)):
                with atomic_path(target) as temporary:
                    temporary.write_text('half')
                    raise error
            assert target.read_text() == 'earlier'
            assert list(tmp_path.iterdir()) == [target]

    def test_write_image(self, tmp_path):
        rgb = np.zeros((4, 5, 3), np.uint8)
        rgb[..., 0] = 200   # red
        write_image(tmp_path / 'a.png', rgb)
        assert cv2.imread(str(tmp_path / 'a.png'))[0, 0].tolist() == [0, 0, 200]   # BGR
        write_image(tmp_path / 'b.png', np.full((3, 3), 1000, np.uint16))
        assert cv2.imread(str(tmp_path / 'b.png'), cv2.IMREAD_UNCHANGED).max() == 1000
        with pytest.raises(ValueError, match='uint8 or uint16'):
            write_image(tmp_path / 'c.png', np.zeros((3, 3), np.float32))
        with pytest.raises(OSError, match='cannot write'):
            write_image(tmp_path / 'd.unknown-format', rgb)
        assert sorted(p.name for p in tmp_path.iterdir()) == ['a.png', 'b.png']


class TestDeferredInterruptions:
    def test_first_signal_recorded_second_raises(self):
        before = signal.getsignal(signal.SIGINT)
        with deferred_interruptions() as pending:
            os.kill(os.getpid(), signal.SIGTERM)
            assert pending.reason == 'terminated (SIGTERM)'
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                signal.sigtimedwait([], 0.1)   # let the handler run
        assert signal.getsignal(signal.SIGINT) is before

    def test_reasons_round_trip(self):
        for error in (KeyboardInterrupt(), Terminated()):
            again = interruption_error(interruption_reason(error))
            assert type(again) is type(error)
        with pytest.raises(ValueError, match='unknown interruption reason'):
            interruption_error('cancelled')


class TestSigtermRecord:

    def test_a_sigterm_is_remembered_until_the_next_installation(self):
        # the CLI reads it to report exit 143 when the Terminated exception was turned into
        # another (SIGTERM inside an import surfaces as an ImportError)
        previous = raise_on_sigterm()
        try:
            assert not sigterm_received()
            with pytest.raises(Terminated):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5.0)   # the handler raises in the main thread before this ends
            assert sigterm_received()
            raise_on_sigterm()
            assert not sigterm_received()
        finally:
            signal.signal(signal.SIGTERM, previous)

    def test_exit_on_sigterm_exits_and_is_remembered(self):
        # the study's pool workers between cells: exit, and the next cell sees the record
        previous = exit_on_sigterm()
        try:
            raise_on_sigterm()   # clears the record
            exit_on_sigterm()
            with pytest.raises(SystemExit) as stopped:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5.0)   # the handler raises in the main thread before this ends
            assert stopped.value.code == 128 + signal.SIGTERM
            assert sigterm_received()
            exit_on_sigterm()
            assert sigterm_received()   # not cleared by installing it again
        finally:
            signal.signal(signal.SIGTERM, previous)
            raise_on_sigterm()
            signal.signal(signal.SIGTERM, previous)


class _Regression(torch.utils.data.Dataset):
    """y = x . w on 64 points; sends ``signum`` to this process when item ``signal_at`` is read."""

    def __init__(self, signal_at=None, signum=signal.SIGTERM):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(64, 4, generator=g)
        self.y = self.x @ torch.tensor([1.0, -2.0, 3.0, 0.5])
        self.signal_at, self.signum = signal_at, signum

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if i == self.signal_at:
            os.kill(os.getpid(), self.signum)
        return {'x': self.x[i], 'y': self.y[i]}


def _loss(model, batch):
    loss = ((model(batch['x']).squeeze(-1) - batch['y']) ** 2).mean()
    return loss, {}


class TestInterruptedTraining:
    def test_stops_after_the_step_and_keeps_a_checkpoint(self, tmp_path):
        from relperception.training.loop import Trainer

        # without shuffling, step 3 reads items 8..11: the signal arrives inside that step
        dataset = _Regression(signal_at=8)
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        trainer = Trainer(model, _loss, tmp_path, total_steps=100, checkpoint_every=50,
                          progress=False, seed=1)
        result = trainer.fit(dataset, batch_size=4, shuffle=False)
        assert result.interrupted == 'terminated (SIGTERM)'
        assert result.step == 3 and not result.finished
        assert result.checkpoint is not None and result.checkpoint.is_file()
        resumed = Trainer(torch.nn.Linear(4, 1), _loss, tmp_path, total_steps=100,
                          progress=False, seed=1)
        resumed.load_checkpoint()
        assert resumed.step == 3
        for key, value in model.state_dict().items():
            assert torch.equal(resumed.model.state_dict()[key], value)

    def test_second_signal_stops_at_once(self, tmp_path):
        from relperception.training.loop import Trainer

        class _Twice(_Regression):
            def __getitem__(self, i):
                if i in (5, 6):
                    os.kill(os.getpid(), signal.SIGINT)
                return {'x': self.x[i], 'y': self.y[i]}

        trainer = Trainer(torch.nn.Linear(4, 1), _loss, tmp_path, total_steps=100,
                          progress=False)
        with pytest.raises(KeyboardInterrupt):
            trainer.fit(_Twice(), batch_size=4, shuffle=False)


class TestInterruptedInfer:
    def test_outputs_of_finished_images_are_whole(self, tmp_path, caplog):
        rng = np.random.default_rng(0)
        images = []
        for index in range(3):
            path = tmp_path / f'img{index}.png'
            cv2.imwrite(str(path), rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
            images.append(str(path))
        output = tmp_path / 'out'
        # Ctrl-C as in a fresh process (an earlier rclpy.init in this one may have replaced it)
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with _OnLog('img0.png: 64x48', _send(signal.SIGINT)), caplog.at_level(logging.INFO):
                code = cli_main(['infer', '--config', 'conv_small', *images, '-o', str(output)])
        finally:
            signal.signal(signal.SIGINT, previous)
        assert code == EXIT_INTERRUPTED
        written = sorted(p.name for p in output.iterdir())
        assert written == ['img0_depth.npy', 'img0_depth.png', 'img0_labels.png',
                           'img0_labels_color.png']
        assert np.load(output / 'img0_depth.npy').shape == (48, 64)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any('interrupted (SIGINT) after 1 of 3 images' in line for line in lines), lines


class TestInterruptedReplay:
    def test_replay_scores_what_was_played(self, tmp_path):
        pytest.importorskip('rclpy')
        from relperception.data.synthetic_bag import write_synthetic_bag
        from relperception.nodes import graph
        from relperception.nodes.replay import replay_bag

        graph.ensure_ament_prefix()
        pytest.importorskip('nav_msgs.msg')
        bag = tmp_path / 'bag'
        write_synthetic_bag(bag, frames=150, width=320, height=240, fps=10.0, seed=4)
        output = tmp_path / 'out'
        previous = raise_on_sigterm()
        alarm = signal.signal(signal.SIGALRM, _send(signal.SIGTERM))
        try:
            # SIGTERM 1.5 s after playing starts (15 s of input at 10 Hz)
            with _OnLog('nodes ready after', lambda: signal.setitimer(signal.ITIMER_REAL, 1.5)):
                with pytest.raises(Terminated):
                    replay_bag(bag, output, namespace=f'/test_{uuid.uuid4().hex[:8]}',
                               plots=False, startup_s=60.0)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, alarm)
            signal.signal(signal.SIGTERM, previous)
        summary = json.loads((output / 'summary.json').read_text())
        assert summary['complete'] is False
        assert summary['interrupted'] == 'terminated (SIGTERM)'
        assert any('SIGTERM' in e for e in summary['errors'])
        assert 0 < summary['frames_processed'] < 150
        assert (output / 'trajectory.tum').is_file()
        assert not list(Path(output).glob('.*.partial*'))


@pytest.fixture(scope='module')
def long_bag(tmp_path_factory):
    return write_bag(tmp_path_factory, frames=250)


@pytest.fixture(scope='module')
def small_bag(tmp_path_factory):
    return write_bag(tmp_path_factory)


def _terminate_at_frame(monkeypatch, frame: int) -> None:
    """Send this process SIGTERM while the VO pipeline processes its ``frame``-th frame."""
    from relperception.pipeline.vo_pipeline import VOPipeline

    process, calls = VOPipeline.process, []

    def process_then_terminate(pipeline, *args, **kwargs):
        calls.append(1)
        if len(calls) == frame:
            os.kill(os.getpid(), signal.SIGTERM)
        return process(pipeline, *args, **kwargs)

    monkeypatch.setattr(VOPipeline, 'process', process_then_terminate)


class TestOutputs:
    def test_earlier_run_files_are_replaced(self, small_bag, tmp_path, caplog):
        output = tmp_path / 'out'
        code, _ = run_cli(['eval', str(small_bag), '-o', str(output), '--no-progress'],
                          caplog)
        assert code == 0 and (output / 'trajectory.png').is_file()
        (output / 'notes.txt').write_text('mine')
        # a run refused for its configuration leaves the earlier results as they were
        bad_config = tmp_path / 'even_patch.yaml'
        bad_config.write_text('ncc: {patch_size: 4}\n')
        code, errors = run_cli(['eval', str(small_bag), '-o', str(output), '--no-progress',
                                '--config', str(bad_config)], caplog)
        assert code != 0
        one_clear_line(errors, 'patch_size')
        assert (output / 'trajectory.png').is_file() and (output / 'summary.json').is_file()
        code, _ = run_cli(['eval', str(small_bag), '-o', str(output), '--no-progress',
                           '--no-plots'], caplog)
        assert code == 0
        assert not (output / 'trajectory.png').exists()   # not stale next to the new summary
        assert (output / 'notes.txt').read_text() == 'mine'   # not the earlier run's
        summary = json.loads((output / 'summary.json').read_text())
        assert 'trajectory_plot' not in summary['outputs']
        assert not list(output.glob('.*.partial'))

    def test_interrupted_eval_keeps_what_it_computed(self, long_bag, tmp_path, monkeypatch):
        from relperception.pipeline.offline_eval import evaluate_bag

        # Like KeyboardInterrupt: the bag reader's "keep what was read" handler (except
        # Exception) must not swallow it, wherever the signal lands.
        assert not issubclass(Terminated, Exception)

        # SIGTERM arrives while the 20th frame is processed (not after a fixed time, which a
        # fast machine finishes the bag in, and a loaded one may not have started it by).
        _terminate_at_frame(monkeypatch, 20)
        previous = raise_on_sigterm()
        try:
            with pytest.raises(Terminated):
                evaluate_bag(long_bag, tmp_path / 'out', load_config(), progress=False,
                             plots=False)
        finally:
            signal.signal(signal.SIGTERM, previous)
        summary = json.loads((tmp_path / 'out' / 'summary.json').read_text())
        assert summary['complete'] is False
        assert summary['interrupted'] == 'terminated (SIGTERM)'
        assert 0 < summary['frames_processed'] < 250
        assert any('SIGTERM' in e for e in summary['errors'])
        assert (tmp_path / 'out' / 'trajectory.tum').is_file()

    def test_interrupted_eval_command_writes_its_report(self, long_bag, tmp_path, monkeypatch):
        """The report a user opens first describes the interrupted run, not an earlier one."""
        output = tmp_path / 'out'
        output.mkdir()
        (output / 'report.html').write_text('<title>an earlier run</title>')
        (output / 'summary.json').write_text(json.dumps({'outputs': {}}))
        _terminate_at_frame(monkeypatch, 20)
        assert cli_main(['eval', str(long_bag), '-o', str(output), '--no-progress',
                         '--no-plots']) == EXIT_TERMINATED
        report = (output / 'report.html').read_text()
        assert 'an earlier run' not in report and 'terminated (SIGTERM)' in report
