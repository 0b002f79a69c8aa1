# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the NCC matcher, its single-level search and the grid-spread keypoint detector.

The single-level search is compared with an independent plain-NumPy reference below (explicit
loops over points and candidate offsets, ``np.mean`` / ``np.std`` per patch) that shares no
code with ``relperception.matching.ncc``.
"""

import warnings

from conftest import SHARED_DATA
import cv2
import numpy as np
import pytest

from relperception.core_types import Matches
from relperception.matching import build_matcher, detect_keypoints, Matcher, NCCMatcher
from relperception.matching.ncc import ncc_search

KITTI_DIR = SHARED_DATA / 'kitti_odometry_06_f0000-0050'


def textured_image(height=240, width=320, blur_sigma=1.0, seed=0):
    """Return a (H, W) uint8 random texture, Gaussian-blurred and stretched to 0..255."""
    rng = np.random.default_rng(seed)
    noise = cv2.GaussianBlur(rng.random((height, width)).astype(np.float32), (0, 0), blur_sigma)
    noise = (noise - noise.min()) / (noise.max() - noise.min()) * 255.0
    return np.round(noise).astype(np.uint8)


def warp(image, matrix):
    """Warp ``image`` with a 2x3 affine ``matrix`` (image-0 pixels -> image-1 pixels)."""
    height, width = image.shape
    return cv2.warpAffine(image, np.float32(matrix), (width, height), flags=cv2.INTER_CUBIC,
                          borderMode=cv2.BORDER_REFLECT)


def reference_ncc_search(image0, image1, points0, centres1, patch_size, radius):
    """Plain-loop zero-mean NCC search; returns best_xy, best_score and the score surfaces."""
    half = patch_size // 2
    image0 = np.asarray(image0, np.float64)
    image1 = np.asarray(image1, np.float64)
    count = len(points0)
    best_xy = np.full((count, 2), np.nan)
    best_score = np.full(count, np.nan)
    surfaces = np.full((count, 2 * radius + 1, 2 * radius + 1), np.nan)
    for i in range(count):
        x0, y0 = (int(round(v)) for v in points0[i])
        if not (half <= x0 < image0.shape[1] - half and half <= y0 < image0.shape[0] - half):
            continue
        template = image0[y0 - half:y0 + half + 1, x0 - half:x0 + half + 1]
        if np.std(template) == 0:
            continue
        cx, cy = (int(round(v)) for v in centres1[i])
        best = -np.inf
        for dy in range(-radius, radius + 1):
            for dx in range(-radius, radius + 1):
                x, y = cx + dx, cy + dy
                if not (half <= x < image1.shape[1] - half and half <= y < image1.shape[0] - half):
                    continue
                patch = image1[y - half:y + half + 1, x - half:x + half + 1]
                if np.std(patch) == 0:
                    score = 0.0
                else:
                    score = np.mean((template - np.mean(template)) * (patch - np.mean(patch))) / (
                        np.std(template) * np.std(patch))
                surfaces[i, dy + radius, dx + radius] = score
                if score > best:
                    best, best_xy[i], best_score[i] = score, (x, y), score
    return best_xy, best_score, surfaces


def sampson_distance(points0, points1, F):
    """Sampson distance (pixels) of correspondences under the fundamental matrix F (x1' F x0)."""
    x0 = np.c_[points0, np.ones(len(points0))]
    x1 = np.c_[points1, np.ones(len(points1))]
    Fx0 = x0 @ F.T
    Ftx1 = x1 @ F
    numerator = np.sum(x1 * Fx0, axis=1) ** 2
    denominator = Fx0[:, 0] ** 2 + Fx0[:, 1] ** 2 + Ftx1[:, 0] ** 2 + Ftx1[:, 1] ** 2
    return np.sqrt(numerator / denominator)


class TestNccSearch:
    """Single-level ``ncc_search`` against the plain-loop reference."""

    def test_smoke_shapes(self):
        """Exact matches score 1 at the template position."""
        image = textured_image(60, 80)
        best_xy, best_score = ncc_search(image, image, [[40, 30], [20, 20]], [[40, 30], [21, 19]],
                                         patch_size=7, radius=2)
        assert best_xy.shape == (2, 2) and best_score.shape == (2,)
        assert best_score.dtype == np.float32
        np.testing.assert_array_equal(best_xy, [[40, 30], [20, 20]])
        np.testing.assert_allclose(best_score, 1.0, atol=1e-5)

    def test_empty(self):
        """No points give empty results of the right shapes."""
        image = textured_image(40, 40)
        best_xy, best_score = ncc_search(image, image, np.zeros((0, 2)), np.zeros((0, 2)), 5, 2)
        assert best_xy.shape == (0, 2) and best_score.shape == (0,)

    @pytest.mark.parametrize('patch_size, radius', [(9, 4), (5, 3), (17, 2)])
    def test_reference(self, patch_size, radius):
        """Scores and argmax positions agree with the reference, borders included."""
        rng = np.random.default_rng(patch_size)
        image0 = textured_image(64, 96, blur_sigma=1.2, seed=1)
        image1 = warp(image0, [[1, 0, 1.7], [0, 1, -0.6]])
        image1 = np.clip(image1 + rng.normal(0, 3, image1.shape), 0, 255).astype(np.uint8)
        # Interior and near-border points (some templates / candidates leave the image).
        points0 = np.c_[rng.integers(0, 96, 60), rng.integers(0, 64, 60)].astype(np.float64)
        points0[:4] = [[0, 0], [patch_size // 2, 30], [95, 63], [50, patch_size // 2 + 1]]
        centres1 = points0 + rng.integers(-3, 4, points0.shape)
        best_xy, best_score = ncc_search(image0, image1, points0, centres1, patch_size, radius)
        ref_xy, ref_score, surfaces = reference_ncc_search(image0, image1, points0, centres1,
                                                           patch_size, radius)
        np.testing.assert_array_equal(np.isnan(best_score), np.isnan(ref_score))
        assert np.isnan(best_score).sum() >= 2 and (~np.isnan(best_score)).sum() >= 30
        valid = ~np.isnan(ref_score)
        np.testing.assert_allclose(best_score[valid], ref_score[valid], atol=1e-4)
        # The chosen candidate is optimal for the reference (ties within 1e-4 may differ).
        rows = np.flatnonzero(valid)
        offsets = (best_xy[rows] - np.rint(centres1[rows]) + radius).astype(int)
        chosen = surfaces[rows, offsets[:, 1], offsets[:, 0]]
        np.testing.assert_allclose(chosen, ref_score[rows], atol=1e-4)
        assert np.mean(np.all(best_xy[rows] == ref_xy[rows], axis=1)) > 0.95

    def test_flat_patches(self):
        """Flat templates are rejected, flat candidates score 0, no warnings."""
        image0 = textured_image(60, 80)
        image0[:, :30] = 77                      # flat left part
        image1 = image0.copy()
        image1[:, 50:] = 200                     # flat right part in image 1 only
        points = np.array([[10.0, 30.0], [65.0, 30.0], [40.0, 30.0]])
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            best_xy, best_score = ncc_search(image0, image1, points, points, 7, 3)
            ref_xy, ref_score, _ = reference_ncc_search(image0, image1, points, points, 7, 3)
        # Flat template: NCC undefined -> rejected (NaN), never a warning.
        assert np.isnan(best_score[0]) and np.all(np.isnan(best_xy[0]))
        # Textured template, only flat candidates: every score is 0.
        assert best_score[1] == 0.0 and ref_score[1] == 0.0
        np.testing.assert_allclose(best_score[2], ref_score[2], atol=1e-4)

    def test_degenerate_inputs(self):
        """Bad sizes, radii, point arrays and images raise ValueError."""
        image = textured_image(40, 40)
        with pytest.raises(ValueError):
            ncc_search(image, image, [[20, 20]], [[20, 20]], patch_size=4, radius=2)
        with pytest.raises(ValueError):
            ncc_search(image, image, [[20, 20]], [[20, 20]], patch_size=5, radius=-1)
        with pytest.raises(ValueError):
            ncc_search(image, image, [[20, 20]], [[20, 20], [3, 3]], patch_size=5, radius=2)
        with pytest.raises(ValueError):
            ncc_search(image, image, [[np.nan, 20]], [[20, 20]], patch_size=5, radius=2)
        with pytest.raises(ValueError):
            ncc_search(np.dstack([image] * 3), image, [[20, 20]], [[20, 20]], 5, 2)


class TestDetectKeypoints:
    """Grid-spread Shi-Tomasi keypoints."""

    def test_smoke_shape(self):
        """Keypoints are (N, 2) float32 and at most max_keypoints."""
        keypoints = detect_keypoints(textured_image(), 300, 32, 0.001, border_px=4)
        assert keypoints.dtype == np.float32 and keypoints.ndim == 2 and keypoints.shape[1] == 2
        assert 0 < len(keypoints) <= 300

    def test_border_mask_and_spread(self):
        """Border and mask are respected and every grid cell is used."""
        image = textured_image(240, 320)
        keypoints = detect_keypoints(image, 200, 40, 0.001, border_px=10)
        assert np.all((keypoints >= 10) & (keypoints <= [319 - 10, 239 - 10]))
        cells = set(map(tuple, (keypoints // 40).astype(int)))
        assert len(cells) == 8 * 6  # every cell of the 8 x 6 grid has a keypoint
        mask = np.zeros(image.shape, bool)
        mask[:, 160:] = True
        masked = detect_keypoints(image, 200, 40, 0.001, border_px=0, mask=mask)
        assert len(masked) > 0 and np.all(masked[:, 0] >= 160)

    def test_no_keypoints_on_black_padding(self):
        """The edge of a black frame (rectification) is a corner that does not move."""
        image = np.clip(textured_image(240, 320).astype(np.int32), 1, 255).astype(np.uint8)
        padded = image.copy()
        padded[:, :30] = 0          # left padding, connected to the border
        padded[:20, :] = 0          # top padding
        padded[100:140, 150:190] = 0   # a black object inside the scene: not padding
        keypoints = detect_keypoints(padded, 400, 20, 0.001, border_px=5)
        assert len(keypoints) > 50
        assert np.all(keypoints[:, 0] > 30 + 5) and np.all(keypoints[:, 1] > 20 + 5)
        near_object = (np.abs(keypoints[:, 0] - 150) < 3) | (np.abs(keypoints[:, 1] - 100) < 3)
        assert np.any(near_object)   # the object's corners stay usable
        # without padding, keypoints come as close to the border as border_px allows
        free = detect_keypoints(image, 400, 20, 0.001, border_px=5)
        assert free[:, 0].min() < 30 and free[:, 1].min() < 20

    def test_strongest_first_per_cell(self):
        """With a budget of one per cell, every cell gets its corner."""
        # One strong corner per cell on a dark background plus weak texture: spread wins.
        image = (textured_image(128, 128, seed=3) // 16).astype(np.uint8)
        for x, y in [(20, 20), (84, 20), (20, 84), (84, 84)]:
            image[y:y + 12, x:x + 12] = 255
        keypoints = detect_keypoints(image, 4, 64, 0.001, border_px=4)
        assert len(keypoints) == 4
        assert len(set(map(tuple, (keypoints // 64).astype(int)))) == 4

    def test_degenerate(self):
        """Flat images give none; bad inputs raise ValueError."""
        assert len(detect_keypoints(np.full((50, 60), 9, np.uint8), 100, 16, 0.01, 4)) == 0
        assert len(detect_keypoints(textured_image(), 0, 16, 0.01, 4)) == 0
        with pytest.raises(ValueError):
            detect_keypoints(textured_image().astype(np.float32), 100, 16, 0.01, 4)
        with pytest.raises(ValueError):
            detect_keypoints(textured_image(), 100, 16, 0.01, 4, mask=np.ones((3, 3), bool))
        with pytest.raises(ValueError):
            detect_keypoints(textured_image(), 100, 0, 0.01, 4)


class TestNCCMatcher:
    """The full matcher: pyramid, prior, sub-pixel peak, forward-backward check."""

    def test_smoke_protocol_and_factory(self):
        """The factory builds a Matcher that returns Matches."""
        matcher = build_matcher('ncc', {'max_keypoints': 200})
        assert isinstance(matcher, NCCMatcher) and isinstance(matcher, Matcher)
        image = textured_image()
        matches = matcher.match(image, image)
        assert isinstance(matches, Matches) and 0 < len(matches) <= 200
        assert matches.keypoints0.dtype == np.float32 and matches.confidence.dtype == np.float32
        with pytest.raises(ValueError, match='ncc'):
            build_matcher('sift')

    def test_conf(self):
        """Exactly the documented keys; unknown keys and bad values raise."""
        assert set(NCCMatcher.default_conf) == {
            'max_keypoints', 'cell_size_px', 'patch_size', 'search_radius_px', 'refine_radius_px',
            'pyramid_levels', 'min_score', 'max_forward_backward_px', 'min_corner_quality',
            'min_patch_std'}
        assert NCCMatcher({'patch_size': 7}).conf['patch_size'] == 7
        for bad in ({'patchsize': 7}, {'patch_size': 8}, {'search_radius_px': 0},
                    {'refine_radius_px': 0},
                    {'min_score': 2.0}, {'pyramid_levels': 1.5}):
            with pytest.raises(ValueError):
                NCCMatcher(bad)

    def test_identical_images(self):
        """Identical images give zero displacement and confidence ~1."""
        image = textured_image(seed=4)
        matches = NCCMatcher().match(image, image)
        assert len(matches) > 300
        np.testing.assert_allclose(matches.keypoints1, matches.keypoints0, atol=1e-3)
        assert np.min(matches.confidence) > 0.999

    @pytest.mark.parametrize('shift', [(3.0, -2.0), (2.3, -1.6), (-0.4, 0.7)])
    def test_known_shift(self, shift):
        """Integer and sub-pixel translations are recovered to 0.1 px."""
        image0 = textured_image(seed=5)
        image1 = warp(image0, [[1, 0, shift[0]], [0, 1, shift[1]]])
        matches = NCCMatcher().match(image0, image1)
        assert len(matches) > 300
        error = np.linalg.norm(matches.keypoints1 - matches.keypoints0 - shift, axis=1)
        assert np.median(error) < 0.1
        assert np.mean(error < 0.3) > 0.9
        assert np.mean(error < 1.0) > 0.99

    @pytest.mark.parametrize('refine_radius', [4, 2])
    def test_large_shift_needs_pyramid(self, refine_radius):
        """A 40 px shift is found with the pyramid and not without."""
        shift = np.array([40.0, -12.0])
        image0 = textured_image(seed=6)
        image1 = warp(image0, [[1, 0, shift[0]], [0, 1, shift[1]]])
        matches = NCCMatcher({'refine_radius_px': refine_radius}).match(image0, image1)
        error = np.linalg.norm(matches.keypoints1 - matches.keypoints0 - shift, axis=1)
        assert len(matches) > 150 and np.median(error) < 0.1 and np.mean(error < 1.0) > 0.98
        flat_search = NCCMatcher({'pyramid_levels': 1}).match(image0, image1)
        assert len(flat_search) < 0.05 * len(matches)

    def test_prior(self):
        """A prior extends the reach beyond the pyramid; NaN rows fall back."""
        shift = np.array([-95.0, 7.5])  # beyond the 60 px reach of the pyramid alone
        image0 = textured_image(240, 400, seed=7)
        image1 = warp(image0, [[1, 0, shift[0]], [0, 1, shift[1]]])
        matcher = NCCMatcher()

        def predict(keypoints0):
            predicted = keypoints0 + shift.astype(np.float32) + np.float32([2.0, -1.5])
            predicted[::10] = np.nan  # no prediction for some points
            return predicted

        matches = matcher.match(image0, image1, predict=predict)
        error = np.linalg.norm(matches.keypoints1 - matches.keypoints0 - shift, axis=1)
        assert len(matches) > 150 and np.median(error) < 0.1 and np.mean(error < 1.0) > 0.98
        without = matcher.match(image0, image1)
        assert np.sum(np.linalg.norm(without.keypoints1 - without.keypoints0 - shift, axis=1)
                      < 1.0) < 0.05 * len(matches)
        with pytest.raises(ValueError):
            matcher.match(image0, image1, predict=lambda k: k[:, :1])

    def test_select_matches_a_subset_as_among_all(self):
        """``select`` keeps keypoints; each kept one gets exactly its match among all."""
        image0 = textured_image(240, 320, seed=3)
        image1 = warp(image0, [[1, 0.02, 6.5], [-0.01, 1, -3.25]])
        matcher = NCCMatcher()
        assert matcher.selects_keypoints
        full = matcher.match(image0, image1)
        seen = []

        def select(keypoints0):
            seen.append(keypoints0.copy())
            return keypoints0[:, 0] < 160

        subset = matcher.match(image0, image1, select=select)
        assert len(seen) == 1 and len(seen[0]) > len(full)   # all keypoints were offered
        assert 0 < len(subset) < len(full) and np.all(subset.keypoints0[:, 0] < 160)
        left = full.keypoints0[:, 0] < 160
        np.testing.assert_array_equal(subset.keypoints0, full.keypoints0[left])
        np.testing.assert_array_equal(subset.keypoints1, full.keypoints1[left])
        np.testing.assert_array_equal(subset.confidence, full.confidence[left])
        nothing = matcher.match(image0, image1, select=lambda k: np.zeros(len(k), bool))
        assert len(nothing) == 0
        for bad in (lambda k: np.ones(len(k) - 1, bool), lambda k: np.ones(len(k))):
            with pytest.raises(ValueError, match='select'):
                matcher.match(image0, image1, select=bad)

    def test_rotation(self):
        """A small rotation is followed point by point."""
        angle_deg = 4.0
        image0 = textured_image(seed=8)
        matrix = cv2.getRotationMatrix2D((160.0, 120.0), angle_deg, 1.0)
        image1 = warp(image0, matrix)
        matches = NCCMatcher().match(image0, image1)
        expected = matches.keypoints0 @ matrix[:, :2].T + matrix[:, 2]
        error = np.linalg.norm(matches.keypoints1 - expected, axis=1)
        assert len(matches) > 150 and np.median(error) < 0.2 and np.mean(error < 1.0) > 0.98

    def test_flat_image_no_matches_no_warnings(self):
        """Flat images and flat halves give no matches and no warnings."""
        flat = np.full((120, 160), 128, np.uint8)
        half_flat = textured_image(120, 160)
        half_flat[:, :80] = 128
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            assert len(NCCMatcher().match(flat, flat)) == 0
            matches = NCCMatcher().match(half_flat, flat)
            assert len(matches) == 0
            matches = NCCMatcher().match(half_flat, half_flat)
        assert len(matches) > 0 and np.all(matches.keypoints0[:, 0] >= 80 - 4)

    def test_small_image(self):
        """Images smaller than the pyramid needs still match."""
        image = textured_image(24, 30)
        matches = NCCMatcher().match(image, image)
        assert np.all(matches.confidence > 0.99)

    def test_bad_inputs(self):
        """Float, RGB, differently sized, empty or non-array images raise."""
        image = textured_image(60, 80)
        matcher = NCCMatcher()
        for image0, image1 in [(image.astype(np.float32), image),
                               (np.dstack([image] * 3), np.dstack([image] * 3)),
                               (image, image[:50]),
                               (np.zeros((0, 0), np.uint8), np.zeros((0, 0), np.uint8)),
                               (image.tolist(), image)]:
            with pytest.raises(ValueError):
                matcher.match(image0, image1)
        # a suppression radius beyond the image tried to allocate 4 TB
        for radius in (1e6, float('inf'), float('nan'), -1.0):
            with pytest.raises(ValueError, match='min_distance_px'):
                detect_keypoints(image, 10, 32, 0.01, 4, min_distance_px=radius)

    @pytest.mark.skipif(not KITTI_DIR.is_dir(), reason='KITTI development data not present')
    def test_kitti_epipolar(self):
        """Real KITTI frames: matches agree with the ground-truth epipolar geometry."""
        image0 = cv2.imread(str(KITTI_DIR / 'image_l' / '000000.png'), cv2.IMREAD_GRAYSCALE)
        image1 = cv2.imread(str(KITTI_DIR / 'image_l' / '000001.png'), cv2.IMREAD_GRAYSCALE)
        poses = np.loadtxt(KITTI_DIR / 'poses.txt').reshape(-1, 3, 4)
        K = np.loadtxt(KITTI_DIR / 'calib.txt')[0].reshape(3, 4)[:, :3]
        T_world_cam0, T_world_cam1 = np.eye(4), np.eye(4)
        T_world_cam0[:3], T_world_cam1[:3] = poses[0], poses[1]
        T_cam1_cam0 = np.linalg.inv(T_world_cam1) @ T_world_cam0
        R, t = T_cam1_cam0[:3, :3], T_cam1_cam0[:3, 3]
        t_cross = np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
        F = np.linalg.inv(K).T @ t_cross @ R @ np.linalg.inv(K)
        matches = NCCMatcher().match(image0, image1)
        assert len(matches) > 200
        error = sampson_distance(matches.keypoints0, matches.keypoints1, F)
        assert np.median(error) < 1.0
        assert np.mean(error < 3.0) > 0.9


class TestExposureChange:
    """A gain step between the two images (auto-exposure) must not degrade the matches."""

    @staticmethod
    def grey(rgb, gain):
        """Scale an (H, W, 3) uint8 image by ``gain``, clip to uint8 (as a camera does), grey."""
        scaled = np.clip(rgb.astype(np.float32) * gain + 0.5, 0, 255).astype(np.uint8)
        return cv2.cvtColor(scaled, cv2.COLOR_RGB2GRAY)

    @staticmethod
    def true_positions(keypoints0, depth0, K, T_world_cam0, T_world_cam1):
        """Project (N, 2) image-0 pixels with their rendered depth into image 1 (pixels)."""
        z = depth0[keypoints0[:, 1].astype(int), keypoints0[:, 0].astype(int)]
        points = np.c_[keypoints0, np.ones(len(keypoints0))] @ np.linalg.inv(K).T * z[:, None]
        T = np.linalg.inv(T_world_cam1) @ T_world_cam0
        pixels = (points @ T[:3, :3].T + T[:3, 3]) @ K.T
        return pixels[:, :2] / pixels[:, 2:3]

    def match_errors(self, gain):
        """Return the (N,) pixel errors of all matches keyframe (gain 1) -> frame (``gain``)."""
        from relperception.data.synthetic import SyntheticScene
        errors = []
        for seed in (20, 21, 22):
            scene = SyntheticScene(seed=seed)
            poses = scene.trajectory(300, 10.0)
            for i in (50, 250):
                rgb0, depth0, _ = scene.render(poses[i])
                rgb1, _, _ = scene.render(poses[i + 3])
                matches = NCCMatcher().match(self.grey(rgb0, 1.0), self.grey(rgb1, gain))
                truth = self.true_positions(matches.keypoints0, depth0, scene.camera.K,
                                            poses[i], poses[i + 3])
                error = np.linalg.norm(matches.keypoints1 - truth, axis=1)
                errors.append(error[np.isfinite(error)])
        return np.concatenate(errors)

    def test_clipped_patches_do_not_bias_matches_after_a_gain_step(self):
        # Exact ground truth from the synthetic renderer. A +50 % gain clips part of the
        # image at 255; those patches no longer follow the gain and their NCC peaks moved
        # off the true position (the tail of the error distribution grew), which monocular
        # VO turned into scale drift. Dimming clips nothing and must change nothing.
        reference = self.match_errors(1.0)
        brighter = self.match_errors(1.5)
        darker = self.match_errors(0.5)
        assert np.percentile(brighter, 90) <= 1.05 * np.percentile(reference, 90)
        assert np.mean(brighter > 0.5) <= 1.05 * np.mean(reference > 0.5)
        assert len(brighter) >= 0.6 * len(reference)
        assert len(darker) >= 0.95 * len(reference)
        assert np.percentile(darker, 90) <= 1.05 * np.percentile(reference, 90)


class TestBaselineMatchers:
    @pytest.mark.parametrize('name, conf, message', [
        ('klt', {'window_size': 0}, 'klt.window_size must be >= 5'),         # was a cv2.error
        ('klt', {'pyramid_levels': 0}, 'klt.pyramid_levels must be >= 1'),
        ('klt', {'max_forward_backward_px': float('nan')}, 'finite'),        # matched nothing
        ('orb', {'ratio_test': 5.0}, 'orb.ratio_test must be <= 1.0'),       # was taken
        ('orb', {'max_keypoints': -1}, 'orb.max_keypoints must be >= 16'),
        ('orb', [1, 2], 'must be a mapping'),
    ])
    def test_configuration_checked_against_the_schema(self, name, conf, message):
        with pytest.raises(ValueError, match=message):
            build_matcher(name, conf)

    def test_klt_predict_must_give_one_position_per_keypoint(self):
        image = textured_image(120, 160)
        matcher = build_matcher('klt')
        assert len(matcher.match(image, np.roll(image, 2, 1), predict=lambda k: k + [2, 0]))
        for predict in (lambda k: k[:, :1], lambda k: k[1:]):   # broadcast silently before
            with pytest.raises(ValueError, match='predict must return'):
                matcher.match(image, np.roll(image, 2, 1), predict=predict)
