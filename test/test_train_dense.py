# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of dense training: augmentation, losses, datasets, a few real steps and the CLI."""

import json
import logging
from pathlib import Path

import cv2
import numpy as np
import pytest
from relperception.cli.main import main
from relperception.data.synthetic import iter_sequence
from relperception.models.dense import build_dense_model
from relperception.models.presets import load_model_config
from relperception.training import augment, dense_data, dense_losses
from relperception.training.loop import Trainer
import torch

TINY_YAML = """\
base: conv_small
model:
  backbone: {width: 0.125}
  max_depth: 12.0
  heads:
    depth: {features: 8, head_features: 8}
    segmentation: {num_classes: 5, features: 8}
input: {height: 64, width: 80}
class_names: [floor, wall, ceiling, box, pillar]
"""


@pytest.fixture(scope='module')
def frames():
    """Return six rendered 80x64 synthetic views of two rooms as (rgb, depth, labels) lists."""
    images, depths, labels = dense_data.synthetic_frames([0, 1], frames_per_seed=3, width=80,
                                                         height=64, with_labels=True)
    return images, depths, labels


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


@pytest.fixture
def tiny_config(tmp_path):
    """Write the tiny model YAML and return its path."""
    path = tmp_path / 'tiny.yaml'
    path.write_text(TINY_YAML)
    return path


def _image(h=48, w=64, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


class TestAugment:
    def test_scale_crop_shapes_and_consistency(self):
        rng = np.random.default_rng(0)
        image = _image()
        label = np.zeros((48, 64), np.uint8)
        label[:, 32:] = 3
        depth = np.full((48, 64), 2.0, np.float32)
        out = augment.random_scale_crop(rng, image, label, depth, size=(32, 40),
                                        scale_range=(1.5, 1.5))
        img, lab, dep = out
        assert img.shape == (32, 40, 3) and lab.shape == (32, 40) and dep.shape == (32, 40)
        assert set(np.unique(lab)) <= {0, 3}
        np.testing.assert_allclose(dep, 2.0 / 1.5, rtol=1e-6)   # zoom 1.5: 1.5x closer

    def test_padding_is_ignored(self):
        rng = np.random.default_rng(1)
        img, lab, dep = augment.random_scale_crop(
            rng, _image(), np.ones((48, 64), np.uint8), np.ones((48, 64), np.float32),
            size=(40, 60), scale_range=(0.5, 0.5))
        assert (lab == augment.IGNORE_INDEX).sum() == 40 * 60 - 24 * 32
        assert np.isnan(dep).sum() == 40 * 60 - 24 * 32
        assert (img[24:] == 0).all()

    def test_hflip_pairs(self):
        image, label = _image(), np.arange(64, dtype=np.uint8)[None].repeat(48, 0)
        img, lab, dep = augment.hflip(np.random.default_rng(0), image, label, None, p=1.0)
        assert np.array_equal(img, image[:, ::-1]) and np.array_equal(lab, label[:, ::-1])
        assert dep is None
        img, _, _ = augment.hflip(np.random.default_rng(0), image, None, None, p=0.0)
        assert img is image

    def test_colour_jitter(self):
        image = _image()
        out = augment.colour_jitter(np.random.default_rng(3), image)
        assert out.shape == image.shape and out.dtype == np.uint8
        assert not np.array_equal(out, image)
        same = augment.colour_jitter(np.random.default_rng(3), image, 0, 0, 0, 0)
        assert np.array_equal(same, image)

    def test_colour_jitter_bounds(self):
        """Factors in [0, 1] (a factor below 0 would invert the image), hue in [0, 0.5]."""
        augment.check_colour_jitter(0, 0, 0, 0)
        augment.check_colour_jitter(1, 1, 1, 0.5)
        for bad in ((1.01, 0, 0, 0), (0, -0.1, 0, 0), (0, 0, 2, 0), (0, 0, 0, 0.6),
                    (0, 0, 0, -0.01)):
            with pytest.raises(ValueError, match='colour jitter'):
                augment.check_colour_jitter(*bad)
        with pytest.raises(ValueError, match='colour jitter'):
            augment.colour_jitter(np.random.default_rng(0), _image(), brightness=1.5)
        with pytest.raises(ValueError, match='colour jitter'):
            augment.DenseAugment({'saturation': -1})

    def test_scale_range_bounds(self):
        """0 < MIN <= MAX < inf, checked once for the CPU crop, the conf and the device path."""
        assert augment.check_scale_range((0.5, 2)) == (0.5, 2.0)
        assert augment.check_scale_range([1, 1]) == (1.0, 1.0)
        for bad in ((2, 0.5), (0, 1), (-1, 1), (1, float('inf')), (1, float('nan'))):
            with pytest.raises(ValueError, match='zoom needs 0 < MIN <= MAX'):
                augment.check_scale_range(bad, 'zoom')
        assert augment.check_scale_range((1, augment.MAX_ZOOM)) == (1.0, augment.MAX_ZOOM)
        with pytest.raises(ValueError, match='zoom: MAX 1000 is beyond the largest zoom 8'):
            augment.check_scale_range((1000, 1000), 'zoom')
        with pytest.raises(ValueError, match='two numbers'):
            augment.check_scale_range((1, 2, 3))
        with pytest.raises(ValueError, match='scale_range needs 0 < MIN <= MAX, got 2 1'):
            augment.random_scale_crop(np.random.default_rng(0), _image(), size=(8, 8),
                                      scale_range=(2, 1))
        with pytest.raises(ValueError, match='scale_range needs'):
            augment.DenseAugment({'scale_range': (0, 1)})

    def test_base_height_brings_every_size_to_one_scale(self):
        """One base zoom from the first image trained other sizes at the wrong scale."""
        aug = augment.DenseAugment({'size': (32, 40), 'scale_range': (1, 1), 'base_height': 32,
                                    'hflip': 0, 'brightness': 0, 'contrast': 0,
                                    'saturation': 0, 'hue': 0})
        stripes = []
        for h, w in ((48, 64), (96, 128), (32, 43)):
            label = (np.arange(w)[None].repeat(h, 0) * 8 // w).astype(np.uint8)   # 8 stripes
            _, out, _ = aug(np.random.default_rng(0), _image(h, w), label)
            assert out.shape == (32, 40) and (out != augment.IGNORE_INDEX).all()
            stripes.append(len(np.unique(out)))
        assert stripes == [stripes[2]] * 3 and stripes[2] >= 7   # 40 of the 43 px wide
        for bad in (0, 2.5, -1):
            with pytest.raises(ValueError, match='base_height must be None or an integer'):
                augment.DenseAugment({'base_height': bad})

    def test_reproducible_and_checked(self):
        aug = augment.DenseAugment({'size': (32, 32)})
        a = aug(np.random.default_rng(5), _image(), np.zeros((48, 64), np.uint8))
        b = aug(np.random.default_rng(5), _image(), np.zeros((48, 64), np.uint8))
        assert np.array_equal(a[0], b[0])
        with pytest.raises(ValueError, match='unknown'):
            augment.DenseAugment({'rotate': 3})
        with pytest.raises(ValueError, match='label shape'):
            aug(np.random.default_rng(0), _image(), np.zeros((4, 4), np.uint8))


class TestDenseLosses:
    def test_silog_reference(self):
        target = torch.tensor([1.0, 2.0, 4.0, 8.0]).view(1, 1, 2, 2)
        pred = target * torch.tensor([1.0, 2.0, 1.0, 2.0]).view(1, 1, 2, 2)
        valid = torch.ones_like(target, dtype=torch.bool)
        g = np.log([1.0, 2.0, 1.0, 2.0])
        expected = np.sqrt(np.mean(g ** 2) - 0.85 * np.mean(g) ** 2)
        assert float(dense_losses.silog_loss(pred, target, valid)) == pytest.approx(expected,
                                                                                    rel=1e-4)

    def test_silog_scale_invariance_and_zero(self):
        target = torch.rand(2, 1, 5, 6) * 5 + 1
        valid = torch.ones_like(target, dtype=torch.bool)
        assert float(dense_losses.silog_loss(target, target, valid)) < 1e-2
        assert float(dense_losses.silog_loss(3 * target, target, valid, 1.0)) < 1e-2
        assert float(dense_losses.silog_loss(3 * target, target, valid, 0.0)) == \
            pytest.approx(np.log(3), rel=1e-3)

    def test_depth_loss_invalid_pixels(self):
        target = torch.full((1, 1, 4, 4), float('nan'))
        target[0, 0, 0, 0] = 2.0
        pred = torch.full((1, 1, 4, 4), 3.0, requires_grad=True)
        loss, logs = dense_losses.depth_loss(pred, target, l1_weight=1.0)
        assert logs['l1'] == pytest.approx(1.0)
        loss.backward()
        assert torch.isfinite(pred.grad).all() and pred.grad[0, 0, 1:].abs().sum() == 0
        empty, _ = dense_losses.depth_loss(pred, torch.full_like(target, float('nan')))
        assert float(empty.detach()) == 0.0

    def test_segmentation_loss_ignore(self):
        logits = torch.zeros(1, 3, 2, 2)
        logits[0, 1] = 10.0
        labels = torch.tensor([[[1, 255], [255, 255]]])
        assert float(dense_losses.segmentation_loss(logits, labels)) < 1e-3
        all_ignored = torch.full((1, 2, 2), 255)
        assert float(dense_losses.segmentation_loss(logits, all_ignored)) == 0.0
        with pytest.raises(ValueError):
            dense_losses.segmentation_loss(logits, labels[0])

    def test_median_frequency_weights(self):
        w = dense_losses.median_frequency_weights([100, 10, 0, 1000])
        assert w[0] == pytest.approx(1.0) and w[1] == pytest.approx(10.0)
        assert w[2] == 0 and w[3] == pytest.approx(0.1)


class TestDenseData:
    def test_label_folder(self, tmp_path):
        _write_label_folder(tmp_path, count=3)
        pairs = dense_data.find_label_pairs(tmp_path)
        assert [p[0].name for p in pairs] == ['f0.png', 'f1.png', 'f2.png']
        ds = dense_data.SegmentationFolderDataset(tmp_path, num_classes=5)
        item = ds[0]
        assert item['image'].shape == (3, 48, 64) and item['labels'].dtype == torch.int64
        assert set(torch.unique(item['labels']).tolist()) <= {0, 1, 2, 3, 4, 255}
        assert (item['labels'] == 255).any()     # raw 11 -> ignore
        assert ds.class_pixel_counts().sum() == int((item['labels'] != 255).sum()) * 3

    def test_void_label_ids_are_reported(self, tmp_path, caplog):
        # a 4 px stripe of id 11 (void): 6 % of the pixels
        _write_label_folder(tmp_path, count=2, edges=[12, 24, 36, 48, 60])
        with caplog.at_level('INFO'):
            dense_data.SegmentationFolderDataset(tmp_path, num_classes=5)
        assert 'have ids >= 5 (pixels per id: 11: ' in caplog.text
        assert not [r for r in caplog.records if r.levelname == 'WARNING']
        label_path = tmp_path / 'labels' / 'f1.png'
        label = cv2.imread(str(label_path), cv2.IMREAD_UNCHANGED)
        label[label == 0] = 200                  # ids of another class scheme
        cv2.imwrite(str(label_path), label)
        caplog.clear()
        with caplog.at_level('INFO'):
            dense_data.SegmentationFolderDataset(tmp_path, num_classes=5)
        warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
        assert len(warnings) == 1 and '200: ' in warnings[0] and 'another class scheme' \
            in warnings[0]

    def test_palette_labels_are_their_indices_jpeg_labels_are_refused(self, tmp_path):
        """A palette PNG was 'got shape (48, 64, 3)'; a JPEG label's class ids were corrupt."""
        _write_label_folder(tmp_path, count=2)
        label_path = tmp_path / 'labels' / 'f1.png'
        ids = cv2.imread(str(label_path), cv2.IMREAD_UNCHANGED)
        # a palette in which several indices share a colour (black), as padded palettes do
        palette = np.zeros((256, 3), np.uint8)
        palette[:5] = [(128, 128, 128), (128, 0, 0), (192, 192, 128), (128, 64, 128), (0, 0, 0)]
        _write_palette_png(label_path, ids, palette)
        assert cv2.imread(str(label_path), cv2.IMREAD_UNCHANGED).shape == (48, 64, 3)
        image, label = dense_data.read_label_pair(tmp_path / 'images' / 'f1.png', label_path, 5)
        expected = ids.copy()
        expected[expected >= 5] = 255
        assert np.array_equal(label, expected)
        # images/f0.jpg with labels/f0.jpg: the layout of a folder converted to JPEG
        cv2.imwrite(str(tmp_path / 'images' / 'f0.jpg'), cv2.imread(str(tmp_path / 'images' /
                                                                        'f0.png')))
        cv2.imwrite(str(tmp_path / 'labels' / 'f0.jpg'), ids)
        for name in ('images', 'labels'):
            (tmp_path / name / 'f0.png').unlink()
        with pytest.raises(ValueError, match=r'f0.jpg: a JPEG label file: its lossy '
                                             'compression changes the class ids'):
            dense_data.SegmentationFolderDataset(tmp_path, num_classes=5)
        (tmp_path / 'labels' / 'f0.jpg').rename(tmp_path / 'labels' / 'f0.png')  # JPEG bytes
        (tmp_path / 'images' / 'f0.jpg').rename(tmp_path / 'images' / 'f0.png')
        with pytest.raises(ValueError, match='f0.png: a JPEG label file'):
            dense_data.SegmentationFolderDataset(tmp_path, num_classes=5)
        cv2.imwrite(str(tmp_path / 'labels' / 'f0.png'), cv2.merge([ids, ids, ids]))
        with pytest.raises(ValueError, match=r'got uint8 with shape \(48, 64, 3\) \(a colour '
                                             'image: colour-coded labels'):
            dense_data.SegmentationFolderDataset(tmp_path, num_classes=5)

    def test_missing_label(self, tmp_path):
        _write_label_folder(tmp_path, count=2)
        (tmp_path / 'labels' / 'f1.png').unlink()
        with pytest.raises(FileNotFoundError, match='f1'):
            dense_data.find_label_pairs(tmp_path)

    def test_parse_synthetic_spec(self):
        spec = dense_data.parse_synthetic_spec('synth:0-2,7:5:96x64')
        assert spec == {'seeds': [0, 1, 2, 7], 'frames_per_seed': 5, 'width': 96,
                        'height': 64}
        assert dense_data.parse_synthetic_spec('synth:4')['frames_per_seed'] == 40
        for bad in ('synth:', 'synth:a', 'synth:3-1', 'synth:1:2:64', 'bag'):
            with pytest.raises(ValueError):
                dense_data.parse_synthetic_spec(bad)

    def test_bag_frames(self, tmp_path):
        from relperception.data.synthetic_bag import write_synthetic_bag

        write_synthetic_bag(tmp_path / 'bag', frames=3, seed=2, width=64, height=48)
        images, depths = dense_data.bag_depth_frames(tmp_path / 'bag', stride=2)
        _, ref = iter_sequence(3, seed=2, width=64, height=48)
        ref = list(ref)
        assert len(images) == 2
        assert np.array_equal(images[1], ref[2].rgb)
        np.testing.assert_array_equal(depths[1], ref[2].depth)

    def test_a_bad_image_costs_its_frame_not_the_bag(self, tmp_path, caplog):
        from relperception.data import topics
        from relperception.data.bag import BagWriter
        from relperception.imaging.image_encodings import numpy_to_image_fields

        _, sequence = iter_sequence(4, seed=2, width=64, height=48)
        with BagWriter(tmp_path / 'bag') as writer:
            for index, frame in enumerate(sequence):
                rgb = frame.rgb[:-1] if index == 1 else frame.rgb   # one row short...
                fields = numpy_to_image_fields(rgb, 'rgb8')
                fields['height'] = 48                               # ...for its height
                fields['data'] = np.ascontiguousarray(fields['data'], np.uint8).reshape(-1)
                msg = writer.typestore.types[topics.IMAGE_MSGTYPE](
                    header=writer.header(frame.stamp_ns, topics.CAMERA_FRAME), **fields)
                writer.write_message(topics.IMAGE, topics.IMAGE_MSGTYPE, frame.stamp_ns, msg)
                writer.write_image(topics.DEPTH, frame.stamp_ns, frame.depth, '32FC1')
        images, _ = dense_data.bag_depth_frames(tmp_path / 'bag')
        assert len(images) == 3
        assert '1 undecodable_image: /camera/image_raw at' in caplog.text

    def test_depth_dataset(self, frames):
        images, depths, _ = frames
        aug = augment.DenseAugment({'size': (32, 48)})
        ds = dense_data.DepthFramesDataset(images, depths, aug, seed=1)
        item = ds[2]
        assert item['image'].shape == (3, 32, 48) and item['depth'].shape == (1, 32, 48)
        ds.set_epoch(1)
        assert not torch.equal(item['image'], ds[2]['image'])
        with pytest.raises(ValueError):
            dense_data.DepthFramesDataset(images, depths[:1])


class TestTrainingReducesLoss:
    """A few real optimiser steps on synthetic frames lower the training loss."""

    @pytest.mark.parametrize('task', ['seg', 'depth'])
    def test_loss_decreases(self, tmp_path, frames, tiny_config, task):
        torch.manual_seed(0)
        conf = load_model_config(tiny_config)
        model = build_dense_model(conf)
        images, depths, labels = frames
        x = torch.stack([dense_data.normalise(im) for im in images])
        if task == 'seg':
            y = torch.from_numpy(np.stack(labels).astype(np.int64))
            ds = torch.utils.data.TensorDataset(x, y)

            def loss_fn(m, batch):
                return dense_losses.segmentation_loss(m(batch[0])['logits'], batch[1]), {}
        else:
            y = torch.from_numpy(np.stack(depths))[:, None]
            ds = torch.utils.data.TensorDataset(x, y)

            def loss_fn(m, batch):
                return dense_losses.depth_loss(m(batch[0])['depth'], batch[1])

        def full_loss():
            model.eval()
            with torch.no_grad():
                return float(loss_fn(model, (x, y))[0])
        before = full_loss()
        trainer = Trainer(model, loss_fn, tmp_path, lr=5e-3, total_steps=20, warmup_steps=2,
                          progress=False, seed=0)
        trainer.fit(ds, batch_size=3)
        after = full_loss()
        assert after < 0.8 * before, (before, after)


class TestTrainCli:
    def test_seg_end_to_end_and_resume(self, tmp_path, tiny_config, caplog):
        data = _write_label_folder(tmp_path / 'data', count=4)
        out = tmp_path / 'run'
        argv = ['train', 'seg', '--config', str(tiny_config), '--data', str(data),
                '--val-data', str(data), '-o', str(out), '--batch-size', '2',
                '--warmup-steps', '1', '--no-progress', '--num-threads', '1']
        assert main(argv + ['--steps', '2']) == 0
        summary = json.loads((out / 'metrics.json').read_text())
        assert summary['step'] == 2 and 0.0 <= summary['metrics']['miou'] <= 1.0
        from relperception.models.weights import load_state_dict_file

        state = load_state_dict_file(out / 'model.safetensors')
        assert 'segmentation_head' in ''.join(state)
        ckpt = torch.load(out / 'last.pt', weights_only=True)
        assert ckpt['step'] == 2 and ckpt['config']['task'] == 'seg'
        # resume with a longer schedule continues at step 2
        assert main(argv + ['--steps', '3', '--resume']) == 0
        assert torch.load(out / 'last.pt', weights_only=True)['step'] == 3
        # resuming the finished run says so and leaves its files as they are
        names = ('model.safetensors', 'metrics.json', 'last.pt')
        written = {name: (out / name).read_bytes() for name in names}
        with caplog.at_level('INFO'):
            assert main(argv + ['--steps', '3', '--resume']) == 0
        assert 'already finished' in caplog.text and 'left as the finished run' in caplog.text
        for name, content in written.items():
            assert (out / name).read_bytes() == content, name

    def test_seg_weight_average(self, tmp_path, tiny_config):
        """--ema-decay: the kept and exported weights are the average, not the last step's."""
        from relperception.models.weights import load_state_dict_file

        data = _write_label_folder(tmp_path / 'data', count=4)
        out = tmp_path / 'run'
        assert main(['train', 'seg', '--config', str(tiny_config), '--data', str(data),
                     '--val-data', str(data), '-o', str(out), '--batch-size', '2',
                     '--steps', '3', '--lr', '1e-2', '--ema-decay', '0.5', '--no-progress',
                     '--num-threads', '1']) == 0
        ckpt = torch.load(out / 'last.pt', weights_only=True)
        assert ckpt['config']['ema_decay'] == 0.5
        exported = load_state_dict_file(out / 'model.safetensors')
        averaged = {k[len('module.'):]: v for k, v in ckpt['ema'].items()
                    if k.startswith('module.')}
        trained = ckpt['model']
        moved = [k for k in exported if not torch.equal(exported[k], trained[k].float())]
        assert moved and all(torch.equal(exported[k], averaged[k].float()) for k in moved)
        assert (out / 'best.safetensors').is_file()
        assert main(['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                     str(tmp_path / 'bad'), '--steps', '1', '--batch-size', '2',
                     '--ema-decay', '1']) == 1

    def test_seg_colour_jitter(self, tmp_path, tiny_config, caplog):
        """--colour-jitter reaches the augmentation (recorded in the checkpoint's config)."""
        data = _write_label_folder(tmp_path / 'data', count=4)
        base = ['train', 'seg', '--config', str(tiny_config), '--batch-size', '2', '--steps', '1',
                '--no-progress', '--num-threads', '1']
        assert main(base + ['--data', str(data), '-o', str(tmp_path / 'default')]) == 0
        conf = torch.load(tmp_path / 'default' / 'last.pt', weights_only=True)['config']
        assert [conf['augment'][k] for k in ('brightness', 'contrast', 'saturation', 'hue')] \
            == [0.3, 0.3, 0.3, 0.03]
        assert conf['augment']['base_height'] == 64      # each image to the preset's height
        assert main(base + ['--data', str(data), '-o', str(tmp_path / 'strong'),
                            '--device-augment', '--colour-jitter', '0.6', '0.4', '0.2',
                            '0.05']) == 0
        conf = torch.load(tmp_path / 'strong' / 'last.pt', weights_only=True)['config']
        assert [conf['augment'][k] for k in ('brightness', 'contrast', 'saturation', 'hue')] \
            == [0.6, 0.4, 0.2, 0.05]
        # refused before any data is read: the data folder does not exist
        assert main(base + ['--data', str(tmp_path / 'missing'), '-o', str(tmp_path / 'bad'),
                            '--colour-jitter', '0.3', '0.3', '0.3', '0.7']) == 1
        assert 'hue in [0, 0.5]' in caplog.text

    def test_seg_report_data(self, tmp_path, tiny_config, caplog):
        """--report-data: scored at every validation, recorded, not choosing the checkpoint."""
        from relperception.models.weights import load_weights

        caplog.set_level(logging.INFO)

        data = _write_label_folder(tmp_path / 'data', count=4)
        report = _write_label_folder(tmp_path / 'left_out', count=2, h=40, w=56)
        out = tmp_path / 'run'
        base = ['train', 'seg', '--config', str(tiny_config), '--batch-size', '2',
                '--no-progress', '--num-threads', '1']
        assert main(base + ['--data', str(data), '--val-data', str(data), '-o', str(out),
                            '--report-data', str(report), f'{report}/', '--steps', '2',
                            '--checkpoint-every', '1', '--lr', '1e-2']) == 0
        summary = json.loads((out / 'metrics.json').read_text())
        # the hint after class-weighted training names the best weights
        assert f'train seg-adjust --config {tiny_config} --init {out / "best.safetensors"} ' \
            in caplog.text
        assert len(summary['history']) >= 2
        for entry in summary['history']:
            assert {'miou', 'report/left_out/miou', 'report/left_out-2/miou',
                    'report/left_out/iou/floor'} <= set(entry)
            assert entry['report/left_out/miou'] == entry['report/left_out-2/miou']
        assert summary['best']['metric'] == 'miou'
        assert summary['config']['report_data'] == [str(report), f'{report}/']
        # the recorded figure is what the exported weights score on the report folder
        conf = load_model_config(tiny_config)
        model = build_dense_model(conf)
        load_weights(model, out / 'model.safetensors')
        left_out = dense_data.SegmentationFolderDataset(report, model.num_classes,
                                                        ignore_index=255)
        expected = dense_data.evaluate_segmentation(model, left_out.images, left_out.labels,
                                                    conf)
        assert summary['metrics']['report/left_out/miou'] == pytest.approx(expected['miou'])
        # refused before any data is read: the data folder does not exist
        assert main(base + ['--data', str(tmp_path / 'missing'), '-o', str(tmp_path / 'bad'),
                            '--steps', '1', '--report-data', str(report)]) == 1
        assert '--report-data needs --val-data' in caplog.text

    def test_seg_adjust(self, tmp_path, tiny_config, caplog):
        """Train seg records its class weights; seg-adjust folds the offsets of the best tau."""
        from relperception.models.weights import load_weights, read_metadata

        data = _write_label_folder(tmp_path / 'data', count=4, edges=(30, 44, 51, 57, 61))
        seg = tmp_path / 'seg'
        assert main(['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                     str(seg), '--steps', '2', '--batch-size', '2', '--no-progress']) == 0
        recorded = json.loads(read_metadata(seg / 'model.safetensors')['class_weights'])
        assert len(recorded) == 5 and max(recorded) > min(recorded) > 0
        # a depth run keeps the segmentation head's record
        depth = tmp_path / 'depth'
        assert main(['train', 'depth', '--config', str(tiny_config), '--data',
                     'synth:3:2:80x64', '--init', str(seg / 'model.safetensors'), '-o',
                     str(depth), '--steps', '1', '--batch-size', '2', '--no-progress']) == 0
        assert json.loads(read_metadata(depth / 'model.safetensors')['class_weights']) \
            == recorded
        out = tmp_path / 'adjusted'
        adjust = ['train', 'seg-adjust', '--config', str(tiny_config), '--val-data', str(data),
                  '--taus', '0', '0.5', '1', '--num-threads', '1']
        assert main(adjust + ['--init', str(depth / 'model.safetensors'), '-o', str(out),
                              '--report-data', str(data)]) == 0
        summary = json.loads((out / 'metrics.json').read_text())
        by_tau = summary['by_tau']
        assert set(by_tau) == {'0.0', '0.5', '1.0'}
        best = max(by_tau, key=lambda t: (by_tau[t]['val']['miou'], -float(t)))
        assert summary['tau'] == float(best)
        assert summary['metrics']['report/data/miou'] == by_tau[best]['report/data']['miou']
        meta = read_metadata(out / 'model.safetensors')
        adjustment = json.loads(meta['logit_adjustment'])
        assert adjustment['tau'] == float(best) and adjustment['class_weights'] == recorded
        assert meta['trained_heads'] == read_metadata(depth / 'model.safetensors')[
            'trained_heads']
        # the offsets are in the classifier's bias; every other tensor is unchanged
        from relperception.models.weights import load_state_dict_file

        before = load_state_dict_file(depth / 'model.safetensors')
        after = load_state_dict_file(out / 'model.safetensors')
        bias = 'segmentation_head.classifier.bias'
        assert all(torch.equal(before[k], after[k]) for k in before if k != bias)
        np.testing.assert_allclose((after[bias] - before[bias]).numpy(),
                                   adjustment['offsets'], atol=1e-6)
        assert adjustment['offsets'] == pytest.approx(
            [-float(best) * np.log(w) for w in recorded], abs=1e-6)
        # the written weights score what was recorded for the chosen tau
        conf = load_model_config(tiny_config)
        model = build_dense_model(conf)
        load_weights(model, out / 'model.safetensors')
        val = dense_data.SegmentationFolderDataset(data, 5, ignore_index=255)
        assert dense_data.evaluate_segmentation(model, val.images, val.labels, conf)['miou'] \
            == pytest.approx(by_tau[best]['val']['miou'])
        # a fixed tau is scored next to tau 0 (not with --taus, which it would override)
        fixed_argv = ['train', 'seg-adjust', '--config', str(tiny_config), '--val-data',
                      str(data), '--num-threads', '1']
        assert main(fixed_argv + ['--init', str(seg / 'model.safetensors'), '-o',
                                  str(tmp_path / 'fixed'), '--tau', '0.7']) == 0
        fixed = json.loads((tmp_path / 'fixed' / 'metrics.json').read_text())
        assert fixed['tau'] == 0.7 and set(fixed['by_tau']) == {'0.0', '0.7'}
        moved = (load_state_dict_file(tmp_path / 'fixed' / 'model.safetensors')[bias]
                 - load_state_dict_file(seg / 'model.safetensors')[bias]).numpy()
        np.testing.assert_allclose(moved, [-0.7 * np.log(w) for w in recorded], atol=1e-5)
        assert np.abs(moved).max() > 0.1
        # refused: adjusting twice, weights trained without class weights, no record, bad tau
        assert main(adjust + ['--init', str(out / 'model.safetensors'), '-o',
                              str(tmp_path / 'twice')]) == 1
        assert 'already logit-adjusted (tau' in caplog.text
        assert main(['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                     str(tmp_path / 'plain'), '--steps', '1', '--batch-size', '2',
                     '--no-progress', '--class-weights', 'none']) == 0
        assert main(adjust + ['--init', str(tmp_path / 'plain' / 'model.safetensors'), '-o',
                              str(tmp_path / 'none')]) == 1
        assert 'trained without class weights' in caplog.text
        from relperception.models.weights import save_weights

        save_weights(model, tmp_path / 'bare.safetensors')
        assert main(adjust + ['--init', str(tmp_path / 'bare.safetensors'), '-o',
                              str(tmp_path / 'bare')]) == 1
        assert 'give --data' in caplog.text
        assert main(adjust + ['--init', str(tmp_path / 'bare.safetensors'), '-o',
                              str(tmp_path / 'bare'), '--data', str(data)]) == 0
        (tmp_path / 'damaged.safetensors').write_bytes(b'x')
        assert main(adjust + ['--init', str(tmp_path / 'damaged.safetensors'), '-o',
                              str(tmp_path / 'bad')]) == 1
        assert 'damaged.safetensors: not a valid safetensors file' in caplog.text
        assert main(fixed_argv + ['--init', str(seg / 'model.safetensors'), '-o',
                                  str(tmp_path / 'bad'), '--tau', '-1']) == 1
        assert 'tau must be in [0, 10]' in caplog.text

    def test_seg_hold_out_sequence(self, tmp_path, tiny_config, caplog):
        """--hold-out-sequence: left out of training, scored at every validation and adjusted."""
        from relperception.models.weights import load_weights

        caplog.set_level(logging.INFO)
        data = tmp_path / 'data'
        _write_label_folder(data, count=3, prefix='seqA_')
        _write_label_folder(data, count=2, prefix='seqB_', edges=(20, 30, 40, 50, 60))
        out = tmp_path / 'run'
        base = ['train', 'seg', '--config', str(tiny_config), '--data', str(data),
                '--batch-size', '2', '--no-progress', '--num-threads', '1', '--steps', '2']
        assert main(base + ['--val-data', str(data), '-o', str(out), '--checkpoint-every', '1',
                            '--hold-out-sequence', 'seqB', 'seqB']) == 0
        # trained on seqA's three frames only
        # the training folder is read and reported once, with the count it trains on
        assert caplog.text.count(f'segmentation data {data} (without seqB):') == 1
        assert f'segmentation data {data} (without seqB): 3 labelled images' in caplog.text
        summary = json.loads((out / 'metrics.json').read_text())
        assert summary['config']['hold_out_sequences'] == ['seqB']
        assert len(summary['history']) >= 2
        for entry in summary['history']:
            assert {'miou', 'report/heldout-seqB/miou', 'report/heldout-seqB/iou/floor'} \
                <= set(entry)
        # the recorded figure is what the exported weights score on seqB's frames alone
        conf = load_model_config(tiny_config)
        model = build_dense_model(conf)
        load_weights(model, out / 'model.safetensors')
        held = dense_data.SegmentationFolderDataset(data, model.num_classes, ignore_index=255,
                                                    sequences=['seqB'])
        assert len(held) == 2
        expected = dense_data.evaluate_segmentation(model, held.images, held.labels, conf)
        assert summary['metrics']['report/heldout-seqB/miou'] == pytest.approx(expected['miou'])
        assert '--hold-out-sequence seqB' in caplog.text      # the seg-adjust hint names it
        # seg-adjust scores the held-out frames at every tau
        adjusted = tmp_path / 'adjusted'
        adjust = ['train', 'seg-adjust', '--config', str(tiny_config), '--val-data', str(data),
                  '--init', str(out / 'model.safetensors'), '--taus', '0', '1',
                  '--hold-out-sequence', 'seqB']
        assert main(adjust + ['--data', str(data), '-o', str(adjusted)]) == 0
        by_tau = json.loads((adjusted / 'metrics.json').read_text())['by_tau']
        assert by_tau['0.0']['report/heldout-seqB']['miou'] == pytest.approx(expected['miou'])
        assert 'report/heldout-seqB' in by_tau['1.0']
        # refused with one line: unknown sequence, nothing left, no --val-data, no --data
        assert main(base + ['--val-data', str(data), '-o', str(tmp_path / 'bad'),
                            '--hold-out-sequence', 'seqC']) == 1
        assert "no frame of sequence 'seqC'" in caplog.text and 'seqA, seqB' in caplog.text
        assert main(base + ['--val-data', str(data), '-o', str(tmp_path / 'bad'),
                            '--hold-out-sequence', 'seqA', 'seqB']) == 1
        assert 'no frame of' in caplog.text and 'is left' in caplog.text
        assert main(base + ['-o', str(tmp_path / 'bad'), '--hold-out-sequence', 'seqB']) == 1
        assert '--hold-out-sequence needs --val-data' in caplog.text
        assert main(adjust + ['-o', str(tmp_path / 'bad')]) == 1
        assert '--hold-out-sequence needs --data' in caplog.text

    def test_frame_sequences(self, tmp_path):
        assert [dense_data.frame_sequence(n) for n in ('0006R0_f02370', '0001TP_006690',
                                                       'Seq05VD_f00000', 'frame7')] == \
            ['0006R0', '0001TP', 'Seq05VD', 'frame7']
        pairs = [(Path(f'{n}.png'), Path(f'{n}.png')) for n in ('a_1', 'a_2', 'b_1', 'c_1')]
        names = lambda kept: [p[0].stem for p in kept]   # noqa: E731
        assert names(dense_data.select_sequences(pairs, 'root', ['a', 'c'])) == \
            ['a_1', 'a_2', 'c_1']
        assert names(dense_data.select_sequences(pairs, 'root', None, ['a'])) == ['b_1', 'c_1']
        assert names(dense_data.select_sequences(pairs, 'root', ['a', 'b'], ['b'])) == \
            ['a_1', 'a_2']
        with pytest.raises(ValueError, match=r"sequence 'd' in root .*sequences: a, b, c"):
            dense_data.select_sequences(pairs, 'root', ['d'])
        with pytest.raises(ValueError, match='no frame of root is left'):
            dense_data.select_sequences(pairs, 'root', None, ['a', 'b', 'c'])

    def test_report_names(self):
        from relperception.cli.train import report_names

        assert report_names(['a/b/seq1', 'c/seq1/', 'synth:1000-1001:10', '/', 'seq1']) == \
            ['seq1', 'seq1-2', 'synth:1000-1001:10', '_', 'seq1-3']

    def test_depth_from_seg_keeps_segmentation(self, tmp_path, tiny_config):
        data = _write_label_folder(tmp_path / 'data', count=2)
        seg = tmp_path / 'seg'
        assert main(['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                     str(seg), '--steps', '1', '--batch-size', '2', '--no-progress']) == 0
        out = tmp_path / 'depth'
        assert main(['train', 'depth', '--config', str(tiny_config), '--data',
                     'synth:3:2:80x64', '--val-data', 'synth:9:1:80x64', '--init',
                     str(seg / 'model.safetensors'), '-o', str(out), '--steps', '2',
                     '--batch-size', '2', '--no-progress']) == 0
        from relperception.models.weights import load_state_dict_file

        before = load_state_dict_file(seg / 'model.safetensors')
        after = load_state_dict_file(out / 'model.safetensors')
        changed = [k for k in before if not torch.equal(before[k], after[k])]
        assert changed and all(k.startswith('depth_head.') for k in changed)
        metrics = json.loads((out / 'metrics.json').read_text())['metrics']
        assert 0.0 <= metrics['delta1'] <= 1.0 and metrics['abs_rel'] > 0
        from relperception.models.weights import read_trained_heads

        assert read_trained_heads(seg / 'model.safetensors') == ('segmentation',)
        # the depth run adds its head to the segmentation head of --init
        assert read_trained_heads(out / 'model.safetensors') == ('depth', 'segmentation')

    def test_backbone_training_outdates_the_other_head(self, tmp_path, tiny_config, caplog):
        """A head of --init the run does not train is untrained once the backbone changes."""
        from relperception.models.weights import read_trained_heads

        data = _write_label_folder(tmp_path / 'data', count=2)
        both = tmp_path / 'both'
        assert main(['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                     str(tmp_path / 'seg'), '--steps', '1', '--batch-size', '2',
                     '--no-progress']) == 0
        depth_argv = ['train', 'depth', '--config', str(tiny_config), '--data',
                      'synth:3:2:80x64', '--steps', '1', '--batch-size', '2', '--no-progress']
        assert main(depth_argv + ['--init', str(tmp_path / 'seg' / 'model.safetensors'),
                                  '-o', str(both)]) == 0
        assert read_trained_heads(both / 'model.safetensors') == ('depth', 'segmentation')
        init = str(both / 'model.safetensors')
        cases = [  # (argv, heads afterwards, the outdated head)
            (['train', 'seg', '--config', str(tiny_config), '--data', str(data), '--steps', '1',
              '--batch-size', '2', '--no-progress', '--init', init], ('segmentation',), 'depth'),
            (depth_argv + ['--init', init, '--backbone-lr-scale', '0.1'], ('depth',),
             'segmentation'),
            (depth_argv + ['--init', init], ('depth', 'segmentation'), None),   # frozen
        ]
        for i, (argv, heads, stale) in enumerate(cases):
            caplog.clear()
            out = tmp_path / f'run{i}'
            with caplog.at_level(logging.WARNING):
                assert main(argv + ['-o', str(out)]) == 0
            assert read_trained_heads(out / 'model.safetensors') == heads
            warned = [r.getMessage() for r in caplog.records
                      if 'recorded as untrained' in r.getMessage()]
            if stale is None:
                assert not warned
            else:
                task = 'depth' if stale == 'depth' else 'seg'
                assert len(warned) == 1 and warned[0].startswith(f'the {stale} head of --init')
                assert f'`train {task} --init {out / "model.safetensors"}`' in warned[0]

    def test_partial_init_counts_only_the_heads_it_loads(self, tmp_path, tiny_config, caplog):
        """0 tensors loaded passed silently; a head the file lacks was 'trained' or 'outdated'."""
        from relperception.models.weights import (read_trained_heads, save_weights,
                                                  shipped_weights)

        data = _write_label_folder(tmp_path / 'data', count=2)
        common = ['--config', str(tiny_config), '--batch-size', '2', '--no-progress',
                  '--steps', '1', '--init-partial']
        seg = ['train', 'seg', '--data', str(data), *common]
        depth = ['train', 'depth', '--data', 'synth:3:2:80x64', *common]
        caplog.clear()
        loftr = shipped_weights('loftr_lite')
        assert main(seg + ['--init', str(loftr), '-o', str(tmp_path / 'loftr')]) == 1
        errors = _errors(caplog)
        assert len(errors) == 1 and errors[0].startswith(
            f'--init-partial: no weight of {loftr} fits the model (none of its '
            f'{len(read_state(loftr))} tensors has the name and shape of one of the model') \
            and 'parameters): nothing would be loaded' in errors[0]
        # weights without a depth head and without a record (so: "every head trained")
        state = {k: v for k, v in _tiny_state(tiny_config).items()
                 if not k.startswith('depth_head.')}
        no_depth = save_weights(state, tmp_path / 'no_depth.safetensors')
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert main(seg + ['--init', str(no_depth), '-o', str(tmp_path / 'seg')]) == 0
        assert 'recorded as untrained' not in caplog.text
        assert read_trained_heads(tmp_path / 'seg' / 'model.safetensors') == ('segmentation',)
        seg_only = {k: v for k, v in state.items() if not k.startswith('segmentation_head.')}
        backbone = save_weights(seg_only, tmp_path / 'backbone.safetensors')
        assert main(depth + ['--init', str(backbone), '-o', str(tmp_path / 'depth')]) == 0
        assert read_trained_heads(tmp_path / 'depth' / 'model.safetensors') == ('depth',)

    def test_seg_validates_at_every_checkpoint(self, tmp_path, tiny_config):
        data = _write_label_folder(tmp_path / 'data', count=6)
        out = tmp_path / 'run'
        assert main(['train', 'seg', '--config', str(tiny_config), '--data', str(data),
                     '--val-data', str(data), '-o', str(out), '--batch-size', '2',
                     '--steps', '4', '--checkpoint-every', '2', '--no-progress',
                     '--num-threads', '1']) == 0
        summary = json.loads((out / 'metrics.json').read_text())
        # checkpoints: step 2 (--checkpoint-every), 3 (end of the 3-step epoch), 4 (the end)
        assert [h['step'] for h in summary['history']] == [2.0, 3.0, 4.0]
        assert all(0.0 <= h['miou'] <= 1.0 for h in summary['history'])
        assert summary['metrics']['step'] == 4.0 and 'miou' in summary['metrics']

    def test_seg_only_weights_write_labels_but_no_depth(self, tmp_path, tiny_config, caplog):
        """Seg from scratch says so, warns about the missing validation; infer skips depth."""
        from relperception.models.weights import read_trained_heads

        data = _write_label_folder(tmp_path / 'data', count=2)
        run = tmp_path / 'seg'
        with caplog.at_level(logging.INFO):
            assert main(['train', 'seg', '--config', str(tiny_config), '--data', str(data),
                         '-o', str(run), '--steps', '2', '--batch-size', '2', '--no-progress',
                         '--num-threads', '1']) == 0
        messages = [r.getMessage() for r in caplog.records]
        assert sum(m.startswith('no --val-data: no validation metrics; pass a CamVid-layout')
                   for m in messages) == 2                   # at the start and at the end
        weights = run / 'model.safetensors'
        assert any('random initialisation' in m and 'the depth head stays untrained' in m
                   and f'train it with `train depth --init {weights}`' in m for m in messages)
        assert read_trained_heads(weights) == ('segmentation',)
        assert json.loads((run / 'metrics.json').read_text())['trained_heads'] == \
            ['segmentation']
        caplog.clear()
        out = tmp_path / 'infer'
        with caplog.at_level(logging.INFO):
            assert main(['infer', '--config', str(tiny_config), '--weights', str(weights),
                         str(data / 'images'), '-o', str(out)]) == 0
        assert sorted(p.name for p in out.iterdir()) == [
            'f0_labels.png', 'f0_labels_color.png', 'f1_labels.png', 'f1_labels_color.png']
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and 'depth head' in warnings[0] \
            and 'never trained' in warnings[0]

    def test_weights_without_record_have_every_head_trained(self, tmp_path):
        from relperception.models.weights import (
            read_trained_heads, save_weights, shipped_weights)
        from relperception.pipeline.dense_pipeline import DensePipeline

        for name in ('conv_small', 'vit_small'):   # trained seg, then depth: no record
            assert read_trained_heads(shipped_weights(name)) is None
        assert DensePipeline({'dense.model': 'conv_small'}).untrained_heads == ()
        path = save_weights({'w': torch.zeros(1)}, tmp_path / 'w.safetensors',
                            metadata={'trained_heads': 'depth,wings'})
        with pytest.raises(ValueError, match='wings'):
            read_trained_heads(path)

    def test_ship_weights_half(self, tmp_path):
        from relperception.cli.train import ship_weights
        from relperception.models.weights import (
            load_state_dict_file, read_manifest, save_weights)

        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
        save_weights(model, tmp_path / 'model.safetensors')
        (tmp_path / 'pkg').mkdir()
        for task, value in (('seg', 0.5), ('depth', 0.8)):
            ship_weights('toy', tmp_path / 'model.safetensors', 'toy', task, {'m': value},
                         {'command': task}, half=True, weights_dir=tmp_path / 'pkg')
        state = load_state_dict_file(tmp_path / 'pkg' / 'toy.safetensors')
        assert state['0.weight'].dtype == torch.float16
        assert state['1.num_batches_tracked'].dtype == torch.int64
        entry = read_manifest(tmp_path / 'pkg')['toy']
        assert entry['metrics'] == {'seg': {'m': 0.5}, 'depth': {'m': 0.8}}
        assert entry['dtype'] == 'float16' and entry['commands']['depth'] == 'depth'
        restored = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
        restored.load_state_dict(state)
        assert torch.allclose(restored[0].weight, model[0].weight, atol=1e-3)

    @pytest.mark.parametrize('task, name, words', [
        ('seg', '', "--ship '' is not a plain name"),
        ('seg', '../../outside', "--ship '../../outside' is not a plain name"),
        ('seg', 'loftr_lite', '--ship loftr_lite: no dense preset loads weights of that name'),
        ('seg', 'fast_seg', '--ship fast_seg: preset fast_seg loads those weights and its '
                            'architecture differs from --config '),
        ('seg-adjust', 'loftr_lite', '--ship loftr_lite: no dense preset loads weights'),
        ('matcher', 'fast_seg', '--ship fast_seg: no LoFTR preset loads weights of that name'),
        ('matcher', 'loftr', '--ship loftr: preset loftr loads those weights and its '
                             'architecture differs from --config loftr_lite'),
    ])
    def test_ship_names_are_checked_before_training(self, tmp_path, tiny_config, caplog, task,
                                                    name, words):
        """--ship wrote any name (one outside the weights folder) after the whole run."""
        data = _write_label_folder(tmp_path / 'data', count=2)
        if task == 'seg':
            argv = ['train', 'seg', '--config', str(tiny_config), '--data', str(data),
                    '--steps', '1']
        elif task == 'seg-adjust':
            argv = ['train', 'seg-adjust', '--config', str(tiny_config), '--val-data', str(data),
                    '--init', str(tmp_path / 'missing.safetensors')]
        else:
            argv = ['train', 'matcher', '--config', 'loftr_lite', '--data', str(data / 'images'),
                    '--steps', '1']
        caplog.clear()
        assert main(argv + ['-o', str(tmp_path / 'run'), '--ship', name]) == 1
        errors = _errors(caplog)
        assert len(errors) == 1 and errors[0].startswith(words), errors
        assert not (tmp_path / 'run').exists()

    def test_ship_weights_stays_in_the_weights_folder(self, tmp_path):
        from relperception.cli.train import ship_weights
        from relperception.models.weights import save_weights

        save_weights({'w': torch.zeros(2)}, tmp_path / 'model.safetensors')
        (tmp_path / 'pkg').mkdir()
        for name in ('../escaped', '', '.hidden', 'a/b'):
            with pytest.raises(ValueError, match='is not a plain name'):
                ship_weights(name, tmp_path / 'model.safetensors', 'toy', 'seg', {}, {},
                             weights_dir=tmp_path / 'pkg')
        assert not (tmp_path / 'escaped.safetensors').exists()
        assert not any((tmp_path / 'pkg').iterdir())

    def test_errors(self, tmp_path, tiny_config):
        assert main(['train', 'seg', '--config', str(tiny_config), '--data',
                     str(tmp_path / 'missing'), '-o', str(tmp_path / 'o'), '--steps',
                     '1']) == 1
        data = _write_label_folder(tmp_path / 'data', count=2)
        assert main(['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                     str(tmp_path / 'o'), '--batch-size', '2']) == 1   # no step count

    @pytest.mark.parametrize('option, value, message', [
        ('--batch-size', '0', 'argument --batch-size: must be >= 1, got 0'),
        ('--batch-size', 'two', "argument --batch-size: expected an integer, got 'two'"),
        ('--max-images', '0', 'argument --max-images: must be >= 1, got 0'),
        ('--num-threads', '0', 'argument --num-threads: must be >= 1, got 0'),
        ('--steps', '0', 'argument --steps: must be >= 1, got 0'),
        ('--checkpoint-every', '0', 'argument --checkpoint-every: must be >= 1, got 0'),
        ('--val-every', '-1', 'argument --val-every: must be >= 0, got -1'),
        ('--workers', '-1', 'argument --workers: must be >= 0, got -1'),
        ('--warmup-steps', '-1', 'argument --warmup-steps: must be >= 0, got -1'),
        ('--epochs', '-1', 'argument --epochs: must be > 0, got -1'),
        ('--time-budget-min', 'nan',
         'argument --time-budget-min: must be a finite number, got nan'),
        ('--lr', '0', 'argument --lr: must be > 0, got 0'),
        ('--weight-decay', 'nan', 'argument --weight-decay: must be a finite number, got nan'),
        ('--weight-decay', '-1', 'argument --weight-decay: must be >= 0, got -1'),
        ('--grad-clip', 'nan', 'argument --grad-clip: must be a finite number, got nan'),
    ])
    def test_bad_counts_refused_where_parsed(self, tmp_path, tiny_config, capsys, option,
                                             value, message):
        """A bad count is a usage error that names the option.

        --batch-size 0 and --max-images 0 were a ZeroDivisionError and an IndexError inside
        training.
        """
        data = _write_label_folder(tmp_path / 'data', count=2)
        argv = ['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                str(tmp_path / 'o'), '--no-progress', '--steps', '1', option, value]
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / 'o').exists()

    def test_depth_loss_weights_are_checked(self, tmp_path, capsys, caplog):
        argv = ['train', 'depth', '--data', 'synth:0:2:64x48', '-o', str(tmp_path / 'o'),
                '--no-progress', '--steps', '1']
        with pytest.raises(SystemExit) as exit_info:
            main(argv + ['--silog-weight', '-1'])
        assert exit_info.value.code == 2
        assert 'argument --silog-weight: must be >= 0, got -1' in capsys.readouterr().err
        assert main(argv + ['--silog-weight', '0', '--l1-weight', '0']) == 1
        assert '--silog-weight and --l1-weight are both 0' in caplog.text
        assert not (tmp_path / 'o').exists()

    def test_bad_scale_range(self, tmp_path, tiny_config, caplog):
        data = _write_label_folder(tmp_path / 'data', count=2)
        argv = ['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                str(tmp_path / 'o'), '--no-progress', '--steps', '1', '--scale-range']
        for low, high in (('2', '0.5'), ('0', '1'), ('1', 'inf')):
            assert main(argv + [low, high]) == 1
            assert f'--scale-range needs 0 < MIN <= MAX, got {float(low):g} {float(high):g}' \
                in caplog.text
        # was OpenCV asking for 518 GB (an internal error, exit 3)
        assert main(argv + ['1000', '1000']) == 1
        assert '--scale-range: MAX 1000 is beyond the largest zoom 8' in caplog.text
        assert not (tmp_path / 'o').exists()


def _write_depth_bag(path, frames, depth_of=lambda d: d, topics_=None):
    """Write the frames (rgb, depth) as a bag: image rgb8 and ``depth_of(depth)`` as 32FC1."""
    from relperception.data import topics
    from relperception.data.bag import BagWriter

    image_topic, depth_topic = topics_ or (topics.IMAGE, topics.DEPTH)
    images, depths, _ = frames
    with BagWriter(path) as writer:
        for i, (image, depth) in enumerate(zip(images, depths)):
            stamp = 10 ** 9 + i * 10 ** 8
            writer.write_image(image_topic, stamp, image, 'rgb8')
            writer.write_image(depth_topic, stamp,
                               np.ascontiguousarray(depth_of(depth), np.float32), '32FC1')
    return path


class TestIgnoredOptions:
    """An option the run would ignore is refused; the bag topics reach every bag."""

    @pytest.mark.parametrize('extra, words', [
        (['--data', 'synth:3:2:80x64', '--max-images', '1'],
         '--max-images applies to bag data; --data synth:3:2:80x64 renders its frames itself'),
        (['--data', 'synth:3:2:80x64', '--image-topic', '/cam/rgb'],
         '--image-topic applies to bags; --data, --val-data and --report-data are all synth:'),
        (['--data', 'synth:3:2:80x64', '--val-data', 'synth:4:1:80x64', '--depth-topic', '/d'],
         '--depth-topic applies to bags'),
    ])
    def test_depth_options_that_synth_data_ignores(self, tmp_path, tiny_config, caplog, extra,
                                                   words):
        caplog.clear()
        assert main(['train', 'depth', '--config', str(tiny_config), '--steps', '1', '-o',
                     str(tmp_path / 'run'), *extra]) == 1
        assert len(_errors(caplog)) == 1 and _errors(caplog)[0].startswith(words)
        assert not (tmp_path / 'run').exists()

    def test_bag_topics_apply_to_validation_bags(self, tmp_path, tiny_config, frames):
        """--image-topic/--depth-topic were not used for --val-data / --report-data bags."""
        bag = _write_depth_bag(tmp_path / 'bag', tuple(f[:3] for f in frames),
                               topics_=('/cam/rgb', '/cam/depth'))
        out = tmp_path / 'run'
        assert main(['train', 'depth', '--config', str(tiny_config), '--data', str(bag),
                     '--val-data', str(bag), '--report-data', str(bag), '--image-topic',
                     '/cam/rgb', '--depth-topic', '/cam/depth', '--batch-size', '2',
                     '--steps', '1', '--no-progress', '-o', str(out)]) == 0
        metrics = json.loads((out / 'metrics.json').read_text())['metrics']
        assert metrics['abs_rel'] > 0 and metrics['report/bag/abs_rel'] == metrics['abs_rel']

    def test_seg_adjust_tau_and_taus_exclude_each_other(self, tmp_path, tiny_config, caplog):
        """--tau silently won over --taus."""
        data = _write_label_folder(tmp_path / 'data', count=2)
        assert main(['train', 'seg-adjust', '--config', str(tiny_config), '--init',
                     str(tmp_path / 'w.safetensors'), '--val-data', str(data), '--tau', '0.5',
                     '--taus', '0', '1', '-o', str(tmp_path / 'run')]) == 1
        assert _errors(caplog) == ['--tau and --taus exclude each other: --tau uses one tau '
                                   '(scored next to tau 0), --taus chooses among several']


class TestDataThatCannotTrain:
    """Data that cannot train is refused up front, naming the source."""

    def test_labels_without_a_labelled_pixel(self, tmp_path, tiny_config, caplog):
        """All-void labels trained to loss 0, or scored miou=nan without a best file."""
        data = _write_label_folder(tmp_path / 'data', count=2)
        void = _write_label_folder(tmp_path / 'void', count=2)
        for label in (void / 'labels').iterdir():
            cv2.imwrite(str(label), np.full((48, 64), 11, np.uint8))
        base = ['train', 'seg', '--config', str(tiny_config), '--batch-size', '2', '--steps',
                '1', '--no-progress']
        assert main([*base, '--data', str(data), '-o', str(tmp_path / 'seg')]) == 0
        words = f'{void}: no labelled pixel: every label id is >= 5 or 255 (not scored)'
        for argv in ([*base, '--data', str(void), '--class-weights', 'none'],
                     [*base, '--data', str(void)],
                     [*base, '--data', str(data), '--val-data', str(void)],
                     ['train', 'seg-adjust', '--config', str(tiny_config), '--init',
                      str(tmp_path / 'seg' / 'model.safetensors'), '--val-data', str(void),
                      '--taus', '0', '1']):
            caplog.clear()
            assert main(argv + ['-o', str(tmp_path / 'run')]) == 1
            assert len(_errors(caplog)) == 1 and _errors(caplog)[0].startswith(words), argv
            assert not (tmp_path / 'run' / 'last.pt').exists()
            assert not (tmp_path / 'run' / 'model.safetensors').exists()

    @pytest.mark.parametrize('depth_of, words', [
        (lambda d: d * 1000, 'no usable depth image on /camera/depth/image_raw (3 '
                             'implausible_range: median depth'),
        (lambda d: np.zeros_like(d), 'no usable depth image on /camera/depth/image_raw (3 '
                                     'no_valid_pixel: no valid depth pixel'),
        (lambda d: d[::2, ::2], 'no usable depth image on /camera/depth/image_raw (3 '
                                'wrong_size: depth is 40x32, the image 80x64)'),
        (lambda d: d * 2 + 20, 'is beyond the max_depth 12 m of the model'),
    ])
    def test_depth_that_cannot_train(self, tmp_path, tiny_config, frames, caplog, depth_of,
                                     words):
        """Millimetres as 32FC1 or zero depth trained silently; half-size depth was 'timing'."""
        few = tuple(f[:3] for f in frames)
        bad = _write_depth_bag(tmp_path / 'bad', few, depth_of)
        good = _write_depth_bag(tmp_path / 'good', few)
        base = ['train', 'depth', '--config', str(tiny_config), '--batch-size', '2',
                '--steps', '2', '--no-progress']
        for argv in ([*base, '--data', str(bad)],
                     [*base, '--data', str(good), '--val-data', str(bad)],
                     [*base, '--data', 'synth:3:2:80x64', '--val-data', str(good),
                      '--report-data', str(bad)]):
            caplog.clear()
            assert main(argv + ['-o', str(tmp_path / 'run')]) == 1
            errors = _errors(caplog)
            assert len(errors) == 1 and errors[0].startswith(f'{bad}: ') \
                and words in errors[0], errors
            assert not (tmp_path / 'run' / 'last.pt').exists()   # refused before step 1
        assert main([*base, '--data', str(good), '--val-data', str(good), '-o',
                     str(tmp_path / 'run')]) == 0


def _errors(caplog):
    """Return the error lines logged so far."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


class TestTrainResume:
    """A resumed run continues its checkpoint and says so when an option cannot apply."""

    def test_optimiser_options_are_the_checkpoints(self, tmp_path, tiny_config, caplog):
        """A changed --lr / --weight-decay was logged and recorded but never applied."""
        data = _write_label_folder(tmp_path / 'data', count=4)
        out = tmp_path / 'run'
        argv = ['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                str(out), '--batch-size', '2', '--no-progress', '--schedule', 'constant']
        assert main(argv + ['--steps', '2', '--lr', '1e-2', '--weight-decay', '0.5']) == 0
        for changed in (['--lr', '1e-5'], ['--weight-decay', '0']):
            caplog.clear()
            assert main(argv + ['--steps', '4', '--resume', *changed]) == 1
            errors = _errors(caplog)
            assert len(errors) == 1 and errors[0].startswith(
                f'{changed[0]} {float(changed[1]):g} differs from the ') \
                and "a resumed run keeps its checkpoint's optimiser" in errors[0]
        assert torch.load(out / 'last.pt', weights_only=True)['step'] == 2
        # left out, they are the checkpoint's (not the defaults), repeated they are accepted
        caplog.clear()
        with caplog.at_level(logging.INFO):
            assert main(argv + ['--steps', '3', '--resume']) == 0
        assert 'learning rate 1.00e-02' in caplog.text
        assert main(argv + ['--steps', '4', '--resume', '--lr', '0.01']) == 0
        state = torch.load(out / 'last.pt', weights_only=True)
        assert state['config']['lr'] == 1e-2 and state['config']['weight_decay'] == 0.5
        assert {g['weight_decay'] for g in state['optimizer']['param_groups']} == {0.0, 0.5}
        assert json.loads((out / 'metrics.json').read_text())['metrics']['train_lr'] == \
            pytest.approx(1e-2)

    def test_backbone_lr_scale_is_the_checkpoints(self, tmp_path, tiny_config, caplog):
        """A changed --backbone-lr-scale was torch's opaque 'parameter group' error."""
        out = tmp_path / 'run'
        argv = ['train', 'depth', '--config', str(tiny_config), '--data', 'synth:3:2:80x64',
                '-o', str(out), '--batch-size', '2', '--no-progress']
        assert main(argv + ['--steps', '1']) == 0
        assert main(argv + ['--steps', '2', '--resume', '--backbone-lr-scale', '0.1']) == 1
        assert _errors(caplog)[-1].startswith('--backbone-lr-scale 0.1 differs from the 0 of '
                                              f'the checkpoint {out / "last.pt"}')

    def test_a_folder_holding_a_run_is_not_overwritten(self, tmp_path, tiny_config, caplog):
        """Without --resume a new run silently replaced the run of -o (stale best* files)."""
        data = _write_label_folder(tmp_path / 'data', count=2)
        out = tmp_path / 'run'
        argv = ['train', 'seg', '--config', str(tiny_config), '--data', str(data), '-o',
                str(out), '--batch-size', '2', '--no-progress', '--steps', '1']
        assert main(argv) == 0
        before = (out / 'last.pt').read_bytes()
        caplog.clear()
        assert main(argv) == 1
        assert _errors(caplog) == [f"-o {out} already holds a run's weights "
                                   f'({out / "last.pt"}): continue a training run with --resume, '
                                   'or give another -o folder (a new run there would overwrite '
                                   'them)']
        assert (out / 'last.pt').read_bytes() == before
        matcher = ['train', 'matcher', '--config', 'loftr_lite', '--data', str(data / 'images'),
                   '-o', str(out), '--steps', '1']
        assert main(matcher) == 1 and "already holds a run's weights" in _errors(caplog)[-1]
        # seg-adjust into the training run's folder would replace its model.safetensors, and a
        # training run into a seg-adjust folder (weights, no last.pt) would replace them too
        adjust = ['train', 'seg-adjust', '--config', str(tiny_config), '--init',
                  str(out / 'model.safetensors'), '--val-data', str(data), '-o', str(out)]
        assert main(adjust) == 1 and 'holds a training run (last.pt)' in _errors(caplog)[-1]
        adjusted = tmp_path / 'adjusted'
        adjusted.mkdir()
        (adjusted / 'model.safetensors').write_bytes((out / 'model.safetensors').read_bytes())
        assert main([str(adjusted) if arg == str(out) else arg for arg in argv]) == 1
        assert f"{adjusted} already holds a run's weights" in _errors(caplog)[-1]

    def test_checkpoints_record_the_trained_heads(self, tmp_path, tiny_config):
        """A last.pt as --init counted as 'every head trained'; a resume forgot --init's record."""
        from relperception.models.weights import read_metadata, read_trained_heads

        data = _write_label_folder(tmp_path / 'data', count=2)
        common = ['--config', str(tiny_config), '--batch-size', '2', '--no-progress']
        depth_argv = ['train', 'depth', '--data', 'synth:3:2:80x64', *common]
        assert main(depth_argv + ['-o', str(tmp_path / 'depth'), '--steps', '1']) == 0
        assert read_trained_heads(tmp_path / 'depth' / 'last.pt') == ('depth',)
        # the segmentation head of that checkpoint was never trained, and stays so
        assert main(depth_argv + ['-o', str(tmp_path / 'again'), '--steps', '1', '--init',
                                  str(tmp_path / 'depth' / 'last.pt')]) == 0
        assert read_trained_heads(tmp_path / 'again' / 'model.safetensors') == ('depth',)
        # a depth run from seg weights, interrupted (time budget) and resumed without --init
        assert main(['train', 'seg', '--data', str(data), *common, '-o', str(tmp_path / 'seg'),
                     '--steps', '1']) == 0
        seg_meta = read_metadata(tmp_path / 'seg' / 'model.safetensors')
        out = tmp_path / 'run'
        assert main(depth_argv + ['-o', str(out), '--steps', '3', '--init',
                                  str(tmp_path / 'seg' / 'model.safetensors'),
                                  '--time-budget-min', '1e-9']) == 0
        assert torch.load(out / 'last.pt', weights_only=True)['step'] == 1
        assert main(depth_argv + ['-o', str(out), '--steps', '3', '--resume']) == 0
        meta = read_metadata(out / 'model.safetensors')
        assert meta['step'] == '3' and meta['trained_heads'] == 'depth,segmentation'
        assert meta['class_weights'] == seg_meta['class_weights']

    def test_checkpoints_that_cannot_be_continued(self, tmp_path, tiny_config, caplog):
        data = _write_label_folder(tmp_path / 'data', count=2)
        seg, depth = tmp_path / 'seg', tmp_path / 'depth'
        common = ['--config', str(tiny_config), '--batch-size', '2', '--no-progress']
        seg_argv = ['train', 'seg', '--data', str(data), *common]
        assert main(seg_argv + ['-o', str(seg), '--steps', '2']) == 0
        depth_argv = ['train', 'depth', '--data', 'synth:3:2:80x64', *common]
        cases = [
            (depth_argv + ['-o', str(depth), '--steps', '3', '--resume', str(seg / 'last.pt')],
             f'{seg / "last.pt"} is a checkpoint of `train seg`, not of `train depth`'),
            (seg_argv + ['-o', str(seg), '--steps', '3', '--resume',
                         str(seg / 'model.safetensors')],
             'is a weights file, not a training checkpoint such as last.pt: a run starts from '
             "weights by loading them into the model (the command line's --init)"),
            (seg_argv + ['-o', str(seg), '--steps', '1', '--resume'],
             f'--steps 1 is below the step 2 of the checkpoint {seg / "last.pt"}: nothing is '
             'left to train'),
            (seg_argv + ['-o', str(seg), '--steps', '3', '--resume', '--init',
                         str(seg / 'model.safetensors')],
             f'--init {seg / "model.safetensors"} differs from the checkpoint'),
            (['train', 'seg', '--data', str(data), '--batch-size', '2', '-o', str(seg),
              '--steps', '3', '--resume'],
             f"{seg / 'last.pt'} is a checkpoint of preset 'tiny', this run trains --config "
             'fast_seg'),
        ]
        for argv, words in cases:
            caplog.clear()
            assert main(argv) == 1
            errors = _errors(caplog)
            assert len(errors) == 1 and words in errors[0], (words, errors)
        assert torch.load(seg / 'last.pt', weights_only=True)['step'] == 2
        assert not depth.exists()


def read_state(path):
    """Return the tensors of a weights file."""
    from relperception.models.weights import load_state_dict_file

    return load_state_dict_file(path)


def _tiny_state(config):
    """Return the state dict of a seeded model of ``config``."""
    torch.manual_seed(0)
    return build_dense_model(load_model_config(config)).state_dict()


def _write_palette_png(path, indices, palette):
    """Write (H, W) uint8 ``indices`` as an 8-bit palette PNG with (256, 3) ``palette``."""
    import struct
    import zlib

    def chunk(kind, body):
        return struct.pack('>I', len(body)) + kind + body + \
            struct.pack('>I', zlib.crc32(kind + body) & 0xFFFFFFFF)
    height, width = indices.shape
    rows = b''.join(b'\x00' + row.tobytes() for row in np.ascontiguousarray(indices, np.uint8))
    Path(path).write_bytes(b'\x89PNG\r\n\x1a\n'
                           + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height, 8, 3, 0, 0, 0))
                           + chunk(b'PLTE', np.asarray(palette, np.uint8).tobytes())
                           + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b''))


def _write_label_folder(root, count=3, h=48, w=64, edges=None, prefix='f'):
    """Write ``count`` images with labels 0..4 and raw 11 (CamVid 'Unlabelled') stripes.

    The stripes are of equal width, or end at the columns ``edges`` (five values); the files
    are ``<prefix><i>.png`` (``prefix='seq_'``: frames of the recording sequence ``seq``).
    """
    (root / 'images').mkdir(parents=True, exist_ok=True)
    (root / 'labels').mkdir(parents=True, exist_ok=True)
    for i in range(count):
        label = (np.arange(w)[None].repeat(h, 0) // (w // 6)).clip(0, 5).astype(np.uint8)
        if edges is not None:
            label = np.digitize(np.arange(w), edges)[None].repeat(h, 0).astype(np.uint8)
        label[label == 5] = 11
        image = _image(h, w, seed=i)
        image[label == 2] = (200, 30, 30)
        cv2.imwrite(str(root / 'images' / f'{prefix}{i}.png'), image[..., ::-1])
        cv2.imwrite(str(root / 'labels' / f'{prefix}{i}.png'), label)
    return root
