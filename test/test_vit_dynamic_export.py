# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Dynamic-size export of the ViT backbone (DINOv2 position-embedding resampling).

``bicubic_resize_matrix`` is checked against ``F.interpolate(scale_factor=...)`` (the eager
resampling, i.e. DINOv2's) on random grids; the traced resampling against the eager one at
sizes the tracer never saw; and a tiny ViT dense model exported once to ONNX with dynamic
height/width against torch at two other sizes and at the stored square size (where DINOv2 uses
the stored embeddings unchanged).
"""

import numpy as np
import onnx
import pytest
from relperception.models.backbones import build_backbone
from relperception.models.backbones.vit import bicubic_resize_matrix
from relperception.models.dense import DenseModel
from relperception.runtime.onnx_export import export_onnx, OutputsAsTuple
from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend
import torch
import torch.nn.functional as F

TINY_VIT = {'name': 'vit', 'embed_dim': 32, 'num_heads': 2, 'depth': 4, 'patch_size': 16,
            'img_size': 64, 'out_indices': [0, 1, 2, 3]}
TINY_HEADS = {'depth': {'features': 16, 'head_features': 8},
              'segmentation': {'num_classes': 5, 'features': 8}}
EXPORT_SIZE = (64, 96)
RUN_SIZES = [(96, 128), (48, 80), (64, 64)]  # (64, 64): the stored 4x4 grid, square


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


def _relative(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _dinov2_resample(grid, h, w, offset=0.1):
    side = grid.shape[-1]
    return F.interpolate(grid, scale_factor=((h + offset) / side, (w + offset) / side),
                         mode='bicubic')


class TestBicubicResizeMatrix:
    """The separable matrix form of PyTorch's bicubic ``scale_factor`` resampling."""

    def test_smoke(self):
        """Shape and dtype."""
        matrix = bicubic_resize_matrix(5, 4, 5.1 / 4)
        assert matrix.shape == (5, 4) and matrix.dtype == torch.float32

    @pytest.mark.parametrize('side', [4, 16, 37])
    def test_reference_interpolate(self, side):
        """Wh @ grid @ Ww^T equals F.interpolate(scale_factor) (DINOv2's offset rule)."""
        generator = torch.Generator().manual_seed(side)
        grid = torch.randn(1, 8, side, side, generator=generator)
        worst = 0.0
        for h, w in [(1, 1), (2, 9), (3, 4), (20, 30), (side, side + 1), (side + 3, side - 1),
                     (50, 70), (80, 13), (200, 120)]:
            if min(h, w) < 1:
                continue
            expected = _dinov2_resample(grid, h, w)
            assert expected.shape[-2:] == (h, w)
            rows = bicubic_resize_matrix(h, side, (h + 0.1) / side)
            cols = bicubic_resize_matrix(w, side, (w + 0.1) / side)
            worst = max(worst, _relative(rows @ grid @ cols.T, expected))
        assert worst < 2e-6

    def test_plain_scale_factors(self):
        """Other up/down factors, no offset: same as interpolate."""
        grid = torch.randn(2, 3, 9, 7, generator=torch.Generator().manual_seed(1))
        for scale in [(0.5, 0.75), (2.0, 3.0), (1.3, 0.9)]:
            expected = F.interpolate(grid, scale_factor=scale, mode='bicubic')
            rows = bicubic_resize_matrix(expected.shape[-2], 9, scale[0])
            cols = bicubic_resize_matrix(expected.shape[-1], 7, scale[1])
            assert _relative(rows @ grid @ cols.T, expected) < 2e-6

    def test_rows_sum_to_one_and_identity(self):
        """Rows are partitions of unity; identity_if selects the identity pattern."""
        matrix = bicubic_resize_matrix(11, 6, 11.1 / 6)
        torch.testing.assert_close(matrix.sum(1), torch.ones(11), rtol=0, atol=1e-6)
        identity = bicubic_resize_matrix(6, 6, 6.1 / 6, identity_if=torch.tensor(True))
        assert torch.equal(identity, torch.eye(6))
        kept = bicubic_resize_matrix(6, 6, 6.1 / 6, identity_if=torch.tensor(False))
        assert not torch.equal(kept, torch.eye(6))  # the offset rule would blur slightly

    def test_degenerate(self):
        """Bad sizes and factors are refused; zero outputs give an empty matrix."""
        with pytest.raises(ValueError, match='in_size'):
            bicubic_resize_matrix(3, 0, 1.0)
        with pytest.raises(ValueError, match='scale_factor'):
            bicubic_resize_matrix(3, 4, 0.0)
        assert bicubic_resize_matrix(0, 4, 0.1).shape == (0, 4)


class _PosEncoding(torch.nn.Module):
    """Return the backbone's position embeddings for the size of the input."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, image):
        return self.net.interpolate_pos_encoding(image.shape[-2], image.shape[-1])


class TestTracedPosEncoding:
    """The traced resampling follows the input size and equals the eager one."""

    @pytest.mark.filterwarnings('ignore::DeprecationWarning')
    def test_traced_equals_eager_at_other_sizes(self):
        """Traced at 48x80, run at five other sizes (incl. the stored square one)."""
        torch.manual_seed(0)
        net = build_backbone(TINY_VIT).eval()
        with torch.no_grad():
            traced = torch.jit.trace(_PosEncoding(net), torch.zeros(1, 3, 48, 80),
                                     check_trace=False)
            for size in [(96, 128), (32, 176), (16, 16), (64, 64), (64, 80)]:
                got = traced(torch.zeros(1, 3, *size))
                expected = net.interpolate_pos_encoding(*size)
                assert got.shape == (1, 1 + size[0] * size[1] // 256, 32)
                assert _relative(got, expected) < 2e-6, size
                if size == (64, 64):  # stored square size: the stored embeddings, unchanged
                    assert torch.equal(got, net.pos_embed)


class TestDynamicOnnxExport:
    """A tiny ViT dense model exported once serves other sizes."""

    def test_onnx_parity_other_sizes(self, tmp_path):
        """Exported at 64x96 with symbolic H/W; onnxruntime equals torch at other sizes."""
        torch.manual_seed(0)
        model = DenseModel({'backbone': TINY_VIT, 'heads': TINY_HEADS}).eval()
        module = OutputsAsTuple(model, ['depth', 'logits'])
        path = export_onnx(module, (torch.rand(1, 3, *EXPORT_SIZE),), tmp_path / 'vit.onnx',
                           ['image'], ['depth', 'logits'],
                           dynamic_axes={'image': {2: 'height', 3: 'width'}})
        for output in onnx.load(str(path)).graph.output:  # symbolic H, W in every output
            dims = output.type.tensor_type.shape.dim
            assert all(d.dim_param and not d.dim_value for d in dims[-2:]), output.name
        backend = OnnxRuntimeBackend(path, num_threads=1)
        generator = torch.Generator().manual_seed(1)
        for size in RUN_SIZES:
            image = torch.randn(1, 3, *size, generator=generator)
            with torch.no_grad():
                expected = model(image)
            got = backend.run({'image': image.numpy()})
            for name in ('depth', 'logits'):
                want = expected[name].numpy()
                assert got[name].shape == want.shape, (name, size)
                error = np.abs(got[name] - want).max() / np.abs(want).max()
                assert error < 1e-4, (name, size, error)
