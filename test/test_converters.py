# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the dataset converters (TUM RGB-D, KITTI odometry, image + label folders)."""

import decimal
import logging

import conftest
import cv2
import numpy as np
import pytest

from relperception.core_types import Camera
from relperception.data import topics
from relperception.data.bag import BagReader
from relperception.data.converters import (
    convert_image_folder,
    convert_kitti,
    convert_tum,
    tum,
)
from relperception.data.messages import (
    camera_from_camera_info,
    decode_image_message,
    stamp_to_ns,
    transform_from_pose_msg,
)
from relperception.transforms import transform_from_quaternion_xyzw


def _ns(text):
    """Convert decimal seconds to ns, independently of the library (the reference)."""
    return int(decimal.Decimal(text) * 1_000_000_000)


def _read(bag):
    """Return {topic: [(log_time_ns, header_stamp_ns, msg, msgtype), ...]}."""
    out = {}
    with BagReader(bag) as reader:
        for m in reader.messages():
            out.setdefault(m.topic, []).append(
                (m.log_time_ns, stamp_to_ns(m.msg.header.stamp), m.msg, m.msgtype))
        assert reader.errors == []
    return out


def _image(entry):
    return decode_image_message(entry[2], entry[3])


# ------------------------------------------------------------------------------------------- TUM
TUM_RGB = ['1305031102.175304', '1305031102.211214', '1305031102.243211', '1305031102.275326',
           '1305031102.311267']
# depth .160445 -> rgb0 (14.9 ms); .228000 is 16.8 ms from rgb1 but 15.2 ms from rgb2, so the
# greedy closest-first rule gives it to rgb2 and rgb1 gets none; .260000 -> rgb3 (15.3 ms);
# .340000 is 28.7 ms from rgb4: unpaired.
TUM_DEPTH = ['1305031102.160445', '1305031102.228000', '1305031102.260000', '1305031102.340000']
TUM_PAIRS = {0: 0, 2: 1, 3: 2}
TUM_GT = [('1305031101.0000', False), ('1305031101.7000', True), ('1305031102.2000', True),
          ('1305031102.8000', True), ('1305031102.9000', False)]


TINY = Camera.from_intrinsics(30.0, 31.0, 19.5, 14.5, 40, 30)


def _write_tum(root, name='rgbd_dataset_freiburg1_tiny', seed=0, size=(40, 30)):
    rng = np.random.default_rng(seed)
    width, height = size
    seq = root / name
    (seq / 'rgb').mkdir(parents=True)
    (seq / 'depth').mkdir()
    rgb, depth = [], []
    for stamp in TUM_RGB:
        image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        cv2.imwrite(str(seq / 'rgb' / f'{stamp}.png'), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        rgb.append(image)
    for stamp in TUM_DEPTH:
        raw = rng.integers(0, 40000, (height, width), dtype=np.uint16)
        raw[:3, :5] = 0
        cv2.imwrite(str(seq / 'depth' / f'{stamp}.png'), raw)
        depth.append(raw)
    lines = ['# ground truth trajectory', '# timestamp tx ty tz qx qy qz qw']
    for stamp, _ in TUM_GT:
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        t = rng.normal(size=3)
        lines.append(f'{stamp} ' + ' '.join(f'{v:.4f}' for v in [*t, *q]))
    (seq / 'groundtruth.txt').write_text('\n'.join(lines) + '\n')
    return seq, rgb, depth


class TestAssociate:

    @staticmethod
    def _tum_associate(first, second, max_difference):
        """Port of TUM's associate.py (offset 0) as the independent reference."""
        first_keys, second_keys = list(first), list(second)
        potential = sorted((abs(a - b), a, b) for a in first_keys for b in second_keys
                           if abs(a - b) < max_difference)
        matches = []
        for _, a, b in potential:
            if a in first_keys and b in second_keys:
                first_keys.remove(a)
                second_keys.remove(b)
                matches.append((a, b))
        return sorted(matches)

    def test_pairs_at_least_as_many_as_the_tum_script_and_the_most_possible(self):
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import maximum_bipartite_matching

        rng = np.random.default_rng(3)
        gained = 0
        for _ in range(20):
            rgb = np.cumsum(rng.integers(10_000_000, 40_000_000, 60))
            depth = np.cumsum(rng.integers(10_000_000, 40_000_000, 55)) + rng.integers(0, 10**8)
            pairs = tum.associate(rgb, depth, 20_000_000)
            greedy = self._tum_associate(rgb.tolist(), depth.tolist(), 20_000_000)
            # one to one, within the tolerance
            assert len({i for i, _ in pairs}) == len({j for _, j in pairs}) == len(pairs)
            assert all(abs(int(rgb[i]) - int(depth[j])) < 20_000_000 for i, j in pairs)
            # the most pairs any one-to-one pairing has (independent reference: scipy)
            candidates = csr_matrix(np.abs(rgb[:, None] - depth[None, :]) < 20_000_000)
            most = int(np.count_nonzero(maximum_bipartite_matching(candidates) >= 0))
            assert len(pairs) == most >= len(greedy)
            gained += len(pairs) - len(greedy)
        assert gained > 0   # the TUM script's closest-first rule leaves frames it could pair

    def test_a_frame_whose_only_depth_is_closer_to_a_neighbour(self):
        # rgb 10 ms is 1 ms from depth 9 ms; rgb 0 ms has only that depth within 20 ms
        rgb, depth = [0, 10_000_000], [9_000_000, 28_000_000]
        assert self._tum_associate(rgb, depth, 20_000_000) == [(10_000_000, 9_000_000)]
        assert tum.associate(rgb, depth) == [(0, 0), (1, 1)]

    def test_shape_and_degenerate(self):
        assert tum.associate([], [1, 2]) == []
        assert tum.associate([0], [20_000_000]) == []  # strictly less than the tolerance
        assert tum.associate([0], [19_999_999]) == [(0, 0)]
        with pytest.raises(ValueError):
            tum.associate([0], [0], max_difference_ns=0)


class TestConvertTum:

    def test_smoke_summary(self, tmp_path):
        seq, _, _ = _write_tum(tmp_path)
        summary = convert_tum(seq, tmp_path / 'bag', camera=TINY)
        assert summary['messages'] == {topics.IMAGE: 5, topics.CAMERA_INFO: 5, topics.DEPTH: 3,
                                       topics.GT_POSE: 3}
        assert summary['depth_paired'] == 3 and summary['depth_unpaired'] == 1
        assert summary['camera'] == 'given'
        assert summary['start_ns'] == _ns(TUM_GT[1][0])
        assert summary['end_ns'] == _ns(TUM_GT[3][0])

    def test_reference_stamps_images_depth(self, tmp_path):
        seq, rgb, depth = _write_tum(tmp_path)
        convert_tum(seq, tmp_path / 'bag', storage='sqlite3', camera=TINY)
        got = _read(tmp_path / 'bag')
        assert [e[0] for e in got[topics.IMAGE]] == [_ns(s) for s in TUM_RGB]
        assert [e[1] for e in got[topics.IMAGE]] == [_ns(s) for s in TUM_RGB]
        for entry, expected in zip(got[topics.IMAGE], rgb):
            array, encoding = _image(entry)
            assert encoding == 'rgb8'
            np.testing.assert_array_equal(array, expected)
        # depth: stamped with the paired RGB stamp, metres = raw / 5000, NaN where raw == 0
        assert [e[1] for e in got[topics.DEPTH]] == [_ns(TUM_RGB[i]) for i in TUM_PAIRS]
        for entry, (_, j) in zip(got[topics.DEPTH], sorted(TUM_PAIRS.items())):
            array, encoding = _image(entry)
            assert encoding == '32FC1' and array.dtype == np.float32
            expected = depth[j].astype(np.float32) / np.float32(5000.0)
            expected[depth[j] == 0] = np.nan
            np.testing.assert_array_equal(array, expected)

    def test_reference_ground_truth(self, tmp_path):
        seq, _, _ = _write_tum(tmp_path)
        convert_tum(seq, tmp_path / 'bag', camera=TINY)
        got = _read(tmp_path / 'bag')[topics.GT_POSE]
        lines = [line.split() for line in (seq / 'groundtruth.txt').read_text().splitlines()
                 if not line.startswith('#')]
        inside = [fields for fields, (_, keep) in zip(lines, TUM_GT) if keep]
        assert [e[1] for e in got] == [_ns(fields[0]) for fields in inside]
        for entry, fields in zip(got, inside):
            values = [float(v) for v in fields[1:]]
            T = transform_from_quaternion_xyzw(values[:3], values[3:])
            assert entry[2].header.frame_id == topics.WORLD_FRAME
            np.testing.assert_allclose(transform_from_pose_msg(entry[2].pose), T, atol=1e-12)
            assert [entry[2].pose.position.x, entry[2].pose.position.y,
                    entry[2].pose.position.z] == values[:3]

    def test_camera_from_name_and_override(self, tmp_path):
        seq, _, _ = _write_tum(tmp_path, name='rgbd_dataset_freiburg2_desk', size=(640, 480))
        summary = convert_tum(seq, tmp_path / 'bag')
        assert summary['camera'] == 'freiburg2'
        info = _read(tmp_path / 'bag')[topics.CAMERA_INFO][0][2]
        camera = camera_from_camera_info(info)
        fx, fy, cx, cy, dist = tum.TUM_INTRINSICS[2]
        np.testing.assert_array_equal(camera.K, [[fx, 0, cx], [0, fy, cy], [0, 0, 1]])
        np.testing.assert_array_equal(camera.distortion, dist)
        assert (camera.width, camera.height) == (640, 480)

        given = Camera.from_intrinsics(500.0, 501.0, 320.5, 240.5, 640, 480)
        summary = convert_tum(seq, tmp_path / 'bag2', camera=given)
        assert summary['camera'] == 'given'
        info = _read(tmp_path / 'bag2')[topics.CAMERA_INFO][0][2]
        np.testing.assert_array_equal(camera_from_camera_info(info).K, given.K)
        with pytest.raises(ValueError, match='640x480'):
            convert_tum(seq, tmp_path / 'bag3', camera=TINY)

    def test_named_camera_needs_full_size_frames(self, tmp_path):
        seq, _, _ = _write_tum(tmp_path)
        with pytest.raises(ValueError, match='640x480'):
            convert_tum(seq, tmp_path / 'bag')

    def test_rgb_list_file(self, tmp_path):
        seq, _, _ = _write_tum(tmp_path)
        (seq / 'rgb.txt').write_text('# color images\n' + ''.join(
            f'{s} rgb/{s}.png\n' for s in TUM_RGB[1:4]))
        summary = convert_tum(seq, tmp_path / 'bag', camera=TINY)
        assert summary['rgb_frames'] == 3
        got = _read(tmp_path / 'bag')
        assert [e[1] for e in got[topics.IMAGE]] == [_ns(s) for s in TUM_RGB[1:4]]

    def test_trajectory_reader_shape(self, tmp_path):
        seq, _, _ = _write_tum(tmp_path)
        stamps, poses = tum.read_tum_trajectory(seq / 'groundtruth.txt')
        assert stamps.dtype == np.int64 and stamps.shape == (5,)
        assert poses.shape == (5, 4, 4) and poses.dtype == np.float64
        assert stamps[0] == _ns(TUM_GT[0][0])

    @pytest.mark.parametrize('bad_line', ['1305031102.5 1 2 3 0 0 0',       # 7 values
                                          '1305031102.5 1 2 3 0 0 0 x',      # not a number
                                          '1305031102.5 1 2 3 0 0 0 0'])     # zero quaternion
    def test_degenerate_ground_truth_line(self, tmp_path, bad_line):
        seq, _, _ = _write_tum(tmp_path)
        with open(seq / 'groundtruth.txt', 'a') as handle:
            handle.write(bad_line + '\n')
        with pytest.raises(ValueError, match=r'groundtruth\.txt:8'):
            convert_tum(seq, tmp_path / 'bag', camera=TINY)

    def test_degenerate_folders(self, tmp_path):
        with pytest.raises(FileNotFoundError):
            convert_tum(tmp_path / 'missing_fr1', tmp_path / 'bag')
        (tmp_path / 'fr1_norgb').mkdir()
        with pytest.raises(FileNotFoundError, match='rgb'):
            convert_tum(tmp_path / 'fr1_norgb', tmp_path / 'bag')
        (tmp_path / 'fr1_empty' / 'rgb').mkdir(parents=True)
        with pytest.raises(ValueError, match='no PNG'):
            convert_tum(tmp_path / 'fr1_empty', tmp_path / 'bag')
        seq, _, _ = _write_tum(tmp_path, name='some_sequence')
        with pytest.raises(ValueError, match='camera'):
            convert_tum(seq, tmp_path / 'bag')
        assert not (tmp_path / 'bag').exists()


# ----------------------------------------------------------------------------------------- KITTI
KITTI_TIMES = ['0.000000e+00', '1.036594e-01', '2.073133e-01', '3.109754e-01', '4.146396e-01']


def _write_kitti(root, frames=5, calib_prefix=True, times=True, folder='image_0', seed=0):
    from scipy.spatial.transform import Rotation
    rng = np.random.default_rng(seed)
    seq = root / 'kitti_seq'
    (seq / folder).mkdir(parents=True)
    images = []
    for i in range(frames):
        # the colour camera's folder holds colour images (BGR on disk)
        image = rng.integers(0, 256, (30, 50, 3) if folder == 'image_2' else (30, 50),
                             dtype=np.uint8)
        cv2.imwrite(str(seq / folder / f'{i:06d}.png'), image)
        images.append(image)
    P0 = np.array([[45.5, 0, 24.25, 0], [0, 45.5, 14.75, 0], [0, 0, 1, 0]])
    P1 = P0.copy()
    P1[0, 3] = -21.7
    P2 = P0.copy()   # KITTI's left colour camera: 6 cm left of camera 0, slightly ahead
    P2[:, 3] = [2.73, -0.005, 0.004]
    rows = [' '.join(f'{v:.12e}' for v in P.reshape(-1)) for P in (P0, P1, P2)]
    if calib_prefix:
        rows = [f'P{k}: {row}' for k, row in enumerate(rows)]
    (seq / 'calib.txt').write_text('\n'.join(rows) + '\n')
    pose_lines = []
    for _ in range(frames):
        R = Rotation.from_rotvec(rng.normal(size=3) * 0.3).as_matrix()
        M = np.hstack([R, rng.normal(size=(3, 1)) * 10])
        pose_lines.append(' '.join(f'{v:.12e}' for v in M.reshape(-1)))
    (seq / 'poses.txt').write_text('\n'.join(pose_lines) + '\n')
    if times:
        (seq / 'times.txt').write_text('\n'.join(KITTI_TIMES[:frames]) + '\n')
    return seq, images, P0


class TestConvertKitti:

    def test_smoke_summary(self, tmp_path):
        seq, _, P0 = _write_kitti(tmp_path)
        summary = convert_kitti(seq, tmp_path / 'bag')
        assert summary['messages'] == {topics.IMAGE: 5, topics.CAMERA_INFO: 5, topics.GT_POSE: 5}
        assert summary['times_source'] == 'times.txt'
        np.testing.assert_array_equal(summary['K'], P0[:, :3])

    def test_a_calibration_of_twice_the_image_size_is_warned(self, tmp_path, caplog):
        # before, the K of the full-size images with half-size copies was written silently
        seq, _, P0 = _write_kitti(tmp_path)
        P = P0.copy()
        P[:2] = P[:2] * 2.0
        P[:2, 2] += 0.5
        (seq / 'calib.txt').write_text('P0: ' + ' '.join(f'{v:.12e}' for v in P.ravel()))
        with caplog.at_level('WARNING'):
            summary = convert_kitti(seq, tmp_path / 'bag')
        np.testing.assert_array_equal(summary['K'], P[:, :3])   # written as given
        assert f'{seq}: calib.txt P0 puts the principal point at (49, 30) px' in caplog.text
        assert 'intrinsics for 100x60 used on 50x30 images?' in caplog.text
        caplog.clear()
        with caplog.at_level('WARNING'):
            convert_kitti(_write_kitti(tmp_path / 'fine')[0], tmp_path / 'fine.bag')
        assert 'principal point' not in caplog.text

    def test_reference_stamps_poses_images(self, tmp_path):
        seq, images, P0 = _write_kitti(tmp_path)
        convert_kitti(seq, tmp_path / 'bag')
        got = _read(tmp_path / 'bag')
        expected_stamps = [_ns(t) for t in KITTI_TIMES]
        for topic in (topics.IMAGE, topics.CAMERA_INFO, topics.GT_POSE):
            assert [e[0] for e in got[topic]] == expected_stamps
            assert [e[1] for e in got[topic]] == expected_stamps
        for entry, expected in zip(got[topics.IMAGE], images):
            array, encoding = _image(entry)
            assert encoding == 'mono8'
            np.testing.assert_array_equal(array, expected)
        poses = np.loadtxt(seq / 'poses.txt').reshape(-1, 3, 4)
        for entry, M in zip(got[topics.GT_POSE], poses):
            position = entry[2].pose.position
            assert [position.x, position.y, position.z] == M[:, 3].tolist()  # exact
            np.testing.assert_allclose(transform_from_pose_msg(entry[2].pose)[:3, :3],
                                       M[:, :3], atol=1e-12)
        camera = camera_from_camera_info(got[topics.CAMERA_INFO][0][2])
        np.testing.assert_array_equal(camera.K, P0[:, :3])
        assert (camera.width, camera.height) == (50, 30) and not camera.has_distortion

    def test_official_layout_and_poses_option(self, tmp_path, caplog):
        import logging
        import shutil

        seq, _, _ = _write_kitti(tmp_path)
        # the official download: dataset/sequences/07/ and dataset/poses/07.txt
        dataset = tmp_path / 'dataset'
        (dataset / 'poses').mkdir(parents=True)
        official = dataset / 'sequences' / '07'
        shutil.copytree(seq, official)
        shutil.move(official / 'poses.txt', dataset / 'poses' / '07.txt')
        summary = convert_kitti(official, tmp_path / 'official.bag')
        assert summary['gt_poses'] == 5
        assert summary['gt_source'] == str(dataset / 'poses' / '07.txt')
        # the bag's metadata.yaml says what ground truth was found
        with BagReader(tmp_path / 'official.bag') as reader:
            found = reader.custom_data[topics.GROUND_TRUTH_KEY]
        assert found.startswith(str(dataset / 'poses' / '07.txt')) and '5 poses' in found
        # elsewhere: --poses names the file; without it, a warning says how to give one
        elsewhere = tmp_path / 'elsewhere'
        shutil.copytree(official, elsewhere)
        with caplog.at_level(logging.WARNING):
            assert convert_kitti(elsewhere, tmp_path / 'none.bag')['gt_poses'] == 0
        with BagReader(tmp_path / 'none.bag') as reader:
            assert reader.custom_data[topics.GROUND_TRUTH_KEY] == 'none'
        assert any('--poses' in r.getMessage() for r in caplog.records)
        summary = convert_kitti(elsewhere, tmp_path / 'given.bag',
                                poses=dataset / 'poses' / '07.txt')
        assert summary['gt_poses'] == 5
        assert _read(tmp_path / 'given.bag')[topics.GT_POSE]
        with pytest.raises(FileNotFoundError, match='does not exist'):
            convert_kitti(elsewhere, tmp_path / 'bad.bag', poses=tmp_path / 'nope.txt')

    def test_bare_calib_and_image_l(self, tmp_path):
        seq, _, P0 = _write_kitti(tmp_path, calib_prefix=False, folder='image_l')
        summary = convert_kitti(seq, tmp_path / 'bag', storage='sqlite3')
        np.testing.assert_array_equal(summary['K'], P0[:, :3])
        assert summary['frames'] == 5

    def test_colour_camera_alone_gets_its_own_intrinsics_and_pose(self, tmp_path):
        # the colour download has image_2/ only; it used to be refused ('no image_0 folder')
        seq, images, P0 = _write_kitti(tmp_path, folder='image_2')
        P2 = np.array([[45.5, 0, 24.25, 2.73], [0, 45.5, 14.75, -0.005], [0, 0, 1, 0.004]])
        summary = convert_kitti(seq, tmp_path / 'bag')
        assert summary['image_folder'] == 'image_2'
        got = _read(tmp_path / 'bag')
        array, encoding = _image(got[topics.IMAGE][0])
        assert encoding == 'rgb8'
        np.testing.assert_array_equal(array, images[0][..., ::-1])
        np.testing.assert_array_equal(camera_from_camera_info(got[topics.CAMERA_INFO][0][2]).K,
                                      P2[:, :3])
        # reference: KITTI projects a camera-0 point into image 2 with P2; the bag's pose of
        # the written camera must give the same pixel through its own K
        poses = np.loadtxt(seq / 'poses.txt').reshape(-1, 3, 4)
        points = np.random.default_rng(1).uniform([-5, -2, 4], [5, 2, 30], (20, 3))
        for entry, M in zip(got[topics.GT_POSE], poses):
            T_world_cam0 = np.vstack([M, [0, 0, 0, 1]])
            T_world_cam = transform_from_pose_msg(entry[2].pose)
            world = (T_world_cam0 @ np.c_[points, np.ones(20)].T)
            kitti = P2 @ np.linalg.inv(T_world_cam0) @ world
            ours = P2[:, :3] @ (np.linalg.inv(T_world_cam) @ world)[:3]
            np.testing.assert_allclose(ours[:2] / ours[2], kitti[:2] / kitti[2], atol=1e-9)

    def test_grey_camera_wins_over_colour(self, tmp_path):
        seq, _, P0 = _write_kitti(tmp_path)
        (seq / 'image_2').mkdir()
        assert convert_kitti(seq, tmp_path / 'bag')['image_folder'] == 'image_0'

    def test_times_must_increase(self, tmp_path):
        seq, _, _ = _write_kitti(tmp_path)
        times = KITTI_TIMES[:5]
        (seq / 'times.txt').write_text('\n'.join(times[:3] + [times[2]] + times[4:]) + '\n')
        with pytest.raises(ValueError, match='times.txt: time 3 .* is not after time 2'):
            convert_kitti(seq, tmp_path / 'bag')
        (seq / 'times.txt').write_text('\n'.join(['-5.0'] + times[1:]) + '\n')
        with pytest.raises(ValueError, match='times.txt:1: time -5.0 s is negative'):
            convert_kitti(seq, tmp_path / 'bag')

    def test_unreadable_calib_and_poses_name_the_file(self, tmp_path):
        seq, _, _ = _write_kitti(tmp_path)
        lines = (seq / 'poses.txt').read_text().splitlines()
        lines[2] = ' '.join(['nan'] + lines[2].split()[1:])
        (seq / 'poses.txt').write_text('\n'.join(lines) + '\n')
        with pytest.raises(ValueError, match='poses.txt:3: .* got 1 NaN or infinite'):
            convert_kitti(seq, tmp_path / 'bag')
        (seq / 'calib.txt').write_bytes(bytes(range(128, 256)))
        with pytest.raises(ValueError, match='calib.txt: not a text file'):
            convert_kitti(seq, tmp_path / 'bag')

    def test_missing_times_warns_and_uses_10hz(self, tmp_path, caplog):
        seq, _, _ = _write_kitti(tmp_path, times=False)
        with caplog.at_level(logging.WARNING):
            summary = convert_kitti(seq, tmp_path / 'bag')
        assert any('times.txt' in r.getMessage() for r in caplog.records
                   if r.levelno == logging.WARNING)
        assert summary['times_source'] == '10 Hz'
        got = _read(tmp_path / 'bag')
        assert [e[1] for e in got[topics.IMAGE]] == [i * 100_000_000 for i in range(5)]

    def test_times_argument(self, tmp_path):
        seq, _, _ = _write_kitti(tmp_path, times=False)
        convert_kitti(seq, tmp_path / 'bag', times=[0.5, 0.6, '0.7', 0.8, 0.9])
        got = _read(tmp_path / 'bag')
        assert [e[1] for e in got[topics.IMAGE]] == [_ns(t) for t in
                                                     ('0.5', '0.6', '0.7', '0.8', '0.9')]

    def test_degenerate_pose_line(self, tmp_path):
        seq, _, _ = _write_kitti(tmp_path)
        lines = (seq / 'poses.txt').read_text().splitlines()
        lines[2] = ' '.join(lines[2].split()[:11])
        (seq / 'poses.txt').write_text('\n'.join(lines) + '\n')
        with pytest.raises(ValueError, match=r'poses\.txt:3'):
            convert_kitti(seq, tmp_path / 'bag')

    def test_degenerate_inputs(self, tmp_path):
        seq, _, _ = _write_kitti(tmp_path)
        lines = (seq / 'poses.txt').read_text().splitlines()
        (seq / 'poses.txt').write_text('\n'.join(lines[:3]) + '\n')
        with pytest.raises(ValueError, match='3 poses'):
            convert_kitti(seq, tmp_path / 'bag')
        (seq / 'calib.txt').unlink()
        with pytest.raises(FileNotFoundError, match='calib'):
            convert_kitti(seq, tmp_path / 'bag')
        with pytest.raises(FileNotFoundError, match='image_0'):
            convert_kitti(tmp_path, tmp_path / 'bag')
        with pytest.raises(ValueError, match='times'):
            _write_kitti(tmp_path / 'b')
            convert_kitti(tmp_path / 'b' / 'kitti_seq', tmp_path / 'bag', times=[0.0, 0.1])

    def test_two_files_of_one_frame_are_refused(self, tmp_path):
        # 000004.png and 000004.jpg (or 4.png) were both written as frame 4, at one stamp
        seq, images, _ = _write_kitti(tmp_path)
        cv2.imwrite(str(seq / 'image_0' / '4.png'), images[4])
        with pytest.raises(ValueError, match=r'000004.png and 4.png .* both frame 4'):
            convert_kitti(seq, tmp_path / 'bag')
        assert not (tmp_path / 'bag').exists()

    def test_missing_frame_numbers_warn(self, tmp_path, caplog):
        seq, _, _ = _write_kitti(tmp_path)
        (seq / 'image_0' / '000002.png').unlink()
        with caplog.at_level(logging.WARNING):
            summary = convert_kitti(seq, tmp_path / 'bag')
        assert summary['frames'] == 4
        assert any('no image for 1 frame numbers (first: 2)' in r.getMessage()
                   for r in caplog.records)
        stamps = [entry[1] for entry in _read(tmp_path / 'bag')[topics.IMAGE]]
        assert stamps == [_ns(KITTI_TIMES[i]) for i in (0, 1, 3, 4)]

    def test_a_colour_file_among_grey_frames_is_refused(self, tmp_path):
        seq, _, _ = _write_kitti(tmp_path)
        cv2.imwrite(str(seq / 'image_0' / '000003.png'), np.zeros((30, 50, 3), np.uint8))
        with pytest.raises(ValueError, match=r'000003.png is a colour image but the first '
                                             r'frame 000000.png is grey'):
            convert_kitti(seq, tmp_path / 'bag')


# ---------------------------------------------------------------------------------------- images
def _write_image_folder(root, names=('a', 'b', 'c'), labels=True, seed=0):
    rng = np.random.default_rng(seed)
    (root / 'images').mkdir(parents=True)
    if labels:
        (root / 'labels').mkdir()
    images, label_images = [], []
    for name in names:
        image = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
        cv2.imwrite(str(root / 'images' / f'{name}.png'), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        images.append(image)
        if labels:
            label = rng.integers(0, 12, (24, 32), dtype=np.uint8)  # 11 = ignore
            cv2.imwrite(str(root / 'labels' / f'{name}.png'), label)
            label_images.append(label)
    return images, label_images


class TestConvertImageFolder:

    def test_reference_images_labels_stamps(self, tmp_path):
        images, labels = _write_image_folder(tmp_path)
        summary = convert_image_folder(tmp_path / 'images', tmp_path / 'bag',
                                       labels_dir=tmp_path / 'labels', fps=4.0,
                                       start_time_ns=5_000_000_000)
        assert summary['messages'] == {topics.IMAGE: 3, topics.CAMERA_INFO: 3,
                                       topics.GT_LABELS: 3}
        assert summary['names'] == ['a', 'b', 'c']
        got = _read(tmp_path / 'bag')
        stamps = [5_000_000_000 + i * 250_000_000 for i in range(3)]
        for topic in (topics.IMAGE, topics.GT_LABELS, topics.CAMERA_INFO):
            assert [e[1] for e in got[topic]] == stamps
        for entry, expected in zip(got[topics.IMAGE], images):
            array, encoding = _image(entry)
            assert encoding == 'rgb8'
            np.testing.assert_array_equal(array, expected)
        for entry, expected in zip(got[topics.GT_LABELS], labels):
            array, encoding = _image(entry)
            assert encoding == 'mono8'
            np.testing.assert_array_equal(array, expected)

    def test_guessed_camera_warns(self, tmp_path, caplog):
        _write_image_folder(tmp_path, labels=False)
        with caplog.at_level(logging.WARNING):
            summary = convert_image_folder(tmp_path / 'images', tmp_path / 'bag')
        assert summary['camera_guessed'] and summary['labels'] == 0
        assert any('intrinsics' in r.getMessage() for r in caplog.records)
        got = _read(tmp_path / 'bag')
        camera = camera_from_camera_info(got[topics.CAMERA_INFO][0][2])
        np.testing.assert_array_equal(camera.K, [[32, 0, 15.5], [0, 32, 11.5], [0, 0, 1]])
        assert topics.GT_LABELS not in got
        assert [e[1] for e in got[topics.IMAGE]] == [10**9, 2 * 10**9, 3 * 10**9]  # 1 Hz

    def test_given_camera(self, tmp_path):
        _write_image_folder(tmp_path, labels=False)
        camera = Camera.from_intrinsics(20.0, 21.0, 16.0, 12.0, 32, 24)
        summary = convert_image_folder(tmp_path / 'images', tmp_path / 'bag', camera=camera)
        assert not summary['camera_guessed']
        got = _read(tmp_path / 'bag')
        np.testing.assert_array_equal(camera_from_camera_info(got[topics.CAMERA_INFO][0][2]).K,
                                      camera.K)

    def test_degenerate_inputs(self, tmp_path):
        _write_image_folder(tmp_path)
        (tmp_path / 'labels' / 'b.png').unlink()
        with pytest.raises(FileNotFoundError, match='b.png'):
            convert_image_folder(tmp_path / 'images', tmp_path / 'bag', tmp_path / 'labels')
        cv2.imwrite(str(tmp_path / 'labels' / 'b.png'), np.zeros((24, 32, 3), np.uint8))
        with pytest.raises(ValueError, match='single-channel'):
            convert_image_folder(tmp_path / 'images', tmp_path / 'bag2', tmp_path / 'labels')
        (tmp_path / 'empty').mkdir()
        with pytest.raises(ValueError, match='no image files'):
            convert_image_folder(tmp_path / 'empty', tmp_path / 'bag3')
        with pytest.raises(FileNotFoundError):
            convert_image_folder(tmp_path / 'missing', tmp_path / 'bag4')
        for fps in (0.0, float('inf'), 1e12):   # 1e12 Hz: every stamp the same nanosecond
            with pytest.raises(ValueError, match='fps'):
                convert_image_folder(tmp_path / 'images', tmp_path / 'bag5', fps=fps)
        cv2.imwrite(str(tmp_path / 'images' / 'd.png'), np.zeros((10, 10, 3), np.uint8))
        with pytest.raises(ValueError, match='differs'):
            convert_image_folder(tmp_path / 'images', tmp_path / 'bag6')
        (tmp_path / 'images' / 'd.png').unlink()
        cv2.imwrite(str(tmp_path / 'images' / 'b.png'), np.zeros((24, 32), np.uint8))
        with pytest.raises(ValueError, match=r'b.png is a grey image but the first frame '
                                             r'a.png is colour'):
            convert_image_folder(tmp_path / 'images', tmp_path / 'bag7')


# ------------------------------------------------------------------ real data (skips when absent)
class TestRealData:

    def test_tum_fr3_long_office_household(self, tmp_path):
        seq = conftest.shared_dataset('tum_rgbd_fr3_long_office_household_1hz_17f')
        summary = convert_tum(seq, tmp_path / 'bag')
        files = sorted((seq / 'rgb').glob('*.png'))
        assert summary['camera'] == 'freiburg3'
        assert summary['messages'][topics.IMAGE] == len(files) == 17
        assert summary['depth_paired'] == 1
        got = _read(tmp_path / 'bag')
        assert [e[1] for e in got[topics.IMAGE]] == [_ns(p.stem) for p in files]
        assert got[topics.DEPTH][0][1] == _ns(files[0].stem)
        stamps, _ = tum.read_tum_trajectory(seq / 'groundtruth.txt')
        inside = (stamps >= _ns(files[0].stem) - 5 * 10**8) & \
                 (stamps <= _ns(files[-1].stem) + 5 * 10**8)
        assert len(got[topics.GT_POSE]) == int(inside.sum())
        assert [e[1] for e in got[topics.GT_POSE]] == stamps[inside].tolist()

    @pytest.mark.parametrize('name', ['kitti_odometry_01_f0000-0050',
                                      'kitti_odometry_06_f0000-0050'])
    def test_kitti(self, tmp_path, name):
        seq = conftest.shared_dataset(name)
        summary = convert_kitti(seq, tmp_path / 'bag')
        assert summary['frames'] == 51 and summary['messages'][topics.GT_POSE] == 51
        got = _read(tmp_path / 'bag')
        poses = np.loadtxt(seq / 'poses.txt').reshape(-1, 3, 4)
        worst = 0.0
        for entry, M in zip(got[topics.GT_POSE], poses):
            position = entry[2].pose.position
            assert [position.x, position.y, position.z] == M[:, 3].tolist()
            worst = max(worst, float(np.abs(transform_from_pose_msg(entry[2].pose)[:3, :3]
                                            - M[:, :3]).max()))
        assert worst < 1e-6  # KITTI rotations are orthonormal to ~1e-7
        P0 = np.loadtxt(seq / 'calib.txt')[0].reshape(3, 4)
        camera = camera_from_camera_info(got[topics.CAMERA_INFO][0][2])
        np.testing.assert_array_equal(camera.K, P0[:, :3])
        assert [e[1] for e in got[topics.IMAGE]] == [i * 10**8 for i in range(51)]

    def test_camvid_val(self, tmp_path):
        root = conftest.shared_dataset('camvid_segnet_val_40')
        summary = convert_image_folder(root / 'images', tmp_path / 'bag', root / 'labels')
        assert summary['frames'] == 40 and summary['messages'][topics.GT_LABELS] == 40
        got = _read(tmp_path / 'bag')
        first = min((root / 'labels').glob('*.png'))
        array, _ = _image(got[topics.GT_LABELS][0])
        np.testing.assert_array_equal(array, cv2.imread(str(first), cv2.IMREAD_UNCHANGED))
        assert array.max() <= 11
