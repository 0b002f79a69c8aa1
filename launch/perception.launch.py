# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Launch the relperception node set (visual_odometry_node [, dense_node]) on a camera.

The nodes, their remappings and parameters come from ``relperception.nodes.graph.node_set``,
the same description ``relperception run`` starts, so the two cannot drift apart. Examples::

    ros2 launch relperception perception.launch.py
    ros2 launch relperception perception.launch.py image_topic:=/camera/color/image_raw
        camera_info_topic:=/camera/color/camera_info
        depth_topic:=/camera/aligned_depth_to_color/image_raw   # (one line)
    ros2 launch relperception perception.launch.py one_process:=true   # one process
    ros2 launch relperception perception.launch.py dense:=true   # + dense depth and labels
    ros2 launch relperception perception.launch.py dense_depth_to_odometry:=true   # metric mono
    ros2 launch relperception perception.launch.py correspondences_only:=true   # matcher_node
    ros2 launch relperception perception.launch.py wheel_odom_topic:=/odom
        namespace:=vo   # metric mono; the odometry on /vo/odom, off the base's (one line)
    ros2 launch relperception perception.launch.py camera_mount_source:=parameter
        camera_mount_xyz_qxyzw:="0.1 0 0.2 -0.5 0.5 -0.5 0.5"   # mount not on TF (one line)

``one_process:=true`` (alias ``use_composition``): rclpy has no component containers for
Python nodes, so instead of composition this runs ``relperception run`` - the same nodes in ONE
process with a MultiThreadedExecutor, which keeps the image chain out of DDS.
"""

import os

from ament_index_python.packages import get_package_prefix, get_package_share_directory
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, ExecuteProcess, OpaqueFunction,
                            SetEnvironmentVariable)
from launch.substitutions import EnvironmentVariable, LaunchConfiguration
from launch_ros.actions import Node

from relperception.config import (DEPTH_TRANSPORTS, IMAGE_TRANSPORTS, MATCHERS,
                                  NODE_LOCAL_SPECS, SPECS)
from relperception.nodes.graph import (fastdds_environment, FASTDDS_PROFILE_ENV,
                                       FASTDDS_PROFILE_NAME, launch_flag,
                                       LAUNCH_ODOMETRY_PARAMETERS, launch_odometry_parameters,
                                       node_set)

PACKAGE = 'relperception'
#: The boolean launch arguments (true/false; anything else is refused, named).
FLAGS = ('dense', 'dense_depth_to_odometry', 'correspondences_only', 'use_sim_time', 'respawn',
         'one_process', 'use_composition')


def _value(context, name):
    return LaunchConfiguration(name).perform(context).strip()


def _launch_nodes(context, *args, **kwargs):
    """Build the actions from the evaluated launch arguments (an OpaqueFunction)."""
    flags = {name: launch_flag(name, _value(context, name)) for name in FLAGS}
    descriptions = node_set(
        matcher=_value(context, 'matcher'), image_topic=_value(context, 'image_topic'),
        camera_info_topic=_value(context, 'camera_info_topic'),
        depth_topic=_value(context, 'depth_topic'),
        image_transport=_value(context, 'image_transport'),
        namespace=_value(context, 'namespace'),
        depth_transport=_value(context, 'depth_transport'),
        dense=flags['dense'] or flags['dense_depth_to_odometry'],
        dense_depth_to_odometry=flags['dense_depth_to_odometry'],
        correspondences_only=flags['correspondences_only'],
        wheel_odom_topic=_value(context, 'wheel_odom_topic'))
    config_file = _value(context, 'config_file')
    use_sim_time = flags['use_sim_time']
    odometry_parameters = launch_odometry_parameters(
        {name: _value(context, name) for name in LAUNCH_ODOMETRY_PARAMETERS})
    log_level = _value(context, 'log_level')
    respawn = flags['respawn']
    actions = []
    profile = _value(context, 'fastdds_profile')
    if profile:
        actions += [SetEnvironmentVariable(name, value)
                    for name, value in fastdds_environment(profile).items()]
    if flags['one_process'] or flags['use_composition']:
        command = [os.path.join(get_package_prefix(PACKAGE), 'lib', PACKAGE, PACKAGE), 'run',
                   '--image-topic', _value(context, 'image_topic'),
                   '--camera-info-topic', _value(context, 'camera_info_topic'),
                   '--depth-topic', _value(context, 'depth_topic'),
                   '--wheel-odom-topic', _value(context, 'wheel_odom_topic'),
                   '--image-transport', _value(context, 'image_transport'),
                   '--depth-transport', _value(context, 'depth_transport'),
                   '--namespace', _value(context, 'namespace')]
        if config_file:
            command += ['--config', config_file]
        if _value(context, 'matcher'):
            command += ['--matcher', _value(context, 'matcher')]
        if flags['dense']:
            command.append('--dense')
        if flags['dense_depth_to_odometry']:
            command.append('--dense-depth-to-odometry')
        if flags['correspondences_only']:
            command.append('--correspondences-only')
        if use_sim_time:
            command.append('--use-sim-time')
        if not profile:
            command.append('--no-fastdds-profile')
        for name, value in odometry_parameters.items():
            if isinstance(value, list):
                text = ' '.join(str(v) for v in value)
            else:
                text = str(value).lower() if isinstance(value, bool) else str(value)
            command += ['--odometry-param', f'{name}={text}']
        actions.append(ExecuteProcess(cmd=command, name='relperception_run', output='screen',
                                      emulate_tty=True))
        return actions
    for description in descriptions:
        parameters = []
        if description.parameters_from_config and config_file:
            parameters.append(config_file)
        local = odometry_parameters if description.name == 'visual_odometry_node' else {}
        parameters.append(dict(description.parameters, use_sim_time=use_sim_time, **local))
        actions.append(Node(
            package=description.package, executable=description.executable,
            name=description.name, namespace=description.namespace,
            remappings=description.remapping_pairs(), parameters=parameters,
            ros_arguments=['--log-level', log_level] if log_level else [],
            respawn=respawn, respawn_delay=2.0 if respawn else 0.0,
            output='screen', emulate_tty=True))
    return actions


def generate_launch_description():
    """Declare the arguments and start the node set."""
    share = get_package_share_directory(PACKAGE)
    default_profile = os.path.join(share, 'config', FASTDDS_PROFILE_NAME)
    odometry_specs = NODE_LOCAL_SPECS['visual_odometry_node']
    arguments = [
        DeclareLaunchArgument(name, default_value='',
                              description=f"visual_odometry_node's {name}: "
                                          f"{odometry_specs[name].description}; '' = the "
                                          'config file or the default')
        for name in LAUNCH_ODOMETRY_PARAMETERS
    ] + [
        DeclareLaunchArgument('log_level', default_value='',
                              choices=['', 'debug', 'info', 'warn', 'error', 'fatal'],
                              description="the nodes' log level; '' = info"),
        DeclareLaunchArgument('respawn', default_value='false',
                              description='true: restart a node that exits (after 2 s)'),
        DeclareLaunchArgument('image_topic', default_value=SPECS['topics.image'].default,
                              description='camera image topic (sensor_msgs/Image)'),
        DeclareLaunchArgument('camera_info_topic',
                              default_value=SPECS['topics.camera_info'].default,
                              description='sensor_msgs/CameraInfo topic of that camera'),
        DeclareLaunchArgument('depth_topic', default_value='',
                              description='depth image topic (16UC1 mm or 32FC1 m) for RGB-D '
                                          "odometry; '' = monocular"),
        DeclareLaunchArgument('wheel_odom_topic', default_value='',
                              description='nav_msgs/Odometry of the base (wheel odometry): the '
                                          "monocular translation hints; '' = none"),
        DeclareLaunchArgument('image_transport', default_value=IMAGE_TRANSPORTS[0],
                              choices=list(IMAGE_TRANSPORTS),
                              description="'compressed' reads <image_topic>/compressed"),
        DeclareLaunchArgument('depth_transport', default_value=DEPTH_TRANSPORTS[0],
                              choices=list(DEPTH_TRANSPORTS),
                              description="'compressedDepth' reads <depth_topic>/compressedDepth"),
        DeclareLaunchArgument('matcher', default_value='',
                              choices=[''] + list(MATCHERS),
                              description="correspondence method; '' = the config file's"),
        DeclareLaunchArgument('dense', default_value='false',
                              description='true: also start dense_node (depth, labels, '
                                          'labels_color, depth_color; dense.* parameters)'),
        DeclareLaunchArgument('dense_depth_to_odometry', default_value='false',
                              description="true: dense_node's depth feeds the odometry "
                                          'depth_in (metric monocular VO; implies dense)'),
        DeclareLaunchArgument('correspondences_only', default_value='false',
                              description='true: matcher_node alone (consecutive-frame '
                                          'correspondences, no odometry)'),
        DeclareLaunchArgument('config_file',
                              default_value=os.path.join(share, 'config', 'default.yaml'),
                              description='ROS 2 parameter file with relperception keys'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace of the nodes and their outputs'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='follow /clock (bag playback with --clock)'),
        DeclareLaunchArgument('one_process', default_value='false',
                              description='true: run all nodes in one process (relperception '
                                          'run; rclpy has no Python component containers)'),
        DeclareLaunchArgument('use_composition', default_value='false',
                              description='alias of one_process'),
        DeclareLaunchArgument('fastdds_profile',
                              default_value=EnvironmentVariable(FASTDDS_PROFILE_ENV,
                                                                default_value=default_profile),
                              description="Fast DDS XML profile for the nodes; '' = Fast DDS "
                                          'defaults (large images get lost between processes)'),
    ]
    return LaunchDescription(arguments + [OpaqueFunction(function=_launch_nodes)])
