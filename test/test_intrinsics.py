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

