# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the ``relation_image`` debug topic of matcher_node (real rclpy and DDS)."""

import dataclasses
import time

from conftest import wait_for
import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sensor_msgs')

from rclpy.parameter import Parameter  # noqa: E402
from relperception.data.messages import stamp_to_ns  # noqa: E402
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.imaging import image_to_numpy, to_mono8  # noqa: E402
from relperception.nodes.matcher_node import (  # noqa: E402
    MatcherNode,
    RELATION_PATCH_SIZE,
    relation_pixel_for,
)
from relperception.visualization.relation import relation_panel  # noqa: E402
from sensor_msgs.msg import Image, PointCloud2  # noqa: E402

from node_harness import image_msg, NodeHarness  # noqa: E402, I100

WIDTH, HEIGHT = 160, 120


@pytest.fixture(scope='module')
def frames():
    _, sequence = iter_sequence(3, seed=5, width=WIDTH, height=HEIGHT)
    return list(sequence)


class Harness(NodeHarness):
    """A matcher_node (ncc) and a probe node, optionally subscribed to ``relation_image``."""

    def __init__(self, context, overrides=(), subscribe=True):
        overrides = list(overrides)
        if not any(p.name == 'matcher' for p in overrides):
            overrides.append(Parameter('matcher', value='ncc'))
        super().__init__(context, MatcherNode, overrides)
        self.clouds, self.relations = [], []
        self.probe.create_subscription(PointCloud2, 'correspondences', self.clouds.append, 10)
        if subscribe:
            self.probe.create_subscription(Image, 'relation_image', self.relations.append, 10)
        self.publisher = self.probe.create_publisher(Image, 'image', 10)
        self.start(lambda: self.publisher.get_subscription_count() > 0
                   and self.node._correspondences.get_subscription_count() > 0
                   and (not subscribe
                        or self.node._relation_image.get_subscription_count() > 0))

    def send(self, frame):
        self.publish_and_wait(self.publisher, image_msg(frame.rgb, frame.stamp_ns))


@pytest.fixture
def harness(context, harnesses):
    def make(*args, **kwargs):
        harnesses.append(Harness(context, *args, **kwargs))
        return harnesses[-1]

    return make


def gray(frame):
    return to_mono8(frame.rgb, 'rgb8')


class TestRelationPixelFor:

    def test_centre_and_explicit(self):
        assert relation_pixel_for([-1, -1], (120, 160)) == (80, 60)
        assert relation_pixel_for([10, 20], (120, 160)) == (10, 20)

    def test_invalid(self):
        with pytest.raises(ValueError, match='outside'):
            relation_pixel_for([160, 20], (120, 160))
        with pytest.raises(ValueError, match='two integers'):
            relation_pixel_for([1, 2, 3], (120, 160))
        with pytest.raises(ValueError, match='two integers'):
            relation_pixel_for([1.5, 2], (120, 160))
        for negative in ([-5, -5], [-1, 3]):
            with pytest.raises(ValueError, match=r'\[-1, -1\]'):
                relation_pixel_for(negative, (120, 160))


class TestRelationTopic:

    def test_published_with_subscriber(self, harness, frames):
        run = harness()
        run.send(frames[0])
        run.send(frames[1])
        assert wait_for(lambda: len(run.relations) >= 1), 'no relation_image'
        msg = run.relations[0]
        assert msg.encoding == 'rgb8'
        assert stamp_to_ns(msg.header.stamp) == frames[1].stamp_ns
        assert msg.header.frame_id == 'camera'
        expected = relation_panel(gray(frames[0]), gray(frames[1]), (WIDTH // 2, HEIGHT // 2),
                                  RELATION_PATCH_SIZE, None, 'ncc')
        assert (msg.height, msg.width) == expected.shape[:2]
        assert msg.width > 2 * WIDTH  # image 0 beside the NCC surface
        np.testing.assert_array_equal(image_to_numpy(msg), expected)
        assert run.node.relation_images_drawn == 1
        stats = run.node.relation_stats.snapshot()
        assert (stats.received, stats.processed, stats.errors) == (1, 1, 0)
        assert len(run.clouds) == 1

    def test_not_drawn_without_subscriber(self, harness, frames):
        run = harness(subscribe=False)
        run.send(frames[0])
        run.send(frames[1])
        assert wait_for(lambda: len(run.clouds) == 1)
        assert run.node.relation_images_drawn == 0
        stats = run.node.relation_stats.snapshot()
        assert (stats.received, stats.processed, stats.errors) == (1, 0, 0)

    def test_drawing_error_keeps_matching(self, harness, frames):
        # the 15 px patch around (2, 2) leaves the image: drawing fails, matching goes on
        run = harness([Parameter('relation_pixel', value=[2, 2])])
        for frame in frames:
            run.send(frame)
        assert wait_for(lambda: len(run.clouds) == 2)
        assert run.node.relation_images_drawn == 0
        assert run.node.relation_stats.snapshot().errors == 2
        assert [cause.split(':')[0] for cause in run.node._relation_errors_logged] == \
            ['ValueError']
        # a negative pixel is refused when it is set; the old value stays
        result = run.node.set_parameters([Parameter('relation_pixel', value=[-5, -5])])[0]
        assert not result.successful and '[-1, -1]' in result.reason
        assert list(run.node.get_parameter('relation_pixel').value) == [2, 2]
        matching = run.node.worker.stats.snapshot()
        assert (matching.processed, matching.errors) == (3, 0)
        # a valid pixel set at run time is used from the next frame on
        run.node.set_parameters([Parameter('relation_pixel', value=[40, 30])])
        later = dataclasses.replace(frames[1], stamp_ns=frames[-1].stamp_ns + 10 ** 8)
        run.send(later)
        assert wait_for(lambda: len(run.relations) == 1)
        expected = relation_panel(gray(frames[-1]), gray(later), (40, 30),
                                  RELATION_PATCH_SIZE, None, 'ncc')
        time.sleep(0.05)
        assert stamp_to_ns(run.relations[0].header.stamp) == later.stamp_ns
        np.testing.assert_array_equal(image_to_numpy(run.relations[0]), expected)

    def test_loftr_attention_panel(self, harness, frames, tmp_path):
        torch = pytest.importorskip('torch')
        pytest.importorskip('relperception.matching.loftr.matcher')
        from relperception.matching.loftr.model import LoFTR
        from relperception.matching.loftr.presets import preset_conf
        from relperception.models.weights import save_weights
        from relperception.visualization.relation import loftr_cell_attention

        previous_threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            torch.manual_seed(0)
            path = save_weights(LoFTR(preset_conf('loftr_lite')), tmp_path / 'lite.safetensors')
            run = harness([Parameter('matcher', value='loftr'),
                           Parameter('loftr.preset', value='loftr_lite'),
                           Parameter('loftr.weights', value=str(path)),
                           Parameter('loftr.input_width', value=128),
                           Parameter('loftr.input_height', value=96),
                           Parameter('relation_pixel', value=[50, 40])])
            run.send(frames[0])
            run.send(frames[1])
            assert wait_for(lambda: len(run.relations) >= 1), 'no relation_image'
            msg = run.relations[0]
            assert stamp_to_ns(msg.header.stamp) == frames[1].stamp_ns
            attention = loftr_cell_attention(run.node._matcher, gray(frames[0]),
                                             gray(frames[1]), (50, 40))
            assert attention['map'].shape == (12, 16)
            assert attention['map'].sum() == pytest.approx(1.0, abs=1e-4)
            expected = relation_panel(gray(frames[0]), gray(frames[1]), (50, 40),
                                      RELATION_PATCH_SIZE, attention, 'loftr')
            assert (msg.height, msg.width) == expected.shape[:2]
            assert msg.width > 3 * WIDTH  # image 0, NCC surface and attention side by side
            received = image_to_numpy(msg)
            # same pixels up to float rounding differences of the attention colours
            assert np.mean(received != expected) < 0.01
            assert run.node.relation_stats.snapshot().errors == 0
        finally:
            torch.set_num_threads(previous_threads)
