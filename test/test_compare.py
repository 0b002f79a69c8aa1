# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of ``relperception compare``: a study runs eval's code path per cell, in parallel."""

import csv
import importlib.util
import json
import logging
import multiprocessing
import os
from pathlib import Path
import re
import shutil
import signal
import subprocess
import sys

from conftest import wait_for
import pytest

from relperception.cli.main import main
from relperception.config import load_config
from relperception.data.bag import BagReader, BagWriter
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.data.topics import GT_POSE
from relperception.evaluation.html_report import study_report
from relperception.evaluation.study_report import (aggregate, best_configuration, format_table,
                                                   pareto_front, recommend, write_results)
from relperception.pipeline import study
from relperception.pipeline.offline_eval import evaluate_bag
from relperception.pipeline.study import (CELL_FILE, load_study, parse_config_spec, plan_cells,
                                          run_study, study_folder_lock, StudyConfig)
from relperception.pipeline.study_ray import gpus_for_config


def write_study_inputs(root):
    """Write two small synthetic bags and a configuration; return (bags, configurations)."""
    bags = []
    for seed in (0, 1):
        bag = root / f'bag{seed}'
        write_synthetic_bag(bag, frames=12, seed=seed, width=320, height=240)
        bags.append(bag)
    small = root / 'small.yaml'
    small.write_text('ncc:\n  max_keypoints: 300\n')
    return bags, [StudyConfig('default'), StudyConfig('small', small)]


@pytest.fixture(scope='module')
def study_inputs(tmp_path_factory):
    """Two small synthetic bags and two configurations (defaults, fewer keypoints)."""
    root = tmp_path_factory.mktemp('study')
    bags, configs = write_study_inputs(root)
    return root, bags, configs


def test_dense_cells_score_the_dense_model_as_eval_dense(study_inputs, tmp_path):
    root, bags, configs = study_inputs
    vit = root / 'vit.yaml'
    vit.write_text('dense:\n  backbone: vit\n')
    output = tmp_path / 'out'
    code = main(['compare', '--bags', str(bags[0]), '--configs', 'default', f'vit={vit}',
                 '--dense', '--mode', 'mono', '-o', str(output), '--no-progress'])
    assert code == 0
    rows = json.loads((output / 'results.json').read_text())
    for row, config in zip(rows, (None, vit)):
        plain = evaluate_bag(bags[0], tmp_path / 'plain' / row['config'], load_config(config),
                             mode='mono', progress=False, plots=False, dense=True)['dense']
        assert row['dense_miou'] == pytest.approx(plain['segmentation']['miou'])
        assert row['dense_abs_rel'] == pytest.approx(plain['depth']['abs_rel'])
    assert rows[0]['dense_miou'] != rows[1]['dense_miou']   # conv and ViT differ
    assert 'Dense model' in (output / 'report.html').read_text()
    # a study without --dense has other keys: nothing is reused from the dense one
    cells = plan_cells([bags[0]], configs[:1], output)
    assert cells[0].key != rows[0]['key'] and not cells[0].dense


def test_every_cell_equals_a_plain_eval_and_a_rerun_reuses_them(study_inputs, tmp_path):
    root, bags, configs = study_inputs
    cells = plan_cells(bags, configs, tmp_path / 'out')
    assert [(c.bag.name, c.config.name) for c in cells] == [
        ('bag0', 'default'), ('bag0', 'small'), ('bag1', 'default'), ('bag1', 'small')]
    seen = []
    rows = run_study(cells, workers=2, on_row=seen.append)
    assert len(seen) == 4 and all(r['status'] == 'ok' and not r['reused'] for r in rows)
    for cell, row in zip(cells, rows):
        plain = evaluate_bag(cell.bag, tmp_path / 'plain' / cell.folder.name,
                             load_config(cell.config.path), progress=False, plots=False)
        for key in ('ate_rmse_m', 'drift_percent', 'frames_processed', 'keyframes'):
            assert row[key] == pytest.approx(plain[key], rel=1e-9), key
        assert (cell.folder / 'summary.json').is_file()
        assert json.loads((cell.folder / CELL_FILE).read_text())['key'] == cell.key
    assert rows[0]['config_hash'] != rows[1]['config_hash']
    assert rows[0]['bag_fingerprint'] != rows[2]['bag_fingerprint']

    # A rerun computes nothing; a changed configuration recomputes its own cells only.
    stamps = {c.folder: (c.folder / CELL_FILE).stat().st_mtime_ns for c in cells}
    again = run_study(plan_cells(bags, configs, tmp_path / 'out'))
    assert all(r['reused'] for r in again)
    assert [r['ate_rmse_m'] for r in again] == [r['ate_rmse_m'] for r in rows]
    assert stamps == {c.folder: (c.folder / CELL_FILE).stat().st_mtime_ns for c in cells}
    changed = tmp_path / 'changed.yaml'
    changed.write_text('ncc:\n  max_keypoints: 400\n')
    mixed = run_study(plan_cells(bags, [configs[0], StudyConfig('small', changed)],
                                 tmp_path / 'out'))
    assert [r['reused'] for r in mixed] == [True, False, True, False]


def test_a_failing_cell_is_recorded_and_the_others_finish(study_inputs, tmp_path):
    root, bags, configs = study_inputs
    broken = tmp_path / 'broken'
    broken.mkdir()
    (broken / 'metadata.yaml').write_text('not: a bag\n')
    # Monocular: the cell's worker process also starts the bundle-adjustment process, which
    # must not keep it from exiting.
    cells = plan_cells([bags[0], broken], configs[:1], tmp_path / 'out', mode='mono')
    rows = run_study(cells, mode='mono')
    assert rows[0]['status'] == 'ok' and rows[0]['ate_rmse_m'] > 0
    assert rows[1]['status'] == 'failed' and 'bag' in rows[1]['error']
    assert rows[1]['ate_rmse_m'] is None
    # A failed cell is computed again on the next run (it may have been a passing problem).
    assert [r['reused'] for r in run_study(cells, mode='mono')] == [True, False]


def test_a_killed_study_resumes_without_recomputing_finished_cells(study_inputs, tmp_path):
    root, bags, configs = study_inputs
    output = tmp_path / 'out'
    cells = plan_cells(bags, configs[:1], output)
    # The whole study (driver and its spawned worker) in a process group of its own, killed
    # with SIGKILL once the first cell is written: nothing of the study gets to clean up.
    study_run = subprocess.Popen(
        [sys.executable, '-c', 'import sys; from relperception.cli.main import main; '
         'sys.exit(main(sys.argv[1:]))', 'compare', '--bags', *map(str, bags),
         '--configs', 'default', '--workers', '1', '-o', str(output), '--no-progress'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for((cells[0].folder / CELL_FILE).is_file, timeout=180.0)
    finally:
        os.killpg(study_run.pid, signal.SIGKILL)
        study_run.wait(timeout=30)
    assert study_run.returncode == -signal.SIGKILL
    assert not (output / 'results.json').exists()   # killed before the study ended
    stamp = (cells[0].folder / CELL_FILE).stat().st_mtime_ns
    rows = run_study(cells, workers=1)
    assert [r['status'] for r in rows] == ['ok', 'ok']
    assert [r['reused'] for r in rows] == [True, False]
    assert (cells[0].folder / CELL_FILE).stat().st_mtime_ns == stamp


@pytest.mark.parametrize('to_group', [False, True], ids=['driver', 'process group'])
def test_ctrl_c_stops_a_study_and_its_workers(study_inputs, tmp_path, to_group):
    """SIGINT ends a study with 130 and leaves no worker behind.

    Sent to the driver alone (``kill -INT``, ``timeout -s INT``) or to its process group (a
    terminal's Ctrl-C). The pool used to go on with its queue and the driver then waited
    forever.
    """
    root, bags, configs = study_inputs
    output = tmp_path / 'out'
    specs = ['default', f'{configs[1].name}={configs[1].path}']
    for matcher in ('klt', 'orb'):
        (tmp_path / f'{matcher}.yaml').write_text(f'matcher: {matcher}\n')
        specs.append(str(tmp_path / f'{matcher}.yaml'))
    cells = plan_cells(bags, [parse_config_spec(spec) for spec in specs], output)
    study_run = subprocess.Popen(
        # Ctrl-C as a terminal delivers it: a test runner started in the background (nohup,
        # `&` in a script) passes SIGINT down ignored, and Python keeps it ignored
        [sys.executable, '-c', 'import signal, sys; '
         'signal.signal(signal.SIGINT, signal.default_int_handler); '
         'from relperception.cli.main import main; '
         'sys.exit(main(sys.argv[1:]))', 'compare', '--bags', *map(str, bags), '--configs',
         *specs, '--workers', '1', '-o', str(output), '--no-progress'],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)

    def finished():
        return sum((c.folder / CELL_FILE).is_file() for c in cells)

    try:
        assert wait_for(lambda: finished() > 0, timeout=180.0)
        before = finished()
        (os.killpg if to_group else os.kill)(study_run.pid, signal.SIGINT)
        _, stderr = study_run.communicate(timeout=60)
    finally:
        if study_run.poll() is None:
            os.killpg(study_run.pid, signal.SIGKILL)

    def group_gone():
        try:
            os.killpg(study_run.pid, 0)
        except ProcessLookupError:
            return True
        return False

    assert study_run.returncode == 130
    assert wait_for(group_gone, timeout=30.0)   # no worker or bundle-adjustment process left
    assert b'Traceback' not in stderr and b'leaked' not in stderr
    assert not (output / 'results.json').exists()
    # the queue stopped: at most the cell that was running then finished. A SIGTERM that met
    # the worker between two cells used to be taken by the pool's worker loop for the cell's
    # result, and the pool's manager thread, which cancels the queue only while the driver
    # still holds the executor, then handed it every queued cell: all 8 ran
    assert finished() <= before + 1 < len(cells)


def test_a_bug_in_the_driver_stops_the_queue(study_inputs, tmp_path):
    root, bags, configs = study_inputs
    specs = [configs[0], configs[1]]
    for matcher in ('klt', 'orb'):
        (tmp_path / f'{matcher}.yaml').write_text(f'matcher: {matcher}\n')
        specs.append(parse_config_spec(str(tmp_path / f'{matcher}.yaml')))
    cells = plan_cells(bags, specs, tmp_path / 'out')

    def bug(row):
        raise KeyError('a bug in the code that records a row')

    with pytest.raises(KeyError, match='a bug'):
        run_study(cells, workers=1, on_row=bug)
    for worker in multiprocessing.active_children():   # the pool went on with its queue
        worker.join(timeout=60.0)
    # the cell whose row met the bug, the one running then and the two already handed to the
    # worker (the pool queues workers + 1 calls); the pool used to run all 8
    finished = sum((c.folder / CELL_FILE).is_file() for c in cells)
    assert finished <= 4 < len(cells)


class _SigtermWhenSent:
    """A value whose pickling, as the pool worker sends its cell's row back, SIGTERMs it."""

    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        return (str, ('sent',))


def _sigterm_while_the_row_is_sent(cell, mode, plots):
    """Stand-in for run_cell in a pool worker: SIGTERM arrives between this cell and the next."""
    return {**study.run_cell(cell, mode, plots), 'probe': _SigtermWhenSent()}


def test_a_sigterm_between_two_cells_stops_the_worker(study_inputs, tmp_path, monkeypatch):
    root, bags, configs = study_inputs
    cells = plan_cells(bags, configs, tmp_path / 'out')
    monkeypatch.setattr(study, 'run_cell', _sigterm_while_the_row_is_sent)
    # the pool's worker loop takes what its SIGTERM raised while it sent the row back for the
    # cell's result: the driver gets that, and the worker goes on with its call queue
    with pytest.raises(SystemExit):
        run_study(cells, workers=1)
    # only the cell that had ended; the worker used to run the two calls queued to it as well
    assert sum((c.folder / CELL_FILE).is_file() for c in cells) == 1 < len(cells)


def _exit_on_doomed_bag(cell, mode, plots):
    """Stand-in for run_cell in a pool worker: the worker process dies on the bag 'doomed'."""
    if cell.bag.name == 'doomed':
        os._exit(3)
    return study.run_cell(cell, mode, plots)


def test_a_cell_that_kills_its_pool_worker_fails_alone(study_inputs, tmp_path, monkeypatch,
                                                       caplog):
    root, bags, configs = study_inputs
    doomed = tmp_path / 'doomed'
    shutil.copytree(bags[0], doomed)
    cells = plan_cells([doomed, bags[1]], configs[:1], tmp_path / 'out')
    # Workers are spawned: they import this module and run the stand-in by reference.
    monkeypatch.setattr(study, 'run_cell', _exit_on_doomed_bag)
    with caplog.at_level(logging.WARNING, logger='relperception.pipeline.study'):
        rows = run_study(cells, workers=2)
    # The cells the broken pool had not finished (the doomed one at least; the other one too
    # unless it finished before the pool broke) ran again alone; the doomed one died again.
    rerun = re.search(r'a worker process died: (\d+) cells run again', caplog.text)
    assert rerun and int(rerun.group(1)) in (1, 2)
    assert rows[0]['status'] == 'failed' and rows[0]['error'] == study.WORKER_DIED
    # the row's bag is relative to the study folder (tmp_path / 'out'), as in results.csv
    assert rows[0]['bag'] == '../doomed' and rows[0]['ate_rmse_m'] is None
    assert rows[1]['status'] == 'ok' and rows[1]['ate_rmse_m'] > 0


def test_the_ray_executor_without_ray_says_how_to_install_it(study_inputs, tmp_path,
                                                             monkeypatch):
    root, bags, configs = study_inputs
    monkeypatch.setitem(sys.modules, 'ray', None)   # import ray raises ImportError
    cells = plan_cells(bags[:1], configs[:1], tmp_path / 'out')
    with pytest.raises(RuntimeError, match=r"pip install 'ray\[default\]'"):
        run_study(cells, ray_address='auto')
    assert main(['compare', '--bags', str(bags[0]), '--configs', 'default', '--ray', 'auto',
                 '-o', str(tmp_path / 'out'), '--no-progress']) == 1


def test_a_cell_reserves_a_gpu_only_when_its_matcher_runs_on_cuda():
    assert gpus_for_config(load_config()) == 0
    loftr = load_config(overrides={'matcher': 'loftr'})
    assert gpus_for_config(loftr) == 0
    assert gpus_for_config({**loftr, 'loftr.device': 'cuda:1'}) == 1
    assert gpus_for_config({**loftr, 'loftr.backend': 'tensorrt'}) == 1
    assert gpus_for_config({**loftr, 'loftr.backend': 'onnxruntime'}) == 0
    assert gpus_for_config({**loftr, 'matcher': 'ncc', 'loftr.device': 'cuda'}) == 0
    dense_cuda = {**load_config(), 'dense.device': 'cuda'}
    assert gpus_for_config(dense_cuda) == 0 and gpus_for_config(dense_cuda, dense=True) == 1


def test_cli_writes_tables_and_recommendation(study_inputs, tmp_path, capsys):
    root, bags, configs = study_inputs
    study = tmp_path / 'study.yaml'
    study.write_text(f'bags: [{bags[0]}]\nconfigs:\n  default: default\n'
                     f'  small: {configs[1].path}\nmode: rgbd\n')
    output = tmp_path / 'out'
    code = main(['compare', '--study', str(study), '--bags', str(bags[1]), '-o', str(output),
                 '--no-progress'])
    assert code == 0
    printed = capsys.readouterr().out
    assert 'criterion: lowest median ATE' in printed and 'small' in printed
    lines = (output / 'results.csv').read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith('bag,config,')
    summary = json.loads((output / 'aggregate.json').read_text())
    assert [a['config'] for a in summary['configurations']] == ['default', 'small']
    assert all(a['ok'] == 2 for a in summary['configurations'])
    results = json.loads((output / 'results.json').read_text())
    assert all(r['mode'] == 'rgbd' for r in results)
    if importlib.util.find_spec('pyarrow') is None:
        assert not (output / 'results.parquet').exists()
    else:   # the same rows, values and types as results.json
        import pyarrow.parquet

        assert pyarrow.parquet.read_table(output / 'results.parquet').to_pylist() == results
    report = (output / 'report.html').read_text()
    assert 'criterion: lowest median ATE' in report and 'data:image/png;base64,' in report
    assert report.count('cells/') >= 4 and 'relperception compare --study' in report
    assert main(['compare', '--bags', str(tmp_path / 'missing'), '--configs', 'default',
                 '-o', str(output)]) == 1   # a clear message, no traceback


def _strict_json(path):
    """Parse a JSON file, refusing NaN / Infinity (not JSON; browsers and jq reject them)."""
    def refuse(constant):
        raise ValueError(f'{path.name} has {constant}')
    return json.loads(path.read_text(encoding='utf-8'), parse_constant=refuse)


def test_undefined_metrics_are_written_as_null_not_nan(study_inputs, tmp_path):
    # ground truth that never moves: the path length is 0 and the drift undefined (NaN)
    root, bags, configs = study_inputs
    parked = tmp_path / 'parked'
    with BagReader(bags[0]) as reader, BagWriter(parked) as writer:
        first = None
        for m in reader.messages():
            msg = m.msg
            if m.topic == GT_POSE:
                first = first or msg.pose
                msg = type(msg)(header=msg.header, pose=first)
            writer.write_message(m.topic, m.msgtype, m.log_time_ns, msg)
    cells = plan_cells([parked], configs[:1], tmp_path / 'out')
    rows = run_study(cells)
    assert rows[0]['status'] == 'ok' and rows[0]['drift_percent'] is None
    assert _strict_json(cells[0].folder / CELL_FILE)['drift_percent'] is None
    # a row read back from an older cell.json may still hold NaN
    rows.append({**rows[0], 'config': 'old', 'drift_percent': float('nan')})
    write_results(rows, aggregate(rows, ['default', 'old']), 'line', tmp_path / 'out')
    assert [r['drift_percent'] for r in _strict_json(tmp_path / 'out' / 'results.json')] \
        == [None, None]
    _strict_json(tmp_path / 'out' / 'aggregate.json')
    assert 'nan' not in (tmp_path / 'out' / 'results.csv').read_text().lower()


def test_every_link_of_the_report_opens_also_after_the_folder_moved(study_inputs, tmp_path):
    root, bags, configs = study_inputs
    not_a_bag = tmp_path / 'notes'
    not_a_bag.mkdir()
    (not_a_bag / 'readme.txt').write_text('not a recording')
    output = tmp_path / 'study ü'
    assert main(['compare', '--bags', str(bags[0]), str(not_a_bag), '--configs', 'default',
                 '-o', str(output), '--no-progress']) == 0
    moved = tmp_path / 'elsewhere' / 'moved study'
    moved.parent.mkdir()
    output.rename(moved)
    links = re.findall(r'href="([^"]+)"', (moved / 'report.html').read_text())
    assert len(links) == 2
    # the failed cell's folder has only cell.json: its link went to a missing summary.json
    assert all((moved / link).is_file() for link in links), links


def test_a_second_study_into_a_folder_in_use_is_refused(study_inputs, tmp_path, caplog):
    # Two compares into one folder computed the same cells into the same cell folders at once,
    # and the one that ended last replaced the other's results.json, table and report.
    root, bags, configs = study_inputs
    output = tmp_path / 'out'
    with study_folder_lock(output):   # a compare running in another process holds it so
        with caplog.at_level(logging.ERROR):
            assert main(['compare', '--bags', str(bags[0]), '--configs', 'default', '-o',
                         str(output), '--no-progress']) == 1
    assert f'in use by another compare (pid {os.getpid()})' in caplog.text
    assert not (output / 'cells').exists() and not (output / 'results.json').exists()
    with study_folder_lock(output):   # released with the block
        pass


def _row(bag, config, ate, ms=10.0, status='ok'):
    return {'bag': bag, 'config': config, 'status': status, 'ate_rmse_m': ate,
            'timing_median_ms': ms, 'drift_percent': 1.0}


def test_results_parquet_round_trips_failed_cells_and_mixed_numbers(tmp_path):
    parquet = pytest.importorskip('pyarrow.parquet')
    rows = [_row('a', 'x', 0.2, ms=10), _row('a', 'y', None, ms=None, status='failed'),
            _row('b', 'x', 1, ms=12.5)]
    rows[1]['error'] = 'the worker process died'
    written = write_results(rows, aggregate(rows, ['x', 'y']), 'line', tmp_path)
    back = parquet.read_table(written['results.parquet']).to_pylist()
    assert back == [{'error': None, **r} for r in rows]
    assert back[1]['ate_rmse_m'] is None and back[2]['ate_rmse_m'] == 1.0


def test_aggregate_ranks_per_bag_and_counts_failures():
    rows = [_row('a', 'x', 0.2), _row('a', 'y', 0.1), _row('b', 'x', 0.1), _row('b', 'y', 0.3),
            _row('c', 'x', 0.5), _row('c', 'y', None, status='failed')]
    x, y = aggregate(rows, ['x', 'y'])
    assert (x['ok'], x['failed'], y['ok'], y['failed']) == (3, 0, 2, 1)
    assert x['ate_rmse_m_median'] == pytest.approx(0.2)
    assert y['ate_rmse_m_mean'] == pytest.approx(0.2)
    # y failed on c: ranked last there, behind x
    assert x['mean_rank'] == pytest.approx(4 / 3) and y['mean_rank'] == pytest.approx(5 / 3)


def test_the_table_compares_configurations_on_the_bags_all_of_them_succeeded_on():
    # 'fragile' fails on the two hard bags: over its own bags its median ATE (0.1) looked
    # better than the robust one's (0.3), and it stood highlighted as the best row of the
    # report while the recommendation named `robust`
    rows = [_row('easy1', 'robust', 0.1, 20), _row('easy1', 'fragile', 0.1, 20),
            _row('easy2', 'robust', 0.1, 20), _row('easy2', 'fragile', 0.1, 20),
            _row('hard1', 'robust', 0.5, 20), _row('hard1', 'fragile', None, status='failed'),
            _row('hard2', 'robust', 0.6, 20), _row('hard2', 'fragile', None, status='failed'),
            _row('broken', 'robust', None, status='failed'),
            _row('broken', 'fragile', None, status='failed')]
    robust, fragile = aggregate(rows, ['robust', 'fragile'])
    assert fragile['ate_rmse_m_median'] < robust['ate_rmse_m_median']   # own bags
    assert robust['common_bags'] == 2 and robust['bags'] == 5 and robust['ranked_bags'] == 4
    assert robust['ate_rmse_m_median_common'] == fragile['ate_rmse_m_median_common'] == 0.1
    assert robust['mean_rank'] == pytest.approx((1.5 + 1.5 + 1 + 1) / 4)
    assert fragile['mean_rank'] == pytest.approx((1.5 + 1.5 + 2 + 2) / 4)
    table = format_table([robust, fragile])
    assert table.startswith('medians over the 2 of 5 bags where every configuration has an '
                            'ATE; mean rank over the 4 bags')
    assert best_configuration([robust, fragile]) == 'robust'
    report = study_report(rows, [robust, fragile], 'line', [], Path('.'))
    assert '<tr class="best"><td>robust</td>' in report and 'medians over the 2 of 5' in report


def test_dense_figures_are_compared_on_the_bags_every_configuration_scored():
    # 'vit' ran out of memory on the large bag, where depth is hardest; 'parked' has depth but
    # no ground-truth pose, so no ATE: it counts for the dense figures all the same
    rows = [{**_row('small', 'conv', 0.1), 'dense_abs_rel': 0.10},
            {**_row('small', 'vit', 0.1), 'dense_abs_rel': 0.08},
            {**_row('large', 'conv', 0.1), 'dense_abs_rel': 0.30},
            {**_row('large', 'vit', 0.1), 'dense_abs_rel': None},
            {**_row('parked', 'conv', None), 'dense_abs_rel': 0.12},
            {**_row('parked', 'vit', None), 'dense_abs_rel': 0.09}]
    conv, vit = aggregate(rows, ['conv', 'vit'])
    assert conv['dense_abs_rel_median'] == pytest.approx(0.12)   # own bags: worse than vit...
    assert conv['dense_abs_rel_median_common'] == pytest.approx(0.11)   # ...on the same: too
    assert vit['dense_abs_rel_median_common'] == pytest.approx(0.085)
    report = study_report(rows, [conv, vit], 'line', [], Path('.'))
    assert '<td>conv</td><td>n/a</td><td>n/a</td><td>0.11</td>' in report


def test_equal_median_ate_is_a_tie_that_the_faster_configuration_wins():
    rows = [_row('a', 'ref', 0.2, 10), _row('a', 'same', 0.2, 8), _row('a', 'copy', 0.2, 10),
            _row('b', 'ref', 0.4, 10), _row('b', 'same', 0.4, 8), _row('b', 'copy', 0.4, 10)]
    line = recommend(aggregate(rows, ['ref', 'same', 'copy']))
    # was: '`ref` (the reference) has the lowest median ATE; the fastest, `same`, takes 0.8x
    # its time per frame at 1x its median ATE'
    assert line.startswith('on these 2 bags, `same` has the same median ATE as `ref` (0.3 m) '
                           'at 0.8x the time per frame; `copy` has the same median ATE;')
    assert recommend(aggregate(rows[:1] + rows[2:4] + rows[5:], ['ref', 'copy'])).startswith(
        'on these 2 bags, `ref` (the reference) has the lowest median ATE (0.3 m); `copy` has '
        'the same median ATE;')
    # no time per frame known: no 'nanx' in the line
    untimed = [{**r, 'timing_median_ms': None} for r in rows]
    assert 'nan' not in recommend(aggregate(untimed, ['ref', 'same']))


def test_tied_configurations_share_their_rank():
    # identical configurations under two names give identical ATEs: neither is ranked above
    rows = [_row('a', 'x', 0.2), _row('a', 'x_copy', 0.2), _row('a', 'z', 0.1),
            _row('b', 'x', 0.3), _row('b', 'x_copy', 0.3), _row('b', 'z', 0.4)]
    x, x_copy, z = aggregate(rows, ['x', 'x_copy', 'z'])
    assert x['mean_rank'] == x_copy['mean_rank'] == pytest.approx((2.5 + 1.5) / 2)
    assert z['mean_rank'] == pytest.approx((1 + 3) / 2)


def test_recommendation_states_its_criterion():
    rows = [_row('a', 'ref', 0.2, 10), _row('a', 'new', 0.1, 90),
            _row('b', 'ref', 0.4, 10), _row('b', 'new', 0.2, 90),
            _row('c', 'ref', 9.0), _row('c', 'new', None, status='failed')]
    line = recommend(aggregate(rows, ['ref', 'new']))
    assert line.startswith('on these 2 bags, `new` lowers median ATE by 50 % against `ref`')
    assert '9x the time per frame' in line and 'criterion' in line
    assert '(the reference)' in recommend(aggregate(rows, ['new', 'ref']))
    # the trade-off against the fastest configuration is stated
    assert 'the fastest, `ref`, takes 0.11x its time per frame at 2x its median ATE' in line
    assert 'no bag where every' in recommend(aggregate(rows[4:], ['ref', 'new']))
    assert 'nothing to compare' in recommend(aggregate(rows, ['ref']))


def test_no_recommendation_says_why():
    # all three said only 'no bag where every configuration has an ATE: no recommendation'
    failed = [_row(bag, name, None, status='failed') for bag in 'ab' for name in ('x', 'y')]
    assert recommend(aggregate(failed, ['x', 'y'])).startswith(
        'every cell failed (4 of 4; see the error column of results.csv)')
    assert recommend(aggregate(failed[::2], ['x'])).startswith('every cell failed (2 of 2')
    untracked = [_row(bag, name, None) for bag in 'ab' for name in ('x', 'y')]
    assert recommend(aggregate(untracked, ['x', 'y'])).startswith(
        'no cell has an ATE (no ground truth')
    reference_failed = [_row(bag, 'x', None, status='failed') for bag in 'ab'] + [
        _row(bag, 'y', 0.1) for bag in 'ab']
    assert recommend(aggregate(reference_failed, ['x', 'y'])) == (
        'no bag where every configuration has an ATE: no recommendation; `x` has no ATE on any '
        'bag (failed or not scored; see results.csv)')


def test_the_recommendation_reads_the_aggregates_it_is_given():
    # it recomputed them from the rows: the table and the line could disagree
    rows = [_row('a', 'ref', 0.2, 10), _row('a', 'new', 0.1, 20)]
    aggregates = aggregate(rows, ['ref', 'new'])
    assert recommend(aggregates).startswith('on these 1 bag, `new` lowers median ATE by 50 %')
    aggregates[1]['ate_rmse_m_median_common'] = 0.3
    assert recommend(aggregates).startswith('on these 1 bag, `ref` (the reference) has the '
                                            'lowest median ATE (0.2 m)')
    for entry in aggregates:
        entry['ate_rmse_m_median_common'] = entry['ate_rmse_m_median'] = None
    assert recommend(aggregates).startswith('no cell has an ATE')


def test_pareto_front_keeps_the_unbeaten():
    def entry(name, ate, ms):
        return {'config': name, 'ate_rmse_m_median_common': ate,
                'timing_median_ms_median_common': ms}

    entries = [entry('slow_good', 0.1, 90), entry('fast_bad', 0.3, 10), entry('beaten', 0.3, 50),
               entry('failed', None, 5)]
    assert pareto_front(entries) == ['slow_good', 'fast_bad']


def test_named_default_and_empty_file_specs():
    """--configs base=default names the defaults, as a study file's base: default does.

    It looked for a file named default, and base= for the current folder.
    """
    assert parse_config_spec('base=default') == StudyConfig('base')
    with pytest.raises(ValueError, match="'base=' has no file"):
        parse_config_spec('base=')


def test_bad_study_inputs_raise_value_errors(study_inputs, tmp_path):
    root, bags, configs = study_inputs
    with pytest.raises(ValueError, match='does not exist'):
        parse_config_spec(str(tmp_path / 'none.yaml'))
    assert parse_config_spec(f'fast={configs[1].path}').name == 'fast'
    assert parse_config_spec(str(configs[1].path)).name == 'small'
    with pytest.raises(ValueError, match='unique'):
        plan_cells(bags, [configs[0], configs[0]], tmp_path)
    # 'a b' and 'a_b' shared the folder cells/<bag>__a_b: one row linked the other's results
    with pytest.raises(ValueError, match='unique as folder names'):
        plan_cells(bags, [StudyConfig('a b', configs[1].path), StudyConfig('a_b')], tmp_path)
    with pytest.raises(ValueError, match='at least one'):
        plan_cells([], configs, tmp_path)
    with pytest.raises(ValueError, match='workers'):
        run_study([], workers=0)
    with pytest.raises(ValueError, match='cpus_per_cell'):
        run_study([], ray_address='auto', cpus_per_cell=0)
    with pytest.raises(ValueError, match='ray_address'):
        run_study([], ray_address=' ')
    study = tmp_path / 'study.yaml'
    study.write_text('bags: []\nconfigs: {a: default}\n')
    with pytest.raises(ValueError, match='bags'):
        load_study(study)
    bag = os.path.relpath(bags[0], tmp_path)
    for extra, message in (('mdoe: mono\n', 'unknown key.s. mdoe'),
                           ('mode: bogus\n', 'mode: must be one of auto, rgbd, mono'),
                           ('mode: mono\nmode: rgbd\n', "key 'mode' is given twice")):
        study.write_text(f'bags: [{bag}]\nconfigs: {{a: default}}\n{extra}')
        with pytest.raises(ValueError, match=message):
            load_study(study)
    study.write_text(f'bags: [{bag}]\nconfigs: {{a: default}}\n')
    loaded_bags, loaded_configs, _ = load_study(study)
    assert loaded_bags == [tmp_path / os.path.relpath(bags[0], tmp_path)]
    assert loaded_configs == [StudyConfig('a')]


def test_bags_of_one_name_from_several_robots_get_their_own_cells(study_inputs, tmp_path):
    # robot_a/run1 and robot_b/run1 were refused ('bag names must be unique'); the same bag
    # given twice (once through a symlink) would have been evaluated twice
    root, bags, configs = study_inputs
    runs = []
    for robot, bag in zip(('robot_a', 'robot_b'), bags):
        (tmp_path / robot).mkdir()
        runs.append(tmp_path / robot / 'run1')
        shutil.copytree(bag, runs[-1])
    (tmp_path / 'latest').symlink_to(bags[0])   # named by the link, not its target
    cells = plan_cells([*runs, tmp_path / 'latest'], configs[:1], tmp_path / 'out')
    assert [c.folder.name for c in cells] == ['robot_a_run1__default', 'robot_b_run1__default',
                                              'latest__default']
    rows = run_study(cells[:2])
    assert [r['status'] for r in rows] == ['ok', 'ok']
    assert rows[0]['ate_rmse_m'] != rows[1]['ate_rmse_m']   # each its own bag
    with pytest.raises(ValueError, match='given twice'):
        plan_cells([bags[0], tmp_path / 'latest'], configs[:1], tmp_path)


def test_a_changed_weights_file_changes_the_cell_key(study_inputs, tmp_path):
    """A rerun reused the cells of weights that had been replaced under the same path."""
    root, bags, _ = study_inputs
    weights = tmp_path / 'mine.safetensors'
    weights.write_bytes(b'first')
    config = tmp_path / 'mine.yaml'
    config.write_text(f'matcher: loftr\nloftr:\n  weights: {weights}\n')
    before = plan_cells(bags[:1], [parse_config_spec(str(config))], tmp_path / 'out')[0].key
    assert plan_cells(bags[:1], [parse_config_spec(str(config))],
                      tmp_path / 'out')[0].key == before
    weights.write_bytes(b'second, longer')
    assert plan_cells(bags[:1], [parse_config_spec(str(config))],
                      tmp_path / 'out')[0].key != before


def test_a_bag_folder_and_its_own_storage_file_are_one_bag(study_inputs, tmp_path):
    root, bags, configs = study_inputs
    storage = next(bags[0].glob('*.mcap'))
    for given in ([bags[0], storage], [storage, bags[0]]):
        with pytest.raises(ValueError, match='given twice'):
            plan_cells(given, configs[:1], tmp_path)
    # a storage file of another folder is another bag
    assert len(plan_cells([bags[0], next(bags[1].glob('*.mcap'))], configs[:1], tmp_path)) == 2


def test_results_paths_are_relative_to_the_study_folder(study_inputs, tmp_path, monkeypatch):
    root, bags, configs = study_inputs
    work = tmp_path / 'work'
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(['compare', '--bags', os.path.relpath(bags[0], work), '--configs',
                 f'small={os.path.relpath(configs[1].path, work)}', '-o', 'runs/study',
                 '--no-progress']) == 0
    output = work / 'runs' / 'study'
    monkeypatch.chdir(tmp_path)   # read from elsewhere
    rows = json.loads((output / 'results.json').read_text())
    with open(output / 'results.csv', newline='') as stream:
        rows_csv = list(csv.DictReader(stream))
    for row in (rows[0], rows_csv[0]):
        assert row['cell_dir'] == 'cells/bag0__small'
        assert (output / row['cell_dir'] / 'summary.json').is_file()
        assert (output / row['bag']).resolve() == bags[0].resolve()
        assert (output / row['config_file']).resolve() == configs[1].path.resolve()
