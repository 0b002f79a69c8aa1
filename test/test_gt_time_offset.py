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
