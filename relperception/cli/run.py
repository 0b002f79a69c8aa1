# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception run``: start the node set live, in one process (no ``ros2 launch`` needed).

Runs the same nodes as ``ros2 launch relperception perception.launch.py`` (both are built
from ``relperception.nodes.graph.node_set``), as rclpy nodes in ONE process with one executor
(each node does its work on its own worker thread). The Fast DDS profile shipped in
``config/fastdds_profile.xml`` is applied before DDS starts unless
``FASTRTPS_DEFAULT_PROFILES_FILE`` is already set or ``--no-fastdds-profile`` is given.
Ctrl-C or SIGTERM stop it cleanly.
"""

from __future__ import annotations

import argparse
import logging

from relperception.cli.common import float_in_range
from relperception.config import DEPTH_TRANSPORTS, IMAGE_TRANSPORTS, MATCHERS

HELP = ('run the matcher and odometry nodes (and, with --dense, the dense node) live on ROS 2 '
        'topics, in one process')

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``run``.

    Args:
        parser: the verb's parser.
    """
    parser.add_argument('--config', metavar='YAML',
                        help='parameter file (ROS 2 parameter file, nested or flat YAML; '
                             'default: built-in defaults = config/default.yaml)')
    parser.add_argument('--matcher', choices=MATCHERS, default=None,
                        help="correspondence method (default: the configuration's, ncc)")
    parser.add_argument('--image-topic', metavar='T',
                        help='camera image topic (default: topics.image of --config, '
                             '/camera/image_raw)')
    parser.add_argument('--camera-info-topic', metavar='T',
                        help='CameraInfo topic (default: topics.camera_info of --config, '
                             '/camera/camera_info)')
    parser.add_argument('--depth-topic', metavar='T',
                        help='depth image topic (16UC1 mm or 32FC1 m) for RGB-D odometry; '
                             'default: topics.depth of --config where it sets one, else none '
                             '(monocular)')
    parser.add_argument('--wheel-odom-topic', metavar='T',
                        help='nav_msgs/Odometry of the base (wheel odometry): the distance '
                             'between frames is the monocular translation hint; default: '
                             "topics.wheel_odometry of --config, none; '' = none")
    parser.add_argument('--image-transport', choices=IMAGE_TRANSPORTS,
                        default=IMAGE_TRANSPORTS[0],
                        help='raw Image, or CompressedImage on <image-topic>/compressed')
    parser.add_argument('--depth-transport', choices=DEPTH_TRANSPORTS,
                        default=DEPTH_TRANSPORTS[0],
                        help='raw Image, or CompressedImage on <depth-topic>/compressedDepth')
    parser.add_argument('--dense', action='store_true',
                        help='also run dense_node (depth, labels, labels_color, depth_color of '
                             'the image; model from the dense.* parameters)')
    parser.add_argument('--dense-depth-to-odometry', action='store_true',
                        help="feed dense_node's depth to the odometry node's depth_in (metric "
                             'monocular VO; implies --dense, excludes --depth-topic)')
    parser.add_argument('--correspondences-only', action='store_true',
                        help='run matcher_node alone: correspondences between consecutive '
                             'frames, no odometry')
    parser.add_argument('--namespace', default='', metavar='NS',
                        help='ROS namespace of the nodes (default: root)')
    parser.add_argument('--use-sim-time', action='store_true',
                        help='follow /clock (e.g. while playing a bag with --clock)')
    parser.add_argument('--no-fastdds-profile', action='store_true',
                        help='do not apply the packaged Fast DDS profile')
    parser.add_argument('--odometry-param', action='append', default=[], metavar='NAME=VALUE',
                        help='a node-local parameter of visual_odometry_node, over the '
                             'parameter file (repeatable): odom_frame_id, base_frame_id, '
                             'publish_tf, camera_mount_source (tf or parameter), '
                             'camera_mount_xyz_qxyzw ("x y z qx qy qz qw"), '
                             'rectified_input')
    parser.add_argument('--duration', type=float_in_range(0.001, 1e7), default=None,
                        metavar='S',
                        help='stop after S seconds (default: run until Ctrl-C)')


def run(args: argparse.Namespace) -> int:
    """Start the nodes and spin until Ctrl-C, SIGTERM or ``--duration``.

    Args:
        args: parsed options of ``run``.

    Returns:
        The exit code.
    """
    from relperception.nodes import graph

    descriptions, config = node_descriptions(args)
    profile = graph.apply_fastdds_profile(enabled=not args.no_fastdds_profile)
    logger.info('Fast DDS profile: %s', profile or 'none (Fast DDS defaults)')
    graph.ensure_ament_prefix()
    for description in descriptions:
        logger.info('%s: %s', description.name,
                    ', '.join(f'{a} -> {b}' for a, b in description.remapping_pairs()))
    return graph.run_node_set(descriptions, config=config, use_sim_time=args.use_sim_time,
                              duration_s=args.duration)


def node_descriptions(args: argparse.Namespace):
    """Describe the nodes ``run`` starts: the options, over the parameter file's ``topics.*``.

    Args:
        args: parsed options of ``run``.

    Returns:
        ``(descriptions, config)``: the :class:`~relperception.nodes.graph.NodeDescription`
        list, with the parameter file's node values and the ``--odometry-param`` values, and
        the flat validated configuration.

    Raises:
        ValueError: a bad parameter file, topic or ``--odometry-param``, named.
    """
    from relperception.config import load_parameter_file, SPECS
    from relperception.nodes import graph

    parameter_file = load_parameter_file(args.config)
    config = parameter_file.config
    # the topics.* of the parameter file, as eval and replay read them; an option wins, and
    # an empty --depth-topic / --wheel-odom-topic means none (the launch file passes '')
    depth_topic = args.depth_topic
    if depth_topic is None:   # a bag's depth topic is looked for; live, only one named
        depth_topic = '' if config['topics.depth'] == SPECS['topics.depth'].default \
            else config['topics.depth']
    wheel_odom_topic = args.wheel_odom_topic
    if wheel_odom_topic is None:
        wheel_odom_topic = config['topics.wheel_odometry']
    descriptions = graph.node_set(
        matcher=args.matcher, image_topic=args.image_topic or config['topics.image'],
        camera_info_topic=args.camera_info_topic or config['topics.camera_info'],
        depth_topic=depth_topic, image_transport=args.image_transport,
        namespace=args.namespace, depth_transport=args.depth_transport,
        dense=args.dense or args.dense_depth_to_odometry,
        dense_depth_to_odometry=args.dense_depth_to_odometry,
        correspondences_only=args.correspondences_only,
        wheel_odom_topic=wheel_odom_topic)
    descriptions = [d.with_parameter_file(parameter_file) for d in descriptions]
    odometry = graph.launch_odometry_parameters(dict(
        _name_value(text) for text in args.odometry_param))
    for description in descriptions:
        if description.name == 'visual_odometry_node':
            description.parameters.update(odometry)
    return descriptions, config


def _name_value(text: str):
    """Split ``NAME=VALUE`` (not ``:=``, which rcl would read as a remapping)."""
    name, separator, value = text.partition('=')
    if not separator or not name.strip():
        raise ValueError(f'--odometry-param takes NAME=VALUE, got {text!r}')
    return name.strip(), value
