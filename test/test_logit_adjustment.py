# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Post-hoc logit adjustment: offsets, folding into the classifier bias, scoring."""

import numpy as np
import pytest
from relperception.models.dense import build_dense_model
from relperception.models.presets import load_model_config
from relperception.training import dense_data
from relperception.training.logit_adjustment import (fold_logit_offsets, logit_offsets,
                                                     score_logit_offsets)
import torch

pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


@pytest.fixture(scope='module')
def model_and_conf():
    """Return a randomly initialised fast_seg model (eval mode) and its config."""
    torch.manual_seed(0)
    conf = load_model_config('fast_seg')
    model = build_dense_model(conf).eval()
    return model, conf


def _images_and_labels(count=2, h=40, w=56, classes=11):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(count)]
    labels = [rng.integers(0, classes, (h, w)).astype(np.uint8) for _ in range(count)]
    labels[0][:5] = 255                      # unscored pixels
    return images, labels


class TestLogitOffsets:
    def test_values(self):
        weights = [0.25, 1.0, 4.0, 0.0]
        np.testing.assert_allclose(logit_offsets(weights, 1.0),
                                   [np.log(4.0), 0.0, -np.log(4.0), 0.0], rtol=1e-6)
        np.testing.assert_allclose(logit_offsets(weights, 0.5),
                                   [0.5 * np.log(4.0), 0.0, -0.5 * np.log(4.0), 0.0],
                                   rtol=1e-6)
        assert not logit_offsets(weights, 0.0).any()
        assert logit_offsets(weights, 1.0).dtype == np.float32

    @pytest.mark.parametrize('weights,tau', [([1.0, -1.0], 1.0), ([1.0, np.nan], 1.0),
                                             ([], 1.0), ([0.0, 0.0], 1.0),
                                             ([[1.0, 2.0]], 1.0), ([1.0, 2.0], -0.1),
                                             ([1.0, 2.0], 11.0)])
    def test_bad_input(self, weights, tau):
        with pytest.raises(ValueError):
            logit_offsets(weights, tau)


class TestFold:
    def test_logits_move_by_the_offsets_depth_does_not(self, model_and_conf):
        model, conf = model_and_conf
        adjusted = build_dense_model(conf).eval()
        adjusted.load_state_dict(model.state_dict())
        offsets = np.linspace(-2.0, 2.0, model.num_classes).astype(np.float32)
        fold_logit_offsets(adjusted, offsets)
        image = torch.randn(1, 3, 48, 64)
        with torch.no_grad():
            before, after = model(image), adjusted(image)
        moved = (after['logits'] - before['logits']).permute(0, 2, 3, 1).reshape(-1, 11)
        torch.testing.assert_close(moved, torch.from_numpy(offsets).expand_as(moved),
                                   atol=1e-5, rtol=0)
        assert torch.equal(after['depth'], before['depth'])

    def test_refused(self, model_and_conf):
        model, conf = model_and_conf
        with pytest.raises(ValueError, match='11'):
            fold_logit_offsets(model, np.zeros(5))
        with pytest.raises(ValueError):
            fold_logit_offsets(model, [np.inf] + [0.0] * 10)
        depth_only = build_dense_model(load_model_config('depth_anything_v2_vits'))
        with pytest.raises(ValueError, match='segmentation head'):
            fold_logit_offsets(depth_only, np.zeros(11))


class TestScore:
    def test_zero_offsets_match_evaluate_segmentation(self, model_and_conf):
        model, conf = model_and_conf
        images, labels = _images_and_labels()
        reference = dense_data.evaluate_segmentation(model, images, labels, conf)
        scores = score_logit_offsets(model, images, labels, conf, {0.0: np.zeros(11)})
        assert scores[0.0] == pytest.approx(reference, nan_ok=True)

    def test_a_large_offset_decides_every_pixel(self, model_and_conf):
        model, conf = model_and_conf
        images, labels = _images_and_labels()
        push = np.zeros(11, np.float32)
        push[3] = 1e4
        scores = score_logit_offsets(model, images, labels, conf, {'none': np.zeros(11),
                                                                   'class 3': push})
        scored = np.concatenate([lb[lb != 255] for lb in labels])
        assert scores['class 3']['pixel_accuracy'] == pytest.approx(np.mean(scored == 3))
        assert scores['class 3']['iou/Road'] == pytest.approx(np.mean(scored == 3))
        assert scores['none']['pixel_accuracy'] != scores['class 3']['pixel_accuracy']

    def test_refused(self, model_and_conf):
        model, conf = model_and_conf
        images, labels = _images_and_labels()
        with pytest.raises(ValueError, match='11 values'):
            score_logit_offsets(model, images, labels, conf, {1.0: np.zeros(4)})
        with pytest.raises(ValueError, match='at least one'):
            score_logit_offsets(model, images, labels, conf, {})
        with pytest.raises(ValueError, match='labels'):
            score_logit_offsets(model, images, labels[:1], conf, {0.0: np.zeros(11)})
