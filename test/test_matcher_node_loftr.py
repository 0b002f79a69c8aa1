# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""matcher_node with ``matcher: loftr`` on real rclpy (weights: a random loftr_lite saved here)."""


from conftest import wait_for
import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sensor_msgs')
torch = pytest.importorskip('torch')
pytest.importorskip('relperception.matching.loftr.matcher')

from rclpy.parameter import Parameter  # noqa: E402
from relperception.config import load_config, section  # noqa: E402
from relperception.data.correspondences import matches_from_cloud  # noqa: E402
from relperception.data.messages import stamp_to_ns  # noqa: E402
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.imaging import to_mono8  # noqa: E402
from relperception.matching import build_matcher  # noqa: E402
from relperception.matching.loftr.model import LoFTR  # noqa: E402
from relperception.matching.loftr.presets import preset_conf  # noqa: E402
from relperception.models.weights import save_weights  # noqa: E402
from relperception.nodes.matcher_node import MatcherNode  # noqa: E402
from sensor_msgs.msg import Image, PointCloud2  # noqa: E402

from node_harness import image_msg, NodeHarness, unique_namespace  # noqa: E402, I100

WIDTH, HEIGHT = 160, 128     # multiples of 32: the matcher runs at the image size


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


@pytest.fixture(scope='module')
def frames():
    _, sequence = iter_sequence(4, seed=5, width=WIDTH, height=HEIGHT)
    return list(sequence)


@pytest.fixture(scope='module')
def weights(tmp_path_factory):
    torch.manual_seed(0)
    model = LoFTR(preset_conf('loftr_lite'))
    return str(save_weights(model, tmp_path_factory.mktemp('loftr') / 'loftr_lite.safetensors'))


def loftr_config(weights_path, **overrides):
    return load_config(overrides={
        'matcher': 'loftr', 'loftr.preset': 'loftr_lite', 'loftr.weights': weights_path,
        'loftr.input_width': WIDTH, 'loftr.input_height': HEIGHT, 'loftr.threshold': 0.0,
        **overrides})


class Harness(NodeHarness):
    """A matcher_node (loftr) and a probe node spinning in one executor."""

    def __init__(self, context, config):
        names = ('matcher',) + tuple(f'loftr.{k}' for k in section(config, 'loftr'))
        super().__init__(context, MatcherNode,
                         [Parameter(name, value=config[name]) for name in names])
        self.clouds = []
        self.probe.create_subscription(PointCloud2, 'correspondences', self.clouds.append, 10)
        self.publisher = self.probe.create_publisher(Image, 'image', 10)
        self.start(lambda: self.publisher.get_subscription_count() > 0
                   and self.node._correspondences.get_subscription_count() > 0)

    def send(self, msg):
        self.publish_and_wait(self.publisher, msg, timeout=30.0)


@pytest.fixture
def harness(context, weights, harnesses):
    def make(config=None):
        harnesses.append(Harness(context, config or loftr_config(weights)))
        return harnesses[-1]

    return make


class TestMatcherNodeLoftr:

    @pytest.mark.parametrize('backend', ['torch', 'onnxruntime two-stage'])
    def test_smoke_correspondences_equal_the_matcher(self, harness, frames, weights, backend,
                                                     tmp_path):
        config = None
        if backend != 'torch':
            from relperception.pipeline.export import export_model

            path = export_model('loftr_lite', tmp_path / 'lite.onnx', weights=weights,
                                size=(HEIGHT, WIDTH), two_stage=True)
            config = loftr_config(weights, **{'loftr.backend': 'onnxruntime',
                                              'loftr.onnx_path': str(path)})
        run = harness(config)
        assert run.node.get_parameter('matcher').value == 'loftr'
        for frame in frames[:3]:
            run.send(image_msg(frame.rgb, frame.stamp_ns))
        assert wait_for(lambda: len(run.clouds) == 2, timeout=10.0)
        reference = build_matcher('loftr', section(loftr_config(weights), 'loftr'))
        for index, cloud in enumerate(run.clouds, start=1):
            older, newer = frames[index - 1], frames[index]
            matches, stamp0_ns = matches_from_cloud(cloud)
            assert stamp0_ns == older.stamp_ns
            assert stamp_to_ns(cloud.header.stamp) == newer.stamp_ns
            expected = reference.match(to_mono8(older.rgb, 'rgb8'), to_mono8(newer.rgb, 'rgb8'))
            assert len(matches) == len(expected) > 0
            np.testing.assert_allclose(matches.keypoints0, expected.keypoints0, atol=1e-3)
            np.testing.assert_allclose(matches.keypoints1, expected.keypoints1, atol=2e-3)
            assert np.all((matches.keypoints0 >= 0) & (matches.keypoints0 < [WIDTH, HEIGHT]))
        snapshot = run.node.worker.stats.snapshot()
        assert (snapshot.processed, snapshot.errors) == (3, 0)

    def test_bad_image_counted_and_node_keeps_running(self, harness, frames):
        run = harness()
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))
        bad = image_msg(frames[1].rgb, frames[1].stamp_ns)
        bad.step = WIDTH * 3 - 3
        run.send(bad)
        assert run.node.worker.stats.snapshot().errors == 1
        run.send(image_msg(frames[1].rgb, frames[1].stamp_ns))
        assert wait_for(lambda: len(run.clouds) == 1, timeout=10.0)
        assert matches_from_cloud(run.clouds[0])[1] == frames[0].stamp_ns

    def test_missing_weights_file_is_a_clear_error(self, context, tmp_path):
        config = loftr_config(str(tmp_path / 'absent.safetensors'))
        overrides = [Parameter(name, value=config[name]) for name in (
            'matcher', 'loftr.weights', 'loftr.input_width', 'loftr.input_height')]
        with pytest.raises(Exception, match='absent'):
            MatcherNode(context=context, namespace=unique_namespace(),
                        parameter_overrides=overrides)


class TestLoftrOfflineEvaluation:

    def test_evaluate_bag_runs_with_loftr(self, weights, tmp_path):
        from relperception.data.synthetic_bag import write_synthetic_bag
        from relperception.pipeline.offline_eval import evaluate_bag

        bag = tmp_path / 'bag'
        write_synthetic_bag(bag, frames=4, width=WIDTH, height=HEIGHT)
        summary = evaluate_bag(bag, tmp_path / 'out', loftr_config(weights), progress=False,
                               plots=False)
        assert summary['matcher'] == 'loftr_lite'   # the preset that ran
        assert summary['frames_processed'] == 4 and summary['complete']
        assert (tmp_path / 'out' / 'timing.csv').is_file()
