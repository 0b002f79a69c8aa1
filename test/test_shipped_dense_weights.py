# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The shipped dense weights (conv_small, vit_small, fast_seg, vit_hybrid) reach their minimums.

Depth is scored on a freshly rendered synthetic recording whose seed was not used in training
(training used seeds 0-15, validation 1000-1001); segmentation on the CamVid validation frames
when /work/shared/data is present (skipped otherwise). The synthetic classes (floor, wall, ...)
have no correspondence with CamVid's, so only depth is checked on synthetic data. The minimums
are below the values measured when the weights were trained (see the model cards
``relperception/weights/<name>.md``) by a safety margin.
"""

import json

from conftest import shared_dataset
import numpy as np
import pytest
from relperception.models.dense import build_dense_model
from relperception.models.presets import load_model_config
from relperception.models.weights import (read_manifest, read_metadata, read_trained_heads,
                                          shipped_weights)
from relperception.training.dense_data import (
    evaluate_depth, evaluate_segmentation, SegmentationFolderDataset, synthetic_frames)
from relperception.training.logit_adjustment import logit_offsets

HELD_OUT_SEED = 4242

#: name -> minimum delta1 / maximum AbsRel on the held-out synthetic frames, minimum CamVid mIoU.
MINIMUMS = {
    'conv_small': {'delta1': 0.7, 'abs_rel': 0.18, 'miou': 0.52},
    'vit_small': {'delta1': 0.75, 'abs_rel': 0.2, 'miou': 0.28},
    'fast_seg': {'delta1': 0.8, 'abs_rel': 0.15, 'miou': 0.63},
    'vit_hybrid': {'delta1': 0.8, 'abs_rel': 0.15, 'miou': 0.63},
}
#: Shipped weights whose class-weight bias was removed (``train seg-adjust``) and the tau.
ADJUSTED = {'conv_small': 0.5, 'fast_seg': 0.75, 'vit_hybrid': 1.0}


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


@pytest.fixture(scope='module')
def held_out():
    """Return eight 320x240 frames of a synthetic room never used in training."""
    return synthetic_frames([HELD_OUT_SEED], frames_per_seed=8, width=320, height=240)


def _shipped_model(name):
    if name not in read_manifest():
        pytest.skip(f'no shipped weights {name!r} in the manifest')
    conf = load_model_config(name)
    return build_dense_model(conf, weights='shipped'), conf


@pytest.mark.parametrize('name', sorted(MINIMUMS))
class TestShippedDenseWeights:
    def test_depth_on_held_out_synthetic(self, name, held_out):
        model, conf = _shipped_model(name)
        # no metadata (the first shipped files): every head counts as trained
        assert read_trained_heads(shipped_weights(name)) in (None, ('depth', 'segmentation'))
        metrics = evaluate_depth(model, *held_out, conf)
        assert metrics['delta1'] >= MINIMUMS[name]['delta1'], metrics
        assert metrics['abs_rel'] <= MINIMUMS[name]['abs_rel'], metrics

    def test_segmentation_on_camvid_val(self, name):
        model, conf = _shipped_model(name)
        data = SegmentationFolderDataset(shared_dataset('camvid_segnet_val_40'),
                                         model.num_classes)
        metrics = evaluate_segmentation(model, data.images, data.labels, conf)
        assert metrics['miou'] >= MINIMUMS[name]['miou'], metrics
        assert np.isfinite(metrics['pixel_accuracy'])

    def test_logit_adjustment_recorded(self, name):
        """The adjusted files say so (tau, offsets); the others were trained before records."""
        _shipped_model(name)
        recorded = read_metadata(shipped_weights(name)).get('logit_adjustment')
        if name not in ADJUSTED:
            assert recorded is None
            return
        adjustment = json.loads(recorded)
        assert adjustment['tau'] == ADJUSTED[name]
        np.testing.assert_allclose(adjustment['offsets'],
                                   logit_offsets(adjustment['class_weights'],
                                                 adjustment['tau']), atol=1e-6)
