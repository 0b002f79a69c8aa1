# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of relperception.data.messages and relperception.data.bag (rosbag2 via rosbags)."""

from decimal import Decimal
from types import SimpleNamespace

import numpy as np
import pytest

from relperception.core_types import Camera
from relperception.data import topics
from relperception.data.bag import BagMessage, BagReader, BagWriter, default_typestore
from relperception.data.messages import (
    camera_from_camera_info,
    camera_info_fields,
    decode_image_message,
    ns_to_sec_nanosec,
    pose_fields,
    seconds_to_ns,
    stamp_to_ns,
    transform_from_pose_msg,
)
from relperception.transforms import make_transform

T0_NS = 1_341_847_980_722_988_123  # a TUM-era stamp with nanosecond digits


def _random_transform(rng):
    from scipy.spatial.transform import Rotation
    return make_transform(Rotation.random(random_state=rng).as_matrix(), rng.normal(size=3) * 5)


def _camera():
    return Camera(K=np.array([[525.5, 0.0, 319.25], [0.0, 524.0, 239.75], [0.0, 0.0, 1.0]]),
                  width=640, height=480,
                  distortion=np.array([0.25, -0.5, 0.001, -0.002, 0.3]))


def _pose_namespace(position, q_xyzw):
    return SimpleNamespace(position=SimpleNamespace(x=position[0], y=position[1], z=position[2]),
                           orientation=SimpleNamespace(x=q_xyzw[0], y=q_xyzw[1], z=q_xyzw[2],
                                                       w=q_xyzw[3]))


def _images(rng, height=12, width=16):
    """Return {topic: (array, encoding)} covering several encodings and dtypes."""
    depth = rng.uniform(0.3, 8.0, (height, width)).astype(np.float32)
    depth[0, :3] = np.nan
    return {
        '/rgb8': (rng.integers(0, 256, (height, width, 3), dtype=np.uint8), 'rgb8'),
        '/bgr8': (rng.integers(0, 256, (height, width, 3), dtype=np.uint8), 'bgr8'),
        '/mono8': (rng.integers(0, 256, (height, width), dtype=np.uint8), 'mono8'),
        '/mono16': (rng.integers(0, 65536, (height, width), dtype=np.uint16), 'mono16'),
        '/depth16': (rng.integers(0, 65536, (height, width), dtype=np.uint16), '16UC1'),
        '/depth32': (depth, '32FC1'),
    }


class TestTimeConversions:

    def test_smoke_round_trip(self):
        sec, nanosec = ns_to_sec_nanosec(T0_NS)
        assert (sec, nanosec) == (1_341_847_980, 722_988_123)
        assert stamp_to_ns(SimpleNamespace(sec=sec, nanosec=nanosec)) == T0_NS

    def test_reference_decimal_strings_are_exact(self):
        rng = np.random.default_rng(0)
        for _ in range(200):
            sec = int(rng.integers(0, 2**31 - 1))
            digits = int(rng.integers(1, 10))
            frac = int(rng.integers(0, 10**digits))
            text = f'{sec}.{frac:0{digits}d}'
            expected = int(Decimal(text) * 10**9)
            assert seconds_to_ns(text) == expected
        assert seconds_to_ns('1.036594e-01') == 103_659_400
        assert seconds_to_ns(0.1) == 100_000_000  # floats go through their shortest repr

    @pytest.mark.parametrize('bad', ['abc', '', 'nan', 'inf'])
    def test_degenerate_seconds(self, bad):
        with pytest.raises(ValueError):
            seconds_to_ns(bad)

    def test_degenerate_stamps(self):
        with pytest.raises(ValueError):
            ns_to_sec_nanosec(-1)
        with pytest.raises(ValueError):
            ns_to_sec_nanosec(2**31 * 10**9)
        with pytest.raises(ValueError):
            stamp_to_ns(SimpleNamespace(sec=1, nanosec=10**9))


class TestCameraInfoConversion:

    def test_smoke_round_trip_duck_typed(self):
        camera = _camera()
        camera2 = camera_from_camera_info(SimpleNamespace(**camera_info_fields(camera)))
        np.testing.assert_array_equal(camera2.K, camera.K)
        np.testing.assert_array_equal(camera2.distortion, camera.distortion)
        assert (camera2.width, camera2.height, camera2.distortion_model) == (640, 480,
                                                                             'plumb_bob')

    def test_shape_fields(self):
        fields = camera_info_fields(_camera())
        assert fields['k'].shape == (9,) and fields['r'].shape == (9,)
        assert fields['p'].shape == (12,) and fields['d'].shape == (5,)
        P = fields['p'].reshape(3, 4)
        np.testing.assert_array_equal(P[:, :3], _camera().K)
        np.testing.assert_array_equal(P[:, 3], 0.0)
        np.testing.assert_array_equal(fields['r'].reshape(3, 3), np.eye(3))

    def test_reference_rosbags_message(self):
        store = default_typestore()
        types = store.types
        header = types['std_msgs/msg/Header'](
            stamp=types['builtin_interfaces/msg/Time'](sec=1, nanosec=2), frame_id='cam')
        roi = types['sensor_msgs/msg/RegionOfInterest'](x_offset=0, y_offset=0, height=0,
                                                        width=0, do_rectify=False)
        msg = types['sensor_msgs/msg/CameraInfo'](header=header, roi=roi,
                                                  **camera_info_fields(_camera()))
        raw = store.serialize_cdr(msg, 'sensor_msgs/msg/CameraInfo')
        back = store.deserialize_cdr(raw, 'sensor_msgs/msg/CameraInfo')
        np.testing.assert_array_equal(camera_from_camera_info(back).K, _camera().K)

    def test_rclpy_message_when_available(self):
        msg_module = pytest.importorskip('sensor_msgs.msg')
        fields = camera_info_fields(_camera())
        msg = msg_module.CameraInfo(height=fields['height'], width=fields['width'],
                                    distortion_model=fields['distortion_model'],
                                    d=fields['d'].tolist(), k=fields['k'].tolist())
        np.testing.assert_array_equal(camera_from_camera_info(msg).K, _camera().K)

    def test_empty_distortion_means_none(self):
        fields = camera_info_fields(_camera())
        fields['d'] = np.zeros(0)
        camera = camera_from_camera_info(SimpleNamespace(**fields))
        assert not camera.has_distortion and camera.distortion.shape == (5,)

    @pytest.mark.parametrize('change', [
        {'k': np.zeros(9)},                                   # uncalibrated
        {'width': 0, 'height': 0},
        {'k': np.arange(8.0)},                                # wrong size
        {'k': np.array([500.0, 0, 900.0, 0, 500.0, 240.0, 0, 0, 1])},  # cx outside
        {'k': np.array([500.0, 0, 320.0, 0, 500.0, 240.0, 0, 0, 2])},  # not pinhole
        {'d': np.zeros(3)},                                   # plumb_bob needs 5
        {'distortion_model': 'equidistant', 'd': np.zeros(5)},
        {'d': np.array([np.nan, 0, 0, 0, 0])},
        {'k': np.array([1e-6, 0, 320.0, 0, 1e-6, 240.0, 0, 0, 1])},   # a focal length ~0
        {'k': np.array([1e9, 0, 320.0, 0, 1e9, 240.0, 0, 0, 1])},     # 1e9 px
        {'k': np.array([500.0, 0, 320.0, 0, 50.0, 240.0, 0, 0, 1])},  # fx / fy = 10
        {'k': np.array([500.0, 1e4, 320.0, 0, 500.0, 240.0, 0, 0, 1])},  # skew 1e4
    ])
    def test_degenerate_camera_info(self, change):
        fields = camera_info_fields(_camera())
        fields.update(change)
        with pytest.raises(ValueError):
            camera_from_camera_info(SimpleNamespace(**fields))

    def test_binning_and_roi_give_the_camera_of_the_published_image(self):
        """REP 104: K of the full sensor, the image binned 2x2 and/or cropped to the ROI."""
        fields = camera_info_fields(_camera())
        K = _camera().K
        roi = SimpleNamespace(x_offset=160, y_offset=120, width=320, height=240)
        binned = camera_from_camera_info(SimpleNamespace(**{**fields, 'binning_x': 2,
                                                            'binning_y': 2}))
        assert (binned.width, binned.height) == (320, 240)
        np.testing.assert_allclose(binned.K[:2], K[:2] / 2.0)
        cropped = camera_from_camera_info(SimpleNamespace(**fields, roi=roi))
        assert (cropped.width, cropped.height) == (320, 240)
        np.testing.assert_allclose(cropped.K[:2, 2], K[:2, 2] - [160, 120])
        assert cropped.K[0, 0] == K[0, 0]
        both = camera_from_camera_info(SimpleNamespace(**{**fields, 'binning_x': 2,
                                                          'binning_y': 2}, roi=roi))
        assert (both.width, both.height) == (160, 120)
        np.testing.assert_allclose(both.K[:2, 2], (K[:2, 2] - [160, 120]) / 2.0)
        # the same pixel seen in the full image and in the binned crop
        point = np.array([0.3, -0.2, 2.0])
        full, small = K @ point, both.K @ point
        np.testing.assert_allclose(small[:2] / small[2], (full[:2] / full[2] - [160, 120]) / 2)
        outside = SimpleNamespace(x_offset=400, y_offset=0, width=320, height=240)
        with pytest.raises(ValueError, match='roi 320x240 at .400, 0. reaches outside'):
            camera_from_camera_info(SimpleNamespace(**fields, roi=outside))

    def test_zero_k_with_a_projection_matrix_names_rectified_input(self):
        fields = camera_info_fields(_camera())
        fields['k'] = np.zeros(9)
        with pytest.raises(ValueError, match='use rectified_input'):
            camera_from_camera_info(SimpleNamespace(**fields))
        assert camera_from_camera_info(SimpleNamespace(**fields), rectified=True).K[0, 0] > 0

    @pytest.mark.parametrize('fx', [100.0, 40_000.0])   # 145 deg (a wide lens), a 1 deg zoom
    def test_wide_and_narrow_lenses_are_plausible(self, fx):
        fields = camera_info_fields(_camera())
        fields['k'] = np.array([fx, 0, 320.0, 0, fx, 240.0, 0, 0, 1])
        assert camera_from_camera_info(SimpleNamespace(**fields)).K[0, 0] == fx


class TestPoseConversion:

    def test_reference_round_trip(self):
        rng = np.random.default_rng(1)
        for _ in range(50):
            T = _random_transform(rng)
            position, q_xyzw = pose_fields(T)
            assert position.shape == (3,) and q_xyzw.shape == (4,)
            assert np.isclose(np.linalg.norm(q_xyzw), 1.0)
            np.testing.assert_allclose(transform_from_pose_msg(_pose_namespace(position,
                                                                               q_xyzw)),
                                       T, atol=1e-12)

    def test_pose_stamped_accepted(self):
        T = _random_transform(np.random.default_rng(2))
        stamped = SimpleNamespace(header=None, pose=_pose_namespace(*pose_fields(T)))
        np.testing.assert_allclose(transform_from_pose_msg(stamped), T, atol=1e-12)

    def test_degenerate(self):
        with pytest.raises(ValueError):
            transform_from_pose_msg(_pose_namespace([0, 0, 0], [0, 0, 0, 0]))
        with pytest.raises(ValueError):
            transform_from_pose_msg(_pose_namespace([np.nan, 0, 0], [0, 0, 0, 1]))
        with pytest.raises(ValueError):
            pose_fields(np.diag([2.0, 1.0, 1.0, 1.0]))  # not a rotation
        with pytest.raises(ValueError):
            pose_fields(np.eye(3))


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
class TestBagRoundTrip:

    def _write(self, path, storage, rng):
        images = _images(rng)
        poses = [_random_transform(rng) for _ in range(3)]
        camera = _camera()
        with BagWriter(path, storage=storage) as writer:
            for k, T in enumerate(poses):
                stamp = T0_NS + k * 33_333_333
                for topic, (array, encoding) in images.items():
                    writer.write_image(topic, stamp, array, encoding)
                writer.write_camera_info(topics.CAMERA_INFO, stamp, camera)
                writer.write_pose(topics.GT_POSE, stamp, T)
        return images, poses, camera, writer.summary()

    def test_smoke_summary_and_metadata(self, tmp_path, storage):
        _, _, _, summary = self._write(tmp_path / 'bag', storage, np.random.default_rng(3))
        assert summary['messages'][topics.GT_POSE] == 3
        assert summary['start_ns'] == T0_NS and summary['end_ns'] == T0_NS + 2 * 33_333_333
        assert (tmp_path / 'bag' / 'metadata.yaml').is_file()
        with BagReader(tmp_path / 'bag') as reader:
            assert reader.topics[topics.CAMERA_INFO] == 'sensor_msgs/msg/CameraInfo'
            assert reader.topics[topics.GT_POSE] == 'geometry_msgs/msg/PoseStamped'
            assert reader.topics['/rgb8'] == 'sensor_msgs/msg/Image'
            assert reader.message_counts == summary['messages']
            assert reader.errors == []

    def test_reference_values_and_stamps_exact(self, tmp_path, storage):
        images, poses, camera, _ = self._write(tmp_path / 'bag', storage,
                                               np.random.default_rng(4))
        seen = dict.fromkeys(list(images) + [topics.CAMERA_INFO, topics.GT_POSE], 0)
        with BagReader(tmp_path / 'bag') as reader:
            for message in reader.messages():
                assert isinstance(message, BagMessage)
                k = seen[message.topic]
                seen[message.topic] += 1
                stamp = T0_NS + k * 33_333_333
                assert message.log_time_ns == stamp
                assert stamp_to_ns(message.msg.header.stamp) == stamp
                if message.topic == topics.GT_POSE:
                    assert message.msg.header.frame_id == topics.WORLD_FRAME
                    np.testing.assert_allclose(transform_from_pose_msg(message.msg.pose),
                                               poses[k], atol=1e-12)
                elif message.topic == topics.CAMERA_INFO:
                    assert message.msg.header.frame_id == topics.CAMERA_FRAME
                    back = camera_from_camera_info(message.msg)
                    np.testing.assert_array_equal(back.K, camera.K)
                    np.testing.assert_array_equal(back.distortion, camera.distortion)
                else:
                    array, encoding = decode_image_message(message.msg, message.msgtype)
                    expected, expected_encoding = images[message.topic]
                    assert encoding == expected_encoding
                    assert array.dtype == expected.dtype
                    np.testing.assert_array_equal(array, expected)  # NaN == NaN here
        assert set(seen.values()) == {3}

    def test_topic_filter(self, tmp_path, storage):
        self._write(tmp_path / 'bag', storage, np.random.default_rng(5))
        with BagReader(tmp_path / 'bag') as reader:
            got = [m.topic for m in reader.messages([topics.GT_POSE, '/not/in/bag'])]
            assert got == [topics.GT_POSE] * 3
            assert list(reader.messages(['/not/in/bag'])) == []

    def test_bare_storage_file(self, tmp_path, storage):
        self._write(tmp_path / 'bag', storage, np.random.default_rng(6))
        suffix = '.mcap' if storage == 'mcap' else '.db3'
        files = list((tmp_path / 'bag').glob(f'*{suffix}'))
        assert len(files) == 1
        with BagReader(files[0]) as reader:
            assert reader.message_counts[topics.GT_POSE] == 3
            assert len(list(reader.messages([topics.CAMERA_INFO]))) == 3

    def test_split_bag_with_a_missing_file_is_incomplete(self, tmp_path, storage):
        """A split recording whose second file was not copied: read, but not complete."""
        import yaml

        from relperception.data.synthetic_bag import write_synthetic_bag
        from relperception.pipeline.offline_eval import evaluate_bag

        bag = tmp_path / 'split'
        write_synthetic_bag(bag, frames=4, width=160, height=120, storage=storage)
        suffix = '.mcap' if storage == 'mcap' else '.db3'
        (stored,) = bag.glob(f'*{suffix}')
        stored.rename(bag / f'split_0{suffix}')
        metadata = yaml.safe_load((bag / 'metadata.yaml').read_text())
        info = metadata['rosbag2_bagfile_information']
        info['relative_file_paths'] = [f'split_0{suffix}', f'split_1{suffix}']
        info['files'] = [dict(info['files'][0], path=f'split_0{suffix}'),
                         dict(info['files'][0], path=f'split_1{suffix}')]
        info['message_count'] *= 2
        for topic in info['topics_with_message_count']:
            topic['message_count'] *= 2
        (bag / 'metadata.yaml').write_text(yaml.safe_dump(metadata))
        with BagReader(bag) as reader:
            assert len(list(reader.messages([topics.IMAGE]))) == 4
            assert reader.storage_damaged
            assert any(f'split_1{suffix} listed in metadata.yaml is missing' in e
                       and 'metadata.yaml counts 40 messages' in e for e in reader.errors)
        summary = evaluate_bag(bag, tmp_path / 'eval', None, progress=False, plots=False)
        assert summary['frames_processed'] == 4 and summary['complete'] is False
        assert any(f'split_1{suffix}' in e for e in summary['errors'])


class TestCompressedImages:

    def test_png_round_trip_exact(self, tmp_path):
        rng = np.random.default_rng(7)
        frames = [rng.integers(0, 256, (24, 32, 3), dtype=np.uint8) for _ in range(3)]
        topic = topics.compressed_topic(topics.IMAGE)
        assert topic == '/camera/image_raw/compressed'
        with BagWriter(tmp_path / 'bag') as writer:
            for k, frame in enumerate(frames):
                writer.write_compressed_image(topic, T0_NS + k, frame, 'rgb8', fmt='png')
        with BagReader(tmp_path / 'bag') as reader:
            assert reader.topics[topic] == 'sensor_msgs/msg/CompressedImage'
            messages = list(reader.messages())
        assert [m.log_time_ns for m in messages] == [T0_NS, T0_NS + 1, T0_NS + 2]
        for message, frame in zip(messages, frames):
            array, encoding = decode_image_message(message.msg, message.msgtype)
            assert encoding == 'rgb8'
            np.testing.assert_array_equal(array, frame)

    def test_jpeg_round_trip_close(self, tmp_path):
        y, x = np.mgrid[0:48, 0:64]
        frame = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1).astype(np.uint8)
        with BagWriter(tmp_path / 'bag') as writer:
            writer.write_compressed_image('/c', T0_NS, frame, 'rgb8', fmt='jpeg', quality=95)
        with BagReader(tmp_path / 'bag') as reader:
            (message,) = list(reader.messages())
        array, encoding = decode_image_message(message.msg, message.msgtype)
        assert encoding == 'rgb8' and array.shape == frame.shape
        assert np.abs(array.astype(int) - frame).mean() < 3.0

    def test_degenerate_message_type(self):
        with pytest.raises(ValueError):
            decode_image_message(SimpleNamespace(), 'geometry_msgs/msg/PoseStamped')


def _write_many_images(path, count=40, storage='mcap'):
    """Write ``count`` distinct 160x120 rgb8 frames (>1 MiB, so several MCAP chunks)."""
    frames = []
    with BagWriter(path, storage=storage) as writer:
        for k in range(count):
            frame = np.full((120, 160, 3), k, dtype=np.uint8)
            frame[0, 0] = (k, 255 - k, 7)
            frames.append(frame)
            writer.write_image(topics.IMAGE, T0_NS + k * 10**8, frame, 'rgb8')
            writer.write_pose(topics.GT_POSE, T0_NS + k * 10**8, np.eye(4))
    return frames


class TestDamagedBags:

    def test_truncated_mcap_yields_intact_prefix(self, tmp_path):
        frames = _write_many_images(tmp_path / 'bag')
        (mcap,) = (tmp_path / 'bag').glob('*.mcap')
        data = mcap.read_bytes()
        mcap.write_bytes(data[:int(len(data) * 0.6)])  # a recording killed mid-write
        with BagReader(tmp_path / 'bag') as reader:
            assert reader.salvaged
            assert reader.errors, 'the damage must be reported'
            readable = reader.message_counts[topics.IMAGE]
            assert 0 < readable < len(frames)
            messages = list(reader.messages([topics.IMAGE]))
        assert len(messages) == readable
        for k, message in enumerate(messages):  # a prefix, in order, values intact
            assert message.log_time_ns == T0_NS + k * 10**8
            array, _ = decode_image_message(message.msg, message.msgtype)
            np.testing.assert_array_equal(array, frames[k])

    def test_truncated_bare_mcap_and_no_salvage(self, tmp_path):
        _write_many_images(tmp_path / 'bag')
        (mcap,) = (tmp_path / 'bag').glob('*.mcap')
        broken = tmp_path / 'broken.mcap'
        broken.write_bytes(mcap.read_bytes()[:int(mcap.stat().st_size * 0.7)])
        with BagReader(broken) as reader:
            assert len(list(reader.messages())) > 0
        with pytest.raises(ValueError, match='cannot open bag'), BagReader(broken, salvage=False):
            pass

    def test_damaged_beyond_salvage(self, tmp_path):
        _write_many_images(tmp_path / 'bag', count=3)
        (mcap,) = (tmp_path / 'bag').glob('*.mcap')
        mcap.write_bytes(mcap.read_bytes()[:100])  # inside the first chunk: nothing intact
        with pytest.raises(ValueError, match='cannot open bag'), BagReader(tmp_path / 'bag'):
            pass
        garbage = tmp_path / 'garbage.mcap'
        garbage.write_bytes(b'not an mcap file at all')
        with pytest.raises(ValueError), BagReader(garbage):
            pass

    def test_undecodable_message_is_skipped(self, tmp_path):
        from rosbags.rosbag2 import StoragePlugin, Writer
        store = default_typestore()
        good = store.types['std_msgs/msg/String'](data='ok')
        with Writer(tmp_path / 'bag', version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            connection = writer.add_connection('/s', 'std_msgs/msg/String', typestore=store)
            writer.write(connection, 1, store.serialize_cdr(good, 'std_msgs/msg/String'))
            writer.write(connection, 2, b'\x00\x01\x00\x00\xff\xff\xff\x7f')  # length overflow
            writer.write(connection, 3, store.serialize_cdr(good, 'std_msgs/msg/String'))
        with BagReader(tmp_path / 'bag') as reader:
            messages = list(reader.messages())
            assert [m.log_time_ns for m in messages] == [1, 3]
            assert [m.msg.data for m in messages] == ['ok', 'ok']
            assert len(reader.errors) == 1 and '/s' in reader.errors[0]


class TestBagPaths:

    def test_unknown_path(self, tmp_path):
        with pytest.raises(FileNotFoundError), BagReader(tmp_path / 'missing'):
            pass

    def test_not_a_bag(self, tmp_path):
        (tmp_path / 'notes.txt').write_text('hello')
        with pytest.raises(ValueError), BagReader(tmp_path / 'notes.txt'):
            pass
        (tmp_path / 'empty').mkdir()
        with pytest.raises(ValueError), BagReader(tmp_path / 'empty'):
            pass

    def test_overwrite_refused_then_allowed(self, tmp_path):
        path = tmp_path / 'bag'
        with BagWriter(path) as writer:
            writer.write_pose(topics.GT_POSE, 5, np.eye(4))
        with pytest.raises(FileExistsError), BagWriter(path):
            pass
        with BagWriter(path, overwrite=True, storage='sqlite3') as writer:
            writer.write_pose(topics.GT_POSE, 7, np.eye(4))
            writer.write_pose(topics.GT_POSE, 8, np.eye(4))
        with BagReader(path) as reader:
            assert [m.log_time_ns for m in reader.messages()] == [7, 8]

    def test_overwrite_never_deletes_other_folders(self, tmp_path):
        folder = tmp_path / 'precious'
        folder.mkdir()
        (folder / 'thesis.tex').write_text('...')
        with pytest.raises(FileExistsError), BagWriter(folder, overwrite=True):
            pass
        assert (folder / 'thesis.tex').is_file()

    def test_error_while_writing_removes_partial_bag(self, tmp_path):
        with pytest.raises(ValueError), BagWriter(tmp_path / 'bag') as writer:
            writer.write_pose(topics.GT_POSE, 1, np.eye(4))
            writer.write_image(topics.IMAGE, 2, np.zeros((4, 4), np.float64), 'rgb8')
        assert not (tmp_path / 'bag').exists()

    def test_degenerate_writer_arguments(self, tmp_path):
        with pytest.raises(ValueError):
            BagWriter(tmp_path / 'bag', storage='rosbag1')
        with BagWriter(tmp_path / 'bag') as writer:
            with pytest.raises(ValueError):
                writer.write_pose('relative/topic', 0, np.eye(4))
            with pytest.raises(ValueError):
                writer.write_pose(topics.GT_POSE, -1, np.eye(4))
            with pytest.raises(ValueError):
                writer.write_message('/x', 'no_msgs/msg/Nothing', 0, None)
            writer.write_pose(topics.GT_POSE, 0, np.eye(4))
            with pytest.raises(ValueError):  # one type per topic
                writer.write_camera_info(topics.GT_POSE, 0, _camera())
