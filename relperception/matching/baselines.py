# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Classical peers of the NCC matcher, for benchmarks and side-by-side evaluation.

* ``KLTMatcher``: grid-spread Shi-Tomasi corners tracked with pyramidal Lucas-Kanade
  (``cv2.calcOpticalFlowPyrLK``), forward-backward checked: what a robotics engineer
  would pick instead of NCC for frame-to-frame odometry.
* ``ORBMatcher``: ORB features, brute-force Hamming matching with Lowe's ratio test.

Both follow the ``Matcher`` protocol and return ``Matches``.
"""

from __future__ import annotations

from typing import Callable, Optional

import cv2
import numpy as np

from relperception.config import SPECS
from relperception.core_types import Matches
from relperception.matching.base import check_gray_pair
from relperception.matching.keypoints import detect_keypoints


def _merge_conf(default_conf: dict, conf: Optional[dict], name: str) -> dict:
    """Return ``default_conf`` updated by ``conf``, each value checked against the schema."""
    conf = dict(conf or {})
    unknown = set(conf) - set(default_conf)
    if unknown:
        raise ValueError(f'unknown {name} configuration keys {sorted(unknown)}; '
                         f'known: {sorted(default_conf)}')
    # the bounds of the configuration schema (klt.window_size 0 was a cv2.error, a NaN
    # forward-backward limit silently matched nothing, orb.ratio_test 5 was taken)
    return {**default_conf,
            **{key: SPECS[f'{name}.{key}'].validate(value) for key, value in conf.items()}}


class KLTMatcher:
    """Pyramidal Lucas-Kanade tracking of grid-spread Shi-Tomasi corners."""

    default_conf = {
        'max_keypoints': 1000,
        'cell_size_px': 32,
        'min_corner_quality': 0.001,
        'window_size': 21,
        'pyramid_levels': 4,
        'max_forward_backward_px': 1.0,
    }

    def __init__(self, conf: Optional[dict] = None):
        self.conf = _merge_conf(self.default_conf, conf, 'klt')

    def match(self, image0: np.ndarray, image1: np.ndarray,
              predict: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> Matches:
        """Track corners of ``image0`` (H, W) uint8 into ``image1``; see ``Matcher.match``."""
        check_gray_pair(image0, image1)
        c = self.conf
        keypoints0 = detect_keypoints(image0, c['max_keypoints'], c['cell_size_px'],
                                      c['min_corner_quality'], border_px=c['window_size'] // 2)
        if len(keypoints0) == 0:
            return Matches.empty()
        p0 = keypoints0.reshape(-1, 1, 2).astype(np.float32)
        flags = 0
        p1_init = None
        if predict is not None:
            predicted = np.asarray(predict(keypoints0), np.float32)
            if predicted.shape != keypoints0.shape:
                raise ValueError(f'predict must return ({len(keypoints0)}, 2) positions, one per '
                                 f'keypoint, got shape {predicted.shape}')
            p1_init = np.where(np.isfinite(predicted), predicted, keypoints0).reshape(-1, 1, 2)
            flags = cv2.OPTFLOW_USE_INITIAL_FLOW
        lk = {'winSize': (c['window_size'], c['window_size']), 'maxLevel': c['pyramid_levels'] - 1,
              'criteria': (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 30, 0.01)}
        p1, status1, _ = cv2.calcOpticalFlowPyrLK(image0, image1, p0, p1_init, flags=flags, **lk)
        p0_back, status0, _ = cv2.calcOpticalFlowPyrLK(image1, image0, p1, p0.copy(),
                                                       flags=cv2.OPTFLOW_USE_INITIAL_FLOW, **lk)
        fb_error = np.linalg.norm((p0_back - p0).reshape(-1, 2), axis=1)
        h, w = image1.shape
        p1 = p1.reshape(-1, 2)
        inside = (p1[:, 0] >= 0) & (p1[:, 0] <= w - 1) & (p1[:, 1] >= 0) & (p1[:, 1] <= h - 1)
        ok = (status1.ravel() == 1) & (status0.ravel() == 1) & inside & \
            (fb_error <= c['max_forward_backward_px'])
        confidence = np.clip(1.0 - fb_error / max(c['max_forward_backward_px'], 1e-6), 0.0, 1.0)
        return Matches(keypoints0[ok], p1[ok], confidence[ok])


class ORBMatcher:
    """ORB keypoints and descriptors, Hamming brute force with Lowe's ratio test."""

    default_conf = {
        'max_keypoints': 2000,
        'ratio_test': 0.8,
        'fast_threshold': 10,
    }

    def __init__(self, conf: Optional[dict] = None):
        self.conf = _merge_conf(self.default_conf, conf, 'orb')
        self._orb = cv2.ORB_create(nfeatures=self.conf['max_keypoints'],
                                   fastThreshold=self.conf['fast_threshold'])
        self._bf = cv2.BFMatcher(cv2.NORM_HAMMING)

    def match(self, image0: np.ndarray, image1: np.ndarray,
              predict: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> Matches:
        """Match ORB features of ``image0`` (H0, W0) and ``image1`` (H1, W1) uint8.

        The images may differ in size (pair lists mix portrait and landscape images);
        ``predict`` is unused.
        """
        check_gray_pair(image0, image1, same_size=False)
        kp0, des0 = self._orb.detectAndCompute(image0, None)
        kp1, des1 = self._orb.detectAndCompute(image1, None)
        if des0 is None or des1 is None or len(kp0) < 2 or len(kp1) < 2:
            return Matches.empty()
        pairs = self._bf.knnMatch(des0, des1, k=2)
        good = [p[0] for p in pairs
                if len(p) == 2 and p[0].distance < self.conf['ratio_test'] * p[1].distance]
        if not good:
            return Matches.empty()
        points0 = np.float32([kp0[m.queryIdx].pt for m in good])
        points1 = np.float32([kp1[m.trainIdx].pt for m in good])
        confidence = np.float32([1.0 - m.distance / 256.0 for m in good])
        return Matches(points0, points1, confidence)
