# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Messages and labels of a run say what was really done (issue 14, item 8).

A missing ground-truth pose topic names what is not computed, a ``--gt-scale`` run names its
alignment, results name the LoFTR preset that ran, a missing LoFTR weights file is reported once
under its own parameter, and the dropped-frame counts of the diagnostics are the true totals.
"""

import logging
import math
import threading

import numpy as np
import pytest

from relperception.cli.main import main as cli_main
from relperception.config import load_config
from relperception.data.error_log import ErrorLog
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.evaluation.vo_report import log_summary, write_report
from relperception.matching import build_matcher
from relperception.models import weights as W
from relperception.nodes.processing import FrameWorker
from relperception.pipeline.realtime import diagnostic_report, RunningStats
from relperception.transforms import transform_from_quaternion_xyzw

WIDTH, HEIGHT = 160, 120


@pytest.fixture(scope='module')
def small_bag(tmp_path_factory):
    path = tmp_path_factory.mktemp('messages') / 'bag'
    write_synthetic_bag(path, frames=4, width=WIDTH, height=HEIGHT)
    return path


def _report(tmp_path, config, resolved='mono', gt_scale=False):
    """Write the report of a made-up 12-frame run whose estimate is the ground truth / 2."""
    stamps = np.arange(12, dtype=np.int64) * 100_000_000
    gt = np.stack([transform_from_quaternion_xyzw(
        [0.3 * i, 0.1 * math.sin(i), 0.05 * i * i], [0.0, 0.02 * i, 0.0, 1.0])
        for i in range(12)])
    estimate = gt.copy()
    estimate[:, :3, 3] *= 0.5
    rows = [{'stamp_ns': int(s), 'status': 'tracking', 'num_matches': 100, 'num_inliers': 90,
             'is_keyframe': False, 'depth': False, 'process_ms': 1.0, 'decode_ms': 0.0,
             'message': '', 'scale_source': 'hint'} for s in stamps]
    return write_report(tmp_path, tmp_path / 'bag', load_config(overrides=config), resolved,
                        resolved, gt_scale, rows, list(estimate), stamps, gt, ErrorLog(),
                        plots=False)


class TestNoGroundTruthPoses:
    """Item 1: without the pose topic only the trajectory metrics are missing."""

    def test_says_which_metrics_are_not_computed(self, small_bag, tmp_path, caplog):
        from relperception.pipeline.offline_eval import evaluate_bag

        with caplog.at_level(logging.WARNING, logger='relperception.pipeline.offline_eval'):
            summary = evaluate_bag(small_bag, tmp_path, {'topics.ground_truth_pose': '/none'},
                                   progress=False, plots=False, dense=True, dense_samples=0)
        warning = next(r.getMessage() for r in caplog.records if '/none' in r.getMessage())
        assert 'no metrics' not in warning, warning
        assert 'no trajectory metrics' in warning and 'dense' in warning, warning
        assert summary['ate_rmse_m'] is None
        # ... and the dense scores the message used to deny are there
        assert math.isfinite(summary['dense']['segmentation']['miou'])

    def test_live_replay_error_says_the_same(self):
        from relperception.evaluation.vo_report import NO_TRAJECTORY_METRICS

        assert NO_TRAJECTORY_METRICS.startswith('no trajectory metrics')


class TestGtScaleAlignmentLabel:
    """Item 2: a --gt-scale run is Sim(3)-aligned, and its summary and log say so."""

    def test_summary_and_log_name_the_alignment(self, tmp_path, caplog):
        summary = _report(tmp_path, {}, gt_scale=True)
        assert summary['alignment'] == 'sim3'
        assert summary['scale'] == pytest.approx(2.0, rel=1e-6)  # the scale Sim(3) fitted
        assert 'Sim(3)' in summary['scale_source'] and '--gt-scale' in summary['scale_source']
        summary.update({'bag': 'bag', 'num_errors': 0})
        with caplog.at_level(logging.INFO, logger='relperception.evaluation.vo_report'):
            log_summary(summary)
        text = '\n'.join(r.getMessage() for r in caplog.records)
        assert 'sim3 alignment on top of the --gt-scale step lengths' in text, text

    def test_without_gt_scale_the_label_is_plain(self, tmp_path, caplog):
        summary = _report(tmp_path, {})
        summary.update({'bag': 'bag', 'num_errors': 0})
        with caplog.at_level(logging.INFO, logger='relperception.evaluation.vo_report'):
            log_summary(summary)
        text = '\n'.join(r.getMessage() for r in caplog.records)
        assert '(sim3 alignment)' in text and '--gt-scale' not in text, text


class TestMatcherName:
    """Item 3: results name the LoFTR preset and weights that ran, not just 'loftr'."""

    def test_describe_matcher(self):
        from relperception.matching.base import describe_matcher

        config = load_config(overrides={'matcher': 'loftr'})
        assert describe_matcher(config) == {'matcher': 'loftr_lite',
                                            'matcher_weights': 'shipped'}
        config = load_config(overrides={'matcher': 'loftr', 'loftr.preset': 'loftr',
                                        'loftr.weights': '/w/outdoor.ckpt'})
        assert describe_matcher(config) == {'matcher': 'loftr',
                                            'matcher_weights': '/w/outdoor.ckpt'}
        config = load_config(overrides={'matcher': 'loftr', 'loftr.backend': 'onnxruntime',
                                        'loftr.onnx_path': 'lite.onnx'})
        assert describe_matcher(config) == {'matcher': 'loftr_lite',
                                            'matcher_weights': 'lite.onnx'}
        assert describe_matcher(load_config()) == {'matcher': 'ncc', 'matcher_weights': None}
        with pytest.raises(ValueError, match='matcher'):
            describe_matcher({'loftr.preset': 'loftr_lite'})

    def test_summary_names_the_preset(self, tmp_path):
        summary = _report(tmp_path, {'matcher': 'loftr'})
        assert summary['matcher'] == 'loftr_lite'
        assert summary['matcher_weights'] == 'shipped'
        on_disk = _report(tmp_path, {'matcher': 'klt'})
        assert on_disk['matcher'] == 'klt' and on_disk['matcher_weights'] is None


class TestMissingLoftrWeights:
    """Item 4: the missing-weights error is said once and names loftr.weights."""

    def test_no_shipped_weights_for_the_preset(self):
        try:
            W.shipped_weights('loftr')
            pytest.skip('weights for preset loftr are shipped')
        except FileNotFoundError:
            pass
        with pytest.raises(FileNotFoundError) as info:
            build_matcher('loftr', {'preset': 'loftr'})
        message = str(info.value)
        assert message.count('Train them') == 1, message
        assert 'dense.weights' not in message and 'loftr.weights' in message, message
        assert "preset 'loftr'" in message

    def test_generic_message_names_no_parameter(self, tmp_path):
        (tmp_path / 'manifest.json').write_text('{}')
        with pytest.raises(FileNotFoundError) as info:
            W.shipped_weights('x', tmp_path)
        assert '.weights' not in str(info.value) and 'weights file' in str(info.value)

    def test_eval_logs_one_error_naming_loftr_weights(self, small_bag, tmp_path, caplog):
        config = tmp_path / 'cfg.yaml'
        config.write_text(f'matcher: loftr\nloftr:\n  weights: {tmp_path / "absent.pth"}\n')
        with caplog.at_level(logging.ERROR):
            code = cli_main(['eval', str(small_bag), '--config', str(config), '-o',
                             str(tmp_path / 'out'), '--no-progress'])
        assert code == 1
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, errors
        assert 'loftr.weights' in errors[0] and 'absent.pth' in errors[0], errors
        assert 'dense.weights' not in errors[0], errors


class TestDroppedFrameCounts:
    """Item 5: the diagnostics give the true number of dropped frames."""

    def test_report_gives_the_total_with_the_new_drops(self):
        stats = RunningStats()
        stats.record_arrival()
        stats.record_drop(2)
        previous = stats.snapshot()
        stats.record_drop(6)
        level, message, values = diagnostic_report(stats.snapshot(), previous)
        assert '6 frames dropped since the last report, 8 in all' in message, message
        assert dict(values)['frames_dropped'] == '8'
        _, first, _ = diagnostic_report(previous)   # the first report: the total only
        assert '2 frames dropped' in first and 'since' not in first, first

    def test_frames_waiting_at_stop_are_counted_dropped(self):
        started, gate = threading.Event(), threading.Event()

        def process(item):
            started.set()
            gate.wait(5.0)

        worker = FrameWorker('test worker', process, logging.getLogger('test_worker'))
        worker.submit('busy')
        assert started.wait(5.0)
        worker.submit('waiting')     # never started: the worker stops first
        threading.Timer(0.2, gate.set).start()
        worker.stop()
        snapshot = worker.stats.snapshot()
        assert (snapshot.received, snapshot.processed, snapshot.dropped) == (2, 1, 1)
        assert worker.idle

    def test_final_report_on_destroy(self):
        pytest.importorskip('diagnostic_msgs.msg')
        from relperception.nodes.diagnostics import DiagnosticsPublisher

        class FakeNode:
            """Just what DiagnosticsPublisher uses of a node."""

            def __init__(self):
                self.published, self.context = [], self

            def ok(self):
                return True

            def create_publisher(self, *args):
                return self

            def publish(self, message):
                self.published.append(message)

            def create_timer(self, *args, **kwargs):
                return None

            def get_name(self):
                return 'fake_node'

            def get_clock(self):
                from rclpy.clock import Clock
                return Clock()

            def destroy_timer(self, timer):
                pass

            def destroy_publisher(self, publisher):
                pass

        node, stats = FakeNode(), RunningStats()
        diagnostics = DiagnosticsPublisher(node, [('tracking', stats)])
        stats.record_arrival()
        stats.record_drop()
        diagnostics.publish()
        stats.record_drop(2)     # after the last periodic report
        diagnostics.destroy()
        values = {kv.key: kv.value for kv in node.published[-1].status[0].values}
        assert values['frames_dropped'] == '3'
        assert '3 in all' in node.published[-1].status[0].message
