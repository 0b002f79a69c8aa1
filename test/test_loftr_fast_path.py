# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of LoFTR's CPU inference kernels (``relperception.matching.loftr.fast_path``).

Each kernel is compared with the plain torch operation it replaces, and the whole model's
eval-mode output with the fast paths switched off.
"""

import numpy as np
import pytest
from relperception.matching.loftr import fast_path as fp
from relperception.matching.loftr import LoFTR
from relperception.matching.loftr.coarse_matching import CoarseMatching
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


class TestPointwiseLinear:
    """``pointwise_linear`` equals ``F.linear``."""

    @pytest.mark.parametrize('shape', [(2, 300, 64), (37, 25, 32), (1, 1, 16), (5, 16)])
    def test_equals_linear(self, shape):
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(*shape, generator=generator)
        weight = torch.randn(24, shape[-1], generator=generator)
        bias = torch.randn(24, generator=generator)
        for b in (None, bias):
            got = fp.pointwise_linear(x, weight, b)
            assert got.shape == (*shape[:-1], 24)
            assert got.is_contiguous()
            torch.testing.assert_close(got, F.linear(x, weight, b), rtol=1e-5, atol=1e-4)

    def test_non_contiguous_input(self):
        x = torch.randn(40, 3, 16).transpose(0, 1)  # (3, 40, 16), not contiguous
        weight = torch.randn(8, 16)
        torch.testing.assert_close(fp.pointwise_linear(x, weight), F.linear(x, weight),
                                   rtol=1e-5, atol=1e-4)

    def test_apply_linear_follows_mode(self):
        layer = torch.nn.Linear(16, 8).eval()
        x = torch.randn(2, 10, 16)
        torch.testing.assert_close(fp.apply_linear(layer, x), layer(x), rtol=1e-5, atol=1e-5)
        layer.train()
        assert torch.equal(fp.apply_linear(layer, x), layer(x))


class TestChannelsLast:
    """``channels_last`` keeps values and makes convolutions write NHWC output."""

    @pytest.mark.parametrize('channels', [1, 3])
    def test_values_and_layout(self, channels):
        x = torch.rand(2, channels, 24, 40)
        y = fp.channels_last(x)
        assert torch.equal(x, y)
        weight = torch.randn(8, channels, 3, 3)
        out = F.conv2d(y, weight, padding=1)
        assert out.stride()[1] == 1  # channels-last
        torch.testing.assert_close(out, F.conv2d(x, weight, padding=1), rtol=1e-5, atol=1e-5)


class TestDualSoftmaxInference:
    """The eval-mode dual softmax equals the training-mode (plain) one."""

    def test_equals_plain(self):
        generator = torch.Generator().manual_seed(0)
        feat0 = torch.randn(2, 120, 32, generator=generator) * 3
        feat1 = torch.randn(2, 90, 32, generator=generator) * 3
        matching = CoarseMatching(temperature=0.1)
        fast = matching.eval().confidence(feat0, feat1)
        plain = matching.train().confidence(feat0, feat1)
        assert fast.shape == (2, 120, 90)
        torch.testing.assert_close(fast, plain, rtol=1e-4, atol=1e-7)
        assert torch.equal(fast.argmax(2), plain.argmax(2))


class TestModelFastPath:
    """The whole eval-mode model agrees with the plain path (fast kernels switched off)."""

    def test_same_matches(self, monkeypatch):
        torch.manual_seed(2)
        model = LoFTR(preset='loftr_lite').eval()
        model.threshold = 0.0
        rng = np.random.default_rng(0)
        image = torch.from_numpy(rng.random((1, 1, 96, 128), dtype=np.float32))
        shifted = torch.roll(image, shifts=(3, 5), dims=(2, 3))
        with torch.no_grad():
            fast = model(image, shifted)
            monkeypatch.setattr(fp, 'tracing_or_exporting', lambda: True)
            assert not fp.fast_path(model)
            plain = model(image, shifted)
        assert int(plain['mask'].sum()) > 20
        assert torch.equal(fast['mask'], plain['mask'])
        assert torch.equal(fast['match_index'], plain['match_index'])
        torch.testing.assert_close(fast['confidence'], plain['confidence'], rtol=1e-3, atol=1e-6)
        torch.testing.assert_close(fast['keypoints1'], plain['keypoints1'], rtol=0, atol=1e-3)
