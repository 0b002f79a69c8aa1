# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Pose covariances (relperception.odometry.covariance) against Monte Carlo references."""

import cv2
import numpy as np
import pytest
from relperception.core_types import Camera
from relperception.odometry import covariance as cov_lib
from relperception.transforms import invert_transform, make_transform
from scipy.spatial.transform import Rotation

CAMERA = Camera(np.array([[500.0, 0, 320], [0, 500.0, 240], [0, 0, 1]]), 640, 480)


def _random_transform(rng):
    return make_transform(Rotation.from_rotvec(rng.normal(0, 0.5, 3)).as_matrix(),
                          rng.normal(0, 2, 3))


def _random_covariance(rng, scale=1e-3):
    A = rng.normal(0, scale, (6, 6))
    return A @ A.T


def _perturbed(rng, T, cov, count):
    """``count`` samples of ``T`` perturbed on the left with covariance ``cov``: (count, 4, 4)."""
    d = rng.multivariate_normal(np.zeros(6), cov, size=count)
    out = np.tile(np.eye(4), (count, 1, 1))
    out[:, :3, :3] = Rotation.from_rotvec(d[:, :3]).as_matrix() @ T[:3, :3]
    out[:, :3, 3] = T[:3, 3] + d[:, 3:]
    return out


def _invert(T):
    out = np.tile(np.eye(4), (len(T), 1, 1))
    out[:, :3, :3] = np.transpose(T[:, :3, :3], (0, 2, 1))
    out[:, :3, 3] = -np.einsum('nji,nj->ni', T[:, :3, :3], T[:, :3, 3])
    return out


def _sample_covariance(samples, T):
    """Covariance of the left perturbations that take ``T`` to each of ``samples``."""
    dR = samples[:, :3, :3] @ T[:3, :3].T
    logs = np.column_stack([Rotation.from_matrix(dR).as_rotvec(),
                            samples[:, :3, 3] - T[:3, 3]])
    return np.cov(logs.T)


N = 20000


class TestPropagation:
    def test_inverse_matches_monte_carlo(self):
        rng = np.random.default_rng(0)
        T, cov = _random_transform(rng), _random_covariance(rng)
        samples = _invert(_perturbed(rng, T, cov, N))
        expected = _sample_covariance(samples, invert_transform(T))
        got = cov_lib.invert_covariance(T, cov)
        np.testing.assert_allclose(got, expected, atol=0.03 * np.abs(expected).max())

    def test_composition_matches_monte_carlo(self):
        rng = np.random.default_rng(1)
        T_a_b, T_b_c = _random_transform(rng), _random_transform(rng)
        cov_a_b, cov_b_c = _random_covariance(rng), _random_covariance(rng)
        samples = _perturbed(rng, T_a_b, cov_a_b, N) @ _perturbed(rng, T_b_c, cov_b_c, N)
        expected = _sample_covariance(samples, T_a_b @ T_b_c)
        got = cov_lib.compose_covariance(T_a_b, cov_a_b, T_b_c, cov_b_c)
        np.testing.assert_allclose(got, expected, atol=0.03 * np.abs(expected).max())

    def test_conjugation_and_ros_order(self):
        rng = np.random.default_rng(2)
        mount, T, cov = _random_transform(rng), _random_transform(rng), _random_covariance(rng)
        samples = mount @ _perturbed(rng, T, cov, N) @ invert_transform(mount)
        expected = _sample_covariance(samples, mount @ T @ invert_transform(mount))
        got = cov_lib.conjugate_covariance(mount, T, cov)
        np.testing.assert_allclose(got, expected, atol=0.03 * np.abs(expected).max())
        diagonal = np.arange(6.0) + 1
        ros = cov_lib.ros_order(np.diag(diagonal)).reshape(6, 6)
        assert np.diag(ros).tolist() == [4.0, 5.0, 6.0, 1.0, 2.0, 3.0]

    def test_degenerate(self):
        with pytest.raises(ValueError, match='6, 6'):
            cov_lib.invert_covariance(np.eye(4), np.eye(3))
        with pytest.raises(ValueError, match='finite'):
            cov_lib.compose_covariance(np.eye(4), np.full((6, 6), np.nan), np.eye(4),
                                       np.eye(6))
        with pytest.raises(ValueError, match='sigma_m'):
            cov_lib.inflate_translation(np.eye(6), -1.0)
        inflated = cov_lib.inflate_translation(np.zeros((6, 6)), 2.0)
        assert np.diag(inflated).tolist() == [0, 0, 0, 4, 4, 4]

    def test_positive_part(self):
        rng = np.random.default_rng(3)
        cov = _random_covariance(rng)
        np.testing.assert_allclose(cov_lib.positive_part(cov), cov, atol=1e-12)
        # a covariance minus a larger one: nothing positive is left
        np.testing.assert_allclose(cov_lib.positive_part(cov - 2 * cov), 0.0, atol=1e-12)
        mixed = cov_lib.positive_part(np.diag([1.0, -3.0, 2.0, 0.0, -1.0, 5.0]))
        np.testing.assert_allclose(mixed, np.diag([1.0, 0.0, 2.0, 0.0, 0.0, 5.0]), atol=1e-12)
        with pytest.raises(ValueError, match='square'):
            cov_lib.positive_part(np.full((6, 6), np.inf))


class TestPnpCovariance:
    def test_matches_monte_carlo_of_pnp(self):
        rng = np.random.default_rng(3)
        points = np.column_stack([rng.uniform(-3, 3, 60), rng.uniform(-2, 2, 60),
                                  rng.uniform(4, 12, 60)])
        T = make_transform(Rotation.from_rotvec([0.05, -0.1, 0.02]).as_matrix(),
                           [0.3, -0.1, 0.5])
        clean, _ = cv2.projectPoints(points, cv2.Rodrigues(T[:3, :3])[0], T[:3, 3], CAMERA.K,
                                     CAMERA.distortion)
        clean = clean.reshape(-1, 2)
        sigma_px = 1.5
        estimates, predicted = [], []
        for _ in range(2000):
            observed = clean + rng.normal(0, sigma_px, clean.shape)
            ok, rvec, tvec = cv2.solvePnP(points, observed, CAMERA.K, CAMERA.distortion,
                                          cv2.Rodrigues(T[:3, :3])[0], T[:3, 3].copy(),
                                          useExtrinsicGuess=True,
                                          flags=cv2.SOLVEPNP_ITERATIVE)
            assert ok
            estimate = make_transform(cv2.Rodrigues(rvec)[0], tvec.reshape(3))
            estimates.append(estimate)
            if len(predicted) < 20:
                predicted.append(cov_lib.pnp_covariance(points, observed, estimate, CAMERA))
        expected = _sample_covariance(np.asarray(estimates), T)
        got = np.mean(predicted, axis=0)
        # standard deviations within 15 % (the residual variance is estimated per call)
        np.testing.assert_allclose(np.sqrt(np.diag(got)), np.sqrt(np.diag(expected)),
                                   rtol=0.15)

    def test_more_noise_more_variance_and_floor(self):
        rng = np.random.default_rng(4)
        points = np.column_stack([rng.uniform(-2, 2, 40), rng.uniform(-2, 2, 40),
                                  rng.uniform(3, 8, 40)])
        T = np.eye(4)
        pixels = points[:, :2] / points[:, 2:] * 500.0 + [320, 240]
        exact = cov_lib.pnp_covariance(points, pixels, T, CAMERA)
        noisy = cov_lib.pnp_covariance(points, pixels + rng.normal(0, 3.0, pixels.shape), T,
                                       CAMERA)
        assert np.trace(noisy) > 10 * np.trace(exact) > 0   # exact data: the floor, not zero

    def test_degenerate_inputs(self):
        points = np.array([[0, 0, 5.0], [1, 0, 5], [0, 1, 5]])
        pixels = points[:, :2] / points[:, 2:] * 500.0 + [320, 240]
        assert cov_lib.pnp_covariance(points, pixels, np.eye(4), CAMERA) is None   # 3 points
        behind = np.array([[0, 0, -5.0]] * 10)
        assert cov_lib.pnp_covariance(behind, np.zeros((10, 2)), np.eye(4), CAMERA) is None
        with pytest.raises(ValueError, match='same length'):
            cov_lib.pnp_covariance(np.zeros((5, 3)), np.zeros((4, 2)), np.eye(4), CAMERA)
        with pytest.raises(ValueError, match='Camera'):
            cov_lib.pnp_covariance(np.zeros((5, 3)), np.zeros((5, 2)), np.eye(4), 'camera')


class TestTwist:
    def test_constant_motion(self):
        step = make_transform(Rotation.from_rotvec([0, 0, 0.1]).as_matrix(), [0.5, 0, 0])
        T0 = make_transform(Rotation.from_rotvec([0.2, 0.1, 1.0]).as_matrix(), [3, 4, 5])
        twist = cov_lib.twist_from_poses(T0, T0 @ step, 0.5)
        # forward 1 m/s, yaw 0.2 rad/s in the body frame, whatever the world pose
        np.testing.assert_allclose(twist, [1.0, 0, 0, 0, 0, 0.2], atol=0.03)
        np.testing.assert_allclose(cov_lib.twist_from_poses(T0, T0, 1.0), np.zeros(6),
                                   atol=1e-12)
        with pytest.raises(ValueError, match='dt_s'):
            cov_lib.twist_from_poses(T0, T0, 0.0)


class TestOdometryCovariance:
    """The covariance the tracker reports, against its own errors (synthetic, exact depth)."""

    @staticmethod
    def _run(mode, num_frames=25, **odometry):
        from relperception.config import defaults, section
        from relperception.core_types import Frame
        from relperception.data.synthetic import iter_sequence
        from relperception.matching import build_matcher
        from relperception.odometry.vo import VisualOdometry

        camera, frames = iter_sequence(num_frames, seed=2, width=320, height=240,
                                       image_noise_std=2.0)
        conf = {**section(defaults(), 'odometry'), 'mode': mode, **odometry}
        vo = VisualOdometry(build_matcher('ncc', section(defaults(), 'ncc')), conf)
        out = []
        try:
            for frame in frames:
                result = vo.step(Frame(frame.rgb, frame.stamp_ns, camera,
                                       frame.depth if mode == 'rgbd' else None))
                if not out:
                    T_first = frame.T_world_cam
                truth = invert_transform(T_first) @ frame.T_world_cam
                out.append((result, truth))
            TestOdometryCovariance.map_stats = vo.map_stats()
        finally:
            vo.close()
        return out

    def test_rgbd_errors_within_the_reported_uncertainty(self):
        results = self._run('rgbd')
        normalised = []
        for result, truth in results[5:]:
            assert result.status == 'tracking' and result.scale_source == 'depth'
            sd = np.sqrt(np.diag(result.pose_covariance))
            error = result.T_world_cam[:3, 3] - truth[:3, 3]
            normalised.append(np.abs(error) / sd[3:])
            assert sd[3:].max() < 0.05
        # consistent, neither over- nor absurdly under-confident
        assert np.median(normalised) < 3.0 and np.median(normalised) > 0.01

    def test_monocular_translation_is_uncertain(self):
        result, _ = self._run('mono')[-1]
        assert result.scale_source not in ('depth', 'translation_norm_m')
        sd = np.sqrt(np.diag(result.pose_covariance))
        assert sd[3:].min() > 1.0 and sd[:3].max() < np.radians(2.0)
        assert np.all(np.linalg.eigvalsh(result.motion_covariance) > 0)

    def test_monocular_keyframes_take_the_bundle_adjustment_covariance(self):
        pytest.importorskip('gtsam')
        adjusted = self._run('mono', 40, ba_window_keyframes=5)
        assert self.map_stats['ba_calls'] > 0 and self.map_stats['ba_keyframe_covariances'] > 0
        chained = self._run('mono', 40, ba_window_keyframes=0)
        assert self.map_stats['ba_keyframe_covariances'] == 0
        assert not np.allclose(adjusted[-1][0].pose_covariance, chained[-1][0].pose_covariance,
                               rtol=0.01)
        normalised = []
        for result, truth in adjusted[5:]:
            assert result.status == 'tracking' and result.scale_source == 'map'
            assert np.all(np.linalg.eigvalsh(result.pose_covariance) > 0)
            sd = np.sqrt(np.diag(result.pose_covariance))
            assert sd[3:].min() > 1.0   # a monocular map is not metric
            error = Rotation.from_matrix(result.T_world_cam[:3, :3] @ truth[:3, :3].T)
            normalised.append(np.abs(error.as_rotvec()) / sd[:3])
        # consistent: few rotation errors beyond 3 sigma (more without the adjustment)
        assert 0.01 < np.median(normalised) < 3.0
        assert np.mean(np.array(normalised) > 3.0) < 0.05
