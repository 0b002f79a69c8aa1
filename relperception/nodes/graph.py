# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The relperception node set, described once for ``ros2 launch`` and ``relperception run``.

``launch/perception.launch.py`` turns every :class:`NodeDescription` of :func:`node_set` into a
``launch_ros`` ``Node`` (one process per node); ``relperception run`` instantiates the same
descriptions as rclpy nodes in ONE process with one executor (pip-only installs
have no ``ros2 launch``; one process also spares the images a trip through DDS). Because both
read this module, the topics, remappings and parameters cannot drift apart.

The graph::

    image_topic ───────▶ visual_odometry_node ─▶ odom, path, TF, correspondences (keyframe ->
    camera_info_topic ──┘        ▲                                                 frame)
    depth_topic ──(depth_in)─────┘   (optional)
    image_topic ─▶ dense_node ─▶ depth, labels, labels_color, depth_color   (dense=True)
                         └─depth─(depth_in)─▶ visual_odometry_node   (dense_depth_to_odometry)
    all ─▶ /diagnostics

``visual_odometry_node`` runs the matcher and the tracker that ``relperception eval`` scores,
in one process. With ``correspondences_only`` the graph is ``matcher_node`` alone: matches
between consecutive frames on ``correspondences``, no odometry.

Everything here is importable without ROS: rclpy and ament_index_python are imported inside
the functions that need them, so the launch file and the ``run`` verb stay light.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
import importlib
import logging
import os
from pathlib import Path
import sys
import threading
from typing import Any, Dict, List, Mapping, MutableMapping, Optional, Sequence

from relperception.config import (check_distinct_topics, DEPTH_TRANSPORTS, IMAGE_TRANSPORTS,
                                  MATCHERS, ODOMETRY_TOPIC)

PACKAGE = 'relperception'
FASTDDS_PROFILE_ENV = 'FASTRTPS_DEFAULT_PROFILES_FILE'
# Fast DDS 3 (ROS 2 Kilted and later) reads this name; a user who set either keeps theirs.
FASTDDS_PROFILE_ENV_NEW = 'FASTDDS_DEFAULT_PROFILES_FILE'
FASTDDS_PROFILE_NAME = 'fastdds_profile.xml'
#: rmw_fastrtps takes the history memory policy (and publication mode) from the XML profile
#: only when this is '1'; the packaged profile needs it (see its comment).
FASTDDS_QOS_FROM_XML_ENV = 'RMW_FASTRTPS_USE_QOS_FROM_XML'
#: The words a boolean launch argument (and ``--odometry-param`` boolean) takes, any case.
TRUE_WORDS = ('true', '1', 'yes', 'on')
FALSE_WORDS = ('false', '0', 'no', 'off')

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeDescription:
    """One node of the set, in the terms both ``launch_ros.actions.Node`` and rclpy use.

    Attributes:
        name: node name (``matcher_node``); also the console script in ``lib/relperception``.
        executable: console script that runs the node alone (``ros2 run relperception ...``).
        plugin: ``module:Class`` of the rclpy node class, instantiated by ``relperception run``.
        remappings: relative topic name -> absolute or relative target, in the node's order.
        parameters_from_config: whether the node takes the configuration file's parameters.
        parameters: node-local parameter values applied after the configuration file.
        namespace: ROS namespace of the node ('' for the root namespace).
        package: ROS package that provides the executable.
    """

    name: str
    executable: str
    plugin: str
    remappings: Dict[str, str] = field(default_factory=dict)
    parameters_from_config: bool = True
    parameters: Dict[str, Any] = field(default_factory=dict)
    namespace: str = ''
    package: str = PACKAGE

    def remapping_pairs(self) -> List[tuple]:
        """Return the remappings as ``[(from, to), ...]`` (the form ``launch_ros`` takes)."""
        return list(self.remappings.items())

    def ros_arguments(self) -> List[str]:
        """Return ``['--ros-args', '-r', 'from:=to', ...]`` for rclpy's ``cli_args``."""
        arguments = ['--ros-args']
        for source, target in self.remappings.items():
            arguments += ['-r', f'{source}:={target}']
        return arguments

    def parameter_values(self, config: Optional[Mapping[str, Any]] = None,
                         use_sim_time: bool = False) -> Dict[str, Any]:
        """Return the flat parameter values this node starts with.

        Args:
            config: flat validated configuration (``relperception.config.load_config``), used
                when ``parameters_from_config`` is true; None for none.
            use_sim_time: whether the node follows ``/clock``.

        Returns:
            ``{name: value}``: the configuration, then the node-local ``parameters``, then
            ``use_sim_time`` (later entries win, as in a launch file's parameter list; a
            ``use_sim_time: true`` among the parameters, e.g. from a parameter file, stays).
        """
        values: Dict[str, Any] = {}
        if self.parameters_from_config and config:
            values.update(config)
        values.update(self.parameters)
        values['use_sim_time'] = bool(use_sim_time) or values.get('use_sim_time') is True
        return values

    def with_parameter_file(self, parameter_file) -> 'NodeDescription':
        """Return a copy that also starts with the parameter file's values for this node.

        The node-local and standard ROS values of ``parameter_file``
        (:class:`relperception.config.ParameterFile`) for this node name come first; the
        description's own ``parameters`` (set from command-line options) win over them.
        """
        return replace(self, parameters={**parameter_file.for_node(self.name),
                                         **self.parameters})

    def load_class(self):
        """Import and return the node class named by ``plugin`` (imports rclpy)."""
        module_name, _, class_name = self.plugin.partition(':')
        if not module_name or not class_name:
            raise ValueError(f'plugin must be "module:Class", got {self.plugin!r}')
        return getattr(importlib.import_module(module_name), class_name)


#: Node-local parameters of the odometry node that the launch file also takes as arguments
#: ('' = the parameter file's or the default value).
LAUNCH_ODOMETRY_PARAMETERS = ('odom_frame_id', 'base_frame_id', 'publish_tf',
                              'camera_mount_source', 'camera_mount_xyz_qxyzw', 'rectified_input')


def launch_flag(name: str, text: str) -> bool:
    """Read the boolean launch argument ``name`` (``dense:=true``).

    Args:
        name: the argument's name, for the message.
        text: its value: a word of :data:`TRUE_WORDS` or :data:`FALSE_WORDS`, any case.

    Returns:
        The value.

    Raises:
        ValueError: any other text (``ture``, ``maybe``), named: a typo must not switch a
            feature off silently.
    """
    word = str(text).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError(f'{name} must be true or false, got {text!r}')


def launch_odometry_parameters(arguments: Mapping[str, str]) -> Dict[str, Any]:
    """Turn launch-argument strings into typed ``visual_odometry_node`` parameter values.

    Args:
        arguments: ``{name: text}`` for names of :data:`LAUNCH_ODOMETRY_PARAMETERS`; empty texts
            are left out. Booleans take the words of :func:`launch_flag`; the mount is 7
            numbers separated by spaces or commas (``x y z qx qy qz qw``).

    Returns:
        ``{name: value}`` validated by the schema's node-local specs.

    Raises:
        ValueError: an unknown name or a value that does not fit, named.
    """
    from relperception.config import NODE_LOCAL_SPECS

    specs = NODE_LOCAL_SPECS['visual_odometry_node']
    values: Dict[str, Any] = {}
    for name, text in arguments.items():
        if name not in LAUNCH_ODOMETRY_PARAMETERS:
            raise ValueError(f'{name!r} is not a launch argument of the odometry node; known: '
                             f'{", ".join(LAUNCH_ODOMETRY_PARAMETERS)}')
        text = str(text).strip()
        if not text:
            continue
        default = specs[name].default
        if isinstance(default, bool):
            value: Any = launch_flag(name, text)
        elif isinstance(default, list):
            try:
                value = [float(part) for part in text.replace(',', ' ').split()]
            except ValueError:
                raise ValueError(f'{name} must be numbers separated by spaces, got '
                                 f'{text!r}') from None
        else:
            value = text
        values[name] = specs[name].validate(value)
    return values


def normalize_namespace(namespace: str) -> str:
    """Return ``namespace`` as '' (the root) or an absolute ROS namespace (``/robot1``).

    Raises:
        ValueError: not a valid ROS namespace (e.g. a part starting with a digit, '//',
            spaces), with rclpy's reason on one line.
    """
    from rclpy.exceptions import InvalidNamespaceException
    from rclpy.validate_namespace import validate_namespace

    namespace = str(namespace).strip().rstrip('/')
    if namespace and not namespace.startswith('/'):
        namespace = '/' + namespace
    if namespace:
        try:
            validate_namespace(namespace)
        except InvalidNamespaceException as error:
            reason = ' '.join(str(error).split('\n')[0].split()).rstrip(':')
            raise ValueError(f'--namespace {namespace!r} is not a valid ROS namespace '
                             f'({reason})') from None
    return namespace


def _absolute_or_relative(topic: str, what: str) -> str:
    from rclpy.exceptions import InvalidTopicNameException
    from rclpy.expand_topic_name import expand_topic_name
    from rclpy.validate_full_topic_name import validate_full_topic_name
    from rclpy.validate_topic_name import validate_topic_name

    topic = topic.strip()
    if not topic:
        raise ValueError(f'{what} must not be empty')
    if any(c.isspace() for c in topic) or topic.endswith('/') and topic != '/':
        raise ValueError(f'{what} is not a valid ROS topic name: {topic!r}')
    try:   # rcl's rules (a token starting with a digit, '-', '//'), before a node starts
        validate_topic_name(topic)
        validate_full_topic_name(expand_topic_name(topic, 'node', '/'))
    except InvalidTopicNameException as error:
        reason = ' '.join(str(error).split('\n')[0].split()).rstrip(':')
        raise ValueError(f'{what} is not a valid ROS topic name: {topic!r} ({reason})') \
            from None
    return topic


def check_not_own_odometry(wheel_odom_topic: str, namespace: str) -> None:
    """Refuse a wheel odometry topic that is the odometry node's own output.

    Args:
        wheel_odom_topic: the ``wheel_odom`` topic, absolute or relative to ``namespace``.
        namespace: the nodes' namespace ('' or absolute, see :func:`normalize_namespace`).

    Raises:
        ValueError: ``wheel_odom_topic`` resolves to ``<namespace>/odom``, where
            ``visual_odometry_node`` publishes: the node would read its own odometry as wheel
            odometry, and the topic would carry two odometries.
    """
    own = f'{namespace}/{ODOMETRY_TOPIC}'
    wheel = wheel_odom_topic if wheel_odom_topic.startswith('/') else \
        f'{namespace}/{wheel_odom_topic}'
    if wheel == own:
        raise ValueError(
            f'wheel_odom_topic {wheel_odom_topic!r} is {own}, where visual_odometry_node '
            'publishes its own odometry: it would read itself as wheel odometry and the topic '
            'would carry two odometries; give the nodes a namespace (namespace /vo: the '
            'odometry goes to /vo/odom)')


def node_set(matcher: Optional[str] = 'ncc', image_topic: str = '/camera/image_raw',
             camera_info_topic: str = '/camera/camera_info', depth_topic: str = '',
             image_transport: str = 'raw', namespace: str = '',
             depth_transport: str = 'raw', dense: bool = False,
             dense_depth_to_odometry: bool = False,
             correspondences_only: bool = False,
             wheel_odom_topic: str = '') -> List[NodeDescription]:
    """Describe the relperception nodes and how their topics are wired.

    Args:
        matcher: correspondence method (``ncc``, ``loftr``, ``klt`` or ``orb``), set as the
            ``matcher`` parameter after the configuration file; None or '' keeps the
            configuration file's value.
        image_topic: camera image topic (``sensor_msgs/Image``; with ``image_transport``
            ``compressed`` the node reads ``<image_topic>/compressed``).
        camera_info_topic: ``sensor_msgs/CameraInfo`` topic of that camera.
        depth_topic: depth image topic (16UC1 mm or 32FC1 m) for RGB-D odometry; '' for none.
        image_transport: ``raw`` or ``compressed``, as in image_transport.
        namespace: ROS namespace of every node ('' for the root namespace); the nodes' own
            outputs (``correspondences``, ``odom``, ``path``, ...) are relative to it.
        depth_transport: ``raw`` or ``compressedDepth`` (the odometry node then reads
            ``<depth_topic>/compressedDepth``).
        dense: also start ``dense_node`` (dense depth and labels of ``image_topic``; its
            outputs ``depth``, ``labels``, ``labels_color``, ``depth_color`` are relative to
            ``namespace``).
        dense_depth_to_odometry: remap the odometry node's ``depth_in`` to the dense node's
            ``depth`` (metric depth from a monocular camera); needs ``dense``, no
            ``depth_topic`` and ``depth_transport`` raw.
        correspondences_only: start ``matcher_node`` (consecutive-frame correspondences)
            instead of ``visual_odometry_node``; no depth inputs then.
        wheel_odom_topic: ``nav_msgs/Odometry`` of the base (wheel odometry) for the odometry
            node's ``wheel_odom`` input (the monocular translation hints); '' for none.

    Returns:
        The node descriptions, upstream first.

    Raises:
        ValueError: for an unknown matcher or transport, an empty or malformed topic, two
            inputs on one topic, ``dense_depth_to_odometry`` without ``dense``, with
            ``depth_topic`` or with a compressed depth transport, or depth or wheel odometry
            inputs with ``correspondences_only``.
    """
    if matcher and matcher not in MATCHERS:
        raise ValueError(f'matcher must be one of {list(MATCHERS)}, got {matcher!r}')
    if image_transport not in IMAGE_TRANSPORTS:
        raise ValueError(
            f'image_transport must be one of {list(IMAGE_TRANSPORTS)}, got {image_transport!r}')
    if depth_transport not in DEPTH_TRANSPORTS:
        raise ValueError(f'depth_transport must be one of {list(DEPTH_TRANSPORTS)}, '
                         f'got {depth_transport!r}')
    image_topic = _absolute_or_relative(image_topic, 'image_topic')
    camera_info_topic = _absolute_or_relative(camera_info_topic, 'camera_info_topic')
    depth_topic = depth_topic.strip()
    if depth_topic:
        depth_topic = _absolute_or_relative(depth_topic, 'depth_topic')
    wheel_odom_topic = wheel_odom_topic.strip()
    if wheel_odom_topic:
        wheel_odom_topic = _absolute_or_relative(wheel_odom_topic, 'wheel_odom_topic')
    namespace = normalize_namespace(namespace)
    check_distinct_topics({'image_topic': image_topic, 'camera_info_topic': camera_info_topic,
                           'depth_topic': depth_topic, 'wheel_odom_topic': wheel_odom_topic})

    image_remappings = {'image': image_topic, 'camera_info': camera_info_topic}
    if image_transport == 'compressed':
        # image_transport resolves the base name, then appends '/compressed'; an rclpy node
        # that subscribes 'image/compressed' directly needs that name remapped too.
        image_remappings['image/compressed'] = image_topic + '/compressed'
    parameters: Dict[str, Any] = {'image_transport': image_transport}
    if matcher:
        parameters['matcher'] = matcher

    if dense_depth_to_odometry and not dense:
        raise ValueError('dense_depth_to_odometry needs dense=True (the dense node publishes '
                         'the depth)')
    if dense_depth_to_odometry and depth_topic:
        raise ValueError(f'dense_depth_to_odometry and depth_topic {depth_topic!r} both '
                         "feed the odometry node's depth_in; choose one")
    if correspondences_only and (depth_topic or dense_depth_to_odometry or wheel_odom_topic):
        raise ValueError('correspondences_only runs no odometry: depth_topic, '
                         'dense_depth_to_odometry and wheel_odom_topic do not apply')

    if correspondences_only:
        descriptions = [NodeDescription(
            name='matcher_node', executable='matcher_node',
            plugin='relperception.nodes.matcher_node:MatcherNode',
            remappings={**image_remappings, 'diagnostics': '/diagnostics'},
            parameters=parameters, namespace=namespace)]
    else:
        remappings = dict(image_remappings)
        if dense_depth_to_odometry:
            if depth_transport != 'raw':
                raise ValueError('dense_depth_to_odometry feeds raw 32FC1 depth; '
                                 f'depth_transport must be raw, got {depth_transport!r}')
            remappings['depth_in'] = 'depth'  # the dense node's output, same namespace
        if depth_topic:
            remappings['depth_in'] = depth_topic
            if depth_transport == 'compressedDepth':
                remappings['depth_in/compressedDepth'] = depth_topic + '/compressedDepth'
        if wheel_odom_topic:
            check_not_own_odometry(wheel_odom_topic, namespace)
            remappings['wheel_odom'] = wheel_odom_topic
        remappings['diagnostics'] = '/diagnostics'
        descriptions = [NodeDescription(
            name='visual_odometry_node', executable='visual_odometry_node',
            plugin='relperception.nodes.vo_node:VisualOdometryNode',
            remappings=remappings,
            parameters={**parameters, 'depth_transport': depth_transport},
            namespace=namespace)]
    if dense:
        dense_remappings = {'image': image_topic, 'camera_info': camera_info_topic}
        if image_transport == 'compressed':
            dense_remappings['image/compressed'] = image_topic + '/compressed'
        dense_remappings['diagnostics'] = '/diagnostics'
        descriptions.append(NodeDescription(
            name='dense_node', executable='dense_node',
            plugin='relperception.nodes.dense_node:DenseNode',
            remappings=dense_remappings, parameters={'image_transport': image_transport},
            namespace=namespace))
    return descriptions


# --- Fast DDS profile and environment (ROS-free) -------------------------------------------

def fastdds_profile_path() -> Path:
    """Return the packaged Fast DDS profile (``config/fastdds_profile.xml``).

    Looks in the ament share directory first (colcon / apt installs), then in the source
    tree next to this package (pip editable installs).

    Returns:
        Path of an existing file.

    Raises:
        FileNotFoundError: when neither location holds the profile.
    """
    candidates = []
    try:
        from ament_index_python.packages import get_package_share_directory
        candidates.append(Path(get_package_share_directory(PACKAGE)) / 'config')
    except Exception:  # ament_index not installed, or the package not in AMENT_PREFIX_PATH
        pass
    candidates.append(Path(__file__).resolve().parents[2] / 'config')
    for folder in candidates:
        if (folder / FASTDDS_PROFILE_NAME).is_file():
            return folder / FASTDDS_PROFILE_NAME
    raise FileNotFoundError(
        f'{FASTDDS_PROFILE_NAME} not found in {", ".join(str(c) for c in candidates)}')


def apply_fastdds_profile(environ: Optional[MutableMapping[str, str]] = None,
                          enabled: bool = True) -> Optional[str]:
    """Point Fast DDS at the packaged profile unless the user chose one (call before init).

    Args:
        environ: environment to change (default ``os.environ``).
        enabled: False leaves the environment alone (``--no-fastdds-profile``).

    Returns:
        The profile file in effect (the user's or ours), or None when none is set.
    """
    environ = os.environ if environ is None else environ
    for name in (FASTDDS_PROFILE_ENV, FASTDDS_PROFILE_ENV_NEW):
        if environ.get(name):
            return environ[name]
    if not enabled:
        return None
    path = str(fastdds_profile_path())
    environ.update(fastdds_environment(path))
    return path


def fastdds_environment(profile: str) -> Dict[str, str]:
    """Return the environment variables that make Fast DDS use the XML profile ``profile``.

    The profile file variable, plus ``RMW_FASTRTPS_USE_QOS_FROM_XML=1`` when ``profile`` is the
    packaged one (named ``fastdds_profile.xml``): its reader history memory policy frees the
    buffer of every sample, so one oversized image does not stay resident; rmw_fastrtps
    overrides that policy unless the variable is set. Another profile gets the variable only
    if the user sets it.
    """
    environ = {FASTDDS_PROFILE_ENV: str(profile)}
    if Path(profile).name == FASTDDS_PROFILE_NAME:
        environ[FASTDDS_QOS_FROM_XML_ENV] = '1'
    return environ


def ensure_ament_prefix(environ: Optional[MutableMapping[str, str]] = None) -> Optional[str]:
    """Set ``AMENT_PREFIX_PATH`` to this Python's prefix when unset and it holds an index.

    The ROS 2 wheels install their ament index into the virtual environment, where rclpy
    finds message type support only through ``AMENT_PREFIX_PATH``; a sourced ROS install
    sets it already and is left alone.

    Args:
        environ: environment to change (default ``os.environ``).

    Returns:
        The value in effect, or None.
    """
    environ = os.environ if environ is None else environ
    if not environ.get('AMENT_PREFIX_PATH'):
        if (Path(sys.prefix) / 'share' / 'ament_index').is_dir():
            environ['AMENT_PREFIX_PATH'] = sys.prefix
    return environ.get('AMENT_PREFIX_PATH')


# --- one process, several nodes (imports rclpy) --------------------------------------------

def create_node(description: NodeDescription, context,
                config: Optional[Mapping[str, Any]] = None, use_sim_time: bool = False):
    """Instantiate the node class of ``description`` with its remappings and parameters.

    Args:
        description: what to start.
        context: initialised ``rclpy.Context``.
        config: flat validated configuration for ``parameters_from_config`` nodes.
        use_sim_time: whether the node follows ``/clock``.

    Returns:
        The ``rclpy.node.Node``. Its class must accept rclpy's ``Node`` keyword arguments
        (``context``, ``namespace``, ``cli_args``, ``parameter_overrides``).
    """
    from rclpy.parameter import Parameter

    overrides = [Parameter(name, value=value)
                 for name, value in description.parameter_values(config, use_sim_time).items()]
    node_class = description.load_class()
    return node_class(context=context, namespace=description.namespace or None,
                      cli_args=description.ros_arguments(), parameter_overrides=overrides)


def run_node_set(descriptions: Sequence[NodeDescription],
                 config: Optional[Mapping[str, Any]] = None, use_sim_time: bool = False,
                 duration_s: Optional[float] = None,
                 stop_event: Optional[threading.Event] = None) -> int:
    """Run the nodes in this process with one ``SingleThreadedExecutor`` until stopped.

    Single-threaded on purpose: the callbacks only hand messages to each node's worker thread;
    rclpy's ``MultiThreadedExecutor`` spinning under an image flood held the GIL so much that
    matching starved (measured with test/test_flood.py).

    Stops on SIGINT / SIGTERM (when called from the main thread), when ``stop_event`` is
    set, or after ``duration_s``. Set the Fast DDS profile (:func:`apply_fastdds_profile`)
    before calling: DDS reads it when the context starts.

    Args:
        descriptions: nodes to start (usually :func:`node_set`).
        config: flat validated configuration (``relperception.config.load_config``).
        use_sim_time: whether the nodes follow ``/clock``.
        duration_s: run this many seconds, then exit; None runs until a signal.
        stop_event: set it from another thread to stop.

    Returns:
        0 after a clean stop.
    """
    import signal

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from relperception.nodes.background_spin import BackgroundSpin

    if duration_s is not None and duration_s <= 0:
        raise ValueError(f'duration_s must be > 0, got {duration_s}')
    stop = stop_event or threading.Event()
    context = rclpy.Context()
    rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():
        def request_stop(signum, _frame):
            logger.info('received %s, shutting down', signal.Signals(signum).name)
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            previous_handlers[signum] = signal.signal(signum, request_stop)
    nodes = []
    spinner = None
    try:
        executor = SingleThreadedExecutor(context=context)
        spinner = BackgroundSpin(executor, name='relperception-executor')
        for description in descriptions:
            node = create_node(description, context, config, use_sim_time)
            nodes.append(node)
            executor.add_node(node)
            logger.info('started %s', node.get_fully_qualified_name())
        spinner.start()
        stop.wait(duration_s)
        return 0
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
        if spinner is not None:
            spinner.stop(timeout_s=5.0)
        for node in reversed(nodes):
            node.destroy_node()
        context.try_shutdown()
