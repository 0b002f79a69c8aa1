# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Per-image work (keypoints, pyramids) kept for images that are matched again.

Visual odometry matches its keyframe against every new frame, and a frame that becomes a
keyframe is matched once more at insertion; detecting the keyframe's keypoints and building its
pyramid every time is wasted work. :class:`ImageCache` keeps such results for an image that is
recognised by identity: the same numpy array object, read-only and owning its data
(``image.flags.writeable`` False and ``image.flags.owndata`` True), so it cannot change behind
the cache's back. Any other array is computed afresh on every call. The cache holds weak
references to the images only, so a dropped image frees its entry's key; entries beyond
``max_images`` images are evicted, least recently used first.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Hashable
import weakref

import numpy as np


def is_cacheable(image: np.ndarray) -> bool:
    """Return whether ``image`` is a read-only numpy array that owns its data."""
    return (isinstance(image, np.ndarray) and not image.flags.writeable
            and image.flags.owndata)


def frozen_copy(image: np.ndarray) -> np.ndarray:
    """Return a read-only copy of ``image`` that owns its data (``image`` itself if it is one)."""
    if is_cacheable(image):
        return image
    copy = np.array(image, copy=True)
    copy.flags.writeable = False
    return copy


class ImageCache:
    """Results computed from an image, kept while the same read-only image comes back.

    Args:
        max_images: how many images keep their results (least recently used evicted).

    Thread-safe; a result computed twice by two threads at once is simply stored twice.
    """

    def __init__(self, max_images: int = 4):
        """Start empty."""
        if int(max_images) != max_images or max_images < 1:
            raise ValueError(f'max_images must be an integer >= 1, got {max_images!r}')
        self.max_images = int(max_images)
        self._entries: collections.OrderedDict[int, tuple[weakref.ref, dict]] = \
            collections.OrderedDict()
        self._lock = threading.Lock()
        #: results served from the cache.
        self.hits = 0

    def get(self, image: np.ndarray, key: Hashable, compute: Callable[[], Any]) -> Any:
        """Return ``compute()`` for ``image`` under ``key``, reusing a stored result.

        Args:
            image: the array the result is computed from.
            key: what is computed and with which settings (e.g. ``('keypoints', 1000)``).
            compute: a function of no arguments returning the result.
        """
        if not is_cacheable(image):
            return compute()
        with self._lock:
            entry = self._entries.get(id(image))
            if entry is not None and entry[0]() is image:
                self._entries.move_to_end(id(image))
                if key in entry[1]:
                    self.hits += 1
                    return entry[1][key]
        value = compute()
        with self._lock:
            entry = self._entries.get(id(image))
            if entry is None or entry[0]() is not image:
                entry = (weakref.ref(image), {})
                self._entries[id(image)] = entry
            self._entries.move_to_end(id(image))
            entry[1][key] = value
            while len(self._entries) > self.max_images:
                self._entries.popitem(last=False)
        return value
