# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Ground truth stamped with a time offset to the images: applied (--gt-time-offset), estimated.

Recordings from ``write_synthetic_bag`` whose ground-truth poses are copied, with the project's
bag writer, 0.3 s late: before, eval only said "ground truth covers only K of N frames" and
scored the poses against the wrong times.
"""

import math

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
    assert summary['gt_time_offset_estimate_s'] == pytest.approx(-SHIFT_S, abs=0.01)
    assert summary['gt_time_offset_correlation'] > 0.9
    assert any('--gt-time-offset -0.3' in text for text in summary['errors']), summary['errors']


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
