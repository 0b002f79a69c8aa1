# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Live replay through real DDS (``relperception replay``) and its ROS-free evaluation."""

import json
import logging
import math
import os
import struct
import subprocess
import sys
import uuid

import numpy as np
import pytest

from relperception.cli.main import main as cli_main
from relperception.data import topics
from relperception.data.bag import BagReader, BagWriter
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.pipeline import live_eval
from relperception.transforms import invert_transform, transform_from_quaternion_xyzw

EVAL_FILES = ('trajectory.tum', 'groundtruth.tum', 'summary.json', 'timing.csv',
              'trajectory.png', 'errors.png')
LIVE_ATE_TOLERANCE = 0.05


@pytest.fixture(scope='module')
def small_bag(tmp_path_factory):
    """Write a 40-frame 320x240 RGB-D recording at 10 Hz and evaluate it offline."""
    from relperception.pipeline.offline_eval import evaluate_bag

    folder = tmp_path_factory.mktemp('replay')
    bag = folder / 'bag'
    write_synthetic_bag(bag, frames=40, width=320, height=240, fps=10.0, seed=3)
    offline = evaluate_bag(bag, folder / 'offline', progress=False)
    return bag, offline


@pytest.fixture(scope='module')
def compressed_depth_bag(tmp_path_factory):
    """Write a 12-frame 160x120 bag whose depth is only on <depth>/compressedDepth."""
    from relperception.data.synthetic import iter_sequence
    from relperception.data.topics import compressed_depth_topic

    camera, frames = iter_sequence(num_frames=12, seed=5, width=160, height=120, fps=10.0)
    bag = tmp_path_factory.mktemp('replay_cdepth') / 'bag'
    with BagWriter(bag) as writer:
        for frame in frames:
            writer.write_image(topics.IMAGE, frame.stamp_ns, frame.rgb, 'rgb8')
            writer.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns, camera)
            millimetres = np.round(np.nan_to_num(frame.depth) * 1000.0).astype(np.uint16)
            writer.write_compressed_image(compressed_depth_topic(topics.DEPTH), frame.stamp_ns,
                                          millimetres, '16UC1', fmt='compressedDepth')
            writer.write_pose(topics.GT_POSE, frame.stamp_ns, frame.T_world_cam)
    return bag


def _image_msg(writer, stamp_ns, rgb):
    """Return an rgb8 ``Image`` of header stamp ``stamp_ns`` (any log time may carry it)."""
    from relperception.imaging.image_encodings import numpy_to_image_fields

    fields = numpy_to_image_fields(rgb, 'rgb8')
    fields['data'] = np.ascontiguousarray(fields['data'], dtype=np.uint8).reshape(-1)
    return writer.typestore.types[topics.IMAGE_MSGTYPE](
        header=writer.header(stamp_ns, topics.CAMERA_FRAME), **fields)


def _ros_or_skip():
    pytest.importorskip('rclpy')
    from relperception.nodes import graph
    graph.ensure_ament_prefix()
    pytest.importorskip('nav_msgs.msg')


class TestHeaderStampNs:

    def test_reference_rosbags_serialisation(self):
        from relperception.data.bag import default_typestore

        typestore = default_typestore()
        types = typestore.types
        stamp_ns = 1_700_000_123_456_789_012
        header = types['std_msgs/msg/Header'](
            stamp=types['builtin_interfaces/msg/Time'](
                sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9),
            frame_id='odom')
        for little_endian in (True, False):
            data = bytes(typestore.serialize_cdr(header, 'std_msgs/msg/Header',
                                                 little_endian=little_endian))
            assert live_eval.header_stamp_ns(data) == stamp_ns

    def test_degenerate(self):
        with pytest.raises(ValueError, match='12 bytes'):
            live_eval.header_stamp_ns(b'\x00\x01\x00\x00')
        with pytest.raises(ValueError, match='CDR'):
            live_eval.header_stamp_ns(b'\x00\x07\x00\x00' + struct.pack('<iI', 1, 2))


class TestTopicStats:

    def test_counts_and_latency(self):
        publish = {stamp: 1_000 + stamp * 10 for stamp in range(10)}
        delays_ms = [5.0, 7.0, 9.0, 11.0, 40.0]
        outputs = [(stamp + 1, publish[stamp + 1] + round(delay * 1e6))
                   for stamp, delay in enumerate(delays_ms)]
        outputs.append((outputs[0][0], outputs[0][1] + 10**9))   # repeated stamp, later
        outputs.append((99, 5))                                   # no such input
        stats = live_eval.topic_stats(publish, outputs)
        assert stats['frames_in'] == 10
        assert stats['frames_out'] == len(delays_ms)
        assert stats['dropped_frames'] == 10 - 1 - len(delays_ms)
        assert stats['unmatched_out'] == 1
        assert stats['latency_ms_median'] == pytest.approx(np.median(delays_ms))
        assert stats['latency_ms_p95'] == pytest.approx(np.percentile(delays_ms, 95))
        assert stats['latency_ms_max'] == pytest.approx(max(delays_ms))

    def test_not_pairwise_and_empty(self):
        stats = live_eval.topic_stats({1: 0, 2: 0}, [], pairwise=False)
        assert stats['dropped_frames'] == 2 and stats['frames_out'] == 0
        assert math.isnan(stats['latency_ms_median'])
        assert live_eval.latency_text(stats) == 'no output'   # not "latency median nan ms"
        stats = live_eval.topic_stats({1: 0}, [(1, 2_500_000)], pairwise=False)
        assert live_eval.latency_text(stats) == 'latency median 2.5 ms, p95 2.5 ms'


class TestCameraPosesFromOdom:

    def test_inverts_the_node_formula(self):
        rng = np.random.default_rng(0)
        mount = [0.1, -0.2, 0.3, 0.1, 0.7, -0.2, 0.6]
        q = mount[3:] / np.linalg.norm(mount[3:])
        T_base_cam = transform_from_quaternion_xyzw(mount[:3], q)
        T_world_cam = np.stack([transform_from_quaternion_xyzw(rng.normal(size=3),
                                                               rng.normal(size=4))
                                for _ in range(5)])
        T_odom_base = T_base_cam @ T_world_cam @ invert_transform(T_base_cam)
        recovered = live_eval.camera_poses_from_odom(T_odom_base, mount)
        assert recovered.shape == (5, 4, 4)
        np.testing.assert_allclose(recovered, T_world_cam, atol=1e-12)

    def test_default_mount_is_the_nodes(self):
        _ros_or_skip()
        from relperception.nodes import vo_node

        assert tuple(live_eval.DEFAULT_CAMERA_MOUNT_XYZ_QXYZW) == tuple(
            vo_node.LOCAL_SPECS['camera_mount_xyz_qxyzw'].default)
        # camera z (forward) is base x (forward): identity odometry maps to identity
        T_odom_base = np.eye(4)
        T_odom_base[0, 3] = 2.0  # base moved 2 m forward
        T_world_cam = live_eval.camera_poses_from_odom(T_odom_base)
        np.testing.assert_allclose(T_world_cam[:3, 3], [0.0, 0.0, 2.0], atol=1e-12)

    def test_degenerate(self):
        with pytest.raises(ValueError, match='7 finite'):
            live_eval.camera_poses_from_odom(np.eye(4), [0, 0, 0, 0, 0, 1])
        with pytest.raises(ValueError, match='4, 4'):
            live_eval.camera_poses_from_odom(np.eye(3))


class TestIterRawMessages:

    def test_raw_bytes_match_the_reader(self, tmp_path):
        from relperception.core_types import Camera

        bag = tmp_path / 'bag'
        camera = Camera(K=np.array([[100.0, 0, 16], [0, 100.0, 12], [0, 0, 1]]),
                        width=32, height=24)
        with BagWriter(bag) as writer:
            for index in range(3):
                stamp = 1_000_000_000 + index * 50_000_000
                writer.write_image(topics.IMAGE, stamp,
                                   np.full((24, 32), index, np.uint8), 'mono8')
                writer.write_camera_info(topics.CAMERA_INFO, stamp, camera)
        raw = list(live_eval.iter_raw_messages(bag, [topics.IMAGE]))
        assert [m.topic for m in raw] == [topics.IMAGE] * 3
        with BagReader(bag) as reader:
            decoded = list(reader.messages([topics.IMAGE]))
            for message, reference in zip(raw, decoded):
                assert message.log_time_ns == reference.log_time_ns
                again = reader.typestore.deserialize_cdr(message.data, message.msgtype)
                np.testing.assert_array_equal(again.data, reference.msg.data)
                assert live_eval.header_stamp_ns(message.data) == reference.log_time_ns

    def test_missing_bag(self, tmp_path):
        with pytest.raises(FileNotFoundError):
            list(live_eval.iter_raw_messages(tmp_path / 'nope'))


class TestPlanReplay:

    def test_depth_goes_to_odometry_and_namespace_isolates(self, small_bag):
        from relperception.config import load_config
        from relperception.nodes.replay import node_command, plan_replay

        plan = plan_replay(small_bag[0], load_config(), namespace='iso')
        assert plan.mode == 'rgbd' and plan.num_images == 40
        odometry, = plan.descriptions
        assert odometry.remappings['depth_in'] == '/iso' + topics.DEPTH
        assert odometry.remappings['image'] == '/iso' + topics.IMAGE
        assert all(d.remappings['/clock'] == '/iso/clock' for d in plan.descriptions)
        assert plan.output_topics['odom'] == '/iso/odom'
        # scored with camera_mount_xyz_qxyzw: the node must not take its mount from TF
        assert odometry.parameters['camera_mount_source'] == 'parameter'
        command = node_command(odometry, 'params.yaml')
        assert command[1:3] == ['-m', 'relperception.nodes.vo_node']
        assert f'depth_in:=/iso{topics.DEPTH}' in command and '__ns:=/iso' in command
        assert command[-2:] == ['--params-file', 'params.yaml']

    def test_compressed_depth_topic_is_subscribed_as_compressed_depth(self,
                                                                      compressed_depth_bag):
        """Found next to topics.depth (as /compressed is for images), or named directly."""
        from relperception.config import load_config
        from relperception.nodes.replay import plan_replay

        stored = topics.DEPTH + '/compressedDepth'
        for config in (load_config(), load_config(overrides={'topics.depth': stored})):
            plan = plan_replay(compressed_depth_bag, config, namespace='/cd')
            assert plan.mode == 'rgbd' and plan.input_topics['depth'] == stored
            assert plan.published_topics[stored] == '/cd' + stored
            odometry, = plan.descriptions
            assert odometry.parameters['depth_transport'] == 'compressedDepth'
            assert odometry.remappings['depth_in/compressedDepth'] == '/cd' + stored

    @pytest.mark.parametrize('namespace', ['', '/ns'])
    def test_wheel_odometry_recorded_on_odom_is_replayed_beside_the_nodes_odom(
            self, tmp_path, namespace):
        """A base's /odom in the bag: the node publishes its own odometry on (ns)/odom."""
        from relperception.config import load_config
        from relperception.data.synthetic import iter_sequence
        from relperception.nodes.replay import plan_replay

        camera, frames = iter_sequence(num_frames=3, seed=3, width=160, height=120)
        with BagWriter(tmp_path / 'bag') as writer:
            for frame in frames:
                writer.write_image(topics.IMAGE, frame.stamp_ns, frame.rgb, 'rgb8')
                writer.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns, camera)
                writer.write_pose('/odom', frame.stamp_ns, frame.T_world_cam)
        plan = plan_replay(tmp_path / 'bag', load_config(overrides={
            'topics.wheel_odometry': '/odom', 'odometry.mode': 'mono'}), namespace=namespace)
        odometry, = plan.descriptions
        assert plan.output_topics['odom'] == f'{namespace}/odom'
        assert plan.published_topics['/odom'] == f'{namespace}/replayed/odom'
        assert odometry.remappings['wheel_odom'] == f'{namespace}/replayed/odom'

    def test_an_input_topic_of_two_message_types_is_refused(self, tmp_path):
        """Image and CompressedImage on one topic: half the frames were lost as 'dropped'."""
        from rosbags.rosbag2 import Writer

        from relperception.config import load_config
        from relperception.data.bag import default_typestore
        from relperception.data.synthetic import iter_sequence
        from relperception.nodes.replay import plan_replay

        camera, frames = iter_sequence(num_frames=4, seed=3, width=160, height=120)
        with BagWriter(tmp_path / 'parts') as parts:
            for index, frame in enumerate(frames):
                parts.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns, camera)
                if index % 2:
                    parts.write_image(topics.IMAGE, frame.stamp_ns, frame.rgb, 'rgb8')
                else:   # stored on another topic first, moved onto the image topic below
                    parts.write_compressed_image('/jpeg', frame.stamp_ns, frame.rgb, 'rgb8')
        store = default_typestore()
        writer = Writer(tmp_path / 'mixed', version=Writer.VERSION_LATEST)
        with writer, BagReader(tmp_path / 'parts') as reader:
            connections = {}
            for raw in reader.raw_messages():
                topic = topics.IMAGE if raw.topic == '/jpeg' else raw.topic
                if (topic, raw.msgtype) not in connections:
                    connections[topic, raw.msgtype] = writer.add_connection(
                        topic, raw.msgtype, typestore=store)
                writer.write(connections[topic, raw.msgtype], raw.log_time_ns, raw.data)
        with pytest.raises(ValueError, match='carries 2 message types'):
            plan_replay(tmp_path / 'mixed', load_config())

    def test_without_depth_runs_mono(self, small_bag):
        from relperception.config import load_config
        from relperception.nodes.replay import plan_replay

        plan = plan_replay(small_bag[0], load_config(overrides={'topics.depth': '/none'}))
        assert plan.mode == 'mono'
        assert 'depth_in' not in plan.descriptions[0].remappings


def _check_live_summary(summary, folder, frames):
    for name in EVAL_FILES + ('latency.csv', 'input_publish_times.csv'):
        assert (folder / name).is_file(), name
    assert (folder / 'recorded_bag' / 'metadata.yaml').is_file()
    on_disk = json.loads((folder / 'summary.json').read_text())
    assert on_disk['frames_processed'] == summary['frames_processed']
    assert set(summary['output_topics']) == {f'{summary["live"]["namespace"]}/{role}'
                                             for role in ('correspondences', 'odom', 'path')}
    for topic, stats in summary['output_topics'].items():
        possible = frames - 1 if topic.endswith('/correspondences') else frames
        assert stats['frames_in'] == frames, topic
        assert 0 < stats['frames_out'] <= possible, topic
        assert stats['dropped_frames'] == possible - stats['frames_out'], topic
        assert 0 < stats['latency_ms_median'] <= stats['latency_ms_p95'] < 5000, topic


class TestReplay:

    def test_in_process(self, small_bag, tmp_path):
        _ros_or_skip()
        from relperception.nodes.replay import replay_bag

        bag, offline = small_bag
        summary = replay_bag(bag, tmp_path, rate=2.0, namespace=f'/test_{uuid.uuid4().hex[:8]}')
        _check_live_summary(summary, tmp_path, 40)
        assert summary['live']['separate_processes'] is False
        assert summary['mode'] == 'rgbd' and summary['alignment'] == 'se3'
        assert summary['ate_rmse_m'] is not None and summary['ate_rmse_m'] < 0.5

    def test_refused_depth_is_named_in_the_summary(self, tmp_path):
        _ros_or_skip()
        from relperception.data.synthetic import iter_sequence
        from relperception.nodes.replay import replay_bag

        camera, frames = iter_sequence(num_frames=12, seed=5, width=160, height=120, fps=10.0)
        bag = tmp_path / 'mm_bag'
        with BagWriter(bag) as writer:
            for frame in frames:   # millimetres labelled 32FC1 (metres)
                writer.write_image(topics.IMAGE, frame.stamp_ns, frame.rgb, 'rgb8',
                                   topics.CAMERA_FRAME)
                writer.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns, camera,
                                         topics.CAMERA_FRAME)
                writer.write_image(topics.DEPTH, frame.stamp_ns, frame.depth * 1000.0,
                                   '32FC1', topics.CAMERA_FRAME)
                writer.write_pose(topics.GT_POSE, frame.stamp_ns, frame.T_world_cam,
                                  topics.WORLD_FRAME)
        summary = replay_bag(bag, tmp_path / 'out', namespace=f'/test_{uuid.uuid4().hex[:8]}',
                             plots=False)
        refused = summary['depth_problems'].get('implausible_range', 0)
        assert refused >= 10, summary['depth_problems']   # every depth image that arrived
        assert summary['frames_without_depth'] == refused
        assert summary['input_problems']['depth_implausible_range'] == refused
        assert any('depth_implausible_range' in e for e in summary['errors'])
        assert summary['num_errors'] > 0
        # the node ran monocular on every frame: the summary scores it so, not as metric RGB-D
        assert summary['node_diagnostics']['visual_odometry_node: tracking']['depth_hits'] == 0
        assert summary['metric_depth_used'] is False and summary['alignment'] == 'sim3'
        assert 'none metric' in summary['scale_source']

    def test_a_bag_of_one_or_two_frames_says_too_few_to_score(self, tmp_path):
        """It said 'only 1 poses associated between estimate [..] and ground truth [..]'."""
        _ros_or_skip()
        from relperception.nodes.replay import replay_bag
        from relperception.pipeline.offline_eval import evaluate_bag

        for frames in (1, 2):
            bag = tmp_path / f'bag{frames}'
            write_synthetic_bag(bag, frames=frames, width=160, height=120)
            live = replay_bag(bag, tmp_path / f'live{frames}', plots=False,
                              namespace=f'/test_{uuid.uuid4().hex[:8]}')
            offline = evaluate_bag(bag, tmp_path / f'offline{frames}', progress=False,
                                   plots=False)
            for summary in (live, offline):
                assert summary['ate_rmse_m'] is None
                assert not any('poses associated' in error for error in summary['errors'])
            # offline: one frame is not tracked (it initialises), two are too few to score
            error, = offline['errors']
            assert error.startswith('no frame was tracked' if frames == 1 else
                                    'only 2 frame(s) with a pose and ground truth: too few '
                                    'to score the trajectory'), error
            # live: DDS does not order the image and camera_info topics, so the node may get
            # a frame before its camera_info: then the refused frame is named as well
            refused = [e for e in live['errors'] if 'frames_without_camera_info' in e]
            if not refused:
                error, = live['errors']
                assert error.startswith(f'only {frames} frame(s) with a pose and ground truth: '
                                        'too few to score the trajectory'), error
            else:
                assert any('too few to score the trajectory' in e
                           or e.startswith('no frame was tracked') for e in live['errors'])

    def test_repeated_image_stamps_are_named(self, tmp_path):
        """Images of one header stamp: counted once, and the summary now says so."""
        _ros_or_skip()
        from relperception.data.synthetic import iter_sequence
        from relperception.nodes.replay import replay_bag

        camera, frames = iter_sequence(num_frames=8, seed=5, width=160, height=120, fps=10.0)
        bag = tmp_path / 'bag'
        with BagWriter(bag) as writer:
            frames = list(frames)
            for index, frame in enumerate(frames):   # frames 4-7 carry frame 3's stamp
                stamp = frames[min(index, 3)].stamp_ns
                writer.write_message(topics.IMAGE, topics.IMAGE_MSGTYPE, frame.stamp_ns,
                                     _image_msg(writer, stamp, frame.rgb))
                writer.write_camera_info(topics.CAMERA_INFO, stamp, camera)
                writer.write_pose(topics.GT_POSE, frame.stamp_ns, frame.T_world_cam)
        summary = replay_bag(bag, tmp_path / 'out', rate=2.0, plots=False,
                             namespace=f'/test_{uuid.uuid4().hex[:8]}')
        assert summary['live']['images_published'] == 8 and summary['frames_read'] == 4
        assert any(text.startswith('4 of the 8 images played repeat the header stamp')
                   for text in summary['errors']), summary['errors']

    def test_compressed_depth_bag_is_replayed_with_its_depth(
            self, compressed_depth_bag, tmp_path):
        _ros_or_skip()
        from relperception.nodes.replay import replay_bag

        summary = replay_bag(compressed_depth_bag, tmp_path / 'out', plots=False,
                             namespace=f'/test_{uuid.uuid4().hex[:8]}', startup_s=10.0)
        diagnostics = summary['node_diagnostics']['visual_odometry_node: tracking']
        assert diagnostics['depth_hits'] >= 8 and summary['depth_problems'] == {}
        assert summary['metric_depth_used'] is True and summary['alignment'] == 'se3'
        assert summary['ate_rmse_m'] is not None and summary['ate_rmse_m'] < 0.05

    def test_another_publisher_of_the_inputs_is_refused_before_anything_starts(
            self, small_bag, tmp_path):
        """A second replay (or a camera driver) on the same topics would mix its messages in."""
        _ros_or_skip()
        import rclpy
        from rclpy.qos import QoSProfile
        from relperception.nodes.replay import replay_bag
        from rosgraph_msgs.msg import Clock

        bag, _ = small_bag
        namespace = f'/test_{uuid.uuid4().hex[:8]}'
        earlier = tmp_path / 'summary.json'
        earlier.write_text(json.dumps({'outputs': {}}))   # an earlier run's summary
        context = rclpy.Context()
        rclpy.init(context=context)
        try:
            other = rclpy.create_node('other_replay', context=context)
            other.create_publisher(Clock, f'{namespace}/clock', QoSProfile(depth=10))
            with pytest.raises(ValueError, match=f'another publisher is on {namespace}/clock'):
                replay_bag(bag, tmp_path, namespace=namespace, plots=False)
            other.destroy_node()
        finally:
            context.try_shutdown()
        assert earlier.exists()                      # nothing was removed
        assert not (tmp_path / live_eval.RECORDED_BAG).exists()

    def test_in_process_with_loftr(self, small_bag, tmp_path):
        """``matcher: loftr`` (shipped loftr_lite weights) through the live replay.

        LoFTR is slower than the 10 Hz bag on this CPU at rate 0.5 too: frames it cannot keep up
        with are dropped and counted (``_check_live_summary`` checks the books balance).
        """
        _ros_or_skip()
        from relperception.config import load_config
        from relperception.nodes.replay import replay_bag

        bag, _ = small_bag
        config = load_config(overrides={'matcher': 'loftr'})
        summary = replay_bag(bag, tmp_path, config, rate=0.5,
                             namespace=f'/test_{uuid.uuid4().hex[:8]}')
        _check_live_summary(summary, tmp_path, 40)
        assert summary['frames_processed'] >= 5
        assert summary['ate_rmse_m'] is not None and summary['ate_rmse_m'] < 0.5

    def test_separate_processes_match_offline(self, small_bag, tmp_path):
        """Replay in a process of its own, as a user runs it.

        Fast DDS reads the profile when a process creates its first participant; this pytest
        process may already have one from other tests (then ~1/3 of the images are lost on the
        way to the node processes), so the replay runs via the CLI in a fresh process.
        """
        _ros_or_skip()
        bag, offline = small_bag
        environ = dict(os.environ)
        environ.setdefault('AMENT_PREFIX_PATH', sys.prefix)
        environ.pop('FASTRTPS_DEFAULT_PROFILES_FILE', None)
        result = subprocess.run(
            [sys.executable, '-m', 'relperception.cli.main', 'replay', str(bag),
             '-o', str(tmp_path), '--separate-processes',
             '--namespace', f'/test_{uuid.uuid4().hex[:8]}'],
            env=environ, capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads((tmp_path / 'summary.json').read_text())
        assert 'fastdds_profile.xml' in summary['live']['fastdds_profile']
        _check_live_summary(summary, tmp_path, 40)
        assert set(summary['live']['node_exit_codes']) == {'visual_odometry_node'}
        assert (tmp_path / 'node_logs' / 'visual_odometry_node.log').is_file()
        live_ate, offline_ate = summary['ate_rmse_m'], offline['ate_rmse_m']
        allowed = LIVE_ATE_TOLERANCE * offline_ate
        assert abs(live_ate - offline_ate) <= allowed, (
            f'live ATE {live_ate:.5f} m vs offline {offline_ate:.5f} m: differ by more than '
            f'5 % of the offline ATE; live odom {summary["output_topics"]}')


class TestReplayCli:

    def test_missing_bag_exits_1_with_a_clear_message(self, tmp_path, caplog):
        with caplog.at_level(logging.ERROR):
            code = cli_main(['replay', str(tmp_path / 'missing_bag'), '-o', str(tmp_path / 'o')])
        assert code == 1
        assert any('missing_bag' in r.getMessage() and 'does not exist' in r.getMessage()
                   for r in caplog.records)

    def test_bad_rate(self, small_bag, tmp_path, capsys):
        for rate in ('0', 'nan', '1000'):   # a usage error naming the option
            with pytest.raises(SystemExit) as exit_info:
                cli_main(['replay', str(small_bag[0]), '-o', str(tmp_path), '--rate', rate])
            assert exit_info.value.code == 2
            assert 'argument --rate: must' in capsys.readouterr().err
