# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Translation hints from wheel odometry: interpolation, mount, gaps, bad poses."""

import numpy as np
import pytest
from relperception.odometry.wheel_hints import WheelHints
from relperception.transforms import make_transform
from scipy.spatial.transform import Rotation

SECOND = 1_000_000_000


def _yaw(degrees, xyz):
    return make_transform(Rotation.from_euler('z', degrees, degrees=True).as_matrix(), xyz)


class TestWheelHints:
    def test_camera_centre_follows_the_mount_while_turning(self):
        # the camera 1 m ahead of the base; the base turns 90 deg on the spot
        T_base_cam = make_transform(np.eye(3), [1.0, 0.0, 0.0])
        hints = WheelHints(T_base_cam, max_gap_s=2.0)
        hints.add(0, _yaw(0, [0, 0, 0]))
        hints.add(SECOND, _yaw(90, [0, 0, 0]))
        np.testing.assert_allclose(hints.camera_centre(0), [1, 0, 0], atol=1e-12)
        np.testing.assert_allclose(hints.camera_centre(SECOND), [0, 1, 0], atol=1e-12)
        # half way: slerp turns the base by 45 deg
        halfway = np.sqrt(0.5)
        np.testing.assert_allclose(hints.camera_centre(SECOND // 2), [halfway, halfway, 0],
                                   atol=1e-12)
        assert hints.distance_m(0, SECOND) == pytest.approx(np.sqrt(2))

    def test_positions_are_interpolated_linearly(self):
        hints = WheelHints(np.eye(4), max_gap_s=2.0)
        hints.add(0, _yaw(0, [0, 0, 0]))
        hints.add(SECOND, _yaw(0, [2.0, 0, 0]))
        assert hints.distance_m(SECOND // 4, 3 * SECOND // 4) == pytest.approx(1.0)

    def test_frame_hints_cover_frames_without_one(self):
        hints = WheelHints(np.eye(4), max_gap_s=0.5)
        for k in range(5):
            hints.add(k * SECOND // 4, _yaw(0, [0.25 * k, 0, 0]))
        assert hints.hint_m(0) is None                       # the first frame
        assert hints.hint_m(SECOND // 4) == pytest.approx(0.25)
        assert hints.hint_m(5 * SECOND) is None              # after the newest pose
        assert hints.hint_m(SECOND) == pytest.approx(0.75)   # from the last frame with one
        assert (hints.frames_with_hint, hints.frames_without_hint) == (2, 1)
        hints.clear()
        assert len(hints) == 0 and hints.hint_m(SECOND) is None

    def test_gaps_and_bad_poses(self):
        hints = WheelHints(np.eye(4), max_gap_s=0.2)
        hints.add(0, np.eye(4))
        hints.add(SECOND, _yaw(0, [1, 0, 0]))                 # 1 s apart: too far
        assert hints.camera_centre(SECOND // 2) is None
        assert hints.camera_centre(-1) is None
        assert not hints.add(SECOND, np.eye(4))               # not after the newest
        bent = np.eye(4)
        bent[0, 0] = 2.0
        assert not hints.add(2 * SECOND, bent)                # not rigid
        assert hints.refused == 2 and len(hints) == 2
        for kwargs in ({'max_gap_s': 0.0}, {'max_poses': 1}, {'max_speed_mps': 0.0},
                       {'max_speed_mps': float('nan')}):
            with pytest.raises(ValueError):
                WheelHints(np.eye(4), **kwargs)
        with pytest.raises(ValueError):
            WheelHints(np.zeros((4, 4)))

    def test_one_glitched_pose_is_refused_with_its_reason(self):
        # 10 Hz at 0.5 m/s; the fifth pose jumps 1000 m ahead (a glitch)
        hints = WheelHints(np.eye(4), max_gap_s=0.2, max_speed_mps=50.0)
        for k in range(10):
            x = 0.05 * k + (1000.0 if k == 4 else 0.0)
            accepted = hints.add(k * SECOND // 10, _yaw(0, [x, 0, 0]))
            assert accepted == (k != 4)
        assert hints.refused == 1 and hints.restarts == 0 and len(hints) == 9
        assert 'wheel_odom_max_speed_mps' in hints.last_refusal
        # the frame at the glitch is interpolated over the good poses around it
        assert hints.distance_m(3 * SECOND // 10, 5 * SECOND // 10) == pytest.approx(0.1)

    def test_a_future_stamp_does_not_block_the_poses_after_it(self):
        hints = WheelHints(np.eye(4), max_gap_s=0.2)
        for k in range(3):
            assert hints.add(k * SECOND // 10, _yaw(0, [0.05 * k, 0, 0]))
        assert hints.add(10**6 * SECOND, _yaw(0, [0.1, 0, 0]))     # a stamp days ahead
        results = [hints.add(k * SECOND // 10, _yaw(0, [0.05 * k, 0, 0])) for k in range(3, 8)]
        # refused while they could still be the glitch, then they replace the poses kept
        assert results == [False, False, True, True, True]
        assert 'not after the newest pose kept' in hints.last_refusal
        assert (hints.refused, hints.restarts, len(hints)) == (2, 1, 5)
        assert hints.distance_m(5 * SECOND // 10, 7 * SECOND // 10) == pytest.approx(0.1)

    def test_an_odometry_reset_restarts_the_hints(self):
        hints = WheelHints(np.eye(4), max_gap_s=0.2)
        for k in range(5):
            hints.add(k * SECOND // 10, _yaw(0, [100.0 + 0.05 * k, 0, 0]))
        assert hints.hint_m(4 * SECOND // 10) is None               # the first frame
        # the EKF restarts at the origin: 100 m away, 0.1 s later
        results = [hints.add(k * SECOND // 10, _yaw(0, [0.05 * (k - 5), 0, 0]))
                   for k in range(5, 10)]
        assert results == [False, False, True, True, True] and hints.restarts == 1
        # the hints start again (the first frame after the restart has nothing to go from)
        assert hints.hint_m(7 * SECOND // 10) is None
        assert hints.hint_m(9 * SECOND // 10) == pytest.approx(0.1)

    def test_refused_poses_that_disagree_never_restart(self):
        hints = WheelHints(np.eye(4), max_gap_s=0.2)
        hints.add(0, np.eye(4))
        for k in range(1, 7):   # glitches scattered 1 km apart from each other
            assert not hints.add(k * SECOND // 10, _yaw(0, [1000.0 * k * (-1) ** k, 0, 0]))
        assert hints.refuse('stamp nanosec must be in [0, 1e9), got 2000000000') is False
        assert (hints.refused, hints.restarts, len(hints)) == (7, 0, 1)
        assert hints.last_refusal.startswith('stamp nanosec')
