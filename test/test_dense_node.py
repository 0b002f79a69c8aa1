# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""dense_node end to end on real rclpy and DDS, with tiny randomly initialised models."""


from conftest import wait_for
import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sensor_msgs')
torch = pytest.importorskip('torch')
pytest.importorskip('relperception.models.preprocess')
DiagnosticArray = pytest.importorskip('diagnostic_msgs.msg').DiagnosticArray

from rclpy.parameter import Parameter  # noqa: E402
from rclpy.parameter_client import AsyncParameterClient  # noqa: E402
from relperception.data.messages import ns_to_sec_nanosec, stamp_to_ns  # noqa: E402
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.imaging import (  # noqa: E402
    image_to_numpy,
    numpy_to_compressed_fields,
)
from relperception.nodes.dense_node import DenseNode  # noqa: E402
from relperception.pipeline.dense_pipeline import DensePipeline  # noqa: E402
from sensor_msgs.msg import CompressedImage, Image  # noqa: E402
from node_harness import (  # noqa: E402, I100
    image_msg, NodeHarness, settled_statuses, unique_namespace)
from test_dense_pipeline import tiny_config, write_tiny_model  # noqa: E402

WIDTH, HEIGHT = 80, 60
OUTPUTS = ('depth', 'labels', 'labels_color', 'depth_color')


pytestmark = pytest.mark.usefixtures('one_torch_thread')  # conftest.py


@pytest.fixture(scope='module')
def frames():
    _, sequence = iter_sequence(6, seed=2, width=WIDTH, height=HEIGHT)
    return list(sequence)


@pytest.fixture(scope='module')
def model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp('dense_node_model'), 'conv')


class Harness(NodeHarness):
    """A dense_node and a probe node (publisher + output subscribers) in one executor."""

    def __init__(self, context, config, extra=()):
        overrides = [Parameter(k, value=v) for k, v in config.items()] + list(extra)
        super().__init__(context, DenseNode, overrides)
        self.received = {name: [] for name in OUTPUTS}
        for name in OUTPUTS:
            self.probe.create_subscription(Image, name, self.received[name].append, 10)
        self.diagnostics = []
        self.probe.create_subscription(DiagnosticArray, 'diagnostics', self.diagnostics.append,
                                       10)
        transport = self.node.get_parameter('image_transport').value
        self.publisher = (self.probe.create_publisher(CompressedImage, 'image/compressed', 10)
                          if transport == 'compressed'
                          else self.probe.create_publisher(Image, 'image', 10))
        self.start(lambda: self.publisher.get_subscription_count() > 0
                   and self.node._depth.get_subscription_count() > 0
                   and self.node._depth_color.get_subscription_count() > 0
                   and self.node._labels_color.get_subscription_count() > 0)

    def send(self, msg):
        """Publish one message and wait until the node has finished with it."""
        self.publish_and_wait(self.publisher, msg)

    def wait_outputs(self, name, count):
        assert wait_for(lambda: len(self.received[name]) >= count), \
            f'{len(self.received[name])} {name} messages'


@pytest.fixture
def harness(context, model, harnesses):
    def make(extra=(), **dense):
        harnesses.append(Harness(context, tiny_config(*model, **dense), extra))
        return harnesses[-1]

    return make


def same_nan(a, b):
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_allclose(a[np.isfinite(a)], b[np.isfinite(b)], rtol=1e-5, atol=1e-5)


class TestDenseNode:

    def test_outputs_have_the_input_stamp_and_encodings(self, harness, frames, model):
        run = harness()
        frame = frames[0]
        run.send(image_msg(frame.rgb, frame.stamp_ns, frame_id='cam_7'))
        for name in OUTPUTS:
            run.wait_outputs(name, 1)
        encodings = {name: run.received[name][0].encoding for name in OUTPUTS}
        assert encodings == {'depth': '32FC1', 'labels': 'mono8', 'labels_color': 'rgb8',
                             'depth_color': 'rgb8'}
        for name in OUTPUTS:
            msg = run.received[name][0]
            assert stamp_to_ns(msg.header.stamp) == frame.stamp_ns
            assert msg.header.frame_id == 'cam_7'
            assert (msg.width, msg.height) == (WIDTH, HEIGHT)
        expected = DensePipeline(tiny_config(*model)).run(frame.rgb)
        depth = image_to_numpy(run.received['depth'][0])
        assert depth.dtype == np.float32
        same_nan(depth, expected.depth)
        np.testing.assert_array_equal(image_to_numpy(run.received['labels'][0]), expected.labels)
        np.testing.assert_array_equal(image_to_numpy(run.received['labels_color'][0]),
                                      expected.labels_color)
        snapshot = run.node.worker.stats.snapshot()
        assert (snapshot.received, snapshot.processed, snapshot.errors) == (1, 1, 0)

    def test_bad_input_is_counted_and_the_node_keeps_running(self, harness, frames):
        run = harness()
        wrong_encoding = image_msg(frames[0].rgb, frames[0].stamp_ns)
        wrong_encoding.encoding = 'rgb9'
        bad_step = image_msg(frames[0].rgb, frames[0].stamp_ns)
        bad_step.step = WIDTH * 3 - 6
        empty = Image(encoding='rgb8')
        depth_as_image = image_msg(frames[0].rgb, frames[0].stamp_ns)
        depth_as_image.encoding, depth_as_image.step = '32FC1', WIDTH * 4
        depth_as_image.data = np.zeros((HEIGHT, WIDTH), np.float32).tobytes()
        for bad in (wrong_encoding, bad_step, empty, depth_as_image):
            run.send(bad)
        assert run.node.worker.stats.snapshot().errors == 4
        assert not run.received['depth']
        run.send(image_msg(frames[1].rgb, frames[1].stamp_ns))
        run.wait_outputs('depth', 1)
        assert stamp_to_ns(run.received['depth'][0].header.stamp) == frames[1].stamp_ns

    def test_stamps_that_cannot_follow_are_skipped_and_counted(self, harness, frames):
        run = harness()
        f = frames
        run.send(image_msg(f[1].rgb, f[1].stamp_ns))
        # zero, duplicate, out of order, a glitch days ahead: no output, each counted
        for stamp_ns in (0, f[1].stamp_ns, f[0].stamp_ns, f[1].stamp_ns + 10**15):
            run.send(image_msg(f[2].rgb, stamp_ns))
        run.send(image_msg(f[2].rgb, f[2].stamp_ns))
        run.wait_outputs('depth', 2)
        assert [stamp_to_ns(m.header.stamp) for m in run.received['depth']] == \
            [f[1].stamp_ns, f[2].stamp_ns]
        snapshot = run.node.worker.stats.snapshot()
        assert (snapshot.processed, snapshot.dropped, snapshot.errors) == (2, 4, 0)
        # a restarted bag (two frames on a new time line) is followed from its second frame
        back = 5 * 10**9
        run.send(image_msg(f[0].rgb, f[0].stamp_ns - back))
        run.send(image_msg(f[1].rgb, f[1].stamp_ns - back))
        run.wait_outputs('depth', 3)
        assert stamp_to_ns(run.received['depth'][-1].header.stamp) == f[1].stamp_ns - back

    def test_compressed_input(self, harness, frames):
        run = harness([Parameter('image_transport', value='compressed')])
        fields = numpy_to_compressed_fields(frames[0].rgb, 'rgb8', 'png')
        msg = CompressedImage(format=fields['format'], data=fields['data'].tobytes())
        msg.header.stamp.sec, msg.header.stamp.nanosec = ns_to_sec_nanosec(frames[0].stamp_ns)
        run.send(msg)
        run.wait_outputs('labels', 1)
        assert stamp_to_ns(run.received['labels'][0].header.stamp) == frames[0].stamp_ns

    def test_burst_keeps_the_newest_and_counts_drops(self, harness, frames):
        run = harness()
        for frame in frames:
            run.publisher.publish(image_msg(frame.rgb, frame.stamp_ns))
        assert wait_for(lambda: run.received['depth'] and stamp_to_ns(
            run.received['depth'][-1].header.stamp) == frames[-1].stamp_ns)
        assert wait_for(lambda: run.node.worker.idle)
        snapshot = run.node.worker.stats.snapshot()
        assert snapshot.received == snapshot.processed + snapshot.dropped
        assert snapshot.errors == 0 and snapshot.processed == len(run.received['depth'])

    def test_parameter_change_applies_to_the_next_frame(self, harness, frames, tmp_path):
        run = harness()
        client = AsyncParameterClient(run.probe, run.node.get_fully_qualified_name())
        assert client.wait_for_services(5.0)
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))
        run.wait_outputs('depth', 1)
        wide = image_to_numpy(run.received['depth'][0])
        finite = wide[np.isfinite(wide)]
        limit = float(np.median(finite))
        future = client.set_parameters([Parameter('dense.max_depth_m', value=limit)])
        assert wait_for(future.done) and future.result().results[0].successful
        for name, value in (('dense.model', 'no_such_model'), ('dense.device', 'nonsense'),
                            ('dense.device', 'cuda:99')):
            future = client.set_parameters([Parameter(name, value=value)])
            assert wait_for(future.done) and not future.result().results[0].successful
        assert run.node.get_parameter('dense.device').value == 'cpu'
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns + 1))
        run.wait_outputs('depth', 2)
        narrow = image_to_numpy(run.received['depth'][1])
        assert np.nanmax(narrow) <= limit
        assert np.isnan(narrow).sum() > np.isnan(wide).sum()
        # weights of another architecture pass the parameter check (the file exists) but do
        # not load: the node logs it and keeps the model it has
        other_yaml, other_weights = write_tiny_model(tmp_path, 'vit', segmentation=False)
        future = client.set_parameters([Parameter('dense.weights', value=other_weights)])
        assert wait_for(future.done) and future.result().results[0].successful
        run.send(image_msg(frames[1].rgb, frames[1].stamp_ns))
        run.wait_outputs('labels', 3)
        assert run.node.pipeline.has_segmentation
        assert run.node.worker.stats.snapshot().errors == 0
        assert run.node.model_rebuild_failures == 1

    def test_diagnostics(self, harness, frames):
        run = harness()
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns, frame_id='cam_9'))
        bad = image_msg(frames[1].rgb, frames[1].stamp_ns)
        bad.encoding = 'nope'
        run.send(bad)
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))   # its stamp again

        def reported():
            return settled_statuses(run.diagnostics, 3)

        assert wait_for(reported, timeout=3.0)
        status = reported()[-1]
        values = {v.key: v.value for v in status.values}
        assert status.name == 'dense_node: dense' and status.hardware_id == 'cam_9'
        assert (values['frames_processed'], values['errors']) == ('1', '1')
        # each skipped frame's reason is counted by itself, not only in the log
        assert (values['frames_undecodable'], values['frames_bad_stamp']) == ('1', '1')

    def test_camera_info_size_mismatch_is_counted_binning_applied(self, harness, frames):
        from sensor_msgs.msg import CameraInfo

        run = harness()
        info_publisher = run.probe.create_publisher(CameraInfo, 'camera_info', 10)
        assert wait_for(lambda: info_publisher.get_subscription_count() > 0)

        def send_info(width, height, binning=0):
            info = CameraInfo(width=width, height=height, binning_x=binning, binning_y=binning)
            info_publisher.publish(info)
            assert wait_for(lambda: run.node.camera_info is not None
                            and run.node.camera_info.width == width)

        # A driver binning 2x2: the images are half the calibrated sensor size, as they should.
        send_info(2 * WIDTH, 2 * HEIGHT, binning=2)
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))
        assert run.node.frames_not_matching_camera_info == 0
        # camera_info of another camera: counted and reported; the frame is still processed.
        send_info(2 * WIDTH, 2 * HEIGHT)
        run.send(image_msg(frames[1].rgb, frames[1].stamp_ns))
        assert run.node.frames_not_matching_camera_info == 1
        run.wait_outputs('depth', 2)

        def reported():
            return [s for s in settled_statuses(run.diagnostics, 2)
                    if 'frames_not_matching_camera_info' in s.message]

        assert wait_for(reported, timeout=3.0)
        values = {v.key: v.value for v in reported()[-1].values}
        assert values['frames_not_matching_camera_info'] == '1'

    def test_an_untrained_depth_head_publishes_no_depth(self, harness, frames, model, tmp_path):
        from relperception.models.weights import (load_state_dict_file, save_weights,
                                                  TRAINED_HEADS_KEY)

        seg_only = save_weights(load_state_dict_file(model[1]), tmp_path / 'seg.safetensors',
                                metadata={TRAINED_HEADS_KEY: 'segmentation'})
        run = harness(weights=str(seg_only))
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))
        run.wait_outputs('labels', 1)
        assert run.received['depth'] == [] and run.received['depth_color'] == []

    def test_missing_weights_fail_at_start(self, context, model, tmp_path):
        config = tiny_config(model[0], str(tmp_path / 'absent.safetensors'))
        with pytest.raises(Exception, match='absent'):
            DenseNode(context=context, namespace=unique_namespace(),
                      parameter_overrides=[Parameter(k, value=v) for k, v in config.items()])


class TestNodeSetDense:

    def test_dense_switch_adds_the_node(self):
        from relperception.nodes import graph

        assert [d.name for d in graph.node_set()] == ['visual_odometry_node']
        nodes = {d.name: d for d in graph.node_set(dense=True, image_topic='/cam/rgb',
                                                   camera_info_topic='/cam/info',
                                                   image_transport='compressed',
                                                   namespace='robot')}
        dense = nodes['dense_node']
        assert dense.plugin == 'relperception.nodes.dense_node:DenseNode'
        assert dense.load_class() is DenseNode
        assert dense.remappings == {'image': '/cam/rgb', 'camera_info': '/cam/info',
                                    'image/compressed': '/cam/rgb/compressed',
                                    'diagnostics': '/diagnostics'}
        assert dense.parameters == {'image_transport': 'compressed'}
        assert dense.namespace == '/robot'
        assert 'depth_in' not in nodes['visual_odometry_node'].remappings

    def test_dense_depth_feeds_odometry(self):
        from relperception.nodes import graph

        nodes = {d.name: d for d in graph.node_set(dense=True, dense_depth_to_odometry=True)}
        assert nodes['visual_odometry_node'].remappings['depth_in'] == 'depth'
        for kwargs in ({'dense_depth_to_odometry': True},
                       {'dense': True, 'dense_depth_to_odometry': True, 'depth_topic': '/d'},
                       {'dense': True, 'dense_depth_to_odometry': True,
                        'depth_transport': 'compressedDepth'}):
            with pytest.raises(ValueError, match='dense_depth_to_odometry'):
                graph.node_set(**kwargs)

    def test_run_verb_options(self):
        import argparse

        from relperception.cli import run as run_verb

        parser = argparse.ArgumentParser()
        run_verb.add_arguments(parser)
        args = parser.parse_args(['--dense-depth-to-odometry', '--matcher', 'loftr'])
        assert args.dense_depth_to_odometry and not args.dense and args.matcher == 'loftr'

    def test_create_node_from_the_description(self, context, model):
        from relperception.config import load_config
        from relperception.nodes import graph

        description = [d for d in graph.node_set(dense=True, image_topic='/cam/rgb',
                                                 namespace=unique_namespace())
                       if d.name == 'dense_node'][0]
        node = graph.create_node(description, context, load_config(overrides=tiny_config(*model)))
        try:
            assert node.resolve_topic_name('image') == '/cam/rgb'
            assert node.get_parameter('dense.model').value == model[0]
            assert node.pipeline.has_segmentation
        finally:
            node.destroy_node()
