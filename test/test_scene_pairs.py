# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the 3-D scene / negative matcher-training pairs, their ground truth and the loss."""

import argparse
import dataclasses
import math

import numpy as np
import pytest
from relperception.training.homography import coarse_matches_from_homography, HomographyConfig
from relperception.training.loftr_losses import (
    loftr_loss, LoFTRLossConfig, unmatched_focal_loss)
from relperception.training.scene_pairs import (
    coarse_matches_from_depth, KIND_NEGATIVE, KIND_SCENE, load_scene_views, mixed_ground_truth,
    MixedMatcherPairDataset, PairMix, relative_pose, render_scene_views, scene_pair_table,
    warp_points_by_depth)
import torch

HEIGHT, WIDTH = 96, 128
HW_C = (HEIGHT // 8, WIDTH // 8)
K = np.array([[100.0, 0.0, (WIDTH - 1) / 2], [0.0, 100.0, (HEIGHT - 1) / 2], [0.0, 0.0, 1.0]])


def rotation(yaw_deg, pitch_deg=0.0, roll_deg=0.0):
    """Return a (3, 3) rotation: yaw about the camera y axis, pitch about x, roll about z."""
    from scipy.spatial.transform import Rotation

    return Rotation.from_euler('yxz', np.radians([yaw_deg, pitch_deg, roll_deg])).as_matrix()


def transform(R, t):
    """Return the (4, 4) rigid transform of rotation ``R`` and translation ``t``."""
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = R, t
    return T


def plane_depth(n, d, K_cam=K):
    """Return the (H, W) depth map of the plane ``n . X = d`` (camera coordinates)."""
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
    rays = np.stack([xs, ys, np.ones_like(xs)], -1) @ np.linalg.inv(K_cam).T
    return (d / (rays @ np.asarray(n, np.float64))).astype(np.float32)


def plane_pair(R, t, n=(0.0, 0.0, 1.0), d=5.0):
    """Return (depth0, depth1, T_1_0, H_1_0) of the plane ``n . X0 = d`` seen by two cameras."""
    n = np.asarray(n, np.float64)
    n1 = R @ n
    depth0 = plane_depth(n, d)
    depth1 = plane_depth(n1, d + n1 @ t)
    H = K @ (R + np.outer(t, n) / d) @ np.linalg.inv(K)
    return depth0, depth1, transform(R, t), H / H[2, 2]


def as_batch(*arrays):
    """Return each array as a float64 tensor with a leading batch axis of 1."""
    return [torch.from_numpy(np.asarray(a, np.float64))[None] for a in arrays]


def depth_gt(depth0, depth1, T_1_0, **kwargs):
    """Return ``coarse_matches_from_depth`` of one pair with the module's K."""
    d0, d1, k0, k1, T = as_batch(depth0, depth1, K, K, T_1_0)
    return coarse_matches_from_depth(d0, d1, k0, k1, T, HW_C, HW_C, 8.0, **kwargs)


def match_set(gt):
    """Return the ground-truth matches as a set of (b, i, j)."""
    return set(zip(gt['b_ids'].tolist(), gt['i_ids'].tolist(), gt['j_ids'].tolist()))


def inside_homography_matches(H):
    """Return the homography GT restricted to warps landing inside the images both ways."""
    gt = coarse_matches_from_homography(torch.from_numpy(H)[None], HW_C, HW_C, 8.0)
    keep = set()
    H_inv = np.linalg.inv(H)
    for b, i, j in match_set(gt):
        p0 = np.array([8.0 * (i % HW_C[1]), 8.0 * (i // HW_C[1]), 1.0])
        p1 = np.array([8.0 * (j % HW_C[1]), 8.0 * (j // HW_C[1]), 1.0])
        w0, w1 = H @ p0, H_inv @ p1
        w0, w1 = w0[:2] / w0[2], w1[:2] / w1[2]
        if all(-0.5 <= w[0] < WIDTH - 0.5 and -0.5 <= w[1] < HEIGHT - 0.5 for w in (w0, w1)):
            keep.add((b, i, j))
    return keep


class TestDepthWarp:
    def test_matches_projection_of_known_points(self):
        rng = np.random.default_rng(0)
        R, t = rotation(12.0, -5.0, 3.0), np.array([0.4, -0.1, 0.3])
        points_cam0 = np.stack([rng.uniform(-2, 2, 20), rng.uniform(-1.5, 1.5, 20),
                                rng.uniform(4, 8, 20)], 1)
        pixels0 = points_cam0 @ K.T
        pixels0 = pixels0[:, :2] / pixels0[:, 2:]
        depth0 = np.full((HEIGHT, WIDTH), np.nan, np.float32)
        depth1 = np.full((HEIGHT, WIDTH), np.nan, np.float32)
        pts1 = points_cam0 @ R.T + t
        pixels1 = pts1 @ K.T
        pixels1 = pixels1[:, :2] / pixels1[:, 2:]
        # depth only at the nearest pixels of the points, the ray through that pixel centre
        for p0, X0, p1, X1 in zip(pixels0, points_cam0, pixels1, pts1):
            x, y = np.round(p0).astype(int)
            if 0 <= x < WIDTH and 0 <= y < HEIGHT:
                depth0[y, x] = X0[2]
            x, y = np.round(p1).astype(int)
            if 0 <= x < WIDTH and 0 <= y < HEIGHT:
                depth1[y, x] = X1[2]
        centres = np.round(pixels0)
        inside = (centres[:, 0] >= 0) & (centres[:, 0] < WIDTH) & (centres[:, 1] >= 0) \
            & (centres[:, 1] < HEIGHT)
        X = np.linalg.inv(K) @ np.concatenate([centres, np.ones((20, 1))], 1).T * \
            points_cam0[:, 2]
        expected = (X.T @ R.T + t) @ K.T
        expected = expected[:, :2] / expected[:, 2:]
        d0, d1, k0, k1, T, pts = as_batch(depth0, depth1, K, K, transform(R, t), centres)
        warped, valid = warp_points_by_depth(pts, d0, k0, k1, T, d1, depth_tolerance=0.5)
        np.testing.assert_allclose(warped[0].numpy()[inside], expected[inside], atol=1e-6)
        # valid exactly where the point and its warp land inside with depth at the pixel
        landed = np.round(expected)
        has_depth = np.array([0 <= x < WIDTH and 0 <= y < HEIGHT
                              and np.isfinite(depth1[int(y), int(x)]) for x, y in landed])
        assert valid[0].numpy().tolist() == (inside & has_depth).tolist()
        assert valid[0].sum() >= 10

    def test_rendered_views_agree_with_world_points(self):
        views = render_scene_views(21, num_views=2, width=WIDTH, height=HEIGHT)
        v0, v1 = views
        ys, xs = np.mgrid[4:HEIGHT:9, 5:WIDTH:11]
        pix = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float64)
        z = v0.depth[ys.ravel(), xs.ravel()].astype(np.float64)
        rays = np.concatenate([pix, np.ones((len(pix), 1))], 1) @ np.linalg.inv(v0.K).T
        world = (rays * z[:, None]) @ v0.T_world_cam[:3, :3].T + v0.T_world_cam[:3, 3]
        T_cam1_world = np.linalg.inv(v1.T_world_cam)
        cam1 = world @ T_cam1_world[:3, :3].T + T_cam1_world[:3, 3]
        expected = cam1 @ v1.K.T
        expected = expected[:, :2] / expected[:, 2:]
        d0, d1, k0, k1, T, pts = as_batch(v0.depth, v1.depth, v0.K, v1.K,
                                          relative_pose(v0, v1), pix)
        warped, valid = warp_points_by_depth(pts, d0, k0, k1, T, d1)
        front = cam1[:, 2] > 0
        np.testing.assert_allclose(warped[0].numpy()[front], expected[front], atol=1e-4)
        # a valid warp is really visible: depth of view 1 at the landing pixel agrees
        for (x, y), z1, ok in zip(np.round(expected[front]).astype(int), cam1[front, 2],
                                  valid[0].numpy()[front]):
            if ok:
                assert abs(v1.depth[y, x] - z1) < 0.2 * v1.depth[y, x]

    def test_pure_rotation_equals_homography(self):
        R = rotation(17.0, 6.0, -4.0)
        # a sphere around the common centre: both depth maps agree exactly
        ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
        rays = np.stack([xs, ys, np.ones_like(xs)], -1) @ np.linalg.inv(K).T
        depth = (4.0 / np.linalg.norm(rays, axis=-1)).astype(np.float32)
        gt = depth_gt(depth, depth, transform(R, np.zeros(3)))
        H = K @ R @ np.linalg.inv(K)
        expected = inside_homography_matches(H / H[2, 2])
        assert len(expected) > 50
        assert match_set(gt) == expected

    @pytest.mark.parametrize('R, t', [(np.eye(3), np.array([0.0, 0.0, 5.0])),     # zoom out 2x
                                      (rotation(-8.0, 4.0), np.array([0.8, 0.2, -1.0]))])
    def test_plane_equals_plane_homography_with_mutual_check(self, R, t):
        depth0, depth1, T, H = plane_pair(R, t)
        gt = depth_gt(depth0, depth1, T)
        assert match_set(gt) == inside_homography_matches(H)
        j = gt['j_ids'].numpy()
        assert len(j) > 20 and len(np.unique(j)) == len(j)   # one-to-one (mutual)
        if t[2] > 0:   # zoomed out: most covisible cells of image 0 fail the mutual check
            assert len(j) < 0.5 * int(gt['matchable0'].sum())

    def test_occluded_cell_has_no_match(self):
        R, t = np.eye(3), np.array([0.5, 0.0, 0.0])
        depth0, depth1, T, _ = plane_pair(R, t)
        free = depth_gt(depth0, depth1, T)
        occluded = depth1.copy()
        occluded[40:72, 40:72] = 2.0   # something in front of the plane, seen by camera 1 only
        gt = depth_gt(depth0, occluded, T)
        lost = match_set(free) - match_set(gt)
        assert lost and match_set(gt) < match_set(free)
        for _, i, _ in lost:
            assert not bool(gt['matchable0'][0, i])
            x = gt['w_pt0'][0, i].numpy()
            assert 39.5 <= x[0] < 71.5 and 39.5 <= x[1] < 71.5
        # with a tolerance looser than the depth ratio (5 m vs 2 m) they are covisible again
        loose = depth_gt(depth0, occluded, T, depth_tolerance=2.0)
        assert all(bool(loose['matchable0'][0, i]) for _, i, _ in lost)

    def test_mutual_check_against_reverse_warp(self):
        depth0, depth1, T, _ = plane_pair(rotation(25.0), np.array([1.0, 0.0, 0.5]))
        gt = depth_gt(depth0, depth1, T)
        back = depth_gt(depth1, depth0, np.linalg.inv(T))
        assert {(b, j, i) for b, i, j in match_set(gt)} == match_set(back)

    def test_fine_target_is_the_subcell_position(self):
        from relperception.training.homography import fine_offsets_gt

        depth0, depth1, T, H = plane_pair(np.eye(3), np.array([0.1, 0.05, 0.0]))
        gt = depth_gt(depth0, depth1, T)
        target = fine_offsets_gt(gt['w_pt0'], gt['pt1'], gt['b_ids'], gt['i_ids'],
                                 gt['j_ids'], fine_scale=2.0, radius=2.0)
        shift = 100.0 * np.array([0.1, 0.05]) / 5.0   # f * t / depth pixels
        np.testing.assert_allclose(target.numpy(), np.tile(shift / 4.0, (len(target), 1)),
                                   atol=1e-5)

    def test_bad_inputs(self):
        d0, d1, k0, k1, T = as_batch(np.ones((HEIGHT, WIDTH)), np.ones((HEIGHT, WIDTH)), K, K,
                                     np.eye(4))
        pts = torch.zeros(1, 3, 2)
        with pytest.raises(ValueError, match='points0'):
            warp_points_by_depth(pts[..., :1], d0, k0, k1, T, d1)
        with pytest.raises(ValueError, match='K1'):
            warp_points_by_depth(pts, d0, k0, k1[:, :2], T, d1)
        with pytest.raises(ValueError, match='depth1'):
            warp_points_by_depth(pts, d0, k0, k1, T, d1[0])
        with pytest.raises(ValueError, match='depth_tolerance'):
            warp_points_by_depth(pts, d0, k0, k1, T, d1, depth_tolerance=0.0)
        with pytest.raises(ValueError, match='image_scale'):
            coarse_matches_from_depth(d0, d1, k0, k1, T, HW_C, HW_C, 8.0,
                                      image_scale=torch.ones(1, 3))
        with pytest.raises(ValueError, match='num_views'):
            render_scene_views(0, num_views=1)


# ----------------------------------------------------------------------------------------------
# Dataset, negatives, resizing
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def views():
    """Return rendered views of two rooms at 96 x 128."""
    return load_scene_views(['synth:21-22:8'], (HEIGHT, WIDTH))


class TestMixedDataset:
    def test_scene_pairs_selection_and_ground_truth(self, views):
        table = scene_pair_table(views)
        assert set(table[:, 0].astype(int)) <= set(range(len(views)))
        same_seed = [views[int(a)].seed == views[int(b)].seed for a, b in table[:, :2]]
        assert all(same_seed) and len(table) == 2 * 8 * 7
        mix = PairMix(scene_fraction=1.0, negative_fraction=0.0, min_overlap=0.1)
        ds = MixedMatcherPairDataset((HEIGHT, WIDTH), 6, seed=2, views=views, mix=mix)
        assert len(ds.wide_pairs) + len(ds.moderate_pairs) > 0
        assert (ds.wide_pairs[:, 2] >= 30).all() and (ds.moderate_pairs[:, 2] < 30).all()
        items = [ds[i] for i in range(6)]
        assert all(int(it['kind']) == KIND_SCENE for it in items)
        batch = {k: torch.stack([it[k] for it in items]) for k in items[0]}
        gt = mixed_ground_truth(batch, HW_C, HW_C, 8.0)
        counts = torch.bincount(gt['b_ids'], minlength=6)
        assert (counts >= 0.1 * HW_C[0] * HW_C[1]).all()   # min_overlap of the selection
        # reproducible per (seed, epoch, index)
        torch.testing.assert_close(ds[3]['image1'], items[3]['image1'])

    def test_negatives_have_no_ground_truth(self, views):
        rng = np.random.default_rng(0)
        sources = [rng.integers(0, 255, (60, 80), dtype=np.uint8) for _ in range(2)]
        mix = PairMix(scene_fraction=0.0, negative_fraction=1.0)
        ds = MixedMatcherPairDataset((HEIGHT, WIDTH), 8, seed=1, views=views,
                                     negative_sources=sources, negative_groups=['a', 'a'],
                                     mix=mix)
        items = [ds[i] for i in range(8)]
        assert all(int(it['kind']) == KIND_NEGATIVE for it in items)
        batch = {k: torch.stack([it[k] for it in items]) for k in items[0]}
        gt = mixed_ground_truth(batch, HW_C, HW_C, 8.0)
        assert len(gt['b_ids']) == 0 and float(gt['conf_matrix_gt'].sum()) == 0.0
        assert not gt['matchable0'].any() and not gt['matchable1'].any()
        # the two images never come from the same group (room 21, room 22 or the arrays 'a')
        for item in items:
            assert not torch.equal(item['image0'], item['image1'])
        with pytest.raises(ValueError, match='two groups'):
            MixedMatcherPairDataset((HEIGHT, WIDTH), 8, negative_sources=sources,
                                    negative_groups=['a', 'a'], mix=mix)

    def test_real_negatives_pair_two_real_groups(self, views):
        # flat images: group 'a' grey 50, group 'b' grey 200; the rooms are textured
        sources = [np.full((60, 80), 50, np.uint8), np.full((60, 80), 50, np.uint8),
                   np.full((60, 80), 200, np.uint8)]
        groups = ['a', 'a', 'b']
        mix = PairMix(scene_fraction=0.0, negative_fraction=1.0, real_negative_fraction=1.0)
        ds = MixedMatcherPairDataset((HEIGHT, WIDTH), 12, seed=3, views=views,
                                     negative_sources=sources, negative_groups=groups, mix=mix,
                                     photometric=None)
        for i in range(12):
            item = ds[i]
            values = []
            for key, mask in (('image0', 'mask0'), ('image1', 'mask1')):
                pixels = item[key][0][item[mask]].numpy()   # borders blend with the fill
                value = float(np.median(pixels))
                assert np.mean(np.abs(pixels - value) < 1e-5) > 0.9, 'a room was drawn'
                values.append(round(value * 255))
            assert sorted(values) == [50, 200]
        # the default draws from every source: rooms appear
        mixed = MixedMatcherPairDataset((HEIGHT, WIDTH), 12, seed=3, views=views,
                                        negative_sources=sources, negative_groups=groups,
                                        mix=PairMix(scene_fraction=0.0, negative_fraction=1.0),
                                        photometric=None)
        assert any(np.ptp(mixed[i]['image0'][0].numpy()) > 0.1 for i in range(12))
        with pytest.raises(ValueError, match='real_negative_fraction'):
            MixedMatcherPairDataset((HEIGHT, WIDTH), 4, views=views,
                                    negative_sources=sources[:2], negative_groups=['a', 'a'],
                                    mix=mix)
        with pytest.raises(ValueError, match='real_negative_fraction'):
            MixedMatcherPairDataset((HEIGHT, WIDTH), 4, views=views,
                                    mix=PairMix(real_negative_fraction=1.5))

    def test_rescaled_batch_keeps_depth_ground_truth(self, views):
        from relperception.training.matcher_train import rescale_batch

        mix = PairMix(scene_fraction=1.0, negative_fraction=0.0, min_overlap=0.1)
        ds = MixedMatcherPairDataset((HEIGHT, WIDTH), 2, seed=4, views=views, mix=mix)
        batch = {k: torch.stack([ds[i][k] for i in range(2)]) for k in ds[0]}
        half = rescale_batch(batch, 0.5)
        torch.testing.assert_close(half['image_scale'], torch.full((2, 2), 0.5))
        hw = (HW_C[0] // 2, HW_C[1] // 2)
        gt = mixed_ground_truth(half, hw, hw, 8.0)
        assert len(gt['b_ids']) > 0
        cells = gt['pt1'][0, :hw[0] * hw[1]].double()   # the same grid for image 0
        full_px = (cells + 0.5) / 0.5 - 0.5
        warped, valid = warp_points_by_depth(
            full_px[None].expand(2, -1, -1), batch['depth0'], batch['K0'], batch['K1'],
            batch['T_1_0'], batch['depth1'])
        expected = (warped + 0.5) * 0.5 - 0.5
        np.testing.assert_allclose(gt['w_pt0'].double()[valid].numpy(),
                                   expected[valid].numpy(), atol=1e-3)
        assert torch.equal(gt['matchable0'], valid)

    def test_bad_arguments(self, views):
        with pytest.raises(ValueError, match='scene_fraction'):
            MixedMatcherPairDataset((HEIGHT, WIDTH), 4, views=views,
                                    mix=PairMix(scene_fraction=0.9, negative_fraction=0.3))
        with pytest.raises(ValueError, match='wide_fraction'):
            MixedMatcherPairDataset((HEIGHT, WIDTH), 4, views=views,
                                    mix=PairMix(wide_fraction=1.5))
        with pytest.raises(ValueError, match='no scene views'):
            MixedMatcherPairDataset((HEIGHT, WIDTH), 4, mix=PairMix(negative_fraction=0.0))
        with pytest.raises(ValueError, match='scene views must be'):
            MixedMatcherPairDataset((64, 64), 4, views=views)
        with pytest.raises(ValueError, match='training size'):
            load_scene_views(['synth:21:2:320x240'], (HEIGHT, WIDTH))
        with pytest.raises(ValueError, match='synth:'):
            load_scene_views(['rooms/'], (HEIGHT, WIDTH))
        with pytest.raises(ValueError, match='kind'):
            mixed_ground_truth({'H_1_0': torch.eye(3)[None]}, HW_C, HW_C, 8.0)


# ----------------------------------------------------------------------------------------------
# Loss
# ----------------------------------------------------------------------------------------------

def dual_softmax(sim):
    """Return the dual-softmax confidence of a (B, L0, L1) similarity matrix."""
    return torch.softmax(sim, 1) * torch.softmax(sim, 2)


class TestUnmatchedLoss:
    def test_reference_value(self):
        conf = torch.tensor([[[0.1, 0.5], [0.2, 0.05]]])
        unmatched0 = torch.tensor([[True, False]])
        unmatched1 = torch.tensor([[False, True]])
        loss = unmatched_focal_loss(conf, unmatched0, unmatched1, LoFTRLossConfig())
        best = torch.tensor([0.5, 0.5])   # row 0 max, column 1 max
        expected = (-0.25 * best ** 2 * torch.log(1 - best)).mean()
        torch.testing.assert_close(loss, expected)
        gamma1 = unmatched_focal_loss(conf, unmatched0, unmatched1,
                                      LoFTRLossConfig(unmatched_gamma=1.0))
        torch.testing.assert_close(gamma1, (-0.25 * best * torch.log(1 - best)).mean())
        none = torch.zeros_like(unmatched0)
        assert float(unmatched_focal_loss(conf, none, torch.zeros_like(unmatched1))) == 0.0

    def test_lower_when_negatives_get_low_confidence(self):
        torch.manual_seed(0)
        L = 24
        gt = torch.zeros(2, L, L)
        gt[0, torch.arange(L), torch.arange(L)] = 1.0   # pair 0: identity matches
        unmatched0 = torch.tensor([[False] * L, [True] * L])   # pair 1: negative
        unmatched1 = unmatched0.clone()
        peaked = torch.eye(L) * 12.0 + torch.randn(L, L) * 0.1
        confident = dual_softmax(torch.stack([peaked, peaked]))     # matches on the negative
        flat = dual_softmax(torch.stack([peaked, torch.randn(L, L) * 0.1]))
        cfg = LoFTRLossConfig(unmatched_weight=1.0)
        high, logs_high = loftr_loss(confident, gt, None, None, cfg, unmatched0, unmatched1)
        low, logs_low = loftr_loss(flat, gt, None, None, cfg, unmatched0, unmatched1)
        assert logs_high['loss_c'] == pytest.approx(logs_low['loss_c'])   # same positives
        assert logs_low['loss_u'] < 0.1 * logs_high['loss_u']
        assert float(low) < float(high)
        # the positive-only loss (weight 0) cannot tell them apart
        off = LoFTRLossConfig()
        assert float(loftr_loss(confident, gt, None, None, off, unmatched0, unmatched1)[0]) == \
            pytest.approx(float(loftr_loss(flat, gt, None, None, off, unmatched0,
                                           unmatched1)[0]))

    def test_top_fraction_averages_the_hardest_cells(self):
        conf = torch.tensor([[[0.6, 0.1, 0.0], [0.05, 0.02, 0.0], [0.3, 0.0, 0.01]]],
                            requires_grad=True)
        unmatched = torch.ones(1, 3, dtype=torch.bool)
        cfg = LoFTRLossConfig(unmatched_gamma=1.0, unmatched_top_fraction=0.5)
        loss = unmatched_focal_loss(conf, unmatched, unmatched, cfg)
        # Row maxima 0.6, 0.05, 0.3 and column maxima 0.6, 0.1, 0.01: the top 3 of 6.
        best = torch.tensor([0.6, 0.6, 0.3])
        torch.testing.assert_close(loss, (-0.25 * best * torch.log(1 - best)).mean())
        loss.backward()
        # Only the hard cells get a gradient; the easy ones (0.05, 0.1, 0.01) none.
        assert conf.grad[0, 1].abs().sum() == 0 and conf.grad[0, 0, 1] == 0
        assert conf.grad[0, 0, 0] > 0 and conf.grad[0, 2, 0] > 0
        everything = unmatched_focal_loss(conf, unmatched, unmatched,
                                          LoFTRLossConfig(unmatched_gamma=1.0))
        assert float(everything.detach()) < float(loss.detach())
        for bad in (0.0, 1.5, float('nan')):
            with pytest.raises(ValueError, match='unmatched_top_fraction'):
                LoFTRLossConfig(unmatched_top_fraction=bad)

    def test_gradient_goes_to_the_row_maximum(self):
        sim = torch.randn(1, 6, 6, requires_grad=True)
        conf = dual_softmax(sim)
        loss = unmatched_focal_loss(conf, torch.ones(1, 6, dtype=torch.bool),
                                    torch.zeros(1, 6, dtype=torch.bool))
        loss.backward()
        assert sim.grad.abs().sum() > 0 and math.isfinite(float(loss.detach()))

    def test_bad_shapes(self):
        with pytest.raises(ValueError, match='unmatched0'):
            unmatched_focal_loss(torch.zeros(1, 3, 4), torch.zeros(1, 4, dtype=torch.bool),
                                 torch.zeros(1, 4, dtype=torch.bool))


# ----------------------------------------------------------------------------------------------
# Training entry points
# ----------------------------------------------------------------------------------------------

TINY = {'resnetfpn': {'initial_dim': 16, 'block_dims': [16, 24, 32]},
        'coarse': {'d_model': 32, 'nhead': 2, 'layer_names': ['self', 'cross']},
        'fine': {'d_model': 16, 'nhead': 2}}


class TestMixedTraining:
    def test_train_matcher_with_scene_and_negative_pairs(self, tmp_path):
        from relperception.training.matcher_train import train_matcher

        rng = np.random.default_rng(0)
        image = (rng.random((120, 160)) * 255).astype(np.uint8)
        result = train_matcher(
            'loftr_lite', [image], tmp_path / 'run', steps=2, batch_size=2, lr=1e-3,
            image_size=(HEIGHT, WIDTH), val_data=None, val_pairs=2,
            val_scenes=['synth:21-22:2'], scene_pairs=['synth:21:4'], model_conf=TINY,
            pair_mix=PairMix(scene_fraction=0.5, negative_fraction=0.3, min_overlap=0.05),
            scales=(1.0, 0.5), max_fine_matches=8, progress=False)
        assert result['step'] == 2 and 'loss_u' in result['train']
        assert result['config']['loss']['unmatched_weight'] == 10.0
        assert result['config']['homography'] == dataclasses.asdict(HomographyConfig())
        for key in ('scene_precision_3px', 'negative_matches_per_pair'):
            assert key in result['validation']

    def test_cli_mix_options(self):
        from relperception.cli.train import _matcher_mix_options

        def args(**kw):
            base = {'scene_pairs': None, 'scene_fraction': None, 'wide_fraction': None,
                    'negative_fraction': None, 'unmatched_weight': None,
                    'unmatched_gamma': None, 'unmatched_top_fraction': 1.0,
                    'val_scenes': None, 'real_negative_fraction': 0.0}
            base.update(kw)
            return argparse.Namespace(**base)

        assert _matcher_mix_options(args()) == {}   # the homography recipe is unchanged
        extra = _matcher_mix_options(args(scene_pairs=['synth:0-3']))
        assert extra['pair_mix'].negative_fraction == 0.2
        assert (extra['pair_mix'].scene_fraction, extra['pair_mix'].wide_fraction) == (0.45, 0.5)
        assert extra['loss_config'].unmatched_weight == 10.0
        assert extra['loss_config'].unmatched_gamma == 1.0
        only_negatives = _matcher_mix_options(args(negative_fraction=0.3))
        assert only_negatives['pair_mix'].scene_fraction == 0.0
        with pytest.raises(ValueError, match='--negative-fraction'):
            _matcher_mix_options(args(negative_fraction=1.5))
        with pytest.raises(ValueError, match='--unmatched-weight'):
            _matcher_mix_options(args(unmatched_weight=-1.0))
        with pytest.raises(ValueError, match='--unmatched-gamma'):
            _matcher_mix_options(args(unmatched_gamma=-1.0))
        hard = _matcher_mix_options(args(scene_pairs=['synth:0-3'], unmatched_top_fraction=0.1))
        assert hard['loss_config'].unmatched_top_fraction == 0.1
        assert extra['loss_config'].unmatched_top_fraction == 1.0
        with pytest.raises(ValueError, match='--unmatched-top-fraction'):
            _matcher_mix_options(args(unmatched_top_fraction=0.0))
        assert extra['pair_mix'].real_negative_fraction == 0.0
        real = _matcher_mix_options(args(scene_pairs=['synth:0-3'], real_negative_fraction=0.5))
        assert real['pair_mix'].real_negative_fraction == 0.5
        with pytest.raises(ValueError, match='--real-negative-fraction'):
            _matcher_mix_options(args(real_negative_fraction=-0.1))

    def test_cli_max_zoom(self):
        from relperception.cli.train import _matcher_homography_options

        assert _matcher_homography_options(argparse.Namespace(max_zoom=None)) == {}
        zoom = _matcher_homography_options(argparse.Namespace(max_zoom=2.0))['homography']
        assert zoom.max_scale == 2.0 and zoom.max_angle_deg == HomographyConfig().max_angle_deg
        for bad in (0.5, float('nan')):
            with pytest.raises(ValueError, match='--max-zoom'):
                _matcher_homography_options(argparse.Namespace(max_zoom=bad))
