# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the fixed-shape LoFTR network and ``LoFTRMatcher`` (random weights, small images).

Correctness of the computation against kornia is in ``test_loftr_kornia_parity.py``; here the
structure: fixed output shapes, the mask semantics recomputed from the confidence matrix, the
training hooks agreeing with the forward pass, degenerate inputs, ONNX export at one size and
inference at another, and the matcher's compaction and coordinate mapping.
"""

import cv2
import numpy as np
import pytest
from relperception.core_types import Matches
from relperception.matching import build_matcher
from relperception.matching.loftr import LoFTR, LoFTROnnxWrapper, ONNX_INPUT_NAMES, \
    ONNX_OUTPUT_NAMES
from relperception.matching.loftr.fine_matching import crop_windows
from relperception.matching.loftr.matcher import LoFTRMatcher, to_original
import torch


def textured(height, width, seed=0):
    """Return a (H, W) float32 texture in [0, 1] (blurred noise at two scales)."""
    rng = np.random.default_rng(seed)
    coarse = cv2.resize(rng.random((height // 8, width // 8)).astype(np.float32), (width, height),
                        interpolation=cv2.INTER_CUBIC)
    fine = cv2.GaussianBlur(rng.random((height, width)).astype(np.float32), (0, 0), 1.0)
    img = coarse + 0.5 * fine
    return (img - img.min()) / (img.max() - img.min())


def homography_pair(height, width, seed=0):
    """Return (image0, image1, H) float32 images in [0, 1] related by homography H (0 -> 1)."""
    img0 = textured(height, width, seed)
    hom = np.array([[1.02, 0.03, 5.0], [-0.02, 0.99, 3.0], [1e-5, 2e-5, 1.0]])
    img1 = cv2.warpPerspective(img0, hom, (width, height), borderMode=cv2.BORDER_REFLECT)
    return img0, img1, hom


def as_tensor(*images):
    """Stack (H, W) arrays into a (B, 1, H, W) float32 tensor."""
    return torch.from_numpy(np.stack(images)[:, None].astype(np.float32))


def onnx_and_eager(session, model, height, width, seed):
    """Run an onnxruntime ``session`` and the eager ``model`` on one homography pair.

    Returns:
        (onnxruntime outputs by name, eager outputs) for the pair of ``homography_pair``.
    """
    img0, img1, _ = homography_pair(height, width, seed=seed)
    got = dict(zip(ONNX_OUTPUT_NAMES, session.run(
        None, {'image0': as_tensor(img0).numpy(), 'image1': as_tensor(img1).numpy()})))
    with torch.no_grad():
        ref = model(as_tensor(img0), as_tensor(img1))
    return got, ref


def lite(seed=0, **conf):
    """Return a seeded random ``loftr_lite`` model in eval mode."""
    torch.manual_seed(seed)
    return LoFTR(conf, preset='loftr_lite').eval()


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


@pytest.fixture(scope='module')
def lite_model():
    """Return a seeded random loftr_lite model shared by the tests of this module."""
    return lite()


class TestLoFTRModel:
    """The network: shapes, mask semantics, hooks, options, export."""

    def test_smoke_fixed_shapes_two_sizes(self, lite_model):
        """Outputs have one row per coarse cell of image 0 at two input sizes."""
        for height, width in ((64, 96), (96, 128)):
            img0, img1, _ = homography_pair(height, width)
            with torch.no_grad():
                out = lite_model(as_tensor(img0, img1), as_tensor(img1, img0))
            cells = (height // 8) * (width // 8)
            assert out['keypoints0'].shape == (2, cells, 2)
            assert out['keypoints1'].shape == (2, cells, 2)
            assert out['confidence'].shape == (2, cells)
            assert out['mask'].shape == (2, cells) and out['mask'].dtype == torch.bool
            assert out['match_index'].shape == (2, cells)
            assert out['expec_f'].shape == (2, cells, 3)
            assert out['keypoints0'].dtype == out['keypoints1'].dtype == torch.float32
            for value in out.values():
                assert torch.isfinite(value.float()).all()
            # keypoints0: centres of the coarse cells, row-major
            ys, xs = np.mgrid[0:height // 8, 0:width // 8]
            grid = torch.from_numpy(np.stack([xs, ys], -1).reshape(-1, 2) * 8.0).float()
            assert torch.equal(out['keypoints0'][0], grid)

    def test_mask_semantics(self):
        """The mask equals threshold & mutual nearest neighbour & border, recomputed."""
        model = lite(seed=3)
        model.threshold = 0.0
        img0, img1, _ = homography_pair(96, 128, seed=1)
        x0, x1 = as_tensor(img0), as_tensor(img0)  # identical images: many mutual matches
        x1[..., :, 4:] = x0[..., :, :-4].clone()
        with torch.no_grad():
            out = model(x0, x1)
            feats = model.extract_features(x0, x1)
            conf = model.coarse_confidence(feats['feat_c0'], feats['feat_c1'])[0]
        score, best = conf.max(1)
        assert torch.equal(best, out['match_index'][0])
        assert torch.allclose(score, out['confidence'][0])
        hc, wc = feats['hw0_c']
        rows, cols = torch.arange(hc * wc) // wc, torch.arange(hc * wc) % wc
        inside = (rows >= 2) & (rows < hc - 2) & (cols >= 2) & (cols < wc - 2)
        mutual = conf.max(0).indices[best] == torch.arange(hc * wc)
        expected = mutual & inside & inside[best] & (score > 0)
        assert torch.equal(out['mask'][0], expected)
        assert expected.sum() > 10
        # refined keypoints stay within window // 2 fine cells (4 px) of the matched cell
        cell1 = torch.stack([best % wc, best // wc], -1).float() * 8
        assert (out['keypoints1'][0] - cell1).abs().max() <= 4.0 + 1e-4
        # a threshold of 1 keeps nothing
        model.threshold = 1.0
        with torch.no_grad():
            assert not model(x0, x1)['mask'].any()

    def test_training_hooks_agree_with_forward(self):
        """extract_features / fine_refine reproduce the forward pass."""
        lite_model = lite()
        lite_model.threshold = 0.0  # random features: keep every mutual nearest neighbour
        img0, img1, _ = homography_pair(64, 96, seed=2)
        x0, x1 = as_tensor(img0, img1), as_tensor(img1, img0)
        with torch.no_grad():
            out = lite_model(x0, x1)
            feats = lite_model.extract_features(x0, x1)
            assert feats['feat_c0'].shape == (2, 96, 128)
            assert feats['feat_f0'].shape == (2, 64, 32, 48)
            assert feats['hw0_c'] == (8, 12) and feats['hw1_f'] == (32, 48)
            # eager mode refines the masked cells (the others keep the coarse position)
            b_ids, i_ids = out['mask'].nonzero(as_tuple=True)
            assert len(i_ids) >= 4 and set(b_ids.tolist()) == {0, 1}
            j_ids = out['match_index'][b_ids, i_ids]
            expec = lite_model.fine_refine(feats, b_ids, i_ids, j_ids)
        assert expec.shape == (len(i_ids), 3)
        torch.testing.assert_close(expec, out['expec_f'][b_ids, i_ids], atol=1e-5, rtol=1e-4)
        assert (expec[:, :2].abs() <= 1.0).all() and (expec[:, 2] >= 0).all()
        # K = the larger masked count of the two pairs: every masked cell, a few others
        refined = out['expec_f'].abs().sum(-1) > 0
        assert (refined | ~out['mask']).all()
        assert (refined.sum(1) <= out['mask'].sum(1).max()).all()
        assert refined.sum() < refined.numel()

    def test_training_hooks_gradients(self):
        """Gradients flow through the coarse confidence and fine expectation."""
        model = lite(seed=1).train()
        img0, img1, _ = homography_pair(64, 64)
        feats = model.extract_features(as_tensor(img0), as_tensor(img1))
        conf = model.coarse_confidence(feats['feat_c0'], feats['feat_c1'])
        expec = model.fine_refine(feats, torch.tensor([0, 0]), torch.tensor([9, 20]),
                                  torch.tensor([9, 27]))
        (conf[0, 9, 9].log() + expec[:, :2].sum()).backward()
        grad = model.loftr_fine.layers[0].q_proj.weight.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0

    def test_degenerate_flat_images(self, lite_model):
        """Flat images give no matches and no NaN."""
        for value in (0.0, 0.5, 1.0):
            flat = torch.full((1, 1, 64, 96), value)
            with torch.no_grad():
                out = lite_model(flat, flat)
            assert not out['mask'].any()
            for key, tensor in out.items():
                assert torch.isfinite(tensor.float()).all(), key

    @pytest.mark.parametrize('conf', [
        {'coarse': {'attention': 'full'}, 'fine': {'attention': 'full'}},
        {'match_coarse': {'match_type': 'sinkhorn'}},
    ])
    def test_options(self, conf):
        """Full attention and Sinkhorn matching run with fixed shapes."""
        model = lite(**conf)
        img0, img1, _ = homography_pair(64, 64)
        with torch.no_grad():
            out = model(as_tensor(img0), as_tensor(img1))
        assert out['keypoints1'].shape == (1, 64, 2)
        assert torch.isfinite(out['keypoints1']).all()
        assert ((out['confidence'] >= 0) & (out['confidence'] <= 1 + 1e-6)).all()
        if 'match_coarse' in conf:
            assert 'coarse_matching.bin_score' in model.state_dict()

    def test_attention_weights(self, lite_model):
        """Coarse attention weights are distributions over the attended cells."""
        img0, img1, _ = homography_pair(64, 96)
        x0, x1 = as_tensor(img0), as_tensor(img1)
        with torch.no_grad():
            for layer in range(len(lite_model.loftr_coarse.layer_names)):
                weights = lite_model.coarse_attention(x0, x1, layer, 40, side=layer % 2)
                assert weights.shape == (4, 96)
                assert (weights >= 0).all()
                torch.testing.assert_close(weights.sum(-1), torch.ones(4))
            many = lite_model.coarse_attention(x0, x1, 1, [3, 5])
        assert many.shape == (2, 4, 96)

    def test_input_checks(self, lite_model):
        """Bad inputs and configurations raise ValueError."""
        with pytest.raises(ValueError, match='multiples of 8'):
            lite_model(torch.rand(1, 1, 60, 64), torch.rand(1, 1, 60, 64))
        with pytest.raises(ValueError, match=r'\(B, 1, H, W\)'):
            lite_model(torch.rand(1, 3, 64, 64), torch.rand(1, 3, 64, 64))
        with pytest.raises(ValueError, match='unknown LoFTR config key'):
            LoFTR({'coarse': {'dmodel': 3}}, preset='loftr_lite')
        with pytest.raises(ValueError, match='unknown LoFTR preset'):
            LoFTR(preset='nope')

    def test_fine_head_windows_equal_full_map(self):
        """Fine windows computed on patches equal the crop of the full fine map (borders too)."""
        model = lite(seed=6)
        x = torch.rand(2, 1, 64, 96)
        ys, xs = torch.meshgrid(torch.arange(8), torch.arange(12), indexing='ij')
        xy = torch.stack([xs.flatten(), ys.flatten()], -1)[None].expand(2, -1, -1)  # all cells
        with torch.no_grad():
            _, fine_input = model.backbone.forward_coarse(x)
            full = crop_windows(model.backbone.fine_head(fine_input), xy, 5, 4)
            windows = model.backbone.fine_head_windows(fine_input, xy, 5, 4)
        assert windows.shape == full.shape == (2, 96, 25, 64)
        torch.testing.assert_close(windows, full, rtol=1e-5, atol=1e-5 * full.abs().max().item())
        corner = windows[0, 0].reshape(5, 5, -1)  # cell (0, 0): 2 rows / columns outside
        assert not corner[:2].any() and not corner[:, :2].any() and corner[2:, 2:].any()

    def test_onnx_windowed_fine_head(self, tmp_path):
        """A graph exported with few refined cells computes the fine head on windows only."""
        ort = pytest.importorskip('onnxruntime')
        from relperception.runtime.onnx_export import export_onnx
        import onnx
        model = lite(seed=4, fine_topk=16)  # 16 * 7 * 7 < 32 * 48 fine pixels at 64 x 96
        model.threshold = 0.0
        path = export_onnx(LoFTROnnxWrapper(model), (torch.rand(1, 1, 64, 96),) * 2,
                           tmp_path / 'lite16.onnx', ONNX_INPUT_NAMES, ONNX_OUTPUT_NAMES,
                           dynamic_axes={n: {2: 'height', 3: 'width'} for n in ONNX_INPUT_NAMES})
        convs = [n for n in onnx.load(str(path)).graph.node if n.op_type == 'Conv']
        assert any(attr.name == 'pads' and list(attr.ints) == [0, 0, 0, 0]
                   for n in convs for attr in n.attribute)  # the 'valid' window convolutions
        session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
        for (height, width), seed in (((64, 96), 7), ((96, 128), 8)):
            got, ref = onnx_and_eager(session, model, height, width, seed)
            matched = ref['mask'].numpy()
            np.testing.assert_array_equal(got['mask'], matched)
            assert matched.sum() == 16
            np.testing.assert_allclose(got['keypoints1'][matched],
                                       ref['keypoints1'].numpy()[matched], atol=1e-3)

    def test_onnx_dynamic_size(self, tmp_path):
        """An export at 64x96 runs in onnxruntime at 96x128 with equal outputs.

        ``fine_topk`` 128 lies between the cell counts of both sizes (96 and 192): the export
        pads the ranking, the run at the larger size truncates it, both with one constant-K
        ``TopK`` node.
        """
        ort = pytest.importorskip('onnxruntime')
        from relperception.runtime.onnx_export import export_onnx, find_ops
        import onnx
        from onnx import numpy_helper
        model = lite(seed=4, fine_topk=128)
        model.threshold = 0.0
        dynamic = {name: {2: 'height', 3: 'width'} for name in ONNX_INPUT_NAMES}
        dynamic.update({name: {1: 'cells'} for name in ONNX_OUTPUT_NAMES})
        path = export_onnx(LoFTROnnxWrapper(model), (torch.rand(1, 1, 64, 96),) * 2,
                           tmp_path / 'lite.onnx', ONNX_INPUT_NAMES, ONNX_OUTPUT_NAMES,
                           dynamic_axes=dynamic)
        graph = onnx.load(str(path))
        assert not find_ops(graph, ['NonZero'])
        topk = [node for node in graph.graph.node if node.op_type == 'TopK']
        assert len(topk) == 1
        constants = {init.name: numpy_helper.to_array(init) for init in graph.graph.initializer}
        constants.update({node.output[0]: numpy_helper.to_array(node.attribute[0].t)
                          for node in graph.graph.node if node.op_type == 'Constant'})
        assert constants[topk[0].input[1]].tolist() == [128]  # K is a constant
        session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
        for (height, width), seed in (((96, 128), 5), ((64, 96), 6)):
            got, ref = onnx_and_eager(session, model, height, width, seed)
            cells = (height // 8) * (width // 8)
            assert got['keypoints0'].shape == (1, cells, 2)
            np.testing.assert_array_equal(got['mask'], ref['mask'].numpy())
            # eager mode refines masked cells only (the graph K = fine_topk cells)
            matched = ref['mask'].numpy()
            assert matched.sum() > 10
            np.testing.assert_allclose(got['keypoints1'][matched],
                                       ref['keypoints1'].numpy()[matched], atol=1e-2)
            np.testing.assert_allclose(got['confidence'], ref['confidence'].numpy(),
                                       atol=1e-6, rtol=1e-3)
            assert got['mask'].sum() <= 128

    def test_backbone_fast_path(self):
        """The eval-mode folded channels-last backbone equals the plain conv + BN path."""
        model = lite(seed=5)
        generator = torch.Generator().manual_seed(0)
        for module in model.backbone.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                count = module.num_features
                module.running_mean.copy_(torch.randn(count, generator=generator))
                module.running_var.copy_(torch.rand(count, generator=generator) + 0.5)
                module.weight.data.copy_(torch.randn(count, generator=generator))
                module.bias.data.copy_(torch.randn(count, generator=generator))
        image = as_tensor(*homography_pair(64, 96)[:2])
        with torch.no_grad():
            fast = model.backbone(image)
            for module in model.backbone.modules():  # plain path, BatchNorm still in eval
                if not isinstance(module, torch.nn.BatchNorm2d):
                    module.training = True
            plain = model.backbone(image)
        assert fast[1].is_contiguous(memory_format=torch.channels_last)
        for got, ref in zip(fast, plain):
            assert got.shape == ref.shape
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())

    def test_fine_topk(self):
        """Only the fine_topk best masked cells are refined; they equal the full refinement."""
        model = lite(seed=3, fine_topk=0)
        model.threshold = 0.0
        img0, _, _ = homography_pair(96, 128, seed=1)
        x0 = as_tensor(img0)
        x1 = x0.clone()
        x1[..., :, 4:] = x0[..., :, :-4].clone()
        with torch.no_grad():
            full = model(x0, x1)
            count = int(full['mask'].sum())
            assert count > 20
            for k in (count // 2, count, 10 * count):
                model.fine_topk = k
                part = model(x0, x1)
                for key in ('keypoints0', 'confidence', 'match_index'):
                    assert torch.equal(part[key], full[key]), key
                kept = part['mask'][0]
                assert int(kept.sum()) == min(k, count)
                assert not (kept & ~full['mask'][0]).any()
                # the kept ones are the most confident masked cells
                lowest_kept = part['confidence'][0][kept].min()
                dropped = full['mask'][0] & ~kept
                assert (full['confidence'][0][dropped] <= lowest_kept).all()
                torch.testing.assert_close(part['keypoints1'][0][kept],
                                           full['keypoints1'][0][kept], atol=1e-4, rtol=0)
                # eager mode refines exactly the kept (masked) cells
                refined = part['expec_f'][0].abs().sum(-1) > 0
                assert torch.equal(refined, kept)
        with pytest.raises(ValueError):
            LoFTR({'fine_topk': 'many'}, preset='loftr_lite')

    def test_compute_dtype(self):
        """bfloat16 eager inference keeps float32 outputs; unknown dtypes are refused."""
        model = lite(seed=3, compute_dtype='bfloat16')
        assert model.conf['compute_dtype'] == 'bfloat16'
        img0, img1, _ = homography_pair(64, 96, seed=2)
        with torch.no_grad():
            out = model(as_tensor(img0), as_tensor(img1))
        assert out['keypoints1'].dtype == out['confidence'].dtype == torch.float32
        assert torch.isfinite(out['keypoints1']).all()
        with pytest.raises(ValueError, match='compute_dtype'):
            LoFTR({'compute_dtype': 'float16'}, preset='loftr_lite')


class TestLoFTRMatcher:
    """The Matcher protocol wrapper."""

    CONF = {'input_width': 128, 'input_height': 96, 'threshold': 0.0}

    def images(self):
        """Return a uint8 textured image pair of 150x200 pixels."""
        img0, img1, hom = homography_pair(150, 200, seed=7)
        return np.round(img0 * 255).astype(np.uint8), np.round(img1 * 255).astype(np.uint8)

    def test_matches_valid_in_original_pixels(self):
        """Matches are compacted, thresholded and in original pixels."""
        model = lite(seed=3)
        img0, _ = self.images()
        shifted = np.roll(img0, 6, axis=1)
        matcher = LoFTRMatcher(self.CONF, model=model)
        matches = matcher.match(img0, shifted)
        assert isinstance(matches, Matches) and len(matches) > 0
        assert matches.keypoints0.dtype == np.float32 and matches.confidence.dtype == np.float32
        for kp in (matches.keypoints0, matches.keypoints1):
            assert (kp >= -0.5).all() and (kp[:, 0] <= 199.5).all() and (kp[:, 1] <= 149.5).all()
        assert ((matches.confidence > 0) & (matches.confidence <= 1)).all()
        # keypoints0 are coarse-cell centres of the 96x128 input mapped back to 150x200
        cells = np.stack(np.meshgrid(np.arange(16) * 8.0, np.arange(12) * 8.0), -1).reshape(-1, 2)
        expected = to_original(cells, (150, 200), (96, 128))
        assert np.isin(matches.keypoints0[:, 0], expected[:, 0]).all()
        # a higher threshold keeps a subset
        strict = LoFTRMatcher(dict(self.CONF, threshold=float(np.median(matches.confidence))),
                              model=model).match(img0, shifted)
        assert 0 < len(strict) < len(matches)
        assert len(LoFTRMatcher(dict(self.CONF, threshold=1.0), model=model)
                   .match(img0, shifted)) == 0
        colour = cv2.cvtColor(img0, cv2.COLOR_GRAY2BGR)
        again = matcher.match_images(colour, shifted)
        np.testing.assert_array_equal(again.keypoints0, matches.keypoints0)

    def test_to_original_follows_cv2_resize(self):
        """Coordinates map back with the pixel-centre convention of cv2.resize."""
        ys, xs = np.mgrid[0:150, 0:200]
        image = np.exp(-((xs - 101.5) ** 2 + (ys - 61.5) ** 2) / 32.0).astype(np.float32)
        small = cv2.resize(image, (128, 96), interpolation=cv2.INTER_AREA)
        ys, xs = np.mgrid[0:96, 0:128]
        centroid = np.array([[(xs * small).sum(), (ys * small).sum()]]) / small.sum()
        np.testing.assert_allclose(to_original(centroid, (150, 200), (96, 128)),
                                   [[101.5, 61.5]], atol=0.05)

    def test_weights_file_matches_given_model(self, tmp_path):
        """Loading a safetensors file gives the same matches as the model."""
        from relperception.models.weights import save_weights
        model = lite(seed=3)
        path = save_weights(model, tmp_path / 'lite.safetensors')
        img0, _ = self.images()
        shifted = np.roll(img0, 6, axis=1)
        direct = LoFTRMatcher(self.CONF, model=model).match(img0, shifted)
        loaded = LoFTRMatcher(dict(self.CONF, weights=str(path))).match(img0, shifted)
        np.testing.assert_array_equal(direct.keypoints0, loaded.keypoints0)
        np.testing.assert_allclose(direct.keypoints1, loaded.keypoints1, atol=1e-5)

    def test_onnxruntime_backend(self, tmp_path):
        """Backend onnxruntime gives the matches of backend torch."""
        pytest.importorskip('onnxruntime')
        from relperception.runtime.onnx_export import export_onnx
        model = lite(seed=3)
        model.threshold = 0.0
        dynamic = {name: {2: 'height', 3: 'width'} for name in ONNX_INPUT_NAMES}
        path = export_onnx(LoFTROnnxWrapper(model), (torch.rand(1, 1, 64, 64),) * 2,
                           tmp_path / 'm.onnx', ONNX_INPUT_NAMES, ONNX_OUTPUT_NAMES,
                           dynamic_axes=dynamic)
        img0, _ = self.images()
        shifted = np.roll(img0, 6, axis=1)
        direct = LoFTRMatcher(self.CONF, model=model).match(img0, shifted)
        onnx_matches = LoFTRMatcher(dict(self.CONF, backend='onnxruntime',
                                         onnx_path=str(path))).match(img0, shifted)
        np.testing.assert_array_equal(direct.keypoints0, onnx_matches.keypoints0)
        np.testing.assert_allclose(direct.keypoints1, onnx_matches.keypoints1, atol=1e-2)

    def test_configuration_errors(self):
        """Bad parameters raise ValueError."""
        with pytest.raises(ValueError, match='unknown loftr parameters'):
            LoFTRMatcher({'treshold': 0.3}, model=lite())
        with pytest.raises(ValueError, match='multiples of 8'):
            LoFTRMatcher({'input_width': 100}, model=lite())
        with pytest.raises(ValueError, match='backend'):
            LoFTRMatcher({'backend': 'tflite'})
        with pytest.raises(ValueError, match='uint8'):
            LoFTRMatcher(self.CONF, model=lite()).match(
                np.zeros((20, 20), np.float32), np.zeros((20, 20), np.uint8))

    def test_missing_shipped_weights_is_clear(self, tmp_path):
        """Missing shipped weights raise FileNotFoundError saying what to do."""
        from relperception.models import weights
        try:
            weights.shipped_weights('loftr')
            pytest.skip('weights for preset loftr are shipped')
        except FileNotFoundError:
            pass
        with pytest.raises(FileNotFoundError, match="preset 'loftr'.*train matcher"):
            build_matcher('loftr', {'preset': 'loftr'})


class TestLoFTRMaxMatches:
    """``loftr.max_matches`` caps the matches per pair (the fine-level top-K)."""

    def test_cap_with_shipped_weights(self):
        img0, _ = TestLoFTRMatcher().images()
        shifted = np.roll(img0, 6, axis=1)
        conf = dict(TestLoFTRMatcher.CONF, threshold=0.2)
        full = LoFTRMatcher(conf).match(img0, shifted)
        capped = LoFTRMatcher(dict(conf, max_matches=16)).match(img0, shifted)
        assert len(full) > 16 and len(capped) == 16
        # the cap keeps the most confident matches, refined as without the cap
        order = np.argsort(-full.confidence)[:16]
        np.testing.assert_allclose(np.sort(capped.confidence), np.sort(full.confidence[order]),
                                   rtol=1e-5)
        with pytest.raises(ValueError, match='unknown loftr parameters'):
            LoFTRMatcher(dict(conf, max_match=3))
