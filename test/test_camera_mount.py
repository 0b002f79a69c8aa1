# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The camera mount of visual_odometry_node: from TF where tf2_ros is, else the parameter.

``tf2_ros`` cannot be installed from PyPI, so the decision is tested with a test double of its
buffer (``lookup_transform`` returning a real ``geometry_msgs/TransformStamped`` or raising),
both on :class:`~relperception.nodes.camera_mount.CameraMount` and in a real node with DDS. The
node is also run with ``tf2_ros`` made unimportable (the pip-only case), and, where ``tf2_ros``
is installed, with a real ``StaticTransformBroadcaster``.
"""

import logging
import sys
import uuid

from conftest import wait_for
import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sensor_msgs')
pytest.importorskip('diagnostic_msgs')
nav_msgs = pytest.importorskip('nav_msgs.msg')
geometry_msgs = pytest.importorskip('geometry_msgs.msg')

from rclpy.duration import Duration  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from relperception.core_types import Frame  # noqa: E402
from relperception.data.messages import (  # noqa: E402
    ns_to_sec_nanosec,
    transform_from_pose_msg,
)
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.nodes import vo_node  # noqa: E402
from relperception.nodes.camera_mount import (  # noqa: E402
    CameraMount,
    mount_text,
    open_tf2_session,
)
from relperception.nodes.ros_messages import header_msg, image_msg_from_array  # noqa: E402
from relperception.odometry.mount import (  # noqa: E402
    camera_from_odom,
    camera_mount_transform,
    DEFAULT_CAMERA_MOUNT_XYZ_QXYZW as DEFAULT_CAMERA_MOUNT,
)
from relperception.pipeline.vo_pipeline import VOPipeline  # noqa: E402
from relperception.transforms import transform_from_quaternion_xyzw  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image  # noqa: E402

from node_harness import camera_info_msg, image_msg, NodeHarness  # noqa: E402, I100

#: A mount on TF: the optical-to-body rotation, 10 cm ahead, 5 cm right and 30 cm up.
TF_MOUNT = [0.1, -0.05, 0.3, *DEFAULT_CAMERA_MOUNT[3:]]
#: A mount of the parameter, different from TF_MOUNT.
PARAMETER_MOUNT = [-0.2, 0.0, 0.5, *DEFAULT_CAMERA_MOUNT[3:]]
IMAGE_STAMP_NS = 1_700_000_000_000_000_000
WIDTH, HEIGHT, NUM_FRAMES = 320, 240, 5


def transform_stamped(xyz_qxyzw, parent='base_link', child='cam', stamp_ns=0):
    """Return a ``geometry_msgs/TransformStamped`` ``parent <- child`` of 7 numbers."""
    msg = geometry_msgs.TransformStamped()
    msg.header.stamp.sec, msg.header.stamp.nanosec = ns_to_sec_nanosec(stamp_ns)
    msg.header.frame_id, msg.child_frame_id = parent, child
    t, q = msg.transform.translation, msg.transform.rotation
    t.x, t.y, t.z = (float(v) for v in xyz_qxyzw[:3])
    q.x, q.y, q.z, q.w = (float(v) for v in xyz_qxyzw[3:])
    return msg


class FakeLookupError(Exception):
    """What the test double raises for a failed lookup (as tf2's LookupException)."""


class FakeTfSession:
    """A test double of a TF session: ``buffer.lookup_transform`` over a dict, ``close``.

    Args:
        transforms: ``{(target_frame, source_frame): TransformStamped}``, read at each lookup
            (the test may change it between lookups).
        lookups: a list every lookup is recorded in, as ``(target, source, time, timeout)``.
    """

    errors = (FakeLookupError,)

    def __init__(self, transforms, lookups):
        self.buffer = self
        self.transforms = transforms
        self.lookups = lookups
        self.closed = False

    def lookup_transform(self, target_frame, source_frame, time, timeout=None):
        self.lookups.append((target_frame, source_frame, time, timeout))
        try:
            return self.transforms[(target_frame, source_frame)]
        except KeyError:
            raise FakeLookupError(f'"{source_frame}" passed to lookupTransform argument '
                                  'source_frame does not exist. ') from None

    def close(self):
        self.closed = True


class Sessions:
    """A factory of :class:`FakeTfSession` (``open_tf``) that keeps what it made."""

    def __init__(self, transforms=None):
        self.transforms = dict(transforms or {})
        self.lookups = []
        self.made = []

    def __call__(self, *node):
        self.made.append(FakeTfSession(self.transforms, self.lookups))
        return self.made[-1]


@pytest.fixture
def log(caplog):
    """Return a logger whose records ``caplog`` keeps (INFO and above)."""
    caplog.set_level(logging.INFO, logger='relperception.test_camera_mount')
    return logging.getLogger('relperception.test_camera_mount')


def records(caplog, level):
    """Return the messages of the records at ``level`` (e.g. ``logging.WARNING``)."""
    return [r.getMessage() for r in caplog.records if r.levelno == level]


class TestCameraMount:

    def test_mount_from_tf(self, log, caplog):
        sessions = Sessions({('base_link', 'cam'): transform_stamped(TF_MOUNT)})
        mount = CameraMount(log, PARAMETER_MOUNT, 'base_link', timeout_s=0.5, open_tf=sessions)
        assert mount.pending and mount.source == ''
        # until the first image: the parameter's (nothing is published before it anyway)
        np.testing.assert_array_equal(mount.T_base_cam, camera_mount_transform(PARAMETER_MOUNT))
        T_base_cam = mount.resolve('cam', IMAGE_STAMP_NS)
        expected = transform_from_quaternion_xyzw(TF_MOUNT[:3], TF_MOUNT[3:])
        np.testing.assert_allclose(T_base_cam, expected, atol=1e-12)
        np.testing.assert_allclose(mount.T_base_cam, expected, atol=1e-12)
        assert (mount.source, mount.detail) == ('tf', 'TF base_link <- cam')
        # latest transform (time 0), waiting at most the timeout
        [(target, source, time, timeout)] = sessions.lookups
        assert (target, source, time.nanoseconds) == ('base_link', 'cam', 0)
        assert timeout == Duration(seconds=0.5)
        # one INFO line naming the frames and the values; the unused parameter is named too
        [line] = records(caplog, logging.INFO)
        assert line.startswith('camera mount from TF: base_link <- cam (xyz 0.100 -0.050 0.300 '
                               'm, qxyzw -0.5000 0.5000 -0.5000 0.5000)')
        assert 'camera_mount_xyz_qxyzw (xyz -0.200 0.000 0.500 m' in line
        assert 'is not used' in line and not records(caplog, logging.WARNING)
        # fixed for the run: no further lookup, and the listener is closed
        assert sessions.made[0].closed and not mount.pending
        for stamp in range(5):
            mount.resolve('cam', IMAGE_STAMP_NS + stamp)
        assert len(sessions.lookups) == 1 and len(caplog.records) == 1

    def test_missing_tf_falls_back_to_the_parameter_with_one_warning(self, log, caplog):
        sessions = Sessions()
        mount = CameraMount(log, PARAMETER_MOUNT, 'base_link', open_tf=sessions)
        for index in range(4):
            T_base_cam = mount.resolve('cam', IMAGE_STAMP_NS + index)
            np.testing.assert_array_equal(T_base_cam, camera_mount_transform(PARAMETER_MOUNT))
        assert mount.source == 'parameter'
        assert mount.detail.startswith('no TF base_link <- cam within 1 s (FakeLookupError: ')
        [line] = records(caplog, logging.WARNING)
        assert line.startswith('camera mount from the parameter camera_mount_xyz_qxyzw: '
                               'base_link <- cam (xyz -0.200 0.000 0.500 m, qxyzw -0.5000')
        assert 'no TF base_link <- cam' in line and 'does not exist' in line
        assert 'camera_mount_source: parameter' in line
        assert len(sessions.lookups) == 1 and sessions.made[0].closed

    def test_empty_frame_id_uses_the_parameter_and_says_so(self, log, caplog):
        sessions = Sessions({('base_link', ''): transform_stamped(TF_MOUNT)})
        mount = CameraMount(log, PARAMETER_MOUNT, 'base_link', open_tf=sessions)
        T_base_cam = mount.resolve('', IMAGE_STAMP_NS)
        np.testing.assert_array_equal(T_base_cam, camera_mount_transform(PARAMETER_MOUNT))
        assert mount.source == 'parameter' and 'frame_id is empty' in mount.detail
        [line] = records(caplog, logging.WARNING)
        assert 'header.frame_id is empty' in line and 'xyz -0.200 0.000 0.500' in line
        assert not sessions.lookups and sessions.made[0].closed

    def test_frame_id_change_keeps_the_mount_with_one_warning(self, log, caplog):
        sessions = Sessions({('base_link', 'cam'): transform_stamped(TF_MOUNT),
                             ('base_link', 'other'): transform_stamped(PARAMETER_MOUNT)})
        mount = CameraMount(log, DEFAULT_CAMERA_MOUNT, 'base_link', open_tf=sessions)
        expected = mount.resolve('cam', IMAGE_STAMP_NS).copy()
        for index in range(3):
            np.testing.assert_array_equal(mount.resolve('other', IMAGE_STAMP_NS + index),
                                          expected)
        np.testing.assert_array_equal(mount.resolve('cam', IMAGE_STAMP_NS + 5), expected)
        [line] = records(caplog, logging.WARNING)
        assert "frame_id changed from 'cam' to 'other'" in line and '~/reset' in line
        assert mount.source == 'tf' and len(sessions.lookups) == 1

    def test_without_tf2_ros_the_parameter_is_used_and_logged_at_info(self, log, caplog):
        mount = CameraMount(log, PARAMETER_MOUNT, 'base_link', open_tf=lambda: None)
        # decided at once: no image needed
        assert (mount.source, mount.detail) == ('parameter', 'tf2_ros is not importable '
                                                             '(pip-only install)')
        [line] = records(caplog, logging.INFO)
        assert line.startswith('camera mount from the parameter camera_mount_xyz_qxyzw: '
                               "base_link <- the image's frame (xyz -0.200 0.000 0.500 m")
        assert line.endswith('tf2_ros is not importable (pip-only install)')
        np.testing.assert_array_equal(mount.resolve('cam', IMAGE_STAMP_NS),
                                      camera_mount_transform(PARAMETER_MOUNT))
        mount.forget()   # a reset changes nothing, and logs nothing
        mount.resolve('cam', IMAGE_STAMP_NS)
        assert len(caplog.records) == 1 and not records(caplog, logging.WARNING)

    def test_open_tf2_session_without_tf2_ros(self, monkeypatch):
        monkeypatch.setitem(sys.modules, 'tf2_ros', None)   # import tf2_ros raises
        assert open_tf2_session(None) is None

    def test_source_parameter_never_opens_tf(self, log, caplog):
        sessions = Sessions({('base_link', 'cam'): transform_stamped(TF_MOUNT)})
        mount = CameraMount(log, PARAMETER_MOUNT, 'base_link', source='parameter',
                            open_tf=sessions)
        mount.resolve('cam', IMAGE_STAMP_NS)
        mount.forget()
        mount.resolve('cam', IMAGE_STAMP_NS + 1)
        assert not sessions.made and mount.source == 'parameter'
        [line] = records(caplog, logging.INFO)
        assert line.endswith('camera_mount_source is parameter')

    def test_reset_looks_the_mount_up_again(self, log, caplog):
        sessions = Sessions()   # TF has no mount yet
        mount = CameraMount(log, PARAMETER_MOUNT, 'base_link', open_tf=sessions)
        mount.resolve('cam', IMAGE_STAMP_NS)
        assert mount.source == 'parameter'
        sessions.transforms[('base_link', 'cam')] = transform_stamped(TF_MOUNT)
        mount.forget()
        assert mount.pending and mount.source == '' and len(sessions.made) == 2
        np.testing.assert_allclose(mount.resolve('cam', IMAGE_STAMP_NS + 1),
                                   camera_mount_transform(TF_MOUNT), atol=1e-12)
        assert mount.source == 'tf' and all(s.closed for s in sessions.made)
        assert len(records(caplog, logging.WARNING)) == 1
        assert records(caplog, logging.INFO)[-1].startswith('camera mount from TF')

    @pytest.mark.parametrize('offset_s, word', [(-10.0, 'older than the image (stale)'),
                                                (3.0, 'later than the image'),
                                                (0.5, None)])
    def test_tf_transform_stamped_away_from_the_image_is_logged(self, log, caplog, offset_s,
                                                                word):
        tf_stamp_ns = IMAGE_STAMP_NS + round(offset_s * 1e9)
        sessions = Sessions({('base_link', 'cam'): transform_stamped(TF_MOUNT,
                                                                     stamp_ns=tf_stamp_ns)})
        mount = CameraMount(log, DEFAULT_CAMERA_MOUNT, 'base_link', open_tf=sessions)
        np.testing.assert_allclose(mount.resolve('cam', IMAGE_STAMP_NS),
                                   camera_mount_transform(TF_MOUNT), atol=1e-12)
        assert mount.source == 'tf'   # used as the rigid mount it is
        warnings = records(caplog, logging.WARNING)
        if word is None:
            assert not warnings
        else:
            [line] = warnings
            assert f'{abs(offset_s):.3f} s {word}' in line and '/tf_static' in line

    def test_invalid_tf_transform_falls_back(self, log, caplog):
        sessions = Sessions({('base_link', 'cam'): transform_stamped([0.0] * 7)})
        mount = CameraMount(log, PARAMETER_MOUNT, 'base_link', open_tf=sessions)
        np.testing.assert_array_equal(mount.resolve('cam', IMAGE_STAMP_NS),
                                      camera_mount_transform(PARAMETER_MOUNT))
        assert mount.source == 'parameter'
        [line] = records(caplog, logging.WARNING)
        assert 'TF base_link <- cam is not a valid transform' in line

    def test_bad_arguments(self, log):
        with pytest.raises(ValueError, match='camera_mount_source'):
            CameraMount(log, DEFAULT_CAMERA_MOUNT, 'base_link', source='urdf')
        with pytest.raises(ValueError, match='camera_mount_tf_timeout_s'):
            CameraMount(log, DEFAULT_CAMERA_MOUNT, 'base_link', timeout_s=-1.0)
        with pytest.raises(ValueError, match='7 finite numbers'):
            CameraMount(log, [0.0] * 6, 'base_link')

    def test_mount_text(self):
        assert mount_text(camera_mount_transform(TF_MOUNT)) == \
            'xyz 0.100 -0.050 0.300 m, qxyzw -0.5000 0.5000 -0.5000 0.5000'


# ---------------------------------------------------------------------- the node, real DDS


@pytest.fixture(scope='module')
def sequence():
    """Return the camera and a few rendered frames."""
    camera, frames = iter_sequence(NUM_FRAMES, seed=0, width=WIDTH, height=HEIGHT)
    return camera, list(frames)


@pytest.fixture(scope='module')
def offline(sequence):
    """Return ``T_world_cam`` of the offline RGB-D pipeline on the frames."""
    camera, frames = sequence
    pipeline = VOPipeline({})
    poses = [pipeline.process(Frame(f.rgb, f.stamp_ns, camera, f.depth)).T_world_cam
             for f in frames]
    pipeline.odometry.close()
    return poses


class MountHarness(NodeHarness):
    """A visual_odometry_node fed images of ``frame_id`` with depth; ``odom`` collected."""

    def __init__(self, context, overrides=(), frame_id='cam'):
        super().__init__(context, vo_node.VisualOdometryNode, overrides)
        self.frame_id = frame_id
        self.odom, self.reports = [], []
        self.probe.create_subscription(nav_msgs.Odometry, 'odom', self.odom.append, 50)
        from diagnostic_msgs.msg import DiagnosticArray
        self.probe.create_subscription(DiagnosticArray, 'diagnostics', self.reports.append, 10)
        self.image = self.probe.create_publisher(Image, 'image', 10)
        self.camera_info = self.probe.create_publisher(CameraInfo, 'camera_info', 10)
        self.depth = self.probe.create_publisher(Image, 'depth_in', 10)
        self.start(lambda: all(p.get_subscription_count() > 0
                               for p in (self.image, self.camera_info, self.depth))
                   and self.node._odom.get_subscription_count() > 0)

    def run(self, camera, frames, frame_id=None):
        """Publish camera_info, then each frame's depth and image; wait for each to be done."""
        if self.node.camera is None:
            self.camera_info.publish(camera_info_msg(camera, self.frame_id))
            assert wait_for(lambda: self.node.camera is not None)
        for frame in frames:
            before = self.node.depth.received
            self.depth.publish(image_msg_from_array(frame.depth, '32FC1',
                                                    header_msg(frame.stamp_ns, self.frame_id)))
            assert wait_for(lambda before=before: self.node.depth.received > before)
            self.publish_and_wait(self.image, image_msg(frame.rgb, frame.stamp_ns,
                                                        frame_id or self.frame_id),
                                  timeout=30.0)

    def diagnostics_value(self, key):
        """Return the last reported value of ``key`` in /diagnostics, or None."""
        for report in reversed(self.reports):
            for status in report.status:
                for value in status.values:
                    if value.key == key:
                        return value.value
        return None


@pytest.fixture
def mount_harness(context, harnesses):
    def make(overrides=(), frame_id='cam'):
        harnesses.append(MountHarness(context, overrides, frame_id))
        return harnesses[-1]

    return make


def assert_poses_use_mount(odom, T_base_cam, expected):
    """Assert that the odometry is the offline camera poses moved to the base by this mount."""
    assert len(odom) == len(expected)
    for msg, T_world_cam in zip(odom, expected):
        np.testing.assert_allclose(
            camera_from_odom(transform_from_pose_msg(msg.pose.pose), T_base_cam), T_world_cam,
            atol=1e-6)


class TestNodeCameraMount:

    def test_without_tf2_ros_the_parameter_mount_is_used_and_reported(
            self, mount_harness, sequence, offline, monkeypatch, capfd):
        monkeypatch.setitem(sys.modules, 'tf2_ros', None)   # a pip-only install
        camera, frames = sequence
        run = mount_harness([Parameter('camera_mount_xyz_qxyzw', value=PARAMETER_MOUNT)])
        run.run(camera, frames)
        run.wait_exactly(run.odom, NUM_FRAMES, 'odom messages')
        T_base_cam = camera_mount_transform(PARAMETER_MOUNT)
        assert_poses_use_mount(run.odom, T_base_cam, offline)
        assert all(m.child_frame_id == 'base_link' for m in run.odom)
        np.testing.assert_array_equal(run.node.wheel.hints.T_base_cam, T_base_cam)
        err = capfd.readouterr().err
        assert err.count('camera mount from the parameter camera_mount_xyz_qxyzw: base_link <- '
                         "the image's frame (xyz -0.200 0.000 0.500 m") == 1
        assert '(xyz -0.200 0.000 0.500 m, qxyzw -0.5000 0.5000 -0.5000 0.5000) for this run: ' \
            'tf2_ros is not importable (pip-only install)' in err
        assert 'camera mount from TF' not in err and 'WARN' not in err
        assert wait_for(lambda: run.diagnostics_value('camera_mount_source') == 'parameter',
                        timeout=10.0)
        assert run.diagnostics_value('camera_mount_detail').startswith('tf2_ros is not')

    def test_mount_from_a_tf_buffer(self, mount_harness, sequence, offline, monkeypatch,
                                    capfd):
        """The node's TF path with a test double of the buffer: odometry, wheel, reset, frames."""
        from std_srvs.srv import Trigger

        sessions = Sessions({('base_link', 'cam'): transform_stamped(TF_MOUNT)})
        monkeypatch.setattr(vo_node, 'open_tf2_session', sessions)
        camera, frames = sequence
        run = mount_harness([Parameter('camera_mount_xyz_qxyzw', value=PARAMETER_MOUNT),
                             Parameter('camera_mount_tf_timeout_s', value=0.25)])
        assert run.node.tracking_report()[2]['camera_mount_source'] == ''
        run.run(camera, frames[:3])
        run.wait_exactly(run.odom, 3, 'odom messages')
        T_base_cam = camera_mount_transform(TF_MOUNT)
        assert_poses_use_mount(run.odom, T_base_cam, offline[:3])
        with pytest.raises(AssertionError):   # the test tells the two mounts apart
            assert_poses_use_mount(run.odom, camera_mount_transform(PARAMETER_MOUNT),
                                   offline[:3])
        np.testing.assert_allclose(run.node.wheel.hints.T_base_cam, T_base_cam, atol=1e-12)
        assert run.node.tracking_report()[2]['camera_mount_source'] == 'tf'
        [(_, _, _, timeout)] = sessions.lookups
        assert timeout == Duration(seconds=0.25)
        # another frame id: a warning, the mount is kept
        run.run(camera, frames[3:4], frame_id='cam_other')
        np.testing.assert_allclose(run.node.T_base_cam, T_base_cam, atol=1e-12)
        # ~/reset: the next image looks the mount up again (TF has another one by now)
        sessions.transforms[('base_link', 'cam')] = transform_stamped(PARAMETER_MOUNT)
        client = run.probe.create_client(
            Trigger, f'{run.namespace}/visual_odometry_node/reset')
        assert client.wait_for_service(timeout_sec=10.0)
        future = client.call_async(Trigger.Request())
        assert wait_for(future.done, timeout=10.0) and future.result().success
        run.run(camera, frames[4:5])
        run.wait_exactly(run.odom, 5, 'odom messages')
        assert len(sessions.lookups) == 2 and all(s.closed for s in sessions.made)
        np.testing.assert_allclose(run.node.T_base_cam, camera_mount_transform(PARAMETER_MOUNT),
                                   atol=1e-12)
        err = capfd.readouterr().err
        assert err.count('camera mount from TF: base_link <- cam') == 2
        assert err.count("image frame_id changed from 'cam' to 'cam_other'") == 1

    def test_missing_tf_keeps_the_node_running(self, mount_harness, sequence, offline,
                                               monkeypatch, capfd):
        monkeypatch.setattr(vo_node, 'open_tf2_session', Sessions())
        camera, frames = sequence
        run = mount_harness([Parameter('camera_mount_xyz_qxyzw', value=PARAMETER_MOUNT)])
        run.run(camera, frames)
        run.wait_exactly(run.odom, NUM_FRAMES, 'odom messages')
        assert_poses_use_mount(run.odom, camera_mount_transform(PARAMETER_MOUNT), offline)
        err = capfd.readouterr().err
        assert err.count('no TF base_link <- cam within 1 s') == 1
        assert run.node.tracking_report()[2]['camera_mount_source'] == 'parameter'
        assert run.node.worker.stats.snapshot().errors == 0

    def test_static_transform_broadcaster(self, mount_harness, sequence, offline, capfd):
        """With real tf2_ros: the mount a StaticTransformBroadcaster publishes is used."""
        tf2_ros = pytest.importorskip('tf2_ros')
        camera, frames = sequence
        suffix = uuid.uuid4().hex[:10]   # /tf_static is shared by every test on the host
        base, optical = f'base_{suffix}', f'cam_{suffix}'
        run = mount_harness([Parameter('camera_mount_xyz_qxyzw', value=PARAMETER_MOUNT),
                             Parameter('base_frame_id', value=base),
                             Parameter('publish_tf', value=False),
                             Parameter('camera_mount_tf_timeout_s', value=5.0)],
                            frame_id=optical)
        broadcaster = tf2_ros.StaticTransformBroadcaster(run.probe)
        broadcaster.sendTransform(transform_stamped(TF_MOUNT, base, optical))
        run.run(camera, frames)
        run.wait_exactly(run.odom, NUM_FRAMES, 'odom messages')
        assert all(m.child_frame_id == base for m in run.odom)
        assert_poses_use_mount(run.odom, camera_mount_transform(TF_MOUNT), offline)
        assert f'camera mount from TF: {base} <- {optical}' in capfd.readouterr().err
        assert wait_for(lambda: run.diagnostics_value('camera_mount_source') == 'tf',
                        timeout=10.0)
