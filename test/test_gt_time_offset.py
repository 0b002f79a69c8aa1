# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Ground truth stamped with a time offset to the images: applied (--gt-time-offset), estimated.

Recordings from ``write_synthetic_bag`` whose ground-truth poses are copied, with the project's
bag writer, 0.3 s late: before, eval only said "ground truth covers only K of N frames" and
scored the poses against the wrong times.
"""

import math
import os

import pytest

from relperception.cli.main import main as cli_main
from relperception.data.bag import BagReader, BagWriter
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.pipeline.offline_eval import evaluate_bag
from relperception.transforms import transform_from_quaternion_xyzw

SHIFT_S = 0.3
GT_TOPIC = '/ground_truth/pose'


@pytest.fixture(scope='module')
def shifted_bag(tmp_path_factory):
    folder = tmp_path_factory.mktemp('gt_offset')
    write_synthetic_bag(folder / 'synth', frames=30, width=160, height=120)
    shift_ns = round(SHIFT_S * 1e9)
    with BagReader(folder / 'synth') as reader, BagWriter(folder / 'late') as writer:
        for message in reader.messages():
            if message.topic != GT_TOPIC:
                writer.write_message(message.topic, message.msgtype, message.log_time_ns,
                                     message.msg)
                continue
            header, pose = message.msg.header, message.msg.pose
            stamp = header.stamp.sec * 1_000_000_000 + header.stamp.nanosec + shift_ns
            T = transform_from_quaternion_xyzw(
                [pose.position.x, pose.position.y, pose.position.z],
                [pose.orientation.x, pose.orientation.y, pose.orientation.z,
                 pose.orientation.w])
            writer.write_pose(GT_TOPIC, stamp, T, header.frame_id)
    return folder / 'late'


def test_offset_is_estimated_and_named(shifted_bag, tmp_path):
    summary = evaluate_bag(shifted_bag, tmp_path, progress=False, plots=False)
    assert summary['gt_time_offset_s'] == 0.0
    # within a quarter of the 10 Hz frame interval
    assert summary['gt_time_offset_estimate_s'] == pytest.approx(-SHIFT_S, abs=0.025)
    assert summary['gt_time_offset_correlation'] > 0.9
    assert any('--gt-time-offset -0.3' in text for text in summary['errors']), summary['errors']


def test_monocular_offset_found_and_no_false_alarm(shifted_bag, tmp_path):
    """Monocular speed wanders with the scale: only the angular rate tells the offset."""
    late = evaluate_bag(shifted_bag, tmp_path / 'late', mode='mono', progress=False,
                        plots=False)
    assert late['gt_time_offset_estimate_s'] == pytest.approx(-SHIFT_S, abs=0.025)
    write_synthetic_bag(tmp_path / 'in_sync', frames=40, width=160, height=120)
    in_sync = evaluate_bag(tmp_path / 'in_sync', tmp_path / 'in_sync_eval', mode='mono',
                           progress=False, plots=False)
    assert in_sync['gt_time_offset_estimate_s'] == 0.0
    assert not any('offset in time' in text for text in in_sync['errors']), in_sync['errors']


def test_offset_applied(shifted_bag, tmp_path):
    late = evaluate_bag(shifted_bag, tmp_path / 'late', progress=False, plots=False)
    fixed = evaluate_bag(shifted_bag, tmp_path / 'fixed', progress=False, plots=False,
                         gt_time_offset_s=-SHIFT_S)
    assert fixed['frames_with_ground_truth'] == fixed['frames_processed']
    assert late['frames_with_ground_truth'] < late['frames_processed']
    assert fixed['ate_rmse_m'] < late['ate_rmse_m'] * 0.6
    assert fixed['gt_time_offset_estimate_s'] == pytest.approx(-SHIFT_S, abs=0.01)
    assert not any('offset in time' in text for text in fixed['errors']), fixed['errors']


def test_cli_option_and_bad_values(shifted_bag, tmp_path, caplog):
    assert cli_main(['eval', str(shifted_bag), '-o', str(tmp_path / 'nan'), '--no-progress',
                     '--no-plots', '--gt-time-offset', 'nan']) != 0
    assert 'gt_time_offset_s must be finite' in caplog.text
    with pytest.raises(ValueError, match='gt_time_offset_s'):
        evaluate_bag(shifted_bag, tmp_path / 'inf', progress=False, gt_time_offset_s=math.inf)


def test_an_offset_past_the_recording_or_int64_is_named(shifted_bag, tmp_path, caplog):
    """Offsets that move every ground-truth stamp away from the frames: a clear error."""
    summary = evaluate_bag(shifted_bag, tmp_path / 'far', progress=False, plots=False,
                           max_frames=5, gt_time_offset_s=100.0)
    assert summary['ate_rmse_m'] is None and summary['frames_with_ground_truth'] == 0
    assert summary['gt_time_offset_s'] == 100.0
    named = [e for e in summary['errors'] if 'does not cover the frames' in e]
    assert len(named) == 1 and 'time offset of +100 s added' in named[0], summary['errors']
    # stamps + offset past int64 nanoseconds: was an OverflowError (or stamps wrapped around)
    summary = evaluate_bag(shifted_bag, tmp_path / 'overflow', progress=False, plots=False,
                           max_frames=5, gt_time_offset_s=8e9)
    assert summary['ate_rmse_m'] is None and summary['ground_truth_poses'] == 0
    assert summary['num_errors'] == 1 and 'out of the int64 nanosecond range' in \
        summary['errors'][0]
    # an offset that is no int64 nanoseconds at all: refused before anything is read
    assert cli_main(['eval', str(shifted_bag), '-o', str(tmp_path / 'huge'), '--no-progress',
                     '--no-plots', '--gt-time-offset', '1e12']) == 1
    assert 'gt_time_offset_s must lie within' in caplog.text
    assert 'internal error' not in caplog.text and 'Traceback' not in caplog.text


def test_the_ground_truth_reader_applies_and_checks_the_offset(shifted_bag):
    """read_camera_ground_truth adds offset_ns itself (eval and replay no longer add it)."""
    import numpy as np

    from relperception.config import DEFAULT_BASE_FRAME_ID
    from relperception.data.bag_frames import read_camera_ground_truth
    from relperception.data.error_log import ErrorLog

    with BagReader(shifted_bag) as reader:
        def read(**offset):
            return read_camera_ground_truth(reader, GT_TOPIC, ErrorLog(), None,
                                            DEFAULT_BASE_FRAME_ID, np.eye(4), **offset)[0]

        plain = read()
        assert np.array_equal(read(offset_ns=-300_000_000), plain - 300_000_000)
        assert np.array_equal(read(offset_ns=np.int64(5)), plain + 5)
        for bad in (0.5, True, '1', None):
            with pytest.raises(ValueError, match='offset_ns must be an integer'):
                read(offset_ns=bad)


def test_estimate_from_denser_ground_truth_in_another_frame_and_scale():
    """Ground truth at 100 Hz, frames at 30 Hz: scale and world frame do not matter."""
    import numpy as np
    from scipy.spatial.transform import Rotation

    from relperception.evaluation.trajectory import estimate_time_offset

    def poses_at(seconds):
        T = np.tile(np.eye(4), (len(seconds), 1, 1))
        T[:, :3, :3] = Rotation.from_rotvec(
            np.c_[0.1 * np.sin(1.3 * seconds), 0.4 * np.sin(0.7 * seconds),
                  0 * seconds]).as_matrix()
        T[:, :3, 3] = np.c_[np.sin(0.5 * seconds), 0 * seconds, 0.3 * seconds ** 1.5]
        return T

    gt_seconds = np.arange(0.0, 12.0, 0.01)
    frame_seconds = np.arange(1.0, 11.0, 1 / 30)
    T_other_world = np.eye(4)
    T_other_world[:3, :3] = Rotation.from_rotvec([0.3, -1.0, 0.2]).as_matrix()
    T_other_world[:3, 3] = [4.0, -2.0, 1.0]
    estimate = T_other_world @ poses_at(frame_seconds)
    estimate[:, :3, 3] *= 0.37   # monocular scale
    # the ground truth is stamped SHIFT_S late
    found = estimate_time_offset(np.round(frame_seconds * 1e9).astype(np.int64), estimate,
                                 np.round((gt_seconds + SHIFT_S) * 1e9).astype(np.int64),
                                 poses_at(gt_seconds), search_s=1.0)
    assert found['offset_s'] == pytest.approx(-SHIFT_S, abs=0.005)
    assert found['correlation'] > 0.99 > found['correlation_at_zero']
    # no motion change to correlate: nothing is claimed
    still = np.tile(np.eye(4), (len(frame_seconds), 1, 1))
    assert estimate_time_offset(np.round(frame_seconds * 1e9).astype(np.int64), still,
                                np.round(gt_seconds * 1e9).astype(np.int64),
                                np.tile(np.eye(4), (len(gt_seconds), 1, 1)), 1.0) is None


def test_compare_applies_an_offset_per_bag_and_keys_cells_by_it(shifted_bag, tmp_path):
    import csv

    from relperception.pipeline.study import plan_cells, StudyConfig

    output = tmp_path / 'study'
    assert cli_main(['compare', '--bags', str(shifted_bag), '--configs', 'default', '-o',
                     str(output), '--no-progress',
                     '--gt-time-offset', f'{shifted_bag}=-{SHIFT_S}']) == 0
    with open(output / 'results.csv', newline='', encoding='utf-8') as stream:
        row, = csv.DictReader(stream)
    assert float(row['gt_time_offset_s']) == -SHIFT_S
    assert float(row['gt_time_offset_estimate_s']) == pytest.approx(-SHIFT_S, abs=0.01)
    summary = (output / row['cell_dir'] / 'summary.json').read_text()
    assert 'offset in time' not in summary
    # the offset is part of the cell's key: no result of another offset is reused
    configs = [StudyConfig('default')]
    keys = {offset: plan_cells([shifted_bag], configs, output,
                               gt_time_offsets=[offset])[0].key for offset in (0.0, -SHIFT_S)}
    assert keys[-SHIFT_S] == row['key'] != keys[0.0]
    assert plan_cells([shifted_bag], configs, output)[0].key == keys[0.0]


def test_compare_offsets_for_every_bag_or_one(shifted_bag, tmp_path):
    from relperception.pipeline.study import parse_gt_time_offsets

    other = tmp_path / 'other.mcap'
    other.touch()
    bags = [shifted_bag, other]
    assert parse_gt_time_offsets([], bags) == [0.0, 0.0]
    assert parse_gt_time_offsets(['0.25'], bags) == [0.25, 0.25]
    # a bag named by another path to the same folder
    named = f'{shifted_bag.parent}/../{shifted_bag.parent.name}/{shifted_bag.name}=-0.3'
    assert parse_gt_time_offsets(['0.25', named], bags) == [-0.3, 0.25]
    for specs, words in ((['nan'], 'finite number'), (['x=1'], 'not one of the bags'),
                         (['1', '2'], 'two offsets for every bag'),
                         ([f'{other}=1', f'{other}=2'], 'two offsets'),
                         ([f'{other}='], 'finite number')):
        with pytest.raises(ValueError, match=words):
            parse_gt_time_offsets(specs, bags)


def test_compare_cli_refuses_a_bad_offset_in_one_line(shifted_bag, tmp_path, caplog):
    assert cli_main(['compare', '--bags', str(shifted_bag), '--configs', 'default', '-o',
                     str(tmp_path / 'study'), '--no-progress',
                     '--gt-time-offset', 'elsewhere=0.1']) != 0
    assert 'elsewhere is not one of the bags' in caplog.text
    assert not (tmp_path / 'study' / 'cells').exists()


def test_replay_applies_the_offset(shifted_bag, tmp_path):
    import uuid

    pytest.importorskip('rclpy')
    from relperception.nodes import graph
    graph.ensure_ament_prefix()
    pytest.importorskip('nav_msgs.msg')
    from relperception.nodes.replay import replay_bag

    summary = replay_bag(shifted_bag, tmp_path, rate=2.0, plots=False,
                         namespace=f'/gt_offset_{uuid.uuid4().hex[:8]}',
                         gt_time_offset_s=-SHIFT_S)
    assert summary['gt_time_offset_s'] == -SHIFT_S
    assert summary['gt_time_offset_estimate_s'] == pytest.approx(-SHIFT_S, abs=0.01)
    assert summary['frames_with_ground_truth'] == summary['frames_processed'] > 20
    assert not any('offset in time' in text or 'covers only' in text
                   for text in summary['errors']), summary['errors']


def test_replay_cli_refuses_a_bad_offset_before_playing(shifted_bag, tmp_path, caplog):
    assert cli_main(['replay', str(shifted_bag), '-o', str(tmp_path / 'out'),
                     '--gt-time-offset', 'inf']) != 0
    assert 'gt_time_offset_s must be finite' in caplog.text
    assert not (tmp_path / 'out' / 'recorded_bag').exists()


def test_a_study_file_gives_offsets_and_the_command_line_wins(shifted_bag, tmp_path, caplog):
    import csv

    from relperception.pipeline.study import load_study, parse_gt_time_offsets

    other = tmp_path / 'other.mcap'
    other.touch()
    study = tmp_path / 'study.yaml'
    relative = os.path.relpath(shifted_bag, tmp_path)
    study.write_text(f'bags: [{relative}, other.mcap]\nconfigs: {{ref: default}}\n'
                     f'gt_time_offset: {{{relative}: -{SHIFT_S}}}\n')
    bags, _, options = load_study(study)
    assert parse_gt_time_offsets([], bags, options['gt_time_offset']) == [-SHIFT_S, 0.0]
    assert parse_gt_time_offsets(['0.5'], bags, options['gt_time_offset']) == [-SHIFT_S, 0.5]
    assert parse_gt_time_offsets([f'{shifted_bag}=0.1'], bags,
                                 options['gt_time_offset']) == [0.1, 0.0]
    study.write_text(f'bags: [{relative}, other.mcap]\nconfigs: {{ref: default}}\n'
                     'gt_time_offset: 0.25\n')
    bags, _, options = load_study(study)
    assert parse_gt_time_offsets([], bags, options['gt_time_offset']) == [0.25, 0.25]
    assert parse_gt_time_offsets(['1'], bags, options['gt_time_offset']) == [1.0, 1.0]
    for bad, words in (('.nan', 'must be finite'), ('x', 'must be a number of seconds'),
                       ('{}', 'give seconds for every bag'), ('true', 'number of seconds'),
                       ('{other.mcap: [1]}', 'other.mcap must be a number')):
        study.write_text(f'bags: [other.mcap]\nconfigs: {{ref: default}}\n'
                         f'gt_time_offset: {bad}\n')
        with pytest.raises(ValueError, match=words):
            load_study(study)
    study.write_text(f'bags: [other.mcap]\nconfigs: {{ref: default}}\n'
                     f'gt_time_offset: {{{relative}: 1}}\n')
    bags, _, options = load_study(study)
    with pytest.raises(ValueError, match='is not one of the bags'):
        parse_gt_time_offsets([], bags, options['gt_time_offset'])
    # compare --study applies it
    study.write_text(f'bags: [{relative}]\nconfigs: {{ref: default}}\n'
                     f'gt_time_offset: -{SHIFT_S}\n')
    output = tmp_path / 'out'
    assert cli_main(['compare', '--study', str(study), '-o', str(output),
                     '--no-progress']) == 0
    with open(output / 'results.csv', newline='', encoding='utf-8') as stream:
        row, = csv.DictReader(stream)
    assert float(row['gt_time_offset_s']) == -SHIFT_S


def test_a_study_row_carries_its_offset_whatever_became_of_the_cell(tmp_path):
    """The offset is part of a cell's identity: also in rows without a trajectory."""
    from relperception.pipeline.study import (failed_row, parse_config_spec, plan_cells,
                                              run_cell)

    write_synthetic_bag(tmp_path / 'one', frames=1, width=160, height=120)
    cell, = plan_cells([tmp_path / 'one'], [parse_config_spec('default')], tmp_path / 'study',
                       gt_time_offsets=[0.5])
    row = run_cell(cell, None, False)   # one frame: evaluated, but nothing tracked
    assert row['status'] == 'ok' and row['ate_rmse_m'] is None
    assert row['gt_time_offset_s'] == 0.5
    assert failed_row(cell, 'the worker process died')['gt_time_offset_s'] == 0.5
