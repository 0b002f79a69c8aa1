# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the homography matcher-training data, ground truth, LoFTR losses and training."""

import cv2
import numpy as np
import pytest
from relperception.training.homography import (
    coarse_grid, coarse_matches_from_homography, fine_offsets_gt, homography_overlap,
    HomographyConfig, HomographyPairDataset, list_images, photometric_augment,
    sample_homography, warp_points_np)
from relperception.training.loftr_losses import (
    coarse_focal_loss, fine_l2_std_loss, loftr_loss, LoFTRLossConfig)
import torch


def textured_image(height=96, width=128, seed=0):
    """Return a (H, W) uint8 blurred random texture stretched to 0..255."""
    rng = np.random.default_rng(seed)
    noise = cv2.GaussianBlur(rng.random((height, width)).astype(np.float32), (0, 0), 1.5)
    noise = (noise - noise.min()) / (noise.max() - noise.min()) * 255.0
    return np.round(noise).astype(np.uint8)


def translation(dx, dy):
    """Return a (1, 3, 3) float32 translation homography."""
    return torch.tensor([[[1.0, 0.0, dx], [0.0, 1.0, dy], [0.0, 0.0, 1.0]]])


class TestSampleHomography:
    def test_smoke_and_overlap(self):
        rng = np.random.default_rng(0)
        cfg = HomographyConfig(min_overlap=0.6)
        for _ in range(20):
            H = sample_homography(rng, 120, 160, cfg)
            assert H.shape == (3, 3)
            assert abs(H[2, 2] - 1.0) < 1e-9
            assert homography_overlap(H, 120, 160) >= 0.6

    def test_reproducible_and_varied(self):
        a = sample_homography(np.random.default_rng(3), 120, 160)
        b = sample_homography(np.random.default_rng(3), 120, 160)
        c = sample_homography(np.random.default_rng(4), 120, 160)
        np.testing.assert_array_equal(a, b)
        assert not np.allclose(a, c)

    def test_zero_ranges_give_identity(self):
        cfg = HomographyConfig(max_angle_deg=0, max_scale=1.0, max_perspective=0,
                               max_translation=0)
        H = sample_homography(np.random.default_rng(0), 64, 64, cfg)
        np.testing.assert_allclose(H, np.eye(3), atol=1e-6)

    def test_degenerate(self):
        with pytest.raises(ValueError):
            sample_homography(np.random.default_rng(0), 8, 64)
        with pytest.raises(ValueError):
            sample_homography(np.random.default_rng(0), 64, 64, HomographyConfig(max_scale=0.5))
        for zoom in (float('inf'), float('nan'), 9.0):   # inf was an OverflowError
            with pytest.raises(ValueError, match='invalid homography ranges'):
                sample_homography(np.random.default_rng(0), 64, 64,
                                  HomographyConfig(max_scale=zoom))


class TestCoarseMatchesFromHomography:
    def test_translation_by_whole_cells_is_exact(self):
        # Image 1 is image 0 shifted by (2, 1) cells: cell (x, y) matches (x + 2, y + 1).
        h, w, s = 6, 8, 8
        gt = coarse_matches_from_homography(translation(2 * s, 1 * s), (h, w), (h, w), s)
        expected = [(y * w + x, (y + 1) * w + x + 2)
                    for y in range(h - 1) for x in range(w - 2)]
        got = sorted(zip(gt['i_ids'].tolist(), gt['j_ids'].tolist()))
        assert got == expected
        assert gt['b_ids'].eq(0).all()
        assert gt['conf_matrix_gt'].shape == (1, h * w, h * w)
        assert gt['conf_matrix_gt'].sum() == len(expected)
        for i, j in expected:
            assert gt['conf_matrix_gt'][0, i, j] == 1
        offsets = fine_offsets_gt(gt['w_pt0'], gt['pt1'], gt['b_ids'], gt['i_ids'],
                                  gt['j_ids'], fine_scale=2, radius=2)
        assert torch.allclose(offsets, torch.zeros_like(offsets), atol=1e-5)

    def test_subcell_offset_in_window_units(self):
        # A shift of 8 + 3 px rounds to one cell; the remaining 3 px are 3 / (2 * 2) windows.
        gt = coarse_matches_from_homography(translation(11.0, -2.0), (4, 5), (4, 5), 8)
        offsets = fine_offsets_gt(gt['w_pt0'], gt['pt1'], gt['b_ids'], gt['i_ids'],
                                  gt['j_ids'], fine_scale=2, radius=2)
        assert len(offsets) > 0
        assert torch.allclose(offsets, torch.tensor([0.75, -0.5]).expand_as(offsets), atol=1e-5)
        assert (gt['j_ids'] - gt['i_ids']).eq(1).all()

    def test_cell_offset_convention(self):
        # With cells at s * x + 3.5, the same shift gives the same cell matches.
        a = coarse_matches_from_homography(translation(16, 8), (4, 5), (4, 5), 8, offset=0.0)
        b = coarse_matches_from_homography(translation(16, 8), (4, 5), (4, 5), 8, offset=3.5)
        assert torch.equal(a['i_ids'], b['i_ids']) and torch.equal(a['j_ids'], b['j_ids'])
        assert torch.allclose(b['pt1'][0, 0], torch.tensor([3.5, 3.5]))

    def test_zoom_is_one_to_one(self):
        # Zooming out by 2 sends pairs of cells of image 0 to one cell of image 1; the mutual
        # check must keep at most one of them per image-1 cell.
        H = torch.tensor([[[0.5, 0.0, 10.0], [0.0, 0.5, 6.0], [0.0, 0.0, 1.0]]])
        gt = coarse_matches_from_homography(H, (12, 16), (12, 16), 8)
        assert len(gt['j_ids']) > 20
        assert len(torch.unique(gt['j_ids'])) == len(gt['j_ids'])
        w_pt0 = gt['w_pt0'][0, gt['i_ids']]
        assert (w_pt0 - gt['pt1'][0, gt['j_ids']]).abs().max() <= 4.0 + 1e-4

    def test_masks_and_batch(self):
        H = torch.cat([translation(0, 0), translation(8, 0)])
        mask1 = torch.ones(2, 32, 40, dtype=torch.bool)
        mask1[:, :, :16] = False
        gt = coarse_matches_from_homography(H, (4, 5), (4, 5), 8, mask1=mask1)
        assert set(gt['b_ids'].tolist()) == {0, 1}
        x1 = gt['pt1'][gt['b_ids'], gt['j_ids'], 0]
        assert (x1 >= 16).all()
        # identity: cells x = 2, 3, 4 of 4 rows
        assert int((gt['b_ids'] == 0).sum()) == 12

    def test_agrees_with_opencv_projection(self):
        H = sample_homography(np.random.default_rng(5), 96, 128)
        gt = coarse_matches_from_homography(torch.tensor(H[None], dtype=torch.float32),
                                            (12, 16), (12, 16), 8)
        pts = coarse_grid(12, 16, 8)[gt['i_ids']].numpy()
        ref = cv2.perspectiveTransform(pts[None].astype(np.float64), H)[0]
        np.testing.assert_allclose(gt['w_pt0'][0, gt['i_ids']].numpy(), ref, atol=1e-3)
        assert np.abs(ref - gt['pt1'][0, gt['j_ids']].numpy()).max() <= 4.0 + 1e-3

    def test_degenerate(self):
        with pytest.raises(ValueError):
            coarse_matches_from_homography(torch.eye(3), (4, 5), (4, 5), 8)
        # Everything out of view: no match, empty index tensors.
        gt = coarse_matches_from_homography(translation(1000, 0), (4, 5), (4, 5), 8)
        assert len(gt['i_ids']) == 0 and gt['conf_matrix_gt'].sum() == 0


class TestHomographyPairDataset:
    def test_shapes_and_ranges(self):
        ds = HomographyPairDataset([textured_image(120, 160)], size=(64, 96), length=5)
        assert len(ds) == 5
        item = ds[2]
        assert item['image0'].shape == (1, 64, 96) and item['image1'].shape == (1, 64, 96)
        assert item['image0'].dtype == torch.float32
        assert item['H_1_0'].shape == (3, 3)
        assert item['mask0'].shape == (64, 96) and item['mask0'].dtype == torch.bool
        for key in ('image0', 'image1'):
            assert 0.0 <= float(item[key].min()) and float(item[key].max()) <= 1.0
        assert item['mask0'].all()
        ds.set_epoch(1)
        assert not torch.equal(ds[2]['H_1_0'], item['H_1_0'])
        ds.set_epoch(0)
        assert torch.equal(ds[2]['image1'], item['image1'])

    def test_ground_truth_matches_pixels(self):
        # Without photometric change, image 1 sampled at the warped points equals image 0.
        ds = HomographyPairDataset([textured_image(120, 160, seed=1)], size=(96, 128),
                                   length=3, photometric=None)
        item = ds[1]
        im0 = item['image0'][0].numpy()
        im1 = item['image1'][0].numpy()
        ys, xs = np.mgrid[8:88:4, 8:120:4]
        pts = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float64)
        w, ok = warp_points_np(item['H_1_0'].numpy(), pts)
        inside = ok & (w[:, 0] > 2) & (w[:, 0] < 125) & (w[:, 1] > 2) & (w[:, 1] < 93)
        assert inside.sum() > 50
        sampled = cv2.remap(im1, w[inside, 0].astype(np.float32)[None],
                            w[inside, 1].astype(np.float32)[None], cv2.INTER_LINEAR)[0]
        original = im0[pts[inside, 1].astype(int), pts[inside, 0].astype(int)]
        err = np.abs(sampled - original)
        assert np.median(err) < 0.03
        assert np.median(np.abs(np.roll(sampled, 7) - original)) > 3 * np.median(err)

    def test_image_files(self, tmp_path):
        cv2.imwrite(str(tmp_path / 'a.png'), textured_image())
        (tmp_path / 'sub').mkdir()
        cv2.imwrite(str(tmp_path / 'sub' / 'b.jpg'), textured_image(seed=2))
        (tmp_path / 'notes.txt').write_text('x')
        files = list_images([tmp_path])
        assert [f.name for f in files] == ['a.png', 'b.jpg']
        ds = HomographyPairDataset([tmp_path], size=(48, 64), length=4)
        assert ds[3]['image0'].shape == (1, 48, 64)

    def test_photometric_augment(self):
        image = textured_image().astype(np.float32) / 255.0
        out = photometric_augment(np.random.default_rng(0), image)
        assert out.shape == image.shape and out.dtype == np.float32
        assert 0.0 <= out.min() and out.max() <= 1.0
        assert not np.allclose(out, image)
        with pytest.raises(ValueError):
            photometric_augment(np.random.default_rng(0), image[None])

    def test_degenerate(self, tmp_path):
        with pytest.raises(ValueError):
            HomographyPairDataset([textured_image()], size=(60, 64))
        with pytest.raises(ValueError):
            HomographyPairDataset([tmp_path])
        with pytest.raises(ValueError):
            HomographyPairDataset([textured_image().astype(np.float32)])
        with pytest.raises(IndexError):
            HomographyPairDataset([textured_image()], size=(48, 64), length=2)[2]


class TestLoFTRLosses:
    def test_coarse_focal_reference(self):
        conf = torch.tensor([[[0.9, 0.05], [0.2, 0.6]]])
        gt = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
        alpha, gamma = 0.25, 2.0
        pos = [-alpha * (1 - p) ** gamma * np.log(p) for p in (0.9, 0.6)]
        neg = [-alpha * n ** gamma * np.log(1 - n) for n in (0.05, 0.2)]
        sparse = coarse_focal_loss(conf, gt)
        dense = coarse_focal_loss(conf, gt, LoFTRLossConfig(sparse=False))
        assert float(sparse) == pytest.approx(np.mean(pos), rel=1e-5)
        assert float(dense) == pytest.approx(np.mean(pos) + np.mean(neg), rel=1e-5)

    def test_coarse_lower_for_better_prediction(self):
        gt = torch.eye(4)[None]
        good = coarse_focal_loss(gt * 0.9 + 0.02, gt, LoFTRLossConfig(sparse=False))
        bad = coarse_focal_loss(torch.full((1, 4, 4), 0.25), gt, LoFTRLossConfig(sparse=False))
        assert float(good) < float(bad)

    def test_fine_std_weighting_and_window(self):
        expectation = torch.tensor([[0.1, 0.0, 0.5], [0.0, 0.2, 1.0], [0.0, 0.0, 0.1]],
                                   requires_grad=True)
        target = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.5, 0.0]])   # third: out of window
        loss = fine_l2_std_loss(expectation, target)
        inv = np.array([2.0, 1.0])
        weight = inv / inv.mean()
        expected = np.mean(weight * np.array([0.01, 0.04]))
        assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
        loss.backward()
        assert float(expectation.grad[:, 2].abs().sum()) == 0.0   # std gets no gradient
        assert float(expectation.grad[2].abs().sum()) == 0.0

    def test_degenerate(self):
        zero = coarse_focal_loss(torch.full((1, 2, 2), 0.5), torch.zeros(1, 2, 2))
        assert float(zero) == 0.0
        far = fine_l2_std_loss(torch.zeros(2, 3), torch.full((2, 2), 3.0))
        assert float(far) == 0.0
        with pytest.raises(ValueError):
            coarse_focal_loss(torch.zeros(1, 2, 2), torch.zeros(1, 2, 3))
        with pytest.raises(ValueError):
            fine_l2_std_loss(torch.zeros(2, 2), torch.zeros(2, 2))
        loss, logs = loftr_loss(torch.full((1, 2, 2), 0.5), torch.eye(2)[None], None, None)
        assert set(logs) == {'loss_c'} and float(loss) > 0


TINY = {'resnetfpn': {'initial_dim': 16, 'block_dims': [16, 24, 32]},
        'coarse': {'d_model': 32, 'nhead': 2, 'layer_names': ['self', 'cross']},
        'fine': {'d_model': 16, 'nhead': 2}}


def tiny_model():
    """Return a seeded tiny LoFTR (the loftr_lite layout with small widths)."""
    from relperception.matching.loftr.model import LoFTR

    torch.manual_seed(0)
    return LoFTR(TINY, preset='loftr_lite')


class TestMatcherTraining:
    def test_rescale_batch_keeps_correspondences(self):
        from relperception.training.matcher_train import rescale_batch

        ds = HomographyPairDataset([textured_image(120, 160, seed=3)], size=(96, 128),
                                   length=2, photometric=None)
        batch = {k: torch.stack([ds[i][k] for i in range(2)]) for k in ds[0]}
        half = rescale_batch(batch, 0.5)
        assert half['image0'].shape == (2, 1, 48, 64) and half['mask1'].shape == (2, 48, 64)
        # A point and its warp, both scaled, must satisfy the new homography.
        p = np.array([[40.0, 30.0]])
        w, _ = warp_points_np(batch['H_1_0'][0].numpy(), p)
        w_half, _ = warp_points_np(half['H_1_0'][0].numpy(), (p + 0.5) * 0.5 - 0.5)
        np.testing.assert_allclose(w_half, (w + 0.5) * 0.5 - 0.5, atol=1e-3)
        assert rescale_batch(batch, 1.0) is batch
        # 0.7 and 0.6 of 96x128 are no multiples of 8 (a run stopped there): rounded to them
        odd = rescale_batch(batch, 0.7)
        assert odd['image0'].shape == (2, 1, 64, 88) and odd['mask0'].shape == (2, 64, 88)
        fx, fy = 88 / 128, 64 / 96
        w_odd, _ = warp_points_np(odd['H_1_0'][0].numpy(), (p + 0.5) * [fx, fy] - 0.5)
        np.testing.assert_allclose(w_odd, (w + 0.5) * [fx, fy] - 0.5, atol=1e-3)
        assert rescale_batch(batch, 0.6)['image0'].shape[-2:] == (56, 80)
        assert rescale_batch(batch, 0.05)['image0'].shape[-2:] == (16, 16)
        with pytest.raises(ValueError, match='must be > 0'):
            rescale_batch(batch, 0.0)

    def test_steps_reduce_loss(self):
        from relperception.training.matcher_train import make_loss_fn

        model = tiny_model()
        ds = HomographyPairDataset([textured_image(96, 128, seed=s) for s in range(2)],
                                   size=(64, 64), length=2, seed=1)
        batch = {k: torch.stack([ds[i][k] for i in range(2)]) for k in ds[0]}
        loss_fn = make_loss_fn(max_fine_matches=32)
        # lr 1e-2 oscillates on some CPUs (the 16-step average then depends on the machine)
        optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for _ in range(24):
            loss, logs = loss_fn(model, batch)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(float(loss.detach()))
            assert logs['gt_matches'] > 10 and 'loss_f' in logs
        assert np.isfinite(losses).all()
        # the loss is noisy from step to step: compare averages
        assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:3])

    def test_train_resume_and_evaluate(self, tmp_path):
        from relperception.models.weights import load_state_dict_file
        from relperception.training.matcher_train import evaluate_homography, train_matcher

        images = [textured_image(96, 128, seed=s) for s in range(2)]
        # Steps 0-1 are both warm-up, so their learning rates do not depend on the total.
        common = {'config_name': 'loftr_lite', 'data_paths': images, 'batch_size': 2,
                  'lr': 2e-3, 'seed': 3, 'image_size': (64, 64), 'val_data': None,
                  'warmup_steps': 2, 'checkpoint_every': 1, 'scales': (1.0,),
                  'model_conf': TINY, 'progress': False, 'max_fine_matches': 16}
        first = train_matcher(output=tmp_path / 'a', steps=1, **common)
        assert first['step'] == 1 and (tmp_path / 'a' / 'last.pt').is_file()
        resumed = train_matcher(output=tmp_path / 'a', steps=2, resume=True, **common)
        straight = train_matcher(output=tmp_path / 'b', steps=2, **common)
        assert resumed['step'] == 2 and straight['step'] == 2
        w_resumed = load_state_dict_file(resumed['weights'])
        w_straight = load_state_dict_file(straight['weights'])
        assert w_resumed.keys() == w_straight.keys()
        for key in w_straight:
            torch.testing.assert_close(w_resumed[key], w_straight[key], rtol=1e-4, atol=1e-5)
        model = tiny_model()
        pairs = [HomographyPairDataset(images, size=(64, 64), length=2)[i] for i in range(2)]
        metrics = evaluate_homography(model, pairs)
        assert metrics['pairs'] == 2.0 and 0.0 <= metrics['precision_3px'] <= 1.0
        assert model.training   # mode restored

    def test_weight_average_is_written(self, tmp_path):
        """ema_decay: the written weights are the checkpoint's average, not the last step's."""
        from relperception.models.weights import load_state_dict_file
        from relperception.training.matcher_train import train_matcher

        images = [textured_image(96, 128, seed=s) for s in range(2)]
        result = train_matcher(config_name='loftr_lite', data_paths=images, output=tmp_path,
                               steps=3, batch_size=2, lr=2e-3, seed=3, image_size=(64, 64),
                               val_data=None, warmup_steps=1, scales=(1.0,), model_conf=TINY,
                               progress=False, max_fine_matches=16, ema_decay=0.5)
        assert result['config']['ema_decay'] == 0.5
        ckpt = torch.load(tmp_path / 'last.pt', weights_only=True)
        written = load_state_dict_file(result['weights'])
        moved = [k for k in written
                 if not torch.equal(written[k], ckpt['model'][k].to(written[k].dtype))]
        assert moved
        for key in moved:
            torch.testing.assert_close(written[key],
                                       ckpt['ema']['module.' + key].to(written[key].dtype))


class TestTrainMatcherCli:
    def test_end_to_end(self, tmp_path):
        from relperception.cli.main import main

        data = tmp_path / 'images'
        data.mkdir()
        for seed in range(2):
            cv2.imwrite(str(data / f'{seed}.png'), textured_image(96, 128, seed))
        out = tmp_path / 'run'
        rc = main(['train', 'matcher', '--config', 'loftr_lite', '--data', str(data),
                   '--val-data', str(data / '1.png'), '--image-size', '64x64', '--steps', '1',
                   '--batch-size', '1', '--num-threads', '1', '--no-progress', '-o', str(out)])
        assert rc == 0
        assert (out / 'model.safetensors').is_file() and (out / 'last.pt').is_file()
        with pytest.raises(SystemExit):  # argparse: bad --image-size
            main(['train', 'matcher', '--config', 'loftr_lite', '--data', str(data),
                  '--image-size', '64', '--steps', '1', '-o', str(out)])

    @pytest.mark.parametrize('extra, words', [
        (['--scene-fraction', '0.9'], '--scene-fraction applies with --scene-pairs'),
        (['--wide-fraction', '0.9'], '--wide-fraction applies with --scene-pairs'),
        (['--unmatched-gamma', '2'], '--unmatched-gamma applies with --unmatched-weight, '
                                     '--scene-pairs or --negative-fraction'),
        (['--unmatched-top-fraction', '0.5'], '--unmatched-top-fraction applies with'),
        (['--real-negative-fraction', '0.5'], '--real-negative-fraction applies with '
                                              '--scene-pairs or --negative-fraction'),
        (['--val-scenes', 'synth:5:2'], '--val-scenes applies with --scene-pairs or '
                                        '--negative-fraction'),
    ])
    def test_options_the_pairs_ignore_are_refused(self, tmp_path, caplog, extra, words):
        """Without scene or negative pairs these options were silently ignored."""
        from relperception.cli.main import main

        caplog.clear()
        assert main(['train', 'matcher', '--config', 'loftr_lite', '--data', str(tmp_path),
                     '--steps', '1', '-o', str(tmp_path / 'run'), *extra]) == 1
        errors = [r.getMessage() for r in caplog.records if r.levelname == 'ERROR']
        assert len(errors) == 1 and errors[0].startswith(words), errors
        assert not (tmp_path / 'run').exists()

    def test_bad_zoom_is_refused_before_training(self, tmp_path, caplog):
        from relperception.cli.main import main

        for zoom in ('inf', 'nan', '100'):   # inf was an internal OverflowError
            caplog.clear()
            assert main(['train', 'matcher', '--config', 'loftr_lite', '--data', str(tmp_path),
                         '--steps', '1', '-o', str(tmp_path / 'run'), '--max-zoom', zoom]) == 1
            assert f'--max-zoom must be in [1, 8], got {float(zoom):g}' in caplog.text
        assert not (tmp_path / 'run').exists()
