# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""camera_info in every node: a latched driver's message arrives, and its QoS is overridable."""

from conftest import wait_for
import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sensor_msgs')
pytest.importorskip('torch')

from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import (DurabilityPolicy, QoSProfile, ReliabilityPolicy)  # noqa: E402
from relperception.core_types import Camera  # noqa: E402
from relperception.nodes.dense_node import DenseNode  # noqa: E402
from relperception.nodes.matcher_node import MatcherNode  # noqa: E402
from relperception.nodes.vo_node import VisualOdometryNode  # noqa: E402
from sensor_msgs.msg import CameraInfo  # noqa: E402
from node_harness import camera_info_msg, NodeHarness, unique_namespace  # noqa: E402, I100
from test_dense_pipeline import tiny_config, write_tiny_model  # noqa: E402

CAMERA = Camera(np.array([[50.0, 0.0, 40.0], [0.0, 50.0, 30.0], [0.0, 0.0, 1.0]]), 80, 60)
NODES = ('matcher', 'dense', 'odometry')


@pytest.fixture(scope='module')
def model(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp('camera_info_model'), 'conv')


def make(context, which, model, namespace, extra=()):
    overrides = list(extra)
    if which == 'dense':
        overrides += [Parameter(k, value=v) for k, v in tiny_config(*model).items()]
    node_class = {'matcher': MatcherNode, 'dense': DenseNode,
                  'odometry': VisualOdometryNode}[which]
    harness = NodeHarness(context, node_class, overrides, namespace=namespace)
    harness.start(lambda: True)
    return harness


def received(harness) -> bool:
    node = harness.node
    return (node.camera if isinstance(node, VisualOdometryNode) else node.camera_info) \
        is not None


@pytest.mark.parametrize('which', NODES)
def test_latched_camera_info_published_before_the_node_started(context, harnesses, model,
                                                               which):
    namespace = unique_namespace()
    driver = rclpy.create_node('driver', context=context, namespace=namespace)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
    try:
        driver.create_publisher(CameraInfo, 'camera_info', latched).publish(
            camera_info_msg(CAMERA))
        harnesses.append(make(context, which, model, namespace))
        assert wait_for(lambda: received(harnesses[-1]))
        assert harnesses[-1].node.camera_info_input.latched_subscription is not None
    finally:
        driver.destroy_node()


@pytest.mark.parametrize('which', NODES)
def test_camera_info_qos_is_overridable(context, harnesses, model, which):
    namespace = unique_namespace()
    override = f'qos_overrides.{namespace}/camera_info.subscription.reliability'
    harnesses.append(make(context, which, model, namespace,
                          [Parameter(override, value='reliable')]))
    probe = harnesses[-1].probe
    infos = probe.get_subscriptions_info_by_topic(f'{namespace}/camera_info')
    assert [i.qos_profile.reliability for i in infos] == [ReliabilityPolicy.RELIABLE]
    # a reliable (volatile) driver now reaches the node
    publisher = probe.create_publisher(CameraInfo, 'camera_info', 10)
    assert wait_for(lambda: publisher.get_subscription_count() > 0)
    publisher.publish(camera_info_msg(CAMERA))
    assert wait_for(lambda: received(harnesses[-1]))


def test_an_override_changes_only_its_own_subscription(context, harnesses, model):
    """An override is written into the profile given to rclpy: the shared one stays as it is."""
    from rclpy.qos import qos_profile_sensor_data

    first = unique_namespace()
    override = f'qos_overrides.{first}/camera_info.subscription.reliability'
    harnesses.append(make(context, 'odometry', model, first,
                          [Parameter(override, value='reliable')]))
    assert qos_profile_sensor_data.reliability == ReliabilityPolicy.BEST_EFFORT
    probe = harnesses[-1].probe
    for topic in ('image', 'depth_in'):   # the same node's other sensor inputs
        infos = probe.get_subscriptions_info_by_topic(f'{first}/{topic}')
        assert [i.qos_profile.reliability for i in infos] == [ReliabilityPolicy.BEST_EFFORT]
    second = unique_namespace()   # a node made later in the process
    harnesses.append(make(context, 'matcher', model, second))
    for topic in ('image', 'camera_info'):
        infos = harnesses[-1].probe.get_subscriptions_info_by_topic(f'{second}/{topic}')
        assert [i.qos_profile.reliability for i in infos] == [ReliabilityPolicy.BEST_EFFORT]
