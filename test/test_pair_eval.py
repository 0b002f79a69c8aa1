# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the two-view (LoFTR protocol) evaluation, the pair sources and ``eval-pairs``."""

import dataclasses
import json
import math

from conftest import shared_dataset
import cv2
import numpy as np
import pytest
from relperception.cli.main import main
from relperception.core_types import Matches
from relperception.data.pairs import (ImagePair, load_pairs_npz, load_pairs_txt,
                                      relative_transform, save_pairs_npz, synthetic_pairs)
from relperception.data.synthetic import SyntheticScene
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.evaluation.bag_pairs import pairs_from_bag
from relperception.evaluation.pairs import (epipolar_precision, estimate_relative_pose,
                                            evaluate_pair, evaluate_pairs, MIN_POSE_INLIERS,
                                            relative_pose_error, relpose_auc,
                                            rotation_compensated_parallax_px,
                                            symmetric_epipolar_distance)
from relperception.transforms import make_transform
from scipy.spatial.transform import Rotation

SIZE = (160, 120)
K = np.array([[400.0, 0.0, 319.5], [0.0, 400.0, 239.5], [0.0, 0.0, 1.0]])


def _project(points: np.ndarray, K: np.ndarray) -> np.ndarray:
    return points[:, :2] / points[:, 2:] * K[[0, 1], [0, 1]] + K[[0, 1], [2, 2]]


def _exact_points(T_0to1, n=150, seed=0):
    rng = np.random.default_rng(seed)
    P0 = np.c_[rng.uniform(-2, 2, n), rng.uniform(-1.5, 1.5, n), rng.uniform(3, 9, n)]
    P1 = P0 @ T_0to1[:3, :3].T + T_0to1[:3, 3]
    return _project(P0, K), _project(P1, K)


def _depth_matches(depth0, K0, K1, T_0to1, step=7):
    """Exact correspondences of a grid of image-0 pixels from its depth (ground truth)."""
    ys, xs = np.mgrid[4:depth0.shape[0] - 4:step, 4:depth0.shape[1] - 4:step]
    xs, ys = xs.ravel().astype(np.float64), ys.ravel().astype(np.float64)
    z = depth0[ys.astype(int), xs.astype(int)].astype(np.float64)
    P0 = np.c_[(xs - K0[0, 2]) / K0[0, 0] * z, (ys - K0[1, 2]) / K0[1, 1] * z, z]
    P1 = P0 @ T_0to1[:3, :3].T + T_0to1[:3, 3]
    return np.c_[xs, ys], _project(P1, K1)


@pytest.fixture(scope='module')
def synthetic_pair_with_depth():
    """One rendered pair (gap 5) of the synthetic scene plus the depth of its first image."""
    pair = synthetic_pairs(1, gaps=(5,), width=SIZE[0], height=SIZE[1], sequence_frames=40)[0]
    scene = SyntheticScene(seed=0, width=SIZE[0], height=SIZE[1])
    start = int(pair.name.split(':')[1].split('-')[0])
    _, depth0, _ = scene.render(scene.trajectory(40)[start])
    return pair, depth0


@pytest.fixture(scope='module')
def small_bag(tmp_path_factory):
    bag = tmp_path_factory.mktemp('pairs') / 'synthetic_bag'
    write_synthetic_bag(bag, frames=8, width=SIZE[0], height=SIZE[1])
    return bag


class TestRelposeAuc:
    def test_hand_computed(self):
        # curve (0,0) (1,.2) (2,.4) (3,.6) then flat: area to 5 = .1+.3+.5+2*.6 = 2.1
        aucs = relpose_auc([3.0, 1.0, np.inf, 2.0, 100.0], (5, 10, 20))
        assert aucs == pytest.approx([2.1 / 5, 5.1 / 10, 11.1 / 20])

    def test_extremes(self):
        assert relpose_auc([0.0, 0.0]) == pytest.approx([1.0, 1.0, 1.0])
        assert relpose_auc([np.inf, 30.0]) == pytest.approx([0.0, 0.0, 0.0])
        # a single error e < t: triangle to e then flat: (e/2 + t - e) / t
        assert relpose_auc([4.0], (10,)) == pytest.approx([(2.0 + 6.0) / 10])

    def test_invalid(self):
        for bad in ([], [np.nan], [-1.0]):
            with pytest.raises(ValueError):
                relpose_auc(bad)
        with pytest.raises(ValueError):
            relpose_auc([1.0], (0,))


class TestRelativePoseError:
    def test_known_errors(self):
        T = make_transform(np.eye(3), [1.0, 0.0, 0.0])
        R3 = Rotation.from_euler('y', 3, degrees=True).as_matrix()
        e = relative_pose_error(T, R3, [0.0, 0.0, 1.0])
        assert e['R_err_deg'] == pytest.approx(3.0)
        assert e['t_err_deg'] == pytest.approx(90.0)
        assert e['pose_err_deg'] == pytest.approx(90.0)
        # the sign of t is not observable from E: a flipped direction is no error
        assert relative_pose_error(T, np.eye(3), [-2.0, 0, 0])['t_err_deg'] == pytest.approx(0)
        tilted = [math.cos(math.radians(10)), math.sin(math.radians(10)), 0.0]
        assert relative_pose_error(T, np.eye(3), tilted)['pose_err_deg'] == pytest.approx(10)

    def test_invalid(self):
        with pytest.raises(ValueError):
            relative_pose_error(np.eye(4), np.eye(3), [0.0, 0.0, 0.0])
        with pytest.raises(ValueError):
            relative_pose_error(np.eye(3), np.eye(3), [1.0, 0, 0])
        T = make_transform(np.eye(3), [1.0, 0.0, 0.0])
        # 3 I scored R_err 0 deg, zeros 120 deg
        for R in (3 * np.eye(3), np.zeros((3, 3)), np.diag([1.0, 1.0, -1.0])):
            with pytest.raises(ValueError, match='R must be a rotation'):
                relative_pose_error(T, R, [1.0, 0, 0])
        with pytest.raises(ValueError, match='ignore_gt_t_thr'):
            relative_pose_error(T, np.eye(3), [1.0, 0, 0], ignore_gt_t_thr=float('nan'))


class TestEstimateRelativePose:
    def test_exact_points(self):
        R = Rotation.from_euler('xyz', [2, -6, 1], degrees=True).as_matrix()
        T = make_transform(R, [0.4, -0.05, 0.1])
        k0, k1 = _exact_points(T)
        pose = estimate_relative_pose(k0, k1, K, K)
        err = relative_pose_error(T, pose['R'], pose['t'])
        # RANSAC's best 5-point sample, not refined: OpenCV 4 (a Jetson's) is further off
        # than OpenCV 5 (README, the Jetson checks)
        assert err['pose_err_deg'] < 0.25
        assert pose['inliers'].all()
        assert np.linalg.norm(pose['t']) == pytest.approx(1.0)

    def test_exact_synthetic_pair(self, synthetic_pair_with_depth):
        """Exact matches from rendered depth: the known motion is recovered within 1 degree."""
        pair, depth0 = synthetic_pair_with_depth
        k0, k1 = _depth_matches(depth0, pair.K0, pair.K1, pair.T_0to1)
        pose = estimate_relative_pose(k0, k1, pair.K0, pair.K1)
        err = relative_pose_error(pair.T_0to1, pose['R'], pose['t'])
        assert err['R_err_deg'] < 1.0 and err['t_err_deg'] < 1.0
        # the pair's T_0to1 also explains its images: image 1 at the predicted positions
        # looks like image 0 (a wrong direction or inverse would not)
        inside = (k1[:, 0] > 2) & (k1[:, 0] < SIZE[0] - 3) & (k1[:, 1] > 2) \
            & (k1[:, 1] < SIZE[1] - 3)
        g0 = pair.image0[k0[inside, 1].astype(int), k0[inside, 0].astype(int)].astype(float)
        g1 = cv2.remap(pair.image1.astype(np.float32), k1[inside, :1].astype(np.float32),
                       k1[inside, 1:].astype(np.float32), cv2.INTER_LINEAR)[:, 0]
        assert inside.sum() > 100
        assert np.median(np.abs(g0 - g1)) < 6.0

    def test_too_few_and_invalid(self):
        k0, k1 = _exact_points(make_transform(np.eye(3), [1.0, 0, 0]), n=4)
        assert estimate_relative_pose(k0, k1, K, K) is None
        with pytest.raises(ValueError, match='length'):
            estimate_relative_pose(k0, k1[:3], K, K)
        with pytest.raises(ValueError, match='NaN'):
            estimate_relative_pose(np.full((5, 2), np.nan), np.zeros((5, 2)), K, K)
        with pytest.raises(ValueError):
            estimate_relative_pose(k0, k1, np.eye(2), K)


class TestEpipolarPrecision:
    def test_exact_and_shuffled(self):
        T = make_transform(Rotation.from_euler('y', 4, degrees=True).as_matrix(),
                           [0.5, 0.0, 0.0])
        k0, k1 = _exact_points(T, n=100)
        assert epipolar_precision(k0, k1, K, K, T) == 1.0
        assert symmetric_epipolar_distance(k0, k1, K, K, T).max() < 1e-20
        # sideways motion: epipolar lines are nearly horizontal; pairing each point with one
        # far away in y puts every match far from its line
        order = np.argsort(k1[:, 1])
        shuffled = k1.copy()
        shuffled[order] = k1[np.roll(order, len(order) // 2)]
        assert epipolar_precision(k0, shuffled, K, K, T) == 0.0
        assert epipolar_precision(np.zeros((0, 2)), np.zeros((0, 2)), K, K, T) == 0.0

    def test_threshold_semantics(self):
        """The distance is squared, in normalised units (LoFTR): 1 px off gives 2 (1/f)^2."""
        T = make_transform(np.eye(3), [1.0, 0.0, 0.0])
        k0 = np.array([[300.0, 200.0]])
        d = symmetric_epipolar_distance(k0, k0 + [15.0, 1.0], K, K, T)
        assert d[0] == pytest.approx(2 * (1 / 400.0) ** 2)
        with pytest.raises(ValueError):
            epipolar_precision(k0, k0, K, K, T, threshold=0.0)


class _OracleMatcher:
    """Returns exact correspondences from known depth (an upper bound, not a mock)."""

    def __init__(self, depth0, pair):
        self.depth0, self.pair = depth0, pair

    def match(self, image0, image1, predict=None):
        k0, k1 = _depth_matches(self.depth0, self.pair.K0, self.pair.K1, self.pair.T_0to1)
        return Matches(k0.astype(np.float32), k1.astype(np.float32),
                       np.ones(len(k0), np.float32))


class _FailingMatcher:
    def match(self, image0, image1, predict=None):
        raise ValueError('boom')


class TestEvaluatePairs:
    def test_oracle_and_real_matcher(self, synthetic_pair_with_depth):
        from relperception.matching.base import build_matcher

        pair, depth0 = synthetic_pair_with_depth
        result = evaluate_pairs(_OracleMatcher(depth0, pair), [pair, pair], warmup=0)
        s = result['summary']
        assert s['num_pairs'] == 2 and s['pose_failures'] == 0
        assert s['auc@5'] > 0.8 and s['epi_precision'] > 0.95
        row = result['rows'][0]
        assert row['match_ms'] >= 0 and row['gap'] == 5 and row['num_matches'] > 100
        assert row['gt_translation_m'] > 0.1
        orb = evaluate_pairs(build_matcher('orb'), [pair])
        assert orb['rows'][0]['num_matches'] > 20
        assert orb['summary']['epi_precision'] > 0.8

    def test_failing_matcher(self, synthetic_pair_with_depth):
        pair, _ = synthetic_pair_with_depth
        result = evaluate_pairs(_FailingMatcher(), [pair])
        assert result['rows'][0]['error'] == 'ValueError: boom'
        assert result['summary']['pose_failures'] == 1
        assert result['summary']['auc@20'] == 0.0
        with pytest.raises(ValueError):
            evaluate_pairs(_FailingMatcher(), [])


class _FixedMatcher:
    """Returns the given matches whatever the images (a matcher stuck on a border)."""

    def __init__(self, keypoints0, keypoints1):
        self.matches = Matches(np.asarray(keypoints0, np.float32),
                               np.asarray(keypoints1, np.float32),
                               np.ones(len(keypoints0), np.float32))

    def match(self, image0, image1, predict=None):
        return self.matches


class TestDegeneratePose:
    def test_matches_without_parallax_are_a_failure(self, synthetic_pair_with_depth):
        # Matches that only rotate (no parallax): the essential matrix exists, its
        # translation direction is noise.
        pair, _ = synthetic_pair_with_depth
        rng = np.random.default_rng(0)
        R = Rotation.from_euler('xyz', [2, -5, 1], degrees=True).as_matrix()
        k0 = rng.uniform([20, 20], [SIZE[0] - 20, SIZE[1] - 20], (60, 2))
        rays = np.c_[(k0 - pair.K0[:2, 2]) / np.diag(pair.K0)[:2], np.ones(len(k0))] @ R.T
        k1 = _project(rays, pair.K1) + rng.normal(0, 0.2, k0.shape)
        assert estimate_relative_pose(k0, k1, pair.K0, pair.K1) is not None
        result = evaluate_pairs(_FixedMatcher(k0, k1), [pair], warmup=0)
        row = result['rows'][0]
        assert row['pose_ok'] is False and row['pose_err_deg'] == math.inf
        assert row['pose_degenerate'].startswith('no parallax')
        assert result['summary']['pose_failures'] == 1
        assert result['summary']['pose_degenerate'] == 1

    def test_too_few_inliers_are_a_failure(self, synthetic_pair_with_depth):
        pair, depth0 = synthetic_pair_with_depth
        k0, k1 = _depth_matches(depth0, pair.K0, pair.K1, pair.T_0to1, step=7)
        pick = np.random.default_rng(1).choice(len(k0), 6, replace=False)
        row = evaluate_pairs(_FixedMatcher(k0[pick], k1[pick]), [pair], warmup=0)['rows'][0]
        assert row['pose_ok'] is False
        assert row['pose_degenerate'] == f'6 inliers < {MIN_POSE_INLIERS}'

    def test_exact_matches_are_not_degenerate(self, synthetic_pair_with_depth):
        pair, depth0 = synthetic_pair_with_depth
        k0, k1 = _depth_matches(depth0, pair.K0, pair.K1, pair.T_0to1)
        row = evaluate_pair(Matches(k0.astype(np.float32), k1.astype(np.float32),
                                    np.ones(len(k0), np.float32)), pair)
        assert row['pose_ok'] is True and row['pose_degenerate'] is None

    def test_parallax_of_a_pure_rotation_is_zero(self):
        R = Rotation.from_euler('xyz', [2, -5, 1], degrees=True).as_matrix()
        k0, k1 = _exact_points(make_transform(R, [0, 0, 0]), n=50)
        parallax = rotation_compensated_parallax_px(k0, k1, K, K, R)
        assert np.all(parallax < 1e-6)
        assert np.all(rotation_compensated_parallax_px(k0, k1, K, K, np.eye(3))[:5] > 1.0)
        with pytest.raises(ValueError):
            rotation_compensated_parallax_px(k0, k1, K, K, np.eye(2))


class TestPairSources:
    def test_npz_round_trip(self, tmp_path, synthetic_pair_with_depth):
        pair, _ = synthetic_pair_with_depth
        path = save_pairs_npz(tmp_path / 'p.npz', [pair, pair])
        loaded = load_pairs_npz(path)
        assert len(loaded) == 2 and loaded[1].name == pair.name and loaded[0].gap == 5
        np.testing.assert_array_equal(loaded[0].image1, pair.image1)
        np.testing.assert_allclose(loaded[0].T_0to1, pair.T_0to1)

    def test_npz_with_paths(self, tmp_path, synthetic_pair_with_depth):
        pair, _ = synthetic_pair_with_depth
        cv2.imwrite(str(tmp_path / 'a.png'), pair.image0)
        cv2.imwrite(str(tmp_path / 'b.png'), pair.image1)
        np.savez(tmp_path / 'list.npz', paths0=np.array(['a.png']), paths1=np.array(['b.png']),
                 K0=pair.K0, K1=pair.K1, T_0to1=pair.T_0to1[None])
        loaded = load_pairs_npz(tmp_path / 'list.npz')
        np.testing.assert_array_equal(loaded[0].image0, pair.image0)
        np.savez(tmp_path / 'bad.npz', K0=pair.K0, K1=pair.K1, T_0to1=pair.T_0to1[None])
        with pytest.raises(ValueError, match='image0'):
            load_pairs_npz(tmp_path / 'bad.npz')

    def test_image_pair_checks(self):
        image = np.zeros((480, 640), np.uint8)   # K's image size
        with pytest.raises(ValueError, match='image0'):
            ImagePair(image.astype(float), image, K, K, np.eye(4))
        with pytest.raises(ValueError, match='K1'):
            ImagePair(image, image, K, np.zeros((3, 3)), np.eye(4))
        with pytest.raises(ValueError, match='rigid'):
            ImagePair(image, image, K, K, np.ones((4, 4)))

    def test_intrinsics_of_another_image_size_are_refused(self, tmp_path):
        # K of the full-size images with images stored at a quarter of that size: the
        # principal point lies outside them, and the AUC would silently be that of wrong rays
        small = np.zeros((120, 160), np.uint8)
        with pytest.raises(ValueError, match=r'K0 puts the principal point at \(319.5, 239.5\)'
                                             r'.*outside the 160x120 image: intrinsics for '
                                             r'640x480 used on 160x120 images\? Scale .* by '
                                             r'0.25'):
            ImagePair(small, small, K, K, np.eye(4))
        quarter = K.copy()
        quarter[:2] /= 4
        ImagePair(small, small, quarter, quarter, np.eye(4))   # K for the stored size: taken
        np.savez(tmp_path / 'big_k.npz', image0=small[None], image1=small[None], K0=quarter,
                 K1=K, T_0to1=np.eye(4)[None], names=np.array(['street:3-4']))
        with pytest.raises(ValueError, match=r'big_k.npz: pair 0 \(street:3-4\): '
                                             r'ImagePair.K1 puts the principal point'):
            load_pairs_npz(tmp_path / 'big_k.npz')
        cv2.imwrite(str(tmp_path / 'a.png'), small)
        numbers = ' '.join(repr(float(v)) for v in (*quarter.ravel(), *K.ravel(),
                                                    *np.eye(4).ravel()))
        (tmp_path / 'pairs.txt').write_text(f'# list\na.png a.png 0 0 {numbers}\n')
        with pytest.raises(ValueError, match=r'pairs.txt, line 2: ImagePair.K1 puts the '
                                             'principal point'):
            load_pairs_txt(tmp_path / 'pairs.txt')

    def test_npz_errors_name_the_file_and_the_pair(self, tmp_path):
        image = np.zeros((1, 480, 640), np.uint8)
        np.savez(tmp_path / 'scaled.npz', image0=image, image1=image, K0=K, K1=K,
                 T_0to1=np.diag([2.0, 2.0, 2.0, 1.0])[None])
        with pytest.raises(ValueError, match=r'scaled.npz: pair 0 \(scaled:0\): .*rigid'):
            load_pairs_npz(tmp_path / 'scaled.npz')
        np.savez(tmp_path / 'objects.npz', image0=image, image1=image, K0=K, K1=K,
                 T_0to1=np.eye(4)[None], names=np.array([{'a': 1}], dtype=object))
        with pytest.raises(ValueError, match='cannot read pairs file .*objects.npz'):
            load_pairs_npz(tmp_path / 'objects.npz')
        # a download cut off, or a compressed member cut short: an internal error before
        good = tmp_path / 'good.npz'
        np.savez_compressed(good, image0=image, image1=image, K0=K, K1=K, T_0to1=np.eye(4)[None])
        for size in (300, good.stat().st_size // 2):
            cut = tmp_path / f'cut_{size}.npz'
            cut.write_bytes(good.read_bytes()[:size])
            with pytest.raises(ValueError, match=f'cannot read pairs file .*{cut.name}'):
                load_pairs_npz(cut)

    def test_pairs_from_bag(self, small_bag):
        pairs = pairs_from_bag(small_bag, gaps=(1, 3))
        assert sum(p.gap == 1 for p in pairs) == 7 and sum(p.gap == 3 for p in pairs) == 5
        scene = SyntheticScene(seed=0, width=SIZE[0], height=SIZE[1])
        poses = scene.trajectory(8)
        first = next(p for p in pairs if p.name.endswith(':2-5'))
        np.testing.assert_allclose(first.T_0to1, relative_transform(poses[2], poses[5]),
                                   atol=1e-6)
        np.testing.assert_allclose(first.K0, scene.camera.K)
        assert first.image0.shape == (SIZE[1], SIZE[0])
        limited = pairs_from_bag(small_bag, gaps=(2,), stride=2, max_pairs=2)
        assert [p.name.split(':')[1] for p in limited] == ['0-2', '2-4']
        with pytest.raises(ValueError, match='gaps'):
            pairs_from_bag(small_bag, gaps=(0,))
        with pytest.raises(ValueError, match='ground_truth_pose'):
            pairs_from_bag(small_bag, config={'topics.ground_truth_pose': '/nope'})


class TestEvalPairsCli:
    def test_help_shows_defaults_and_loftr_is_compared_by_default(self, capsys):
        with pytest.raises(SystemExit):
            main(['eval-pairs', '--help'])
        text = ' '.join(capsys.readouterr().out.split())
        assert "(default: ['ncc', 'loftr', 'orb'])" in text
        assert '(default: 0.5)' in text and '(default: [1])' in text

    def test_end_to_end(self, small_bag, tmp_path, synthetic_pair_with_depth):
        out = tmp_path / 'out'
        listed = save_pairs_npz(tmp_path / 'listed.npz', [synthetic_pair_with_depth[0]])
        rc = main(['eval-pairs', '--bag', str(small_bag), '--gaps', '1', '3', '--synthetic',
                   '1', '--synthetic-size', str(SIZE[0]), str(SIZE[1]), '--pairs', str(listed),
                   '--matchers', 'ncc', 'orb', '-o', str(out), '--no-progress'])
        assert rc == 0
        results = json.loads((out / 'pairs_results.json').read_text())
        bag = small_bag.name
        assert set(results['summaries']) == {f'{m} | {g}' for m in ('ncc', 'orb')
                                             for g in (f'{bag} gap 1', f'{bag} gap 3',
                                                       'synthetic gap 1', 'synthetic gap 3',
                                                       'listed gap 5')}
        for matcher in ('ncc', 'orb'):
            s = results['summaries'][f'{matcher} | {bag} gap 1']
            assert s['num_pairs'] == 7 and s['matches_mean'] > 20
            assert s['epi_precision'] > 0.9
            assert 0.0 <= s['auc@5'] <= s['auc@10'] <= s['auc@20'] <= 1.0
        assert len(results['rows'][f'ncc | {bag} gap 3']) == 5
        assert (out / 'pairs_auc.png').is_file()
        assert 'AUC@5' in (out / 'pairs_table.txt').read_text()
        # two pairs per matcher and group drawn side by side, first and last
        rows = results['rows'][f'ncc | {bag} gap 1']
        drawn = [row['drawing'] for row in rows if 'drawing' in row]
        assert len(drawn) == 2 and 'drawing' in rows[0] and 'drawing' in rows[-1]
        image = cv2.imread(str(out / 'match_drawings' / drawn[0]))
        assert image is not None and image.shape[1] > 2 * SIZE[0]
        # groups of one pair (synthetic, listed) get one drawing
        assert len(list((out / 'match_drawings').glob('*.png'))) == 2 * (2 + 2 + 1 + 1 + 1)

    def test_results_name_the_loftr_preset(self, tmp_path):
        out = tmp_path / 'out'
        assert main(['eval-pairs', '--synthetic', '1', '--synthetic-size', str(SIZE[0]),
                     str(SIZE[1]), '--matchers', 'loftr', '--drawings', '0', '-o', str(out),
                     '--no-progress']) == 0
        summaries = json.loads((out / 'pairs_results.json').read_text())['summaries']
        (key, summary), = summaries.items()
        assert key == 'loftr_lite | synthetic gap 1'
        assert summary['matcher'] == 'loftr_lite' and summary['matcher_weights'] == 'shipped'

    def test_pairs_without_ground_truth_baseline_are_flagged(self, synthetic_pair_with_depth,
                                                             tmp_path, caplog):
        pair = synthetic_pair_with_depth[0]
        still = dataclasses.replace(pair, T_0to1=np.eye(4), name='still')
        listed = save_pairs_npz(tmp_path / 'listed.npz', [pair, still])
        with caplog.at_level('WARNING'):
            assert main(['eval-pairs', '--pairs', str(listed), '--matchers', 'orb',
                         '--drawings', '0', '-o', str(tmp_path / 'out'), '--no-progress']) == 0
        assert '1 of 2 pairs have a zero ground-truth translation' in caplog.text

    def test_a_matcher_named_twice_is_evaluated_once(self, tmp_path, caplog):
        out = tmp_path / 'out'
        with caplog.at_level('WARNING'):
            assert main(['eval-pairs', '--synthetic', '1', '--synthetic-size', str(SIZE[0]),
                         str(SIZE[1]), '--matchers', 'orb', 'orb', '--drawings', '0', '-o',
                         str(out), '--no-progress']) == 0
        assert '--matchers names orb more than once' in caplog.text
        results = json.loads((out / 'pairs_results.json').read_text())
        assert results['matchers'] == ['orb'] and list(results['summaries']) == \
            ['orb | synthetic gap 1']
        assert (out / 'pairs_table.txt').read_text().count('orb |') == 1

    def test_unknown_matcher_reported(self, small_bag, tmp_path):
        rc = main(['eval-pairs', '--bag', str(small_bag), '--matchers', 'orb', 'nosuch',
                   '-o', str(tmp_path), '--no-progress', '--max-pairs', '2'])
        assert rc == 1
        results = json.loads((tmp_path / 'pairs_results.json').read_text())
        assert 'nosuch' in results['failed_matchers']
        assert f'orb | {small_bag.name} gap 1' in results['summaries']

    def test_no_source(self, tmp_path):
        assert main(['eval-pairs', '--matchers', 'orb', '-o', str(tmp_path)]) == 1

    @pytest.mark.parametrize('option', ['--stride', '--max-pairs'])
    def test_zero_count_refused(self, tmp_path, capsys, option):
        """0 is refused where it is parsed (it was silently ignored without --bag)."""
        with pytest.raises(SystemExit) as exit_info:
            main(['eval-pairs', '--synthetic', '1', option, '0', '-o', str(tmp_path)])
        assert exit_info.value.code == 2
        assert f'argument {option}: must be >= 1, got 0' in capsys.readouterr().err


class TestRealPairs:
    def test_tum_ground_truth_convention(self, tmp_path):
        """On real TUM pairs, ORB + the protocol agree with the converted ground truth."""
        from relperception.data.converters import convert_tum
        from relperception.matching.base import build_matcher

        source = shared_dataset('tum_rgbd_fr3_long_office_household_1hz_17f')
        convert_tum(source, tmp_path / 'tum')
        pairs = pairs_from_bag(tmp_path / 'tum', gaps=(1,), max_pairs=3)
        assert [p.name.split(':')[1] for p in pairs] == ['1-2', '2-3', '3-4']  # frame 0: no GT
        result = evaluate_pairs(build_matcher('orb'), pairs, warmup=0)
        for row in result['rows']:
            assert row['pose_err_deg'] < 10.0, row
            assert row['epi_precision'] > 0.9, row
