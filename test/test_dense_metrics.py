# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the depth and segmentation metrics and the dense evaluation figures."""

import math

import cv2
import numpy as np
import pytest
from relperception.evaluation.dense_plots import plot_confusion_matrix, sample_strip
from relperception.evaluation.depth import (align_inverse_depth, DEPTH_METRIC_KEYS,
                                            depth_metrics, DepthMetricsAccumulator,
                                            valid_depth_mask)
from relperception.evaluation.segmentation import ConfusionMatrix
from relperception.imaging.colormap import CAMVID_PALETTE


def _reference_depth_metrics(pred, gt):
    """Independent loop implementation of the Eigen metrics over 1-D valid arrays."""
    n = len(gt)
    abs_rel = sum(abs(p - g) / g for p, g in zip(pred, gt)) / n
    sq_rel = sum((p - g) ** 2 / g for p, g in zip(pred, gt)) / n
    rmse = math.sqrt(sum((p - g) ** 2 for p, g in zip(pred, gt)) / n)
    rmse_log = math.sqrt(sum((math.log(p) - math.log(g)) ** 2 for p, g in zip(pred, gt)) / n)
    deltas = [sum(max(p / g, g / p) < 1.25 ** k for p, g in zip(pred, gt)) / n
              for k in (1, 2, 3)]
    return dict(zip(DEPTH_METRIC_KEYS, [abs_rel, sq_rel, rmse, rmse_log] + deltas))


class TestDepthMetrics:
    def test_smoke_perfect(self):
        gt = np.full((4, 5), 2.0, np.float32)
        m = depth_metrics(gt.copy(), gt)
        assert m['abs_rel'] == 0 and m['rmse'] == 0 and m['delta1'] == 1.0
        assert m['num_valid'] == 20

    def test_hand_computed(self):
        gt = np.array([[1.0, 2.0], [4.0, 8.0]])
        pred = np.array([[2.0, 2.0], [3.0, 8.0]])
        m = depth_metrics(pred, gt)
        # |d-g|/g: 1, 0, 0.25, 0 -> 0.3125; (d-g)^2/g: 1, 0, 0.25, 0 -> 0.3125
        assert m['abs_rel'] == pytest.approx(0.3125)
        assert m['sq_rel'] == pytest.approx(0.3125)
        assert m['rmse'] == pytest.approx(math.sqrt(2.0 / 4))
        assert m['rmse_log'] == pytest.approx(
            math.sqrt((math.log(2) ** 2 + math.log(4 / 3) ** 2) / 4))
        # ratios 2, 1, 4/3, 1: delta1 counts 2 of 4, delta2 (1.5625) 3 of 4, delta3 3 of 4
        assert (m['delta1'], m['delta2'], m['delta3']) == (0.5, 0.75, 0.75)

    def test_reference_random(self):
        rng = np.random.default_rng(1)
        gt = rng.uniform(0.5, 20, (12, 9))
        pred = gt * rng.uniform(0.6, 1.6, gt.shape)
        gt[0, :3] = np.nan      # missing ground truth
        gt[1, 0] = 0.0          # Kinect zero
        pred[2, 2] = -1.0       # invalid prediction
        gt[3, 3] = 90.0         # beyond max_depth
        m = depth_metrics(pred, gt, max_depth=80.0)
        ok = np.isfinite(gt) & (gt > 1e-3) & (gt < 80) & (pred > 0)
        ref = _reference_depth_metrics(pred[ok].tolist(), gt[ok].tolist())
        for key in DEPTH_METRIC_KEYS:
            assert m[key] == pytest.approx(ref[key], rel=1e-12), key
        assert m['num_valid'] == ok.sum() == 12 * 9 - 6

    def test_valid_mask_and_clipping(self):
        gt = np.array([[1.0, 2.0, 3.0]])
        pred = np.array([[100.0, 2.0, 3.0]])
        m = depth_metrics(pred, gt, valid=np.array([[True, True, False]]), max_depth=10.0)
        # the prediction 100 is clipped to max_depth 10: |10 - 1| / 1 = 9 over 2 pixels
        assert m['abs_rel'] == pytest.approx(9.0 / 2)
        assert m['num_valid'] == 2

    def test_median_scale(self):
        rng = np.random.default_rng(2)
        gt = rng.uniform(1, 10, (6, 6))
        m = depth_metrics(gt * 0.2, gt, median_scale=True)
        assert m['abs_rel'] == pytest.approx(0.0, abs=1e-12)
        assert m['scale'] == pytest.approx(5.0)
        assert depth_metrics(gt * 0.2, gt)['abs_rel'] == pytest.approx(0.8)

    def test_degenerate_empty_mask(self):
        gt = np.zeros((3, 3))     # zero depth everywhere: nothing valid
        m = depth_metrics(np.ones((3, 3)), gt)
        assert m['num_valid'] == 0
        assert all(math.isnan(m[k]) for k in DEPTH_METRIC_KEYS)
        m = depth_metrics(np.ones((3, 3)), np.ones((3, 3)), valid=np.zeros((3, 3), bool))
        assert m['num_valid'] == 0 and math.isnan(m['rmse'])

    def test_invalid_inputs(self):
        with pytest.raises(ValueError, match='shape'):
            depth_metrics(np.ones((2, 3)), np.ones((3, 2)))
        with pytest.raises(ValueError, match='2-D'):
            depth_metrics(np.ones(4), np.ones(4))
        with pytest.raises(ValueError, match='valid'):
            depth_metrics(np.ones((2, 2)), np.ones((2, 2)), valid=np.ones((2, 2)))
        with pytest.raises(ValueError, match='min_depth'):
            depth_metrics(np.ones((2, 2)), np.ones((2, 2)), min_depth=5.0, max_depth=1.0)
        with pytest.raises(ValueError):
            valid_depth_mask(np.ones((2, 2)), np.ones((2, 2)), max_depth=float('inf'))


class TestAlignInverseDepth:
    def test_recovers_scale_and_shift(self):
        rng = np.random.default_rng(3)
        gt = rng.uniform(1.0, 30.0, (10, 12))
        pred_inv = (1.0 / gt - 0.01) / 0.05       # true inverse depth = 0.05 * pred + 0.01
        depth, scale, shift = align_inverse_depth(pred_inv, gt)
        assert scale == pytest.approx(0.05, rel=1e-9)
        assert shift == pytest.approx(0.01, rel=1e-7)
        np.testing.assert_allclose(depth, gt, rtol=1e-5)
        assert depth.dtype == np.float32
        m = depth_metrics(depth, gt)
        assert m['abs_rel'] < 1e-5 and m['delta1'] == 1.0

    def test_least_squares_reference(self):
        rng = np.random.default_rng(4)
        gt = rng.uniform(1.0, 10.0, (8, 8))
        pred_inv = 3.0 / gt + rng.normal(0, 0.05, gt.shape)
        _, scale, shift = align_inverse_depth(pred_inv, gt)
        x, y = pred_inv.ravel(), 1.0 / gt.ravel()
        # closed-form simple linear regression as the independent reference
        s_ref = np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2)
        t_ref = y.mean() - s_ref * x.mean()
        assert (scale, shift) == (pytest.approx(s_ref), pytest.approx(t_ref))

    def test_disparity_cap_and_invalid(self):
        gt = np.array([[1.0, 2.0, 4.0, np.nan]])
        pred_inv = np.array([[4.0, 2.0, 1.0, np.nan]])
        depth, _, _ = align_inverse_depth(pred_inv, gt, max_depth=10.0)
        assert np.isnan(depth[0, 3])
        far = align_inverse_depth(np.array([[4.0, 2.0, 1.0, -50.0]]), gt, max_depth=10.0)[0]
        assert far[0, 3] == pytest.approx(10.0)  # negative disparity capped at 1 / max_depth

    def test_degenerate(self):
        with pytest.raises(ValueError, match='cannot fit'):
            align_inverse_depth(np.ones((3, 3)), np.full((3, 3), 2.0))
        with pytest.raises(ValueError, match='cannot fit'):
            align_inverse_depth(np.arange(9.0).reshape(3, 3), np.zeros((3, 3)))


class TestDepthMetricsAccumulator:
    def test_per_image_average(self):
        acc = DepthMetricsAccumulator()
        gt_a, gt_b = np.full((2, 2), 1.0), np.full((4, 4), 2.0)
        acc.update(gt_a * 1.1, gt_a)     # abs_rel 0.1 over 4 pixels
        acc.update(gt_b * 1.5, gt_b)     # abs_rel 0.5 over 16 pixels
        acc.update(np.ones((2, 2)), np.full((2, 2), np.nan))   # no valid pixel: skipped
        out = acc.compute()
        assert out['abs_rel'] == pytest.approx((0.1 + 0.5) / 2)
        assert out['rmse'] == pytest.approx((0.1 + 1.0) / 2)
        assert (out['num_images'], out['num_skipped'], out['num_pixels']) == (2, 1, 20)

    def test_pixel_pooled(self):
        acc = DepthMetricsAccumulator(average='pixel')
        gt_a, gt_b = np.full((2, 2), 1.0), np.full((4, 4), 2.0)
        acc.update(gt_a * 1.1, gt_a)
        acc.update(gt_b * 1.5, gt_b)
        out = acc.compute()
        assert out['abs_rel'] == pytest.approx((4 * 0.1 + 16 * 0.5) / 20)
        assert out['rmse'] == pytest.approx(math.sqrt((4 * 0.01 + 16 * 1.0) / 20))

    def test_empty(self):
        out = DepthMetricsAccumulator().compute()
        assert out['num_images'] == 0 and math.isnan(out['abs_rel'])
        with pytest.raises(ValueError):
            DepthMetricsAccumulator(average='median')


class TestConfusionMatrix:
    def test_hand_computed(self):
        gt = np.array([[0, 0, 1, 1], [2, 2, 255, 1]])
        pred = np.array([[0, 1, 1, 1], [2, 0, 2, 1]])
        cm = ConfusionMatrix(4, ignore_index=255)
        cm.update(pred, gt)
        expected = np.array([[1, 1, 0, 0], [0, 3, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
        np.testing.assert_array_equal(cm.matrix, expected)
        iou = cm.per_class_iou()
        # class 0: TP 1, FP 1, FN 1 -> 1/3; class 1: 3 / (3 + 1) ; class 2: 1 / 2; class 3 absent
        np.testing.assert_allclose(iou[:3], [1 / 3, 3 / 4, 1 / 2])
        assert np.isnan(iou[3])
        assert cm.miou() == pytest.approx((1 / 3 + 3 / 4 + 1 / 2) / 3)  # class 3 excluded
        assert cm.pixel_accuracy() == pytest.approx(5 / 7)
        assert cm.mean_class_accuracy() == pytest.approx((1 / 2 + 1 + 1 / 2) / 3)

    def test_reference_random(self):
        rng = np.random.default_rng(5)
        n = 6
        cm = ConfusionMatrix(n, ignore_index=255)
        ref = np.zeros((n, n), int)
        for _ in range(3):
            gt = rng.integers(0, n, (7, 9))
            gt[rng.random(gt.shape) < 0.1] = 255
            pred = rng.integers(0, n, gt.shape)
            cm.update(pred.astype(np.uint8), gt.astype(np.uint8))
            for g, p in zip(gt.ravel(), pred.ravel()):
                if g != 255:
                    ref[g, p] += 1
        np.testing.assert_array_equal(cm.matrix, ref)
        ious = [ref[c, c] / (ref[c].sum() + ref[:, c].sum() - ref[c, c]) for c in range(n)]
        assert cm.miou() == pytest.approx(np.mean(ious))

    def test_predicted_but_absent_class_counts(self):
        cm = ConfusionMatrix(3)
        cm.update(np.array([0, 2]), np.array([0, 0]))
        iou = cm.per_class_iou()
        assert iou[2] == 0.0 and np.isnan(iou[1])
        assert cm.miou() == pytest.approx((0.5 + 0.0) / 2)

    @pytest.mark.parametrize('args, kwargs', [((10**7,), {}), ((0,), {}), ((2.5,), {}),
                                              ((3,), {'ignore_index': 2.7}),
                                              ((3,), {'class_names': 'abc'})])
    def test_bad_arguments(self, args, kwargs):
        with pytest.raises(ValueError):   # 10**7 classes asked numpy for 728 TiB
            ConfusionMatrix(*args, **kwargs)

    def test_degenerate_all_ignore(self):
        cm = ConfusionMatrix(3, ignore_index=255)
        cm.update(np.full((4, 4), 77), np.full((4, 4), 255))   # predictions there unchecked
        assert cm.total == 0
        assert math.isnan(cm.miou()) and math.isnan(cm.pixel_accuracy())
        summary = cm.summary()
        assert summary['num_classes_scored'] == 0

    def test_invalid(self):
        cm = ConfusionMatrix(3)
        with pytest.raises(ValueError, match='pred ids'):
            cm.update(np.array([3]), np.array([0]))
        with pytest.raises(ValueError, match='gt ids'):
            cm.update(np.array([0]), np.array([7]))
        with pytest.raises(ValueError, match='shape'):
            cm.update(np.zeros(3, int), np.zeros(4, int))
        with pytest.raises(ValueError, match='integer'):
            cm.update(np.zeros(3), np.zeros(3, int))
        with pytest.raises(ValueError):
            ConfusionMatrix(0)

    def test_merge_and_normalized(self):
        a, b = ConfusionMatrix(2), ConfusionMatrix(2)
        a.update(np.array([0, 1]), np.array([0, 0]))
        b.update(np.array([1]), np.array([1]))
        a.merge(b)
        np.testing.assert_array_equal(a.matrix, [[1, 1], [0, 1]])
        np.testing.assert_allclose(a.normalized('gt'), [[0.5, 0.5], [0, 1]])
        np.testing.assert_allclose(a.normalized('pred'), [[1, 0.5], [0, 0.5]])


class TestDensePlots:
    def test_confusion_matrix_png(self, tmp_path):
        cm = ConfusionMatrix(3, class_names=['a', 'b', 'c'])
        cm.update(np.array([0, 1, 2, 2]), np.array([0, 1, 1, 2]))
        path = plot_confusion_matrix(tmp_path / 'cm.png', cm)
        image = cv2.imread(str(path))
        assert image is not None and image.shape[0] > 100
        with pytest.raises(ValueError):
            plot_confusion_matrix(tmp_path / 'x.png', cm, normalize='rows')

    def test_label_strip(self, tmp_path):
        rgb = np.zeros((6, 8, 3), np.uint8)
        pred = np.full((6, 8), 3, np.uint8)
        gt = np.full((6, 8), 255, np.uint8)
        strip = sample_strip(rgb, pred, gt, path_png=tmp_path / 's.png')
        assert strip.shape == (6, 3 * 8 + 8, 3)
        np.testing.assert_array_equal(strip[0, 12], CAMVID_PALETTE[3])   # prediction panel
        np.testing.assert_array_equal(strip[0, 24], [0, 0, 0])           # ignore is black
        assert (tmp_path / 's.png').is_file()

    def test_depth_strip_shared_range(self):
        gt = np.tile(np.linspace(1, 5, 10, dtype=np.float32), (4, 1))
        gt[0, 0] = np.nan
        strip = sample_strip(np.zeros((4, 10), np.uint8), gt.copy(), gt, kind='depth')
        np.testing.assert_array_equal(strip[:, 14:24], strip[:, 28:38])  # same colours
        np.testing.assert_array_equal(strip[0, 28], [0, 0, 0])           # invalid black
        with pytest.raises(ValueError, match='same'):
            sample_strip(np.zeros((4, 10), np.uint8), gt[:, :5], gt, kind='depth')
