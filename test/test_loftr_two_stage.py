# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the two-stage LoFTR export (coarse graph + fine graph with a dynamic match count).

The exported pair, run by ``TwoStageLoFTRBackend``, must give the torch model's matches on
image pairs it was not exported with, at two sizes, for any threshold and ``fine_topk``; the
fine graph must follow the number of matches; and bad files must fail clearly. The shipped
``loftr_lite`` weights are used so that the threshold selects real matches.
"""

import shutil

import numpy as np
import onnx
import pytest
from relperception.matching.loftr.export import export_loftr_two_stage
from relperception.matching.loftr.matcher import LoFTRMatcher
from relperception.matching.loftr.two_stage import (fine_graph_path, open_loftr_backend,
                                                    TwoStageLoFTRBackend)
from relperception.pipeline.export import build_export_model, export_model
from relperception.runtime.model_export import export_spec
from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend
from test_loftr_model import homography_pair
import torch

pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py

EXPORT_SIZE = (96, 128)


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    """Return (torch LoFTR with the shipped loftr_lite weights, coarse graph path)."""
    spec = build_export_model('loftr_lite')
    path = export_loftr_two_stage(spec, tmp_path_factory.mktemp('two_stage') / 'lite.onnx',
                                  size=EXPORT_SIZE, max_size=(256, 320))
    return spec['module'].model, path


def _pair(height, width, seed):
    img0, img1, _ = homography_pair(height, width, seed=seed)
    return {'image0': img0[None, None].astype(np.float32),
            'image1': img1[None, None].astype(np.float32)}


def _torch(model, inputs, threshold, fine_topk):
    model.threshold, model.fine_topk = threshold, fine_topk
    with torch.no_grad():
        out = model(*(torch.from_numpy(inputs[n]) for n in ('image0', 'image1')))
    return {k: v[0].numpy() for k, v in out.items()}


class TestTwoStageExport:
    """Files, metadata and graph properties of the export."""

    def test_files_and_metadata(self, exported):
        _, path = exported
        fine = fine_graph_path(path)
        assert fine.name == 'lite.fine.onnx' and fine.is_file()
        coarse_backend = OnnxRuntimeBackend(path)
        meta = coarse_backend.metadata
        assert meta['kind'] == 'loftr_coarse' and meta['fine_graph'] == fine.name
        assert meta['fine_topk'] == 512 and meta['size_multiple'] == 8
        graph = onnx.load(str(fine)).graph
        dims = [d.dim_param for d in graph.input[2].type.tensor_type.shape.dim]
        assert dims[1] == 'matches'
        for file in (path, fine):  # TensorRT friendly: no data-dependent shapes
            ops = {node.op_type for node in onnx.load(str(file)).graph.node}
            assert 'NonZero' not in ops

    def test_rejects_other_formats(self, tmp_path):
        with pytest.raises(ValueError, match='two-stage'):
            export_model('loftr_lite', tmp_path / 'x.engine', fmt='tensorrt', two_stage=True)
        with pytest.raises(ValueError, match='two-stage'):
            export_model('conv_small', tmp_path / 'x.onnx', two_stage=True)


class TestTwoStageLoFTRBackend:
    """The pair of graphs gives the torch model's matches."""

    @pytest.mark.parametrize('size,seed', [((96, 128), 3), ((128, 160), 4)])
    def test_equals_torch_on_unseen_pairs(self, exported, size, seed):
        model, path = exported
        inputs = _pair(*size, seed)
        backend = open_loftr_backend('onnxruntime', path, threshold=0.2)
        assert isinstance(backend, TwoStageLoFTRBackend)
        got = backend.run(inputs)
        ref = _torch(model, inputs, 0.2, 512)
        keep = ref['mask']
        assert keep.sum() > 20
        assert np.array_equal(got['mask'][0], keep)
        np.testing.assert_allclose(got['keypoints0'][0], ref['keypoints0'], atol=1e-4)
        np.testing.assert_allclose(got['keypoints1'][0][keep], ref['keypoints1'][keep],
                                   atol=1e-3)
        np.testing.assert_allclose(got['confidence'][0], ref['confidence'], atol=1e-5)

    def test_threshold_and_fine_topk(self, exported):
        model, path = exported
        inputs = _pair(96, 128, 5)
        backend = open_loftr_backend('onnxruntime', path, threshold=0.0)
        backend.fine_topk = 9
        for threshold in (0.0, 0.5):
            backend.threshold = threshold
            got = backend.run(inputs)
            ref = _torch(model, inputs, threshold, 9)
            assert 0 < ref['mask'].sum() <= 9
            assert np.array_equal(got['mask'][0], ref['mask'])
            keep = ref['mask']
            np.testing.assert_allclose(got['keypoints1'][0][keep], ref['keypoints1'][keep],
                                       atol=1e-3)
        with pytest.raises(ValueError, match='threshold'):
            backend.threshold = 1.5

    def test_no_matches(self, exported):
        _, path = exported
        flat = np.full((1, 1, 96, 128), 0.5, np.float32)
        backend = open_loftr_backend('onnxruntime', path, threshold=0.99)
        out = backend.run({'image0': flat, 'image1': flat})
        assert out['mask'].shape == (1, 12 * 16) and not out['mask'].any()
        assert np.array_equal(out['keypoints1'], backend.coarse.run(
            {'image0': flat, 'image1': flat})['keypoints1'])

    def test_missing_fine_graph(self, exported, tmp_path):
        _, path = exported
        alone = tmp_path / 'alone.onnx'
        shutil.copy(path, alone)
        with pytest.raises(FileNotFoundError, match='fine graph'):
            open_loftr_backend('onnxruntime', alone, threshold=0.2)

    def test_graphs_of_two_exports_are_not_paired(self, exported, tmp_path):
        # the coarse graph of the shipped weights beside the fine graph of random weights
        _, path = exported
        spec = build_export_model('loftr_lite', random_weights=True)
        other = export_loftr_two_stage(spec, tmp_path / 'other.onnx', size=EXPORT_SIZE,
                                       max_size=(256, 320))
        mixed = tmp_path / 'mixed' / path.name   # the coarse metadata names its fine file
        mixed.parent.mkdir()
        shutil.copy(path, mixed)
        shutil.copy(fine_graph_path(other), fine_graph_path(mixed))
        with pytest.raises(ValueError, match='come from different exports'):
            open_loftr_backend('onnxruntime', mixed, threshold=0.2)
        # the same weights exported again pair with the first export's graphs
        again = export_loftr_two_stage(build_export_model('loftr_lite'), tmp_path / 'again.onnx',
                                       size=EXPORT_SIZE, max_size=(256, 320))
        shutil.copy(fine_graph_path(again), fine_graph_path(mixed))
        open_loftr_backend('onnxruntime', mixed, threshold=0.2)

    def test_single_graph_is_not_coarse(self, tmp_path):
        spec = build_export_model('loftr_lite', random_weights=True)
        path = export_spec(spec, tmp_path / 'single.onnx', size=EXPORT_SIZE)
        backend = open_loftr_backend('onnxruntime', path, threshold=0.2)
        assert isinstance(backend, OnnxRuntimeBackend)
        with pytest.raises(ValueError, match='not the coarse graph'):
            TwoStageLoFTRBackend(backend)

    def test_matcher_with_two_stage_file(self, exported):
        model, path = exported
        image0, image1, _ = homography_pair(240, 320, seed=6)
        image0, image1 = ((img * 255).astype(np.uint8) for img in (image0, image1))
        conf = {'preset': 'loftr_lite', 'input_height': 96, 'input_width': 128}
        ours = LoFTRMatcher({**conf, 'backend': 'onnxruntime', 'onnx_path': str(path)})
        assert isinstance(ours.backend, TwoStageLoFTRBackend)
        model.fine_topk = 512
        reference = LoFTRMatcher(conf, model=model)
        got, ref = ours.match(image0, image1), reference.match(image0, image1)
        assert len(ref) > 20 and len(got) == len(ref)
        np.testing.assert_allclose(got.keypoints1, ref.keypoints1, atol=2e-3)
