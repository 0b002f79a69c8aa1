# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The shipped ``loftr_lite`` weights match held-out synthetic homography pairs.

The pairs are rendered here and never used in training: a view of the synthetic room of seed
31337 (the shipped weights saw the rooms of seeds 0-23 and 900-901 only) and a procedural
texture, each warped by a fixed homography. Bounds are set from the measured performance of the
shipped file (see ``relperception/weights/loftr_lite.md``) with margin. Errors are in pixels of
the 240 x 320 images, which is also the matcher's input size (no resize).
"""

import cv2
import numpy as np
import pytest
from relperception.data.synthetic import SyntheticScene
from relperception.matching.loftr.matcher import LoFTRMatcher
from relperception.models.weights import file_sha256, read_manifest, shipped_weights

SIZE = (240, 320)   # the loftr_lite input size: no resize inside the matcher
# Bounds with margin below the shipped file's measured figures (model card, "Test pairs"). The
# unrelated bound is issue 16's target for unrelated pairs.
MIN_MATCHES = {'room': 300, 'texture': 300}
MIN_PRECISION_3PX = {'room': 0.9, 'texture': 0.9}
MAX_UNRELATED_MATCHES = 20


def homography(angle_deg, scale, shift, corner_push, size=SIZE):
    """Return a (3, 3) H_1_0: rotation + zoom about the centre, a shift, a perspective push."""
    height, width = size
    corners = np.float32([[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]])
    centre = np.float32([(width - 1) / 2, (height - 1) / 2])
    a = np.deg2rad(angle_deg)
    rot = np.float32([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]) * scale
    moved = (corners - centre) @ rot.T + centre + np.float32(shift)
    moved += np.float32(corner_push)
    return cv2.getPerspectiveTransform(corners, moved.astype(np.float32)).astype(np.float64)


def procedural_texture(size=SIZE, seed=5):
    """Return a (H, W) uint8 multi-scale noise texture with a few shapes."""
    rng = np.random.default_rng(seed)
    height, width = size
    image = np.zeros(size, np.float32)
    for sigma, weight in ((12.0, 1.0), (4.0, 0.8), (1.5, 0.6)):
        noise = cv2.GaussianBlur(rng.random(size).astype(np.float32), (0, 0), sigma)
        image += weight * (noise - noise.mean()) / (noise.std() + 1e-6)
    image = (image - image.min()) / (image.max() - image.min()) * 200 + 20
    for _ in range(80):
        centre = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        colour = float(rng.integers(0, 256))
        if rng.random() < 0.5:
            cv2.circle(image, centre, int(rng.integers(3, 14)), colour, -1)
        else:
            size_xy = (int(rng.integers(4, 20)), int(rng.integers(4, 20)))
            cv2.rectangle(image, centre, (centre[0] + size_xy[0], centre[1] + size_xy[1]),
                          colour, -1)
    return np.clip(image, 0, 255).astype(np.uint8)


def make_pairs():
    """Return {name: (image0, image1, H_1_0)} of the held-out test pairs (uint8 grey)."""
    scene = SyntheticScene(seed=31337, width=SIZE[1], height=SIZE[0])
    rgb = scene.render(scene.trajectory(12, fps=1.0)[5])[0]
    room = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    texture = procedural_texture()
    pairs = {}
    for name, image, H in (
            ('room', room, homography(12.0, 0.9, (8, -6), [[6, 4], [-5, 6], [4, -6], [-6, -3]])),
            ('texture', texture, homography(-20.0, 1.15, (-10, 5),
                                            [[-6, 3], [5, -4], [-3, 6], [6, 5]]))):
        warped = cv2.warpPerspective(image, H, (SIZE[1], SIZE[0]), flags=cv2.INTER_LINEAR,
                                     borderMode=cv2.BORDER_CONSTANT, borderValue=0)
        pairs[name] = (image, warped, H)
    return pairs


def homography_errors(matches, H):
    """Return the (N,) pixel distances between ``H(keypoints0)`` and ``keypoints1``."""
    if len(matches) == 0:
        return np.zeros(0)
    warped = cv2.perspectiveTransform(matches.keypoints0.astype(np.float64)[None], H)[0]
    return np.linalg.norm(warped - matches.keypoints1, axis=1)


@pytest.fixture(scope='module')
def matcher():
    """Return the default ``LoFTRMatcher`` (empty weights = the shipped loftr_lite file)."""
    return LoFTRMatcher()


class TestShippedLoFTRWeights:
    """Shipped loftr_lite weights: manifest, loading and held-out matching quality."""

    def test_manifest_entry(self):
        entry = read_manifest()['loftr_lite']
        path = shipped_weights('loftr_lite')
        assert path.name == entry['file'] == 'loftr_lite.safetensors'
        assert file_sha256(path) == entry['sha256']
        assert path.stat().st_size < 20_000_000
        assert (path.parent / 'loftr_lite.md').is_file()

    @pytest.mark.parametrize('name', ['room', 'texture'])
    def test_homography_pair_precision(self, matcher, name):
        image0, image1, H = make_pairs()[name]
        matches = matcher.match(image0, image1)
        errors = homography_errors(matches, H)
        assert len(errors) >= MIN_MATCHES[name], f'{len(errors)} matches'
        precision = float(np.mean(errors <= 3.0))
        assert precision >= MIN_PRECISION_3PX[name], f'precision {precision:.3f}'
        assert np.all(matches.confidence > 0.2)

    def test_unrelated_images_give_few_matches(self, matcher):
        pairs = make_pairs()
        room, texture = pairs['room'][0], pairs['texture'][1]
        assert len(matcher.match(room, texture)) < MAX_UNRELATED_MATCHES


class TestBfloat16Compute:
    """``loftr.compute_dtype: bfloat16`` reproduces the float32 matches of the shipped weights."""

    @pytest.mark.parametrize('name', ['room', 'texture'])
    def test_reproduces_float32_matches(self, matcher, name):
        image0, image1, H = make_pairs()[name]
        reference = matcher.match(image0, image1)
        matches = LoFTRMatcher({'compute_dtype': 'bfloat16'}).match(image0, image1)
        assert matches.keypoints1.dtype == np.float32
        # same coarse cells (keypoints0 are cell centres) with keypoints1 within 1 px
        index = {tuple(k): i for i, k in enumerate(np.round(matches.keypoints0, 3).tolist())}
        reproduced = 0
        for k0, k1 in zip(np.round(reference.keypoints0, 3).tolist(), reference.keypoints1):
            i = index.get(tuple(k0))
            reproduced += i is not None and np.linalg.norm(matches.keypoints1[i] - k1) <= 1.0
        assert reproduced >= 0.9 * len(reference), f'{reproduced} of {len(reference)}'
        # bfloat16 really ran: sub-pixel positions move at bfloat16 rounding
        assert not np.array_equal(matches.keypoints1, reference.keypoints1)
        precision = float(np.mean(homography_errors(matches, H) <= 3.0))
        assert precision >= MIN_PRECISION_3PX[name], f'precision {precision:.3f}'

    def test_rejects_bad_values(self):
        with pytest.raises(ValueError, match='compute_dtype'):
            LoFTRMatcher({'compute_dtype': 'float16'})
        with pytest.raises(ValueError, match='backend torch only'):
            LoFTRMatcher({'compute_dtype': 'bfloat16', 'backend': 'onnxruntime',
                          'onnx_path': 'model.onnx'})
