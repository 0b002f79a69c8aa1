# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the ``relperception synth`` and ``relperception convert`` verbs."""

import cv2
import numpy as np
import pytest

from relperception.cli.main import main
from relperception.data import topics
from relperception.data.bag import BagReader
from relperception.data.messages import (
    camera_from_camera_info,
    decode_image_message,
    stamp_to_ns,
    transform_from_pose_msg,
)
from relperception.data.synthetic import iter_sequence

SYNTH_ARGS = ['--frames', '8', '--width', '160', '--height', '120', '--seed', '3']


def _by_topic(bag):
    out = {}
    with BagReader(bag) as reader:
        for m in reader.messages():
            out.setdefault(m.topic, []).append(m)
        assert reader.errors == []
    return out


@pytest.fixture(scope='module')
def synth_bag(tmp_path_factory):
    bag = tmp_path_factory.mktemp('synth') / 'bag'
    assert main(['synth', *SYNTH_ARGS, '-o', str(bag)]) == 0
    return bag


class TestSynthVerb:

    def test_smoke_topics_and_counts(self, synth_bag):
        with BagReader(synth_bag) as reader:
            assert reader.topics == {
                topics.IMAGE: 'sensor_msgs/msg/Image',
                topics.CAMERA_INFO: 'sensor_msgs/msg/CameraInfo',
                topics.DEPTH: 'sensor_msgs/msg/Image',
                topics.GT_LABELS: 'sensor_msgs/msg/Image',
                topics.GT_POSE: 'geometry_msgs/msg/PoseStamped',
            }
            assert set(reader.message_counts.values()) == {8}

    def test_reference_equals_generator(self, synth_bag):
        camera, frames = iter_sequence(num_frames=8, seed=3, width=160, height=120)
        frames = list(frames)
        got = _by_topic(synth_bag)
        for topic in got:
            assert [stamp_to_ns(m.msg.header.stamp) for m in got[topic]] == \
                [f.stamp_ns for f in frames]
            assert [m.log_time_ns for m in got[topic]] == [f.stamp_ns for f in frames]
        for k, frame in enumerate(frames):
            rgb, encoding = decode_image_message(got[topics.IMAGE][k].msg, 'sensor_msgs/msg/Image')
            assert encoding == 'rgb8' and rgb.shape == (120, 160, 3)
            np.testing.assert_array_equal(rgb, frame.rgb)
            depth, encoding = decode_image_message(got[topics.DEPTH][k].msg,
                                                   'sensor_msgs/msg/Image')
            assert encoding == '32FC1' and depth.dtype == np.float32
            np.testing.assert_array_equal(depth, frame.depth)
            labels, encoding = decode_image_message(got[topics.GT_LABELS][k].msg,
                                                    'sensor_msgs/msg/Image')
            assert encoding == 'mono8'
            np.testing.assert_array_equal(labels, frame.labels)
            np.testing.assert_allclose(transform_from_pose_msg(got[topics.GT_POSE][k].msg.pose),
                                       frame.T_world_cam, atol=1e-12)
            info = camera_from_camera_info(got[topics.CAMERA_INFO][k].msg)
            np.testing.assert_array_equal(info.K, camera.K)

    def test_overwrite_and_storage(self, synth_bag, tmp_path):
        assert main(['synth', *SYNTH_ARGS, '-o', str(synth_bag)]) == 1  # exists: refused
        (tmp_path / 'imgs').mkdir()
        cv2.imwrite(str(tmp_path / 'imgs' / 'a.png'), np.zeros((8, 8, 3), np.uint8))
        assert main(['convert', 'images', str(tmp_path / 'imgs'), '-o', str(synth_bag)]) == 1
        with BagReader(synth_bag) as reader:  # untouched
            assert reader.message_counts[topics.IMAGE] == 8
        bag = tmp_path / 'noisy'
        args = ['synth', '--frames', '2', '--width', '64', '--height', '48', '--noise', '5',
                '--storage', 'sqlite3', '-o', str(bag)]
        assert main(args) == 0
        assert main([*args, '--overwrite']) == 0
        assert list(bag.glob('*.db3'))
        with BagReader(bag) as reader:
            assert reader.message_counts[topics.IMAGE] == 2

    def test_degenerate_arguments(self, tmp_path):
        assert main(['synth', '--frames', '0', '-o', str(tmp_path / 'b')]) == 1
        with pytest.raises(SystemExit):
            main(['synth', '--storage', 'rosbag1', '-o', str(tmp_path / 'b')])
        with pytest.raises(SystemExit):
            main(['synth'])  # -o is required


def _tiny_tum(root):
    seq = root / 'rgbd_dataset_freiburg3_tiny'
    (seq / 'rgb').mkdir(parents=True)
    (seq / 'depth').mkdir()
    stamps = ['1341847980.722988', '1341847981.754715']
    for s in stamps:
        cv2.imwrite(str(seq / 'rgb' / f'{s}.png'), np.full((30, 40, 3), 90, np.uint8))
    cv2.imwrite(str(seq / 'depth' / '1341847980.723020.png'), np.full((30, 40), 5000, np.uint16))
    (seq / 'groundtruth.txt').write_text('# timestamp tx ty tz qx qy qz qw\n'
                                         '1341847980.7900 -0.6832 2.6909 1.7373 0.0003 0.8617 '
                                         '-0.5072 -0.0145\n')
    return seq, stamps


def _tiny_kitti(root):
    seq = root / 'kitti'
    (seq / 'image_0').mkdir(parents=True)
    for i in range(3):
        cv2.imwrite(str(seq / 'image_0' / f'{i:06d}.png'), np.full((20, 30), i * 40, np.uint8))
    (seq / 'calib.txt').write_text('P0: 40 0 15 0 0 40 10 0 0 0 1 0\n')
    (seq / 'poses.txt').write_text(''.join(f'1 0 0 {i} 0 1 0 0 0 0 1 {2 * i}\n' for i in range(3)))
    (seq / 'times.txt').write_text('0.0\n0.1\n0.2\n')
    return seq


class TestConvertVerb:

    def test_tum_with_intrinsics(self, tmp_path):
        seq, stamps = _tiny_tum(tmp_path)
        bag = tmp_path / 'tum_bag'
        assert main(['convert', 'tum', str(seq), '-o', str(bag),
                     '--intrinsics', '35', '36', '19.5', '14.5']) == 0
        got = _by_topic(bag)
        assert len(got[topics.IMAGE]) == 2 and len(got[topics.DEPTH]) == 1
        assert len(got[topics.GT_POSE]) == 1
        expected = [int(s.replace('.', '')) * 1000 for s in stamps]
        assert [m.log_time_ns for m in got[topics.IMAGE]] == expected
        assert got[topics.IMAGE][0].log_time_ns == 1341847980722988000
        depth, _ = decode_image_message(got[topics.DEPTH][0].msg, 'sensor_msgs/msg/Image')
        np.testing.assert_array_equal(depth, 1.0)  # 5000 / 5000 m
        K = camera_from_camera_info(got[topics.CAMERA_INFO][0].msg).K
        np.testing.assert_array_equal(K, [[35, 0, 19.5], [0, 36, 14.5], [0, 0, 1]])
        # the fr3 camera from the name does not fit 40x30 frames: a clear error, exit code 1
        assert main(['convert', 'tum', str(seq), '-o', str(tmp_path / 'other')]) == 1

    def test_kitti(self, tmp_path):
        seq = _tiny_kitti(tmp_path)
        bag = tmp_path / 'kitti_bag'
        assert main(['convert', 'kitti', str(seq), '-o', str(bag), '--storage', 'sqlite3']) == 0
        got = _by_topic(bag)
        assert [m.log_time_ns for m in got[topics.IMAGE]] == [0, 100_000_000, 200_000_000]
        positions = [transform_from_pose_msg(m.msg.pose)[:3, 3] for m in got[topics.GT_POSE]]
        np.testing.assert_array_equal(positions, [[i, 0, 2 * i] for i in range(3)])
        assert main(['convert', 'kitti', str(seq), '-o', str(tmp_path / 'x'),
                     '--intrinsics', '1', '1', '1', '1']) == 1

    def test_images_folder_layout(self, tmp_path):
        src = tmp_path / 'camvid'
        (src / 'images').mkdir(parents=True)
        (src / 'labels').mkdir()
        for name, value in (('f1', 3), ('f2', 8)):
            cv2.imwrite(str(src / 'images' / f'{name}.png'), np.full((24, 32, 3), 60, np.uint8))
            cv2.imwrite(str(src / 'labels' / f'{name}.png'), np.full((24, 32), value, np.uint8))
        bag = tmp_path / 'img_bag'
        assert main(['convert', 'images', str(src), '-o', str(bag), '--fps', '2']) == 0
        got = _by_topic(bag)
        assert [m.log_time_ns for m in got[topics.GT_LABELS]] == [1_000_000_000, 1_500_000_000]
        labels = [decode_image_message(m.msg, m.msgtype)[0] for m in got[topics.GT_LABELS]]
        assert [int(np.unique(label)[0]) for label in labels] == [3, 8]

    def test_images_with_a_principal_point_outside_is_warned(self, tmp_path, caplog):
        src = tmp_path / 'small'
        src.mkdir()
        for name in ('f1', 'f2'):
            cv2.imwrite(str(src / f'{name}.png'), np.full((24, 32, 3), 60, np.uint8))
        bag = tmp_path / 'pp_bag'
        # the K of 128x96 images given for their 32x24 copies
        with caplog.at_level('WARNING'):
            assert main(['convert', 'images', str(src), '-o', str(bag),
                         '--intrinsics', '40', '40', '63.5', '47.5']) == 0
        assert f'{src}: --intrinsics puts the principal point at (63.5, 47.5) px, outside the ' \
               '32x24 image: intrinsics for 128x96 used on 32x24 images?' in caplog.text
        K = np.reshape(_by_topic(bag)[topics.CAMERA_INFO][0].msg.k, (3, 3))
        np.testing.assert_array_equal(K, [[40, 0, 63.5], [0, 40, 47.5], [0, 0, 1]])
        caplog.clear()
        with caplog.at_level('WARNING'):
            assert main(['convert', 'images', str(src), '-o', str(tmp_path / 'ok'),
                         '--intrinsics', '40', '40', '15.5', '11.5']) == 0
        assert 'principal point' not in caplog.text

    def test_an_output_under_a_file_is_refused_naming_it(self, tmp_path, caplog):
        (tmp_path / 'notes').write_text('a file, not a folder')
        src = tmp_path / 'small'
        src.mkdir()
        cv2.imwrite(str(src / 'f1.png'), np.full((24, 32, 3), 60, np.uint8))
        for argv in (['synth', '--frames', '2', '--width', '64', '--height', '48'],
                     ['convert', 'images', str(src)]):
            caplog.clear()
            assert main(argv + ['-o', str(tmp_path / 'notes' / 'x.bag')]) == 1
            assert f"-o {tmp_path / 'notes' / 'x.bag'}: {tmp_path / 'notes'} is a file, not a " \
                   'folder; give a path in a folder (e.g. -o x.bag)' in caplog.text, argv
            assert 'File exists' not in caplog.text

    def test_degenerate(self, tmp_path):
        assert main(['convert', 'tum', str(tmp_path / 'missing'), '-o', str(tmp_path / 'b')]) == 1
        with pytest.raises(SystemExit):
            main(['convert', 'euroc', str(tmp_path), '-o', str(tmp_path / 'b')])
        assert not (tmp_path / 'b').exists()
