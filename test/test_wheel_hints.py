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
        for kwargs in ({'max_gap_s': 0.0}, {'max_poses': 1}):
            with pytest.raises(ValueError):
                WheelHints(np.eye(4), **kwargs)
        with pytest.raises(ValueError):
            WheelHints(np.zeros((4, 4)))
