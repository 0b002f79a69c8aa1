# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of relperception.evaluation.trajectory and relperception.evaluation.report."""

import json

import cv2
import numpy as np
import pytest
from relperception.evaluation.report import plot_errors, plot_trajectories, write_json
from relperception.evaluation.trajectory import (
    evaluate_trajectory,
    interpolate_poses,
    PER_POSE_KEY,
    read_tum,
    summary_metrics,
    write_tum,
)
from relperception.transforms import make_transform

START_NS = 1_700_000_000_123_456_789
STEP_NS = 100_000_000  # 10 Hz


def _stamps(n, start=START_NS, step=STEP_NS):
    return start + step * np.arange(n, dtype=np.int64)


def _rotation(axis, degrees):
    """Return the (3, 3) rotation of ``degrees`` about ``axis`` ('x', 'y', 'z' or a vector)."""
    if isinstance(axis, str):
        axis = np.eye(3)['xyz'.index(axis)]
    vector = np.asarray(axis, dtype=np.float64)
    rotvec = vector / np.linalg.norm(vector) * np.radians(degrees)
    return cv2.Rodrigues(rotvec.reshape(3, 1))[0]


def _random_poses(n, seed=0):
    rng = np.random.default_rng(seed)
    axes = rng.normal(size=(n, 3))
    angles = rng.uniform(0, 180, size=n)
    t = rng.normal(scale=3.0, size=(n, 3))
    return np.stack([make_transform(_rotation(axes[i], angles[i]), t[i]) for i in range(n)])


def _circle_poses(n, radius=5.0):
    """Camera moving on a horizontal circle, looking forward along the motion (x-z plane)."""
    poses = []
    for k in range(n):
        angle = 2 * np.pi * 0.7 * k / n
        position = [radius * np.sin(angle), 0.1 * np.sin(3 * angle), radius * (1 - np.cos(angle))]
        R = _rotation('y', np.degrees(angle))
        poses.append(make_transform(R, position))
    return np.stack(poses)


def _line_poses(n, step_m=1.0):
    return np.stack([make_transform(np.eye(3), [step_m * k, 0.0, 0.0]) for k in range(n)])


def _compose_with_step_error(gt, delta):
    """Return an estimate whose every relative motion is the ground-truth one times ``delta``."""
    est = [gt[0].copy()]
    for k in range(1, len(gt)):
        rel = np.linalg.inv(gt[k - 1]) @ gt[k]
        est.append(est[-1] @ rel @ delta)
    return np.stack(est)


class TestTum:
    def test_round_trip(self, tmp_path):
        stamps, poses = _stamps(25), _random_poses(25)
        path = tmp_path / 'sub' / 'traj.tum'
        write_tum(path, stamps, poses)
        stamps_read, poses_read = read_tum(path)
        assert stamps_read.dtype == np.int64 and poses_read.shape == (25, 4, 4)
        assert np.all(np.abs(stamps_read - stamps) < 1000)  # within 1 us (exact in fact)
        np.testing.assert_allclose(poses_read, poses, atol=1e-8)

    def test_format(self, tmp_path):
        path = tmp_path / 'traj.tum'
        write_tum(path, [1_500_000_000_000_000_001], _line_poses(1))
        line = next(row for row in path.read_text().splitlines() if not row.startswith('#'))
        fields = line.split()
        assert len(fields) == 8
        assert fields[0] == '1500000000.000000001'
        np.testing.assert_allclose([float(v) for v in fields[4:]], [0, 0, 0, 1])

    def test_reads_foreign_file(self, tmp_path):
        path = tmp_path / 'foreign.txt'
        path.write_text('# comment\n\n1305031102.175304 1.0 2.0 3.0 0 0 0.7071068 0.7071068\n')
        stamps, poses = read_tum(path)
        assert stamps[0] == 1_305_031_102_175_304_000
        np.testing.assert_allclose(poses[0][:3, 3], [1, 2, 3])
        np.testing.assert_allclose(poses[0][:3, :3] @ [1, 0, 0], [0, 1, 0], atol=1e-6)

    def test_bad_input(self, tmp_path):
        bad = tmp_path / 'bad.tum'
        bad.write_text('1.0 2.0 3.0\n')
        with pytest.raises(ValueError, match='bad.tum:1'):
            read_tum(bad)
        empty = tmp_path / 'empty.tum'
        empty.write_text('# nothing\n')
        with pytest.raises(ValueError, match='no poses'):
            read_tum(empty)
        with pytest.raises(FileNotFoundError):
            read_tum(tmp_path / 'missing.tum')
        with pytest.raises(ValueError):
            write_tum(tmp_path / 'x.tum', _stamps(3), _random_poses(2))


class TestEvaluateTrajectory:
    def test_smoke_keys(self):
        gt = _circle_poses(40)
        result = evaluate_trajectory(_stamps(40), gt, _stamps(40), gt)
        for key in ('ate_rmse_m', 'ate_mean_m', 'ate_median_m', 'ate_max_m', 'rpe_trans_rmse_m',
                    'rpe_rot_rmse_deg', 'drift_percent', 'rot_drift_deg_per_m', 'scale',
                    'num_poses_matched', 'path_length_m', 'alignment'):
            assert key in result
        per_pose = result[PER_POSE_KEY]
        assert per_pose['ape_m'].shape == (40,)
        assert per_pose['est_xyz'].shape == per_pose['gt_xyz'].shape == (40, 3)
        assert per_pose['stamps_s'][0] == 0.0
        np.testing.assert_allclose(per_pose['stamps_s'][-1], 3.9)
        assert PER_POSE_KEY not in summary_metrics(result)
        json.dumps(summary_metrics(result))

    @pytest.mark.parametrize('alignment', ['se3', 'sim3', 'none'])
    def test_identical_is_zero(self, alignment):
        gt = _circle_poses(40)
        result = evaluate_trajectory(_stamps(40), gt, _stamps(40), gt, alignment=alignment)
        for key in ('ate_rmse_m', 'ate_max_m', 'rpe_trans_rmse_m', 'rpe_rot_rmse_deg',
                    'drift_percent', 'rot_drift_deg_per_m'):
            assert result[key] == pytest.approx(0.0, abs=1e-6), key
        assert result['scale'] == pytest.approx(1.0)
        assert result['num_poses_matched'] == 40
        assert result['num_drift_segments'] > 0
        # path length of the reference: sum of the step lengths
        steps = np.linalg.norm(np.diff(gt[:, :3, 3], axis=0), axis=1).sum()
        assert result['path_length_m'] == pytest.approx(steps)

    def test_rigid_offset(self):
        gt = _circle_poses(40)
        offset = make_transform(_rotation([1, -2, 3], 35), [1.0, -2.0, 0.5])
        est = offset[None] @ gt
        aligned = evaluate_trajectory(_stamps(40), est, _stamps(40), gt, alignment='se3')
        assert aligned['ate_rmse_m'] < 1e-6
        assert aligned['rpe_trans_rmse_m'] < 1e-6
        raw = evaluate_trajectory(_stamps(40), est, _stamps(40), gt, alignment='none')
        expected = np.linalg.norm(est[:, :3, 3] - gt[:, :3, 3], axis=1)
        assert raw['ate_rmse_m'] == pytest.approx(np.sqrt(np.mean(expected ** 2)))
        assert raw['ate_max_m'] == pytest.approx(expected.max())
        assert raw['ate_rmse_m'] > 0.5
        # relative motion does not see a rigid offset of the whole trajectory
        assert raw['rpe_trans_rmse_m'] < 1e-6

    def test_scaled_estimate(self):
        gt = _circle_poses(40)
        scale = 0.25  # e.g. a monocular estimate with unit-norm first step
        est = gt.copy()
        est[:, :3, 3] *= scale
        est = make_transform(_rotation('z', 40), [3, 1, 0])[None] @ est
        sim3 = evaluate_trajectory(_stamps(40), est, _stamps(40), gt, alignment='sim3')
        assert sim3['ate_rmse_m'] < 1e-6
        assert sim3['scale'] == pytest.approx(1.0 / scale, rel=1e-6)
        assert sim3['drift_percent'] < 1e-4
        se3 = evaluate_trajectory(_stamps(40), est, _stamps(40), gt, alignment='se3')
        assert se3['ate_rmse_m'] > 0.5
        assert se3['scale'] == 1.0

    def test_constant_step_error_rpe(self):
        gt = _circle_poses(50)
        d = np.array([0.01, -0.02, 0.005])
        angle_deg = 0.3
        delta = make_transform(_rotation('x', angle_deg), d)
        est = _compose_with_step_error(gt, delta)
        result = evaluate_trajectory(_stamps(50), est, _stamps(50), gt, alignment='none')
        # evo: E = (Q_i^-1 Q_j)^-1 (P_i^-1 P_j) = delta for every consecutive pair
        assert result['rpe_trans_rmse_m'] == pytest.approx(np.linalg.norm(d), rel=1e-6)
        assert result['rpe_rot_rmse_deg'] == pytest.approx(angle_deg, rel=1e-6)
        assert result['ate_rmse_m'] > 0.05  # the error accumulates

    def test_constant_step_error_drift(self):
        gt = _line_poses(61, step_m=0.5)  # 30 m straight line
        error = 0.02  # every step 2 % too long
        est = _line_poses(61, step_m=0.5 * (1 + error))
        result = evaluate_trajectory(_stamps(61), est, _stamps(61), gt, alignment='none')
        assert result['drift_percent'] == pytest.approx(100 * error, rel=1e-6)
        assert result['rot_drift_deg_per_m'] == pytest.approx(0.0, abs=1e-9)
        assert result['rpe_trans_rmse_m'] == pytest.approx(0.5 * error, rel=1e-6)
        # drift is independent of the segment lengths here; it must not change with SE(3)
        aligned = evaluate_trajectory(_stamps(61), est, _stamps(61), gt, alignment='se3')
        assert aligned['drift_percent'] == pytest.approx(100 * error, rel=1e-6)
        assert aligned['alignment_method'] == 'se3-origin'  # a line: Umeyama is undefined
        scaled = evaluate_trajectory(_stamps(61), est, _stamps(61), gt, alignment='sim3')
        assert scaled['scale'] == pytest.approx(1 / (1 + error))
        assert scaled['ate_rmse_m'] < 1e-9 and scaled['drift_percent'] < 1e-6

    def test_sim3_against_a_ground_truth_that_does_not_move(self):
        # A camera turning on the spot; the (monocular) estimate wanders in its own unit.
        gt = np.stack([make_transform(_rotation('y', 2.0 * k), [1.0, 2.0, 0.5])
                       for k in range(20)])
        est = gt.copy()
        est[:, :3, 3] += np.random.default_rng(0).normal(scale=0.5, size=(20, 3))
        # Sim(3) would shrink the estimate to the point: ATE 0, scale 0
        with pytest.raises(ValueError, match='does not move'):
            evaluate_trajectory(_stamps(20), est, _stamps(20), gt, alignment='sim3')
        rigid = evaluate_trajectory(_stamps(20), est, _stamps(20), gt, alignment='se3')
        assert rigid['ate_rmse_m'] > 0.3 and rigid['scale'] == 1.0

    def test_time_association(self):
        gt = _circle_poses(40)
        # estimate stamped 5 ms late, covering only frames 10..29
        est_stamps = _stamps(40)[10:30] + 5_000_000
        result = evaluate_trajectory(est_stamps, gt[10:30], _stamps(40), gt, alignment='none')
        assert result['num_poses_matched'] == 20
        assert result['ate_rmse_m'] < 1e-9
        np.testing.assert_array_equal(result[PER_POSE_KEY]['stamps_ns'], _stamps(40)[10:30])
        # 30 ms late is beyond the default 20 ms association window
        with pytest.raises(ValueError, match='no time overlap'):
            evaluate_trajectory(_stamps(40) + 30_000_000, gt, _stamps(40), gt)
        loose = evaluate_trajectory(_stamps(40) + 30_000_000, gt, _stamps(40), gt,
                                    max_time_diff_s=0.04)
        assert loose['num_poses_matched'] == 40

    def test_bad_input(self):
        gt = _circle_poses(10)
        stamps = _stamps(10)
        with pytest.raises(ValueError, match='non-empty'):
            evaluate_trajectory(np.zeros(0, np.int64), np.zeros((0, 4, 4)), stamps, gt)
        with pytest.raises(ValueError, match='shape'):
            evaluate_trajectory(stamps, gt[:5], stamps, gt)
        with pytest.raises(ValueError, match='alignment'):
            evaluate_trajectory(stamps, gt, stamps, gt, alignment='affine')
        with pytest.raises(ValueError, match='NaN'):
            bad = gt.copy()
            bad[3, 0, 3] = np.nan
            evaluate_trajectory(stamps, bad, stamps, gt)
        with pytest.raises(ValueError, match=r'ground truth \[1700000100.12'):
            evaluate_trajectory(stamps, gt, stamps + 100 * 10**9, gt)
        with pytest.raises(ValueError, match='need at least 3'):
            evaluate_trajectory(stamps[:2], gt[:2], stamps, gt, alignment='se3')
        # stamps in seconds were rounded to nanoseconds and scored (ATE 2 m for a perfect run)
        with pytest.raises(ValueError, match='integer nanoseconds, got fractional'):
            evaluate_trajectory(stamps / 1e9, gt, stamps, gt)
        assert evaluate_trajectory(stamps.astype(np.float64), gt, stamps, gt)['ate_rmse_m'] \
            < 1e-9
        with pytest.raises(ValueError, match='2 stamps are repeated'):
            evaluate_trajectory(np.r_[stamps[:8], stamps[:2]], gt, stamps, gt)
        reflected = gt.copy()
        reflected[:, :3, :3] = reflected[:, :3, :3] @ np.diag([1.0, 1.0, -1.0])
        with pytest.raises(ValueError, match='reflections'):
            evaluate_trajectory(stamps, reflected, stamps, reflected)


class TestInterpolatePoses:
    def test_midpoint(self):
        R0 = np.eye(3)
        R1 = _rotation('z', 90)
        poses = np.stack([make_transform(R0, [0, 0, 0]), make_transform(R1, [2, 4, 6])])
        stamps = np.array([0, 10**9], dtype=np.int64) + START_NS
        query = np.array([START_NS + 250_000_000, START_NS + 10**9 + 10**6,
                          START_NS + 3 * 10**9])
        out, valid = interpolate_poses(stamps, poses, query)
        assert out.shape == (3, 4, 4)
        np.testing.assert_allclose(out[0][:3, 3], [0.5, 1.0, 1.5], atol=1e-9)
        expected = _rotation('z', 22.5)
        np.testing.assert_allclose(out[0][:3, :3], expected, atol=1e-9)
        np.testing.assert_allclose(out[1], poses[1], atol=1e-9)  # clamped 1 ms past the end
        assert valid.tolist() == [True, True, False]

    def test_no_ground_truth_is_made_up_across_a_gap(self):
        # poses at 10 Hz with a 1.7 s hole between the third and the fourth
        stamps = START_NS + np.array([0, 1, 2, 19]) * 10**8
        poses = np.stack([make_transform(np.eye(3), [0.1 * k, 0, 0]) for k in (0, 1, 2, 19)])
        query = START_NS + np.arange(20) * 10**8 + 10**6
        _, valid = interpolate_poses(stamps, poses, query, 0.02)
        assert valid.all()                                  # without a limit: interpolated
        _, valid = interpolate_poses(stamps, poses, query, 0.02, max_gap_factor=5.0)
        # the hole's frames have none, those within 20 ms of a pose keep theirs
        assert np.flatnonzero(valid).tolist() == [0, 1, 2, 19]

    def test_bad_input(self):
        with pytest.raises(ValueError):
            interpolate_poses([0, 1], np.zeros((2, 3, 3)), [0])
        with pytest.raises(ValueError, match='max_gap_factor'):
            interpolate_poses([0, 1], np.tile(np.eye(4), (2, 1, 1)), [0], max_gap_factor=0.0)


class TestReport:
    def test_plots(self, tmp_path):
        gt = _circle_poses(30)[:, :3, 3]
        est = gt + 0.05
        png = plot_trajectories(tmp_path / 'a' / 'traj.png', gt, est, 'test')
        assert png.stat().st_size > 1000
        assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
        png = plot_errors(tmp_path / 'err.png', np.arange(30) * 0.1, np.full(30, 0.05),
                          events={'lost': [1.0]})
        assert png.read_bytes()[:4] == b'\x89PNG'
        with pytest.raises(ValueError):
            plot_trajectories(tmp_path / 'x.png', gt[:, :2], est, 'bad')
        with pytest.raises(ValueError):
            plot_errors(tmp_path / 'x.png', np.arange(3), np.zeros(4))

    def test_write_json(self, tmp_path):
        data = {'a': np.float32(1.5), 'b': np.int64(3), 'c': np.arange(3), 'd': float('nan'),
                'e': {'f': (np.bool_(True), tmp_path)}}
        path = write_json(tmp_path / 'out.json', data)
        loaded = json.loads(path.read_text())
        assert loaded == {'a': 1.5, 'b': 3, 'c': [0, 1, 2], 'd': None,
                          'e': {'f': [True, str(tmp_path)]}}
        with pytest.raises(TypeError):
            write_json(tmp_path / 'bad.json', [1, 2])
