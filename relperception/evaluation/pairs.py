# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Two-view evaluation of matchers with the LoFTR / SuperGlue relative-pose protocol.

For each :class:`~relperception.data.pairs.ImagePair` the matcher's ``match`` call is timed,
then:

1. **relative pose** (:func:`estimate_relative_pose`): keypoints are normalised with ``K``
   (``(x - c) / f``), the essential matrix is found by OpenCV RANSAC (``findEssentialMat``
   with the identity camera matrix) with threshold ``threshold_px / f_mean``, where
   ``f_mean = mean(fx0, fy1, fx0, fy1)`` exactly as LoFTR's ``estimate_pose`` computes it, and
   confidence 0.99999; every essential matrix returned is decomposed with ``recoverPose``
   and the one with the most inliers in front of both cameras wins. Fewer than 5 matches or no
   essential matrix: the pose is a failure (error ``inf``). So is a **degenerate** pose
   (:func:`degenerate_pose_reason`, a check LoFTR does not make): fewer than
   ``MIN_POSE_INLIERS`` inliers, or inliers without parallax (median rotation-compensated
   displacement below ``MIN_POSE_PARALLAX_PX``), whose translation direction is unobservable
   (e.g. matches stuck on a black image border).
2. **pose error** (:func:`relative_pose_error`): the angle of ``R_gt^T R`` and the angle
   between the estimated and true translation directions, the latter taken as
   ``min(e, 180 - e)`` (the sign of ``t`` is not observable from ``E``); the pair's pose error
   is the larger of the two, in degrees.
3. **AUC** (:func:`relpose_auc`): area under the cumulative pose-error curve up to 5, 10 and
   20 degrees, normalised by the threshold (SuperGlue's ``pose_auc``; failures count as
   ``inf`` errors and lower the recall).
4. **epipolar precision** (:func:`epipolar_precision`): fraction of matches whose symmetric
   epipolar distance, computed on normalised coordinates with the ground-truth essential
   matrix ``E = [t]_x R`` and squared as in LoFTR's ``symmetric_epipolar_distance``, is below
   ``threshold``. Default 5e-4, LoFTR's ScanNet value (indoor VGA images, the closest to the
   TUM / synthetic pairs here); LoFTR uses 1e-4 for MegaDepth. A pair without matches has
   precision 0 (LoFTR's convention).

AUC values are fractions in [0, 1] (papers print them in percent).
"""

from __future__ import annotations

import logging
import math
import re
import time
from typing import Any, Dict, List, Optional, Sequence

import cv2
import numpy as np
from relperception.data.pairs import ImagePair
from relperception.transforms import check_transform
from scipy.integrate import trapezoid   # numpy 1.x (a Jetson's) has no np.trapezoid

logger = logging.getLogger(__name__)

#: Pose-error thresholds of the AUC, degrees (LoFTR / SuperGlue).
AUC_THRESHOLDS = (5.0, 10.0, 20.0)
#: RANSAC inlier threshold in pixels (LoFTR's ``RANSAC_PIXEL_THR``).
RANSAC_THRESHOLD_PX = 0.5
#: RANSAC confidence (LoFTR / SuperGlue).
RANSAC_CONFIDENCE = 0.99999
#: Symmetric epipolar distance threshold on normalised coordinates (LoFTR, ScanNet).
EPIPOLAR_THRESHOLD = 5e-4
#: A pose from fewer essential-matrix inliers is degenerate (a failure).
MIN_POSE_INLIERS = 8
#: A pose whose inliers move less than this (median, pixels, rotation removed) is degenerate.
MIN_POSE_PARALLAX_PX = 0.5


def _check_points(kpts, name: str) -> np.ndarray:
    kpts = np.asarray(kpts, dtype=np.float64)
    if kpts.ndim != 2 or kpts.shape[1] != 2:
        raise ValueError(f'{name} must have shape (N, 2), got {kpts.shape}')
    if not np.isfinite(kpts).all():
        raise ValueError(f'{name} contains NaN or inf')
    return kpts


def _check_K(K, name: str) -> np.ndarray:
    K = np.array(K, dtype=np.float64, order='C', copy=True)
    if K.shape != (3, 3) or not np.isfinite(K).all() or K[0, 0] <= 0 or K[1, 1] <= 0:
        raise ValueError(f'{name} must be a finite (3, 3) camera matrix with fx, fy > 0')
    return K


def _check_pair_points(kpts0, kpts1):
    kpts0 = _check_points(kpts0, 'kpts0')
    kpts1 = _check_points(kpts1, 'kpts1')
    if len(kpts0) != len(kpts1):
        raise ValueError(f'kpts0 ({len(kpts0)}) and kpts1 ({len(kpts1)}) differ in length')
    return kpts0, kpts1


def _check_threshold_px(threshold_px) -> None:
    """Raise ValueError unless the RANSAC threshold ``threshold_px`` (pixels) is finite and > 0.

    An infinite threshold makes every match an inlier: the pose is a fit to all the matches,
    outliers included, and its AUC a silently wrong number.
    """
    if not (isinstance(threshold_px, (int, float, np.number)) and math.isfinite(threshold_px)
            and threshold_px > 0):
        raise ValueError(f'threshold_px (RANSAC, pixels) must be a finite number > 0, '
                         f'got {threshold_px!r}')


def normalize_points(kpts: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Return (N, 2) float64 normalised image coordinates ``((x - cx) / fx, (y - cy) / fy)``.

    Args:
        kpts: (N, 2) pixel coordinates.
        K: (3, 3) camera matrix (skew ignored, as in LoFTR / SuperGlue).
    """
    kpts = _check_points(kpts, 'kpts')
    K = _check_K(K, 'K')
    return (kpts - K[[0, 1], [2, 2]][None]) / K[[0, 1], [0, 1]][None]


def relpose_auc(errors_deg, thresholds: Sequence[float] = AUC_THRESHOLDS) -> List[float]:
    """Return the normalised area under the cumulative pose-error curve per threshold.

    SuperGlue's ``pose_auc``: errors are sorted, recall ``r_k = k / N`` is plotted against
    the k-th smallest error (with (0, 0) prepended), the curve is cut at ``t`` (recall held
    constant from the last error below ``t``) and integrated with the trapezoidal rule, then
    divided by ``t``.

    Args:
        errors_deg: (N,) pose errors in degrees, >= 0; ``inf`` for failed pairs.
        thresholds: error thresholds in degrees, > 0.

    Returns:
        one AUC in [0, 1] per threshold.

    Raises:
        ValueError: no errors, NaN or negative errors, or non-positive thresholds.
    """
    errors = np.asarray(errors_deg, dtype=np.float64).reshape(-1)
    if errors.size == 0:
        raise ValueError('relpose_auc needs at least one error')
    if np.isnan(errors).any() or (errors < 0).any():
        raise ValueError('errors must be >= 0 (inf for failures), without NaN')
    if not thresholds or any(not (t > 0 and math.isfinite(t)) for t in thresholds):
        raise ValueError(f'thresholds must be finite and > 0, got {thresholds}')
    errors = np.sort(errors)
    recall = (np.arange(len(errors)) + 1) / len(errors)
    errors = np.r_[0.0, errors]
    recall = np.r_[0.0, recall]
    aucs = []
    for t in thresholds:
        last = int(np.searchsorted(errors, t))
        r = np.r_[recall[:last], recall[last - 1]]
        e = np.r_[errors[:last], t]
        aucs.append(float(trapezoid(r, x=e) / t))
    return aucs


def estimate_relative_pose(kpts0, kpts1, K0, K1, threshold_px: float = RANSAC_THRESHOLD_PX,
                           conf: float = RANSAC_CONFIDENCE) -> Optional[Dict[str, np.ndarray]]:
    """Estimate the relative pose from matches with the essential matrix (LoFTR protocol).

    Args:
        kpts0: (N, 2) pixel coordinates in image 0.
        kpts1: (N, 2) corresponding pixel coordinates in image 1.
        K0: (3, 3) camera matrix of image 0.
        K1: (3, 3) camera matrix of image 1.
        threshold_px: RANSAC inlier threshold in pixels (divided by the mean focal length).
        conf: RANSAC confidence in (0, 1).

    Returns:
        None when fewer than 5 matches, no essential matrix was found or OpenCV failed on a
        degenerate sample, else a dict with
        ``R`` (3, 3) float64 rotation and ``t`` (3,) float64 unit translation direction of
        camera 0 -> camera 1 (``x1 = R x0 + t`` up to the scale of ``t``), and ``inliers``
        (N,) bool.

    Raises:
        ValueError: malformed points or camera matrices, bad threshold or confidence.
    """
    kpts0, kpts1 = _check_pair_points(kpts0, kpts1)
    K0, K1 = _check_K(K0, 'K0'), _check_K(K1, 'K1')
    _check_threshold_px(threshold_px)
    if not 0 < conf < 1:
        raise ValueError(f'need 0 < conf < 1, got {conf}')
    if len(kpts0) < 5:
        return None
    n0 = normalize_points(kpts0, K0)
    n1 = normalize_points(kpts1, K1)
    f_mean = float(np.mean([K0[0, 0], K1[1, 1], K0[0, 0], K1[1, 1]]))
    try:
        E, mask = cv2.findEssentialMat(n0, n1, np.eye(3), method=cv2.RANSAC, prob=conf,
                                       threshold=threshold_px / f_mean)
        if E is None or E.size == 0 or mask is None:
            return None
        best = None
        best_inliers = 0
        for E_i in np.split(E, len(E) // 3):
            count, R, t, _ = cv2.recoverPose(E_i, n0, n1, np.eye(3), 1e9,
                                             mask=mask.copy())[:4]
            if count > best_inliers:
                best_inliers = count
                best = {'R': R.astype(np.float64), 't': t[:, 0].astype(np.float64),
                        'inliers': mask.ravel() > 0}
    except cv2.error as error:
        # OpenCV 5.1's five-point solver asserts on degenerate samples (nearly identical
        # views); the pose is then not estimated, a failure like no essential matrix.
        logger.debug('essential matrix estimation failed: %s', error)
        return None
    return best


def relative_pose_error(T_0to1, R, t, ignore_gt_t_thr: float = 0.0) -> Dict[str, float]:
    """Return the angular errors of an estimated relative pose, degrees.

    Args:
        T_0to1: (4, 4) ground-truth transform camera 0 -> camera 1.
        R: (3, 3) estimated rotation.
        t: (3,) estimated translation (direction only is used).
        ignore_gt_t_thr: when the true translation is shorter than this (metres, pure
            rotation) the translation error is set to 0 (LoFTR's ``ignore_gt_t_thr``).

    Returns:
        dict ``R_err_deg``, ``t_err_deg`` (``min(e, 180 - e)``, the sign of ``t`` is
        ambiguous), and ``pose_err_deg`` = their maximum.

    Raises:
        ValueError: malformed inputs, an R that is not a rotation, or a zero estimated
            translation.
    """
    T = check_transform(T_0to1, 'T_0to1')
    R = np.asarray(R, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    finite = bool(np.isfinite(R).all() and np.isfinite(t).all())
    if R.shape != (3, 3) or t.shape != (3,) or not finite:
        raise ValueError(f'R must be finite (3, 3) and t (3,), got {R.shape} and {t.shape}')
    if not np.allclose(R @ R.T, np.eye(3), atol=1e-5) or np.linalg.det(R) < 0:
        raise ValueError('R must be a rotation matrix (orthonormal, det +1)')
    if not (np.isfinite(ignore_gt_t_thr) and ignore_gt_t_thr >= 0):
        raise ValueError(f'ignore_gt_t_thr must be finite and >= 0, got {ignore_gt_t_thr}')
    t_gt = T[:3, 3]
    if np.linalg.norm(t) == 0:
        raise ValueError('estimated translation t is zero')
    if np.linalg.norm(t_gt) <= ignore_gt_t_thr or np.linalg.norm(t_gt) == 0:
        t_err = 0.0
    else:
        cos = np.dot(t, t_gt) / (np.linalg.norm(t) * np.linalg.norm(t_gt))
        t_err = float(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))
        t_err = min(t_err, 180.0 - t_err)
    cos = (np.trace(R.T @ T[:3, :3]) - 1.0) / 2.0
    R_err = float(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))
    return {'R_err_deg': R_err, 't_err_deg': t_err, 'pose_err_deg': max(R_err, t_err)}


def _skew(v: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def essential_from_transform(T_0to1) -> np.ndarray:
    """Return the (3, 3) essential matrix ``[t]_x R`` of ``T_0to1`` (``x1^T E x0 = 0``)."""
    T = check_transform(T_0to1, 'T_0to1')
    return _skew(T[:3, 3]) @ T[:3, :3]


def symmetric_epipolar_distance(kpts0, kpts1, K0, K1, T_0to1) -> np.ndarray:
    """Return LoFTR's squared symmetric epipolar distance of each match (normalised units).

    ``d = (x1^T E x0)^2 * (1 / ((E x0)_1^2 + (E x0)_2^2) + 1 / ((E^T x1)_1^2 + (E^T x1)_2^2))``
    with ``x0``, ``x1`` homogeneous normalised coordinates and ``E = [t]_x R``.

    Args:
        kpts0: (N, 2) pixel coordinates in image 0.
        kpts1: (N, 2) pixel coordinates in image 1.
        K0: (3, 3) camera matrix of image 0.
        K1: (3, 3) camera matrix of image 1.
        T_0to1: (4, 4) ground-truth transform camera 0 -> camera 1.

    Returns:
        (N,) float64 distances; ``inf`` where an epipolar line is undefined (no translation).

    Raises:
        ValueError: malformed inputs.
    """
    kpts0, kpts1 = _check_pair_points(kpts0, kpts1)
    E = essential_from_transform(T_0to1)
    x0 = np.c_[normalize_points(kpts0, K0), np.ones(len(kpts0))]
    x1 = np.c_[normalize_points(kpts1, K1), np.ones(len(kpts1))]
    Ex0 = x0 @ E.T
    Etx1 = x1 @ E
    residual = np.sum(x1 * Ex0, axis=1)
    with np.errstate(divide='ignore', invalid='ignore'):
        d = residual ** 2 * (1.0 / (Ex0[:, 0] ** 2 + Ex0[:, 1] ** 2)
                             + 1.0 / (Etx1[:, 0] ** 2 + Etx1[:, 1] ** 2))
    return np.where(np.isnan(d), np.inf, d)


def epipolar_precision(kpts0, kpts1, K0, K1, T_0to1,
                       threshold: float = EPIPOLAR_THRESHOLD) -> float:
    """Return the fraction of matches with symmetric epipolar distance below ``threshold``.

    Args:
        kpts0: (N, 2) pixel coordinates in image 0.
        kpts1: (N, 2) pixel coordinates in image 1.
        K0: (3, 3) camera matrix of image 0.
        K1: (3, 3) camera matrix of image 1.
        T_0to1: (4, 4) ground-truth transform camera 0 -> camera 1.
        threshold: on :func:`symmetric_epipolar_distance` (normalised, squared units);
            5e-4 (default, LoFTR ScanNet) or 1e-4 (LoFTR MegaDepth).

    Returns:
        precision in [0, 1]; 0.0 when there are no matches (LoFTR's convention).

    Raises:
        ValueError: malformed inputs or ``threshold <= 0``.
    """
    if not threshold > 0:
        raise ValueError(f'threshold must be > 0, got {threshold}')
    d = symmetric_epipolar_distance(kpts0, kpts1, K0, K1, T_0to1)
    return float(np.mean(d < threshold)) if len(d) else 0.0


def _rotation_deg(R: np.ndarray) -> float:
    return float(np.degrees(np.arccos(np.clip((np.trace(R) - 1.0) / 2.0, -1.0, 1.0))))


def fundamental_inliers(kpts0, kpts1, threshold_px: float = 1.0) -> Optional[np.ndarray]:
    """Return which matches fit one fundamental matrix (MAGSAC++), for images without K.

    Args:
        kpts0: (N, 2) pixel coordinates in image 0.
        kpts1: (N, 2) corresponding pixel coordinates in image 1.
        threshold_px: inlier threshold, pixels (> 0).

    Returns:
        (N,) bool inlier mask, or None with fewer than 8 matches or no model found.

    Raises:
        ValueError: malformed points or threshold.
    """
    kpts0, kpts1 = _check_pair_points(kpts0, kpts1)
    if not threshold_px > 0:
        raise ValueError(f'threshold_px must be > 0, got {threshold_px}')
    if len(kpts0) < 8:
        return None
    F, mask = cv2.findFundamentalMat(kpts0, kpts1, cv2.USAC_MAGSAC, threshold_px, 0.999, 10000)
    if F is None or mask is None:
        return None
    return mask.ravel() > 0


def rotation_compensated_parallax_px(kpts0, kpts1, K0, K1, R) -> np.ndarray:
    """Return how far each match moves once the rotation ``R`` is removed, in pixels.

    Args:
        kpts0: (N, 2) pixel coordinates in image 0.
        kpts1: (N, 2) corresponding pixel coordinates in image 1.
        K0: (3, 3) camera matrix of image 0.
        K1: (3, 3) camera matrix of image 1.
        R: (3, 3) rotation camera 0 -> camera 1.

    Returns:
        (N,) float64: the distance in image 1 (pixels) between ``kpts1`` and ``kpts0``'s ray
        rotated by ``R`` (the displacement only a translation can explain); ``inf`` where the
        rotated ray points behind camera 1.

    Raises:
        ValueError: malformed inputs.
    """
    kpts0, kpts1 = _check_pair_points(kpts0, kpts1)
    K0, K1 = _check_K(K0, 'K0'), _check_K(K1, 'K1')
    R = np.asarray(R, dtype=np.float64)
    if R.shape != (3, 3) or not np.isfinite(R).all():
        raise ValueError(f'R must be a finite (3, 3) matrix, got shape {R.shape}')
    rays = np.c_[normalize_points(kpts0, K0), np.ones(len(kpts0))] @ R.T
    parallax = np.full(len(kpts0), np.inf)
    front = rays[:, 2] > 1e-9
    rotated = rays[front, :2] / rays[front, 2:] * np.diag(K1)[:2] + K1[:2, 2]
    parallax[front] = np.linalg.norm(kpts1[front] - rotated, axis=1)
    return parallax


def degenerate_pose_reason(kpts0, kpts1, K0, K1, pose: Dict[str, np.ndarray],
                           min_inliers: int = MIN_POSE_INLIERS,
                           min_parallax_px: float = MIN_POSE_PARALLAX_PX) -> Optional[str]:
    """Return why an estimated relative pose is degenerate, or None when it is usable.

    Degenerate: fewer than ``min_inliers`` inliers, or a median rotation-compensated
    displacement of the inliers (:func:`rotation_compensated_parallax_px`) below
    ``min_parallax_px``: without parallax the translation direction is not observable.

    Args:
        kpts0: (N, 2) pixel coordinates in image 0.
        kpts1: (N, 2) corresponding pixel coordinates in image 1.
        K0: (3, 3) camera matrix of image 0.
        K1: (3, 3) camera matrix of image 1.
        pose: :func:`estimate_relative_pose`'s result (``R``, ``inliers`` (N,) bool).
        min_inliers: fewest inliers of a usable pose.
        min_parallax_px: smallest median parallax of a usable pose, pixels.

    Raises:
        ValueError: malformed inputs.
    """
    inliers = np.asarray(pose['inliers'], dtype=bool).reshape(-1)
    if len(inliers) != len(np.asarray(kpts0).reshape(-1, 2)):
        raise ValueError(f'pose inliers ({len(inliers)}) and matches '
                         f'({len(np.asarray(kpts0).reshape(-1, 2))}) differ in length')
    count = int(np.count_nonzero(inliers))
    if count < min_inliers:
        return f'{count} inliers < {min_inliers}'
    kpts0 = np.asarray(kpts0, dtype=np.float64).reshape(-1, 2)[inliers]
    kpts1 = np.asarray(kpts1, dtype=np.float64).reshape(-1, 2)[inliers]
    parallax = rotation_compensated_parallax_px(kpts0, kpts1, K0, K1, pose['R'])
    parallax = float(np.median(parallax))
    if parallax < min_parallax_px:
        return (f'no parallax: median inlier displacement without rotation {parallax:.2f} px '
                f'< {min_parallax_px:g} px')
    return None


def evaluate_pair(matches, pair: ImagePair, threshold_px: float = RANSAC_THRESHOLD_PX,
                  conf: float = RANSAC_CONFIDENCE,
                  epipolar_threshold: float = EPIPOLAR_THRESHOLD) -> Dict[str, Any]:
    """Score the matches of one pair: pose errors, inliers and epipolar precision.

    Args:
        matches: ``Matches`` (or anything with ``keypoints0`` / ``keypoints1`` (N, 2) pixels).
        pair: the pair with its ground truth.
        threshold_px: RANSAC threshold, pixels.
        conf: RANSAC confidence.
        epipolar_threshold: see :func:`epipolar_precision`.

    Returns:
        dict ``num_matches``, ``num_inliers``, ``pose_ok``, ``R_err_deg``, ``t_err_deg``,
        ``pose_err_deg`` (``inf`` when no pose was found or it is degenerate),
        ``pose_degenerate`` (None, or why the pose is degenerate, see
        :func:`degenerate_pose_reason`), ``epi_precision``.
    """
    k0 = np.asarray(matches.keypoints0, dtype=np.float64).reshape(-1, 2)
    k1 = np.asarray(matches.keypoints1, dtype=np.float64).reshape(-1, 2)
    row: Dict[str, Any] = {'num_matches': int(len(k0)), 'pose_degenerate': None}
    row['epi_precision'] = epipolar_precision(k0, k1, pair.K0, pair.K1, pair.T_0to1,
                                              epipolar_threshold)
    pose = estimate_relative_pose(k0, k1, pair.K0, pair.K1, threshold_px, conf)
    failed = {'pose_ok': False, 'R_err_deg': math.inf, 't_err_deg': math.inf,
              'pose_err_deg': math.inf}
    if pose is None:
        row.update(num_inliers=0, **failed)
        return row
    row['num_inliers'] = int(pose['inliers'].sum())
    row['pose_degenerate'] = degenerate_pose_reason(k0, k1, pair.K0, pair.K1, pose)
    if row['pose_degenerate'] is not None:
        row.update(failed)
    else:
        row.update(pose_ok=True, **relative_pose_error(pair.T_0to1, pose['R'], pose['t']))
    return row


def evaluate_pairs(matcher, pairs: Sequence[ImagePair], threshold_px: float = RANSAC_THRESHOLD_PX,
                   conf: float = RANSAC_CONFIDENCE,
                   epipolar_threshold: float = EPIPOLAR_THRESHOLD,
                   auc_thresholds: Sequence[float] = AUC_THRESHOLDS, warmup: int = 1,
                   progress: bool = False, drawings_dir=None, num_drawings: int = 2,
                   label: str = '') -> Dict[str, Any]:
    """Run ``matcher.match`` on every pair (timed) and score it with the LoFTR protocol.

    The matcher gets no motion prior (``predict=None``): this is two-view matching. Before
    timing, ``warmup`` untimed calls on the first pair absorb one-off costs (lazy model
    loading, allocator warm-up). A matcher that raises ``ValueError`` / ``RuntimeError`` /
    ``cv2.error`` on a pair gets a failed row with the message (counted in ``num_errors``).

    Args:
        matcher: anything with ``match(image0, image1) -> Matches`` (the ``Matcher`` protocol).
        pairs: the pairs to evaluate (at least one).
        threshold_px: RANSAC threshold, pixels.
        conf: RANSAC confidence.
        epipolar_threshold: see :func:`epipolar_precision`.
        auc_thresholds: AUC thresholds, degrees.
        warmup: untimed calls before the first timed one (>= 0).
        progress: show a tqdm progress bar on stderr.
        drawings_dir: when given, ``num_drawings`` pairs spread over ``pairs`` are drawn
            there side by side (:func:`draw_scored_pair`), named ``<label>_<k>.png``; their
            rows get ``drawing`` (the file name).
        num_drawings: how many pairs to draw (>= 0).
        label: the matcher / pair group for drawing titles and file names.

    Returns:
        ``{'rows': [...], 'summary': {...}}``. Each row: ``name``, ``source``, ``gap``,
        ``gt_rotation_deg``, ``gt_translation_m``, ``match_ms`` (wall time of the ``match``
        call), the keys of :func:`evaluate_pair` and ``error`` (None or the message). The
        summary: ``num_pairs``, ``auc@<t>`` per threshold (fractions), ``epi_precision``
        (mean over pairs), ``matches_mean``, ``matches_median``, ``inliers_mean``,
        ``match_ms_mean``, ``match_ms_median``, ``pose_failures`` (no pose or a degenerate
        one), ``pose_degenerate`` (of them, degenerate), ``pose_err_median_deg``,
        ``num_errors`` and the protocol parameters.

    Raises:
        ValueError: no pairs, or bad thresholds.
    """
    if len(pairs) == 0:
        raise ValueError('evaluate_pairs needs at least one pair')
    _check_threshold_px(threshold_px)
    if int(warmup) < 0:
        raise ValueError(f'warmup must be >= 0, got {warmup}')
    if int(num_drawings) < 0:
        raise ValueError(f'num_drawings must be >= 0, got {num_drawings}')
    drawn = set()
    if drawings_dir is not None and num_drawings:
        drawn = set(np.linspace(0, len(pairs) - 1, min(int(num_drawings), len(pairs)))
                    .round().astype(int).tolist())
    import sys

    from tqdm import tqdm

    for _ in range(int(warmup)):
        try:
            matcher.match(pairs[0].image0, pairs[0].image1)
        except (ValueError, RuntimeError, cv2.error) as exc:
            logger.warning('warm-up call failed: %s', exc)
            break
    rows = []
    for index, pair in enumerate(tqdm(pairs, disable=not progress, file=sys.stderr,
                                      unit='pair', dynamic_ncols=True, desc='pairs')):
        row: Dict[str, Any] = {
            'name': pair.name, 'source': pair.source, 'gap': pair.gap,
            'gt_rotation_deg': _rotation_deg(pair.T_0to1[:3, :3]),
            'gt_translation_m': float(np.linalg.norm(pair.T_0to1[:3, 3])), 'error': None}
        start = time.perf_counter()
        try:
            matches = matcher.match(pair.image0, pair.image1)
        except (ValueError, RuntimeError, cv2.error) as exc:
            row.update(match_ms=1e3 * (time.perf_counter() - start), num_matches=0,
                       num_inliers=0, pose_ok=False, pose_degenerate=None,
                       R_err_deg=math.inf, t_err_deg=math.inf, pose_err_deg=math.inf,
                       epi_precision=0.0, error=f'{type(exc).__name__}: {exc}')
            logger.warning('%s: matching failed: %s', pair.name, row['error'])
            rows.append(row)
            continue
        row['match_ms'] = 1e3 * (time.perf_counter() - start)
        row.update(evaluate_pair(matches, pair, threshold_px, conf, epipolar_threshold))
        if index in drawn:
            row['drawing'] = draw_scored_pair(drawings_dir, f'{_file_stem(label)}_{index}',
                                              matches, pair, row, label, epipolar_threshold)
        rows.append(row)
    return {'rows': rows, 'summary': summarize_rows(rows, auc_thresholds, threshold_px, conf,
                                                    epipolar_threshold)}


def _file_stem(label: str) -> str:
    return re.sub(r'[^A-Za-z0-9.-]+', '_', label).strip('_') or 'pairs'


def draw_scored_pair(folder, stem: str, matches, pair: ImagePair, row: Dict[str, Any],
                     label: str = '', epipolar_threshold: float = EPIPOLAR_THRESHOLD) -> str:
    """Draw one evaluated pair side by side, matches coloured by their ground-truth error.

    Green: symmetric epipolar distance below ``epipolar_threshold`` (right), red: above
    (wrong), as in LoFTR's figures. The title names the matcher / group ``label``, the pair
    and its pose error.

    Args:
        folder: output folder (created).
        stem: file name without ``.png``.
        matches: the pair's ``Matches``.
        pair: the pair with its ground truth.
        row: its row of :func:`evaluate_pairs` (pose error, inliers).
        label: matcher and pair group, for the title.
        epipolar_threshold: see :func:`epipolar_precision`.

    Returns:
        the file name written (relative to ``folder``).
    """
    from pathlib import Path

    from relperception.imaging.drawing import draw_match_pair
    from relperception.imaging.image_files import write_image

    distances = symmetric_epipolar_distance(matches.keypoints0, matches.keypoints1, pair.K0,
                                            pair.K1, pair.T_0to1) if len(matches) else \
        np.zeros(0)
    error = row.get('pose_err_deg', math.inf)
    outcome = (f'pose error {error:.1f} deg' if math.isfinite(error)
               else f'no pose ({row.get("pose_degenerate") or "RANSAC failed"})')
    title = f'{label}: {pair.name} - {outcome}, {row.get("num_inliers", 0)} RANSAC inliers'
    drawing = draw_match_pair(pair.image0, pair.image1, matches,
                              distances < epipolar_threshold, title,
                              names=('right (epipolar)', 'wrong'))
    name = f'{stem}.png'
    write_image(Path(folder) / name, drawing)
    return name


def summarize_rows(rows: Sequence[Dict[str, Any]],
                   auc_thresholds: Sequence[float] = AUC_THRESHOLDS,
                   threshold_px: float = RANSAC_THRESHOLD_PX, conf: float = RANSAC_CONFIDENCE,
                   epipolar_threshold: float = EPIPOLAR_THRESHOLD) -> Dict[str, Any]:
    """Return the summary of :func:`evaluate_pairs` for rows (e.g. a subset, one gap).

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError('no rows to summarise')
    errors = [float(r['pose_err_deg']) for r in rows]
    aucs = relpose_auc(errors, auc_thresholds)
    matches = np.array([r['num_matches'] for r in rows], dtype=np.float64)
    ms = np.array([r['match_ms'] for r in rows], dtype=np.float64)
    summary: Dict[str, Any] = {'num_pairs': len(rows)}
    summary.update({f'auc@{t:g}': a for t, a in zip(auc_thresholds, aucs)})
    summary.update({
        'epi_precision': float(np.mean([r['epi_precision'] for r in rows])),
        'matches_mean': float(matches.mean()),
        'matches_median': float(np.median(matches)),
        'inliers_mean': float(np.mean([r['num_inliers'] for r in rows])),
        'match_ms_mean': float(ms.mean()),
        'match_ms_median': float(np.median(ms)),
        'pose_failures': int(sum(not r['pose_ok'] for r in rows)),
        'pose_degenerate': int(sum(r.get('pose_degenerate') is not None for r in rows)),
        'pose_err_median_deg': float(np.median(errors)),
        'num_errors': int(sum(r.get('error') is not None for r in rows)),
        'ransac_threshold_px': float(threshold_px),
        'ransac_confidence': float(conf),
        'epipolar_threshold': float(epipolar_threshold),
    })
    return summary


def format_pairs_table(results: Dict[str, Dict[str, Any]],
                       thresholds: Sequence[float] = AUC_THRESHOLDS) -> str:
    """Return a fixed-width table: one row per run name (e.g. ``'orb gap 5'``) and summary.

    AUC and epipolar precision are printed in percent.
    """
    header = ['run'] + [f'AUC@{t:g}' for t in thresholds] + ['epi.prec', 'matches',
                                                             'fail', 'ms/pair', 'pairs']
    lines = [header]
    for name, s in results.items():
        cells = [str(name)]
        for t in thresholds:
            value = s.get(f'auc@{t:g}')
            cells.append('-' if value is None else f'{100 * value:.1f}')
        cells += [f'{100 * s["epi_precision"]:.1f}', f'{s["matches_mean"]:.0f}',
                  str(s['pose_failures']), f'{s["match_ms_median"]:.1f}', str(s['num_pairs'])]
        lines.append(cells)
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return '\n'.join('  '.join(cell.rjust(w) if i else cell.ljust(w)
                               for i, (cell, w) in enumerate(zip(row, widths)))
                     for row in lines)


def _split_run(name: str, summary: Dict[str, Any]):
    """Return (matcher, pair group) of a run: its keys, else ``'<matcher> | <group>'``."""
    if 'matcher' in summary and 'pairs' in summary:
        return str(summary['matcher']), str(summary['pairs'])
    matcher, _, group = str(name).partition(' | ')
    return matcher, group or 'pairs'


def plot_pairs_summary(path_png, results: Dict[str, Dict[str, Any]],
                       thresholds: Sequence[float] = AUC_THRESHOLDS,
                       title: str = 'relative pose AUC') -> Any:
    """Save the comparison figure: one panel per pair group, one last panel with timing.

    Each group panel shows, for every matcher, the AUC at each threshold (bars, percent);
    the last panel shows the median time per pair of every matcher on every group.

    Args:
        path_png: output PNG (parent folders are created).
        results: run name -> summary (from :func:`summarize_rows`), runs named
            ``'<matcher> | <group>'`` or summaries carrying ``matcher`` and ``pairs`` keys.
        thresholds: the AUC thresholds to plot, degrees.
        title: figure title.

    Returns:
        the written path.

    Raises:
        ValueError: no results.
    """
    from relperception.evaluation.report import pyplot, save_figure

    if not results:
        raise ValueError('no results to plot')
    runs = {name: _split_run(name, s) for name, s in results.items()}
    matchers = list(dict.fromkeys(m for m, _ in runs.values()))
    groups = list(dict.fromkeys(g for _, g in runs.values()))
    table = {runs[name]: s for name, s in results.items()}
    panels = len(groups) + 1
    cols = min(4, panels)
    rows = -(-panels // cols)
    plt = pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False)
    try:
        axes = axes.ravel()
        width = 0.8 / max(len(thresholds), 1)
        x = np.arange(len(matchers))
        for ax, group in zip(axes, groups):
            for k, t in enumerate(thresholds):
                values = [100 * (table.get((m, group), {}).get(f'auc@{t:g}') or 0.0)
                          for m in matchers]
                ax.bar(x + (k - (len(thresholds) - 1) / 2) * width, values, width,
                       label=f'AUC@{t:g}')
            n = max((table[(m, group)]['num_pairs'] for m in matchers if (m, group) in table),
                    default=0)
            ax.set_title(f'{group} ({n} pairs)', fontsize=9)
            ax.set_xticks(x)
            ax.set_xticklabels(matchers)
            ax.set_ylim(0, 100)
            ax.grid(True, axis='y', alpha=0.3)
        axes[0].set_ylabel('AUC [%]')
        axes[0].legend(fontsize=7)
        ax_ms = axes[len(groups)]
        width = 0.8 / max(len(matchers), 1)
        xg = np.arange(len(groups))
        for k, m in enumerate(matchers):
            values = [table.get((m, g), {}).get('match_ms_median') or 0.0 for g in groups]
            ax_ms.bar(xg + (k - (len(matchers) - 1) / 2) * width, values, width, label=m)
        ax_ms.set_xticks(xg)
        ax_ms.set_xticklabels(groups, rotation=45, ha='right', fontsize=7)
        ax_ms.set_ylabel('median ms / pair')
        ax_ms.set_title('time per pair', fontsize=9)
        ax_ms.legend(fontsize=7)
        ax_ms.grid(True, axis='y', alpha=0.3)
        for ax in axes[panels:]:
            ax.axis('off')
        return save_figure(fig, title, path_png)
    finally:
        plt.close(fig)
