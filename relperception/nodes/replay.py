# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Live replay: play a bag through DDS into the node set, record the outputs, score them.

:func:`replay_bag` is ``relperception replay``:

* **nodes** — :func:`relperception.nodes.graph.node_set` with the bag's topics (a depth topic
  in the bag gives ``visual_odometry_node`` its ``depth_in``), either in this process
  (:func:`~relperception.nodes.graph.run_node_set` on a thread, its own rclpy context) or,
  with ``separate_processes``, one process per node built from the same
  :class:`~relperception.nodes.graph.NodeDescription` (``python -m <plugin module> --ros-args
  -r ... --params-file ...``, see :func:`node_command`), so nothing drifts from the launch
  file. The Fast DDS profile is applied (environment) unless disabled; Fast DDS reads it when a
  process creates its first participant, so a caller that used rclpy earlier in the same
  process must apply it itself first (measured: otherwise ~45 % of the 640x480 images never
  reach the separate node processes). Nodes follow ``/clock``.
* **player** — publishes the bag's image, camera_info (and depth) messages as the raw CDR
  bytes stored in the bag (``Publisher.publish(bytes)``: no deserialisation at all) at their
  recorded log-time rate scaled by ``rate``, with ``/clock`` = the bag log time before each
  message. It starts once every node subscription is matched (bounded by ``startup_s``) and
  records the wall-clock publish time of every image stamp.
* **recorder** — raw (``raw=True``) subscriptions to ``correspondences``, ``odom``, ``path``
  and ``diagnostics`` written straight into ``DIR/recorded_bag`` (MCAP; log time = wall-clock
  receipt, ns).
* After the last input it waits for ``silence_s`` without outputs (bounded by
  ``drain_timeout_s``), stops everything (nodes, processes, executors, contexts) and calls
  :func:`relperception.pipeline.live_eval.evaluate_recording`, which writes the files of
  ``relperception eval`` plus per-output-topic frame counts and latencies.

With a ``namespace`` the inputs are published under ``<namespace><bag topic>``, the nodes run
in that namespace and ``/clock`` and ``diagnostics`` are moved under it too, so several
replays on one machine do not hear each other. Before any node starts, another publisher of
the player's topics in the ROS domain (a replay without its own namespace, a camera driver) is
refused with that advice (:data:`FOREIGN_PUBLISHER_DISCOVERY_S`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Mapping, Optional

from relperception.config import DEFAULT_BASE_FRAME_ID, load_config, ODOMETRY_TOPIC
from relperception.data.bag_frames import gt_time_offset_ns
from relperception.evaluation.report import remove_earlier_outputs
from relperception.interruption import interruption_reason, INTERRUPTIONS
from relperception.nodes import graph
from relperception.pipeline import live_eval

logger = logging.getLogger(__name__)

#: Input images prefetched from the bag by the reader thread (bounded).
PREFETCH_MESSAGES = 32
#: Seconds to wait for a node process to exit after SIGINT before it is terminated.
PROCESS_STOP_TIMEOUT_S = 5.0

#: Seconds the player looks, before any node starts, for another publisher of its inputs or
#: clock in the ROS domain (another replay, a camera driver): discovery takes a moment.
FOREIGN_PUBLISHER_DISCOVERY_S = 1.0

_PER_FRAME_OUTPUTS = ('correspondences', ODOMETRY_TOPIC, 'path')
#: A recorded wheel odometry on the node's own odometry topic (a base's ``/odom``) is replayed
#: under this prefix (``/replayed/odom``).
REPLAYED_PREFIX = '/replayed'


def _prefixed(namespace: str, topic: str) -> str:
    return f'{namespace}{topic}' if namespace else topic


@dataclasses.dataclass
class ReplayPlan:
    """What a replay plays, runs and records (ROS-free; see :func:`plan_replay`).

    Attributes:
        bag: the input bag.
        mode: ``'rgbd'`` or ``'mono'`` (how the nodes run and the trajectory is aligned).
        input_topics: role (``image``, ``camera_info``, ``depth``) -> topic in the bag.
        published_topics: bag topic -> topic it is published on.
        msgtypes: bag topic -> message type.
        descriptions: the node set, wired to the published topics.
        output_topics: role -> absolute topic recorded (``correspondences``, ``odom``,
            ``path``, ``diagnostics``).
        clock_topic: where bag time is published.
        namespace: the replay's namespace ('' for the root).
        num_images: images in the bag.
    """

    bag: Path
    mode: str
    input_topics: Dict[str, str]
    published_topics: Dict[str, str]
    msgtypes: Dict[str, str]
    descriptions: List[graph.NodeDescription]
    output_topics: Dict[str, str]
    clock_topic: str
    namespace: str
    num_images: int


def plan_replay(bag, config: Mapping[str, Any], namespace: str = '') -> ReplayPlan:
    """Choose topics, mode and node set for replaying ``bag``.

    Args:
        bag: rosbag2 directory or ``.mcap`` / ``.db3`` file.
        config: flat validated configuration (``topics.*``, ``odometry.mode``, ``matcher``).
        namespace: '' or an absolute namespace such as ``/replay1``.

    Returns:
        The :class:`ReplayPlan`.

    Raises:
        FileNotFoundError: when the bag does not exist.
        ValueError: unreadable bag, missing image or CameraInfo topic, rgbd without depth, an
            input topic with more than one message type.
    """
    from relperception.data.bag import BagReader
    from relperception.data.bag_frames import find_depth_topic, require_topic, resolve_mode
    from relperception.data.topics import (COMPRESSED_DEPTH_SUFFIX, COMPRESSED_IMAGE_MSGTYPE,
                                           compressed_depth_topic, compressed_topic)

    bag = Path(bag)
    namespace = graph.normalize_namespace(namespace)
    with BagReader(bag) as reader:
        bag_topics = reader.topics
        topic_types = reader.topic_types
        counts = reader.message_counts
    image_topic = require_topic(bag_topics, config['topics.image'], 'image', bag)
    info_topic = require_topic(bag_topics, config['topics.camera_info'], 'camera_info', bag)
    depth_topic = find_depth_topic(bag_topics, config['topics.depth'])   # as eval does
    num_depth = counts.get(depth_topic, 0) if depth_topic is not None else 0
    mode = resolve_mode(str(config['odometry.mode']), num_depth, counts.get(image_topic, 0),
                        depth_topic or config['topics.depth'] or None)
    transport = 'raw'
    if image_topic != config['topics.image'] and image_topic == compressed_topic(
            config['topics.image']):
        transport = 'compressed'
    input_topics = {'image': image_topic, 'camera_info': info_topic}
    if mode == 'rgbd':
        input_topics['depth'] = depth_topic
    wheel_topic = config['topics.wheel_odometry'] or None
    if wheel_topic is not None and wheel_topic in bag_topics:
        input_topics['wheel_odom'] = wheel_topic
    for topic in input_topics.values():
        if len(topic_types[topic]) > 1:   # one publisher per topic: the others would be lost
            raise ValueError(f'{bag}: topic {topic} carries {len(topic_types[topic])} message '
                             f"types ({', '.join(topic_types[topic])}); replay publishes one "
                             'type per topic: split the topic, or score the bag with eval')
    published = {topic: _prefixed(namespace, topic) for topic in input_topics.values()}
    if wheel_topic in published and published[wheel_topic] == f'{namespace}/{ODOMETRY_TOPIC}':
        # a base's /odom: the node publishes its own odometry there, so the recorded wheel
        # odometry is replayed beside it
        published[wheel_topic] = _prefixed(namespace, REPLAYED_PREFIX + wheel_topic)
    base_image = config['topics.image'] if transport == 'compressed' else image_topic
    depth_transport, base_depth = 'raw', depth_topic
    if mode == 'rgbd' and bag_topics[depth_topic] == COMPRESSED_IMAGE_MSGTYPE:
        # compressed_depth_image_transport: the node subscribes <depth_in>/compressedDepth
        depth_transport = 'compressedDepth'
        base_depth = depth_topic.removesuffix(COMPRESSED_DEPTH_SUFFIX)
        published[depth_topic] = compressed_depth_topic(_prefixed(namespace, base_depth))
    descriptions = graph.node_set(
        matcher=config['matcher'], image_topic=_prefixed(namespace, base_image),
        camera_info_topic=published[info_topic],
        depth_topic=_prefixed(namespace, base_depth) if mode == 'rgbd' else '',
        image_transport=transport, namespace=namespace, depth_transport=depth_transport,
        wheel_odom_topic=published.get(wheel_topic, ''))
    # the recording is scored with camera_mount_xyz_qxyzw: the node uses that mount, not TF
    descriptions = [dataclasses.replace(d, parameters={**d.parameters,
                                                       'camera_mount_source': 'parameter'})
                    if d.name == 'visual_odometry_node' else d for d in descriptions]
    clock_topic = '/clock'
    diagnostics_topic = '/diagnostics'
    if namespace:
        clock_topic = f'{namespace}/clock'
        diagnostics_topic = f'{namespace}/diagnostics'
        descriptions = [dataclasses.replace(d, remappings={
            **d.remappings, '/clock': clock_topic,
            **({'diagnostics': diagnostics_topic} if 'diagnostics' in d.remappings else {})})
            for d in descriptions]
    outputs = {role: f'{namespace}/{role}' for role in _PER_FRAME_OUTPUTS}
    outputs['diagnostics'] = diagnostics_topic
    return ReplayPlan(bag=bag, mode=mode, input_topics=input_topics, published_topics=published,
                      msgtypes={t: bag_topics[t] for t in input_topics.values()},
                      descriptions=descriptions, output_topics=outputs,
                      clock_topic=clock_topic, namespace=namespace,
                      num_images=int(counts.get(image_topic, 0)))


def _yaml_parameters(values: Mapping[str, Any]) -> Dict[str, Any]:
    return {'/**': {'ros__parameters': {k: (list(v) if isinstance(v, tuple) else v)
                                        for k, v in values.items()}}}


def node_command(description: graph.NodeDescription, params_file) -> List[str]:
    """Return the command line that runs ``description`` alone, as ``ros2 launch`` would.

    Args:
        description: the node (its ``plugin`` module must run the node as ``__main__``).
        params_file: ROS 2 parameter file with the node's parameters.

    Returns:
        ``[python, -m, module, --ros-args, -r, __node:=name, (-r, __ns:=ns), -r, from:=to, ...,
        --params-file, file]``.
    """
    module = description.plugin.partition(':')[0]
    command = [sys.executable, '-m', module, '--ros-args', '-r', f'__node:={description.name}']
    if description.namespace:
        command += ['-r', f'__ns:={description.namespace}']
    command += description.ros_arguments()[1:]
    command += ['--params-file', str(params_file)]
    return command


class _NodeProcesses:
    """The node set, one process per node."""

    def __init__(self, descriptions, config, use_sim_time, environ, log_dir: Path) -> None:
        import yaml

        self._folder = tempfile.TemporaryDirectory(prefix='relperception-replay-')
        self.processes: List[subprocess.Popen] = []
        self.commands: Dict[str, List[str]] = {}
        self._logs = []
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        for description in descriptions:
            params = Path(self._folder.name) / f'{description.name}.yaml'
            params.write_text(yaml.safe_dump(_yaml_parameters(
                description.parameter_values(config, use_sim_time))), encoding='utf-8')
            command = node_command(description, params)
            self.commands[description.name] = command
            log = open(log_dir / f'{description.name}.log', 'wb')
            self._logs.append(log)
            logger.info('starting %s', ' '.join(command))
            self.processes.append(subprocess.Popen(command, env=dict(environ), stdout=log,
                                                   stderr=subprocess.STDOUT))

    def check_alive(self) -> None:
        for process, name in zip(self.processes, self.commands):
            code = process.poll()
            if code is not None:
                tail = (self.log_dir / f'{name}.log').read_text(errors='replace')[-2000:]
                raise RuntimeError(f'{name} exited with code {code}:\n{tail}')

    def stop(self) -> Dict[str, Optional[int]]:
        codes = {}
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + PROCESS_STOP_TIMEOUT_S
        for process, name in zip(self.processes, self.commands):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning('%s did not stop after SIGINT; terminating it', name)
                process.terminate()
                try:
                    process.wait(2.0)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            codes[name] = process.returncode
        for log in self._logs:
            log.close()
        self._folder.cleanup()
        return codes


class _InProcessNodes:
    """The node set in this process: ``graph.run_node_set`` on a thread."""

    def __init__(self, descriptions, config, use_sim_time) -> None:
        self._stop = threading.Event()
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name='relperception-replay-nodes',
                                        args=(descriptions, config, use_sim_time), daemon=True)
        self._thread.start()

    def _run(self, descriptions, config, use_sim_time) -> None:
        try:
            graph.run_node_set(descriptions, config=config, use_sim_time=use_sim_time,
                               stop_event=self._stop)
        except BaseException as exc:  # noqa: B902 - reported by check_alive on the main thread
            self.error = exc

    def check_alive(self) -> None:
        if self.error is not None:
            raise RuntimeError(f'the nodes failed to start: {self.error}') from self.error
        if not self._thread.is_alive():
            raise RuntimeError('the node set stopped unexpectedly')

    def stop(self) -> Dict[str, Optional[int]]:
        self._stop.set()
        self._thread.join(15.0)
        return {'in_process': 0 if not self._thread.is_alive() and self.error is None else 1}


class _Recorder:
    """Raw subscriptions to the outputs, written into an MCAP bag with the receipt time."""

    def __init__(self, node, output_topics: Mapping[str, str], bag_path: Path) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import Odometry, Path as PathMsg
        from rclpy.qos import QoSProfile
        from rosbags.rosbag2 import StoragePlugin, Writer
        from sensor_msgs.msg import PointCloud2

        from relperception.data.bag import default_typestore

        types = {'correspondences': (PointCloud2, 'sensor_msgs/msg/PointCloud2'),
                 'odom': (Odometry, 'nav_msgs/msg/Odometry'),
                 'path': (PathMsg, 'nav_msgs/msg/Path'),
                 'diagnostics': (DiagnosticArray, 'diagnostic_msgs/msg/DiagnosticArray')}
        if bag_path.exists():
            if not (bag_path / 'metadata.yaml').exists():
                unfinished = bag_path.is_dir() and all(
                    p.is_file() and p.suffix in ('.mcap', '.db3') for p in bag_path.iterdir())
                if not unfinished:
                    raise FileExistsError(f'{bag_path} exists and is not a bag; not replacing '
                                          'it (move or delete it)')
                logger.warning('%s: replacing the unfinished recording of an earlier run that '
                               'stopped before it closed its bag', bag_path)
            shutil.rmtree(bag_path)
        self._writer = Writer(bag_path, version=Writer.VERSION_LATEST,
                              storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self._lock = threading.Lock()
        typestore = default_typestore()
        self.counts: Dict[str, int] = {}
        self.last_per_frame_receipt_ns = 0
        self.subscriptions = {}
        for role, topic in output_topics.items():
            msg_class, msgtype = types[role]
            connection = self._writer.add_connection(topic, msgtype, typestore=typestore)
            self.counts[topic] = 0
            self.subscriptions[role] = node.create_subscription(
                msg_class, topic, self._callback(topic, connection, role != 'diagnostics'),
                QoSProfile(depth=100), raw=True)

    def _callback(self, topic, connection, per_frame: bool):
        def receive(data: bytes) -> None:
            wall_ns = time.time_ns()
            with self._lock:
                if self._writer is None:
                    return
                self._writer.write(connection, wall_ns, data)
                self.counts[topic] += 1
                if per_frame:
                    self.last_per_frame_receipt_ns = wall_ns
        return receive

    def close(self) -> None:
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


class _Player:
    """Publishes the bag's input messages as raw CDR at the recorded rate."""

    def __init__(self, node, plan: ReplayPlan, rate: float) -> None:
        from rclpy.qos import qos_profile_sensor_data, QoSProfile
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import CameraInfo, CompressedImage, Image

        classes = {'sensor_msgs/msg/Image': Image, 'sensor_msgs/msg/CameraInfo': CameraInfo,
                   'sensor_msgs/msg/CompressedImage': CompressedImage}
        self._node = node
        self._plan = plan
        self._rate = float(rate)
        self.publishers = {}
        for topic, target in plan.published_topics.items():
            msgtype = plan.msgtypes[topic]
            if msgtype not in classes:
                raise ValueError(f'cannot replay {topic}: unsupported type {msgtype}')
            self.publishers[topic] = node.create_publisher(classes[msgtype], target,
                                                           qos_profile_sensor_data)
        self.clock_publisher = node.create_publisher(Clock, plan.clock_topic,
                                                     QoSProfile(depth=10))
        self._clock_class = Clock
        self.image_stamps_ns: List[int] = []
        self.image_publish_wall_ns: List[int] = []
        self.messages_published = 0
        self.playback_s = float('nan')
        self.last_publish_ns = 0
        self._stop = threading.Event()
        self.error: Optional[BaseException] = None
        #: Descriptions of damaged input storage (the bag is then played up to / past it).
        self.input_damage: List[str] = []

    def wait_for_subscribers(self, expected: Mapping[str, int], timeout_s: float,
                             check_alive) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            missing = {topic: (publisher.get_subscription_count(), expected[topic])
                       for topic, publisher in self._named_publishers().items()
                       if publisher.get_subscription_count() < expected[topic]}
            if not missing:
                return
            check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError('the nodes did not subscribe within '
                                   f'{timeout_s:g} s (topic: matched/expected): ' + ', '.join(
                                       f'{t}: {m}/{e}' for t, (m, e) in missing.items()))
            time.sleep(0.05)

    def foreign_topics(self, discovery_s: float) -> List[str]:
        """Return the topics of this player that another publisher also has, sorted.

        Looks for ``discovery_s`` seconds (returns as soon as one is found).
        """
        deadline = time.monotonic() + discovery_s
        while True:
            foreign = sorted(topic for topic in self._named_publishers()
                             if self._node.count_publishers(topic) > 1)
            if foreign or time.monotonic() >= deadline:
                return foreign
            time.sleep(0.05)

    def _named_publishers(self):
        named = {self._plan.published_topics[t]: p for t, p in self.publishers.items()}
        named[self._plan.clock_topic] = self.clock_publisher
        return named

    def stop(self) -> None:
        self._stop.set()

    def _prefetch(self, items: queue.Queue) -> None:
        try:
            for message in live_eval.iter_raw_messages(self._plan.bag,
                                                       list(self._plan.published_topics),
                                                       damage=self.input_damage):
                while not self._stop.is_set():
                    try:
                        items.put(message, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
        except BaseException as exc:  # noqa: B902 - reported through the player
            self.error = exc
        self._put_end(items)

    def _put_end(self, items: queue.Queue) -> None:
        while not self._stop.is_set():
            try:
                items.put(None, timeout=0.1)
            except queue.Full:
                continue
            return

    def play(self) -> None:
        from builtin_interfaces.msg import Time

        items: queue.Queue = queue.Queue(maxsize=PREFETCH_MESSAGES)
        reader = threading.Thread(target=self._prefetch, args=(items,), daemon=True,
                                  name='relperception-replay-reader')
        reader.start()
        image_topic = self._plan.input_topics['image']
        clock = self._clock_class()
        first_log_ns = None
        start = time.perf_counter()
        try:
            while not self._stop.is_set():
                message = items.get()
                if message is None:
                    break
                if first_log_ns is None:
                    first_log_ns = message.log_time_ns
                    start = time.perf_counter()
                due = start + (message.log_time_ns - first_log_ns) * 1e-9 / self._rate
                delay = due - time.perf_counter()
                if delay > 0 and self._stop.wait(delay):
                    break
                clock.clock = Time(sec=message.log_time_ns // 1_000_000_000,
                                   nanosec=message.log_time_ns % 1_000_000_000)
                self.clock_publisher.publish(clock)
                if message.topic == image_topic:
                    self.image_stamps_ns.append(live_eval.header_stamp_ns(message.data))
                    self.image_publish_wall_ns.append(time.time_ns())
                self.publishers[message.topic].publish(message.data)
                self.messages_published += 1
                self.last_publish_ns = time.time_ns()
        finally:
            self.playback_s = time.perf_counter() - start
            self._stop.set()
            reader.join(5.0)
        if self.error is not None:
            raise RuntimeError(f'reading {self._plan.bag} failed: {self.error}') from self.error


def replay_bag(bag, output_dir, config: Optional[Mapping[str, Any]] = None, rate: float = 1.0,
               separate_processes: bool = False, fastdds_profile: bool = True,
               startup_s: float = 30.0, namespace: str = '', silence_s: float = 1.0,
               drain_timeout_s: float = 10.0, use_sim_time: bool = True,
               plots: bool = True, parameter_file=None,
               gt_time_offset_s: float = 0.0) -> Dict[str, Any]:
    """Replay ``bag`` live through DDS into the node set, record and score the outputs.

    Args:
        bag: rosbag2 directory or ``.mcap`` / ``.db3`` file with image, CameraInfo, optional
            depth and ground-truth topics (``topics.*`` of the configuration).
        output_dir: report folder: the ``eval`` files, ``latency.csv``,
            ``input_publish_times.csv``, ``recorded_bag/`` and (separate processes)
            ``node_logs/``.
        config: flat configuration (:func:`relperception.config.load_config`); None: defaults.
        rate: playback speed factor on the recorded log times (> 0; 2.0 = twice as fast).
        separate_processes: one process per node instead of one executor in this process.
        fastdds_profile: apply the packaged Fast DDS profile (unless the environment names
            one already).
        startup_s: longest wait (seconds) for the nodes to subscribe.
        namespace: '' or a namespace for the nodes, the published inputs, ``/clock`` and
            ``diagnostics`` (isolates concurrent replays).
        silence_s: after the last input, stop once no per-frame output came for this long.
        drain_timeout_s: longest wait (seconds) for outputs after the last input.
        use_sim_time: the nodes follow the published ``/clock`` (bag time).
        plots: write ``trajectory.png`` and ``errors.png``.
        parameter_file: optional :class:`relperception.config.ParameterFile` whose node-local
            and ROS values the nodes start with (its ``config`` is not used: pass it as
            ``config``).
        gt_time_offset_s: seconds added to the ground-truth stamps before they are associated
            with the recorded odometry (``eval --gt-time-offset``; checked before playing).

    Returns:
        The summary written to ``output_dir/summary.json`` (see
        :func:`relperception.pipeline.live_eval.evaluate_recording`).

    Raises:
        FileNotFoundError: when the bag does not exist.
        ValueError: for a bad argument or a bag the nodes cannot run on.
        RuntimeError: when the nodes fail to start or subscribe within ``startup_s``.
    """
    if not rate > 0:
        raise ValueError(f'rate must be > 0, got {rate}')
    if not startup_s > 0 or not silence_s > 0 or not drain_timeout_s > 0:
        raise ValueError('startup_s, silence_s and drain_timeout_s must be > 0')
    gt_time_offset_ns(gt_time_offset_s)   # a bad offset is refused before anything plays
    bag, output_dir = Path(bag), Path(output_dir)
    if not bag.exists():
        raise FileNotFoundError(f'bag {bag} does not exist')
    config = load_config(overrides=dict(config or {}))
    plan = plan_replay(bag, config, namespace)
    if parameter_file is not None:
        plan = dataclasses.replace(plan, descriptions=[
            d.with_parameter_file(parameter_file) for d in plan.descriptions])
    output_dir.mkdir(parents=True, exist_ok=True)

    saved = {name: os.environ.get(name) for name in (graph.FASTDDS_PROFILE_ENV,
                                                     graph.FASTDDS_PROFILE_ENV_NEW,
                                                     graph.FASTDDS_QOS_FROM_XML_ENV,
                                                     'AMENT_PREFIX_PATH')}
    profile = graph.apply_fastdds_profile(enabled=fastdds_profile)
    graph.ensure_ament_prefix()
    logger.info('replaying %s (%s, %d images) at rate %g, nodes %s, Fast DDS profile %s',
                bag, plan.mode, plan.num_images, rate,
                'in separate processes' if separate_processes else 'in this process',
                profile or 'none')
    record: Dict[str, Any] = {}
    interrupted = None
    try:
        _run_live(plan, config, output_dir, rate, separate_processes, startup_s, silence_s,
                  drain_timeout_s, use_sim_time, record)
    except INTERRUPTIONS as exc:
        if 'startup_s' not in record:
            raise   # nothing was played yet: nothing to score
        interrupted = exc
        record['interrupted'] = interruption_reason(exc)
        logger.error('%s after %d images: scoring what the nodes put out', record['interrupted'],
                     record.get('images_published', 0))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    mount = live_eval.DEFAULT_CAMERA_MOUNT_XYZ_QXYZW
    base_frame = DEFAULT_BASE_FRAME_ID
    for description in plan.descriptions:
        mount = description.parameters.get('camera_mount_xyz_qxyzw', mount)
        base_frame = description.parameters.get('base_frame_id', base_frame)
    extra = {'rate': float(rate), 'separate_processes': bool(separate_processes),
             'fastdds_profile': profile, 'namespace': plan.namespace,
             'use_sim_time': bool(use_sim_time), 'input_topics': plan.published_topics,
             **record}
    summary = live_eval.evaluate_recording(
        bag, output_dir / live_eval.RECORDED_BAG, output_dir / live_eval.PUBLISH_TIMES_CSV,
        output_dir, plan.output_topics, config=config, mode=plan.mode,
        camera_mount_xyz_qxyzw=mount, plots=plots, extra=extra, base_frame_id=base_frame,
        gt_time_offset_s=gt_time_offset_s)
    if interrupted is not None:
        raise interrupted
    return summary


def _expected_subscribers(plan: ReplayPlan, use_sim_time: bool) -> Dict[str, int]:
    expected: Dict[str, int] = {}
    for description in plan.descriptions:
        for source, target in description.remappings.items():
            if source in ('image', 'image/compressed', 'camera_info', 'depth_in', 'wheel_odom'):
                if source == 'image' and 'image/compressed' in description.remappings:
                    continue
                expected[target] = expected.get(target, 0) + 1
    expected[plan.clock_topic] = len(plan.descriptions) if use_sim_time else 0
    return {topic: expected.get(topic, 0) for topic in
            list(plan.published_topics.values()) + [plan.clock_topic]}


def _run_live(plan: ReplayPlan, config, output_dir: Path, rate: float, separate_processes: bool,
              startup_s: float, silence_s: float, drain_timeout_s: float, use_sim_time: bool,
              record: Dict[str, Any]) -> None:
    """Start nodes, recorder and player; play; drain; stop. Fill ``record`` with the figures.

    ``record`` is filled as the replay goes, so an interrupted replay keeps what it played
    (``startup_s`` is set once playing starts).
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from relperception.nodes.background_spin import BackgroundSpin

    started = time.perf_counter()
    context = rclpy.Context()
    rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    node = spinner = recorder = nodes = None
    player: Optional[_Player] = None
    try:
        node = rclpy.create_node('relperception_replay', context=context)
        player = _Player(node, plan, rate)
        foreign = player.foreign_topics(FOREIGN_PUBLISHER_DISCOVERY_S)
        if foreign:
            raise ValueError(
                f'another publisher is on {", ".join(foreign)} in this ROS domain '
                f'(ROS_DOMAIN_ID={os.environ.get("ROS_DOMAIN_ID", "0")}): another replay or a '
                "camera driver? Its messages would mix with the bag's; give this replay its "
                'own --namespace, or another ROS_DOMAIN_ID')
        remove_earlier_outputs(output_dir)   # only once nothing stands in the way
        recorder = _Recorder(node, plan.output_topics, output_dir / live_eval.RECORDED_BAG)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        spinner = BackgroundSpin(executor, name='relperception-replay-recorder').start()
        if separate_processes:
            nodes = _NodeProcesses(plan.descriptions, config, use_sim_time, os.environ,
                                   output_dir / 'node_logs')
            record['node_commands'] = {k: ' '.join(v) for k, v in nodes.commands.items()}
        else:
            nodes = _InProcessNodes(plan.descriptions, config, use_sim_time)
        player.wait_for_subscribers(_expected_subscribers(plan, use_sim_time), startup_s,
                                    nodes.check_alive)
        deadline = time.monotonic() + startup_s
        odom = recorder.subscriptions['odom']
        while odom.get_publisher_count() < 1 and time.monotonic() < deadline:
            nodes.check_alive()
            time.sleep(0.05)
        time.sleep(0.5)  # let the nodes' readers match the player's writers too
        record['startup_s'] = time.perf_counter() - started
        logger.info('nodes ready after %.1f s; playing', record['startup_s'])
        player.play()
        end_of_input_ns = time.time_ns()
        drain_deadline = time.monotonic() + drain_timeout_s
        while time.monotonic() < drain_deadline:
            last = max(recorder.last_per_frame_receipt_ns, end_of_input_ns)
            if time.time_ns() - last > silence_s * 1e9:
                break
            time.sleep(0.05)
        record['drain_s'] = (time.time_ns() - end_of_input_ns) / 1e9
    finally:
        if player is not None:
            player.stop()
            record.update({
                'images_published': len(player.image_stamps_ns),
                'messages_published': player.messages_published,
                'playback_s': player.playback_s,
                'input_damage': list(player.input_damage),
            })
            live_eval.write_publish_times(output_dir / live_eval.PUBLISH_TIMES_CSV,
                                          player.image_stamps_ns, player.image_publish_wall_ns)
        if nodes is not None:
            record['node_exit_codes'] = nodes.stop()
        if spinner is not None:
            spinner.stop(timeout_s=5.0)
        if recorder is not None:
            recorder.close()
            record['recorded_messages'] = dict(recorder.counts)
        if node is not None:
            node.destroy_node()
        context.try_shutdown()
