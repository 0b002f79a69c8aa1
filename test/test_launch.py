# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""launch_testing: ``perception.launch.py`` starts visual_odometry_node.

Needs a full ROS 2 install (launch, launch_ros, launch_testing, the package installed with
colcon so that ``ros2 launch`` finds its executables); the whole module is skipped where
launch_testing is not installed (pip-only environments). Run with
``colcon test --packages-select relperception`` or ``launch_test test/test_launch.py``.
launch_testing's pytest plugin (Jazzy's 3.4) does not load under pytest 9 (which gtsam 4.3
requires): there pytest stops before any test unless run with ``-p no:launch_testing``, and
these tests then skip under pytest; ``launch_test`` runs them.
"""

import os
import time
import unittest
import uuid

import pytest

launch = pytest.importorskip('launch', reason='launch is not installed (pip-only ROS 2)')
launch_testing = pytest.importorskip('launch_testing',
                                     reason='launch_testing is not installed (pip-only ROS 2)')
launch_testing_asserts = pytest.importorskip('launch_testing.asserts')
launch_actions = pytest.importorskip('launch.actions')
launch_sources = pytest.importorskip('launch.launch_description_sources')
ament_packages = pytest.importorskip('ament_index_python.packages')
rclpy = pytest.importorskip('rclpy')
pytest.importorskip('launch_ros', reason='launch_ros is not installed (pip-only ROS 2)')


def _installed_launch_file():
    """Return the launch file of the colcon-installed package, or None (pip-only install)."""
    try:
        share = ament_packages.get_package_share_directory('relperception')
        prefix = ament_packages.get_package_prefix('relperception')
    except (ament_packages.PackageNotFoundError, ValueError, LookupError):
        return None
    launch_file = os.path.join(share, 'launch', 'perception.launch.py')
    executable = os.path.join(prefix, 'lib', 'relperception', 'visual_odometry_node')
    return launch_file if os.path.isfile(launch_file) and os.path.isfile(executable) else None


if _installed_launch_file() is None:
    pytest.skip('relperception is not installed with colcon (no launch file and node '
                'executables in an ament index): ros2 launch cannot start it',
                allow_module_level=True)

NAMESPACE = f'/test_{uuid.uuid4().hex[:8]}'
EXPECTED_NODES = {'visual_odometry_node'}
#: A parameter file with node-local keys, as a robot would have it (any namespace: /**/).
PARAMETER_FILE = {
    '/**/visual_odometry_node': {'ros__parameters': {
        'odom_frame_id': 'odom_lt', 'base_frame_id': 'body_lt', 'depth_max_dt_s': 0.03}},
    'robot_state_publisher': {'ros__parameters': {'robot_description': '<robot/>'}},
}


@pytest.fixture(autouse=True)
def _launch_testing_runs_this_module(request):
    """Skip under plain pytest: only launch_testing's runners start the launch first."""
    if not request.config.pluginmanager.hasplugin('launch_testing'):
        pytest.skip("launch_testing's pytest plugin is not active (-p no:launch_testing): run "
                    '`launch_test test/test_launch.py`')


@pytest.mark.launch_test
def generate_test_description():
    """Include the package's launch file with topics under a unique namespace."""
    import atexit
    import tempfile

    import yaml

    launch_file = _installed_launch_file()
    handle, config_file = tempfile.mkstemp(suffix='.yaml', prefix='relperception_launch_')
    with os.fdopen(handle, 'w', encoding='utf-8') as stream:
        yaml.safe_dump(PARAMETER_FILE, stream)
    atexit.register(os.remove, config_file)
    arguments = {'namespace': NAMESPACE, 'image_topic': NAMESPACE + '/image',
                 'camera_info_topic': NAMESPACE + '/camera_info', 'config_file': config_file,
                 'publish_tf': 'false', 'log_level': 'info'}
    return launch.LaunchDescription([
        launch_actions.IncludeLaunchDescription(
            launch_sources.PythonLaunchDescriptionSource(launch_file),
            launch_arguments=arguments.items()),
        launch_testing.actions.ReadyToTest(),
    ])


class TestNodesStart(unittest.TestCase):

    def test_both_nodes_join_the_graph(self):
        context = rclpy.Context()
        rclpy.init(context=context)
        node = rclpy.create_node('launch_observer', context=context)
        seen = set()
        try:
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline and seen != EXPECTED_NODES:
                seen = {name for name, ns in node.get_node_names_and_namespaces()
                        if ns == NAMESPACE} & EXPECTED_NODES
                time.sleep(0.2)
        finally:
            node.destroy_node()
            context.try_shutdown()
        self.assertEqual(seen, EXPECTED_NODES)

    def test_images_in_odometry_out_with_the_files_frames(self):
        from nav_msgs.msg import Odometry, Path
        from relperception.data.messages import camera_info_fields, ns_to_sec_nanosec
        from relperception.data.synthetic import iter_sequence
        from relperception.imaging import numpy_to_image_fields
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile
        from sensor_msgs.msg import CameraInfo, Image

        context = rclpy.Context()
        rclpy.init(context=context)
        node = rclpy.create_node('launch_feeder', context=context)
        odom, paths = [], []
        node.create_subscription(Odometry, NAMESPACE + '/odom', odom.append, 20)
        node.create_subscription(Path, NAMESPACE + '/path', paths.append, 20)
        image_publisher = node.create_publisher(Image, NAMESPACE + '/image', QoSProfile(depth=5))
        info_publisher = node.create_publisher(CameraInfo, NAMESPACE + '/camera_info',
                                               QoSProfile(depth=5))
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        camera, frames = iter_sequence(8, seed=2, width=320, height=240)
        try:
            deadline = time.monotonic() + 30.0
            while image_publisher.get_subscription_count() == 0 and \
                    time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.1)
            fields = camera_info_fields(camera)
            for frame in frames:
                sec, nanosec = ns_to_sec_nanosec(frame.stamp_ns)
                info = CameraInfo(height=fields['height'], width=fields['width'],
                                  distortion_model=fields['distortion_model'],
                                  d=fields['d'].tolist(), k=fields['k'], r=fields['r'],
                                  p=fields['p'])
                info.header.stamp.sec, info.header.stamp.nanosec = sec, nanosec
                info.header.frame_id = 'camera'
                image = numpy_to_image_fields(frame.rgb, 'rgb8')
                msg = Image(height=image['height'], width=image['width'],
                            encoding=image['encoding'], is_bigendian=image['is_bigendian'],
                            step=image['step'], data=image['data'].tobytes())
                msg.header = info.header
                info_publisher.publish(info)
                image_publisher.publish(msg)
                end = time.monotonic() + 0.5
                while time.monotonic() < end:
                    executor.spin_once(timeout_sec=0.05)
            end = time.monotonic() + 10.0
            while len(odom) < 5 and time.monotonic() < end:
                executor.spin_once(timeout_sec=0.1)
        finally:
            executor.shutdown()
            node.destroy_node()
            context.try_shutdown()
        self.assertGreaterEqual(len(odom), 5)
        self.assertTrue(all(m.header.frame_id == 'odom_lt' and m.child_frame_id == 'body_lt'
                            for m in odom))
        self.assertTrue(any(max(m.pose.covariance) > 0.0 for m in odom[1:]))
        self.assertTrue(paths and paths[-1].header.frame_id == 'odom_lt')


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):

    def test_exit_codes(self, proc_info):
        # SIGINT from launch at shutdown: 0 after a clean stop, -2 if interrupted in startup.
        launch_testing_asserts.assertExitCodes(proc_info, allowable_exit_codes=[0, -2])
