# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of ``relperception compare --ray`` against a real Ray head started for this module.

The head is a separate process group (``ray start --head --block``) on the loopback address,
with its own temporary folder; the teardown kills that group (``ray stop --force`` would stop
every Ray process of this user on the machine, a parallel run's too). Skipped when Ray is not
installed.
"""

import importlib.util
import json
import os
from pathlib import Path
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from relperception.cli.main import main
from relperception.config import load_config
from relperception.pipeline import study
from relperception.pipeline.offline_eval import evaluate_bag
from relperception.pipeline.study import CELL_FILE, plan_cells, run_study
from relperception.pipeline.study_ray import CELL_RETRIES
from test_compare import write_study_inputs  # noqa: I100

pytestmark = pytest.mark.skipif(importlib.util.find_spec('ray') is None,
                                reason="ray is not installed (pip install 'ray[default]')")

#: Seconds the head may take to start on a loaded 2-core machine.
HEAD_START_TIMEOUT_S = 90.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def _kill_group(process: subprocess.Popen, temp_dir: str) -> None:
    """Kill the head's process group and any process it started in a session of its own."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)
    for entry in Path('/proc').iterdir():   # only processes that name our own temp folder
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / 'cmdline').read_bytes()
        except OSError:
            continue
        if temp_dir.encode() in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope='module')
def ray_head():
    """Start a 2-CPU Ray head on 127.0.0.1; yield its address; kill it afterwards."""
    ray_cli = Path(sys.executable).with_name('ray')
    if not ray_cli.is_file():
        pytest.skip(f'the ray command is not installed beside {sys.executable}')
    # Short: Ray's socket paths under it must stay below the 107-character limit.
    temp_dir = tempfile.mkdtemp(prefix='rp_ray_', dir='/tmp')
    port = _free_port()
    # Every Ray process of the test (head and driver) on the loopback address only.
    saved = {k: os.environ.get(k) for k in ('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER',
                                            'RAY_USAGE_STATS_ENABLED')}
    os.environ.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER='0', RAY_USAGE_STATS_ENABLED='0')
    log_path = Path(temp_dir) / 'head.log'
    with open(log_path, 'wb') as log:
        head = subprocess.Popen(
            [str(ray_cli), 'start', '--head', '--block', f'--port={port}',
             '--node-ip-address=127.0.0.1', '--num-cpus=2', '--include-dashboard=false',
             '--disable-usage-stats', f'--temp-dir={temp_dir}'],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    try:
        deadline = time.monotonic() + HEAD_START_TIMEOUT_S
        while 'Ray runtime started' not in log_path.read_text(errors='replace'):
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f'the Ray head did not start:\n{log_path.read_text()[-3000:]}')
            time.sleep(0.1)
        yield f'127.0.0.1:{port}'
    finally:
        _kill_group(head, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope='module')
def study_inputs(tmp_path_factory):
    """Two small synthetic bags and two configurations (defaults, fewer keypoints)."""
    return write_study_inputs(tmp_path_factory.mktemp('ray_study'))


def test_ray_cells_equal_a_plain_eval_and_a_rerun_reuses_them(ray_head, study_inputs,
                                                              tmp_path, monkeypatch):
    bags, configs = study_inputs
    output = tmp_path / 'out'
    # Relative paths: a Ray worker's working directory is not the driver's.
    monkeypatch.chdir(bags[0].parent)
    argv = ['compare', '--bags', bags[0].name, bags[1].name, '--configs', 'default',
            f'small={configs[1].path.name}', '--ray', ray_head, '-o', str(output),
            '--no-progress']
    assert main(argv) == 0
    rows = json.loads((output / 'results.json').read_text())
    cells = plan_cells([Path(b.name) for b in bags], configs, output)
    # the tables name each bag relative to the study folder
    names = [os.path.relpath(bag, output) for bag in bags]
    assert [(r['bag'], r['config']) for r in rows] == [
        (names[0], 'default'), (names[0], 'small'), (names[1], 'default'), (names[1], 'small')]
    for cell, row in zip(cells, rows):
        assert row['status'] == 'ok' and not row['reused'] and row['key'] == cell.key
        plain = evaluate_bag(cell.bag, tmp_path / 'plain' / cell.folder.name,
                             load_config(cell.config.path), progress=False, plots=False)
        for key in ('ate_rmse_m', 'drift_percent', 'rpe_trans_rmse_m', 'frames_processed',
                    'keyframes'):
            assert row[key] == pytest.approx(plain[key], rel=1e-9), key
        assert (cell.folder / 'summary.json').is_file()
        assert json.loads((cell.folder / CELL_FILE).read_text())['key'] == cell.key

    # A rerun through the cluster computes nothing.
    stamps = [(c.folder / CELL_FILE).stat().st_mtime_ns for c in cells]
    assert main(argv) == 0
    again = json.loads((output / 'results.json').read_text())
    assert all(r['reused'] for r in again)
    assert [r['ate_rmse_m'] for r in again] == [r['ate_rmse_m'] for r in rows]
    assert stamps == [(c.folder / CELL_FILE).stat().st_mtime_ns for c in cells]


def _attempts(cell) -> Path:
    return cell.folder.parent / f'{cell.folder.name}.attempts'


def _die_in_worker(cell, mode, plots, threads):
    """Stand-in for run_cell_pinned: bag0's worker dies on the 1st attempt, bag1's always."""
    _attempts(cell).parent.mkdir(parents=True, exist_ok=True)
    with open(_attempts(cell), 'a', encoding='utf-8') as stream:
        stream.write('x')
    if cell.bag.name == 'bag1' or len(_attempts(cell).read_text()) == 1:
        os._exit(3)
    return study.run_cell(cell, mode, plots)


def test_a_ray_task_whose_worker_dies_is_retried_once_then_recorded(ray_head, study_inputs,
                                                                    tmp_path, monkeypatch):
    import ray.cloudpickle

    bags, configs = study_inputs
    cells = plan_cells(bags, configs[:1], tmp_path / 'out')
    # The workers cannot import this test module: ship the stand-in by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(study, 'run_cell_pinned', _die_in_worker)
    try:
        rows = run_study(cells, ray_address=ray_head)
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert rows[0]['status'] == 'ok' and rows[0]['ate_rmse_m'] > 0
    assert rows[1]['status'] == 'failed' and rows[1]['error'] == study.WORKER_DIED
    assert rows[1]['ate_rmse_m'] is None and not rows[1]['reused']
    assert [len(_attempts(c).read_text()) for c in cells] == [2, 1 + CELL_RETRIES]
    # The next run computes the failed cell only, with the real code.
    monkeypatch.undo()
    again = run_study(cells, ray_address=ray_head)
    assert [r['reused'] for r in again] == [True, False]
    assert [r['status'] for r in again] == ['ok', 'ok']


def test_an_address_where_no_head_listens_fails_at_once(study_inputs, tmp_path):
    bags, configs = study_inputs
    cells = plan_cells(bags[:1], configs[:1], tmp_path / 'out')
    started = time.monotonic()
    with pytest.raises(RuntimeError, match='no Ray cluster at'):
        run_study(cells, ray_address=f'127.0.0.1:{_free_port()}')
    assert time.monotonic() - started < 30.0   # ray.init alone would wait for minutes
    assert not (cells[0].folder / CELL_FILE).exists()
