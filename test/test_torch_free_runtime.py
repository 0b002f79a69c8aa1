# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The runtime without torch: onnxruntime paths that never import torch.

1. The numpy pre- and post-processing of the runtime path against the torch functions it
   replaces: ``prepare_image_array`` is ``prepare_image`` bit for bit, ``resize_output_array``
   and ``resize_depth`` are ``resize_output`` within 3 float32 ulp (nearest labels: equal).
2. Tiny models are exported here (torch present), then ``torch_free_child.py`` runs in a
   subprocess whose ``sys.meta_path`` refuses torch, torchvision and kornia before anything is
   imported: the dense pipeline, the LoFTR matcher (single graph and two-stage), ``VOPipeline``
   with ``matcher: loftr`` and the three nodes, all on onnxruntime. Their outputs must be those
   of the same files run here, torch loaded, and torch must never have been imported there.
"""

import json
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip('torch')
pytest.importorskip('onnxruntime')

from relperception.config import load_config, section  # noqa: E402
from relperception.core_types import Frame  # noqa: E402
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.imaging import to_mono8  # noqa: E402
from relperception.matching.base import build_matcher  # noqa: E402
from relperception.models.preprocess import (  # noqa: E402
    prepare_image,
    prepare_image_array,
    resize_output,
    resize_output_array,
)
from relperception.models.presets import load_model_config  # noqa: E402
from relperception.odometry.mount import (  # noqa: E402
    camera_mount_transform,
    DEFAULT_CAMERA_MOUNT_XYZ_QXYZW as DEFAULT_CAMERA_MOUNT,
)
from relperception.pipeline.dense_pipeline import (  # noqa: E402
    DensePipeline,
    depth_to_metres,
    labels_from_logits,
    resize_depth,
)
from relperception.pipeline.export import export_model  # noqa: E402
from relperception.pipeline.vo_pipeline import VOPipeline  # noqa: E402
from relperception.transforms import invert_transform  # noqa: E402
from test_dense_pipeline import NET_HEIGHT, NET_WIDTH, write_tiny_model  # noqa: E402

WIDTH, HEIGHT, FRAMES, SEED = 160, 120, 4, 0   # LoFTR runs at the image size (multiples of 8)
CHILD = Path(__file__).with_name('torch_free_child.py')
#: (h, w) -> (H, W) resizes: up, down, mixed, odd, identity on one axis, from / to one pixel.
RESIZES = [((64, 96), (60, 80)), ((16, 24), (480, 640)), ((37, 50), (120, 77)),
           ((60, 80), (60, 81)), ((518, 700), (480, 640)), ((1, 5), (3, 9)), ((7, 9), (1, 1)),
           ((2, 3), (5, 7))]

pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


def _torch_resize(array, size, kind):
    return resize_output(torch.from_numpy(np.ascontiguousarray(array)), size, kind).numpy()


def _within_ulps(got, expected, scale, ulps=3):
    """Assert |got - expected| <= ``ulps`` float32 ulp of ``scale`` (the inputs' magnitude)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    error = float(np.abs(got.astype(np.float64) - expected).max())
    assert error <= ulps * float(np.spacing(np.float32(scale))), error


class TestNumpyPreprocessing:
    """The torch-free functions against the torch ones they replace."""

    @pytest.mark.parametrize('preset', ['conv_small', 'depth_anything_v2_vits'])
    @pytest.mark.parametrize('shape', [(60, 80), (37, 101), (240, 320)])
    def test_prepare_image_array_is_prepare_image(self, preset, shape):
        conf = load_model_config(preset)
        rgb = np.random.default_rng(shape[1]).integers(0, 256, (*shape, 3), dtype=np.uint8)
        array = prepare_image_array(rgb, conf)
        assert isinstance(array, np.ndarray) and array.dtype == np.float32
        assert array.flags['C_CONTIGUOUS']
        np.testing.assert_array_equal(array, prepare_image(rgb, conf).numpy())

    @pytest.mark.parametrize('source,target', RESIZES)
    def test_bilinear_within_3_ulp_of_torch(self, source, target):
        rng = np.random.default_rng(source[0] * 1000 + target[1])
        depth = (rng.random((1, 1, *source)) * 10 + 0.1).astype(np.float32)
        got = resize_output_array(depth, target, 'depth')
        _within_ulps(got, _torch_resize(depth, target, 'depth'), depth.max())
        np.testing.assert_array_max_ulp(got, _torch_resize(depth, target, 'depth'), maxulp=3)
        logits = rng.normal(0, 5, (2, 5, *source)).astype(np.float32)
        got = resize_output_array(logits, target, 'logits')
        _within_ulps(got, _torch_resize(logits, target, 'logits'), np.abs(logits).max())

    @pytest.mark.parametrize('source,target', RESIZES + [((30, 40), (60, 80))])
    @pytest.mark.parametrize('dtype', [np.uint8, np.int64])
    def test_nearest_labels_equal_torch(self, source, target, dtype):
        labels = np.random.default_rng(3).integers(0, 11, (1, 1, *source)).astype(dtype)
        got = resize_output_array(labels, target, 'labels')
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, _torch_resize(labels, target, 'labels'))

    def test_resize_depth_within_3_ulp_of_the_torch_path(self):
        depth = (np.random.default_rng(5).random((64, 96)) * 30).astype(np.float32)
        got = resize_depth(depth, 60, 80)
        expected = _torch_resize(depth[None, None], (60, 80), 'depth')[0, 0]
        assert got.shape == (60, 80) and got.dtype == np.float32
        np.testing.assert_array_max_ulp(got, expected, maxulp=3)
        np.testing.assert_array_equal(resize_depth(depth, 64, 96), depth)

    @pytest.mark.parametrize('args,message', [
        ((np.zeros((4, 4), np.float32), (2, 2)), r'\(B, C, h, w\)'),
        ((np.zeros((1, 1, 4, 4), np.float32), (0, 2)), 'positive'),
        ((np.zeros((1, 1, 0, 4), np.float32), (2, 2)), 'positive'),
        ((np.zeros((1, 1, 4, 4), np.float32), (2, 2), 'cubic'), 'kind'),
    ])
    def test_resize_output_array_rejects(self, args, message):
        with pytest.raises(ValueError, match=message):
            resize_output_array(*args)

    def test_resize_depth_rejects_non_2d(self):
        with pytest.raises(ValueError, match=r'\(h, w\)'):
            resize_depth(np.zeros((1, 4, 4), np.float32), 8, 8)


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    """Export the tiny dense model and loftr_lite (single graph, two-stage); return the args."""
    folder = tmp_path_factory.mktemp('torch_free')
    yaml_path, weights = write_tiny_model(folder, 'conv')
    dense_onnx = export_model(yaml_path, folder / 'dense.onnx', weights=weights,
                              size=(NET_HEIGHT, NET_WIDTH))
    # the shipped loftr_lite weights: real matches, so the VO tracks
    single = export_model('loftr_lite', folder / 'lite.onnx', size=(HEIGHT, WIDTH))
    two_stage = export_model('loftr_lite', folder / 'lite2.onnx', size=(HEIGHT, WIDTH),
                             two_stage=True)
    args = {'dense_model': yaml_path, 'dense_onnx': str(dense_onnx), 'loftr_onnx': str(single),
            'loftr_two_stage': str(two_stage), 'width': WIDTH, 'height': HEIGHT,
            'frames': FRAMES, 'seed': SEED}
    (folder / 'args.json').write_text(json.dumps(args), encoding='utf-8')
    return folder / 'args.json', args


@pytest.fixture(scope='module')
def child(exported):
    """Run torch_free_child.py on the exports; return its JSON results."""
    args_path, _ = exported
    done = subprocess.run([sys.executable, str(CHILD), str(args_path)], capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines, f'no output; stderr: {done.stderr[-3000:]}'
    result = json.loads(lines[-1])
    assert 'error' not in result, result['error']
    return result


@pytest.fixture(scope='module')
def sequence():
    camera, frames = iter_sequence(FRAMES, seed=SEED, width=WIDTH, height=HEIGHT)
    return camera, list(frames)


def loftr_config(onnx_path):
    return load_config(overrides={
        'matcher': 'loftr', 'loftr.preset': 'loftr_lite', 'loftr.backend': 'onnxruntime',
        'loftr.onnx_path': str(onnx_path), 'loftr.input_width': WIDTH,
        'loftr.input_height': HEIGHT})


def dense_pipeline(args):
    return DensePipeline({'dense.model': args['dense_model'], 'dense.weights': '',
                          'dense.backend': 'onnxruntime', 'dense.onnx_path': args['dense_onnx']})


def match(onnx_path, frames):
    matcher = build_matcher('loftr', section(loftr_config(onnx_path), 'loftr'))
    return matcher.match(*(to_mono8(frame.rgb, 'rgb8') for frame in frames[:2]))


def vo_poses(args, camera, frames):
    pipeline = VOPipeline(loftr_config(args['loftr_onnx']))
    results = [pipeline.process(Frame(f.rgb, f.stamp_ns, camera, f.depth)) for f in frames]
    pipeline.odometry.close()
    return [r.status for r in results], [r.T_world_cam for r in results]


def same_depth(got, expected):
    got = np.asarray(got, np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(got[np.isfinite(got)], expected[np.isfinite(expected)])


def same_matches(got, expected, atol=0.0):
    assert len(got['keypoints0']) == len(expected) > 20
    for name in ('keypoints0', 'keypoints1'):
        np.testing.assert_allclose(np.asarray(got[name], np.float32), getattr(expected, name),
                                   rtol=0, atol=atol)


class TestWithoutTorch:
    """The child process, torch blocked, gives the outputs computed here with torch loaded."""

    def test_torch_was_never_imported(self, child):
        assert child['preloaded'] == []   # the blocker was in place before any import
        assert child['blocked_attempts'] == []   # no code even tried (optional imports too)
        assert child['torch_modules'] == []
        assert 'torch' in sys.modules   # here torch is loaded: the references below use it

    def test_dense_pipeline(self, child, exported, sequence):
        _, args = exported
        _, frames = sequence
        rgb = frames[0].rgb
        pipeline = dense_pipeline(args)
        result = pipeline.run(rgb)
        same_depth(child['dense']['raw_depth'], result.raw_depth)
        same_depth(child['dense']['depth'], result.depth)
        np.testing.assert_array_equal(child['dense']['labels'], result.labels)
        # the former torch pre- and post-processing around the same graph
        outputs = pipeline.backend.run({'image': prepare_image(rgb, pipeline.model_conf).numpy()})
        raw = _torch_resize(outputs['depth'], rgb.shape[:2], 'depth')[0, 0]
        got = np.asarray(child['dense']['raw_depth'], np.float32)
        _within_ulps(got, raw, np.abs(outputs['depth']).max())
        conf = pipeline.conf
        depth = depth_to_metres(raw, pipeline.relative, conf['depth_scale'], conf['min_depth_m'],
                                conf['max_depth_m'])
        np.testing.assert_array_equal(np.isnan(child['dense']['depth']), np.isnan(depth))
        np.testing.assert_array_equal(child['dense']['labels'],
                                      labels_from_logits(outputs['logits'][0], *rgb.shape[:2]))

    @pytest.mark.parametrize('name', ['loftr_onnx', 'loftr_two_stage'])
    def test_loftr_matcher(self, child, exported, sequence, name):
        _, args = exported
        expected = match(args[name], sequence[1])
        same_matches(child[name], expected)
        np.testing.assert_array_equal(np.asarray(child[name]['confidence'], np.float32),
                                      expected.confidence)

    def test_vo_pipeline(self, child, exported, sequence):
        _, args = exported
        status, poses = vo_poses(args, *sequence)
        assert child['vo']['status'] == status == ['initialized'] + ['tracking'] * (FRAMES - 1)
        np.testing.assert_allclose(child['vo']['poses'], poses, rtol=0, atol=1e-9)
        assert np.linalg.norm(poses[-1][:3, 3]) > 0.1   # it moved

    def test_dense_node(self, child, exported, sequence):
        _, args = exported
        result = dense_pipeline(args).run(sequence[1][0].rgb)
        same_depth(child['dense_node']['depth'], result.depth)
        np.testing.assert_array_equal(child['dense_node']['labels'], result.labels)

    def test_matcher_node(self, child, exported, sequence):
        _, args = exported
        _, frames = sequence
        assert child['matcher_node']['stamp0_ns'] == frames[0].stamp_ns
        same_matches(child['matcher_node'], match(args['loftr_two_stage'], frames), atol=2e-3)

    def test_vo_node(self, child, exported, sequence):
        _, args = exported
        _, poses = vo_poses(args, *sequence)
        T_base_cam = camera_mount_transform(DEFAULT_CAMERA_MOUNT)
        got = [invert_transform(T_base_cam) @ np.asarray(pose) @ T_base_cam
               for pose in child['vo_node']['poses']]
        assert len(got) == FRAMES
        np.testing.assert_allclose(got, poses, rtol=0, atol=1e-6)


def test_a_verb_that_needs_torch_says_what_to_install(tmp_path):
    """Without torch (a pip-only install), ``match --config loftr_lite`` exits 1 and says so."""
    from relperception.imaging import write_image

    images = []
    for index, frame in enumerate(iter_sequence(2, seed=SEED, width=WIDTH, height=HEIGHT)[1]):
        images.append(str(write_image(tmp_path / f'{index}.png', frame.rgb)))
    script = ('import sys; sys.path.insert(0, sys.argv[1]); import torch_free_child; '
              'from relperception.cli.main import main; sys.exit(main(sys.argv[2:]))')
    done = subprocess.run([sys.executable, '-c', script, str(CHILD.parent), 'match', '--config',
                           'loftr_lite', *images, '-o', str(tmp_path / 'out')],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr[-2000:]
    assert 'this needs torch, which is not installed' in done.stderr
    assert 'requirements/learned.txt' in done.stderr and 'internal error' not in done.stderr
