# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""RPE and drift count only pairs inside one tracking segment (no pair spans a re-initialisation).

A run that loses tracking and re-initialises at the held pose has an estimate whose motion
across the gap is zero; a relative-pose pair that straddles the gap compares that made-up
zero motion with the true one and reported a large, misleading RPE.
"""

import math

import numpy as np
import pytest

from relperception.config import load_config
from relperception.data.error_log import ErrorLog
from relperception.evaluation.trajectory import evaluate_trajectory
from relperception.evaluation.vo_report import tracking_segments, write_report
from relperception.transforms import make_transform

STEP_NS = 100_000_000


def _line(n, step_m=0.2):
    return np.stack([make_transform(np.eye(3), [step_m * k, 0.01 * math.sin(k), 0.0])
                     for k in range(n)])


def _held_after(gt, lost):
    """Return an estimate that equals ``gt`` but holds the pose over frames ``lost`` (the gap)."""
    est = gt.copy()
    jump = gt[lost[-1] + 1][:3, 3] - gt[lost[0] - 1][:3, 3]
    est[lost[-1] + 1:, :3, 3] -= jump
    keep = np.setdiff1d(np.arange(len(gt)), lost)
    return keep, est


class TestEvaluateTrajectory:

    def test_pairs_across_a_reinitialisation_are_skipped_and_counted(self):
        gt = _line(30)
        keep, est = _held_after(gt, lost=[10, 11, 12])
        stamps = np.arange(30, dtype=np.int64) * STEP_NS
        segments = (keep > 12).astype(np.int64)
        mixed = evaluate_trajectory(stamps[keep], est[keep], stamps, gt, alignment='none')
        assert mixed['rpe_trans_rmse_m'] > 0.1     # the jump of 4 frames counted as an error
        assert mixed['rpe_pairs_skipped'] == 0 and mixed['tracking_segments'] == 1
        split = evaluate_trajectory(stamps[keep], est[keep], stamps, gt, alignment='none',
                                    segment_ids=segments)
        assert split['rpe_trans_rmse_m'] == pytest.approx(0.0, abs=1e-9)
        assert split['rpe_rot_rmse_deg'] == pytest.approx(0.0, abs=1e-6)
        assert split['rpe_pairs'] == len(keep) - 2 and split['rpe_pairs_skipped'] == 1
        assert split['tracking_segments'] == 2
        assert split['drift_segments_skipped'] > 0
        assert split['drift_percent'] == pytest.approx(0.0, abs=1e-6)
        assert split['num_poses_matched'] == len(keep)

    def test_one_segment_is_what_evo_gives(self):
        gt = _line(20)
        est = gt.copy()
        est[:, :3, 3] *= 1.05
        stamps = np.arange(20, dtype=np.int64) * STEP_NS
        plain = evaluate_trajectory(stamps, est, stamps, gt, alignment='none')
        one = evaluate_trajectory(stamps, est, stamps, gt, alignment='none',
                                  segment_ids=np.zeros(20, dtype=np.int64))
        for key in ('rpe_trans_rmse_m', 'rpe_rot_rmse_deg', 'drift_percent'):
            assert one[key] == pytest.approx(plain[key], rel=1e-12)
        assert one['rpe_pairs'] == 19 and one['rpe_pairs_skipped'] == 0

    def test_bad_segment_ids(self):
        gt = _line(5)
        stamps = np.arange(5, dtype=np.int64) * STEP_NS
        with pytest.raises(ValueError, match='segment_ids'):
            evaluate_trajectory(stamps, gt, stamps, gt, segment_ids=[0, 0, 1])


class TestRunReport:

    def _rows(self, statuses):
        return [{'stamp_ns': k * STEP_NS, 'status': status, 'num_matches': 50,
                 'num_inliers': 40, 'is_keyframe': status != 'tracking', 'depth': True,
                 'process_ms': 1.0, 'decode_ms': 0.0, 'message': '',
                 'scale_source': 'depth' if status == 'tracking' else ''}
                for k, status in enumerate(statuses)]

    def test_segments_of_the_rows(self):
        rows = self._rows(['initialized', 'tracking', 'lost', 'reinitialized', 'tracking'])
        assert tracking_segments(rows).tolist() == [0, 0, 0, 1, 1]
        relocalised = self._rows(['initialized', 'tracking', 'lost', 'reinitialized'])
        relocalised[-1]['scale_source'] = 'depth'      # relocalised against the keyframe
        assert tracking_segments(relocalised).tolist() == [0, 0, 0, 0]

    def test_report_of_a_run_that_reinitialised(self, tmp_path):
        gt = _line(30)
        _, est = _held_after(gt, lost=[10, 11, 12])
        statuses = (['initialized'] + ['tracking'] * 9 + ['lost'] * 3 + ['reinitialized']
                    + ['tracking'] * 16)
        rows = self._rows(statuses)
        errors = ErrorLog()
        stamps = np.arange(30, dtype=np.int64) * STEP_NS
        summary = write_report(tmp_path, tmp_path / 'bag', load_config(), 'rgbd', 'rgbd', False,
                               rows, list(est), stamps, gt, errors, plots=False)
        assert summary['rpe_trans_rmse_m'] == pytest.approx(0.0, abs=1e-9)
        assert summary['rpe_pairs_skipped'] == 1 and summary['tracking_segments'] == 2
        assert any('not scored' in text for text in errors.kept), errors.kept
