# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the synthetic scene generator: determinism, exact geometry, texture and motion."""

import logging
import time

import cv2
import numpy as np
import pytest

from relperception.data import synthetic, topics
from relperception.data.bag import BagReader
from relperception.data.synthetic import SyntheticScene
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.transforms import invert_transform

logger = logging.getLogger(__name__)

NUM_FRAMES = 12


@pytest.fixture(scope='module')
def scene():
    """Build the seed-0 scene once for the module."""
    return SyntheticScene(seed=0)


@pytest.fixture(scope='module')
def sequence(scene):
    """Render frames 0..NUM_FRAMES-1 of seed 0 (10 fps)."""
    poses = scene.trajectory(NUM_FRAMES)
    frames = [scene.render(T) for T in poses]
    return poses, frames


def reproject(depth0, K, T_world_cam0, T_world_cam1, pixels):
    """Independent reference: map integer pixels (N, 2) of image 0 into camera 1.

    Returns (N, 2) float64 pixel coordinates in image 1 and (N,) depth in camera 1.
    """
    z = depth0[pixels[:, 1], pixels[:, 0]].astype(np.float64)
    rays = np.linalg.solve(K, np.vstack([pixels.T, np.ones(len(pixels))]))
    points_cam0 = rays * z
    T_cam1_cam0 = invert_transform(T_world_cam1) @ T_world_cam0
    points_cam1 = T_cam1_cam0[:3, :3] @ points_cam0 + T_cam1_cam0[:3, 3:]
    projected = K @ points_cam1
    return (projected[:2] / projected[2]).T, points_cam1[2]


def all_pixels(width, height):
    """Return the (H * W, 2) integer pixel grid (x, y)."""
    x, y = np.meshgrid(np.arange(width), np.arange(height))
    return np.stack([x.ravel(), y.ravel()], 1)


class TestSyntheticScene:
    """SyntheticScene: geometry, texture, motion and validation."""

    def test_smoke_shapes_dtypes(self, scene, sequence):
        """Frames have the documented shapes and dtypes; every ray hits."""
        poses, frames = sequence
        h, w = scene.camera.height, scene.camera.width
        assert (w, h) == (640, 480)
        assert poses.shape == (NUM_FRAMES, 4, 4) and poses.dtype == np.float64
        rgb, depth, labels = frames[0]
        assert rgb.shape == (h, w, 3) and rgb.dtype == np.uint8
        assert depth.shape == (h, w) and depth.dtype == np.float32
        assert labels.shape == (h, w) and labels.dtype == np.uint8
        # A closed room: every ray hits something.
        assert np.all(np.isfinite(depth)) and np.all(depth > 0)
        assert np.all(labels < len(synthetic.CLASS_NAMES))
        assert not np.any(labels == synthetic.VOID_LABEL)
        assert not scene.camera.has_distortion

    def test_determinism(self, sequence):
        """The same seed gives identical arrays; another seed differs."""
        poses, frames = sequence
        again = SyntheticScene(seed=0)
        np.testing.assert_array_equal(again.trajectory(NUM_FRAMES), poses)
        for got, want in zip(again.render(poses[3]), frames[3]):
            np.testing.assert_array_equal(got, want)
        other = SyntheticScene(seed=1)
        other_poses = other.trajectory(NUM_FRAMES)
        assert not np.allclose(other_poses, poses)
        assert other.room_size != again.room_size
        rgb1 = other.render(other_poses[3])[0]
        assert np.mean(np.abs(rgb1.astype(int) - frames[3][0].astype(int))) > 10

    def test_trajectory_prefix_and_validation(self, scene):
        """Poses do not depend on the sequence length; bad input raises."""
        np.testing.assert_allclose(scene.trajectory(5), scene.trajectory(20)[:5], atol=1e-9)
        with pytest.raises(ValueError):
            scene.trajectory(0)
        for fps in (0.0, float('nan'), 1e12):
            with pytest.raises(ValueError, match='fps'):
                scene.trajectory(5, fps=fps)
        with pytest.raises(ValueError):
            scene.render(np.eye(3))
        outside = np.eye(4)
        outside[:3, 3] = (0.0, 0.0, -1.0)   # below the floor
        with pytest.raises(ValueError):
            scene.render(outside)

    def test_bad_constructor_arguments(self):
        """Invalid constructor and iter_sequence arguments raise ValueError."""
        for kwargs in ({'seed': -1}, {'width': 0}, {'height': 10.5}, {'fov_deg': 179.0}):
            with pytest.raises(ValueError):
                SyntheticScene(**kwargs)
        for kwargs in ({'num_frames': 0}, {'fps': -1.0}, {'image_noise_std': -2.0},
                       {'start_time_ns': -5}):
            with pytest.raises(ValueError):
                synthetic.iter_sequence(**kwargs)

    def test_labels_several_classes(self, sequence):
        """Frames contain floor, wall, ceiling and at least one object class."""
        _, frames = sequence
        seen = set()
        for _, _, labels in frames:
            seen.update(np.unique(labels).tolist())
        names = {synthetic.CLASS_NAMES[i] for i in seen}
        assert {'floor', 'wall', 'ceiling'} <= names
        assert len(names & {'box', 'pillar'}) >= 1

    def test_depth_consistent_with_poses(self, scene, sequence):
        """Reprojected depth of frame i equals the rendered depth of frame j (exact geometry)."""
        poses, frames = sequence
        K = scene.camera.K
        rng = np.random.default_rng(0)
        h, w = scene.camera.height, scene.camera.width
        for i, j in ((0, 1), (2, 6), (5, 11)):
            pixels = np.stack([rng.integers(0, w, 4000), rng.integers(0, h, 4000)], 1)
            uv1, z1 = reproject(frames[i][1], K, poses[i], poses[j], pixels)
            inside = (uv1[:, 0] >= 0) & (uv1[:, 0] <= w - 1) & (uv1[:, 1] >= 0) \
                & (uv1[:, 1] <= h - 1) & (z1 > 0)
            assert inside.mean() > 0.5
            uv1, z1 = uv1[inside].astype(np.float32), z1[inside]
            # Inverse depth is affine in pixel coordinates on a plane, so bilinear interpolation
            # of the rendered inverse depth is exact away from surface edges.
            inverse_depth1 = (1.0 / frames[j][1]).astype(np.float32)
            sampled = cv2.remap(inverse_depth1, uv1[:, 0:1], uv1[:, 1:2], cv2.INTER_LINEAR)[:, 0]
            error = np.abs(1.0 / sampled - z1)
            # Points that are not occluded agree exactly; occluded ones lie behind (z1 larger).
            agree = error < 0.01
            logger.info('depth reprojection %d->%d: %.1f%% within 1 cm, median %.2e m',
                        i, j, 100 * agree.mean(), np.median(error))
            assert agree.mean() > 0.9
            assert np.median(error) < 1e-3

    def test_texture_corners(self, sequence):
        """Shi-Tomasi finds many well-spread corners on every frame."""
        _, frames = sequence
        for rgb, _, _ in frames[::4]:
            gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
            corners = cv2.goodFeaturesToTrack(gray, maxCorners=2000, qualityLevel=0.01,
                                              minDistance=7)
            assert corners is not None and len(corners) >= 300
            xy = corners.reshape(-1, 2)
            h, w = gray.shape
            cells = np.unique((xy[:, 1] * 4 // h) * 4 + xy[:, 0] * 4 // w)
            assert len(cells) >= 14   # well spread: corners in at least 14 of 16 grid cells

    def test_photometric_consistency(self, scene, sequence):
        """Warping frame i+1 into frame i with the true depth and poses reproduces frame i."""
        poses, frames = sequence
        h, w = scene.camera.height, scene.camera.width
        pixels = all_pixels(w, h)
        medians = []
        for i in range(0, NUM_FRAMES - 1, 3):
            uv1, _ = reproject(frames[i][1], scene.camera.K, poses[i], poses[i + 1], pixels)
            map_x = uv1[:, 0].reshape(h, w).astype(np.float32)
            map_y = uv1[:, 1].reshape(h, w).astype(np.float32)
            gray0 = cv2.cvtColor(frames[i][0], cv2.COLOR_RGB2GRAY).astype(np.float32)
            gray1 = cv2.cvtColor(frames[i + 1][0], cv2.COLOR_RGB2GRAY).astype(np.float32)
            warped = cv2.remap(gray1, map_x, map_y, cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_CONSTANT, borderValue=np.nan)
            valid = np.isfinite(warped)
            residual = np.abs(warped - gray0)[valid]
            # Reference: the residual without motion compensation is much larger.
            static = np.abs(gray1 - gray0)
            medians.append(np.median(residual))
            logger.info('photometric %d->%d: median |warp error| %.2f (unwarped %.2f) grey levels',
                        i + 1, i, medians[-1], np.median(static))
            assert np.median(residual) < 0.25 * np.median(static)
        assert np.median(medians) < 4.0

    def test_interframe_motion(self, scene, sequence):
        """Image motion between frames is mostly 2-25 px; steps are realistic."""
        poses, frames = sequence
        h, w = scene.camera.height, scene.camera.width
        pixels = all_pixels(w, h)[::97]
        for i in range(NUM_FRAMES - 1):
            uv1, _ = reproject(frames[i][1], scene.camera.K, poses[i], poses[i + 1], pixels)
            flow = np.linalg.norm(uv1 - pixels, axis=1)
            median, p95 = np.median(flow), np.percentile(flow, 95)
            assert 2.0 <= median <= 25.0, (i, median)
            assert p95 <= 35.0, (i, p95)
        step = np.linalg.norm(np.diff(poses[:, :3, 3], axis=0), axis=1)
        assert np.all(step > 0.03) and np.all(step < 0.1)
        # No pixel is very close: depth >= 0.5 m for most pixels.
        assert all(np.mean(depth >= 0.5) > 0.95 for _, depth, _ in frames)

    def test_trajectory_long_loop_stays_clear(self, scene):
        """A long run stays inside the room, away from boxes, nearly level."""
        poses = scene.trajectory(600, fps=10.0)
        positions = poses[:, :3, 3]
        lx, ly, lz = scene.room_size
        assert np.all(np.abs(positions[:, 0]) < lx / 2 - 1.0)
        assert np.all(np.abs(positions[:, 1]) < ly / 2 - 1.0)
        assert np.all((positions[:, 2] > 0.5) & (positions[:, 2] < lz - 0.5))
        for box in scene.boxes:
            assert box.footprint_distance(positions[:, :2]).min() > 0.7
        # Camera z axis stays near horizontal (small pitch/roll): optical axis z-component small.
        assert np.all(np.abs(poses[:, 2, 2]) < np.sin(np.radians(10)))
        # Smooth: yaw rate below ~0.5 rad/s.
        forward = poses[:, :2, 2]
        yaw = np.unwrap(np.arctan2(forward[:, 1], forward[:, 0]))
        assert np.all(np.abs(np.diff(yaw)) * 10.0 < 0.5)

    def test_render_timing(self, scene):
        """Log the time of a 10-frame render (not asserted beyond > 0)."""
        poses = scene.trajectory(10)
        start = time.perf_counter()
        for T in poses:
            scene.render(T)
        ms = (time.perf_counter() - start) * 100.0
        logger.info('render 640x480: %.1f ms/frame', ms)
        assert ms > 0


class TestIterSequence:
    """iter_sequence: stamps, lazy rendering and image noise."""

    def test_frames_and_stamps(self):
        """Frames carry the right stamps, sizes, poses and depth."""
        camera, frames = synthetic.iter_sequence(num_frames=3, seed=2, width=160, height=120,
                                                 fps=20.0, start_time_ns=1000)
        frames = list(frames)
        assert len(frames) == 3 and all(isinstance(f, synthetic.SyntheticFrame) for f in frames)
        assert [f.stamp_ns for f in frames] == [1000, 1000 + 50_000_000, 1000 + 100_000_000]
        assert frames[0].rgb.shape == (120, 160, 3) and (camera.width, camera.height) == (160, 120)
        scene = SyntheticScene(seed=2, width=160, height=120)
        np.testing.assert_array_equal(frames[1].T_world_cam, scene.trajectory(3, fps=20.0)[1])
        np.testing.assert_array_equal(frames[1].depth, scene.render(frames[1].T_world_cam)[1])

    def test_noise_only_on_rgb(self):
        """Image noise is seeded, has the requested std and only touches rgb."""
        _, clean = synthetic.iter_sequence(num_frames=2, seed=3, width=160, height=120)
        _, noisy = synthetic.iter_sequence(num_frames=2, seed=3, width=160, height=120,
                                           image_noise_std=5.0)
        _, noisy_again = synthetic.iter_sequence(num_frames=2, seed=3, width=160, height=120,
                                                 image_noise_std=5.0)
        for c, n, n2 in zip(clean, noisy, noisy_again):
            np.testing.assert_array_equal(c.depth, n.depth)
            np.testing.assert_array_equal(c.labels, n.labels)
            np.testing.assert_array_equal(n.rgb, n2.rgb)
            diff = n.rgb.astype(float) - c.rgb.astype(float)
            assert 3.5 < diff.std() < 6.0


class TestExplicitPoses:
    """iter_sequence and write_synthetic_bag render given poses (a camera that stops or turns)."""

    def test_poses_are_rendered_and_stamped(self, tmp_path):
        """Each given pose is rendered in order and stamped at i / fps."""
        scene = SyntheticScene(seed=4, width=96, height=64)
        path = scene.trajectory(2, fps=10.0)
        poses = np.stack([path[0], path[0], path[1]])        # a stop, then a step
        camera, frames = synthetic.iter_sequence(seed=4, width=96, height=64, fps=5.0,
                                                 poses=poses, start_time_ns=0)
        frames = list(frames)
        assert [f.stamp_ns for f in frames] == [0, 200_000_000, 400_000_000]
        np.testing.assert_array_equal(frames[0].rgb, frames[1].rgb)
        np.testing.assert_array_equal(frames[2].rgb, scene.render(path[1])[0])
        summary = write_synthetic_bag(tmp_path / 'bag', seed=4, width=96, height=64,
                                      poses=poses)
        assert summary['frames'] == 3
        with BagReader(tmp_path / 'bag') as reader:
            assert sum(1 for m in reader.messages([topics.GT_POSE])) == 3

    def test_bad_poses_raise_before_writing(self, tmp_path):
        """Bad poses raise ValueError at once and no bag is created."""
        scene = SyntheticScene(seed=4, width=96, height=64)
        good = scene.trajectory(3, fps=10.0)
        outside = good.copy()
        outside[1, 2, 3] = -1.0                                # below the floor
        scaled = good.copy()
        scaled[2, :3, :3] *= 2.0                               # not a rotation
        for poses, frames in ((good[0], None), (good[:0], None), (outside, None),
                              (scaled, None), (good, 2)):
            with pytest.raises(ValueError):
                write_synthetic_bag(tmp_path / 'bag', frames=frames, seed=4, width=96,
                                    height=64, poses=poses)
            assert not (tmp_path / 'bag').exists()
