# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of relperception.core_types.check_intrinsics and of its callers.

The one plausibility check of a camera matrix: ``CameraInfo`` (nodes, ``eval``), ``convert
--intrinsics`` and the K of ``eval-pairs`` use it, each refusing or warning as it does.
"""

import re
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from relperception.cli.main import main
from relperception.core_types import check_intrinsics
from relperception.data.messages import camera_from_camera_info
from relperception.data.pairs import ImagePair


def _K(fx, fy, cx, cy, skew=0.0):
    return np.array([[fx, skew, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])


def _camera_info(K, width, height):
    return SimpleNamespace(width=width, height=height, k=np.ravel(K), d=np.zeros(5),
                           p=np.zeros(12), distortion_model='plumb_bob', binning_x=0,
                           binning_y=0, roi=None)


#: Camera matrices no calibration of a 640x480 image gives, with a word of each message.
IMPOSSIBLE = {
    'principal point outside': (_K(500, 500, 900, 240), 'outside the 640x480 image'),
    'focal length in metres': (_K(0.004, 0.004, 320, 240), 'is it in pixels?'),
    'fx / fy = 10': (_K(500, 50, 320, 240), 'fx / fy = 10'),
    'skew': (_K(500, 500, 320, 240, skew=1e4), 'skew of 10000 px'),
}


class TestOneCheck:

    @pytest.mark.parametrize('name', IMPOSSIBLE)
    def test_impossible_intrinsics_are_named(self, name):
        K, words = IMPOSSIBLE[name]
        problems = check_intrinsics(K, 640, 480)
        assert problems and all(p.impossible for p in problems)
        assert words in problems[0].message and '\n' not in problems[0].message

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match='fx, fy > 0'):
            check_intrinsics(_K(0, 500, 320, 240), 640, 480)
        with pytest.raises(ValueError, match='image size'):
            check_intrinsics(_K(500, 500, 320, 240), 0, 480)

    @pytest.mark.parametrize('name', IMPOSSIBLE)
    def test_every_caller_applies_every_rule(self, name, tmp_path, caplog):
        # before, convert --intrinsics and the K of eval-pairs looked at the principal point
        # alone: fx / fy = 10, a focal length in metres or a skew passed them silently
        K, words = IMPOSSIBLE[name]
        with pytest.raises(ValueError, match=r'CameraInfo K .*' + re.escape(words)):
            camera_from_camera_info(_camera_info(K, 640, 480))
        image = np.zeros((480, 640), np.uint8)
        with pytest.raises(ValueError, match=r'ImagePair.K0 .*' + re.escape(words)):
            ImagePair(image, image, K, _K(500, 500, 319.5, 239.5), np.eye(4))
        src = tmp_path / 'images'
        src.mkdir()
        cv2.imwrite(str(src / 'f1.png'), np.full((480, 640, 3), 60, np.uint8))
        fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
        caplog.clear()
        with caplog.at_level('WARNING'):
            code = main(['convert', 'images', str(src), '-o', str(tmp_path / 'bag'),
                         '--intrinsics', *(repr(float(v)) for v in (fx, fy, cx, cy))])
        if name == 'skew':   # --intrinsics has no skew to give
            assert code == 0 and '--intrinsics' not in caplog.text
            return
        assert code == 0   # written as asked, with the warning
        assert '--intrinsics ' in caplog.text and words in caplog.text
        assert 'eval, replay and the nodes refuse such a CameraInfo' in caplog.text


#: Calibrations of real cameras: (fx, fy, cx, cy, width, height). None may be flagged.
REAL_CAMERAS = {
    # KITTI odometry calib.txt P0 (sequences 04-12 and 00-02), the data under
    # /work/shared/data; KITTI raw 2011_09_26 P_rect_02 (colour, rectified)
    'kitti 06': (707.0912, 707.0912, 601.8873, 183.1104, 1226, 370),
    'kitti 01': (718.856, 718.856, 607.1928, 185.2157, 1241, 376),
    'kitti raw cam2': (721.5377, 721.5377, 609.5593, 172.854, 1242, 375),
    # TUM RGB-D file-format page, RGB cameras of freiburg1..3 (converters.tum defaults)
    'tum fr1': (517.3, 516.5, 318.6, 255.3, 640, 480),
    'tum fr2': (520.9, 521.0, 325.1, 249.7, 640, 480),
    'tum fr3': (535.4, 539.2, 320.1, 247.6, 640, 480),
    # NYU Depth v2 toolbox camera_params.m, RGB and depth cameras; PrimeSense default (SUN)
    'nyu rgb': (518.8579, 519.4696, 325.5824, 253.7362, 640, 480),
    'nyu depth': (582.6245, 582.6910, 313.0448, 238.4439, 640, 480),
    'primesense': (525.0, 525.0, 319.5, 239.5, 640, 480),
    # EuRoC MAV cam0 sensor.yaml
    'euroc cam0': (458.654, 457.296, 367.215, 248.375, 752, 480),
    # typical camera_info of an Intel RealSense D435 colour stream (per-unit calibrations
    # differ by a few pixels) at 640x480 and 1280x720, and of its 848x480 depth stream
    'd435 640x480': (615.9, 616.0, 326.3, 240.1, 640, 480),
    'd435 1280x720': (923.8, 924.0, 649.4, 360.2, 1280, 720),
    'd435 depth 848x480': (421.5, 421.5, 424.3, 238.9, 848, 480),
    # typical ZED 2 camera_info at HD720 (left, rectified)
    'zed2 hd720': (527.2, 527.2, 651.3, 359.7, 1280, 720),
    # a fisheye (equidistant) camera at 1280x800 (global-shutter OV9281 modules), and the
    # Intel T265 fisheye at 848x800
    'fisheye 1280x800': (400.2, 400.5, 628.7, 412.3, 1280, 800),
    't265 fisheye': (285.7, 286.0, 420.7, 403.3, 848, 800),
}


class TestAnotherImageSize:

    @pytest.mark.parametrize('name', REAL_CAMERAS)
    def test_real_calibrations_pass(self, name):
        fx, fy, cx, cy, width, height = REAL_CAMERAS[name]
        assert check_intrinsics(_K(fx, fy, cx, cy), width, height) == []

    def test_the_cameras_of_this_package_pass(self):
        from relperception.data.converters.images import guess_camera
        from relperception.data.converters.tum import TUM_INTRINSICS
        from relperception.data.synthetic import SyntheticScene
        for fx, fy, cx, cy, _ in TUM_INTRINSICS.values():
            assert check_intrinsics(_K(fx, fy, cx, cy), 640, 480) == []
        for width, height in ((640, 480), (64, 48), (1226, 370), (480, 360)):
            for camera in (guess_camera(width, height),
                           SyntheticScene(width=width, height=height).camera):
                assert check_intrinsics(camera.K, width, height) == []

    @pytest.mark.parametrize('name, size, named', [
        # full-size K on a half-size copy: the principal point still lies inside
        ('kitti 06', (613, 185), 'intrinsics for 1226x370 used on 613x185 images? Scale fx, '
                                 'fy, cx, cy by 0.5'),
        ('kitti 01', (620, 188), 'intrinsics for 1240x376 used on 620x188 images?'),
        ('primesense', (320, 240), 'intrinsics for 640x480 used on 320x240 images?'),
        # half-size K on a double-size copy
        ('tum fr3', (1280, 960), 'intrinsics for 640x480 used on 1280x960 images? Scale fx, '
                                 'fy, cx, cy by 2'),
        ('euroc cam0', (1504, 960), 'intrinsics for 752x480 used on 1504x960 images?'),
    ])
    def test_intrinsics_of_another_size_are_suspect(self, name, size, named):
        fx, fy, cx, cy, _, _ = REAL_CAMERAS[name]
        problems = check_intrinsics(_K(fx, fy, cx, cy), *size)
        assert len(problems) == 1 and not problems[0].impossible
        assert named in problems[0].message

    def test_an_off_centre_point_of_no_factor_names_the_size_it_fits(self):
        (problem,) = check_intrinsics(_K(500, 500, 100, 240), 640, 480)
        assert 'about 201x481' in problem.message and not problem.impossible

    def test_camera_info_is_used_and_the_warning_returned(self):
        fx, fy, cx, cy, _, _ = REAL_CAMERAS['kitti 06']
        msg = _camera_info(_K(fx, fy, cx, cy), 613, 185)
        warnings = []
        camera = camera_from_camera_info(msg, warnings=warnings)
        assert camera.cx == cx and len(warnings) == 1
        assert warnings[0].startswith('CameraInfo K puts the principal point at (601.887, '
                                      '183.11) px, 48% of the width')
        assert camera_from_camera_info(msg).cx == cx   # no list: not reported

    def test_a_region_of_interest_off_the_centre_is_no_mistake(self):
        # REP 104: the check is of the full sensor, before the crop moves the principal point
        msg = _camera_info(_K(525.0, 525.0, 319.5, 239.5), 640, 480)
        msg.roi = SimpleNamespace(x_offset=0, y_offset=0, width=200, height=150)
        warnings = []
        camera = camera_from_camera_info(msg, warnings=warnings)
        assert warnings == [] and (camera.width, camera.height, camera.cx) == (200, 150, 319.5)


def test_eval_names_a_camera_info_of_another_size_once(tmp_path, caplog):
    from relperception.data.synthetic import iter_sequence
    camera, frames = iter_sequence(4, seed=1, width=160, height=120)
    src = tmp_path / 'small'
    src.mkdir()
    for i, frame in enumerate(frames):
        cv2.imwrite(str(src / f'{i:06d}.png'), frame.rgb[:, :, ::-1])
    big = camera.scaled(2.0)   # the K of the 320x240 originals
    with caplog.at_level('WARNING'):
        assert main(['convert', 'images', str(src), '-o', str(tmp_path / 'bag'), '--fps', '10',
                     '--intrinsics', *(repr(v) for v in (big.fx, big.fy, big.cx, big.cy))]) == 0
    assert f'{src}: --intrinsics puts the principal point' in caplog.text
    assert 'intrinsics for 320x240 used on 160x120 images?' in caplog.text
    assert main(['eval', str(tmp_path / 'bag'), '-o', str(tmp_path / 'run')]) == 0
    import json
    errors = json.loads((tmp_path / 'run' / 'summary.json').read_text())['errors']
    suspect = [e for e in errors if 'suspect CameraInfo' in e]
    assert len(suspect) == 1, errors
    assert 'intrinsics for 320x240 used on 160x120 images?' in suspect[0]


def test_eval_pairs_warns_once_per_suspect_k(tmp_path, caplog):
    from relperception.data.pairs import load_pairs_npz, save_pairs_npz
    fx, fy, cx, cy, _, _ = REAL_CAMERAS['kitti 06']
    image = np.random.default_rng(0).integers(0, 255, (185, 613), dtype=np.uint8)
    pairs = [ImagePair(image, image, _K(fx, fy, cx, cy), _K(fx, fy, cx, cy), np.eye(4),
                       name=f'p{i}') for i in range(3)]
    path = save_pairs_npz(tmp_path / 'half.npz', pairs)
    assert len(load_pairs_npz(path)) == 3
    with caplog.at_level('WARNING'):
        assert main(['eval-pairs', '--pairs', str(path), '--matchers', 'ncc', '-o',
                     str(tmp_path / 'out')]) == 0
    lines = [r.getMessage() for r in caplog.records if 'principal point' in r.getMessage()]
    assert len(lines) == 2, lines   # K0 and K1, each once for the three pairs
    assert all('3 of 3 pairs' in line and 'intrinsics for 1226x370 used on 613x185 images?'
               in line for line in lines)
