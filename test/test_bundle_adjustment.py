# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the windowed bundle adjustment (gtsam) and of the local map it refines.

Problems are built from random points seen by cameras on a known path, so the answer is known;
the degenerate inputs check the boundary errors.
"""

import cv2
import numpy as np
import pytest

from relperception.core_types import Camera
from relperception.odometry import geometry
from relperception.odometry.bundle_adjustment import bundle_adjust, reprojection_errors
from relperception.odometry.local_map import LocalMap, triangulate_checked
from relperception.transforms import invert_transform, make_transform

pytest.importorskip('gtsam')

CAMERA = Camera.from_intrinsics(400.0, 400.0, 319.5, 239.5, 640, 480)


def _rotation(rotvec):
    return cv2.Rodrigues(np.asarray(rotvec, dtype=np.float64))[0]


def _problem(seed=0, num_cameras=6, num_points=300, pixel_noise=0.0):
    """Return poses T_cam_world (C, 4, 4), points (P, 3) and every visible observation."""
    rng = np.random.default_rng(seed)
    T_world_cam = np.stack([make_transform(_rotation(rng.normal(0, 0.02, 3)),
                                           [0.3 * i, 0.02 * rng.normal(), 0.4 * i])
                            for i in range(num_cameras)])
    T_cam_world = np.stack([invert_transform(T) for T in T_world_cam])
    points = np.stack([rng.uniform(-4, 5, num_points), rng.uniform(-2, 2, num_points),
                       rng.uniform(6, 14, num_points)], axis=1)
    camera_index, point_index, pixels = [], [], []
    for c, T in enumerate(T_cam_world):
        projected = geometry.project(points @ T[:3, :3].T + T[:3, 3], CAMERA)
        inside = np.isfinite(projected).all(axis=1) & (projected[:, 0] >= 0) \
            & (projected[:, 0] < 640) & (projected[:, 1] >= 0) & (projected[:, 1] < 480)
        for p in np.flatnonzero(inside):
            camera_index.append(c)
            point_index.append(p)
            pixels.append(projected[p] + rng.normal(0, pixel_noise, 2))
    return (T_cam_world, points, np.array(camera_index), np.array(point_index),
            np.array(pixels))


def _filled_map(seed, num_cameras):
    """Return a LocalMap holding a :func:`_problem`: map, keyframes, views, T_cam_world."""
    T_cam_world, points, cams, pts, pixels = _problem(seed=seed, num_cameras=num_cameras)
    local_map = LocalMap(max_keyframes=10)
    keyframes = [local_map.add_keyframe(c, invert_transform(T)) for c, T in
                 enumerate(T_cam_world)]
    views = {}
    for c, p, pixel in zip(cams, pts, pixels):
        views.setdefault(p, {})[keyframes[c].keyframe_id] = pixel
    for p, v in views.items():
        local_map.add_point(points[p], v)
    return local_map, keyframes, views, T_cam_world


class TestBundleAdjust:
    def test_recovers_points_and_poses(self):
        T_cam_world, points, cams, pts, pixels = _problem()
        rng = np.random.default_rng(1)
        fixed = np.zeros(len(T_cam_world), dtype=bool)
        fixed[:2] = True
        perturbed = T_cam_world.copy()
        for c in range(2, len(perturbed)):
            perturbed[c] = make_transform(_rotation(rng.normal(0, 0.005, 3)),
                                          rng.normal(0, 0.03, 3)) @ perturbed[c]
        noisy_points = points + rng.normal(0, 0.05, points.shape)
        result = bundle_adjust(perturbed, noisy_points, cams, pts, pixels, CAMERA, fixed,
                               huber_px=1.0, max_iterations=30)
        assert result.initial_rmse_px > 2.0
        assert result.final_rmse_px < 1e-3
        assert result.success and result.iterations >= 1 and result.elapsed_ms > 0
        np.testing.assert_array_equal(result.T_cam_world[:2], perturbed[:2])
        np.testing.assert_allclose(result.T_cam_world[2:], T_cam_world[2:], atol=1e-4)
        np.testing.assert_allclose(result.points_world, points, atol=1e-3)
        assert result.residuals_px.shape == (len(pixels),)

    def test_pose_covariances_match_monte_carlo(self):
        """The reported covariance of the free poses is the spread of repeated adjustments."""
        T_cam_world, points, cams, pts, exact = _problem(seed=3, num_cameras=4, num_points=60)
        fixed = np.array([True, True, False, False])
        rng = np.random.default_rng(0)
        errors, reported = [], []
        for _ in range(150):
            noisy = exact + rng.normal(0, 1.0, exact.shape)   # 1 px: the reported unit
            result = bundle_adjust(T_cam_world, points, cams, pts, noisy, CAMERA, fixed,
                                   huber_px=10.0, max_iterations=20, covariances=True)
            np.testing.assert_array_equal(result.pose_covariances[:2], 0.0)
            reported.append(result.pose_covariances[2:])
            row = []
            for c in (2, 3):
                T_est = invert_transform(result.T_cam_world[c])
                T_true = invert_transform(T_cam_world[c])
                rotation = cv2.Rodrigues(T_est[:3, :3] @ T_true[:3, :3].T)[0].ravel()
                row.append(np.r_[rotation, T_est[:3, 3] - T_true[:3, 3]])
            errors.append(row)
        errors, reported = np.array(errors), np.array(reported)
        for k in range(2):
            sample_sd = np.sqrt(np.diag(np.cov(errors[:, k].T)))
            reported_sd = np.sqrt(np.diag(reported[:, k].mean(axis=0)))
            np.testing.assert_allclose(reported_sd, sample_sd, rtol=0.2)

    def test_pose_covariances_only_when_asked(self):
        T_cam_world, points, cams, pts, pixels = _problem(num_cameras=3, num_points=40)
        fixed = np.array([True, True, False])
        assert bundle_adjust(T_cam_world, points, cams, pts, pixels, CAMERA,
                             fixed).pose_covariances is None

    def test_outliers_do_not_pull_the_solution(self):
        T_cam_world, points, cams, pts, pixels = _problem(seed=2, pixel_noise=0.3)
        rng = np.random.default_rng(3)
        outliers = rng.choice(len(pixels), len(pixels) // 20, replace=False)
        pixels = pixels.copy()
        pixels[outliers] += rng.normal(0, 40, (len(outliers), 2))
        fixed = np.zeros(len(T_cam_world), dtype=bool)
        fixed[:2] = True
        noisy_points = points + rng.normal(0, 0.05, points.shape)
        result = bundle_adjust(T_cam_world, noisy_points, cams, pts, pixels, CAMERA, fixed,
                               huber_px=1.0, max_iterations=20)
        inliers = np.ones(len(pixels), dtype=bool)
        inliers[outliers] = False
        assert np.median(result.residuals_px[inliers]) < 0.5
        assert np.median(result.residuals_px[outliers]) > 10.0
        np.testing.assert_allclose(result.T_cam_world[:, :3, 3], T_cam_world[:, :3, 3],
                                   atol=0.02)

    def test_all_fixed_refines_points_only(self):
        T_cam_world, points, cams, pts, pixels = _problem(seed=4)
        result = bundle_adjust(T_cam_world, points + 0.02, cams, pts, pixels, CAMERA,
                               np.ones(len(T_cam_world), dtype=bool), max_iterations=20)
        np.testing.assert_array_equal(result.T_cam_world, T_cam_world)
        np.testing.assert_allclose(result.points_world, points, atol=1e-4)

    def test_reprojection_errors_match_projection(self):
        T_cam_world, points, cams, pts, pixels = _problem(seed=5)
        errors = reprojection_errors(T_cam_world, points, cams, pts, pixels + [3.0, 4.0],
                                     CAMERA.K)
        np.testing.assert_allclose(errors, 5.0, atol=1e-6)
        behind = T_cam_world.copy()
        behind[:, :3, 3] -= [0, 0, 100]
        assert np.all(np.isinf(reprojection_errors(behind, points, cams, pts, pixels,
                                                   CAMERA.K)))

    def test_depth_readings_fix_what_pixels_leave_open(self):
        """One fixed camera: pixels alone leave the scale free; exact depths recover it."""
        T_cam_world, points, cams, pts, pixels = _problem(seed=8, pixel_noise=0.3)
        depths = np.einsum('mj,mj->m', T_cam_world[cams, 2, :3], points[pts]) \
            + T_cam_world[cams, 2, 3]
        rng = np.random.default_rng(2)
        fixed = np.zeros(len(T_cam_world), dtype=bool)
        fixed[0] = True
        start = T_cam_world.copy()
        start[1:, :3, 3] *= 1.1   # a 10 % scale error of the path ...
        start_points = points * 1.1 + rng.normal(0, 0.02, points.shape)   # ... and the points

        def position_error(result):
            centres = np.stack([invert_transform(T)[:3, 3] for T in result.T_cam_world])
            truth = np.stack([invert_transform(T)[:3, 3] for T in T_cam_world])
            return float(np.max(np.linalg.norm(centres - truth, axis=1)))

        pixels_only = bundle_adjust(start, start_points, cams, pts, pixels, CAMERA, fixed,
                                    max_iterations=20)
        assert np.all(np.isnan(pixels_only.depth_errors_rel))
        with_depth = bundle_adjust(start, start_points, cams, pts, pixels, CAMERA, fixed,
                                   max_iterations=20, depths=depths, depth_sigma_rel=0.001)
        assert position_error(pixels_only) > 0.05   # the scale stayed wrong
        assert position_error(with_depth) < 0.01
        assert np.nanmax(np.abs(with_depth.depth_errors_rel)) < 0.003
        # Observations without a reading (NaN) keep the plain reprojection residual.
        some = depths.copy()
        some[::2] = np.nan
        partial = bundle_adjust(start, start_points, cams, pts, pixels, CAMERA, fixed,
                                max_iterations=20, depths=some, depth_sigma_rel=0.001)
        assert position_error(partial) < 0.01
        assert np.all(np.isnan(partial.depth_errors_rel[::2]))

    def test_measured_distances_fix_the_scale(self):
        """Measured distances between consecutive centres give the scale pixels leave free.

        One fixed camera; the distances are what wheel odometry measures.
        """
        T_cam_world, points, cams, pts, pixels = _problem(seed=8, pixel_noise=0.3)
        centres = np.stack([invert_transform(T)[:3, 3] for T in T_cam_world])
        distances = np.array([(i, i + 1, np.linalg.norm(centres[i + 1] - centres[i]))
                              for i in range(len(centres) - 1)])
        rng = np.random.default_rng(2)
        fixed = np.zeros(len(T_cam_world), dtype=bool)
        fixed[0] = True
        start = T_cam_world.copy()
        start[1:, :3, 3] *= 1.1
        start_points = points * 1.1 + rng.normal(0, 0.02, points.shape)

        def position_error(result):
            found = np.stack([invert_transform(T)[:3, 3] for T in result.T_cam_world])
            return float(np.max(np.linalg.norm(found - centres, axis=1)))

        pixels_only = bundle_adjust(start, start_points, cams, pts, pixels, CAMERA, fixed,
                                    max_iterations=20)
        hinted = bundle_adjust(start, start_points, cams, pts, pixels, CAMERA, fixed,
                               max_iterations=20, distances=distances,
                               distance_sigma_rel=0.001)
        assert position_error(pixels_only) > 0.05
        assert position_error(hinted) < 0.01
        # A noisy distance (5 %) weighed as such moves the scale part of the way only.
        loose = bundle_adjust(start, start_points, cams, pts, pixels, CAMERA, fixed,
                              max_iterations=20, distances=distances[:1] * [1, 1, 1.05],
                              distance_sigma_rel=0.05)
        assert position_error(hinted) < position_error(loose)

    @pytest.mark.parametrize('distances', [np.array([[0, 0, 1.0]]), np.array([[0, 9, 1.0]]),
                                           np.array([[0, 1, -1.0]]), np.array([[0, 1]]),
                                           np.array([[0.5, 1, 1.0]])])
    def test_bad_distances_raise_value_error(self, distances):
        T_cam_world, points, cams, pts, pixels = _problem(seed=6)
        fixed = np.zeros(len(T_cam_world), dtype=bool)
        with pytest.raises(ValueError, match='distance'):
            bundle_adjust(T_cam_world, points, cams, pts, pixels, CAMERA, fixed,
                          distances=distances)

    @pytest.mark.parametrize('change', ['no_observation', 'bad_index', 'nan', 'shape',
                                        'huber', 'fixed_shape', 'camera', 'depth_shape',
                                        'depth_negative', 'depth_sigma'])
    def test_bad_input_raises_value_error(self, change):
        T_cam_world, points, cams, pts, pixels = _problem(seed=6)
        fixed = np.zeros(len(T_cam_world), dtype=bool)
        kwargs = {}
        camera = CAMERA
        if change == 'no_observation':
            cams, pts, pixels = cams[:0], pts[:0], pixels[:0]
        elif change == 'bad_index':
            pts = pts.copy()
            pts[0] = len(points)
        elif change == 'nan':
            points = points.copy()
            points[0, 0] = np.nan
        elif change == 'shape':
            pixels = pixels[:-1]
        elif change == 'huber':
            kwargs['huber_px'] = 0.0
        elif change == 'fixed_shape':
            fixed = fixed[:-1]
        elif change == 'depth_shape':
            kwargs['depths'] = np.ones(len(pixels) - 1)
        elif change == 'depth_negative':
            kwargs['depths'] = -np.ones(len(pixels))
        elif change == 'depth_sigma':
            kwargs.update(depths=np.ones(len(pixels)), depth_sigma_rel=0.0)
        else:
            camera = 'not a camera'
        with pytest.raises(ValueError):
            bundle_adjust(T_cam_world, points, cams, pts, pixels, camera, fixed, **kwargs)


class TestLocalMap:
    def test_lookup_finds_own_keypoints_only(self):
        local_map = LocalMap(max_keyframes=3)
        keyframe = local_map.add_keyframe(0, np.eye(4))
        ids = [local_map.add_point([0, 0, 5], {keyframe.keyframe_id: [10.0, 20.0]}),
               local_map.add_point([1, 0, 5], {keyframe.keyframe_id: [30.0, 40.0]})]
        local_map.set_landmarks(keyframe, [[10.0, 20.0], [30.0, 40.0]], ids)
        found = local_map.lookup(keyframe, [[10.1, 20.0], [30.0, 40.0], [12.0, 20.0],
                                            [np.nan, 1.0]])
        np.testing.assert_array_equal(found, [ids[0], ids[1], -1, -1])
        local_map.remove_point(ids[0])
        np.testing.assert_array_equal(local_map.lookup(keyframe, [[10.0, 20.0]]), [-1])
        assert np.isnan(local_map.points_world([ids[0], -1])).all()

    def test_old_keyframes_leave_with_their_points(self):
        local_map = LocalMap(max_keyframes=2)
        k0 = local_map.add_keyframe(0, np.eye(4))
        k1 = local_map.add_keyframe(1, np.eye(4))
        only_k0 = local_map.add_point([0, 0, 5], {k0.keyframe_id: [1.0, 1.0]})
        shared = local_map.add_point([0, 1, 5], {k0.keyframe_id: [2.0, 2.0],
                                                 k1.keyframe_id: [3.0, 3.0]})
        local_map.add_keyframe(2, np.eye(4))
        assert list(local_map.keyframes) == [k1.keyframe_id, k1.keyframe_id + 1]
        assert only_k0 not in local_map.points and shared in local_map.points
        assert set(local_map.observations[shared]) == {k1.keyframe_id}

    def test_hinted_distances_join_the_window_problem(self):
        local_map = LocalMap(max_keyframes=10)
        T_cam_world, points, cams, pts, pixels = _problem(seed=3, num_cameras=4)
        keyframes = [local_map.add_keyframe(c, invert_transform(T), hint_m=None if c == 0
                                            else 0.5 * c)
                     for c, T in enumerate(T_cam_world)]
        views = {}
        for c, p, pixel in zip(cams, pts, pixels):
            views.setdefault(p, {})[keyframes[c].keyframe_id] = pixel
        for p, v in views.items():
            local_map.add_point(points[p], v)
        problem = local_map.window_problem(4, 1000, num_fixed=1)
        slot = {int(k): i for i, k in enumerate(problem.keyframe_ids)}
        expected = [(slot[k - 1], slot[k], 0.5 * k) for k in (1, 2, 3)]
        np.testing.assert_allclose(problem.distances, expected)
        with pytest.raises(ValueError, match='hint_m'):
            local_map.add_keyframe(9, np.eye(4), hint_m=-1.0)

    def test_depth_readings_travel_with_their_observations(self):
        local_map = LocalMap(max_keyframes=4)
        k0 = local_map.add_keyframe(0, np.eye(4))
        k1 = local_map.add_keyframe(1, make_transform(np.eye(3), [0.1, 0, 0]))
        k2 = local_map.add_keyframe(2, make_transform(np.eye(3), [0.2, 0, 0]))
        point = local_map.add_point([0, 0, 2.0], {k0.keyframe_id: (10.0, 20.0, 2.0),
                                                  k1.keyframe_id: [11.0, 20.0]})
        local_map.add_observation(point, k2.keyframe_id, [12.0, 20.0], depth=-1.0)
        problem = local_map.window_problem(window=3, max_points=10, num_fixed=1)
        np.testing.assert_array_equal(problem.pixels, [[10, 20], [11, 20], [12, 20]])
        np.testing.assert_array_equal(problem.depths, [2.0, np.nan, np.nan])   # -1: invalid
        np.testing.assert_array_equal(problem.fixed, [True, False, False])
        with pytest.raises(ValueError):
            local_map.add_point([0, 0, 1], {k0.keyframe_id: [1.0, 2.0, 3.0, 4.0]})

    def test_window_problem_fixes_the_gauge_and_caps_points(self):
        local_map, keyframes, views, _ = _filled_map(seed=7, num_cameras=5)
        problem = local_map.window_problem(window=4, max_points=50)
        assert len(problem.point_ids) == 50
        seen = [len(views[p]) for p in problem.point_ids]
        assert min(seen) >= max(len(v) for v in views.values()) - 1
        # Keyframe 0 observes window points: it is in the problem, fixed, as are the two
        # oldest window keyframes (1 and 2); 3 and 4 are free.
        np.testing.assert_array_equal(problem.keyframe_ids, [k.keyframe_id for k in keyframes])
        np.testing.assert_array_equal(problem.fixed, [True, True, True, False, False])
        assert local_map.window_problem(window=2, max_points=50) is None

    def test_adjustment_moves_later_keyframes_and_their_points_rigidly(self):
        """A keyframe added while the adjustment ran follows the newest adjusted keyframe."""
        local_map, keyframes, _, T_cam_world = _filled_map(seed=3, num_cameras=4)
        problem = local_map.window_problem(window=4, max_points=1000)
        later = local_map.add_keyframe(9, invert_transform(T_cam_world[-1]) @ make_transform(
            np.eye(3), [0.0, 0.0, 0.5]))
        T_world_later = later.T_world_cam.copy()
        new_point = local_map.add_point([0.3, 0.2, 6.0], {later.keyframe_id: [5.0, 5.0]})
        # The adjustment moved the newest keyframe by a known rigid motion.
        shift = make_transform(_rotation([0.0, 0.01, 0.0]), [0.05, 0.0, -0.02])
        adjusted = problem.T_cam_world.copy()
        adjusted[-1] = invert_transform(shift @ invert_transform(adjusted[-1]))
        correction = local_map.apply_adjustment(
            problem, adjusted, problem.points_world, np.zeros(len(problem.pixels)), 2.0)
        np.testing.assert_allclose(correction, shift, atol=1e-9)
        np.testing.assert_allclose(later.T_world_cam, shift @ T_world_later, atol=1e-9)
        np.testing.assert_allclose(local_map.points[new_point],
                                   shift[:3, :3] @ [0.3, 0.2, 6.0] + shift[:3, 3], atol=1e-9)
        # Keyframes that did not move keep their pose.
        np.testing.assert_allclose(keyframes[0].T_world_cam, invert_transform(T_cam_world[0]),
                                   atol=1e-12)

    def test_triangulate_checked(self):
        rng = np.random.default_rng(8)
        points = np.stack([rng.uniform(-2, 2, 50), rng.uniform(-1, 1, 50),
                           rng.uniform(4, 8, 50)], axis=1)
        T_world_a = np.eye(4)
        T_world_b = make_transform(_rotation([0, 0.02, 0]), [0.5, 0, 0])
        pixels_a = geometry.project(points, CAMERA)
        T_b_world = invert_transform(T_world_b)
        pixels_b = geometry.project(points @ T_b_world[:3, :3].T + T_b_world[:3, 3], CAMERA)
        pixels_b[:5] += 10.0   # wrong correspondences
        world, good = triangulate_checked(pixels_a, pixels_b, T_world_a, T_world_b, CAMERA,
                                          min_angle_deg=1.0, max_error_px=2.0)
        assert not good[:5].any() and good[5:].all()
        np.testing.assert_allclose(world[5:], points[5:], atol=1e-6)
        # No baseline: no parallax, no point.
        _, good = triangulate_checked(pixels_a, pixels_a, T_world_a, T_world_a, CAMERA,
                                      min_angle_deg=0.5, max_error_px=2.0)
        assert not good.any()


class TestWithoutGtsam:
    """The tracker runs without the bundle-adjustment library (e.g. a Jetson without gtsam)."""

    def test_bundle_adjust_says_what_is_missing(self, monkeypatch):
        import sys

        from relperception.odometry.bundle_adjustment import BundleAdjustmentUnavailable

        monkeypatch.setitem(sys.modules, 'gtsam', None)   # import gtsam raises ImportError
        T_cam_world, points, cams, pts, pixels = _problem(seed=9)
        with pytest.raises(BundleAdjustmentUnavailable, match='pip install gtsam'):
            bundle_adjust(T_cam_world, points, cams, pts, pixels, CAMERA,
                          np.ones(len(T_cam_world), dtype=bool))

    def test_map_tracker_reports_it_and_stops_asking(self):
        import concurrent.futures

        from relperception.odometry.bundle_adjustment import BundleAdjustmentUnavailable
        from relperception.odometry.map_tracker import MapTracker
        from relperception.odometry.vo import check_odometry_conf

        tracker = MapTracker(check_odometry_conf(None))
        failed = concurrent.futures.Future()
        failed.set_exception(BundleAdjustmentUnavailable('bundle adjustment needs gtsam'))
        tracker._pending = (None, failed)
        assert tracker.join_adjustment() is None
        stats = tracker.stats()
        assert stats['ba_unavailable'] == 'bundle adjustment needs gtsam'
        assert stats['ba_calls'] == 0 and stats['ba_failures'] == 0
        tracker._start_adjustment(CAMERA)   # no new adjustment is started
        assert tracker._pending is None
