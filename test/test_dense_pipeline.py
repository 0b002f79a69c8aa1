# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""DensePipeline on synthetic frames with tiny randomly initialised models (fast on a CPU)."""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip('torch')
pytest.importorskip('relperception.models.preprocess')

from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.models.dense import build_dense_model  # noqa: E402
from relperception.models.preprocess import prepare_image  # noqa: E402
from relperception.models.presets import load_model_config  # noqa: E402
from relperception.models.weights import save_weights  # noqa: E402
from relperception.pipeline.dense_pipeline import (  # noqa: E402
    colorize_raw_depth,
    DensePipeline,
    depth_to_metres,
    labels_from_logits,
    model_name,
)

WIDTH, HEIGHT = 80, 60          # camera images (not the network size: outputs are resized)
NET_WIDTH, NET_HEIGHT = 96, 64  # tiny network input

TINY_MODELS = {
    'conv': ('base: conv_small\n'
             'model:\n'
             '  backbone: {name: resnet18, width: 0.125}\n'
             '  depth_mode: DEPTH_MODE\n'
             '  heads:\n'
             '    depth: {features: 8, head_features: 8}\n'
             '    segmentation: SEGMENTATION\n'
             'class_names: CLASS_NAMES\n'
             f'input: {{height: {NET_HEIGHT}, width: {NET_WIDTH}, multiple: 32}}\n'),
    'vit': ('base: vit_small\n'
            'model:\n'
            '  backbone: {name: vit, embed_dim: 32, num_heads: 2, depth: 4, patch_size: 16,\n'
            '             img_size: 64, out_indices: [0, 1, 2, 3]}\n'
            '  depth_mode: DEPTH_MODE\n'
            '  heads:\n'
            '    depth: {features: 8, head_features: 8}\n'
            '    segmentation: SEGMENTATION\n'
            'class_names: CLASS_NAMES\n'
            f'input: {{height: {NET_HEIGHT}, width: {NET_WIDTH}, multiple: 16}}\n'),
}


def write_tiny_model(folder, kind='conv', relative=False, segmentation=True, seed=0):
    """Write a tiny model YAML and random weights for it; return (yaml path, weights path)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f'tiny_{kind}_{"rel" if relative else "met"}_{"seg" if segmentation else "noseg"}'
    text = TINY_MODELS[kind].replace('DEPTH_MODE', 'relative' if relative else 'metric')
    text = text.replace('SEGMENTATION', '{num_classes: 3, features: 8}' if segmentation
                        else 'null')
    text = text.replace('CLASS_NAMES', '[floorish, wallish, other]' if segmentation else '[]')
    yaml_path = folder / f'{stem}.yaml'
    yaml_path.write_text(text, encoding='utf-8')
    torch.manual_seed(seed)
    model = build_dense_model(load_model_config(yaml_path))
    weights = save_weights(model, folder / f'{stem}.safetensors')
    return str(yaml_path), str(weights)


def tiny_config(yaml_path, weights_path, **extra):
    config = {'dense.model': yaml_path, 'dense.weights': weights_path}
    config.update({f'dense.{k}': v for k, v in extra.items()})
    return config


@pytest.fixture(scope='module')
def rgb_frames():
    _, sequence = iter_sequence(2, seed=1, width=WIDTH, height=HEIGHT)
    return [frame.rgb for frame in sequence]


@pytest.fixture(scope='module')
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp('dense_models')
    return {
        'conv': write_tiny_model(folder, 'conv'),
        'conv_relative': write_tiny_model(folder, 'conv', relative=True),
        'conv_depth_only': write_tiny_model(folder, 'conv', segmentation=False),
        'vit': write_tiny_model(folder, 'vit'),
    }


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


class TestDepthToMetres:

    def test_metric_nan_handling(self):
        raw = np.array([[0.05, 1.0, 50.0], [np.inf, np.nan, -2.0]], np.float32)
        depth = depth_to_metres(raw, False, 1.0, 0.1, 40.0)
        assert depth.dtype == np.float32 and depth.shape == raw.shape
        np.testing.assert_array_equal(np.isnan(depth), [[True, False, True], [True, True, True]])
        assert depth[0, 1] == 1.0

    def test_relative_scaling(self):
        inverse = np.array([[0.5, 2.0], [0.0, -1.0]], np.float32)
        depth = depth_to_metres(inverse, True, 3.0, 0.1, 80.0)
        np.testing.assert_allclose(depth[0], [6.0, 1.5])
        assert np.isnan(depth[1]).all()            # zero and negative inverse depth: invalid

    def test_degenerate(self):
        with pytest.raises(ValueError, match='depth_scale'):
            depth_to_metres(np.ones((2, 2)), True, 0.0, 0.1, 1.0)
        with pytest.raises(ValueError, match='min_depth_m'):
            depth_to_metres(np.ones((2, 2)), False, 1.0, 5.0, 1.0)
        with pytest.raises(ValueError, match='H, W'):
            depth_to_metres(np.ones(3), False, 1.0, 0.1, 1.0)


class TestLabelsFromLogits:

    def test_shape_and_reference(self):
        logits = np.zeros((3, 2, 2), np.float32)
        logits[0, 0, 0] = logits[1, 0, 1] = logits[2, 1, :] = 5.0
        labels = labels_from_logits(logits, 20, 30)
        assert labels.shape == (20, 30) and labels.dtype == np.uint8
        assert labels[0, 0] == 0 and labels[0, -1] == 1 and (labels[-1] == 2).all()

    def test_reference_many_classes(self):
        logits = np.random.default_rng(0).normal(size=(11, 12, 16)).astype(np.float32)
        same = labels_from_logits(logits, 12, 16)
        np.testing.assert_array_equal(same, np.argmax(logits, axis=0))
        upsampled = torch.nn.functional.interpolate(torch.from_numpy(logits)[None], (36, 48),
                                                    mode='bilinear', align_corners=False)
        expected = upsampled[0].argmax(0).numpy()
        assert np.mean(labels_from_logits(logits, 36, 48) == expected) > 0.995

    def test_degenerate(self):
        with pytest.raises(ValueError, match='C, h, w'):
            labels_from_logits(np.zeros((4, 4)), 4, 4)
        with pytest.raises(ValueError, match='C, h, w'):
            labels_from_logits(np.zeros((300, 2, 2)), 4, 4)


class TestDensePipeline:

    def test_smoke_shapes(self, models, rgb_frames):
        pipeline = DensePipeline(tiny_config(*models['conv']))
        assert not pipeline.relative and pipeline.has_segmentation
        assert pipeline.class_names == ['floorish', 'wallish', 'other']
        result = pipeline.run(rgb_frames[0])
        assert result.depth.shape == result.raw_depth.shape == (HEIGHT, WIDTH)
        assert result.depth.dtype == result.raw_depth.dtype == np.float32
        assert result.labels.shape == (HEIGHT, WIDTH) and result.labels.dtype == np.uint8
        assert result.labels.max() < 3
        assert result.logits.shape == (3, NET_HEIGHT, NET_WIDTH)
        assert result.depth_color.shape == result.labels_color.shape == (HEIGHT, WIDTH, 3)
        assert result.depth_color.dtype == result.labels_color.dtype == np.uint8
        finite = np.isfinite(result.depth)
        assert finite.any()
        assert (result.depth[finite] >= 0.1).all() and (result.depth[finite] <= 80.0).all()
        assert set(result.timing_ms) == {'preprocess', 'inference', 'postprocess', 'total'}
        assert pipeline.run(rgb_frames[0], colors=False).depth_color is None

    def test_reference_equals_the_model(self, models, rgb_frames):
        yaml_path, weights = models['conv']
        pipeline = DensePipeline(tiny_config(yaml_path, weights))
        conf = load_model_config(yaml_path)
        model = build_dense_model(conf, weights=weights).eval()
        with torch.no_grad():
            out = model(prepare_image(rgb_frames[1], conf))
        raw = pipeline.infer_raw(rgb_frames[1])
        np.testing.assert_allclose(raw['depth'], out['depth'][0, 0].numpy(), atol=1e-5)
        np.testing.assert_allclose(raw['logits'], out['logits'][0].numpy(), atol=1e-5)
        result = pipeline.run(rgb_frames[1])
        # metric model: depth is the (resized) prediction wherever it is in range
        finite = np.isfinite(result.depth)
        np.testing.assert_array_equal(result.depth[finite], result.raw_depth[finite])

    def test_relative_depth_scale(self, models, rgb_frames):
        config = tiny_config(*models['conv_relative'], min_depth_m=0.0, max_depth_m=1e4)
        one = DensePipeline(config).run(rgb_frames[0])
        assert one.relative
        config['dense.depth_scale'] = 2.5
        scaled = DensePipeline(config).run(rgb_frames[0])
        positive = one.raw_depth > 1e-3
        assert positive.any()
        np.testing.assert_allclose(one.depth[positive], 1.0 / one.raw_depth[positive],
                                   rtol=1e-5)
        np.testing.assert_allclose(scaled.depth[positive], 2.5 * one.depth[positive],
                                   rtol=1e-5)
        assert np.isnan(one.depth[one.raw_depth <= 0]).all()

    def test_depth_range_gives_nan(self, models, rgb_frames):
        base = DensePipeline(tiny_config(*models['conv'], min_depth_m=0.0, max_depth_m=1e4))
        raw = base.run(rgb_frames[0]).raw_depth
        low, high = np.percentile(raw, [30, 70])
        narrow = DensePipeline(tiny_config(*models['conv'], min_depth_m=float(low),
                                           max_depth_m=float(high)))
        depth = narrow.run(rgb_frames[0]).depth
        np.testing.assert_array_equal(np.isnan(depth), (raw < low) | (raw > high))

    def test_depth_only_model_has_no_labels(self, models, rgb_frames):
        result = DensePipeline(tiny_config(*models['conv_depth_only'])).run(rgb_frames[0])
        assert result.labels is None and result.logits is None and result.labels_color is None
        assert result.depth.shape == (HEIGHT, WIDTH)

    def test_vit_backbone(self, models, rgb_frames):
        result = DensePipeline(tiny_config(*models['vit'])).run(rgb_frames[0])
        assert result.depth.shape == (HEIGHT, WIDTH) and result.labels.shape == (HEIGHT, WIDTH)

    def test_input_size_override(self, models, rgb_frames):
        pipeline = DensePipeline(tiny_config(*models['conv'], input_width=64, input_height=32))
        assert pipeline.infer_raw(rgb_frames[0])['depth'].shape == (32, 64)
        assert pipeline.run(rgb_frames[0]).depth.shape == (HEIGHT, WIDTH)

    def test_onnxruntime_matches_torch(self, models, rgb_frames, tmp_path):
        pytest.importorskip('onnxruntime')
        export = pytest.importorskip('relperception.pipeline.export')
        yaml_path, weights = models['conv']
        onnx_path = export.export_model(yaml_path, tmp_path / 'tiny.onnx', weights=weights,
                                        size=(NET_HEIGHT, NET_WIDTH))
        torch_result = DensePipeline(tiny_config(yaml_path, weights)).run(rgb_frames[0])
        ort = DensePipeline(tiny_config(yaml_path, '', backend='onnxruntime',
                                        onnx_path=str(onnx_path)))
        assert ort.has_segmentation and ort.output_names == ['depth', 'logits']
        ort_result = ort.run(rgb_frames[0])
        np.testing.assert_allclose(ort_result.raw_depth, torch_result.raw_depth, rtol=1e-4,
                                   atol=1e-4)
        agree = np.mean(ort_result.labels == torch_result.labels)
        assert agree > 0.99

    def test_onnxruntime_threads_reach_the_session(self, models, tmp_path):
        """dense.onnxruntime_threads sets the session's threads; sessions never spin-wait."""
        pytest.importorskip('onnxruntime')
        export = pytest.importorskip('relperception.pipeline.export')
        yaml_path, weights = models['conv']
        onnx_path = export.export_model(yaml_path, tmp_path / 'tiny.onnx', weights=weights,
                                        size=(NET_HEIGHT, NET_WIDTH))
        for threads in (1, 2):
            pipeline = DensePipeline(tiny_config(yaml_path, '', backend='onnxruntime',
                                                 onnx_path=str(onnx_path),
                                                 onnxruntime_threads=threads))
            options = pipeline.backend.session.get_session_options()
            assert options.intra_op_num_threads == threads
            assert options.get_session_config_entry('session.intra_op.allow_spinning') == '0'
        for bad in (-1, 257, 1.5, 'two'):
            with pytest.raises(ValueError, match='onnxruntime_threads'):
                DensePipeline(tiny_config(yaml_path, '', backend='onnxruntime',
                                          onnx_path=str(onnx_path), onnxruntime_threads=bad))

    def test_default_model_names(self):
        assert model_name({'model': '', 'backbone': 'conv'}) == 'fast_seg'
        assert model_name({'model': '', 'backbone': 'vit'}) == 'vit_hybrid'
        assert model_name({'model': 'x.yaml', 'backbone': 'vit'}) == 'x.yaml'

    def test_degenerate(self, models, rgb_frames, tmp_path):
        pipeline = DensePipeline(tiny_config(*models['conv']))
        for bad in (rgb_frames[0][..., 0], rgb_frames[0].astype(np.float32),
                    np.zeros((0, 4, 3), np.uint8), None):
            with pytest.raises(ValueError, match='uint8 RGB'):
                pipeline.run(bad)
        yaml_path, _ = models['conv']
        with pytest.raises(ValueError, match='not found'):
            DensePipeline(tiny_config(yaml_path, str(tmp_path / 'missing.safetensors')))
        with pytest.raises(ValueError, match='onnx_path'):
            DensePipeline(tiny_config(yaml_path, '', backend='onnxruntime'))
        with pytest.raises(ValueError, match='preset'):
            DensePipeline({'dense.model': 'no_such_model'})
        with pytest.raises(ValueError, match='together'):
            DensePipeline(tiny_config(*models['conv'], input_width=64))
        with pytest.raises(ValueError, match='multiples'):
            DensePipeline(tiny_config(*models['conv'], input_width=70, input_height=64))
        with pytest.raises(ValueError, match='weights'):   # the DA-v2 preset ships none
            DensePipeline({'dense.model': 'depth_anything_v2_vits'})
        with pytest.raises(ValueError, match='unknown parameter'):
            DensePipeline({'dense.nope': 1})
        if not torch.cuda.is_available():
            with pytest.raises(ValueError, match='CUDA'):
                DensePipeline(tiny_config(*models['conv'], device='cuda'))


class TestColorizeRawDepth:

    def test_relative_is_inverted(self):
        inverse = np.array([[4.0, 1.0]], np.float32)     # left nearer
        relative = colorize_raw_depth(inverse, True)
        metric = colorize_raw_depth(1.0 / inverse, False)
        np.testing.assert_array_equal(relative, metric)
        assert relative[0, 0, 2] > relative[0, 0, 0]    # near: blue end of turbo


class TestOfflineDenseEvaluation:

    def test_dense_report_from_a_synthetic_bag(self, models, tmp_path):
        from relperception.data.synthetic_bag import write_synthetic_bag
        from relperception.pipeline.offline_eval import evaluate_bag

        bag = tmp_path / 'bag'
        write_synthetic_bag(bag, frames=5, width=WIDTH * 2, height=HEIGHT * 2)
        out = tmp_path / 'report'
        summary = evaluate_bag(bag, out, tiny_config(*models['conv']), progress=False,
                               dense=True, dense_stride=2, dense_samples=1)
        dense = summary['dense']
        assert dense['frames_evaluated'] == 3          # images 0, 2, 4
        assert dense['topics'] == {'depth': '/camera/depth/image_raw',
                                   'labels': '/ground_truth/labels'}
        assert dense['depth']['num_images'] == 3 and dense['depth']['abs_rel'] > 0
        segmentation = dense['segmentation']
        assert set(segmentation['per_class_iou']) == {'floorish', 'wallish', 'other'}
        assert 0.0 <= segmentation['miou'] <= 1.0 and segmentation['num_pixels'] > 0
        # the synthetic classes 3 and 4 do not exist in the 3-class model: ignored, counted
        assert dense['unknown_gt_label_pixels'] > 0
        for name in ('confusion_matrix.png', 'dense_samples/depth_0.png',
                     'dense_samples/labels_0.png'):
            assert (out / name).is_file(), name
        assert summary['outputs']['confusion_matrix'] == 'confusion_matrix.png'
        assert summary['frames_processed'] == 5        # the VO report is unchanged
        assert summary['num_errors'] == 0

    def test_ground_truth_the_odometry_refuses_is_not_scored(self, models, tmp_path):
        """Byte-swapped or millimetre ground-truth depth and colour labels: refused, counted."""
        from relperception.data import topics
        from relperception.data.bag import BagWriter
        from relperception.imaging.image_encodings import numpy_to_image_fields
        from relperception.pipeline.offline_eval import evaluate_bag

        camera, sequence = iter_sequence(2, seed=1, width=WIDTH, height=HEIGHT)
        bag = tmp_path / 'bag'
        with BagWriter(bag) as writer:
            image_type = writer.typestore.types[topics.IMAGE_MSGTYPE]
            for index, frame in enumerate(sequence):
                stamp = frame.stamp_ns
                writer.write_camera_info(topics.CAMERA_INFO, stamp, camera)
                writer.write_image(topics.IMAGE, stamp, frame.rgb, 'rgb8')
                if index == 0:   # little-endian millimetres flagged big-endian
                    millimetres = np.nan_to_num(frame.depth * 1000.0).astype(np.uint16)
                    fields = numpy_to_image_fields(millimetres, '16UC1')
                    fields['is_bigendian'] = 1
                else:            # millimetres labelled 32FC1 (metres)
                    fields = numpy_to_image_fields(frame.depth * 1000.0, '32FC1')
                writer.write_message(topics.DEPTH, topics.IMAGE_MSGTYPE, stamp, image_type(
                    header=writer.header(stamp, topics.CAMERA_FRAME), **fields))
                palette = np.array([(128, 64, 128, 255), (0, 0, 192, 255)] * 128, np.uint8)
                writer.write_image(topics.GT_LABELS, stamp, palette[frame.labels], 'bgra8')
        summary = evaluate_bag(bag, tmp_path / 'out', tiny_config(*models['conv']),
                               mode='mono', progress=False, plots=False, dense=True)
        dense = summary['dense']
        assert dense['frames_evaluated'] == 2
        assert dense['depth_refused'] == {'byte_swapped': 1, 'implausible_range': 1}
        assert dense['depth'] is None          # nothing scored against refused depth
        assert dense['labels_refused'] == 2 and dense['segmentation'] is None
        joined = '\n'.join(summary['errors'])
        assert 'looks byte-swapped' in joined and 'millimetres labelled 32FC1' in joined
        assert 'bgra8 has 4 channels' in joined

    @pytest.mark.parametrize('label_ids, words', [
        (lambda labels: np.full_like(labels, 255), 'every pixel is the ignore id'),
        (lambda labels: (labels.astype(np.uint16) + 1) * 1000, 'e.g. 1000, 2000'),
    ], ids=['all_ignore', 'dataset_ids'])
    def test_labels_the_model_cannot_score_are_named(self, models, tmp_path, label_ids,
                                                     words):
        """Label ids all 255, or all outside the model's classes: said, not a silent 0 / NaN."""
        from relperception.data import topics
        from relperception.data.bag import BagWriter
        from relperception.evaluation.html_report import dense_key_figures
        from relperception.pipeline.offline_eval import evaluate_bag

        camera, sequence = iter_sequence(2, seed=1, width=WIDTH, height=HEIGHT)
        bag = tmp_path / 'bag'
        with BagWriter(bag) as writer:
            for frame in sequence:
                writer.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns, camera)
                writer.write_image(topics.IMAGE, frame.stamp_ns, frame.rgb, 'rgb8')
                ids = label_ids(frame.labels)
                writer.write_image(topics.GT_LABELS, frame.stamp_ns, ids,
                                   'mono8' if ids.dtype == np.uint8 else '16UC1')
        # the error was missing before: the summary had mIoU NaN (or 0.0) and no error
        summary = evaluate_bag(bag, tmp_path / 'out', tiny_config(*models['conv']),
                               mode='mono', progress=False, plots=False, dense=True)
        assert sum(words in text for text in summary['errors']) == 1, summary['errors']
        if words.startswith('every'):
            assert 'no label pixel scored' in dense_key_figures(summary['dense'])
            assert 'nan' not in dense_key_figures(summary['dense'])

    def test_relative_model_is_aligned_and_bad_setups_are_reported(self, models, tmp_path):
        from relperception.data.synthetic_bag import write_synthetic_bag
        from relperception.pipeline.offline_eval import evaluate_bag

        bag = tmp_path / 'bag'
        write_synthetic_bag(bag, frames=2, width=WIDTH, height=HEIGHT)
        summary = evaluate_bag(bag, tmp_path / 'rel', tiny_config(*models['conv_relative']),
                               progress=False, plots=False, dense=True)
        dense = summary['dense']
        assert dense['relative'] and 'scale and shift' in dense['depth_alignment']
        assert dense['depth']['num_images'] == 2
        assert dense['segmentation'] is not None
        missing = evaluate_bag(bag, tmp_path / 'missing', {'dense.model': 'conv_small',
                                                           'dense.weights': '/no/such.pt'},
                               progress=False, plots=False, dense=True)
        assert 'skipped' in missing['dense'] and missing['num_errors'] >= 1
        assert missing['frames_processed'] == 2
        without = evaluate_bag(bag, tmp_path / 'none', {
            **tiny_config(*models['conv']), 'topics.depth': '', 'topics.ground_truth_labels': ''},
            progress=False, plots=False, dense=True)
        assert 'neither' in without['dense']['skipped']
