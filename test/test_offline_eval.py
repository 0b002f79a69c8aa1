# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the VO pipeline, the offline bag evaluation and the ``eval`` / ``demo`` verbs.

Every bag is written into pytest's tmp folder from the synthetic scene generator.
"""

import csv
import json
import shutil

from conftest import SHARED_DATA
import numpy as np
import pytest
from relperception.cli.main import main
from relperception.core_types import Frame
from relperception.data import topics
from relperception.data.bag import BagReader, BagWriter
from relperception.data.messages import stamp_to_ns, transform_from_pose_msg
from relperception.data.synthetic import iter_sequence
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.evaluation.trajectory import evaluate_trajectory, read_tum
from relperception.evaluation.vo_report import METRIC_KEYS
from relperception.models.presets import preset_for_backbone
from relperception.pipeline.offline_eval import evaluate_bag
from relperception.pipeline.vo_pipeline import VOPipeline

FRAMES = 24
WIDTH, HEIGHT = 320, 240
KITTI_06 = SHARED_DATA / 'kitti_odometry_06_f0000-0050'


@pytest.fixture(scope='module')
def synthetic_bag(tmp_path_factory):
    path = tmp_path_factory.mktemp('bags') / 'synthetic'
    write_synthetic_bag(path, frames=FRAMES, width=WIDTH, height=HEIGHT)
    return path


@pytest.fixture(scope='module')
def rgbd_run(synthetic_bag, tmp_path_factory):
    output = tmp_path_factory.mktemp('rgbd')
    return output, evaluate_bag(synthetic_bag, output, None, progress=False)


def _gt_from_bag(path):
    stamps, poses = [], []
    with BagReader(path) as reader:
        for message in reader.messages([topics.GT_POSE]):
            stamps.append(stamp_to_ns(message.msg.header.stamp))
            poses.append(transform_from_pose_msg(message.msg))
    return np.asarray(stamps), np.stack(poses)


def _write_broken_bag(path, num_frames=10):
    """Write a 320x240 RGB-D bag with one bad image; wrong-size, NaN and millimetre depth.

    Depth messages come before their image for odd frames, and are stamped 5 ms late for
    frame 2 (nearest-stamp pairing).
    """
    camera, sequence = iter_sequence(num_frames=num_frames, seed=1, width=WIDTH, height=HEIGHT)
    with BagWriter(path) as writer:
        for index, frame in enumerate(sequence):
            stamp = frame.stamp_ns
            depth = frame.depth
            if index == 3:
                depth = depth[::2, ::2].copy()  # wrong size
            elif index == 5:
                depth = np.full_like(depth, np.nan)  # no valid pixel
            elif index == 8:
                depth = depth * 1000.0  # millimetres labelled 32FC1
            depth_stamp = stamp + (5_000_000 if index == 2 else 0)

            def write_depth(depth=depth, depth_stamp=depth_stamp):
                writer.write_image(topics.DEPTH, depth_stamp, depth, '32FC1')

            writer.write_camera_info(topics.CAMERA_INFO, stamp, camera)
            if index % 2:
                write_depth()
            if index == 7:  # an rgb8 image whose data is far too short: undecodable
                msg = writer.typestore.types[topics.IMAGE_MSGTYPE](
                    header=writer.header(stamp, topics.CAMERA_FRAME), height=HEIGHT,
                    width=WIDTH, encoding='rgb8', is_bigendian=0, step=WIDTH * 3,
                    data=np.zeros(100, np.uint8))
                writer.write_message(topics.IMAGE, topics.IMAGE_MSGTYPE, stamp, msg)
            else:
                writer.write_image(topics.IMAGE, stamp, frame.rgb, 'rgb8')
            if not index % 2:
                write_depth()
            writer.write_pose(topics.GT_POSE, stamp, frame.T_world_cam)


class TestVOPipeline:
    def test_process(self):
        camera, sequence = iter_sequence(num_frames=3, seed=2, width=WIDTH, height=HEIGHT)
        pipeline = VOPipeline({'odometry.mode': 'rgbd', 'ncc.max_keypoints': 300})
        assert pipeline.mode == 'rgbd' and pipeline.config['ncc.max_keypoints'] == 300
        results = []
        for item in sequence:
            frame = Frame(image=item.rgb, stamp_ns=item.stamp_ns, camera=camera, depth=item.depth)
            results.append(pipeline.process(frame))
        assert results[0].status == 'initialized'
        np.testing.assert_allclose(results[0].T_world_cam, np.eye(4))
        assert all(r.T_world_cam.shape == (4, 4) for r in results)
        assert len(pipeline.timings_ms) == 3 and pipeline.frames_processed == 3
        stats = pipeline.timing_stats()
        assert 0 < stats['median_ms'] <= stats['max_ms']
        pipeline.reset()
        assert len(pipeline.timings_ms) == 0 and np.isnan(pipeline.timing_stats()['median_ms'])

    def test_bad_input(self):
        with pytest.raises(ValueError, match='unknown parameter'):
            VOPipeline({'odometry.no_such_key': 1})
        with pytest.raises(ValueError):
            VOPipeline({'odometry.mode': 'stereo'})
        with pytest.raises(ValueError, match='Frame'):
            VOPipeline().process(np.zeros((HEIGHT, WIDTH), np.uint8))


class TestEvaluateBag:
    def test_rgbd_accuracy(self, rgbd_run):
        _, summary = rgbd_run
        assert summary['mode'] == 'rgbd' and summary['alignment'] == 'se3'
        assert summary['frames_processed'] == FRAMES
        assert summary['frames_lost'] == 0
        assert summary['complete'] is True and summary['num_errors'] == 0
        assert summary['num_poses_matched'] == FRAMES
        assert summary['ate_rmse_m'] < 0.01
        assert summary['scale'] == 1.0
        assert summary['timing_median_ms'] > 0

    def test_outputs(self, rgbd_run, synthetic_bag):
        output, summary = rgbd_run
        for name in ('trajectory.tum', 'groundtruth.tum', 'summary.json', 'timing.csv',
                     'trajectory.png', 'errors.png'):
            assert (output / name).is_file(), name
        _, poses = read_tum(output / 'trajectory.tum')
        kept = summary['frames_processed'] - summary['frames_lost']
        assert poses.shape == (kept, 4, 4)
        saved = json.loads((output / 'summary.json').read_text())
        for key in (*METRIC_KEYS, 'frames_processed', 'frames_lost', 'reinitializations',
                    'timing_median_ms', 'timing_p95_ms', 'errors', 'mode', 'complete'):
            assert key in saved, key
        assert saved['ate_rmse_m'] == pytest.approx(summary['ate_rmse_m'])
        assert 'per_pose' not in saved
        with open(output / 'timing.csv', newline='') as stream:
            rows = list(csv.DictReader(stream))
        assert len(rows) == summary['frames_processed']
        assert all(float(row['process_ms']) > 0 for row in rows)

    def test_trajectory_in_gt_frame(self, rgbd_run, synthetic_bag):
        output, _ = rgbd_run
        gt_stamps, gt_poses = _gt_from_bag(synthetic_bag)
        stamps, poses = read_tum(output / 'trajectory.tum')
        stamps_gt_file, poses_gt_file = read_tum(output / 'groundtruth.tum')
        # ground truth resampled at the frame stamps equals the bag's poses (same stamps here)
        np.testing.assert_array_equal(stamps_gt_file, gt_stamps)
        np.testing.assert_allclose(poses_gt_file, gt_poses, atol=1e-8)
        # anchored at the first frame: identical first pose, and accurate without alignment
        np.testing.assert_allclose(poses[0], gt_poses[0], atol=1e-8)
        raw = evaluate_trajectory(stamps, poses, gt_stamps, gt_poses, alignment='none')
        assert raw['ate_rmse_m'] < 0.02

    def test_monocular(self, synthetic_bag, tmp_path):
        summary = evaluate_bag(synthetic_bag, tmp_path / 'mono', None, mode='mono',
                               progress=False, plots=False)
        assert summary['mode'] == 'mono' and summary['alignment'] == 'sim3'
        assert summary['gt_scale'] is False and 'first map' in summary['scale_source']
        local_map = summary['local_map']
        assert local_map['map_initializations'] == 1 and local_map['map_keyframes'] >= 2
        assert local_map['map_points'] > 0 and local_map['ba_calls'] >= 1
        assert local_map['ba_ms_median'] > 0 and local_map['keyframe_insertion_ms_median'] > 0
        # Back to back, a frame after a keyframe waits for its background work: part of the
        # timing, not of the tracking path.
        with open(tmp_path / 'mono' / 'timing.csv', newline='') as stream:
            rows = list(csv.DictReader(stream))
        waits = [float(row['keyframe_wait_ms']) for row in rows]
        assert max(waits) > 0 and all(float(row['process_ms']) >= w for row, w in zip(rows, waits))
        assert summary['tracking_median_ms'] <= summary['timing_median_ms']
        by_source = summary['frames_by_scale_source']
        assert by_source['map'] == summary['frames_tracked_against_map'] >= FRAMES // 2
        assert sum(by_source.values()) == FRAMES - 1   # the first frame has no motion
        assert summary['frames_processed'] == FRAMES
        assert summary['topics']['depth'] is None
        assert np.isfinite(summary['ate_rmse_m']) and summary['scale'] > 0
        assert not (tmp_path / 'mono' / 'trajectory.png').exists()
        scaled = evaluate_bag(synthetic_bag, tmp_path / 'mono_gt', None, mode='mono',
                              gt_scale=True, progress=False, plots=False)
        assert scaled['gt_scale'] is True and '--gt-scale' in scaled['scale_source']
        assert abs(scaled['scale'] - 1.0) < 0.2  # metric up to the VO error
        # Hints 10 % too long (a wheel-radius error): the path is too long, Sim(3) shrinks it.
        biased = evaluate_bag(synthetic_bag, tmp_path / 'mono_biased', None, mode='mono',
                              gt_scale=True, gt_scale_noise=(0.0, 0.1), progress=False,
                              plots=False)
        assert biased['scale'] == pytest.approx(scaled['scale'] / 1.1, rel=0.02)
        # A bag's wheel odometry topic gives the hints as the node's wheel_odom does (here the
        # ground-truth camera poses: exact distances, the same trajectory as --gt-scale).
        wheel = evaluate_bag(synthetic_bag, tmp_path / 'mono_wheel',
                             {'topics.wheel_odometry': '/ground_truth/pose'}, mode='mono',
                             progress=False, plots=False)
        assert wheel['frames_by_scale_source'] == scaled['frames_by_scale_source']
        assert wheel['ate_rmse_m'] == pytest.approx(scaled['ate_rmse_m'], rel=1e-6)
        # The hinted map: metric too, its frames tracked against the map.
        hinted = evaluate_bag(synthetic_bag, tmp_path / 'mono_hinted',
                              {'odometry.hint_map': True}, mode='mono', gt_scale=True,
                              progress=False, plots=False)
        assert hinted['frames_by_scale_source'].get('hinted_map', 0) >= FRAMES // 2
        assert hinted['local_map']['map_kind'] == 'hinted'
        assert abs(hinted['scale'] - 1.0) < 0.2

    def test_max_frames(self, synthetic_bag, tmp_path):
        summary = evaluate_bag(synthetic_bag, tmp_path, {'odometry.mode': 'auto'},
                               max_frames=6, progress=False, plots=False)
        assert summary['frames_processed'] == 6 and summary['mode'] == 'rgbd'
        assert read_tum(tmp_path / 'trajectory.tum')[0].shape == (6,)

    def test_bad_messages(self, tmp_path):
        bag = tmp_path / 'broken'
        _write_broken_bag(bag)
        summary = evaluate_bag(bag, tmp_path / 'out', None, progress=False, plots=False)
        assert summary['mode'] == 'rgbd'
        assert summary['frames_read'] == 10
        assert summary['frames_skipped'] == 1  # the undecodable image
        assert summary['frames_processed'] == 9
        assert summary['frames_without_depth'] == 3  # wrong size, all NaN, millimetres
        assert summary['depth_problems'] == {'wrong_size': 1, 'no_valid_pixel': 1,
                                             'implausible_range': 1}
        joined = '\n'.join(summary['errors'])
        assert 'undecodable image' in joined
        assert 'depth is 160x120' in joined
        assert 'no valid depth pixel' in joined
        assert 'millimetres labelled 32FC1' in joined
        assert summary['num_errors'] == 4  # the 5 ms late depth is paired, not an error
        with open(tmp_path / 'out' / 'timing.csv', newline='') as stream:
            rows = list(csv.DictReader(stream))
        with_depth = [int(row['frame']) for row in rows if row['depth'] == '1']
        stamps = [int(row['stamp_ns']) for row in rows]
        assert len(stamps) == 9 and stamps == sorted(stamps)
        # rows are bag frames 0-6, 8, 9 (7 skipped); 3, 5 and 8 lose their depth, 2 pairs at 5 ms
        assert with_depth == [0, 1, 2, 4, 6, 8]
        assert summary['ate_rmse_m'] is not None and np.isfinite(summary['ate_rmse_m'])

    @pytest.mark.parametrize('mode', ['auto', 'rgbd'])
    def test_every_depth_refused_gives_no_metric_and_no_ate_over_held_poses(
            self, tmp_path, mode):
        """Every depth image refused: nothing is scored as metric.

        ``auto`` tracks the frames monocularly, as the live node does; ``rgbd`` (asked for)
        tracks nothing and scores no ATE over the held poses.
        """
        bag = tmp_path / 'half_size_depth'
        camera, sequence = iter_sequence(num_frames=8, seed=1, width=WIDTH, height=HEIGHT)
        with BagWriter(bag) as writer:
            for frame in sequence:
                writer.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns, camera)
                writer.write_image(topics.IMAGE, frame.stamp_ns, frame.rgb, 'rgb8')
                writer.write_image(topics.DEPTH, frame.stamp_ns,
                                   frame.depth[::2, ::2].copy(), '32FC1')
                writer.write_pose(topics.GT_POSE, frame.stamp_ns, frame.T_world_cam)
        summary = evaluate_bag(bag, tmp_path / 'out', None, mode=mode, progress=False,
                               plots=False)
        assert summary['mode'] == 'rgbd' and summary['depth_problems'] == {'wrong_size': 8}
        assert summary['frames_with_depth'] == 0
        assert summary['metric_depth_used'] is False and summary['alignment'] == 'sim3'
        assert 'none metric' in summary['scale_source']
        joined = '\n'.join(summary['errors'])
        assert 'not one of the 8' in joined
        if mode == 'auto':
            assert summary['frames_tracked'] >= 5 and summary['frames_lost'] == 0
            assert np.isfinite(summary['ate_rmse_m'])
            assert (tmp_path / 'out' / 'trajectory.tum').is_file()
        else:
            assert summary['frames_tracked'] == 0
            assert summary['ate_rmse_m'] is None and summary['rpe_trans_rmse_m'] is None
            assert not (tmp_path / 'out' / 'trajectory.tum').exists()
            assert 'no frame was tracked' in joined

    def test_rgbd_run_with_frames_tracked_without_depth_says_the_scale_is_mixed(self, tmp_path):
        """Depth only from the ninth frame on: 'auto' tracks the first frames monocularly.

        Their steps are in the monocular map's unit, not metres; the summary must not call
        the whole trajectory metric.
        """
        bag = tmp_path / 'late_depth'
        camera, sequence = iter_sequence(num_frames=16, seed=1, width=WIDTH, height=HEIGHT)
        with BagWriter(bag) as writer:
            for index, frame in enumerate(sequence):
                writer.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns, camera)
                writer.write_image(topics.IMAGE, frame.stamp_ns, frame.rgb, 'rgb8')
                if index >= 8:
                    writer.write_image(topics.DEPTH, frame.stamp_ns, frame.depth, '32FC1')
                writer.write_pose(topics.GT_POSE, frame.stamp_ns, frame.T_world_cam)
        summary = evaluate_bag(bag, tmp_path / 'out', None, mode='auto', progress=False,
                               plots=False)
        assert summary['mode'] == 'rgbd' and summary['alignment'] == 'se3'
        by_source = summary['frames_by_scale_source']
        monocular = sum(by_source.get(name, 0) for name in ('map', 'unit', 'constant speed'))
        assert monocular >= 5 and by_source['depth'] >= 5
        assert summary['scale_source'].startswith('mixed')
        assert f'{monocular} frames' in summary['scale_source']
        assert any('mixes metres and a monocular unit' in e for e in summary['errors'])

    @pytest.mark.parametrize('fps, depth_copies, depth_late_s, image_late_s', [
        (10.0, 1, 1.0, 0.0),    # depth logged 1 s after its stamp (10 images wait)
        (30.0, 3, 0.0, 0.4),    # depth at 90 Hz, images logged 0.4 s late (36 depths first)
    ], ids=['depth_logged_1s_late', 'images_logged_late_depth_90hz'])
    def test_late_logged_depth_is_paired(self, tmp_path, fps, depth_copies, depth_late_s,
                                         image_late_s):
        """Offline, a depth image of exactly the image's stamp is never given up on."""
        from relperception.imaging.image_encodings import numpy_to_image_fields

        camera, sequence = iter_sequence(num_frames=14, seed=1, width=160, height=120,
                                         fps=fps)
        period_ns = round(1e9 / fps / depth_copies)
        bag = tmp_path / 'late'
        with BagWriter(bag) as writer:
            image_type = writer.typestore.types[topics.IMAGE_MSGTYPE]
            messages = []   # (log time, topic, msgtype, msg), written in log-time order

            def image(stamp, array, encoding):
                return image_type(header=writer.header(stamp, topics.CAMERA_FRAME),
                                  **numpy_to_image_fields(array, encoding))

            for frame in sequence:
                stamp = frame.stamp_ns
                messages.append((stamp, topics.CAMERA_INFO, None, camera))
                messages.append((stamp + round(image_late_s * 1e9), topics.IMAGE,
                                 topics.IMAGE_MSGTYPE, image(stamp, frame.rgb, 'rgb8')))
                for k in range(depth_copies):
                    depth_stamp = stamp + k * period_ns
                    messages.append((depth_stamp + round(depth_late_s * 1e9), topics.DEPTH,
                                     topics.IMAGE_MSGTYPE,
                                     image(depth_stamp, frame.depth, '32FC1')))
                messages.append((stamp, topics.GT_POSE, None, frame.T_world_cam))
            for log_time, topic, msgtype, msg in sorted(messages, key=lambda m: m[0]):
                if topic == topics.CAMERA_INFO:
                    writer.write_camera_info(topic, log_time, msg)
                elif topic == topics.GT_POSE:
                    writer.write_pose(topic, log_time, msg)
                else:
                    writer.write_message(topic, msgtype, log_time, msg)
        summary = evaluate_bag(bag, tmp_path / 'out', None, progress=False, plots=False)
        assert summary['mode'] == 'rgbd' and summary['frames_processed'] == 14
        assert summary['frames_without_depth'] == 0 and summary['num_errors'] == 0
        assert summary['frames_with_depth'] == 14

    def test_compressed_depth_topic_is_found_next_to_the_depth_topic(self, tmp_path):
        """Only <topics.depth>/compressedDepth recorded: read as /compressed is for images."""
        camera, sequence = iter_sequence(num_frames=6, seed=1, width=160, height=120)
        bag = tmp_path / 'cdepth'
        with BagWriter(bag) as writer:
            for frame in sequence:
                writer.write_camera_info(topics.CAMERA_INFO, frame.stamp_ns, camera)
                writer.write_image(topics.IMAGE, frame.stamp_ns, frame.rgb, 'rgb8')
                millimetres = np.round(np.nan_to_num(frame.depth) * 1000.0).astype(np.uint16)
                writer.write_compressed_image(topics.DEPTH + '/compressedDepth', frame.stamp_ns,
                                              millimetres, '16UC1', fmt='compressedDepth')
                writer.write_pose(topics.GT_POSE, frame.stamp_ns, frame.T_world_cam)
        summary = evaluate_bag(bag, tmp_path / 'out', None, progress=False, plots=False)
        assert summary['mode'] == 'rgbd' and summary['frames_with_depth'] == 6
        assert summary['topics']['depth'] == topics.DEPTH + '/compressedDepth'

    def test_truncated_bag(self, synthetic_bag, tmp_path):
        bag = tmp_path / 'truncated'
        shutil.copytree(synthetic_bag, bag)
        mcap = next(bag.glob('*.mcap'))
        data = mcap.read_bytes()
        mcap.write_bytes(data[:int(len(data) * 0.6)])
        summary = evaluate_bag(bag, tmp_path / 'out', None, progress=False)
        assert summary['complete'] is False
        assert summary['num_errors'] >= 1
        assert 0 < summary['frames_processed'] < FRAMES
        assert (tmp_path / 'out' / 'summary.json').is_file()
        stamps, _ = read_tum(tmp_path / 'out' / 'trajectory.tum')
        assert len(stamps) == summary['frames_processed'] - summary['frames_lost']
        assert summary['ate_rmse_m'] < 0.01

    def test_missing_topic(self, synthetic_bag, tmp_path):
        with pytest.raises(ValueError, match='/nope') as info:
            evaluate_bag(synthetic_bag, tmp_path, {'topics.image': '/nope'}, progress=False)
        assert topics.IMAGE in str(info.value)  # lists the topics the bag has
        with pytest.raises(ValueError, match='camera_info'):
            evaluate_bag(synthetic_bag, tmp_path, {'topics.camera_info': '/x'}, progress=False)

    def test_no_depth_and_bad_arguments(self, synthetic_bag, tmp_path):
        no_depth = {'topics.depth': '/none'}
        with pytest.raises(ValueError, match="'rgbd' needs depth"):
            evaluate_bag(synthetic_bag, tmp_path, no_depth, mode='rgbd', progress=False)
        summary = evaluate_bag(synthetic_bag, tmp_path, no_depth, max_frames=4,
                               progress=False, plots=False)
        assert summary['mode'] == 'mono'  # auto without depth
        with pytest.raises(ValueError, match='mode'):
            evaluate_bag(synthetic_bag, tmp_path, None, mode='stereo')
        with pytest.raises(ValueError, match='ground-truth'):
            evaluate_bag(synthetic_bag, tmp_path, {'topics.ground_truth_pose': '/no_gt'},
                         mode='mono', gt_scale=True, progress=False)
        with pytest.raises(FileNotFoundError):
            evaluate_bag(tmp_path / 'missing_bag', tmp_path, None)
        with pytest.raises(ValueError, match='needs gt_scale'):
            evaluate_bag(synthetic_bag, tmp_path, None, gt_scale_noise=(0.05, 0.0))
        for noise in ((0.05,), (-0.1, 0.0), (0.05, 2.0), ('a', 'b')):
            with pytest.raises(ValueError, match='gt_scale_noise'):
                evaluate_bag(synthetic_bag, tmp_path, None, mode='mono', gt_scale=True,
                             gt_scale_noise=noise)


def _rewrite_ground_truth(source, bag, build):
    """Copy ``source`` to ``bag`` with each ground-truth pose replaced by ``build``'s message.

    ``build(writer, stamp_ns, header, T_world_cam)`` returns ``(msgtype, msg)``.
    """
    with BagReader(source) as reader, BagWriter(bag) as writer:
        for message in reader.messages():
            if message.topic == topics.GT_POSE:
                msgtype, msg = build(writer, message.log_time_ns, message.msg.header,
                                     transform_from_pose_msg(message.msg))
                writer.write_message(topics.GT_POSE, msgtype, message.log_time_ns, msg)
            else:
                writer.write_message(message.topic, message.msgtype, message.log_time_ns,
                                     message.msg)
    return bag


def _transform_msg(writer, header, child, T):
    from relperception.data.messages import pose_fields

    types = writer.typestore.types
    position, q = pose_fields(T)
    return types['geometry_msgs/msg/TransformStamped'](
        header=header, child_frame_id=child, transform=types['geometry_msgs/msg/Transform'](
            translation=types['geometry_msgs/msg/Vector3'](*map(float, position)),
            rotation=types['geometry_msgs/msg/Quaternion'](*map(float, q))))


def _odometry_msg(writer, header, child, T):
    from relperception.data.messages import pose_fields

    types = writer.typestore.types
    position, q = pose_fields(T)
    zero = types['geometry_msgs/msg/Vector3'](0.0, 0.0, 0.0)
    pose = types['geometry_msgs/msg/Pose'](types['geometry_msgs/msg/Point'](*map(float, position)),
                                           types['geometry_msgs/msg/Quaternion'](*map(float, q)))
    return types['nav_msgs/msg/Odometry'](
        header=header, child_frame_id=child,
        pose=types['geometry_msgs/msg/PoseWithCovariance'](pose, np.zeros(36)),
        twist=types['geometry_msgs/msg/TwistWithCovariance'](
            types['geometry_msgs/msg/Twist'](zero, zero), np.zeros(36)))


class TestGroundTruthFrames:
    """Ground truth as Odometry / TransformStamped / TFMessage, of the camera or the base."""

    @staticmethod
    def _read(bag, base_frame='base_link'):
        from relperception.config import DEFAULT_CAMERA_MOUNT_XYZ_QXYZW
        from relperception.data.bag_frames import first_frame_id, read_camera_ground_truth
        from relperception.data.error_log import ErrorLog
        from relperception.odometry.mount import camera_mount_transform

        errors = ErrorLog()
        with BagReader(bag) as reader:
            stamps, poses, taken_as = read_camera_ground_truth(
                reader, topics.GT_POSE, errors, first_frame_id(reader, topics.IMAGE),
                base_frame, camera_mount_transform(DEFAULT_CAMERA_MOUNT_XYZ_QXYZW))
        return stamps, poses, taken_as, errors

    def test_base_frame_odometry_is_moved_to_the_camera(self, synthetic_bag, tmp_path):
        from relperception.config import DEFAULT_CAMERA_MOUNT_XYZ_QXYZW
        from relperception.odometry.mount import camera_mount_transform
        from relperception.transforms import invert_transform

        T_cam_base = invert_transform(camera_mount_transform(DEFAULT_CAMERA_MOUNT_XYZ_QXYZW))
        bag = _rewrite_ground_truth(synthetic_bag, tmp_path / 'odom_base', lambda w, t, h, T: (
            'nav_msgs/msg/Odometry', _odometry_msg(w, h, 'base_link', T @ T_cam_base)))
        reference = evaluate_bag(synthetic_bag, tmp_path / 'ref', None, max_frames=10,
                                 progress=False, plots=False)
        summary = evaluate_bag(bag, tmp_path / 'out', None, max_frames=10, progress=False,
                               plots=False)
        assert 'robot base' in summary['ground_truth_frame'] and summary['num_errors'] == 0
        for key in ('ate_rmse_m', 'rpe_trans_rmse_m', 'rpe_rot_rmse_deg', 'drift_percent'):
            assert summary[key] == pytest.approx(reference[key], rel=1e-6, abs=1e-9), key
        # the same poses read as the robot's when base_frame_id names another frame: warned
        _, _, taken_as, errors = self._read(bag, base_frame='chassis')
        assert 'assumed' in taken_as and errors.count == 1
        assert "'base_link' of the ground truth is neither" in errors.kept[0]

    def test_transform_stamped_and_tf_message(self, synthetic_bag, tmp_path):
        stamps, poses, taken_as, errors = self._read(synthetic_bag)
        assert 'name no child frame' in taken_as and errors.count == 0
        camera = _rewrite_ground_truth(
            synthetic_bag, tmp_path / 'transform', lambda w, t, h, T: (
                'geometry_msgs/msg/TransformStamped',
                _transform_msg(w, h, topics.CAMERA_FRAME, T)))

        def tf_message(writer, stamp, header, T):   # a base frame 5 m away, then the camera
            moved = T.copy()
            moved[0, 3] += 5.0
            return 'tf2_msgs/msg/TFMessage', writer.typestore.types['tf2_msgs/msg/TFMessage']([
                _transform_msg(writer, header, 'base_link', moved),
                _transform_msg(writer, header, topics.CAMERA_FRAME, T)])

        tf = _rewrite_ground_truth(synthetic_bag, tmp_path / 'tf', tf_message)
        for bag in (camera, tf):
            got_stamps, got_poses, taken_as, errors = self._read(bag)
            assert errors.count == 0 and 'that of the images' in taken_as
            np.testing.assert_array_equal(got_stamps, stamps)
            np.testing.assert_allclose(got_poses, poses, atol=1e-9)


class TestCli:
    def test_eval(self, synthetic_bag, tmp_path):
        output = tmp_path / 'eval'
        rc = main(['eval', str(synthetic_bag), '--output', str(output), '--max-frames', '8',
                   '--no-progress', '--no-plots'])
        assert rc == 0
        summary = json.loads((output / 'summary.json').read_text())
        assert summary['frames_processed'] == 8 and summary['ate_rmse_m'] < 0.01

    def test_eval_errors(self, synthetic_bag, tmp_path):
        config = tmp_path / 'config.yaml'
        config.write_text('topics:\n  image: /wrong\n')
        assert main(['eval', str(synthetic_bag), '-o', str(tmp_path / 'x'), '--config',
                     str(config), '--no-progress']) == 1

    def test_demo(self, tmp_path):
        rc = main(['demo', '--frames', '8', '--width', '320', '--height', '240', '--output',
                   str(tmp_path), '--no-progress'])
        assert rc == 0
        metrics = json.loads((tmp_path / 'metrics.json').read_text())
        assert metrics['rgbd']['frames_processed'] == 8
        assert metrics['mono']['frames_processed'] == 8
        assert metrics['mono_loftr']['frames_processed'] == 8  # shipped LoFTR-lite weights
        assert metrics['rgbd']['ate_rmse_m'] < 0.01
        # the shipped default's depth on a rendered frame (held-out seeds: see its model card)
        assert metrics['dense']['model'] == preset_for_backbone('conv')
        assert metrics['dense']['frames'] == 1
        assert metrics['dense']['delta1'] > 0.5 and metrics['dense']['abs_rel'] < 0.3
        for name in ('trajectory.png', 'rgbd/summary.json', 'mono/trajectory.tum',
                     'mono_loftr/trajectory.tum', 'dense/dense_samples/depth_0.png',
                     'synthetic_bag/metadata.yaml', 'report.html', 'rgbd/report.html',
                     'mono/report.html', 'mono_loftr/report.html'):
            assert (tmp_path / name).is_file(), name
        # the page to open first: every run's ATE and the dense figures, plots embedded
        report = (tmp_path / 'report.html').read_text()
        for run in ('rgbd', 'mono', 'mono_loftr'):
            assert f'{metrics[run]["ate_rmse_m"]:.4g}' in report, run
        assert 'dense model fast_seg on 1 frames: depth AbsRel' in report
        assert report.count('src="data:image/') == 2   # trajectories and one depth strip


class TestRealData:
    def test_kitti_monocular(self, tmp_path):
        """Monocular VO on 30 real KITTI frames (development data; skipped when absent)."""
        if not (KITTI_06 / 'poses.txt').is_file():
            pytest.skip(f'development data {KITTI_06} not available')
        from relperception.data.converters import convert_kitti

        convert_kitti(KITTI_06, tmp_path / 'kitti')
        summary = evaluate_bag(tmp_path / 'kitti', tmp_path / 'out', None, max_frames=30,
                               gt_scale=True, progress=False, plots=False)
        assert summary['mode'] == 'mono' and summary['frames_processed'] == 30
        assert summary['path_length_m'] > 20  # a car at about 1 m per frame
        assert summary['frames_lost'] == 0
        assert summary['ate_rmse_m'] < 0.5
        assert summary['drift_percent'] < 5


class TestRectifiedInput:
    def test_rectified_input_takes_p_and_no_distortion(self):
        """``eval --rectified-input``: the camera of CameraInfo's p, as the node's parameter."""
        from types import SimpleNamespace

        from relperception.data.bag_frames import FrameAssembler
        from relperception.data.error_log import ErrorLog

        info = SimpleNamespace(width=64, height=48, k=[50, 0, 32, 0, 50, 24, 0, 0, 1],
                               d=[0.1, -0.05, 0, 0, 0], distortion_model='plumb_bob',
                               p=[40, 0, 30, 0, 0, 40, 20, 0, 0, 0, 1, 0])
        message = SimpleNamespace(msg=info, topic=topics.CAMERA_INFO, log_time_ns=0)
        raw = FrameAssembler(False, ErrorLog())
        rectified = FrameAssembler(False, ErrorLog(), rectified_input=True)
        raw.add_camera_info(message)
        rectified.add_camera_info(message)
        assert raw.camera.K[0, 0] == 50 and np.any(raw.camera.distortion)
        assert rectified.camera.K[0, 0] == 40 and rectified.camera.K[0, 2] == 30
        assert not np.any(rectified.camera.distortion)
