# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the per-image cache the NCC matcher uses for keyframes matched again."""

import gc

import numpy as np
import pytest

from relperception.data.synthetic import SyntheticScene
from relperception.matching.image_cache import frozen_copy, ImageCache, is_cacheable
from relperception.matching.ncc import NCCMatcher


def _gray_pair():
    scene = SyntheticScene(seed=4, width=320, height=240)
    path = scene.trajectory(2)
    images = [scene.render(T)[0].mean(axis=2).astype(np.uint8) for T in path]
    return images[0], images[1]


class TestImageCache:
    def test_only_read_only_owned_arrays_are_cached(self):
        cache = ImageCache()
        calls = []
        image = np.zeros((4, 4), np.uint8)
        for _ in range(2):
            cache.get(image, 'k', lambda: calls.append(1))
        assert len(calls) == 2   # writable: computed every time
        frozen = frozen_copy(image)
        assert is_cacheable(frozen) and frozen_copy(frozen) is frozen
        view = frozen[1:]
        assert not is_cacheable(view)   # a view does not own its data
        for _ in range(3):
            cache.get(frozen, 'k', lambda: calls.append(1) or 'value')
        assert len(calls) == 3 and cache.hits == 2
        assert cache.get(frozen, 'other key', lambda: 'other') == 'other'

    def test_identity_not_equality_and_eviction(self):
        cache = ImageCache(max_images=2)
        images = [frozen_copy(np.full((3, 3), i, np.uint8)) for i in range(3)]
        for image in images:
            cache.get(image, 'k', lambda image=image: int(image[0, 0]))
        # The oldest was evicted; an equal but distinct array is a different image.
        assert cache.get(images[0], 'k', lambda: 'again') == 'again'
        twin = frozen_copy(images[2].copy())
        assert cache.get(twin, 'k', lambda: 'twin') == 'twin'
        # A freed image's id may be reused by a new array: the weak reference tells them apart.
        first = frozen_copy(np.zeros((2, 2), np.uint8))
        cache.get(first, 'k', lambda: 'first')
        del first
        gc.collect()
        second = frozen_copy(np.ones((2, 2), np.uint8))
        assert cache.get(second, 'k', lambda: 'second') == 'second'

    def test_bad_size(self):
        with pytest.raises(ValueError, match='max_images'):
            ImageCache(max_images=0)


class TestNCCReuse:
    def test_same_matches_with_and_without_the_cache(self):
        image0, image1 = _gray_pair()
        matcher = NCCMatcher()
        plain = matcher.match(image0, image1)
        frozen0, frozen1 = frozen_copy(image0), frozen_copy(image1)
        first = matcher.match(frozen0, frozen1)
        hits = matcher.cache.hits
        second = matcher.match(frozen0, frozen1)
        assert matcher.cache.hits == hits + 3   # keypoints and both pyramids reused
        reverse = matcher.match(frozen1, frozen0)   # pyramids reused the other way round
        assert len(plain) > 50 and len(reverse) > 50
        for other in (first, second):
            np.testing.assert_array_equal(other.keypoints0, plain.keypoints0)
            np.testing.assert_array_equal(other.keypoints1, plain.keypoints1)
        # The cached keypoints cannot be changed through a result.
        assert not second.keypoints0.flags.writeable or \
            not np.shares_memory(second.keypoints0, matcher.match(frozen0, frozen1).keypoints0)
