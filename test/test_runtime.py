# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of relperception.runtime: backends, ONNX export checks and the backend factory.

The networks here are small stand-ins built in the test (a conv encoder-decoder and a ViT-like
attention model with interpolated position embeddings), so the runtime is tested on its own;
the package's real models are exported in test_export.py.
"""

import importlib.util

import numpy as np
import onnx
import pytest
from relperception.runtime import build_backend, InferenceBackend
from relperception.runtime.onnx_export import check_parity, export_onnx, find_ops, OPSET, \
    OutputsAsTuple, read_metadata
from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend
from relperception.runtime.torch_backend import TorchBackend
import torch
from torch import nn
import torch.nn.functional as F

HAS_TENSORRT = importlib.util.find_spec('tensorrt') is not None


class TinyConv(nn.Module):
    """Stride-4 encoder, bilinear decoder: dict with depth (B,1,H,W) and logits (B,3,H,W)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
        self.depth = nn.Conv2d(16, 1, 1)
        self.seg = nn.Conv2d(16, 3, 1)

    def forward(self, image):
        f = self.enc(image)
        size = image.shape[-2:]
        depth = F.interpolate(self.depth(f), size=size, mode='bilinear', align_corners=False)
        logits = F.interpolate(self.seg(f), size=size, mode='bilinear', align_corners=False)
        return {'depth': F.softplus(depth), 'logits': logits}


class TinyAttention(nn.Module):
    """DINOv2-style multi-head self-attention (qkv linear, reshape with -1, SDPA)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class TinyViT(nn.Module):
    """Patch-8 transformer with bicubic-interpolated position embeddings, any H, W % 8 == 0."""

    def __init__(self, dim=16):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 8, 8)
        self.pos = nn.Parameter(torch.randn(1, dim, 4, 4) * 0.1)
        self.norm = nn.LayerNorm(dim)
        self.attn = TinyAttention(dim, 2)
        self.head = nn.Conv2d(dim, 1, 1)

    def forward(self, image):
        f = self.patch(image)
        f = f + F.interpolate(self.pos, size=f.shape[-2:], mode='bicubic', align_corners=False)
        tokens = f.flatten(2).transpose(1, 2)
        tokens = tokens + self.attn(self.norm(tokens))
        f = tokens.transpose(1, 2).reshape(f.shape)
        depth = F.interpolate(self.head(f), size=image.shape[-2:], mode='bilinear')
        return {'depth': depth}


def _export(tmp_path, module, names, size=(64, 96), metadata=None):
    torch.manual_seed(0)
    wrapped = OutputsAsTuple(module.eval(), names)
    path = export_onnx(wrapped, (torch.rand(1, 3, *size),), tmp_path / 'model.onnx', ['image'],
                       names, dynamic_axes={'image': {2: 'height', 3: 'width'}},
                       metadata=metadata)
    return wrapped, path


def _image(height, width, seed):
    return np.random.default_rng(seed).standard_normal((1, 3, height, width)).astype(np.float32)


@pytest.fixture(scope='module')
def conv_model(tmp_path_factory):
    torch.manual_seed(0)
    module = TinyConv()
    meta = {'min_height': 32, 'max_height': 256, 'min_width': 32, 'max_width': 256,
            'size_multiple': 16, 'preset': 'tiny_conv'}
    return _export(tmp_path_factory.mktemp('conv'), module, ('depth', 'logits'),
                   metadata=meta)


class TestTorchBackend:
    def test_smoke_dict_outputs(self):
        torch.manual_seed(0)
        backend = TorchBackend(TinyConv(), ['image'], ['depth', 'logits'])
        out = backend.run({'image': _image(32, 48, 0)})
        assert isinstance(backend, InferenceBackend)
        assert out['depth'].shape == (1, 1, 32, 48) and out['logits'].shape == (1, 3, 32, 48)
        assert out['depth'].dtype == np.float32

    def test_tuple_outputs_and_count(self):
        module = OutputsAsTuple(TinyConv(), ['depth', 'logits'])
        backend = TorchBackend(module, ['image'], ['depth', 'logits'])
        assert set(backend.run({'image': _image(16, 16, 1)})) == {'depth', 'logits'}
        with pytest.raises(ValueError, match='returned 2 outputs'):
            TorchBackend(module, ['image'], ['depth']).run({'image': _image(16, 16, 1)})

    def test_wrong_names(self):
        backend = TorchBackend(TinyConv(), ['image'], ['depth', 'normals'])
        with pytest.raises(ValueError, match=r"missing \['image'\], unexpected \['rgb'\]"):
            backend.run({'rgb': _image(16, 16, 0)})
        with pytest.raises(ValueError, match='lack'):
            backend.run({'image': _image(16, 16, 0)})

    @pytest.mark.parametrize('dtype', [np.float64, np.float16, np.uint8])
    def test_inputs_of_another_dtype_are_refused(self, dtype):
        # as the exported backends refuse them (torch raised its own dtype RuntimeError)
        backend = TorchBackend(TinyConv(), ['image'], ['depth', 'logits'])
        with pytest.raises(ValueError, match="input 'image' must be a float32 array"):
            backend.run({'image': _image(16, 16, 0).astype(dtype)})


class TestOnnxRuntimeBackend:
    @pytest.mark.parametrize('size', [(96, 128), (128, 160)])
    def test_parity_conv_other_sizes(self, conv_model, size):
        module, path = conv_model
        backend = OnnxRuntimeBackend(path, num_threads=1)
        inputs = {'image': _image(*size, seed=size[0])}
        expected = TorchBackend(module, ['image'], ['depth', 'logits']).run(inputs)
        got = backend.run(inputs)
        assert got['depth'].shape == (1, 1, *size)
        for name in ('depth', 'logits'):
            np.testing.assert_allclose(got[name], expected[name], atol=1e-4, rtol=1e-4)

    def test_parity_vit_two_sizes(self, tmp_path):
        torch.manual_seed(0)
        module, path = _export(tmp_path, TinyViT(), ('depth',), size=(64, 96))
        diffs = check_parity(module, path, [{'image': _image(96, 128, 3)},
                                            {'image': _image(128, 160, 4)}], atol=1e-4)
        assert diffs['depth'] < 1e-4

    def test_metadata_and_names(self, conv_model):
        backend = OnnxRuntimeBackend(conv_model[1])
        assert backend.input_names == ('image',)
        assert backend.output_names == ('depth', 'logits')
        assert backend.metadata['preset'] == 'tiny_conv'
        assert backend.metadata['max_height'] == 256

    @pytest.mark.parametrize('inputs, message', [
        ({'img': _image(64, 64, 0)}, r"missing \['image'\], unexpected \['img'\]"),
        ({'image': _image(64, 64, 0), 'extra': _image(64, 64, 0)}, 'unexpected'),
        ({'image': _image(64, 64, 0)[0]}, 'must have 4 dimensions'),
        ({'image': _image(64, 64, 0).astype(np.float64)}, 'must be float32, got float64'),
        ({'image': np.zeros((1, 1, 64, 64), np.float32)}, 'dimension 1 must be 3'),
        ({'image': _image(512, 64, 0)}, r'height 512 is outside the exported bounds'),
        ({'image': _image(16, 64, 0)}, r'height 16 is outside'),
        ({'image': _image(64, 72, 0)}, 'must be a multiple of 16'),
        ({'image': torch.zeros(1, 3, 64, 64)}, 'must be a numpy array'),
    ])
    def test_clear_input_errors(self, conv_model, inputs, message):
        backend = OnnxRuntimeBackend(conv_model[1])
        with pytest.raises(ValueError, match=message):
            backend.run(inputs)

    def test_missing_file(self, tmp_path):
        with pytest.raises(FileNotFoundError, match='does not exist'):
            OnnxRuntimeBackend(tmp_path / 'absent.onnx')


class TestExportOnnx:
    def test_graph_checked_and_opset(self, conv_model):
        model = onnx.load(str(conv_model[1]))
        onnx.checker.check_model(model)
        assert OPSET == 17
        assert any(o.domain in ('', 'ai.onnx') and o.version == OPSET
                   for o in model.opset_import)
        assert not find_ops(model, ['NonZero'])
        dims = model.graph.input[0].type.tensor_type.shape.dim
        assert [d.dim_param or d.dim_value for d in dims] == [1, 3, 'height', 'width']
        assert read_metadata(conv_model[1])['size_multiple'] == 16

    def test_refuses_nonzero(self, tmp_path):
        class BooleanIndexing(nn.Module):
            def forward(self, x):
                return x[x > 0.5]

        with pytest.raises(ValueError, match=r"\['NonZero'\].*not TensorRT friendly"):
            export_onnx(BooleanIndexing(), (torch.rand(1, 4),), tmp_path / 'nz.onnx', ['x'],
                        ['y'])
        assert not (tmp_path / 'nz.onnx').exists()

    def test_input_count_checked(self, tmp_path):
        with pytest.raises(ValueError, match='1 example inputs for 2 input names'):
            export_onnx(TinyConv(), (torch.rand(1, 3, 8, 8),), tmp_path / 'm.onnx',
                        ['a', 'b'], ['depth'])

    def test_parity_atol_raises(self, conv_model):
        module, path = conv_model

        class Shifted(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = module

            def forward(self, image):
                depth, logits = self.inner(image)
                return depth + 0.01, logits

        with pytest.raises(ValueError, match='more than 0.001'):
            check_parity(Shifted(), path, [{'image': _image(64, 64, 0)}], atol=1e-3)


class TestBuildBackend:
    def test_torch_and_onnxruntime_agree(self, conv_model):
        module, path = conv_model
        names = {'input_names': ['image'], 'output_names': ['depth', 'logits']}
        a = build_backend('torch', module=module, device='cpu', **names)
        b = build_backend('onnxruntime', path=path, num_threads=1, **names)
        inputs = {'image': _image(48, 64, 9)}
        np.testing.assert_allclose(a.run(inputs)['logits'], b.run(inputs)['logits'],
                                   atol=1e-4)

    def test_degenerate(self, conv_model):
        with pytest.raises(ValueError, match='unknown inference backend'):
            build_backend('openvino', path=conv_model[1])
        with pytest.raises(ValueError, match='needs the torch module'):
            build_backend('torch', input_names=['image'], output_names=['depth'])
        with pytest.raises(ValueError, match='needs the path'):
            build_backend('onnxruntime', path='')
        with pytest.raises(ValueError, match=r"lacks the outputs \['normals'\]"):
            build_backend('onnxruntime', path=conv_model[1], output_names=['normals'])

    @pytest.mark.skipif(HAS_TENSORRT, reason='tensorrt is installed')
    def test_tensorrt_missing_is_clear(self, tmp_path):
        with pytest.raises(RuntimeError, match='tensorrt is not installed'):
            build_backend('tensorrt', path=tmp_path / 'model.engine')


class TestEngineMetadata:
    """TensorRT engines carry their preset and precision in ``<engine>.json``."""

    def test_round_trip_and_preset_check(self, tmp_path):
        from relperception.runtime.base import check_export_preset
        from relperception.runtime.engine_metadata import (engine_metadata_path,
                                                           read_engine_metadata,
                                                           write_engine_metadata)

        engine = tmp_path / 'conv_small.engine'
        engine.write_bytes(b'serialised engine')
        assert read_engine_metadata(engine) is None   # an engine built elsewhere
        written = write_engine_metadata(engine, {'preset': 'conv_small', 'precision': 'fp16',
                                                 'max_height': 480})
        assert written == engine_metadata_path(engine) == tmp_path / 'conv_small.engine.json'
        metadata = read_engine_metadata(engine)
        assert metadata == {'preset': 'conv_small', 'precision': 'fp16', 'max_height': 480}
        check_export_preset(metadata, 'conv_small', engine)
        with pytest.raises(ValueError, match="preset 'conv_small'"):
            check_export_preset(metadata, 'vit_small', engine)

    def test_refused_metadata(self, tmp_path):
        from relperception.runtime.engine_metadata import (engine_metadata_path,
                                                           read_engine_metadata,
                                                           write_engine_metadata)

        engine = tmp_path / 'm.engine'
        with pytest.raises(ValueError, match='precision'):
            write_engine_metadata(engine, {'preset': 'conv_small', 'precision': 'int4'})
        engine_metadata_path(engine).write_text('{not json')
        with pytest.raises(ValueError, match='not a JSON engine metadata'):
            read_engine_metadata(engine)
        engine_metadata_path(engine).write_text('{"preset": "conv_small"}')
        with pytest.raises(ValueError, match='precision'):
            read_engine_metadata(engine)
