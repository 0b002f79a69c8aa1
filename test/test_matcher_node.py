# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of matcher_node with real rclpy nodes and DDS (one process, unique namespaces)."""

import os
import signal
import sys

from conftest import wait_for
import cv2
import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sensor_msgs')
DiagnosticArray = pytest.importorskip('diagnostic_msgs.msg').DiagnosticArray

from rclpy.parameter import Parameter  # noqa: E402
from rclpy.parameter_client import AsyncParameterClient  # noqa: E402
from rclpy.qos import ReliabilityPolicy  # noqa: E402
from relperception.config import defaults, section  # noqa: E402
from relperception.core_types import Matches  # noqa: E402
from relperception.data.correspondences import (  # noqa: E402
    CORRESPONDENCE_FIELDS,
    matches_from_cloud,
)
from relperception.data.messages import ns_to_sec_nanosec, stamp_to_ns  # noqa: E402
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.imaging import (  # noqa: E402
    compressed_to_numpy,
    image_to_numpy,
    numpy_to_compressed_fields,
    numpy_to_image_fields,
    to_mono8,
)
from relperception.imaging.drawing import draw_matches  # noqa: E402
from relperception.matching import build_matcher  # noqa: E402
from relperception.nodes.matcher_node import MatcherNode  # noqa: E402
from sensor_msgs.msg import CompressedImage, Image, PointCloud2  # noqa: E402

from node_harness import (  # noqa: E402, I100
    image_msg, NodeHarness, settled_statuses, signal_after_first_line, unique_namespace)

WIDTH, HEIGHT = 320, 240


@pytest.fixture(scope='module')
def frames():
    _, sequence = iter_sequence(8, seed=3, width=WIDTH, height=HEIGHT)
    return list(sequence)


def compressed_msg(rgb, stamp_ns, frame_id='camera'):
    fields = numpy_to_compressed_fields(rgb, 'rgb8', 'jpeg')
    msg = CompressedImage(format=fields['format'], data=fields['data'].tobytes())
    msg.header.stamp.sec, msg.header.stamp.nanosec = ns_to_sec_nanosec(stamp_ns)
    msg.header.frame_id = frame_id
    return msg


def reference_matches(gray0, gray1, **ncc):
    config = {**section(defaults(), 'ncc'), **ncc}
    return build_matcher('ncc', config).match(gray0, gray1)


class Harness(NodeHarness):
    """A matcher_node and a probe node spinning in one SingleThreadedExecutor."""

    def __init__(self, context, overrides=(), namespace=None):
        super().__init__(context, MatcherNode, overrides, namespace)
        self.clouds, self.diagnostics, self.images = [], [], []
        self.probe.create_subscription(PointCloud2, 'correspondences', self.clouds.append, 10)
        self.probe.create_subscription(DiagnosticArray, 'diagnostics',
                                       self.diagnostics.append, 10)
        self.publishers = {
            'raw': self.probe.create_publisher(Image, 'image', 10),
            'compressed': self.probe.create_publisher(CompressedImage, 'image/compressed', 10)}
        self.transport = self.node.get_parameter('image_transport').value
        self.start(lambda: self.publishers[self.transport].get_subscription_count() > 0
                   and self.node._correspondences.get_subscription_count() > 0)

    def send(self, msg):
        """Publish one message and wait until the node has finished with it."""
        self.publish_and_wait(self.publishers[self.transport], msg)

    def wait_clouds(self, count):
        self.wait_exactly(self.clouds, count, 'clouds')


@pytest.fixture
def harness(context, harnesses):
    def make(overrides=(), namespace=None):
        harnesses.append(Harness(context, overrides, namespace))
        return harnesses[-1]

    return make


def gray(frame):
    return to_mono8(frame.rgb, 'rgb8')


class TestMatcherNode:

    def test_correspondences_raw(self, harness, frames):
        run = harness()
        for frame in frames[:3]:
            run.send(image_msg(frame.rgb, frame.stamp_ns))
        run.wait_clouds(2)
        for index, cloud in enumerate(run.clouds, start=1):
            older, newer = frames[index - 1], frames[index]
            fields = [(f.name, f.offset, f.datatype, f.count) for f in cloud.fields]
            assert fields == list(CORRESPONDENCE_FIELDS)
            assert stamp_to_ns(cloud.header.stamp) == newer.stamp_ns
            assert cloud.header.frame_id == 'camera'
            matches, stamp0_ns = matches_from_cloud(cloud)
            assert stamp0_ns == older.stamp_ns
            expected = reference_matches(gray(older), gray(newer))
            assert len(matches) == len(expected) > 100
            np.testing.assert_allclose(matches.keypoints0, expected.keypoints0, atol=1e-4)
            np.testing.assert_allclose(matches.keypoints1, expected.keypoints1, atol=1e-4)
            np.testing.assert_allclose(matches.confidence, expected.confidence, atol=1e-6)
        snapshot = run.node.worker.stats.snapshot()
        assert (snapshot.received, snapshot.processed, snapshot.dropped,
                snapshot.errors) == (3, 3, 0, 0)

    def test_compressed_transport(self, harness, frames):
        run = harness([Parameter('image_transport', value='compressed')])
        assert run.node._input.topic == f'{run.namespace}/image/compressed'
        messages = [compressed_msg(frame.rgb, frame.stamp_ns) for frame in frames[:2]]
        run.send(messages[0])
        truncated = compressed_msg(frames[1].rgb, frames[1].stamp_ns)
        truncated.data = bytes(messages[1].data)[:len(messages[1].data) // 2]
        run.send(truncated)
        assert run.node.worker.stats.snapshot().errors == 1
        run.send(messages[1])
        run.wait_clouds(1)
        decoded = [to_mono8(*compressed_to_numpy(m)) for m in messages]
        matches, stamp0_ns = matches_from_cloud(run.clouds[0])
        assert stamp0_ns == frames[0].stamp_ns
        assert len(matches) == len(reference_matches(*decoded)) > 100

    def test_bad_input_keeps_running(self, harness, frames):
        run = harness()
        f = frames
        run.send(image_msg(f[0].rgb, f[0].stamp_ns))
        wrong_encoding = image_msg(f[1].rgb, f[1].stamp_ns)
        wrong_encoding.encoding = 'rgb9'
        bad_step = image_msg(f[1].rgb, f[1].stamp_ns)
        bad_step.step = WIDTH * 3 - 6
        empty = Image(encoding='rgb8')
        empty.header.stamp.sec, empty.header.stamp.nanosec = ns_to_sec_nanosec(f[1].stamp_ns)
        depth_on_image = image_msg(f[1].rgb, f[1].stamp_ns)   # millimetres, not a picture
        depth_on_image.encoding, depth_on_image.step = '16UC1', WIDTH * 2
        depth_on_image.data = np.full((HEIGHT, WIDTH), 1500, np.uint16).tobytes()
        for bad in (wrong_encoding, bad_step, empty, depth_on_image):
            run.send(bad)
        assert run.node.worker.stats.snapshot().errors == 4
        assert not run.clouds
        run.send(image_msg(f[1].rgb, f[1].stamp_ns))            # matches f0 -> f1
        run.send(image_msg(f[2].rgb, f[1].stamp_ns))            # duplicate stamp: skipped
        run.send(image_msg(f[0].rgb, f[0].stamp_ns))            # out of order: skipped
        run.send(image_msg(f[3].rgb, f[3].stamp_ns))            # matches f1 -> f3
        back = 5 * 10**9                                        # a restarted bag:
        run.send(image_msg(f[0].rgb, f[0].stamp_ns - back))     # skipped as a glitch,
        run.send(image_msg(f[1].rgb, f[1].stamp_ns - back))     # confirmed: starts over
        run.send(image_msg(f[2].rgb, f[2].stamp_ns - back))     # matches f1 -> f2
        run.wait_clouds(3)
        stamps = [(matches_from_cloud(c)[1], stamp_to_ns(c.header.stamp)) for c in run.clouds]
        assert stamps == [(f[0].stamp_ns, f[1].stamp_ns), (f[1].stamp_ns, f[3].stamp_ns),
                          (f[1].stamp_ns - back, f[2].stamp_ns - back)]
        assert len(matches_from_cloud(run.clouds[1])[0]) == len(
            reference_matches(gray(f[1]), gray(f[3])))
        snapshot = run.node.worker.stats.snapshot()
        assert (snapshot.received, snapshot.processed, snapshot.dropped,
                snapshot.errors) == (12, 5, 3, 4)

    def test_size_change_starts_over(self, harness, frames):
        run = harness()
        small = [cv2.resize(frame.rgb, (WIDTH // 2, HEIGHT // 2), interpolation=cv2.INTER_AREA)
                 for frame in frames[:4]]
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))
        run.send(image_msg(small[1], frames[1].stamp_ns))        # new size: no output
        run.send(image_msg(small[2], frames[2].stamp_ns))
        run.wait_clouds(1)
        matches, stamp0_ns = matches_from_cloud(run.clouds[0])
        assert stamp0_ns == frames[1].stamp_ns
        assert len(matches) == len(reference_matches(to_mono8(small[1], 'rgb8'),
                                                     to_mono8(small[2], 'rgb8')))

    def test_parameter_change_applies_to_next_frame(self, harness, frames):
        run = harness()
        client = AsyncParameterClient(run.probe, run.node.get_fully_qualified_name())
        assert client.wait_for_services(5.0)
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))
        run.send(image_msg(frames[1].rgb, frames[1].stamp_ns))
        future = client.set_parameters([Parameter('ncc.min_score', value=0.98)])
        assert wait_for(future.done)
        assert future.result().results[0].successful
        future = client.set_parameters([Parameter('ncc.min_score', value=3.0)])   # invalid
        assert wait_for(future.done)
        assert not future.result().results[0].successful
        assert run.node.get_parameter('ncc.min_score').value == 0.98
        run.send(image_msg(frames[2].rgb, frames[2].stamp_ns))
        run.wait_clouds(2)
        strict = reference_matches(gray(frames[1]), gray(frames[2]), min_score=0.98)
        loose = reference_matches(gray(frames[1]), gray(frames[2]))
        matches, _ = matches_from_cloud(run.clouds[1])
        assert len(matches) == len(strict) < len(loose)
        assert matches.confidence.min() >= 0.98 - 1e-6 or len(matches) == 0

    def test_a_matcher_that_cannot_be_built_is_refused(self, harness, frames, tmp_path):
        """``ros2 param set`` of a LoFTR whose weights cannot be loaded: refused with the reason.

        The check builds the matcher; a failure other than ValueError (a missing or corrupt
        weights file) is a refusal too, not an exception in the parameter service.
        """
        run = harness()
        client = AsyncParameterClient(run.probe, run.node.get_fully_qualified_name())
        assert client.wait_for_services(5.0)
        corrupt = tmp_path / 'corrupt.safetensors'
        corrupt.write_bytes(b'not weights')
        for weights in (str(tmp_path / 'missing.safetensors'), str(corrupt)):
            future = client.set_parameters([Parameter('loftr.weights', value=weights),
                                            Parameter('matcher', value='loftr')])
            assert wait_for(future.done, timeout=30.0)
            results = future.result().results
            assert results[0].successful   # the weights alone are not used by ncc
            assert not results[1].successful
            assert os.path.basename(weights) in results[1].reason
            future = client.set_parameters([Parameter('loftr.weights', value='')])
            assert wait_for(future.done) and future.result().results[0].successful
        assert run.node.get_parameter('matcher').value == 'ncc'
        assert run.spinner.running
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))
        run.send(image_msg(frames[1].rgb, frames[1].stamp_ns))
        run.wait_clouds(1)

    def test_low_range_16bit_images_are_warned_about_and_counted(
            self, harness, frames, capfd):
        run = harness()
        capfd.readouterr()
        for frame in frames[:2]:   # a 12-bit camera: values 0..4080 in the low bits
            grey = cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2GRAY).astype(np.uint16) << 4
            fields = numpy_to_image_fields(grey, 'mono16')
            msg = Image(height=fields['height'], width=fields['width'], encoding='mono16',
                        step=fields['step'], data=fields['data'].tobytes())
            msg.header.stamp.sec, msg.header.stamp.nanosec = ns_to_sec_nanosec(frame.stamp_ns)
            run.send(msg)

        def counted():
            for report in run.diagnostics:
                for status in report.status:
                    values = {v.key: v.value for v in status.values}
                    if values.get('frames_16bit_low_range') == '2':
                        return status
            return None

        assert wait_for(lambda: counted() is not None, timeout=5.0)
        assert counted().level == b'\x01'   # WARN, and the message names it
        assert 'frames_16bit_low_range' in counted().message
        err = capfd.readouterr().err
        assert err.count('values stay below 4096') == 1, err   # throttled
        assert 'publish mono8, or set the camera to 16-bit full range' in err

    def test_diagnostics(self, harness, frames):
        run = harness()
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns, frame_id='cam_42'))
        run.send(image_msg(frames[1].rgb, frames[1].stamp_ns, frame_id='cam_42'))
        bad = image_msg(frames[2].rgb, frames[2].stamp_ns)
        bad.encoding = 'nope'
        run.send(bad)

        def reported():
            return settled_statuses(run.diagnostics, 3)

        assert wait_for(lambda: reported(), timeout=3.0)
        status = reported()[-1]
        values = {v.key: v.value for v in status.values}
        assert status.name == 'matcher_node: matching'
        assert status.hardware_id == 'cam_42'
        assert (values['frames_processed'], values['frames_dropped'], values['errors']) == (
            '2', '0', '1')
        assert values['frames_undecodable'] == '1'   # the reason, not only in the log
        assert float(values['processing_ms_median']) > 0.0
        assert status.level == b'\x01' and '1 errors' in status.message   # WARN: an error

    def test_latency_of_stamps_off_the_node_clock_is_not_reported(self, harness, frames):
        run = harness()
        now_ns = run.node.get_clock().now().nanoseconds
        for index in range(3):   # a camera on the node's clock
            run.send(image_msg(frames[index].rgb, now_ns + index * 1000))

        def values(received):
            statuses = settled_statuses(run.diagnostics, received)
            return statuses[-1] if statuses else None

        assert wait_for(lambda: values(3), timeout=3.0)
        status = values(3)
        on_clock = {v.key: v.value for v in status.values}
        assert on_clock['stamps_off_clock'] == '0'
        assert 0.0 < float(on_clock['latency_ms_median']) < 1000.0
        assert float(on_clock['receipt_latency_ms_median']) > 0.0
        # a bag replayed without sim time: stamps an hour old; the latency is not an hour
        hour_ns = 3600 * 10 ** 9
        for index in range(3, 6):
            run.send(image_msg(frames[index].rgb, now_ns - hour_ns + index * 1000))
        assert wait_for(lambda: values(6), timeout=3.0)
        status = values(6)
        off_clock = {v.key: v.value for v in status.values}
        assert off_clock['stamps_off_clock'] == '1'   # the frame that followed the jump
        assert float(off_clock['latency_ms_p95']) < 1000.0
        assert abs(float(off_clock['stamp_clock_offset_s']) - 3600.0) < 60.0
        assert status.level == b'\x01' and "behind this node's clock" in status.message

    def test_burst_keeps_newest_and_counts_drops(self, harness, frames):
        run = harness()
        # The first frame is matched with nothing: wait for it, so that the newest frame of the
        # burst has a frame to be matched with even when it is the only one the worker takes.
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))
        for frame in frames[1:]:                   # no waiting: the worker falls behind
            run.publishers['raw'].publish(image_msg(frame.rgb, frame.stamp_ns))
        assert wait_for(lambda: stamp_to_ns(run.clouds[-1].header.stamp) == frames[-1].stamp_ns
                        if run.clouds else False)
        assert wait_for(lambda: run.node.worker.idle)
        snapshot = run.node.worker.stats.snapshot()
        assert 2 <= snapshot.received <= len(frames) and snapshot.errors == 0
        assert snapshot.received == snapshot.processed + snapshot.dropped
        run.wait_clouds(snapshot.processed - 1)
        newer = [stamp_to_ns(c.header.stamp) for c in run.clouds]
        older = [matches_from_cloud(c)[1] for c in run.clouds]
        assert newer == sorted(newer)
        assert all(o < n for o, n in zip(older, newer))

    def test_qos_is_overridable(self, harness):
        default = harness()
        infos = default.probe.get_subscriptions_info_by_topic(f'{default.namespace}/image')
        assert [i.qos_profile.reliability for i in infos] == [ReliabilityPolicy.BEST_EFFORT]
        namespace = unique_namespace()
        override = f'qos_overrides.{namespace}/image.subscription.reliability'
        reliable = harness([Parameter(override, value='reliable')], namespace=namespace)
        infos = reliable.probe.get_subscriptions_info_by_topic(f'{namespace}/image')
        assert [i.qos_profile.reliability for i in infos] == [ReliabilityPolicy.RELIABLE]

    def test_matches_image_when_subscribed(self, harness, frames):
        run = harness()
        run.probe.create_subscription(Image, 'matches_image', run.images.append, 1)
        assert wait_for(lambda: run.node._matches_image.get_subscription_count() > 0)
        run.send(image_msg(frames[0].rgb, frames[0].stamp_ns))
        run.send(image_msg(frames[1].rgb, frames[1].stamp_ns))
        assert wait_for(lambda: len(run.images) == 1)
        drawing = run.images[0]
        assert (drawing.encoding, drawing.width, drawing.height) == ('rgb8', WIDTH, HEIGHT)
        assert stamp_to_ns(drawing.header.stamp) == frames[1].stamp_ns
        rgb = image_to_numpy(drawing)
        plain = cv2.cvtColor(gray(frames[1]), cv2.COLOR_GRAY2RGB)
        assert np.any(rgb != plain)


class TestDrawMatches:

    def test_colours_by_confidence(self):
        image = np.full((40, 60), 128, np.uint8)
        matches = Matches([[5, 5], [50, 30]], [[10, 10], [40, 30]], [0.0, 1.0])
        rgb = draw_matches(image, matches)
        assert rgb.shape == (40, 60, 3) and rgb.dtype == np.uint8
        low, high = rgb[10, 10].astype(int), rgb[30, 40].astype(int)
        assert low[2] > low[0]          # confidence 0: blue end of the turbo map
        assert high[0] > high[2]        # confidence 1: red end
        assert np.all(rgb[0, 59] == 128)
        assert np.array_equal(draw_matches(image, Matches.empty()), np.dstack([image] * 3))

    def test_degenerate(self):
        with pytest.raises(ValueError, match='uint8'):
            draw_matches(np.zeros((4, 4, 3), np.uint8), Matches.empty())


def test_main_exits_cleanly_on_sigint(tmp_path):
    env = dict(os.environ, ROS_LOG_DIR=str(tmp_path))
    line, returncode, output = signal_after_first_line(
        [sys.executable, '-c', 'from relperception.nodes.matcher_node import main; main()',
         '--ros-args', '-r', f'__ns:={unique_namespace()}'], env, signal.SIGINT)
    assert 'matching with ncc' in line, line
    assert returncode == 0, output
    assert 'Traceback' not in output
