# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""launch_testing: ``perception.launch.py`` starts visual_odometry_node.

Needs a full ROS 2 install (launch, launch_ros, launch_testing, the package installed with
colcon so that ``ros2 launch`` finds its executables); the whole module is skipped where
launch_testing is not installed (pip-only environments). Run with
``colcon test --packages-select relperception`` or ``launch_test test/test_launch.py``.
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


@pytest.mark.launch_test
def generate_test_description():
    """Include the package's launch file with topics under a unique namespace."""
    launch_file = _installed_launch_file()
    arguments = {'namespace': NAMESPACE, 'image_topic': NAMESPACE + '/image',
                 'camera_info_topic': NAMESPACE + '/camera_info'}
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


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):

    def test_exit_codes(self, proc_info):
        # SIGINT from launch at shutdown: 0 after a clean stop, -2 if interrupted in startup.
        launch_testing_asserts.assertExitCodes(proc_info, allowable_exit_codes=[0, -2])
