# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the multi-scale backbones (ResNet with torchvision names, ViT with DINOv2 names).

Reference names and parameter counts: torchvision's ``resnet18``/``resnet50`` (11,689,512 and
25,557,032 parameters with the 1000-class ``fc``) and DINOv2 ViT-S/14 as built by Depth Anything
V2 (``test/fixtures/depth_anything_v2_vits_keys.json``, recorded from the reference code).
"""

import json
import math

from conftest import REPO_ROOT
import pytest
from relperception.models.backbones import build_backbone, ResNet, VisionTransformer
import torch
import torch.nn.functional as F

FIXTURE = REPO_ROOT / 'test' / 'fixtures' / 'depth_anything_v2_vits_keys.json'
TINY_VIT = {'name': 'vit', 'embed_dim': 32, 'num_heads': 2, 'depth': 4, 'patch_size': 14,
            'img_size': 70, 'out_indices': [0, 1, 2, 3]}


def _params(module):
    return sum(p.numel() for p in module.parameters())


class TestResNet:
    """ResNet family."""

    @pytest.mark.parametrize('depth', [18, 34, 50])
    @pytest.mark.parametrize('size', [(64, 96), (72, 100)])
    def test_shapes(self, depth, size):
        """Maps have the announced channels and ceil(H / stride) sizes, also off-multiple."""
        net = ResNet({'depth': depth, 'width': 0.125, 'out_indices': [0, 1, 2, 3, 4]}).eval()
        with torch.no_grad():
            maps = net(torch.rand(2, 3, *size))
        assert len(maps) == 5
        for m, c, s in zip(maps, net.out_channels, net.strides):
            assert m.shape == (2, c, math.ceil(size[0] / s), math.ceil(size[1] / s))
        assert net.strides == [2, 4, 8, 16, 32]
        expansion = 4 if depth == 50 else 1
        assert net.out_channels[-1] == 64 * expansion  # 512 * 0.125 * expansion

    def test_torchvision_names_resnet18(self):
        """Full-width ResNet-18 has torchvision's 120 non-fc keys and parameter count."""
        state = build_backbone({'name': 'resnet18'}).state_dict()
        assert len(state) == 120
        for key in ('conv1.weight', 'bn1.running_mean', 'bn1.num_batches_tracked',
                    'layer1.0.conv1.weight', 'layer1.1.bn2.running_var',
                    'layer2.0.downsample.0.weight', 'layer2.0.downsample.1.weight',
                    'layer4.1.conv2.weight'):
            assert key in state
        assert 'layer1.0.downsample.0.weight' not in state  # no projection in layer1
        assert state['layer4.1.conv2.weight'].shape == (512, 512, 3, 3)
        assert _params(build_backbone({'name': 'resnet18'})) == 11689512 - (512 * 1000 + 1000)

    def test_torchvision_names_resnet50(self):
        """ResNet-50 bottlenecks: stride on conv2, layer1 projection, torchvision count."""
        with torch.device('meta'):
            net = build_backbone({'name': 'resnet50'})
        state = net.state_dict()
        assert state['layer1.0.downsample.0.weight'].shape == (256, 64, 1, 1)
        assert state['layer3.5.conv3.weight'].shape == (1024, 256, 1, 1)
        assert net.layer2[0].conv2.stride == (2, 2) and net.layer2[0].conv1.stride == (1, 1)
        assert _params(net) == 25557032 - (2048 * 1000 + 1000)

    def test_width_scaling(self):
        """Width 0.25 keeps the names and divides the channels by 4."""
        small = build_backbone({'name': 'resnet18', 'width': 0.25})
        assert small.out_channels == [16, 32, 64, 128]
        assert set(small.state_dict()) == set(build_backbone({'name': 'resnet18'}).state_dict())
        assert _params(small) < 800_000

    def test_invalid_conf(self):
        """Bad depth / out_indices / input raise ValueError naming the problem."""
        with pytest.raises(ValueError, match='depth'):
            ResNet({'depth': 20})
        with pytest.raises(ValueError, match='out_indices'):
            ResNet({'out_indices': [3, 1]})
        with pytest.raises(ValueError, match='B, 3, H, W'):
            ResNet({'width': 0.125})(torch.rand(1, 1, 32, 32))
        with pytest.raises(ValueError, match='unknown backbone'):
            build_backbone({'name': 'vgg16'})


class TestVisionTransformer:
    """ViT family."""

    @pytest.mark.parametrize('size', [(70, 70), (56, 98)])
    def test_shapes(self, size):
        """Maps are (B, D, H/p, W/p) for square and non-square inputs."""
        net = build_backbone(TINY_VIT).eval()
        with torch.no_grad():
            maps, tokens = net.forward_with_tokens(torch.rand(2, 3, *size))
        assert len(maps) == 4 and len(tokens) == 4
        for m, t in zip(maps, tokens):
            assert m.shape == (2, 32, size[0] // 14, size[1] // 14)
            assert t.shape == (2, 32)
        assert net.out_channels == [32] * 4 and net.size_multiple == 14

    def test_patch16_and_registers(self):
        """Patch 16 with register tokens: registers are excluded from the maps."""
        conf = {**TINY_VIT, 'patch_size': 16, 'img_size': 64, 'num_register_tokens': 4}
        net = build_backbone(conf).eval()
        with torch.no_grad():
            maps = net(torch.rand(1, 3, 48, 80))
        assert maps[0].shape == (1, 32, 3, 5)
        assert net.state_dict()['register_tokens'].shape == (1, 4, 32)

    def test_intermediate_layers_match_manual_blocks(self):
        """get_intermediate_layers equals running the blocks by hand (norm, reshape)."""
        net = build_backbone(TINY_VIT).eval()
        image = torch.rand(1, 3, 42, 56)
        with torch.no_grad():
            maps = net.get_intermediate_layers(image, [1, 3])
            x = net.prepare_tokens(image)
            for block in net.blocks:
                x = block(x)
            last = net.norm(x)[:, 1:].transpose(1, 2).reshape(1, 32, 3, 4)
        assert len(maps) == 2
        torch.testing.assert_close(maps[1], last)
        assert len(net.get_intermediate_layers(image, 2)) == 2  # last two blocks

    def test_pos_embed_interpolation_reference(self):
        """Position embeddings: stored grid unchanged; else DINOv2's bicubic offset rule."""
        net = build_backbone(TINY_VIT)
        assert net.interpolate_pos_encoding(70, 70) is net.pos_embed
        grid = net.pos_embed[:, 1:].reshape(1, 5, 5, 32).permute(0, 3, 1, 2)
        ref = F.interpolate(grid, scale_factor=(3.1 / 5, 4.1 / 5), mode='bicubic')
        ref = torch.cat((net.pos_embed[:, :1], ref.permute(0, 2, 3, 1).reshape(1, 12, 32)), 1)
        torch.testing.assert_close(net.interpolate_pos_encoding(42, 56), ref, rtol=0, atol=0)

    def test_dinov2_names_vit_s14(self):
        """ViT-S/14 has exactly the key names and shapes of Depth Anything V2's encoder."""
        reference = json.loads(FIXTURE.read_text())['keys']
        expected = {k[len('pretrained.'):]: v for k, v in reference.items()
                    if k.startswith('pretrained.')}
        with torch.device('meta'):
            net = build_backbone({'name': 'vit_s', 'patch_size': 14, 'img_size': 518})
        ours = {k: list(v.shape) for k, v in net.state_dict().items()}
        assert ours == expected
        assert ours['blocks.11.ls2.gamma'] == [384]

    def test_vit_b14_size(self):
        """ViT-B/14 (DINOv2) has 86.6 M parameters (incl. mask token)."""
        with torch.device('meta'):  # names and shapes only: no memory, no initialisation
            net = build_backbone({'name': 'vit_b', 'patch_size': 14, 'img_size': 518})
        assert _params(net) == 86_580_480

    def test_invalid_input(self):
        """Sizes that are not multiples of the patch and bad indices are refused."""
        net = build_backbone(TINY_VIT)
        with pytest.raises(ValueError, match='multiple of the patch size 14'):
            net(torch.rand(1, 3, 50, 56))
        with pytest.raises(ValueError, match='out_indices'):
            VisionTransformer({**TINY_VIT, 'out_indices': [4]})
        with pytest.raises(ValueError, match='divisible'):
            VisionTransformer({**TINY_VIT, 'num_heads': 3})
