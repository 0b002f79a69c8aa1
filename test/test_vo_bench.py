# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``bench/vo_bench.py``: the windowed Sim(3) scale and the stops of the long recordings."""

from conftest import bench_module
import numpy as np
import pytest
from relperception.transforms import make_transform
from scipy.spatial.transform import Rotation


@pytest.fixture(scope='module')
def bench():
    """Return the bench module."""
    with bench_module('vo_bench') as module:
        yield module


def loop(count: int) -> tuple[np.ndarray, np.ndarray]:
    """Return stamps (N,) ns and poses (N, 4, 4) on a 0.1 m per frame loop of radius 5 m."""
    angle = np.arange(count) * 0.02
    poses = np.stack([make_transform(np.eye(3), [5 * np.cos(a), 5 * np.sin(a),
                                                 0.1 * np.sin(3 * a)]) for a in angle])
    return np.arange(count, dtype=np.int64) * 100_000_000, poses


def similar(poses: np.ndarray, scales) -> np.ndarray:
    """Return the positions rotated, shifted and scaled per frame (``scales`` (N,))."""
    R = Rotation.from_euler('zyx', [0.4, -0.2, 1.1]).as_matrix()
    out = poses.copy()
    out[:, :3, 3] = (np.asarray(scales)[:, None] * poses[:, :3, 3]) @ R.T + [1.0, -2.0, 0.5]
    return out


def test_a_constant_scale_does_not_wander(bench):
    stamps, gt = loop(350)
    scales = bench.window_scales(stamps, similar(gt, np.full(350, 0.25)), stamps, gt)
    assert len(scales) == 3                          # whole windows of 100 frames only
    assert np.allclose(scales, 4.0)
    assert bench.scale_wander_percent(scales) == pytest.approx(0.0, abs=1e-6)


def test_a_scale_that_drifts_and_comes_back_is_seen(bench):
    # The estimate is 40 % too large in the middle and right again at the end: a global Sim(3)
    # would average it out, the windows do not.
    stamps, gt = loop(500)
    factor = np.ones(500)
    factor[200:300] = 1.4
    scales = bench.window_scales(stamps, similar(gt, factor), stamps, gt)
    assert scales[2] == pytest.approx(1 / 1.4)
    assert bench.scale_wander_percent(scales) == pytest.approx(100 * (1 - 1 / 1.4))


def test_windows_without_motion_or_ground_truth(bench):
    stamps, gt = loop(300)
    gt[150:250] = gt[150]                            # the camera stands still
    estimate = similar(gt, np.full(300, 2.0))
    scales = bench.window_scales(stamps, estimate, stamps[50:], gt[50:])
    assert len(scales) == 2                          # 250 frames have ground truth
    assert scales[0] == pytest.approx(0.5)           # frames 50-149
    assert scales[1] is None                         # frames 150-249: no path
    assert bench.scale_wander_percent([None, 2.0]) is None


def test_stops_hold_the_path_time(bench):
    fps = 10.0
    frames = int(2 * (bench.MOVE_S + bench.STOP_S) * fps)
    times = bench.motion_times(frames, fps)
    steps = np.diff(times)
    assert np.count_nonzero(steps == 0) == pytest.approx(2 * bench.STOP_S * fps, abs=1)
    assert np.allclose(steps[steps > 0], 1 / fps)
    assert times[-1] == pytest.approx(2 * bench.MOVE_S - 1 / fps, abs=1.01 / fps)


def test_an_estimate_that_stands_still_has_no_scale(bench):
    # evo's Umeyama fit refuses a degenerate estimate; the window has no scale, not an error.
    stamps, gt = loop(200)
    estimate = gt.copy()
    estimate[:100, :3, 3] = [1.0, 2.0, 3.0]
    scales = bench.window_scales(stamps, estimate, stamps, gt)
    assert scales[0] is None and scales[1] == pytest.approx(1.0)
