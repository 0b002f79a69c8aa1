# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of metric monocular VO on dense-model depth (``evaluate_bag(depth_source='dense')``).

The bag is written into pytest's tmp folder from the synthetic scene generator; the depth comes
from the shipped default model, which learnt metric depth on such synthetic rooms.
"""

import csv
import json

import numpy as np
import pytest
from relperception.cli.main import main
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.evaluation.trajectory import evaluate_trajectory, read_tum
from relperception.models.presets import preset_for_backbone
from relperception.pipeline.offline_eval import evaluate_bag

FRAMES = 12
WIDTH, HEIGHT = 320, 240
#: SE(3)-aligned ATE bound of dense-depth RGB-D VO on the 12-frame bag (measured 0.003 m;
#: path 0.59 m; bag-depth RGB-D 0.0014 m; unit-scale monocular 3.2 m).
DENSE_ATE_BOUND_M = 0.03


@pytest.fixture(scope='module')
def synthetic_bag(tmp_path_factory):
    path = tmp_path_factory.mktemp('bags') / 'synthetic'
    write_synthetic_bag(path, frames=FRAMES, width=WIDTH, height=HEIGHT)
    return path


@pytest.fixture(scope='module')
def dense_run(synthetic_bag, tmp_path_factory):
    output = tmp_path_factory.mktemp('dense_vo')
    return output, evaluate_bag(synthetic_bag, output, None, mode='rgbd', depth_source='dense',
                                progress=False, plots=False)


def _ate(output, alignment):
    stamps, poses = read_tum(output / 'trajectory.tum')
    gt_stamps, gt_poses = read_tum(output / 'groundtruth.tum')
    return evaluate_trajectory(stamps, poses, gt_stamps, gt_poses, alignment=alignment)


class TestDenseDepthVO:
    def test_smoke(self, dense_run):
        output, summary = dense_run
        assert summary['depth_source'] == 'dense'
        default = preset_for_backbone('conv')
        assert summary['dense_model'] == default and summary['dense_relative'] is False
        assert summary['mode'] == 'rgbd' and summary['alignment'] == 'se3'
        assert default in summary['scale_source']
        assert summary['frames_processed'] == FRAMES and summary['frames_lost'] == 0
        assert summary['frames_without_depth'] == 0 and summary['dense_failures'] == 0
        assert summary['num_errors'] == 0
        assert summary['topics']['depth'] is None  # the bag's depth topic is not read
        assert summary['dense_timing_median_ms'] > 0
        saved = json.loads((output / 'summary.json').read_text())
        assert saved['depth_source'] == 'dense' and saved['dense_model'] == default

    def test_timing_csv(self, dense_run):
        output, summary = dense_run
        with open(output / 'timing.csv', newline='') as stream:
            rows = list(csv.DictReader(stream))
        assert len(rows) == FRAMES
        assert all(row['depth'] == '1' for row in rows)
        dense_ms = [float(row['dense_ms']) for row in rows]
        assert min(dense_ms) > 0
        # timing.csv rounds to 0.01 ms
        assert np.median(dense_ms) == pytest.approx(summary['dense_timing_median_ms'], abs=0.01)

    def test_metric_scale(self, dense_run, synthetic_bag, tmp_path):
        output, summary = dense_run
        assert summary['ate_rmse_m'] < DENSE_ATE_BOUND_M
        assert _ate(output, 'se3')['ate_rmse_m'] == pytest.approx(summary['ate_rmse_m'])
        # scale from the depth head: the Sim(3) scale that would fix it is near 1
        assert abs(_ate(output, 'sim3')['scale'] - 1.0) < 0.2
        # a unit-scale monocular run aligned the same way (SE(3), no scale) is far off
        mono = evaluate_bag(synthetic_bag, tmp_path / 'mono', None, mode='mono',
                            progress=False, plots=False)
        assert mono['depth_source'] == 'bag' and 'dense_model' not in mono
        mono_se3 = _ate(tmp_path / 'mono', 'se3')['ate_rmse_m']
        assert summary['ate_rmse_m'] < 0.1 * mono_se3

    def test_no_depth_topic_needed(self, synthetic_bag, tmp_path):
        summary = evaluate_bag(synthetic_bag, tmp_path, {'topics.depth': ''}, mode='auto',
                               depth_source='dense', max_frames=4, progress=False, plots=False)
        assert summary['mode'] == 'rgbd' and summary['frames_processed'] == 4
        assert summary['frames_without_depth'] == 0 and summary['dense_failures'] == 0

    def test_dense_failures_counted(self, synthetic_bag, tmp_path):
        # every prediction falls outside [min, max]: no valid depth pixel in any frame
        config = {'dense.min_depth_m': 0.001, 'dense.max_depth_m': 0.002}
        summary = evaluate_bag(synthetic_bag, tmp_path, config, mode='rgbd',
                               depth_source='dense', max_frames=3, progress=False, plots=False)
        assert summary['frames_read'] == 3
        assert summary['dense_failures'] == 3 and summary['frames_without_depth'] == 3
        assert summary['num_errors'] >= 3
        assert sum('dense depth has no valid pixel' in e for e in summary['errors']) == 3

    def test_bad_arguments(self, synthetic_bag, tmp_path):
        with pytest.raises(ValueError, match='depth_source'):
            evaluate_bag(synthetic_bag, tmp_path, None, depth_source='lidar', progress=False)
        with pytest.raises(ValueError, match="not 'mono'"):
            evaluate_bag(synthetic_bag, tmp_path, None, mode='mono', depth_source='dense',
                         progress=False)
        with pytest.raises(ValueError):
            evaluate_bag(synthetic_bag, tmp_path, {'dense.model': 'no_such_model'},
                         depth_source='dense', progress=False)

    def test_cli(self, synthetic_bag, tmp_path):
        output = tmp_path / 'cli'
        rc = main(['eval', str(synthetic_bag), '-o', str(output), '--depth-from', 'dense',
                   '--max-frames', '4', '--no-progress', '--no-plots'])
        assert rc == 0
        summary = json.loads((output / 'summary.json').read_text())
        assert summary['depth_source'] == 'dense' and summary['frames_processed'] == 4

    def test_dense_evaluation_reuses_the_model(self, synthetic_bag, tmp_path, monkeypatch):
        """``dense=True`` with ``depth_source='dense'`` scores the same, single model instance."""
        from relperception.pipeline import dense_pipeline

        built = []
        real_init = dense_pipeline.DensePipeline.__init__

        def counting_init(self, *args, **kwargs):
            built.append(self)
            real_init(self, *args, **kwargs)

        monkeypatch.setattr(dense_pipeline.DensePipeline, '__init__', counting_init)
        summary = evaluate_bag(synthetic_bag, tmp_path, None, mode='rgbd', depth_source='dense',
                               dense=True, dense_stride=2, max_frames=4, progress=False,
                               plots=False)
        assert len(built) == 1
        assert summary['dense']['frames_evaluated'] == 2
        assert summary['dense']['depth']['abs_rel'] < 0.5
