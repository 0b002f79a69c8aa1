# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of DenseModel, its heads, the presets and the preprocessing."""

import cv2
import numpy as np
import pytest
from relperception.models.dense import build_dense_model, DenseModel, load_backbone_weights
from relperception.models.heads import DPTHead, make_resize_layer, SegmentationHead
from relperception.models.preprocess import network_input_size, prepare_image, resize_output
from relperception.models.presets import (
    load_model_config, preset_for_backbone, PRESETS, with_input_size)
from relperception.models.weights import save_weights
import torch

TINY_RESNET = {'name': 'resnet18', 'width': 0.125}
TINY_VIT = {'name': 'vit', 'embed_dim': 32, 'num_heads': 2, 'depth': 4, 'patch_size': 16,
            'img_size': 64, 'out_indices': [0, 1, 2, 3]}
TINY_HEADS = {'depth': {'features': 16, 'head_features': 8},
              'segmentation': {'num_classes': 5, 'features': 8}}


def _model(backbone, **conf):
    torch.manual_seed(0)
    return DenseModel({'backbone': backbone, 'heads': TINY_HEADS, **conf}).eval()


class TestDenseModel:
    """Backbone + heads at the input resolution."""

    @pytest.mark.parametrize('backbone', [TINY_RESNET, TINY_VIT], ids=['resnet', 'vit'])
    @pytest.mark.parametrize('size', [(64, 96), (48, 80)])
    def test_shapes(self, backbone, size):
        """Depth (B,1,H,W) and logits (B,K,H,W) at the input size for both families."""
        model = _model(backbone)
        with torch.no_grad():
            out = model(torch.rand(2, 3, *size))
        assert set(out) == {'depth', 'logits'}
        assert out['depth'].shape == (2, 1, *size)
        assert out['logits'].shape == (2, 5, *size)
        assert out['depth'].dtype == torch.float32

    def test_metric_and_relative_ranges(self):
        """Metric depth lies in (0, max_depth); relative inverse depth is >= 0."""
        image = torch.rand(1, 3, 64, 64)
        metric = _model(TINY_RESNET, depth_mode='metric', max_depth=10.0)
        relative = _model(TINY_RESNET, depth_mode='relative')
        with torch.no_grad():
            d = metric(image)['depth']
            r = relative(image)['depth']
        assert float(d.min()) > 0 and float(d.max()) < 10.0
        assert float(r.min()) >= 0
        assert isinstance(metric.depth_head.scratch.output_conv2[-1], torch.nn.Sigmoid)

    def test_single_heads_and_clstoken(self):
        """A model with one head returns one output; the class-token readout works (ViT)."""
        depth_only = DenseModel({'backbone': TINY_VIT, 'heads': {
            'depth': {'features': 16, 'use_clstoken': True}, 'segmentation': None}}).eval()
        assert depth_only.segmentation_head is None
        assert 'readout_projects.0.0.weight' in depth_only.depth_head.state_dict()
        seg_only = DenseModel({'backbone': TINY_RESNET, 'heads': {
            'depth': None, 'segmentation': {'num_classes': 3, 'inputs': [2, 3]}}}).eval()
        with torch.no_grad():
            assert set(depth_only(torch.rand(1, 3, 32, 48))) == {'depth'}
            assert seg_only(torch.rand(1, 3, 32, 48))['logits'].shape == (1, 3, 32, 48)
        with pytest.raises(ValueError, match='class tokens'):
            DenseModel({'backbone': TINY_RESNET, 'heads': {
                'depth': {'use_clstoken': True}, 'segmentation': None}})
        with pytest.raises(ValueError, match='class tokens'):
            depth_only.depth_head(depth_only.backbone(torch.rand(1, 3, 32, 48)), (32, 48))

    def test_conv_dpt_has_no_resize_parameters(self):
        """With a multi-scale (ResNet) backbone the DPT resize layers are identities."""
        model = _model(TINY_RESNET)
        assert all(isinstance(m, torch.nn.Identity) for m in model.depth_head.resize_layers)
        assert model.depth_head.conf['out_channels'] == model.backbone.out_channels
        vit = _model(TINY_VIT)
        assert isinstance(vit.depth_head.resize_layers[0], torch.nn.ConvTranspose2d)
        assert isinstance(vit.depth_head.resize_layers[3], torch.nn.Conv2d)

    def test_save_load_round_trip(self, tmp_path):
        """Saved weights reproduce the outputs in a freshly built model."""
        model = _model(TINY_VIT)
        path = save_weights(model, tmp_path / 'm.safetensors', {'preset': 'tiny'})
        torch.manual_seed(1)
        fresh = build_dense_model({'backbone': TINY_VIT, 'heads': TINY_HEADS}, weights=path)
        image = torch.rand(1, 3, 48, 64)
        with torch.no_grad():
            a, b = model(image), fresh(image)
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)

    def test_backbone_only_weights(self, tmp_path):
        """Backbone files (torchvision-style with fc) load into model.backbone."""
        model = _model(TINY_RESNET)
        state = {k: torch.randn_like(v.float()).to(v.dtype)
                 for k, v in model.backbone.state_dict().items()}
        state['fc.weight'] = torch.zeros(1000, 64)
        state['fc.bias'] = torch.zeros(1000)
        torch.save(state, tmp_path / 'resnet.pth')
        load_backbone_weights(model, tmp_path / 'resnet.pth')
        assert torch.equal(model.backbone.conv1.weight, state['conv1.weight'])

    def test_wrong_weights_named(self, tmp_path):
        """Weights of another architecture fail with the keys named."""
        path = save_weights(_model(TINY_RESNET), tmp_path / 'r.safetensors')
        with pytest.raises(ValueError, match=r'missing keys: backbone\.cls_token'):
            build_dense_model({'backbone': TINY_VIT, 'heads': TINY_HEADS}, weights=path)

    def test_degenerate(self):
        """No head, bad depth_mode, bad input shapes and sizes raise ValueError."""
        with pytest.raises(ValueError, match='at least one head'):
            DenseModel({'heads': {'depth': None, 'segmentation': None}})
        with pytest.raises(ValueError, match='depth_mode'):
            DenseModel({'depth_mode': 'absolute'})
        model = _model(TINY_VIT)
        with pytest.raises(ValueError, match='multiple of 16'):
            model(torch.rand(1, 3, 40, 64))
        with pytest.raises(ValueError, match='B, 3, H, W'):
            model(torch.rand(3, 64, 64))
        with pytest.raises(ValueError, match='resize factor'):
            make_resize_layer(8, 3.5)
        with pytest.raises(ValueError, match='4 inputs'):
            DPTHead({'in_channels': [8, 8]})
        with pytest.raises(ValueError, match='inputs'):
            SegmentationHead({'in_channels': [8], 'inputs': [1], 'resize_factors': [1]})

    @pytest.mark.parametrize('max_depth', [float('nan'), -1.0, 0.0, float('inf')])
    def test_metric_depth_needs_a_positive_finite_range(self, max_depth):
        # NaN gave NaN depth, -1 negative depth, inf infinite depth
        with pytest.raises(ValueError, match='max_depth must be finite and > 0'):
            build_dense_model({'backbone': TINY_VIT, 'heads': TINY_HEADS,
                               'max_depth': max_depth})


class TestPresets:
    """Named configurations and YAML overrides."""

    @pytest.mark.parametrize('name', ['conv_small', 'vit_small'])
    def test_shipped_presets_small_and_real_time_sized(self, name):
        """Shipped presets build, stay a few MB and run at their input size."""
        conf = load_model_config(name)
        model = build_dense_model(conf).eval()
        params = sum(p.numel() for p in model.parameters())
        assert params * 2 < 8e6  # < 8 MB as float16
        assert conf['input']['height'] == 240 and conf['input']['width'] == 320
        assert conf['class_names'][3] == 'Road' and len(conf['class_names']) == 11
        assert conf['depth_mode'] == 'metric' and conf['weights'] == name
        with torch.no_grad():
            out = model(torch.rand(1, 3, 240, 320))
        assert out['logits'].shape == (1, 11, 240, 320)
        assert preset_for_backbone('conv') == 'fast_seg'
        assert preset_for_backbone('vit') == 'vit_hybrid'

    def test_every_preset_is_valid(self):
        """Every preset validates; architecture presets state input size and names."""
        for name in PRESETS:
            conf = load_model_config(name)
            assert conf['name'] == name
            assert conf['input']['height'] % conf['input']['multiple'] == 0
        assert load_model_config('depth_anything_v2_vits')['key_map'] == {
            'pretrained.': 'backbone.'}
        assert load_model_config('depth_anything_v2_metric_vkitti_vits')['model'][
            'max_depth'] == 80.0

    def test_yaml_override(self, tmp_path):
        """A YAML file is merged over its base preset."""
        path = tmp_path / 'road.yaml'
        path.write_text('base: resnet18\n'
                        'model: {heads: {segmentation: {num_classes: 2}}}\n'
                        'class_names: [road, other]\n'
                        'input: {height: 128, width: 160}\n')
        conf = load_model_config(path)
        assert conf['name'] == 'road' and conf['base'] == 'resnet18'
        assert conf['model']['backbone']['name'] == 'resnet18'
        assert conf['model']['heads']['segmentation'] == {'num_classes': 2, 'features': 64}
        assert conf['model']['heads']['depth']['features'] == 64  # kept from the base
        assert conf['input']['height'] == 128 and conf['input']['mean'][0] == 0.485
        path.write_text('base: conv_small\ninput: {height: 256}\n')
        assert load_model_config(path)['weights'] == 'conv_small'  # same architecture
        path.write_text('base: conv_small\nmodel: {max_depth: 20.0}\n')
        assert load_model_config(path)['weights'] == ''
        path.write_text('base: resnet18\nclass_names: [a, b]\n')
        with pytest.raises(ValueError, match='class_names'):
            load_model_config(path)
        path.write_text('base: nope\n')
        with pytest.raises(ValueError, match='base'):
            load_model_config(path)
        path.write_text('mdoel: {}\n')
        with pytest.raises(ValueError, match='unknown keys'):
            load_model_config(path)
        # misspelt nested keys and values of the wrong kind are refused, naming the key
        for text, words in (
                ('input: {interpolaton: linear, hieght: 480}', r"\['input.hieght', "
                                                               r"'input.interpolaton'\]"),
                ('model: {max_dept: 10}', 'model.max_dept'),
                ('input: {std: [.inf, 0.2, 0.2]}', 'input.std needs 3 finite'),
                ('input: {mean: abc}', 'input.mean needs 3 finite'),
                ('input: {height: 240.9}', 'input.height must be a whole number'),
                ('input: [1, 2]', 'input must be a mapping'),
                ('class_names: abcdefghijk', 'class_names must be a list of names'),
                ('base: [fast_seg]', 'is not a preset')):
            path.write_text(f'base: fast_seg\n{text}\n' if 'base' not in text else text)
            with pytest.raises(ValueError, match=words):
                load_model_config(path)
        path.write_text('base: fast_seg\nmodel: {backbone: {context: attention}}\n')
        assert load_model_config(path)['model']['backbone']['context'] == 'attention'
        with pytest.raises(ValueError, match='unknown model preset'):
            load_model_config('conv_large')
        with pytest.raises(FileNotFoundError):
            load_model_config(tmp_path / 'absent.yaml')

    def test_with_input_size(self):
        """Input size overrides are checked against the multiple."""
        conf = with_input_size(load_model_config('vit_small'), 320, 480)
        assert (conf['input']['height'], conf['input']['width']) == (320, 480)
        with pytest.raises(ValueError, match='multiple of 16'):
            with_input_size(conf, 250, 0)


class TestPreprocess:
    """prepare_image / resize_output."""

    def test_fixed_resize_and_normalisation(self):
        """Fixed presets resize to the preset size and normalise with ImageNet stats."""
        conf = load_model_config('conv_small')
        rgb = np.zeros((360, 480, 3), np.uint8)
        rgb[..., 0] = 255
        x = prepare_image(rgb, conf)
        assert x.shape == (1, 3, 240, 320) and x.dtype == torch.float32
        torch.testing.assert_close(x[0, :, 100, 100], torch.tensor(
            [(1 - 0.485) / 0.229, (0 - 0.456) / 0.224, (0 - 0.406) / 0.225]))

    def test_lower_bound_rule(self):
        """Depth Anything V2 sizes: both sides >= 518, multiples of 14, aspect kept."""
        conf = load_model_config('depth_anything_v2_vits')
        assert network_input_size((375, 1242), conf) == (518, 1722)
        assert network_input_size((480, 640), conf) == (518, 686)
        assert network_input_size((640, 480), conf) == (686, 518)
        assert network_input_size((518, 518), conf) == (518, 518)
        with pytest.raises(ValueError, match='crop it first'):   # 518 x 2,072,000 pixels
            network_input_size((1, 4000), conf)
        rgb = np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)
        x = prepare_image(rgb, conf)
        assert x.shape == (1, 3, 518, 686)
        # same as the reference order: /255 in float64, INTER_CUBIC, normalise
        ref = cv2.resize(rgb / 255.0, (686, 518), interpolation=cv2.INTER_CUBIC)
        ref = (ref - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
        np.testing.assert_allclose(x[0].numpy().transpose(1, 2, 0), ref, atol=1e-5)

    def test_resize_output(self):
        """Depth/logits are interpolated, labels keep their values and dtype."""
        depth = torch.arange(4.0).reshape(1, 1, 2, 2)
        up = resize_output(depth, (3, 3), 'depth')
        assert up.shape == (1, 1, 3, 3) and float(up[0, 0, 1, 1]) == pytest.approx(1.5)
        labels = torch.tensor([[[[1, 2], [3, 4]]]], dtype=torch.uint8)
        out = resize_output(labels, (4, 4), 'labels')
        assert out.dtype == torch.uint8 and set(out.unique().tolist()) == {1, 2, 3, 4}
        assert resize_output(torch.rand(1, 5, 4, 4), (8, 6), 'logits').shape == (1, 5, 8, 6)
        with pytest.raises(ValueError):
            resize_output(depth, (3, 3), 'nearest')
        with pytest.raises(ValueError):
            prepare_image(np.zeros((4, 4), np.uint8), load_model_config('conv_small'))
