# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Core value types (Camera, Frame, Matches) and rigid transforms."""

import numpy as np
import pytest
from relperception.core_types import Camera, Frame, Matches
from relperception.odometry.geometry import project, relative_pose_essential
from relperception.transforms import (check_transform, invert_transform, make_transform,
                                      quaternion_xyzw_from_transform, rotation_angle_deg,
                                      transform_from_quaternion_xyzw)


class TestCamera:

    def test_smoke(self):
        camera = Camera.from_intrinsics(500.0, 510.0, 319.5, 239.5, 640, 480)
        assert (camera.fx, camera.fy, camera.cx, camera.cy) == (500.0, 510.0, 319.5, 239.5)
        assert not camera.has_distortion and camera.distortion.shape == (5,)

    @pytest.mark.parametrize('kwargs, message', [
        ({'distortion': [np.nan] * 5}, 'finite'),            # projected every point to NaN
        ({'distortion': [0.1] * 3}, 'plumb_bob model needs 4 or 5'),
        ({'distortion': [0.1] * 5, 'distortion_model': 'rational_polynomial'}, 'needs 8'),
        ({'distortion_model': []}, 'not handled'),
        ({'width': 640.7}, 'whole number of pixels'),       # was truncated to 640
        ({'width': float('nan')}, 'whole number of pixels'),
        ({'height': None}, 'whole number of pixels'),
        ({'K': [[500.0, 0, 320], [0, 500, 240], [0, 0, 0]]}, r'\[0, 0, 1\]'),
    ])
    def test_malformed_camera(self, kwargs, message):
        args = {'K': [[500.0, 0, 320], [0, 500, 240], [0, 0, 1]], 'width': 640, 'height': 480,
                **kwargs}
        with pytest.raises(ValueError, match=message):
            Camera(**args)

    def test_scaled_keeps_pixel_centre_convention(self):
        camera = Camera.from_intrinsics(500.0, 500.0, 319.5, 239.5, 640, 480)
        half = camera.scaled(0.5)
        assert (half.width, half.height) == (320, 240)
        assert half.fx == 250.0 and half.cx == 159.5 and half.cy == 119.5

    def test_strided_matrix_is_copied_contiguous(self):
        projection = np.array([[700.0, 0.0, 600.0, -380.0],
                               [0.0, 700.0, 180.0, 0.0],
                               [0.0, 0.0, 1.0, 0.0]])
        camera = Camera(K=projection[:, :3], width=1226, height=370)
        assert camera.K.flags['C_CONTIGUOUS'] and not np.shares_memory(camera.K, projection)

    def test_strided_matrix_regression_essential_matrix(self):
        """A K sliced from a projection matrix used to make OpenCV's MAGSAC find nothing."""
        projection = np.array([[700.0, 0.0, 600.0, -380.0],
                               [0.0, 700.0, 180.0, 0.0],
                               [0.0, 0.0, 1.0, 0.0]])
        camera = Camera(K=projection[:, :3], width=1226, height=370)
        rng = np.random.default_rng(0)
        points = np.stack([rng.uniform(-8, 8, 300), rng.uniform(-2, 2, 300),
                           rng.uniform(5, 40, 300)], axis=1)
        T_cam1_cam0 = make_transform(np.eye(3), [0.0, 0.0, -1.0])
        points1 = points @ T_cam1_cam0[:3, :3].T + T_cam1_cam0[:3, 3]
        result = relative_pose_essential(project(points, camera), project(points1, camera),
                                         camera)
        assert result is not None
        assert np.allclose(result[0][:3, 3], [0.0, 0.0, -1.0], atol=1e-3)

    @pytest.mark.parametrize('K', [np.eye(2), np.zeros((3, 3)), np.full((3, 3), np.nan)])
    def test_bad_matrix(self, K):
        with pytest.raises(ValueError):
            Camera(K=K, width=10, height=10)

    def test_bad_size(self):
        with pytest.raises(ValueError):
            Camera.from_intrinsics(1.0, 1.0, 0.0, 0.0, 0, 10)


class TestFrame:

    def test_gray_from_rgb(self):
        camera = Camera.from_intrinsics(100.0, 100.0, 15.5, 11.5, 32, 24)
        image = np.zeros((24, 32, 3), np.uint8)
        image[..., 1] = 200
        frame = Frame(image, 5, camera)
        assert frame.gray.shape == (24, 32) and frame.gray.dtype == np.uint8
        assert 100 < frame.gray.mean() < 130   # luma of pure green

    @pytest.mark.parametrize('image, depth', [
        (np.zeros((24, 32), np.float32), None),        # not uint8
        (np.zeros((24, 31), np.uint8), None),          # size differs from camera_info
        (np.zeros((24, 32, 4), np.uint8), None),       # four channels
        (np.zeros((24, 32), np.uint8), np.zeros((12, 16), np.float32)),  # depth size
        (np.zeros((24, 32), np.uint8), np.full((24, 32), 1500, np.uint16)),  # millimetres
        (np.zeros((24, 32), np.uint8), [[1.0] * 32] * 24),                   # not an array
    ])
    def test_inconsistent_input(self, image, depth):
        camera = Camera.from_intrinsics(100.0, 100.0, 15.5, 11.5, 32, 24)
        with pytest.raises(ValueError):
            Frame(image, 0, camera, depth)

    def test_stamp_and_camera_are_checked(self):
        camera = Camera.from_intrinsics(100.0, 100.0, 15.5, 11.5, 32, 24)
        image = np.zeros((24, 32), np.uint8)
        assert Frame(image, np.int64(7), camera).stamp_ns == 7
        for stamp in (1.7, None, True):   # 1.7 was truncated to 1 ns
            with pytest.raises(ValueError, match='stamp_ns'):
                Frame(image, stamp, camera)
        with pytest.raises(ValueError, match='Frame.camera must be a Camera'):
            Frame(image, 0, None)


class TestMatches:

    def test_shapes_and_select(self):
        matches = Matches(np.arange(8).reshape(4, 2), np.arange(8).reshape(4, 2) + 1.0,
                          [0.1, 0.2, 0.3, 0.4])
        assert len(matches) == 4 and matches.keypoints0.dtype == np.float32
        subset = matches.select(matches.confidence > 0.25)
        assert len(subset) == 2 and np.allclose(subset.confidence, [0.3, 0.4])
        swapped = matches.swapped()
        assert np.array_equal(swapped.keypoints0, matches.keypoints1)
        assert len(Matches.empty()) == 0

    @pytest.mark.parametrize('k0, k1, conf', [
        (np.zeros((3, 2)), np.zeros((2, 2)), np.zeros(3)),
        (np.zeros((3, 3)), np.zeros((3, 3)), np.zeros(3)),
        (np.zeros((3, 2)), np.zeros((3, 2)), np.zeros(2)),
    ])
    def test_inconsistent(self, k0, k1, conf):
        with pytest.raises(ValueError):
            Matches(k0, k1, conf)


class TestTransforms:

    def test_quaternion_round_trip_and_inverse(self):
        q_xyzw = np.array([0.1, -0.2, 0.3, 0.9])
        q_xyzw /= np.linalg.norm(q_xyzw)
        T = transform_from_quaternion_xyzw([1.0, 2.0, 3.0], q_xyzw)
        check_transform(T)
        q = quaternion_xyzw_from_transform(T)
        assert np.allclose(q, q_xyzw) or np.allclose(q, -q_xyzw)
        assert np.allclose(invert_transform(T) @ T, np.eye(4))
        assert rotation_angle_deg(np.eye(4)) == 0.0

    def test_bad_input(self):
        with pytest.raises(ValueError):
            transform_from_quaternion_xyzw([0, 0, 0], [0, 0, 0, 0])
        with pytest.raises(ValueError):
            check_transform(np.ones((4, 4)))
        with pytest.raises(ValueError):
            make_transform(np.eye(2), [0, 0, 0])
        with pytest.raises(ValueError, match='finite'):
            make_transform(np.full((3, 3), np.nan), [0, 0, 0])

    @pytest.mark.parametrize('T, message', [
        (make_transform(np.diag([1.0, 1.0, -1.0]), [0, 0, 0]), 'reflection'),
        (np.diag([2.0, 2.0, 2.0, 1.0]), 'not a rigid transform'),
        (np.eye(3), r'shape \(4, 4\)'),
        (np.eye(5), r'shape \(4, 4\)'),
        (np.full((4, 4), np.nan), 'NaN or inf'),
    ])
    def test_every_helper_refuses_what_is_not_a_rigid_transform(self, T, message):
        # invert_transform returned diag(2, 2, 2, 1) for itself, truncated (5, 5) matrices and
        # rotation_angle_deg gave 60 deg for a (2, 2) identity
        for helper in (check_transform, invert_transform, rotation_angle_deg,
                       quaternion_xyzw_from_transform):
            with pytest.raises(ValueError, match=message):
                helper(T)
