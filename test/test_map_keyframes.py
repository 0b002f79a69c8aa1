# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``odometry.keyframe_min_angle_deg``: a keyframe whose parallax builds up over frames waits.

A keyframe whose median parallax is barely above ``map_min_angle_deg`` triangulates its new
points near that limit, where the check keeps the points whose noise enlarged their parallax
(placed too near), and the map's scale can shrink keyframe by keyframe (slow motion at a high
frame rate). The frames here are tracked by real PnP on a real map.
"""

import numpy as np
import pytest
from relperception.core_types import Camera, Matches
from relperception.odometry import geometry
from relperception.odometry.map_tracker import MapTracker
from relperception.odometry.vo import check_odometry_conf
from relperception.transforms import invert_transform, make_transform

CAMERA = Camera.from_intrinsics(500.0, 500.0, 319.5, 239.5, 640, 480)


def _tracker_with_map(seed=0, count=400, keyframe_min_angle_deg=1.0):
    """Return a mono MapTracker whose reference keyframe (identity) sees ``count`` points."""
    conf = {'ba_window_keyframes': 0}
    if keyframe_min_angle_deg is not None:   # None: the default
        conf['keyframe_min_angle_deg'] = keyframe_min_angle_deg
    tracker = MapTracker(check_odometry_conf(conf))
    rng = np.random.default_rng(seed)
    points = np.stack([rng.uniform(-3, 3, count), rng.uniform(-2, 2, count),
                       rng.uniform(5, 7, count)], axis=1)
    pixels = geometry.project(points, CAMERA)
    reference = tracker.map.add_keyframe(0, np.eye(4))
    ids = np.array([tracker.map.add_point(p, {reference.keyframe_id: px})
                    for p, px in zip(points, pixels)])
    tracker.map.set_landmarks(reference, pixels, ids)
    tracker.kind = 'mono'
    return tracker, reference, points, pixels


def _frame(tracker, reference, points, pixels, x_m):
    """Track a frame moved ``x_m`` sideways that sees 55 % of the points; return if one is due."""
    seen = slice(0, int(0.55 * len(points)))     # fewer than keyframe_min_tracked_ratio
    T_cam_world = invert_transform(make_transform(np.eye(3), [x_m, 0.0, 0.0]))
    pixels1 = geometry.project(points[seen] @ T_cam_world[:3, :3].T + T_cam_world[:3, 3],
                               CAMERA)
    matches = Matches(pixels[seen], pixels1, np.ones(len(pixels1)))
    track = tracker.track(reference, matches, CAMERA)
    assert not isinstance(track, str), track
    assert track.T_world_cam[0, 3] == pytest.approx(x_m, abs=1e-3)
    return tracker.wants_keyframe(track, matches, CAMERA, reference)


def test_slow_parallax_waits_for_map_init_min_angle():
    # Median depth ~6 m: 0.0245 m per frame is ~0.23 deg of parallax per frame.
    tracker, reference, points, pixels = _tracker_with_map()
    due = [_frame(tracker, reference, points, pixels, 0.0245 * n) for n in range(1, 7)]
    # 0.70 deg after three frames is over map_min_angle_deg (0.5) but was built up over
    # three frames: wait until map_init_min_angle_deg (1.0), reached at the fifth.
    assert due == [False, False, False, False, True, True]


def test_the_default_waits_and_map_min_angle_deg_never_waits():
    tracker, reference, points, pixels = _tracker_with_map(keyframe_min_angle_deg=None)
    assert tracker.conf['keyframe_min_angle_deg'] > tracker.conf['map_min_angle_deg']
    due = [_frame(tracker, reference, points, pixels, 0.0245 * n) for n in range(1, 7)]
    assert due == [False, False, False, False, True, True]
    tracker, reference, points, pixels = _tracker_with_map(keyframe_min_angle_deg=0.5)
    due = [_frame(tracker, reference, points, pixels, 0.0245 * n) for n in range(1, 5)]
    assert due == [False, False, True, True]


def test_moderate_parallax_over_two_frames_is_taken():
    # ~0.35 deg a frame, 0.69 deg at the second frame: moderate motion keeps its keyframes
    tracker, reference, points, pixels = _tracker_with_map()
    due = [_frame(tracker, reference, points, pixels, 0.0368 * n) for n in range(1, 3)]
    assert due == [False, True]


def test_fast_parallax_takes_the_first_frame():
    # 0.7 deg in one frame (KITTI at 10 Hz): waiting would lose the tracking; taken at once.
    tracker, reference, points, pixels = _tracker_with_map()
    assert _frame(tracker, reference, points, pixels, 0.0735)


def test_the_count_starts_again_at_each_reference():
    tracker, reference, points, pixels = _tracker_with_map()
    for n in range(1, 4):
        _frame(tracker, reference, points, pixels, 0.0245 * n)
    # A new reference keyframe (at the same place, seeing the same points): its first frame
    # counts as one, so 0.7 deg in it is a keyframe.
    reference2 = tracker.map.add_keyframe(1, np.eye(4))
    tracker.map.set_landmarks(reference2, pixels, reference.point_ids)
    assert _frame(tracker, reference2, points, pixels, 0.0735)
