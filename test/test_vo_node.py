# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of visual_odometry_node and the message builders, with real rclpy nodes and DDS.

Everything runs in one process with unique namespaces; the probe publishes rendered synthetic
images, camera_info and depth as a camera driver would, and the node's ``odom`` is compared
with the offline :class:`~relperception.pipeline.vo_pipeline.VOPipeline` on the same frames.
"""


import sys
import time

from conftest import wait_for
import cv2
import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sensor_msgs')
nav_msgs = pytest.importorskip('nav_msgs.msg')
pytest.importorskip('diagnostic_msgs')

from rclpy.parameter import Parameter  # noqa: E402
from relperception.config import NODE_LOCAL_SPECS  # noqa: E402
from relperception.core_types import Frame, Matches  # noqa: E402
from relperception.data.correspondences import matches_from_cloud  # noqa: E402
from relperception.data.messages import (  # noqa: E402
    stamp_to_ns,
    transform_from_pose_msg,
)
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.imaging import image_to_numpy, numpy_to_compressed_fields  # noqa: E402
from relperception.nodes.depth_input import DepthCache  # noqa: E402
from relperception.nodes.ros_messages import (  # noqa: E402
    cloud_msg_from_matches,
    header_msg,
    image_msg_from_array,
    odometry_msg,
    pose_stamped_msg,
    time_msg,
    transform_stamped_msg,
)
from relperception.nodes.vo_node import VisualOdometryNode  # noqa: E402
from relperception.odometry.mount import (  # noqa: E402
    camera_mount_transform,
    DEFAULT_CAMERA_MOUNT_XYZ_QXYZW as DEFAULT_CAMERA_MOUNT,
)
from relperception.odometry.wheel_hints import WheelHints  # noqa: E402
from relperception.pipeline.vo_pipeline import VOPipeline  # noqa: E402
from relperception.transforms import (  # noqa: E402
    invert_transform,
    make_transform,
    rotation_angle_deg,
)
from sensor_msgs.msg import (  # noqa: E402
    CameraInfo, CompressedImage, Image, PointCloud2, PointField)

from node_harness import (  # noqa: E402, I100
    camera_info_msg, image_msg, NodeHarness, unique_namespace)

WIDTH, HEIGHT, NUM_FRAMES = 320, 240, 12


@pytest.fixture(scope='module')
def sequence():
    """Return the camera and the rendered frames."""
    camera, frames = iter_sequence(NUM_FRAMES, seed=0, width=WIDTH, height=HEIGHT)
    return camera, list(frames)


class Harness(NodeHarness):
    """A visual_odometry_node and a probe node spinning in one SingleThreadedExecutor."""

    def __init__(self, context, overrides=(), namespace=None):
        super().__init__(context, VisualOdometryNode, overrides, namespace)
        self.odom, self.paths, self.clouds = [], [], []
        self.probe.create_subscription(nav_msgs.Odometry, 'odom', self.odom.append, 50)
        self.probe.create_subscription(nav_msgs.Path, 'path', self.paths.append, 50)
        self.probe.create_subscription(PointCloud2, 'correspondences', self.clouds.append, 50)
        self.publishers = {
            'image': self.probe.create_publisher(Image, 'image', 10),
            'camera_info': self.probe.create_publisher(CameraInfo, 'camera_info', 10),
            'depth_in': self.probe.create_publisher(Image, 'depth_in', 10)}
        self.compressed_depth = self.node.get_parameter('depth_transport').value != 'raw'
        if self.compressed_depth:
            self.publishers['depth_in'] = self.probe.create_publisher(
                CompressedImage, 'depth_in/compressedDepth', 10)
        self.start(lambda: all(p.get_subscription_count() > 0 for p in self.publishers.values())
                   and self.node._odom.get_subscription_count() > 0)

    def send_camera_info(self, camera):
        self.publishers['camera_info'].publish(camera_info_msg(camera))
        assert wait_for(lambda: self.node.camera is not None)

    def send_depth(self, depth, stamp_ns, nanosec=None):
        before = self.node.depth.received
        header = header_msg(stamp_ns, 'camera')
        if nanosec is not None:   # a malformed stamp
            header.stamp.nanosec = nanosec
        if self.compressed_depth:
            millimetres = np.nan_to_num(depth * 1000.0).round().astype(np.uint16)
            fields = numpy_to_compressed_fields(millimetres, '16UC1', fmt='compressedDepth')
            msg = CompressedImage(header=header, format=fields['format'],
                                  data=fields['data'].tobytes())
        else:
            msg = image_msg_from_array(depth, '32FC1', header)
        self.publishers['depth_in'].publish(msg)
        assert wait_for(lambda: self.node.depth.received > before)

    def send_image(self, rgb, stamp_ns):
        """Publish one image and wait until the node has finished with it."""
        self.publish_and_wait(self.publishers['image'], image_msg(rgb, stamp_ns), timeout=30.0)

    def wait_odom(self, count):
        self.wait_exactly(self.odom, count, 'odom messages')


@pytest.fixture
def harness(context, harnesses):
    def make(overrides=(), namespace=None):
        harnesses.append(Harness(context, overrides, namespace))
        return harnesses[-1]

    return make


def subscribe_diagnostics(run) -> list:
    """Subscribe the harness's probe to /diagnostics; return the list the reports arrive in."""
    from diagnostic_msgs.msg import DiagnosticArray

    reports = []
    run.probe.create_subscription(DiagnosticArray, 'diagnostics', reports.append, 10)
    return reports


def camera_poses(run, T_base_cam):
    """Return the received poses converted back to T_world_cam of the optical frame."""
    return [invert_transform(T_base_cam) @ transform_from_pose_msg(msg.pose.pose) @ T_base_cam
            for msg in run.odom]


def offline_poses(camera, frames, config, use_depth):
    """Return T_world_cam of the offline VO pipeline on the same frames."""
    pipeline = VOPipeline(config)
    poses = [pipeline.process(Frame(f.rgb, f.stamp_ns, camera,
                                    f.depth if use_depth else None)).T_world_cam
             for f in frames]
    pipeline.odometry.close()
    return poses


class TestVisualOdometryNode:

    @pytest.mark.parametrize('depth_transport', ['raw', 'compressedDepth'])
    def test_rgbd_trajectory_equals_offline(self, harness, sequence, depth_transport):
        camera, frames = sequence
        run = harness([Parameter('depth_transport', value=depth_transport)])
        run.send_camera_info(camera)
        # A depth message with a bad stamp (nanosec >= 1e9) is refused and counted.
        run.send_depth(frames[0].depth, frames[0].stamp_ns, nanosec=1_500_000_000)
        assert wait_for(lambda: run.node.depth.problems['undecodable'] == 1)
        assert run.node.depth.rejected == 1
        for frame in frames:
            run.send_depth(frame.depth, frame.stamp_ns)
        for frame in frames:
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(NUM_FRAMES)
        assert [stamp_to_ns(m.header.stamp) for m in run.odom] == [f.stamp_ns for f in frames]
        assert all(m.header.frame_id == 'odom' and m.child_frame_id == 'base_link'
                   for m in run.odom)
        T_base_cam = camera_mount_transform(DEFAULT_CAMERA_MOUNT)
        poses = camera_poses(run, T_base_cam)
        T_world0 = invert_transform(frames[0].T_world_cam)
        for pose, frame in zip(poses, frames):
            delta = invert_transform(T_world0 @ frame.T_world_cam) @ pose
            assert np.linalg.norm(delta[:3, 3]) < 0.03 and rotation_angle_deg(delta) < 0.5
        # The node runs the offline tracker: the same poses (compressedDepth rounds to mm).
        offline = offline_poses(camera, frames, {}, use_depth=True)
        tolerance = 1e-6 if depth_transport == 'raw' else 5e-3
        for pose, expected in zip(poses, offline):
            np.testing.assert_allclose(pose, expected, atol=tolerance)
        # REP 105: the camera looks along the base x axis, so forward motion is +x in odom.
        forward_cam = (T_world0 @ frames[-1].T_world_cam)[:3, 3]
        odom_last = transform_from_pose_msg(run.odom[-1].pose.pose)[:3, 3]
        np.testing.assert_allclose(odom_last, T_base_cam[:3, :3] @ forward_cam, atol=0.03)
        assert wait_for(lambda: len(run.paths) == NUM_FRAMES)
        assert len(run.paths[-1].poses) == NUM_FRAMES
        assert run.node.status_counts['tracking'] == NUM_FRAMES - 1
        snapshot = run.node.worker.stats.snapshot()
        assert (snapshot.processed, snapshot.dropped, snapshot.errors) == (NUM_FRAMES, 0, 0)
        # The correspondences the tracker used: keyframe -> frame, both stamps.
        assert wait_for(lambda: len(run.clouds) == NUM_FRAMES - 1)
        stamps = {f.stamp_ns for f in frames}
        for msg in run.clouds:
            matches, stamp0_ns = matches_from_cloud(msg)
            assert stamp0_ns in stamps and stamp0_ns < stamp_to_ns(msg.header.stamp)
            assert len(matches) >= 30

    def test_odometry_carries_covariance_twist_and_tracking_state(self, harness, sequence):

        camera, frames = sequence
        run = harness()
        reports = subscribe_diagnostics(run)
        run.send_camera_info(camera)
        for frame in frames[:8]:
            run.send_depth(frame.depth, frame.stamp_ns)
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(8)
        covariances = [np.asarray(m.pose.covariance).reshape(6, 6) for m in run.odom]
        assert not covariances[0].any()   # the origin, by definition
        for cov in covariances[1:]:
            assert np.all(np.linalg.eigvalsh(cov) > 0)   # positive definite: information
        variances = np.array([np.diag(c) for c in covariances])
        assert np.all(np.diff(variances[1:, :3], axis=0) >= -1e-12)   # dead reckoning grows
        assert variances[-1, :3].max() < 0.05 ** 2   # metric RGB-D: centimetres
        # the first twist is unknown (huge variance), later ones follow the ground truth
        assert np.diag(np.asarray(run.odom[0].twist.covariance).reshape(6, 6)).min() >= 1e5
        T_base_cam = camera_mount_transform(DEFAULT_CAMERA_MOUNT)
        for index in range(2, 8):
            msg = run.odom[index]
            dt = (frames[index].stamp_ns - frames[index - 1].stamp_ns) * 1e-9
            truth = invert_transform(frames[index - 1].T_world_cam) @ frames[index].T_world_cam
            velocity = T_base_cam[:3, :3] @ truth[:3, 3] / dt
            got = msg.twist.twist.linear
            np.testing.assert_allclose([got.x, got.y, got.z], velocity, atol=0.1)
            twist_cov = np.asarray(msg.twist.covariance).reshape(6, 6)
            assert np.all(np.linalg.eigvalsh(twist_cov) > 0) and twist_cov.max() < 1.0

        def status_with(key, value):
            for report in reports:
                for status in report.status:
                    values = {kv.key: kv.value for kv in status.values}
                    if values.get(key) == value:
                        return status, values
            return None

        assert wait_for(lambda: status_with('tracking_state', 'tracking') is not None, 10.0)
        status, values = status_with('tracking_state', 'tracking')
        assert values['metric_scale'] == 'true' and values['scale_source'] == 'depth'
        # a black frame: lost, nothing published, /diagnostics says so at ERROR
        run.send_image(np.zeros_like(frames[8].rgb), frames[8].stamp_ns)
        assert wait_for(lambda: status_with('tracking_state', 'lost') is not None, 10.0)
        status, values = status_with('tracking_state', 'lost')
        assert status.level == b'\x02' and 'tracking lost' in status.message
        assert values['frames_lost_in_a_row'] == '1'
        assert len(run.odom) == 8

    def test_reset_pause_and_initialpose(self, harness, sequence):
        from geometry_msgs.msg import PoseWithCovarianceStamped
        from relperception.nodes.ros_messages import pose_msg
        from std_srvs.srv import SetBool, Trigger

        camera, frames = sequence
        run = harness()
        namespace = run.node.get_namespace().rstrip('/')

        def call(service_type, name, request):
            client = run.probe.create_client(service_type, f'{namespace}/visual_odometry_node/'
                                                           f'{name}')
            assert client.wait_for_service(timeout_sec=10.0)
            future = client.call_async(request)
            assert wait_for(future.done, timeout=10.0)
            return future.result()

        run.send_camera_info(camera)
        for frame in frames[:4]:
            run.send_depth(frame.depth, frame.stamp_ns)
        for frame in frames[:3]:
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(3)
        # pause: the frame is skipped (dropped), nothing published
        assert call(SetBool, 'pause', SetBool.Request(data=True)).success
        run.send_image(frames[3].rgb, frames[3].stamp_ns)
        assert len(run.odom) == 3 and run.node.worker.stats.snapshot().dropped == 1
        assert run.node.tracking_report()[0] == 1   # WARN while paused
        assert call(SetBool, 'pause', SetBool.Request(data=False)).success
        # initialpose in the odometry frame: the next pose continues from it
        given = make_transform(np.eye(3), [10.0, -5.0, 0.0])
        anchor = PoseWithCovarianceStamped()
        anchor.header.frame_id = 'odom'
        anchor.pose.pose = pose_msg(given)
        anchor.pose.covariance = (0.25 * np.eye(6)).reshape(36).tolist()
        run.probe.create_publisher(PoseWithCovarianceStamped, 'initialpose', 10).publish(anchor)
        elsewhere = PoseWithCovarianceStamped()
        elsewhere.header.frame_id = 'map'
        elsewhere.pose.pose.orientation.w = 1.0
        run.probe.create_publisher(PoseWithCovarianceStamped, 'initialpose', 10).publish(
            elsewhere)
        assert wait_for(lambda: run.node.control.refused == 1)   # another frame: refused
        negative = PoseWithCovarianceStamped()
        negative.header.frame_id = 'odom'
        negative.pose.pose = pose_msg(make_transform(np.eye(3), [99.0, 0.0, 0.0]))
        negative.pose.covariance = (-1.0 * np.eye(6)).reshape(36).tolist()
        run.probe.create_publisher(PoseWithCovarianceStamped, 'initialpose', 10).publish(
            negative)
        assert wait_for(lambda: run.node.control.refused == 2)   # not a covariance: refused
        run.send_depth(frames[4].depth, frames[4].stamp_ns)
        run.send_image(frames[4].rgb, frames[4].stamp_ns)
        run.wait_odom(4)
        T_odom_base = transform_from_pose_msg(run.odom[3].pose.pose)
        np.testing.assert_allclose(T_odom_base, given, atol=1e-9)
        np.testing.assert_allclose(np.diag(np.asarray(run.odom[3].pose.covariance).reshape(6, 6)),
                                   0.25, atol=1e-9)
        # reset: the next frame starts a new trajectory at the origin
        assert call(Trigger, 'reset', Trigger.Request()).success
        run.send_depth(frames[5].depth, frames[5].stamp_ns)
        run.send_image(frames[5].rgb, frames[5].stamp_ns)
        run.wait_odom(5)
        np.testing.assert_allclose(transform_from_pose_msg(run.odom[4].pose.pose), np.eye(4),
                                   atol=1e-9)
        assert run.node.status_counts['initialized'] == 2

    def test_latched_camera_info_and_what_is_missing(self, context, harnesses, sequence,
                                                     capfd):
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

        camera, frames = sequence
        # a driver that published camera_info once, latched, before the node started
        namespace = unique_namespace()
        driver = rclpy.create_node('driver', context=context, namespace=namespace)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        driver.create_publisher(CameraInfo, 'camera_info', latched).publish(
            camera_info_msg(camera))
        try:
            harnesses.append(Harness(context, namespace=namespace))
            run = harnesses[-1]
            assert wait_for(lambda: run.node.camera is not None)
            for frame in frames[:2]:
                run.send_image(frame.rgb, frame.stamp_ns)
            run.wait_odom(2)
        finally:
            driver.destroy_node()
        capfd.readouterr()
        # camera_info published, but not received: the skipped frames and /diagnostics say
        # which topic is silent
        harnesses.append(Harness(context))
        run = harnesses[-1]
        run.send_image(frames[0].rgb, frames[0].stamp_ns)
        problem = run.node.camera_info_problem()
        assert problem.startswith('no camera_info received yet from the 1 publisher(s) of '
                                  f'{run.namespace}/camera_info')
        level, message, _ = run.node.tracking_report()
        assert level == 1 and problem in message
        error_output = capfd.readouterr().err
        assert problem in error_output
        # a usual driver (volatile): no transient-local subscription, no QoS warning
        run.node.camera_info_input.subscribe_latched()
        assert run.node.camera_info_input.latched_subscription is None
        assert 'incompatible QoS' not in error_output

    def test_reset_drops_an_initialpose_taken_on_a_skipped_frame(self, harness, sequence):
        """initialpose, a frame skipped (paused), then ~/reset: the trajectory starts at 0."""
        from geometry_msgs.msg import PoseWithCovarianceStamped
        from relperception.nodes.ros_messages import pose_msg
        from std_srvs.srv import SetBool, Trigger

        camera, frames = sequence
        run = harness()
        service = f"{run.node.get_namespace().rstrip('/')}/visual_odometry_node/"

        def call(service_type, name, request):
            client = run.probe.create_client(service_type, service + name)
            assert client.wait_for_service(timeout_sec=10.0)
            future = client.call_async(request)
            assert wait_for(future.done, timeout=10.0)
            assert future.result().success

        run.send_camera_info(camera)
        for frame in frames[:2]:
            run.send_image(frame.rgb, frame.stamp_ns)
        call(SetBool, 'pause', SetBool.Request(data=True))
        anchor = PoseWithCovarianceStamped()
        anchor.header.frame_id = 'odom'
        anchor.pose.pose = pose_msg(make_transform(np.eye(3), [10.0, -5.0, 0.0]))
        anchor.pose.covariance = (0.25 * np.eye(6)).reshape(36).tolist()
        run.probe.create_publisher(PoseWithCovarianceStamped, 'initialpose', 10).publish(anchor)
        assert wait_for(lambda: run.node.control._anchor is not None)
        run.send_image(frames[2].rgb, frames[2].stamp_ns)   # skipped: paused
        call(Trigger, 'reset', Trigger.Request())
        call(SetBool, 'pause', SetBool.Request(data=False))
        run.send_image(frames[3].rgb, frames[3].stamp_ns)
        run.wait_odom(3)
        np.testing.assert_allclose(transform_from_pose_msg(run.odom[2].pose.pose), np.eye(4),
                                   atol=1e-9)
        assert not np.asarray(run.odom[2].pose.covariance).any()

    def test_reset_clears_the_scale_source_in_diagnostics(self, harness, sequence):
        """After ~/reset the old trajectory's scale source is not reported as the new one's."""
        from std_srvs.srv import Trigger

        camera, frames = sequence
        run = harness()
        reports = subscribe_diagnostics(run)
        run.send_camera_info(camera)
        for frame in frames[:3]:   # RGB-D: metric scale from depth
            run.send_depth(frame.depth, frame.stamp_ns)
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(3)
        assert run.node.scale_source == 'depth'
        client = run.probe.create_client(
            Trigger, f"{run.node.get_namespace().rstrip('/')}/visual_odometry_node/reset")
        assert client.wait_for_service(timeout_sec=10.0)
        future = client.call_async(Trigger.Request())
        assert wait_for(future.done, timeout=10.0) and future.result().success
        # the first frame of the new trajectory is its origin: no scale measured yet
        run.send_image(frames[3].rgb, frames[3].stamp_ns)
        run.wait_odom(4)
        assert run.node.tracking_state == 'initialized'
        assert run.node.scale_source == ''
        count = len(reports)
        assert wait_for(lambda: len(reports) > count + 1, timeout=10.0)
        values = {kv.key: kv.value for kv in reports[-1].status[0].values}
        assert (values['tracking_state'], values['scale_source'],
                values['metric_scale']) == ('initialized', '', 'false')

    def test_covariance_after_initialpose_stays_a_covariance(self, harness, sequence):
        from geometry_msgs.msg import PoseWithCovarianceStamped

        camera, frames = sequence
        run = harness()
        run.send_camera_info(camera)
        for frame in frames[:6]:   # monocular: the translation variance is large
            run.send_image(frame.rgb, frame.stamp_ns)
        given = np.zeros(36)
        given[0] = given[7] = 0.25   # RViz's "2D Pose Estimate"
        given[35] = 0.0685
        anchor = PoseWithCovarianceStamped()
        anchor.header.frame_id = 'odom'
        anchor.pose.pose.orientation.w = 1.0
        anchor.pose.covariance = given.tolist()
        run.probe.create_publisher(PoseWithCovarianceStamped, 'initialpose', 10).publish(anchor)
        assert wait_for(lambda: run.node.control._anchor is not None)
        run.send_image(frames[6].rgb, frames[6].stamp_ns)
        # depth arrives (auto mode): metric scale, the tracked translation variance drops
        for frame in frames[7:10]:
            run.send_depth(frame.depth, frame.stamp_ns)
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(10)
        assert run.node.scale_source == 'depth'
        for msg in run.odom[6:]:
            covariance = np.asarray(msg.pose.covariance).reshape(6, 6)
            # never below the given one, never negative, and positive semi-definite
            assert np.all(np.diag(covariance) >= given.reshape(6, 6).diagonal() - 1e-12)
            assert np.linalg.eigvalsh(covariance).min() >= -1e-12

    def test_covariance_after_a_turned_initialpose_is_in_the_odometry_axes(self, harness,
                                                                           sequence):
        """The growth since a yawed initialpose is turned with it (x and y variances swap)."""
        from geometry_msgs.msg import PoseWithCovarianceStamped
        from relperception.nodes.ros_messages import pose_msg
        from relperception.odometry.covariance import (conjugate_covariance, positive_part,
                                                       ros_order)

        camera, frames = sequence
        run = harness()
        run.send_camera_info(camera)
        for frame in frames[:3]:
            run.send_depth(frame.depth, frame.stamp_ns)
            run.send_image(frame.rgb, frame.stamp_ns)
        yaw = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])   # +90 deg
        given = 1e-6 * np.eye(6)
        anchor = PoseWithCovarianceStamped()
        anchor.header.frame_id = 'odom'
        anchor.pose.pose = pose_msg(make_transform(yaw, [2.0, 1.0, 0.0]))
        anchor.pose.covariance = given.reshape(36).tolist()
        run.probe.create_publisher(PoseWithCovarianceStamped, 'initialpose', 10).publish(anchor)
        assert wait_for(lambda: run.node.control._anchor is not None)
        for frame in frames[3:]:
            run.send_depth(frame.depth, frame.stamp_ns)
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(NUM_FRAMES)
        # the tracked covariance of base_link in the odometry frame before re-anchoring
        T_base_cam = camera_mount_transform(DEFAULT_CAMERA_MOUNT)
        pipeline = VOPipeline({})
        tracked = []
        for f in frames:
            result = pipeline.process(Frame(f.rgb, f.stamp_ns, camera, f.depth))
            tracked.append(ros_order(conjugate_covariance(
                T_base_cam, result.T_world_cam, result.pose_covariance)).reshape(6, 6))
        pipeline.odometry.close()
        growth = positive_part(tracked[-1] - tracked[3])
        turn = np.kron(np.eye(2), yaw)
        expected = given + turn @ growth @ turn.T
        published = np.asarray(run.odom[-1].pose.covariance).reshape(6, 6)
        # (the node's tracker and this one agree to a percent in the covariance)
        np.testing.assert_allclose(published, expected, rtol=0.05, atol=1e-6)
        # base_link moves along the tracked x, the anchored y: its variances follow
        assert not np.isclose(growth[0, 0], growth[1, 1], rtol=0.2)
        np.testing.assert_allclose(np.diag(published)[:2] - 1e-6, np.diag(growth)[1::-1],
                                   rtol=0.05)

    def test_path_is_built_for_listeners_only_and_kept_for_a_late_one(
            self, context, harnesses, sequence):
        """Without a path subscriber no Path is built; one that comes later gets every pose."""
        camera, frames = sequence
        run = NodeHarness(context, VisualOdometryNode)
        harnesses.append(run)
        odom, paths = [], []
        run.probe.create_subscription(nav_msgs.Odometry, 'odom', odom.append, 50)
        image = run.probe.create_publisher(Image, 'image', 10)
        info = run.probe.create_publisher(CameraInfo, 'camera_info', 10)
        run.start(lambda: image.get_subscription_count() > 0 and info.get_subscription_count() > 0
                  and run.node._odom.get_subscription_count() > 0)
        published = []
        publish = run.node._path.publish
        run.node._path.publish = lambda msg: (published.append(msg), publish(msg))
        info.publish(camera_info_msg(camera))
        assert wait_for(lambda: run.node.camera is not None)
        for frame in frames[:3]:
            run.publish_and_wait(image, image_msg(frame.rgb, frame.stamp_ns), timeout=30.0)
        run.wait_exactly(odom, 3, 'odom messages')
        assert published == []
        run.probe.create_subscription(nav_msgs.Path, 'path', paths.append, 5)
        assert wait_for(lambda: run.node._path.get_subscription_count() > 0)
        run.publish_and_wait(image, image_msg(frames[3].rgb, frames[3].stamp_ns), timeout=30.0)
        assert wait_for(lambda: len(paths) == 1)
        assert len(published) == 1 and len(paths[0].poses) == 4
        assert [p.pose for p in paths[0].poses[:3]] == [m.pose.pose for m in odom[:3]]

    def test_another_publisher_on_odom_is_reported(self, harness, capfd):
        """A base controller on the same odom: WARN in /diagnostics and one log line."""
        run = harness()
        assert run.node.tracking_report()[0] == 0
        base = run.probe.create_publisher(nav_msgs.Odometry, 'odom', 10)
        shared = f"1 other publisher(s) on {run.node.resolve_topic_name('odom')}"
        assert wait_for(lambda: shared in run.node.tracking_report()[1])
        assert run.node.tracking_report()[0] == 1
        run.node.tracking_report()
        assert capfd.readouterr().err.count('other publisher(s) on') == 1
        run.probe.destroy_publisher(base)
        assert wait_for(lambda: run.node.tracking_report()[0] == 0)

    @pytest.mark.parametrize('publish_tf', [True, False])
    def test_tf_is_the_odometry_once_per_frame(self, harness, sequence, monkeypatch,
                                               publish_tf):
        """TF odom -> base_link is each odom's pose and stamp, once; publish_tf false: none.

        ``tf2_ros`` cannot be installed from PyPI: a stand-in ``TransformBroadcaster`` records
        what the node sends (the camera mount comes from the parameter, not TF).
        """
        import types

        sent = []
        stand_in = types.ModuleType('tf2_ros')
        stand_in.TransformBroadcaster = lambda node: types.SimpleNamespace(
            sendTransform=sent.append)
        monkeypatch.setitem(sys.modules, 'tf2_ros', stand_in)
        camera, frames = sequence
        run = harness([Parameter('publish_tf', value=publish_tf),
                       Parameter('camera_mount_source', value='parameter'),
                       Parameter('camera_mount_xyz_qxyzw',
                                 value=[0.2, 0.1, 0.5, -0.5, 0.5, -0.5, 0.5]),
                       Parameter('odom_frame_id', value='vo_odom'),
                       Parameter('base_frame_id', value='base_footprint')])
        run.send_camera_info(camera)
        for frame in frames[:4]:
            run.send_depth(frame.depth, frame.stamp_ns)
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(4)
        if not publish_tf:
            assert sent == []
            return
        assert len(sent) == 4
        for transform, odom in zip(sent, run.odom):
            assert transform.header == odom.header
            frames_ids = (transform.header.frame_id, transform.child_frame_id)
            assert frames_ids == ('vo_odom', 'base_footprint')
            t, q = transform.transform.translation, transform.transform.rotation
            pose = odom.pose.pose
            np.testing.assert_array_equal(
                [t.x, t.y, t.z, q.x, q.y, q.z, q.w],
                [pose.position.x, pose.position.y, pose.position.z, pose.orientation.x,
                 pose.orientation.y, pose.orientation.z, pose.orientation.w])

    def test_depth_misses_are_counted_and_rated(self, harness, sequence, capfd):
        camera, frames = sequence
        run = harness([Parameter('depth_wait_s', value=0.05),
                       Parameter('depth_max_miss_rate', value=0.25),
                       Parameter('depth_queue_size', value=5)])
        run.send_camera_info(camera)
        for index, frame in enumerate(frames[:10]):
            if not 3 <= index < 6:   # frames 3, 4, 5: no depth image
                run.send_depth(frame.depth, frame.stamp_ns)
            run.send_image(frame.rgb, frame.stamp_ns)
        sync = run.node.depth_sync
        assert (sync.hits, sync.misses, run.node.frames_without_depth) == (7, 3, 3)
        values = run.node.tracking_report()[2]
        assert values['depth_hits'] == '7' and values['frames_without_depth'] == '3'
        err = capfd.readouterr().err
        assert err.count('running monocular until depth is back') == 1   # once per switch
        assert err.count('depth is back: RGB-D again after 3 frames') == 1
        assert len(run.node.depth) <= 5   # depth_queue_size

    def test_rectified_input_uses_p_and_no_distortion(self, harness, sequence):
        camera, _ = sequence
        run = harness([Parameter('rectified_input', value=True)])
        msg = camera_info_msg(camera)
        msg.d = [0.2, -0.1, 0.0, 0.0, 0.0]   # of the raw image: not to be applied again
        msg.p = [200.0, 0.0, 160.0, 0.0, 0.0, 200.0, 120.0, 0.0, 0.0, 0.0, 1.0, 0.0]
        run.publishers['camera_info'].publish(msg)
        assert wait_for(lambda: run.node.camera is not None)
        assert run.node.camera.K[0, 0] == 200.0 and not run.node.camera.has_distortion

    def test_depth_arriving_after_its_image_is_used(self, harness, sequence):
        camera, frames = sequence
        wait_s = NODE_LOCAL_SPECS['visual_odometry_node']['depth_wait_s'].max_value
        run = harness([Parameter('depth_wait_s', value=wait_s)])
        run.send_camera_info(camera)
        run.send_depth(frames[0].depth, frames[0].stamp_ns)   # depth is in use from now on
        stats = run.node.worker.stats
        sync = run.node.depth_sync
        late = 0
        for frame in frames[:6]:
            before = stats.snapshot().received
            hits = sync.hits
            published = time.monotonic()
            run.publishers['image'].publish(image_msg(frame.rgb, frame.stamp_ns))
            assert wait_for(lambda before=before: stats.snapshot().received == before + 1)
            time.sleep(0.02)   # the depth image comes later than its colour image
            if frame is not frames[0]:
                run.send_depth(frame.depth, frame.stamp_ns)   # returns once the node has it
            # The worker starts waiting after the image was published; a depth image the
            # node held within the wait must have been used. A loaded machine can deliver
            # later than that: such a frame may run without depth.
            delivered_in_time = time.monotonic() - published < 0.8 * wait_s
            assert wait_for(lambda: run.node.worker.idle, timeout=30.0)
            if delivered_in_time:
                assert sync.hits == hits + 1, f'frame {frame.stamp_ns} did not use its depth'
            else:
                late += 1
        run.wait_odom(6)
        assert run.node.frames_without_depth <= late
        if not late:
            offline = offline_poses(camera, frames[:6], {}, use_depth=True)
            poses = camera_poses(run, camera_mount_transform(DEFAULT_CAMERA_MOUNT))
            for pose, expected in zip(poses, offline):
                np.testing.assert_allclose(pose, expected, atol=1e-6)
        # Depth stops arriving: frames run monocular after the wait, and are counted.
        without_depth = run.node.frames_without_depth
        for frame in frames[6:8]:
            run.send_image(frame.rgb, frame.stamp_ns)
        assert run.node.frames_without_depth == without_depth + 2

    def test_monocular_local_map_equals_offline(self, harness, sequence):
        camera, frames = sequence
        run = harness([Parameter('odometry.mode', value='mono')])
        run.send_camera_info(camera)
        for frame in frames:
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(NUM_FRAMES)
        poses = camera_poses(run, camera_mount_transform(DEFAULT_CAMERA_MOUNT))
        offline = offline_poses(camera, frames, {'odometry.mode': 'mono'}, use_depth=False)
        for pose, expected in zip(poses, offline):
            np.testing.assert_allclose(pose, expected, atol=1e-6)
        assert run.node.pipeline.odometry.map_stats()['map_initializations'] == 1

    @pytest.mark.parametrize('hint_map, glitches', [(False, False), (True, False),
                                                    (False, True)])
    def test_wheel_odometry_gives_the_scale(self, harness, sequence, hint_map, glitches):
        """Mono with wheel_odom: the tracker gets the distances between frames, as offline.

        With ``glitches``, three bad wheel messages among the good ones (a stamp with
        nanosec >= 1e9, a pose 1000 m away, a NaN quaternion) are refused and counted, and
        the odometry is the same.
        """
        camera, frames = sequence
        config = {'odometry.mode': 'mono', 'odometry.hint_map': hint_map}
        run = harness([Parameter(k, value=v) for k, v in config.items()])
        wheel = run.probe.create_publisher(nav_msgs.Odometry, 'wheel_odom', 100)
        assert wait_for(lambda: wheel.get_subscription_count() > 0)
        run.send_camera_info(camera)
        T_base_cam = camera_mount_transform(DEFAULT_CAMERA_MOUNT)
        T_cam0_world = invert_transform(frames[0].T_world_cam)
        offline_hints = WheelHints(T_base_cam)
        for frame in frames:   # the base's wheel odometry, ahead of the images
            T_odom_base = T_base_cam @ T_cam0_world @ frame.T_world_cam \
                @ invert_transform(T_base_cam)
            msg = odometry_msg(T_odom_base, frame.stamp_ns)
            wheel.publish(msg)
            offline_hints.add(frame.stamp_ns, transform_from_pose_msg(msg.pose.pose))
            if glitches and frame is frames[2]:
                bad_stamp = odometry_msg(T_odom_base, frame.stamp_ns + 1)
                bad_stamp.header.stamp.nanosec = 1_500_000_000
                far = T_odom_base.copy()
                far[0, 3] += 1000.0
                nan_quaternion = odometry_msg(T_odom_base, frame.stamp_ns + 3)
                nan_quaternion.pose.pose.orientation.x = float('nan')
                for bad in (bad_stamp, odometry_msg(far, frame.stamp_ns + 2), nan_quaternion):
                    wheel.publish(bad)
        assert wait_for(lambda: len(run.node.wheel.hints) == NUM_FRAMES)
        assert wait_for(lambda: run.node.wheel.hints.refused == (3 if glitches else 0))
        assert run.node.input_problems().get('wheel_odom_refused') == (3 if glitches else 0)
        for frame in frames:
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(NUM_FRAMES)
        pipeline = VOPipeline(config)
        expected = [pipeline.process(Frame(f.rgb, f.stamp_ns, camera),
                                     translation_norm_m=offline_hints.hint_m(f.stamp_ns))
                    .T_world_cam for f in frames]
        pipeline.odometry.close()
        steps = [np.linalg.norm(b.T_world_cam[:3, 3] - a.T_world_cam[:3, 3])
                 for a, b in zip(frames[:-1], frames[1:])]
        offline_hints.clear()
        for frame in frames:
            offline_hints.add(frame.stamp_ns, T_base_cam @ T_cam0_world @ frame.T_world_cam
                              @ invert_transform(T_base_cam))
        hints = [offline_hints.hint_m(f.stamp_ns) for f in frames]
        np.testing.assert_allclose(hints[1:], steps, rtol=1e-9)   # the camera's true steps
        for pose, offline in zip(camera_poses(run, T_base_cam), expected):
            np.testing.assert_allclose(pose, offline, atol=1e-6)
        assert run.node.scale_source == ('hinted_map' if hint_map else 'translation_norm_m')
        assert run.node.wheel.hints.frames_with_hint == NUM_FRAMES - 1
        # metric: the last position is the true one (relative to the first frame)
        truth = (T_cam0_world @ frames[-1].T_world_cam)[:3, 3]
        assert np.linalg.norm(expected[-1][:3, 3] - truth) < 0.05 * np.linalg.norm(truth)

    def test_wheel_odometry_qos_is_overridable(self, harness):
        """A best-effort wheel odometry (e.g. a micro-ROS base) is heard after an override."""
        from rclpy.qos import qos_profile_sensor_data

        namespace = unique_namespace()
        override = f'qos_overrides.{namespace}/wheel_odom.subscription.reliability'
        run = harness([Parameter(override, value='best_effort')], namespace=namespace)
        wheel = run.probe.create_publisher(nav_msgs.Odometry, 'wheel_odom',
                                           qos_profile_sensor_data)
        assert wait_for(lambda: wheel.get_subscription_count() > 0)
        for i in range(3):
            wheel.publish(odometry_msg(make_transform(np.eye(3), [0.1 * i, 0.0, 0.0]),
                                       10**9 * (i + 1)))
        assert wait_for(lambda: len(run.node.wheel.hints) > 0)

    def test_each_kind_of_refused_wheel_odometry_is_logged(self, harness, capfd):
        """A second reason to refuse a wheel pose within the throttle period is not hidden."""
        run = harness()
        wheel = run.probe.create_publisher(nav_msgs.Odometry, 'wheel_odom', 10)
        assert wait_for(lambda: wheel.get_subscription_count() > 0)
        capfd.readouterr()
        for stamp_s, x in ((1.0, 0.0), (0.5, 0.0), (2.0, 100.0)):   # kept, back in time, fast
            wheel.publish(odometry_msg(make_transform(np.eye(3), [x, 0.0, 0.0]),
                                       round(stamp_s * 1e9)))
        assert wait_for(lambda: run.node.wheel.hints.refused == 2)
        err = capfd.readouterr().err
        assert 'is not after the newest pose kept' in err
        assert 'faster than wheel_odom_max_speed_mps' in err

    def test_each_reason_of_a_lost_frame_is_logged(self, harness, sequence, capfd):
        """A frame lost for a second reason within the throttle period is not hidden."""
        camera, frames = sequence
        run = harness()
        run.send_camera_info(camera)
        for frame in frames[:3]:
            run.send_image(frame.rgb, frame.stamp_ns)
        capfd.readouterr()
        for frame in frames[3:5]:   # lost, then its relocalisation fails: two reasons
            run.send_image(np.zeros_like(frame.rgb), frame.stamp_ns)
        assert run.node.status_counts['lost'] == 2
        lines = [line for line in capfd.readouterr().err.splitlines()
                 if 'odometry lost at' in line]
        assert len(lines) == 2, lines
        assert 'relocalisation failed' in lines[1] and 'relocalisation' not in lines[0]

    def test_skipped_frames_are_counted_by_reason_in_diagnostics(self, harness, sequence):

        camera, frames = sequence
        run = harness()
        reports = subscribe_diagnostics(run)
        run.send_image(frames[0].rgb, frames[0].stamp_ns)   # no camera_info yet
        run.send_camera_info(camera)
        run.send_image(frames[0].rgb[:HEIGHT // 2], frames[0].stamp_ns)   # another size
        truncated = image_msg(frames[0].rgb, frames[0].stamp_ns)
        truncated.data = bytes(truncated.data)[:-7]
        run.publish_and_wait(run.publishers['image'], truncated)
        run.send_image(frames[1].rgb, frames[1].stamp_ns)
        run.send_image(frames[0].rgb, frames[0].stamp_ns)   # back in time
        wanted = {'frames_without_camera_info': '1', 'frames_not_matching_camera_info': '1',
                  'frames_undecodable': '1', 'frames_bad_stamp': '1', 'frames_dropped': '4'}

        def reported():
            for report in reports:
                for status in report.status:
                    values = {kv.key: kv.value for kv in status.values}
                    if all(values.get(k) == v for k, v in wanted.items()):
                        return status
            return None

        assert wait_for(lambda: reported() is not None, timeout=10.0), [
            {kv.key: kv.value for kv in s.values} for r in reports[-1:] for s in r.status]
        assert run.node.worker.stats.snapshot().reasons == {
            'frames_without_camera_info': 1, 'frames_not_matching_camera_info': 1,
            'frames_undecodable': 1, 'frames_bad_stamp': 1}

    def test_bad_input_keeps_running(self, harness, sequence):
        camera, frames = sequence
        run = harness([Parameter('path_max_length', value=3)])
        # No camera_info yet: skipped, counted as dropped.
        run.send_image(frames[0].rgb, frames[0].stamp_ns)
        assert run.node.worker.stats.snapshot().dropped == 1
        run.send_camera_info(camera)
        # Depth of another size than camera_info: rejected.
        run.send_depth(np.ones((HEIGHT // 2, WIDTH // 2), np.float32), frames[0].stamp_ns)
        assert run.node.depth.rejected == 1 and len(run.node.depth) == 0
        for frame in frames[:6]:
            run.send_depth(frame.depth, frame.stamp_ns)
        # An image of another size than camera_info; a truncated image.
        run.send_image(frames[0].rgb[:HEIGHT // 2], frames[0].stamp_ns)
        truncated = image_msg(frames[0].rgb, frames[0].stamp_ns)
        truncated.data = bytes(truncated.data)[:-7]
        run.publish_and_wait(run.publishers['image'], truncated)
        assert run.node.worker.stats.snapshot().dropped == 3
        for i in range(0, 4):
            run.send_image(frames[i].rgb, frames[i].stamp_ns)
        # Stamp going backwards (a little): skipped.
        run.send_image(frames[2].rgb, frames[2].stamp_ns)
        # A black frame: lost, nothing published; the next frame relocalises.
        run.send_image(np.zeros_like(frames[4].rgb), frames[4].stamp_ns)
        run.send_image(frames[5].rgb, frames[5].stamp_ns)
        run.wait_odom(5)
        assert [stamp_to_ns(m.header.stamp) for m in run.odom] == \
            [frames[i].stamp_ns for i in (0, 1, 2, 3, 5)]
        assert dict(run.node.status_counts) == {'initialized': 1, 'tracking': 3, 'lost': 1,
                                                'reinitialized': 1}
        snapshot = run.node.worker.stats.snapshot()
        assert snapshot.dropped == 4 and snapshot.errors == 0
        # the frame whose stamp went back was skipped before its depth was looked up: no
        # misleading "no usable depth" for depth that is there
        assert run.node.frames_without_depth == 0
        assert wait_for(lambda: len(run.paths) == 5)
        assert len(run.paths[-1].poses) == 3   # path_max_length
        # A single glitched stamp (zero, days ahead, a minute back) is skipped; the odometry
        # goes on without a reset.
        run.send_depth(frames[6].depth, frames[6].stamp_ns)
        for glitch in (0, frames[6].stamp_ns + 10**15, frames[6].stamp_ns - 60 * 10**9):
            run.send_image(frames[6].rgb, glitch)
        run.send_image(frames[6].rgb, frames[6].stamp_ns)
        run.wait_odom(6)
        assert stamp_to_ns(run.odom[-1].header.stamp) == frames[6].stamp_ns
        assert run.node.status_counts['initialized'] == 1
        assert run.node.worker.stats.snapshot().dropped == 4 + 3
        # A jump back in time by more than a second (a bag restarted) starts over once the
        # next frame follows it; the first frame of the new time line is skipped.
        back = 5_000_000_000
        run.send_image(frames[0].rgb, frames[0].stamp_ns - back)
        run.send_image(frames[1].rgb, frames[1].stamp_ns - back)
        run.wait_odom(7)
        assert stamp_to_ns(run.odom[-1].header.stamp) == frames[1].stamp_ns - back
        assert run.node.status_counts['initialized'] == 2
        assert wait_for(lambda: len(run.paths) == 7)
        assert len(run.paths[-1].poses) == 1
        assert run.node.worker.running

    def test_implausible_depth_and_camera_info_are_counted_in_diagnostics(
            self, harness, sequence):

        camera, frames = sequence
        run = harness()
        reports = subscribe_diagnostics(run)
        broken = camera_info_msg(camera)
        broken.k = [0.0] * 9   # no focal length
        run.publishers['camera_info'].publish(broken)
        assert wait_for(lambda: run.node.camera_info_refused == 1)
        run.send_camera_info(camera)
        for frame in frames[:4]:   # millimetres labelled 32FC1 metres
            run.send_depth(frame.depth * 1000.0, frame.stamp_ns)
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(4)
        assert dict(run.node.depth.problems) == {'implausible_range': 4}
        assert run.node.frames_without_depth == 4   # they ran monocular, and say so

        def reported():
            for report in reports:
                for status in report.status:
                    values = {kv.key: kv.value for kv in status.values}
                    if values.get('depth_implausible_range') == '4' and \
                            values.get('camera_info_refused') == '1':
                        return status
            return None

        assert wait_for(lambda: reported() is not None, timeout=10.0)
        assert any(s.level == b'\x01' and 'depth_implausible_range' in s.message
                   for r in reports for s in r.status)

    def test_each_kind_of_refused_depth_is_logged(self, harness, sequence, capfd):
        camera, frames = sequence
        run = harness()
        run.send_camera_info(camera)
        capfd.readouterr()
        # three kinds of bad depth in quick succession: each is logged, none hides another
        run.send_depth(frames[0].depth * 1000.0, frames[0].stamp_ns)   # mm labelled metres
        run.send_image(frames[0].rgb, frames[0].stamp_ns)
        run.send_depth(np.full_like(frames[1].depth, np.nan), frames[1].stamp_ns)
        run.send_image(frames[1].rgb, frames[1].stamp_ns)
        run.send_depth(np.ones((HEIGHT // 2, WIDTH // 2), np.float32), frames[2].stamp_ns)
        assert dict(run.node.depth.problems) == {'implausible_range': 1, 'no_valid_pixel': 1,
                                                 'wrong_size': 1}
        err = capfd.readouterr().err
        for logged in ('refused (implausible_range)', 'refused (no_valid_pixel)',
                       'skipping depth_in message: depth is 160x120'):
            assert logged in err

    def test_each_kind_of_refused_camera_info_is_logged(self, harness, sequence, capfd):
        camera, _ = sequence
        run = harness()
        capfd.readouterr()
        uncalibrated = camera_info_msg(camera)
        uncalibrated.k = [0.0] * 9
        no_size = camera_info_msg(camera)
        no_size.width = no_size.height = 0
        for count, msg in enumerate((uncalibrated, no_size), start=1):
            run.publishers['camera_info'].publish(msg)
            assert wait_for(lambda n=count: run.node.camera_info_refused == n)
        err = capfd.readouterr().err
        assert 'ignoring camera_info: CameraInfo.k is all zeros' in err
        assert 'ignoring camera_info: CameraInfo has no image size' in err

    def test_intrinsics_of_twice_the_image_size_are_used_with_one_warning(
            self, harness, sequence, capfd):
        # before, the K of 640x480 images on 320x240 ones passed silently: its principal point
        # lies just inside the smaller image
        # and /diagnostics says so (WARN, camera_info_suspect) while it holds

        camera, _ = sequence
        run = harness()
        reports = subscribe_diagnostics(run)

        def reported_suspect(expected):
            for report in reports[-2:]:
                values = {kv.key: kv.value for kv in report.status[0].values}
                if expected(values['camera_info_suspect']):
                    return report.status[0]
            return None

        capfd.readouterr()
        doubled = camera_info_msg(camera.scaled(2.0))
        doubled.width, doubled.height = camera.width, camera.height
        run.publishers['camera_info'].publish(doubled)
        assert wait_for(lambda: run.node.camera is not None
                        and run.node.camera.cx > 1.5 * camera.cx)
        assert wait_for(lambda: reported_suspect(bool) is not None, timeout=10.0)
        status = reported_suspect(bool)
        assert status.level == b'\x01' and run.node.tracking_report()[0] == 1
        assert 'camera_info used, but CameraInfo K puts the principal point' in status.message
        assert 'intrinsics for 640x480 used on 320x240 images?' in status.message
        for _ in range(2):
            run.publishers['camera_info'].publish(doubled)
        run.send_camera_info(camera)
        assert wait_for(lambda: run.node.camera.cx == camera.cx)
        assert run.node.camera_info_refused == 0
        err = capfd.readouterr().err
        assert err.count('camera_info used, but CameraInfo K puts the principal point') == 1
        assert 'intrinsics for 640x480 used on 320x240 images?' in err
        # a plausible camera_info: the warning ends
        count = len(reports)
        assert wait_for(lambda: len(reports) > count + 1, timeout=10.0)
        status = reported_suspect(lambda text: text == '')
        assert status is not None and 'camera_info' not in status.message
        assert run.node.tracking_report()[:2] == (0, '')

    def test_parameters(self, harness, context, sequence):
        camera, frames = sequence
        mount = [0.1, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0]
        run = harness([Parameter('camera_mount_xyz_qxyzw', value=mount),
                       Parameter('odometry.mode', value='rgbd'),
                       Parameter('odom_frame_id', value='vo_odom')])
        np.testing.assert_allclose(run.node.T_base_cam, make_transform(np.eye(3), mount[:3]))
        assert run.node.pipeline.odometry.conf['mode'] == 'rgbd'
        assert run.node.odom_frame_id == 'vo_odom'
        rejected = run.node.set_parameters([Parameter('odometry.min_matches', value=2)])
        assert not rejected[0].successful
        rejected = run.node.set_parameters([Parameter('ncc.patch_size', value=8)])
        assert not rejected[0].successful
        run.send_camera_info(camera)
        for frame in frames[:6]:
            run.send_depth(frame.depth, frame.stamp_ns)
        for frame in frames[:3]:
            run.send_image(frame.rgb, frame.stamp_ns)
        accepted = run.node.set_parameters([Parameter('odometry.min_matches', value=50)])
        assert accepted[0].successful
        for frame in frames[3:6]:
            run.send_image(frame.rgb, frame.stamp_ns)
        run.wait_odom(6)
        assert run.node.pipeline.odometry.conf['min_matches'] == 50
        # The rebuilt tracker continues from the last pose: no jump in the trajectory.
        poses = camera_poses(run, run.node.T_base_cam)
        T_world0 = invert_transform(frames[0].T_world_cam)
        delta = invert_transform(T_world0 @ frames[5].T_world_cam) @ poses[5]
        assert np.linalg.norm(delta[:3, 3]) < 0.03
        with pytest.raises(ValueError):
            VisualOdometryNode(context=context, namespace=unique_namespace(),
                               parameter_overrides=[Parameter('camera_mount_xyz_qxyzw',
                                                              value=[0.0] * 7)])

    @pytest.mark.parametrize('name, value', [('odom_frame_id', '/odom'),
                                             ('base_frame_id', ''),
                                             ('base_frame_id', 'base link'),
                                             ('base_frame_id', 'odom')])
    def test_frame_ids_tf2_refuses_are_refused_at_start(self, context, name, value):
        """A leading '/' (ROS 1), an empty or spaced frame id, or odom = base: no node."""
        from rclpy.exceptions import InvalidParameterValueException
        from relperception.nodes.graph import launch_odometry_parameters

        with pytest.raises((InvalidParameterValueException, ValueError), match=name):
            VisualOdometryNode(context=context, namespace=unique_namespace(),
                               parameter_overrides=[Parameter(name, value=value)])
        if value.strip() and value != 'odom':   # the launch arguments take the same rule
            with pytest.raises(ValueError, match=name):
                launch_odometry_parameters({name: value})

    def test_wheel_odom_remapped_onto_its_own_output_is_refused(self, context):
        """wheel_odom:=odom would read the node's own odometry as wheel odometry: no node."""
        for remap in ('wheel_odom:=odom', 'odom:=wheel_odom'):
            with pytest.raises(ValueError, match='its own odometry'):
                VisualOdometryNode(context=context, namespace=unique_namespace(),
                                   cli_args=['--ros-args', '-r', remap])


class TestCameraMount:
    def test_default_is_optical_to_body(self):
        T_base_cam = camera_mount_transform(DEFAULT_CAMERA_MOUNT)
        R = T_base_cam[:3, :3]
        np.testing.assert_allclose(R @ [0, 0, 1], [1, 0, 0], atol=1e-12)   # z forward -> x
        np.testing.assert_allclose(R @ [1, 0, 0], [0, -1, 0], atol=1e-12)  # x right -> -y
        np.testing.assert_allclose(R @ [0, 1, 0], [0, 0, -1], atol=1e-12)  # y down -> -z

    def test_bad_input(self):
        with pytest.raises(ValueError):
            camera_mount_transform([0.0] * 6)
        with pytest.raises(ValueError):
            camera_mount_transform([0, 0, 0, 0, 0, 0, float('nan')])


class TestDepthCache:
    def test_nearest_and_bounded(self):
        cache = DepthCache(size=3)
        for stamp in (100, 200, 300, 400):
            cache.put(stamp, stamp)
        assert len(cache) == 3 and cache.nearest(100, 0) is None
        assert cache.nearest(300, 0) == 300
        assert cache.nearest(310, 20) == 300 and cache.nearest(350, 20) is None


class TestRosMessages:
    def test_odometry_and_pose_round_trip(self):
        T = make_transform(cv2.Rodrigues(np.array([0.1, -0.2, 0.3]))[0], [1.0, -2.0, 0.5])
        msg = odometry_msg(T, 1_700_000_000_123_456_789, 'odom', 'base_link',
                           pose_covariance=np.eye(6).reshape(-1) * 0.01)
        assert isinstance(msg, nav_msgs.Odometry)
        assert stamp_to_ns(msg.header.stamp) == 1_700_000_000_123_456_789
        assert (msg.header.frame_id, msg.child_frame_id) == ('odom', 'base_link')
        np.testing.assert_allclose(transform_from_pose_msg(msg.pose.pose), T, atol=1e-12)
        assert msg.pose.covariance[0] == 0.01 and msg.pose.covariance[1] == 0.0
        pose = pose_stamped_msg(T, time_msg(5), 'odom')
        np.testing.assert_allclose(transform_from_pose_msg(pose), T, atol=1e-12)
        tf = transform_stamped_msg(T, 5, 'odom', 'base_link')
        t, q = tf.transform.translation, tf.transform.rotation
        np.testing.assert_allclose([t.x, t.y, t.z], T[:3, 3])
        np.testing.assert_allclose([q.x, q.y, q.z, q.w],
                                   [pose.pose.orientation.x, pose.pose.orientation.y,
                                    pose.pose.orientation.z, pose.pose.orientation.w])
        assert tf.child_frame_id == 'base_link'

    def test_image_and_cloud_round_trip(self):
        depth = np.random.default_rng(0).uniform(0.5, 5, (4, 6)).astype(np.float32)
        image = image_msg_from_array(depth, '32FC1', header_msg(7, 'camera'))
        assert isinstance(image, Image) and image.header.frame_id == 'camera'
        np.testing.assert_array_equal(image_to_numpy(image), depth)
        matches = Matches(np.ones((3, 2)), np.zeros((3, 2)), np.full(3, 0.5))
        msg = cloud_msg_from_matches(matches, 11, header_msg(12, 'camera'))
        assert isinstance(msg, PointCloud2) and isinstance(msg.fields[0], PointField)
        decoded, stamp0_ns = matches_from_cloud(msg)
        assert stamp0_ns == 11 and stamp_to_ns(msg.header.stamp) == 12
        np.testing.assert_array_equal(decoded.keypoints0, matches.keypoints0)

    def test_bad_input(self):
        with pytest.raises(ValueError):
            time_msg(-1)
        with pytest.raises(ValueError):
            time_msg(1.5)
        with pytest.raises(ValueError):
            odometry_msg(np.eye(3), 0)
        with pytest.raises(ValueError):
            odometry_msg(np.eye(4), 0, pose_covariance=np.zeros(6))
        with pytest.raises(ValueError):
            image_msg_from_array(np.zeros((2, 2), np.uint8), '32FC1', header_msg(0, 'c'))


class TestDepthSync:
    def test_rate_per_period_and_one_line_per_switch(self, caplog):
        import logging

        from relperception.nodes.depth_input import DepthSync

        sync = DepthSync(logging.getLogger('relperception.test_depth_sync'), 0.25)
        caplog.set_level(logging.INFO)
        for found in (True, True, False, False, False, True, True, True, True, True):
            sync.record(found, 0, 0.02)
        level, message, values = sync.report()
        assert values == {'depth_hits': '7', 'frames_without_depth': '3',
                          'depth_miss_rate': '0.300'}
        assert level == 1 and 'more than depth_max_miss_rate 25%' in message
        level, _, values = sync.report()   # a new period without frames
        assert level == 0 and values['depth_miss_rate'] == '0.000'
        for found in (False, True, True, True):
            sync.record(found, 0, 0.02)
        assert sync.report()[0] == 0   # 25 %: not above
        lines = [r.getMessage() for r in caplog.records]
        # one line per switch: two switches to monocular, two back
        assert sum('running monocular until depth is back' in line for line in lines) == 2
        assert sum('depth is back: RGB-D again after 3 frames' in line for line in lines) == 1
        assert sum('depth is back: RGB-D again after 1 frames' in line for line in lines) == 1
