# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The ``fast_seg`` network and its hybrid ViT ``vit_hybrid``: export, augmentation, training."""

import json

import cv2
import numpy as np
import pytest
from relperception.cli.main import main
from relperception.models.dense import build_dense_model
from relperception.models.export import build_dense_export
from relperception.models.fast_seg import AttentionContext, FastSegModel
from relperception.models.presets import load_model_config
from relperception.models.weights import load_state_dict_file, read_trained_heads
from relperception.runtime.model_export import export_spec
from relperception.training.device_augment import DeviceSegmentationData, NUM_PARAMS
import torch

pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py

#: A narrow fast_seg on small images, for the training runs.
TINY_YAML = """\
base: fast_seg
model:
  backbone: {stem_channels: [8, 16, 16], detail_blocks: 1, context_channels: [16, 24],
             context_blocks: [1, 2], expansion: 2, fusion_channels: 24}
  heads:
    depth: {features: 8}
    segmentation: {num_classes: 5, features: 16, refine_features: 8}
input: {height: 48, width: 64}
class_names: [a, b, c, d, e]
"""

#: The same tiny network with the attention context (the vit_hybrid design).
TINY_HYBRID_YAML = TINY_YAML.replace(
    'expansion: 2, fusion_channels: 24}',
    'expansion: 2, fusion_channels: 24,\n             context: attention, attention_blocks: 1, '
    'attention_heads: 2}')

NO_JITTER = {'brightness': 0.0, 'contrast': 0.0, 'saturation': 0.0, 'hue': 0.0}


def _labelled(count=3, h=48, w=64):
    """Return ``count`` random RGB images and stripe labels 0..4 with an ignored (255) band."""
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(count)]
    label = (np.arange(w)[None].repeat(h, 0) // (w // 6)).clip(0, 5).astype(np.uint8)
    label[label == 5] = 255
    return images, [label.copy() for _ in range(count)]


@pytest.fixture(scope='module')
def model():
    """Return the ``fast_seg`` preset model with random weights, in eval mode."""
    torch.manual_seed(0)
    return build_dense_model(load_model_config('fast_seg')).eval()


class TestModel:
    def test_preset_builds_the_fast_seg_model(self, model):
        conf = load_model_config('fast_seg')
        assert isinstance(model, FastSegModel) and model.num_classes == 11
        assert (conf['input']['height'], conf['input']['width']) == (360, 480)
        assert conf['input']['multiple'] == 8 == model.size_multiple
        assert conf['weights'] == 'fast_seg' and conf['class_names'][3] == 'Road'
        params = sum(p.numel() for p in model.parameters())
        assert params * 4 < 8e6   # ships as float32 under 8 MB
        assert model.backbone.out_channels == [48, 128] and model.backbone.strides == [4, 8]

    def test_outputs_dict_shapes_and_ranges(self, model):
        with torch.no_grad():
            out = model(torch.randn(2, 3, 40, 56))
        assert set(out) == {'depth', 'logits'}
        assert out['depth'].shape == (2, 1, 40, 56) and out['logits'].shape == (2, 11, 40, 56)
        assert out['depth'].dtype == torch.float32
        assert ((out['depth'] > 0) & (out['depth'] < 80.0)).all()

    def test_heads_optional_and_relative_depth(self):
        seg_only = FastSegModel({'heads': {'depth': None}}).eval()
        depth_only = FastSegModel({'heads': {'segmentation': None},
                                   'depth_mode': 'relative'}).eval()
        with torch.no_grad():
            assert set(seg_only(torch.randn(1, 3, 16, 24))) == {'logits'}
            depth = depth_only(torch.randn(1, 3, 16, 24))
        assert set(depth) == {'depth'} and (depth['depth'] >= 0).all()
        assert depth_only.num_classes == 0 and seg_only.depth_head is None

    def test_refined_depth_head_uses_the_stride4_map(self):
        torch.manual_seed(0)
        light = FastSegModel({'heads': {'segmentation': None}}).eval()
        refined = FastSegModel({'heads': {'segmentation': None, 'depth': {
            'features': 16, 'blocks': 3, 'dilations': [2, 4], 'refine_features': 8}}}).eval()
        # the default head keeps the key names of the shipped files
        assert not any('.context.' in k or 'project4' in k or 'refine' in k
                       for k in light.depth_head.state_dict())
        assert len(refined.depth_head.context) == 2
        assert refined.depth_head.context[1][0][0].dilation == (4, 4)
        maps = refined.backbone(torch.randn(1, 3, 48, 64))
        changed = [maps[0].clone(), maps[1]]
        changed[0][..., 0, 0] += 5.0          # one stride-4 cell
        with torch.no_grad():
            a, b = (refined.depth_head(m, (48, 64)) for m in (maps, changed))
            c, d = (light.depth_head(m, (48, 64)) for m in (maps, changed))
        assert a.shape == (1, 1, 48, 64) and not torch.equal(a, b)
        assert torch.equal(c, d)               # the light head reads stride 8 only

    @pytest.mark.parametrize('shape, match', [
        ((3, 64, 64), r'\(B, 3, H, W\)'), ((1, 4, 64, 64), r'\(B, 3, H, W\)'),
        ((1, 3, 60, 64), 'multiple of 8'), ((1, 3, 64, 0), 'multiple of 8')])
    def test_bad_images_raise(self, model, shape, match):
        with pytest.raises(ValueError, match=match):
            model(torch.zeros(shape))
        with pytest.raises(ValueError, match='float'):
            model(torch.zeros((1, 3, 64, 64), dtype=torch.uint8))

    @pytest.mark.parametrize('conf, match', [
        ({'heads': {'depth': None, 'segmentation': None}}, 'at least one head'),
        ({'depth_mode': 'log'}, 'depth_mode'),
        ({'backbone': {'stem_channels': [8, 16]}}, '3 stem_channels'),
        ({'backbone': {'context_blocks': [0, 2]}}, 'positive'),
        ({'heads': {'segmentation': {'num_classes': 0}}}, 'num_classes'),
        ({'heads': {'depth': {'blocks': 0}}}, 'blocks'),
        ({'heads': {'depth': {'refine_features': -1}}}, 'refine_features'),
        ({'heads': {'depth': {'blocks': 2, 'dilations': [0]}}}, 'dilations'),
        ({'architecture': 'nope'}, 'unknown model architecture')])
    def test_bad_confs_raise(self, conf, match):
        with pytest.raises(ValueError, match=match):
            build_dense_model({**conf, 'architecture': conf.get('architecture', 'fast_seg')})

    @pytest.mark.parametrize('preset', ['fast_seg', 'vit_hybrid'])
    def test_onnx_parity_at_an_unseen_size(self, tmp_path, preset):
        spec = build_dense_export(preset, random_weights=True)
        for module in spec['module'].modules():   # non-trivial normalisation statistics
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
        path = export_spec(spec, tmp_path / f'{preset}.onnx', size=(48, 64), min_size=(16, 16),
                           max_size=(128, 160))
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
        image = torch.randn(1, 3, 72, 104)          # not the export size
        depth, logits, labels = session.run(None, {'image': image.numpy()})
        with torch.no_grad():
            ref = spec['module'](image)
        assert depth.shape == (1, 1, 72, 104) and labels.dtype == np.uint8
        np.testing.assert_allclose(depth, ref[0].numpy(), rtol=1e-4, atol=1e-3)
        scale = float(ref[1].abs().max())
        np.testing.assert_allclose(logits, ref[1].numpy(), atol=1e-4 * scale)
        assert (labels == ref[2].numpy()).mean() > 0.999


class TestHybrid:
    """``vit_hybrid``: the fast_seg stem with self-attention in place of the stride-32 stage."""

    def test_preset_builds_attention_in_place_of_the_stride32_stage(self):
        torch.manual_seed(0)
        hybrid = build_dense_model(load_model_config('vit_hybrid')).eval()
        conv = build_dense_model(load_model_config('fast_seg')).eval()
        backbone = hybrid.backbone
        assert backbone.context32 is None and isinstance(backbone.context_attention,
                                                         AttentionContext)
        assert len(backbone.context_attention.blocks) == 4
        assert load_model_config('vit_hybrid')['weights'] == 'vit_hybrid'
        # every fast_seg tensor outside the stride-32 stage fits the hybrid by name and shape
        hybrid_state, conv_state = hybrid.state_dict(), conv.state_dict()
        shared = [k for k in conv_state if not k.startswith('backbone.context32.')]
        assert all(hybrid_state[k].shape == conv_state[k].shape for k in shared)
        with torch.no_grad():
            out = hybrid(torch.randn(1, 3, 40, 56))
        assert out['logits'].shape == (1, 11, 40, 56) and out['depth'].shape == (1, 1, 40, 56)

    def test_attention_reaches_across_the_image(self):
        """A change in the last token moves the first one: the context is global."""
        torch.manual_seed(0)
        context = AttentionContext(8, 16, blocks=1, heads=2, mlp_ratio=2.0).eval()
        x = torch.randn(1, 8, 6, 9)
        moved = x.clone()
        moved[..., -1, -1] += 5.0
        with torch.no_grad():
            a, b = context(x), context(moved)
        assert a.shape == (1, 16, 6, 9)
        assert (a[..., 0, 0] - b[..., 0, 0]).abs().max() > 1e-4
        # the convolutional stride-32 stage of the same size does not reach that far
        conv = FastSegModel({'backbone': {'context_blocks': [1, 1]}}).backbone.context32.eval()
        y = torch.randn(1, 96, 12, 18)
        moved = y.clone()
        moved[..., -1, -1] += 5.0
        with torch.no_grad():
            assert torch.equal(conv(y)[..., 0, 0], conv(moved)[..., 0, 0])

    @pytest.mark.parametrize('backbone, match', [
        ({'context': 'transformer'}, 'context must be one of'),
        ({'context': 'attention', 'attention_heads': 3}, 'divisible'),
        ({'context': 'attention', 'attention_blocks': 0}, 'positive')])
    def test_bad_confs_raise(self, backbone, match):
        with pytest.raises(ValueError, match=match):
            FastSegModel({'backbone': backbone})


class TestDeviceAugment:
    def test_identity_flip_and_padding(self):
        images, labels = _labelled(2)
        data = DeviceSegmentationData(images, labels, 'cpu',
                                      {'size': (48, 64), 'scale_range': (1.0, 1.0),
                                       'hflip': 0.0, **NO_JITTER},
                                      mean=(0, 0, 0), std=(1 / 255,) * 3)
        draws = torch.utils.data.default_collate([data[0], data[1]])
        batch = data.make_batch(draws)
        assert batch['image'].shape == (2, 3, 48, 64) and batch['labels'].dtype == torch.int64
        np.testing.assert_allclose(batch['image'][1].permute(1, 2, 0).numpy(), images[1],
                                   atol=0.01)
        assert (batch['labels'][0].numpy() == labels[0]).all()
        draws['params'][:, 3] = 1.0                 # flip
        flipped = data.make_batch(draws)['labels'][0].numpy()
        assert (flipped == labels[0][:, ::-1]).all()
        draws['params'][:, 0] = 0.5                 # zoom out: the rest is padding, ignored
        draws['params'][:, 3] = 0.0
        small = data.make_batch(draws)['labels'][0].numpy()
        assert (small[24:] == 255).all() and (small[:, 32:] == 255).all()
        assert (small[:24, :32] == labels[0][::2, ::2]).mean() > 0.95

    def test_images_of_different_sizes_come_to_one_scale(self):
        """base_height: each image zoomed to that height (one base zoom shrank other sizes)."""
        (large,), (large_labels,) = _labelled(1, 48, 64)
        (small,), (small_labels,) = _labelled(1, 24, 32)
        data = DeviceSegmentationData([large, small], [large_labels, small_labels], 'cpu',
                                      {'size': (48, 64), 'scale_range': (1.0, 1.0),
                                       'base_height': 48, 'hflip': 0.0, **NO_JITTER})
        batch = data.make_batch(torch.utils.data.default_collate([data[0], data[1]]))
        assert (batch['labels'][0].numpy() == large_labels).all()
        doubled = np.repeat(np.repeat(small_labels, 2, 0), 2, 1)
        assert (batch['labels'][1].numpy() == doubled).mean() > 0.95

    def test_draws_reproducible_and_jitter_in_range(self):
        images, labels = _labelled(3)
        data = DeviceSegmentationData(images, labels, 'cpu', {'size': (32, 40)}, seed=3)
        data.set_epoch(2)
        first = data[1]['params']
        assert first.shape == (NUM_PARAMS,) and torch.equal(first, data[1]['params'])
        data.set_epoch(3)
        assert not torch.equal(first, data[1]['params'])
        batch = data.make_batch(torch.utils.data.default_collate([data[i] for i in range(3)]))
        pixels = batch['image'] * data.std + data.mean
        assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5
        assert set(batch['labels'].unique().tolist()) <= {0, 1, 2, 3, 4, 255}

    def test_bad_inputs_raise(self):
        images, labels = _labelled(2)
        with pytest.raises(ValueError, match='equally many'):
            DeviceSegmentationData(images, labels[:1], 'cpu')
        with pytest.raises(ValueError, match='uint8'):
            DeviceSegmentationData([images[0].astype(np.float32)], labels[:1], 'cpu')
        with pytest.raises(ValueError, match='scale_range needs 0 < MIN <= MAX'):
            DeviceSegmentationData(images, labels, 'cpu', {'scale_range': (2.0, 1.0)})
        with pytest.raises(ValueError, match='augmentation'):
            DeviceSegmentationData(images, labels, 'cpu', {'hflip': 1.5})
        data = DeviceSegmentationData(images, labels, 'cpu')
        with pytest.raises(ValueError, match='draws'):
            data.make_batch({'index': torch.zeros(2, dtype=torch.int64)})


def _write_folder(root, count, h=48, w=64):
    """Write a CamVid-layout folder of ``count`` images with stripe labels (raw 11 ignored)."""
    images, labels = _labelled(count, h, w)
    (root / 'images').mkdir(parents=True)
    (root / 'labels').mkdir(parents=True)
    for i, (image, label) in enumerate(zip(images, labels)):
        label = np.where(label == 255, 11, label).astype(np.uint8)
        cv2.imwrite(str(root / 'images' / f'f{i}.png'), image[..., ::-1])
        cv2.imwrite(str(root / 'labels' / f'f{i}.png'), label)
    return root


def test_tiny_device_augment_training_run_and_resume(tmp_path):
    """``train seg --device-augment`` on CPU: weights, metrics, best weights, then resume."""
    config = tmp_path / 'tiny.yaml'
    config.write_text(TINY_YAML)
    data = _write_folder(tmp_path / 'train', 8)
    val = _write_folder(tmp_path / 'val', 2)
    run = tmp_path / 'run'
    common = ['train', 'seg', '--config', str(config), '--data', str(data), '--val-data',
              str(val), '-o', str(run), '--device', 'cpu', '--device-augment',
              '--max-images', '8', '--batch-size', '4', '--crop', '32x48', '--val-every', '3',
              '--checkpoint-every', '3', '--num-threads', '1', '--no-progress']
    assert main([*common, '--steps', '3', '--bf16']) == 0   # bfloat16 autocast, as on a GPU
    summary = json.loads((run / 'metrics.json').read_text())
    assert summary['step'] == 3 and summary['config']['device_augment'] \
        and summary['config']['bf16']
    # epochs of 2 steps: validation only every --val-every steps, not at each epoch end
    assert [h['step'] for h in summary['history']] == [3.0]
    assert 0.0 <= summary['metrics']['miou'] <= 1.0 and 'iou/a' in summary['metrics']
    assert read_trained_heads(run / 'model.safetensors') == ('segmentation',)
    best = json.loads((run / 'best_metrics.json').read_text())
    assert best['step'] == 3 and best['metric'] == 'miou' and summary['best'] == best
    assert set(load_state_dict_file(run / 'best.safetensors')) == \
        set(load_state_dict_file(run / 'model.safetensors'))
    assert main([*common, '--steps', '6', '--resume']) == 0
    resumed = json.loads((run / 'metrics.json').read_text())
    assert resumed['step'] == 6 and [h['step'] for h in resumed['history']] == [3.0, 6.0]
    assert torch.load(run / 'last.pt', weights_only=True)['step'] == 6


def test_a_crop_beyond_the_largest_input_is_refused(tmp_path, caplog):
    """``--crop 5000x5000``: refused before training (it trained on padding, out of memory)."""
    config = tmp_path / 'tiny.yaml'
    config.write_text(TINY_YAML)
    data = _write_folder(tmp_path / 'train', 2)
    assert main(['train', 'seg', '--config', str(config), '--data', str(data), '-o',
                 str(tmp_path / 'run'), '--device', 'cpu', '--crop', '5000x5000', '--steps', '1',
                 '--num-threads', '1', '--no-progress']) == 1
    assert '--crop 5000x5000 is larger than the largest network input, 4096x4096' in caplog.text
    assert not (tmp_path / 'run').exists()


def test_partial_init_of_the_hybrid_from_conv_weights(tmp_path, caplog):
    """``--init-partial`` loads a fast_seg run into the hybrid; without it the keys are refused."""
    conv_config, hybrid_config = tmp_path / 'tiny.yaml', tmp_path / 'tiny_hybrid.yaml'
    conv_config.write_text(TINY_YAML)
    hybrid_config.write_text(TINY_HYBRID_YAML)
    data = _write_folder(tmp_path / 'train', 4)
    common = ['--data', str(data), '--device', 'cpu', '--device-augment', '--batch-size', '2',
              '--crop', '32x48', '--num-threads', '1', '--no-progress', '--steps', '1']
    assert main(['train', 'seg', '--config', str(conv_config), '-o', str(tmp_path / 'conv'),
                 *common]) == 0
    init = tmp_path / 'conv' / 'model.safetensors'
    hybrid = ['train', 'seg', '--config', str(hybrid_config), *common]
    assert main([*hybrid, '-o', str(tmp_path / 'strict'), '--init', str(init)]) == 1
    assert 'context_attention' in caplog.text and 'loads only the tensors' in caplog.text
    caplog.clear()
    assert main([*hybrid, '-o', str(tmp_path / 'plain'), '--init-partial']) == 1
    assert '--init-partial needs --init' in caplog.text
    assert main([*hybrid, '-o', str(tmp_path / 'hybrid'), '--init', str(init),
                 '--init-partial']) == 0
    config = json.loads((tmp_path / 'hybrid' / 'metrics.json').read_text())['config']
    assert config['init_partial'] and config['init'] == str(init)
    state = load_state_dict_file(tmp_path / 'hybrid' / 'model.safetensors')
    assert any(k.startswith('backbone.context_attention.blocks.0.attn') for k in state)
    assert not any(k.startswith('backbone.context32.') for k in state)
    # a wider depth head: its reshaped tensors start random, the rest load
    wider = tmp_path / 'wider.yaml'
    wider.write_text(TINY_HYBRID_YAML.replace('depth: {features: 8}', 'depth: {features: 12}'))
    caplog.clear()
    hybrid_init = tmp_path / 'hybrid' / 'model.safetensors'
    assert main(['train', 'seg', '--config', str(wider), *common, '-o', str(tmp_path / 'wider'),
                 '--init', str(hybrid_init), '--init-partial']) == 0
    assert 'another shape in this model' in caplog.text and 'depth_head.out.weight' in caplog.text
    assert main(['train', 'seg', '--config', str(wider), *common, '-o', str(tmp_path / 'w2'),
                 '--init', str(hybrid_init)]) == 1
    assert 'shape mismatches' in caplog.text
