# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the SuperGlue / LoFTR ``pairs_with_gt.txt`` reader and ``eval-pairs --pairs F.txt``."""

import json
import re

import cv2
import numpy as np
import pytest
from relperception.cli.main import main
from relperception.data.pairs import (load_pairs, load_pairs_txt, save_pairs_npz,
                                      synthetic_pairs)
from relperception.data.synthetic import SyntheticScene

SIZE = (160, 120)
FRAMES = 40


def _numbers(array) -> str:
    return ' '.join(format(float(v), '.17g') for v in np.ravel(array))


def _line(name0, name1, rot0, rot1, K0, K1, T) -> str:
    return f'{name0} {name1} {rot0} {rot1} {_numbers(K0)} {_numbers(K1)} {_numbers(T)}'


@pytest.fixture(scope='module')
def rendered(tmp_path_factory):
    """One synthetic pair (gap 5) written as PNGs, with both depth maps (metres)."""
    pair = synthetic_pairs(1, gaps=(5,), width=SIZE[0], height=SIZE[1],
                           sequence_frames=FRAMES)[0]
    start = int(pair.name.split(':')[1].split('-')[0])
    scene = SyntheticScene(seed=0, width=SIZE[0], height=SIZE[1])
    poses = scene.trajectory(FRAMES)
    depth0 = scene.render(poses[start])[1]
    depth1 = scene.render(poses[start + 5])[1]
    folder = tmp_path_factory.mktemp('pair_list')
    (folder / 'images').mkdir()
    cv2.imwrite(str(folder / 'images' / 'a.png'), pair.image0)
    cv2.imwrite(str(folder / 'images' / 'b.png'), pair.image1)
    return folder, pair, depth0, depth1


@pytest.fixture(scope='module')
def pair_list(rendered):
    """Write a list with a comment, a blank line, the pair unrotated and with rot 1 / 2."""
    folder, pair, _, _ = rendered
    path = folder / 'pairs_with_gt.txt'
    path.write_text('# name0 name1 rot0 rot1 K0 K1 T_0to1\n\n'
                    + _line('images/a.png', 'images/b.png', 0, 0, pair.K0, pair.K1, pair.T_0to1)
                    + '\n   \n'
                    + _line('images/a.png', 'images/b.png', 1, 2, pair.K0, pair.K1, pair.T_0to1)
                    + '\n')
    return path


def _consistency(image0, image1, depth0, K0, K1, T_0to1):
    """Project a grid of image-0 pixels into image 1 with ``depth0`` and the ground truth.

    Returns (N, 2) int source pixels, (N, 2) float projected pixels in image 1 and (N,) their
    depths in camera 1 (metres), for the grid pixels with finite depth.
    """
    ys, xs = np.mgrid[3:image0.shape[0] - 3:4, 3:image0.shape[1] - 3:4]
    xs, ys = xs.ravel(), ys.ravel()
    z = depth0[ys, xs].astype(np.float64)
    keep = np.isfinite(z)
    xs, ys, z = xs[keep], ys[keep], z[keep]
    P0 = np.c_[(xs - K0[0, 2]) / K0[0, 0] * z, (ys - K0[1, 2]) / K0[1, 1] * z, z]
    P1 = P0 @ T_0to1[:3, :3].T + T_0to1[:3, 3]
    u = K1[0, 0] * P1[:, 0] / P1[:, 2] + K1[0, 1] * P1[:, 1] / P1[:, 2] + K1[0, 2]
    v = K1[1, 1] * P1[:, 1] / P1[:, 2] + K1[1, 2]
    return np.c_[xs, ys], np.c_[u, v], P1[:, 2]


def _agreement(image0, image1, depth0, depth1, K0, K1, T_0to1):
    """Return (fraction of points whose depth in image 1 agrees within 2 %, median |grey diff|).

    A point of image 0 is projected into image 1 with ``depth0``, K0, T_0to1 and K1; it agrees
    when ``depth1`` at the nearest pixel matches its predicted depth.
    """
    src, dst, z1 = _consistency(image0, image1, depth0, K0, K1, T_0to1)
    h, w = image1.shape
    inside = (z1 > 0) & (dst[:, 0] >= 1) & (dst[:, 0] <= w - 2) & (dst[:, 1] >= 1) \
        & (dst[:, 1] <= h - 2)
    assert inside.sum() > 200
    src, dst, z1 = src[inside], dst[inside], z1[inside]
    px = np.round(dst).astype(int)
    measured = depth1[px[:, 1], px[:, 0]].astype(np.float64)
    agree = np.abs(measured - z1) < 0.02 * z1
    sampled = cv2.remap(image1.astype(np.float32), dst[:, :1].astype(np.float32),
                        dst[:, 1:].astype(np.float32), cv2.INTER_LINEAR)[:, 0]
    grey = np.abs(sampled - image0[src[:, 1], src[:, 0]].astype(np.float32))
    return float(np.mean(agree)), float(np.median(grey))


class TestLoadPairsTxt:
    def test_unrotated_pair_equals_original(self, pair_list, rendered):
        _, pair, _, _ = rendered
        pairs = load_pairs_txt(pair_list)
        assert len(pairs) == 2
        loaded = pairs[0]
        np.testing.assert_array_equal(loaded.image0, pair.image0)
        np.testing.assert_array_equal(loaded.image1, pair.image1)
        np.testing.assert_array_equal(loaded.K0, pair.K0)
        np.testing.assert_array_equal(loaded.K1, pair.K1)
        np.testing.assert_allclose(loaded.T_0to1, pair.T_0to1, atol=1e-12)
        assert loaded.name == 'images/a.png - images/b.png'
        assert loaded.source == str(pair_list) and loaded.gap is None
        assert len(load_pairs_txt(pair_list, max_pairs=1)) == 1

    def test_image_dir(self, rendered, tmp_path):
        folder, pair, _, _ = rendered
        path = tmp_path / 'elsewhere.txt'
        path.write_text(_line('a.png', 'b.png', 0, 0, pair.K0, pair.K1, pair.T_0to1) + '\n')
        with pytest.raises(ValueError, match='line 1.*a.png does not exist'):
            load_pairs_txt(path)
        loaded = load_pairs(path, image_dir=folder / 'images')[0]
        np.testing.assert_array_equal(loaded.image1, pair.image1)

    def test_rotated_pair_ground_truth_matches_the_rotated_images(self, pair_list, rendered):
        _, pair, depth0, depth1 = rendered
        original, rotated = load_pairs_txt(pair_list)
        # The images are turned as SuperGlue's read_image does: np.rot90(image, rot).
        np.testing.assert_array_equal(rotated.image0, np.rot90(pair.image0, 1))
        np.testing.assert_array_equal(rotated.image1, np.rot90(pair.image1, 2))
        assert rotated.image0.shape == SIZE and rotated.image1.shape == SIZE[::-1]
        depth0r, depth1r = np.rot90(depth0, 1), np.rot90(depth1, 2)
        # Baseline: the unrotated ground truth on the unrotated images.
        agree, grey = _agreement(original.image0, original.image1, depth0, depth1,
                                 original.K0, original.K1, original.T_0to1)
        assert agree > 0.9 and grey < 12
        # The rotated K0, K1, T_0to1 put 3-D points where the rotated images show them ...
        agree, grey = _agreement(rotated.image0, rotated.image1, depth0r, depth1r,
                                 rotated.K0, rotated.K1, rotated.T_0to1)
        assert agree > 0.9 and grey < 12
        # ... which the ground truth of the file, rotations ignored, does not (it can fail).
        agree_wrong, grey_wrong = _agreement(rotated.image0, rotated.image1, depth0r, depth1r,
                                             original.K0, original.K1, original.T_0to1)
        assert agree_wrong < 0.5 and grey_wrong > 2 * grey
        # Camera 1 turned by 180 degrees: x and y flip, the principal point mirrors.
        w, h = SIZE
        np.testing.assert_allclose(rotated.K1, [[pair.K1[0, 0], 0, w - 1 - pair.K1[0, 2]],
                                                [0, pair.K1[1, 1], h - 1 - pair.K1[1, 2]],
                                                [0, 0, 1]])
        np.testing.assert_allclose(rotated.K0, [[pair.K0[1, 1], 0, pair.K0[1, 2]],
                                                [0, pair.K0[0, 0], w - 1 - pair.K0[0, 2]],
                                                [0, 0, 1]])

    def test_rotated_pair_epipolar_geometry(self, pair_list, rendered):
        """Exact correspondences of the rotated images satisfy the rotated ground truth."""
        from relperception.evaluation.pairs import symmetric_epipolar_distance

        _, pair, depth0, _ = rendered
        original, rotated = load_pairs_txt(pair_list)
        src, dst, _ = _consistency(original.image0, original.image1, depth0, original.K0,
                                   original.K1, original.T_0to1)
        w, h = SIZE
        # np.rot90 by 1 moves pixel (x, y) to (y, w - 1 - x); by 2 to (w - 1 - x, h - 1 - y).
        src_r = np.c_[src[:, 1], w - 1 - src[:, 0]].astype(np.float64)
        dst_r = np.c_[w - 1 - dst[:, 0], h - 1 - dst[:, 1]]
        assert rotated.image0[int(src_r[5, 1]), int(src_r[5, 0])] == \
            original.image0[src[5, 1], src[5, 0]]
        d = symmetric_epipolar_distance(src_r, dst_r, rotated.K0, rotated.K1, rotated.T_0to1)
        assert np.max(d) < 1e-9
        wrong = symmetric_epipolar_distance(src_r, dst_r, rotated.K0, rotated.K1,
                                            original.T_0to1)
        assert np.median(wrong) > 1e-4

    def test_rounded_rotation_is_snapped(self, rendered, tmp_path):
        folder, pair, _, _ = rendered
        T = np.round(pair.T_0to1, 5)   # 5 decimals, as in SuperGlue's assets
        path = folder / 'rounded.txt'
        path.write_text(_line('images/a.png', 'images/b.png', 0, 0, np.round(pair.K0, 3),
                              pair.K1, T) + '\n')
        loaded = load_pairs_txt(path)[0]
        R = loaded.T_0to1[:3, :3]
        np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)
        np.testing.assert_allclose(loaded.T_0to1, pair.T_0to1, atol=1e-4)


def _bad_lines(pair):
    K, T = pair.K0, pair.T_0to1
    good = _line('images/a.png', 'images/b.png', 0, 0, K, K, T)
    fields = good.split()

    def replace(index, value):
        changed = list(fields)
        changed[index] = value
        return ' '.join(changed)

    singular = K.copy()
    singular[0, 0] = 0.0
    bottom = K.copy()
    bottom[2, 2] = 2.0
    skewed = K.copy()
    skewed[0, 1] = 0.5
    scaled = T.copy()
    scaled[:3, :3] *= 1.01
    mirrored = T.copy()
    mirrored[:3, 0] *= -1
    last_row = T.copy()
    last_row[3, 0] = 0.1
    return {
        'too few fields': (' '.join(fields[:-1]), '37 fields, expected 38'),
        'too many fields': (good + ' 1', '39 fields, expected 38'),
        'names only': ('images/a.png images/b.png', '2 fields'),
        'not a number': (replace(6, 'abc'), r"field 7 \(K0\[0, 2\]\).*'abc'"),
        'nan': (replace(25, 'nan'), r'field 26 \(T_0to1\[0, 3\]\).*finite'),
        'rotation 4': (replace(2, '4'), r"rot0 must be an integer 0-3 .*, got '4'"),
        'rotation not int': (replace(3, '1.5'), 'rot1 must be an integer 0-3'),
        'missing image': (replace(1, 'images/nope.png'), 'image1 .*nope.png does not exist'),
        'unreadable image': (replace(0, 'broken.png'), '.*broken.png: could not decode'),
        'singular K': (_line('images/a.png', 'images/b.png', 0, 0, singular, K, T),
                       'K0 is singular or invalid'),
        'K bottom row': (_line('images/a.png', 'images/b.png', 0, 0, K, bottom, T),
                         r'K1 must be \[fx, s, cx, 0, fy, cy, 0, 0, 1\]'),
        'skew rotated': (_line('images/a.png', 'images/b.png', 1, 0, skewed, K, T),
                         'K0 has skew'),
        'scaled rotation': (_line('images/a.png', 'images/b.png', 0, 0, K, K, scaled),
                            'T_0to1 is not a rigid transform'),
        'reflection': (_line('images/a.png', 'images/b.png', 0, 0, K, K, mirrored),
                       'T_0to1 is not a rigid transform'),
        'last row': (_line('images/a.png', 'images/b.png', 0, 0, K, K, last_row),
                     'T_0to1 is not a rigid transform'),
    }


BAD_KINDS = ['too few fields', 'too many fields', 'names only', 'not a number', 'nan',
             'rotation 4', 'rotation not int', 'missing image', 'unreadable image', 'singular K',
             'K bottom row', 'skew rotated', 'scaled rotation', 'reflection', 'last row']


class TestBadPairLists:
    @pytest.mark.parametrize('kind', BAD_KINDS)
    def test_bad_line_names_file_and_line(self, kind, rendered, tmp_path):
        folder, pair, _, _ = rendered
        (folder / 'broken.png').write_text('not a png')
        line, message = _bad_lines(pair)[kind]
        good = _line('images/a.png', 'images/b.png', 0, 0, pair.K0, pair.K1, pair.T_0to1)
        path = folder / f'bad_{kind.replace(" ", "_")}.txt'
        path.write_text(f'{good}\n# a comment\n{line}\n{good}\n')
        with pytest.raises(ValueError, match=re.escape(f'{path}, line 3: ') + message):
            load_pairs_txt(path)
        assert len(load_pairs_txt(path, max_pairs=1)) == 1   # the bad line is not reached

    def test_all_kinds_are_tested(self, rendered):
        assert sorted(_bad_lines(rendered[1])) == sorted(BAD_KINDS)

    def test_files_and_arguments(self, rendered, pair_list, tmp_path):
        folder, pair, _, _ = rendered
        with pytest.raises(FileNotFoundError):
            load_pairs_txt(tmp_path / 'missing.txt')
        with pytest.raises(FileNotFoundError, match='image folder'):
            load_pairs_txt(pair_list, image_dir=tmp_path / 'nope')
        with pytest.raises(ValueError, match='max_pairs'):
            load_pairs_txt(pair_list, max_pairs=0)
        binary = tmp_path / 'binary.txt'
        binary.write_bytes(b'\xff\xfe\x00pairs')
        with pytest.raises(ValueError, match='not a UTF-8 text pair list'):
            load_pairs_txt(binary)
        empty = tmp_path / 'empty.txt'
        empty.write_text('# nothing\n\n')
        assert load_pairs_txt(empty) == []

    def test_load_pairs_dispatches_on_suffix(self, rendered, pair_list, tmp_path):
        _, pair, _, _ = rendered
        npz = save_pairs_npz(tmp_path / 'p.npz', [pair])
        from_npz = load_pairs(npz, image_dir=tmp_path / 'ignored')
        assert len(from_npz) == 1 and from_npz[0].source == str(npz)
        assert len(load_pairs(pair_list)) == 2
        other = tmp_path / 'p.json'
        other.write_text('{}')
        with pytest.raises(ValueError, match=r"\.npz.*\.txt.*'\.json'"):
            load_pairs(other)


class TestEvalPairsTxt:
    def test_end_to_end(self, pair_list, tmp_path):
        out = tmp_path / 'out'
        rc = main(['eval-pairs', '--pairs', str(pair_list), '--matchers', 'ncc', '-o', str(out),
                   '--no-progress'])
        assert rc == 0
        results = json.loads((out / 'pairs_results.json').read_text())
        assert results['groups'] == {'pairs_with_gt': 2}
        rows = results['rows']['ncc | pairs_with_gt']
        assert len(rows) == 2 and rows[0]['num_matches'] > 20
        assert results['summaries']['ncc | pairs_with_gt']['num_pairs'] == 2

    def test_orb_matches_a_portrait_image_with_a_landscape_one(self, rendered, tmp_path):
        # rot0 1 turns image 0 to portrait; ORB used to refuse the pair ('differ in size')
        folder, pair, _, _ = rendered
        path = tmp_path / 'mixed.txt'
        path.write_text(_line('a.png', 'b.png', 1, 0, pair.K0, pair.K1, pair.T_0to1) + '\n')
        out = tmp_path / 'out'
        assert main(['eval-pairs', '--pairs', str(path), '--image-dir', str(folder / 'images'),
                     '--matchers', 'orb', '--drawings', '0', '-o', str(out),
                     '--no-progress']) == 0
        row, = json.loads((out / 'pairs_results.json').read_text())['rows']['orb | mixed']
        assert row.get('error') is None and row['num_matches'] > 20
        assert max(row['R_err_deg'], row['t_err_deg']) < 10

    def test_image_dir_and_bad_list(self, rendered, tmp_path, caplog):
        folder, pair, _, _ = rendered
        path = tmp_path / 'flat.txt'
        path.write_text(_line('a.png', 'b.png', 0, 2, pair.K0, pair.K1, pair.T_0to1) + '\n')
        out = tmp_path / 'out'
        rc = main(['eval-pairs', '--pairs', str(path), '--image-dir', str(folder / 'images'),
                   '--matchers', 'ncc', '-o', str(out), '--no-progress'])
        assert rc == 0
        results = json.loads((out / 'pairs_results.json').read_text())
        assert results['groups'] == {'flat': 1}
        assert len(results['rows']['ncc | flat']) == 1   # NCC cannot match across 180 degrees
        path.write_text('a.png b.png 0 0\n')
        rc = main(['eval-pairs', '--pairs', str(path), '--image-dir', str(folder / 'images'),
                   '--matchers', 'ncc', '-o', str(out), '--no-progress'])
        assert rc == 1
        assert f'{path}, line 1: 4 fields, expected 38' in caplog.text

    def test_help_mentions_txt_and_image_dir(self, capsys):
        with pytest.raises(SystemExit):
            main(['eval-pairs', '--help'])
        text = ' '.join(capsys.readouterr().out.split())
        assert '--image-dir DIR' in text and 'pairs_with_gt.txt' in text
