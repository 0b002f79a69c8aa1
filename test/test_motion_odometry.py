# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of relperception.odometry.motion.MatchOdometry (odometry from precomputed matches).

The matches come from the real ``NCCMatcher`` between consecutive rendered synthetic frames,
as the matcher node would publish them; the ground truth comes with the renderer.
"""

import cv2
import numpy as np
import pytest

from relperception.core_types import Frame, Matches
from relperception.data.synthetic import iter_sequence
from relperception.matching.ncc import NCCMatcher
from relperception.odometry.motion import MatchOdometry
from relperception.odometry.vo import VisualOdometry, VOResult
from relperception.transforms import invert_transform, rotation_angle_deg

WIDTH, HEIGHT, NUM_FRAMES = 320, 240, 16


@pytest.fixture(scope='module')
def pairs():
    """Return (camera, frames, matches[i] = frame i-1 -> frame i; matches[0] None)."""
    camera, frames = iter_sequence(NUM_FRAMES, seed=0, width=WIDTH, height=HEIGHT)
    frames = list(frames)
    matcher = NCCMatcher()
    grays = [cv2.cvtColor(f.rgb, cv2.COLOR_RGB2GRAY) for f in frames]
    matches = [None] + [matcher.match(grays[i - 1], grays[i]) for i in range(1, len(frames))]
    return camera, frames, matches


def _run(odometry, camera, frames, matches, indices, use_depth=True, hint=False):
    """Step ``odometry`` over the pairs (i-1, i) for i in ``indices``; return {i: result}."""
    results = {}
    for i in indices:
        norm = None
        if hint:
            norm = float(np.linalg.norm(frames[i].T_world_cam[:3, 3]
                                        - frames[i - 1].T_world_cam[:3, 3]))
        results[i] = odometry.step(
            frames[i - 1].stamp_ns, frames[i].stamp_ns, matches[i], camera,
            depth0=frames[i - 1].depth if use_depth else None,
            depth1=frames[i].depth if use_depth else None, translation_norm_m=norm)
    return results


def _relative_error(T_world_a, T_world_b, T_true_world_a, T_true_world_b):
    """Return (translation m, rotation deg) error of the motion a -> b."""
    T_est = invert_transform(T_world_b) @ T_world_a
    T_true = invert_transform(T_true_world_b) @ T_true_world_a
    delta = invert_transform(T_true) @ T_est
    return float(np.linalg.norm(delta[:3, 3])), rotation_angle_deg(delta)


def _errors_vs_truth(results, frames, first, T_world_first=None):
    """Return per-pair errors and the final position error in the world of frame ``first``.

    ``T_world_first`` is the estimated pose of frame ``first`` (identity by default).
    """
    poses = {first: np.eye(4) if T_world_first is None else T_world_first}
    poses.update({i: r.T_world_cam for i, r in results.items()})
    steps = sorted(poses)
    errors = np.array([_relative_error(poses[a], poses[b], frames[a].T_world_cam,
                                       frames[b].T_world_cam)
                       for a, b in zip(steps[:-1], steps[1:]) if b - a == 1])
    last = steps[-1]
    T_true = invert_transform(frames[first].T_world_cam) @ frames[last].T_world_cam
    T_estimate = invert_transform(poses[first]) @ poses[last]
    final = float(np.linalg.norm(T_estimate[:3, 3] - T_true[:3, 3]))
    return errors, final


class TestMatchOdometry:
    def test_smoke(self, pairs):
        camera, frames, matches = pairs
        odometry = MatchOdometry()
        results = _run(odometry, camera, frames, matches, range(1, 4))
        assert all(isinstance(r, VOResult) for r in results.values())
        assert [r.status for r in results.values()] == ['initialized', 'tracking', 'tracking']
        for i, r in results.items():
            assert r.stamp_ns == frames[i].stamp_ns
            assert r.T_world_cam.shape == (4, 4) and r.T_world_cam.dtype == np.float64
            assert r.mode == 'rgbd' and r.num_matches == len(matches[i])
            assert r.inlier_mask.shape == (r.num_matches,)
            assert r.num_inliers == r.inlier_mask.sum() >= odometry.conf['min_matches']
        np.testing.assert_array_equal(odometry.pose_at(frames[0].stamp_ns), np.eye(4))
        np.testing.assert_array_equal(odometry.pose_at(frames[3].stamp_ns),
                                      results[3].T_world_cam)
        assert odometry.last_stamp_ns == frames[3].stamp_ns

    def test_rgbd_accuracy(self, pairs):
        camera, frames, matches = pairs
        results = _run(MatchOdometry(), camera, frames, matches, range(1, NUM_FRAMES))
        assert all(r.status == 'tracking' for i, r in results.items() if i > 1)
        errors, final = _errors_vs_truth(results, frames, 0)
        assert errors[:, 0].mean() < 0.004 and errors[:, 1].mean() < 0.05
        assert final < 0.04   # path ~0.8 m

    def test_same_pose_as_visual_odometry_frame_to_frame(self, pairs):
        # With every frame a keyframe, VisualOdometry and MatchOdometry chain the same pairs.
        camera, frames, matches = pairs
        results = _run(MatchOdometry(), camera, frames, matches, range(1, 6))

        class Replay:
            """Return the precomputed matches in order (same pairs as MatchOdometry saw)."""

            def __init__(self):
                self.index = 0

            def match(self, image0, image1, predict=None):
                self.index += 1
                return matches[self.index]

        vo = VisualOdometry(Replay(), {'use_motion_prior': False})
        for i in range(6):
            vo_result = vo.step(Frame(frames[i].rgb, frames[i].stamp_ns, camera, frames[i].depth))
            if i > 0:
                assert vo_result.is_keyframe
                np.testing.assert_allclose(vo_result.T_world_cam, results[i].T_world_cam,
                                           atol=1e-9)

    def test_mono_with_translation_hint(self, pairs):
        camera, frames, matches = pairs
        results = _run(MatchOdometry({'mode': 'mono'}), camera, frames, matches,
                       range(1, NUM_FRAMES), use_depth=False, hint=True)
        assert all(r.mode == 'mono' and r.status in ('initialized', 'tracking')
                   for r in results.values())
        assert all('translation_norm_m' in r.message for r in results.values())
        errors, _ = _errors_vs_truth(results, frames, 0)
        assert errors[:, 0].mean() < 0.015 and errors[:, 1].mean() < 0.2

    def test_mono_constant_speed(self, pairs):
        camera, frames, matches = pairs
        results = _run(MatchOdometry({'mode': 'mono'}), camera, frames, matches, range(1, 8),
                       use_depth=False)
        assert 'unit translation' in results[1].message
        assert all('constant speed' in results[i].message for i in range(2, 8))
        steps = [np.linalg.norm(results[i].T_world_cam[:3, 3] - results[i - 1].T_world_cam[:3, 3])
                 for i in range(2, 8)]
        np.testing.assert_allclose(steps, 1.0, rtol=1e-6)

    def test_mono_scale_from_depth(self, pairs):
        camera, frames, matches = pairs
        results = _run(MatchOdometry({'mode': 'mono'}), camera, frames, matches, range(1, 8))
        assert all('keyframe depth' in r.message for r in results.values())
        errors, _ = _errors_vs_truth(results, frames, 0)
        assert errors[:, 0].mean() < 0.015

    def test_gap_reinitialises(self, pairs):
        camera, frames, matches = pairs
        odometry = MatchOdometry()
        before = _run(odometry, camera, frames, matches, range(1, 6))
        # The matches 5 -> 6 never arrive: 6 -> 7 has an unknown older stamp.
        after = _run(odometry, camera, frames, matches, range(7, 11))
        assert after[7].status == 'reinitialized' and 'gap' in after[7].message
        assert [after[i].status for i in range(8, 11)] == ['tracking'] * 3
        np.testing.assert_array_equal(odometry.pose_at(frames[6].stamp_ns),
                                      before[5].T_world_cam)
        # Only the motion 5 -> 6 is missing; the relative motions after the gap are right.
        errors, final = _errors_vs_truth(after, frames, 6, before[5].T_world_cam)
        assert len(errors) == 4 and errors[:, 0].mean() < 0.004
        assert final < 0.02

    def test_empty_matches_lost_then_reinitialised(self, pairs):
        camera, frames, matches = pairs
        odometry = MatchOdometry()
        good = _run(odometry, camera, frames, matches, range(1, 4))
        lost = odometry.step(frames[3].stamp_ns, frames[4].stamp_ns, Matches.empty(), camera,
                             frames[3].depth, frames[4].depth)
        assert lost.status == 'lost' and 'matches' in lost.message
        np.testing.assert_array_equal(lost.T_world_cam, good[3].T_world_cam)
        assert odometry.pose_at(frames[4].stamp_ns) is None
        resumed = _run(odometry, camera, frames, matches, [5])[5]
        assert resumed.status == 'reinitialized' and 'was lost' in resumed.message
        no_stamp = odometry.step(None, frames[6].stamp_ns, Matches.empty(), camera)
        assert no_stamp.status == 'lost' and 'no motion information' in no_stamp.message

    def test_bad_data_is_lost_not_raised(self, pairs):
        camera, frames, matches = pairs
        odometry = MatchOdometry({'mode': 'rgbd'})
        _run(odometry, camera, frames, matches, [1])
        backwards = odometry.step(frames[2].stamp_ns, frames[1].stamp_ns, matches[2], camera)
        assert backwards.status == 'lost' and 'do not increase' in backwards.message
        repeated = odometry.step(frames[0].stamp_ns, frames[1].stamp_ns, matches[1], camera)
        assert repeated.status == 'lost' and 'already' in repeated.message
        wrong_size = odometry.step(frames[1].stamp_ns, frames[2].stamp_ns, matches[2], camera,
                                   depth0=np.ones((10, 10), np.float32))
        assert wrong_size.status == 'lost' and 'depth0 ignored' in wrong_size.message
        garbage = Matches(np.full((40, 2), np.nan), np.zeros((40, 2)), np.ones(40))
        assert odometry.step(frames[1].stamp_ns, frames[2].stamp_ns, garbage, camera,
                             frames[1].depth).status == 'lost'
        assert odometry.step(frames[1].stamp_ns, frames[2].stamp_ns, matches[2], camera,
                             frames[1].depth).status == 'tracking'

    def test_history_is_bounded(self, pairs):
        camera, frames, matches = pairs
        odometry = MatchOdometry(history_size=3)
        _run(odometry, camera, frames, matches, range(1, 6))
        assert odometry.pose_at(frames[2].stamp_ns) is None
        assert all(odometry.pose_at(frames[i].stamp_ns) is not None for i in (3, 4, 5))

    def test_reset(self, pairs):
        camera, frames, matches = pairs
        odometry = MatchOdometry()
        _run(odometry, camera, frames, matches, range(1, 3))
        odometry.reset()
        assert not odometry.initialized
        assert _run(odometry, camera, frames, matches, [5])[5].status == 'initialized'

    def test_bad_input(self, pairs):
        camera, frames, matches = pairs
        with pytest.raises(ValueError):
            MatchOdometry({'no_such_key': 1})
        with pytest.raises(ValueError):
            MatchOdometry({'mode': 'stereo'})
        with pytest.raises(ValueError):
            MatchOdometry(history_size=1)
        odometry = MatchOdometry()
        with pytest.raises(ValueError):
            odometry.step(0.5, frames[1].stamp_ns, matches[1], camera)
        with pytest.raises(ValueError):
            odometry.step(frames[0].stamp_ns, frames[1].stamp_ns, matches[1].keypoints0, camera)
        with pytest.raises(ValueError):
            odometry.step(frames[0].stamp_ns, frames[1].stamp_ns, matches[1], camera.K)
        with pytest.raises(ValueError):
            odometry.step(frames[0].stamp_ns, frames[1].stamp_ns, matches[1], camera,
                          translation_norm_m='1 m')
