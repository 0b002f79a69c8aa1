# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Parity of ``relperception.matching.loftr.LoFTR`` with ``kornia.feature.LoFTR``.

Both models get the SAME seeded random weights (kornia's ``state_dict()`` loaded into ours)
and the same textured image pairs; the confidence matrices, the coarse matches and the refined
keypoints are compared. Kornia returns only the matches above its threshold; ours returns all
coarse cells with a mask, which is compacted here. Random weights give flat confidences, so the
threshold is 0 in both (mutual nearest neighbour and border tests still select).
"""

import copy

import cv2
import numpy as np
import pytest
from relperception.matching.loftr import LoFTR
import torch

kornia_feature = pytest.importorskip('kornia.feature')


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


def textured_pair(height, width, shift=None, seed=0):
    """Return (image0, image1) (1, 1, H, W) float32 tensors: a texture and its warp."""
    rng = np.random.default_rng(seed)
    img = cv2.resize(rng.random((height // 4, width // 4)).astype(np.float32), (width, height),
                     interpolation=cv2.INTER_CUBIC)
    img = (img - img.min()) / (img.max() - img.min())
    if shift is None:
        hom = np.array([[1.02, 0.03, 4.0], [-0.02, 0.99, 3.0], [1e-5, 2e-5, 1.0]])
        img1 = cv2.warpPerspective(img, hom, (width, height), borderMode=cv2.BORDER_REFLECT)
    else:
        img1 = np.ascontiguousarray(np.roll(img, shift, (0, 1)))
    return torch.from_numpy(img)[None, None], torch.from_numpy(img1)[None, None]


def kornia_model(config=None, seed=0):
    """Return a seeded random kornia LoFTR in eval mode with threshold 0."""
    torch.manual_seed(seed)
    cfg = copy.deepcopy(config or kornia_feature.loftr.loftr.default_cfg)
    cfg['match_coarse']['thr'] = 0.0
    return kornia_feature.LoFTR(pretrained=None, config=cfg).eval()


def ours_from(kornia, conf=None):
    """Return our 'loftr' preset with the kornia model's weights and threshold 0."""
    model = LoFTR(conf, preset='loftr').eval()
    model.load_weights(kornia.state_dict())
    model.threshold = 0.0
    return model


def run_both(kornia, ours, image0, image1):
    """Return kornia's output and confidence matrix, our compacted matches and raw output."""
    captured = {}
    hook = kornia.coarse_matching.register_forward_hook(
        lambda module, args, out: captured.update(conf=args[2]['conf_matrix']))
    with torch.no_grad():
        ref = kornia({'image0': image0, 'image1': image1})
        out = ours(image0, image1)
    hook.remove()
    mask = out['mask'][0]
    mine = {k: out[k][0][mask] for k in ('keypoints0', 'keypoints1', 'confidence')}
    return ref, captured['conf'], mine, out


def check_coarse(ref_conf, out):
    """Our per-cell best match and confidence are the row maxima of kornia's matrix."""
    score, best = ref_conf[0].max(1)
    # rtol: BatchNorm folding and the CPU's oneDNN kernels round differently, and differently
    # on different CPUs (the fifth session's note gives the figures)
    torch.testing.assert_close(out['confidence'][0], score, atol=1e-8, rtol=5e-4)
    agree = out['match_index'][0] == best
    # an index may only differ where the row maximum is (numerically) tied, within the
    # rounding difference above
    second = ref_conf[0].topk(2, dim=1).values
    assert (agree | (second[:, 0] - second[:, 1] < 5e-4 * second[:, 0])).all()
    assert agree.float().mean() > 0.99


def sort_rows(ref):
    """Kornia's matches sorted row-major by keypoint 0 (ours are in cell order)."""
    kp0 = ref['keypoints0'].double()
    order = torch.argsort(kp0[:, 1] * 1e5 + kp0[:, 0])
    return {k: ref[k][order] for k in ('keypoints0', 'keypoints1', 'confidence')}


class TestLoFTRKorniaParity:
    """Same weights, same images: the same matches."""

    @pytest.mark.parametrize('shift', [None, (0, 0)])
    def test_parity_random_weights(self, shift):
        """Coarse matches identical, fine keypoints within 0.05 px, confidences equal."""
        kornia = kornia_model()
        ours = ours_from(kornia)
        image0, image1 = textured_pair(160, 224, shift=shift)
        ref, ref_conf, mine, out = run_both(kornia, ours, image0, image1)
        check_coarse(ref_conf, out)
        ref = sort_rows(ref)
        assert len(ref['keypoints0']) >= 10, 'too few matches for a meaningful comparison'
        assert torch.equal(mine['keypoints0'], ref['keypoints0'].float())
        assert (mine['keypoints1'] - ref['keypoints1'].float()).abs().max() < 0.05
        torch.testing.assert_close(mine['confidence'], ref['confidence'], atol=1e-8, rtol=5e-4)
        # refining only fine_topk = (kornia's match count) cells still gives all its matches
        ours.fine_topk = len(ref['keypoints0'])
        assert ours.fine_topk < out['mask'].shape[1]  # the top-K path, not refine-all
        _, _, topk, _ = run_both(kornia, ours, image0, image1)
        assert torch.equal(topk['keypoints0'], ref['keypoints0'].float())
        assert (topk['keypoints1'] - ref['keypoints1'].float()).abs().max() < 0.05

    def test_parity_temp_bug_fix(self):
        """The corrected position encoding ('indoor_new' checkpoint) matches too."""
        cfg = copy.deepcopy(kornia_feature.loftr.loftr.default_cfg)
        cfg['coarse']['temp_bug_fix'] = True
        kornia = kornia_model(cfg, seed=1)
        ours = ours_from(kornia, {'coarse': {'temp_bug_fix': True}})
        image0, image1 = textured_pair(128, 160, shift=(0, 0))
        ref, ref_conf, mine, out = run_both(kornia, ours, image0, image1)
        check_coarse(ref_conf, out)
        ref = sort_rows(ref)
        assert len(ref['keypoints0']) >= 5
        assert torch.equal(mine['keypoints0'], ref['keypoints0'].float())
        assert (mine['keypoints1'] - ref['keypoints1'].float()).abs().max() < 0.05


class TestLoFTRKorniaWeights:
    """Loading kornia / official state dicts with strict key and shape checks."""

    def test_keys_and_shapes_identical(self):
        """Our parameter names and shapes are exactly kornia's."""
        kornia_state = kornia_model().state_dict()
        ours = LoFTR(preset='loftr').state_dict()
        assert set(ours) == set(kornia_state)
        assert all(ours[k].shape == kornia_state[k].shape for k in ours)

    def test_official_checkpoint_layout(self):
        """{'state_dict': {'matcher.<key>': ...}} (the official files) loads."""
        kornia_state = kornia_model(seed=2).state_dict()
        wrapped = {'state_dict': {'matcher.' + k: v for k, v in kornia_state.items()},
                   'epoch': 3}
        model = LoFTR(preset='loftr')
        model.load_weights(wrapped)
        for key, value in model.state_dict().items():
            assert torch.equal(value, kornia_state[key]), key

    def test_wrong_key_or_shape_is_clear(self):
        """A renamed key or a wrong shape raises ValueError naming it."""
        state = kornia_model().state_dict()
        renamed = dict(state)
        renamed['backbone.conv_first.weight'] = renamed.pop('backbone.conv1.weight')
        with pytest.raises(ValueError, match=r'missing keys.*backbone\.conv1\.weight'):
            LoFTR(preset='loftr').load_weights(renamed)
        with pytest.raises(ValueError, match=r'unexpected keys.*conv_first'):
            LoFTR(preset='loftr').load_weights(renamed)
        reshaped = dict(state)
        reshaped['loftr_fine.layers.0.q_proj.weight'] = torch.zeros(64, 128)
        with pytest.raises(ValueError, match=r'shape mismatches.*loftr_fine\.layers\.0\.q_proj'):
            LoFTR(preset='loftr').load_weights(reshaped)
        with pytest.raises(ValueError, match='shape mismatches'):
            LoFTR(preset='loftr_lite').load_weights(state)
