# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Matcher training pairs from synthetic 3-D scenes (exact depth and poses) and negative pairs.

Three kinds of pairs train the LoFTR matcher together (:class:`MixedMatcherPairDataset`):

* **homography** pairs (:class:`~relperception.training.homography.HomographyPairDataset`):
  one real or synthetic image and its random homographic warp (real textures, no parallax);
* **scene** pairs: two rendered views of the same synthetic room
  (:mod:`relperception.data.synthetic`) with a chosen viewpoint change, moderate or wide
  (rotation >= ``wide_angle_deg``), with parallax and occlusions;
* **negative** pairs: two images of different sources (rooms, image folders), which share no
  content: no cell has a ground-truth match.

Ground truth of scene pairs (LoFTR's ScanNet supervision, Sun et al. CVPR 2021): every coarse
cell centre of image 0 is back-projected with its depth (``depth0``, nearest pixel) and ``K0``,
moved into camera 1 with ``T_1_0`` and projected with ``K1``. The warp is *valid* (the cell is
covisible) when the depth is valid, the point lies in front of camera 1 and lands inside image 1,
and the depth of image 1 at the landing pixel agrees with the warped depth (``|d1 - z| / d1 <
depth_tolerance``, 0.2 as LoFTR: otherwise the point is occluded in view 1). The cell of image 1
nearest to the landing point is the match when the reverse warp of that cell (with ``depth1``)
lands back in the cell of image 0 it came from (mutual check). The fine target is the warped
position relative to the matched cell (``homography.fine_offsets_gt``). Cells whose warp is
invalid are *unmatchable* (``matchable0`` / ``matchable1`` false): the coarse loss pushes their
confidence down (``loftr_losses.unmatched_focal_loss``); cells that are covisible but fail only
the mutual check are left unsupervised.

Conventions: pixel centres at integer coordinates (OpenCV); a coarse cell ``(x, y)`` stands for
the image point ``(scale * x + offset, scale * y + offset)``; depth in metres along the optical
axis (NaN or <= 0: invalid); ``T_1_0`` maps camera-0 coordinates to camera-1 coordinates
(REP 103 optical frames, metres); ``K`` in pixels of the depth map it belongs to.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import cv2
import numpy as np
from relperception.training.homography import (
    coarse_grid, coarse_matches_from_homography, HomographyConfig, HomographyPairDataset,
    list_images, photometric_augment, PhotometricConfig, read_gray, sample_homography)
from relperception.training.loop import item_rng
import torch
from torch.utils.data import Dataset

logger = logging.getLogger(__name__)

KIND_HOMOGRAPHY = 0
"""``kind`` of a homography pair in :class:`MixedMatcherPairDataset` items."""
KIND_SCENE = 1
"""``kind`` of a two-view scene pair (depth and pose ground truth)."""
KIND_NEGATIVE = 2
"""``kind`` of a negative pair (two unrelated images, no ground-truth match)."""

DEPTH_TOLERANCE = 0.2
"""Relative depth difference above which a warped point counts as occluded (LoFTR's 0.2)."""

WIDE_ANGLE_DEG = 30.0
"""Rotation between the views (degrees) from which a scene pair counts as wide-baseline."""

DEFAULT_VIEWS_PER_SEED = 40
"""Rendered views per scene seed when a ``synth:`` spec gives no count."""

DEFAULT_PHOTOMETRIC = PhotometricConfig()
"""Default photometric augmentation of :class:`MixedMatcherPairDataset` items."""


# ----------------------------------------------------------------------------------------------
# Depth-warp ground truth
# ----------------------------------------------------------------------------------------------

def _check_batch(name: str, tensor: torch.Tensor, shape: Tuple[Optional[int], ...]) -> None:
    if not isinstance(tensor, torch.Tensor) or tensor.ndim != len(shape) or any(
            want is not None and have != want for have, want in zip(tensor.shape, shape)):
        got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        want = tuple('*' if s is None else s for s in shape)
        raise ValueError(f'{name} must be a tensor of shape {want}, got {got}')


def _sample_nearest(image: torch.Tensor,
                    points: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Return the values of (B, H, W) ``image`` at the nearest pixels of (B, N, 2) ``points``.

    Returns (values (B, N) float64, inside (B, N) bool); values outside the image are NaN.
    """
    B, H, W = image.shape
    xi = points[..., 0].round()
    yi = points[..., 1].round()
    inside = (xi >= 0) & (xi <= W - 1) & (yi >= 0) & (yi <= H - 1)
    xi = xi.nan_to_num(0.0).clamp(0, W - 1).long()
    yi = yi.nan_to_num(0.0).clamp(0, H - 1).long()
    batch = torch.arange(B, device=image.device)[:, None].expand_as(xi)
    values = image[batch, yi, xi].double()
    return torch.where(inside, values, torch.full_like(values, float('nan'))), inside


@torch.no_grad()
def warp_points_by_depth(points0: torch.Tensor, depth0: torch.Tensor, K0: torch.Tensor,
                         K1: torch.Tensor, T_1_0: torch.Tensor, depth1: torch.Tensor,
                         depth_tolerance: float = DEPTH_TOLERANCE
                         ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Warp pixels of image 0 into image 1 with depth and pose; flag out-of-view and occluded.

    Args:
        points0: (B, N, 2) pixel coordinates (x, y) in image 0 (depth-map pixels).
        depth0: (B, H0, W0) depth of image 0 in metres (NaN or <= 0: invalid); sampled at the
            nearest pixel.
        K0: (B, 3, 3) camera matrix of image 0, pixels.
        K1: (B, 3, 3) camera matrix of image 1, pixels.
        T_1_0: (B, 4, 4) rigid transform from camera-0 to camera-1 coordinates, metres.
        depth1: (B, H1, W1) depth of image 1 in metres, for the occlusion check.
        depth_tolerance: largest relative difference ``|d1 - z| / d1`` between the depth of
            image 1 at the landing pixel ``d1`` and the warped depth ``z`` (> 0).

    Returns:
        (warped, valid): warped (B, N, 2) float64 pixel coordinates in image 1 and valid (B, N)
        bool: valid depth in image 0, in front of camera 1, inside image 1 (nearest pixel) and
        depth-consistent (not occluded).

    Raises:
        ValueError: on bad shapes or a non-positive tolerance.
    """
    _check_batch('points0', points0, (None, None, 2))
    B = points0.shape[0]
    _check_batch('depth0', depth0, (B, None, None))
    _check_batch('depth1', depth1, (B, None, None))
    for name, value, shape in (('K0', K0, (B, 3, 3)), ('K1', K1, (B, 3, 3)),
                               ('T_1_0', T_1_0, (B, 4, 4))):
        _check_batch(name, value, shape)
    if not depth_tolerance > 0:
        raise ValueError(f'depth_tolerance must be > 0, got {depth_tolerance}')
    pts = points0.double()
    d0, _ = _sample_nearest(depth0, pts)
    ok0 = torch.isfinite(d0) & (d0 > 0)
    d0 = torch.where(ok0, d0, torch.ones_like(d0))
    rays = torch.cat([pts, torch.ones_like(pts[..., :1])], -1) @ torch.linalg.inv(
        K0.double()).transpose(1, 2)
    T = T_1_0.double()
    cam1 = (rays * d0[..., None]) @ T[:, :3, :3].transpose(1, 2) + T[:, None, :3, 3]
    z1 = cam1[..., 2]
    front = z1 > 1e-6
    proj = cam1 @ K1.double().transpose(1, 2)
    warped = proj[..., :2] / torch.where(front, z1, torch.ones_like(z1))[..., None]
    d1, inside1 = _sample_nearest(depth1, warped)
    consistent = torch.isfinite(d1) & (d1 > 0) & (
        (d1 - z1).abs() < float(depth_tolerance) * d1.nan_to_num(0.0))
    return warped, ok0 & front & inside1 & consistent


def _nearest_cell(points: torch.Tensor, valid: torch.Tensor, hw: Tuple[int, int], scale: float,
                  offset: float) -> torch.Tensor:
    """Return the (B, N) row-major index of the nearest coarse cell, -1 when invalid/outside."""
    h, w = hw
    cell = ((points - offset) / scale).round()
    inside = valid & (cell[..., 0] >= 0) & (cell[..., 0] < w) & (cell[..., 1] >= 0) \
        & (cell[..., 1] < h)
    cell = cell.nan_to_num(0.0).clamp(-1, max(h, w) + 1).long()
    index = cell[..., 1] * w + cell[..., 0]
    return torch.where(inside, index, torch.full_like(index, -1))


def mutual_cells(w_pt0: torch.Tensor, valid0: torch.Tensor, w_pt1: torch.Tensor,
                 valid1: torch.Tensor, hw0_c: Tuple[int, int], hw1_c: Tuple[int, int],
                 scale: float, offset: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Return mutual nearest coarse cells of two warps (LoFTR's ``spvs_coarse`` check).

    Args:
        w_pt0: (B, L0, 2) cells of image 0 warped into image 1 (pixels).
        valid0: (B, L0) bool, warps of image 0 that are valid (covisible).
        w_pt1: (B, L1, 2) cells of image 1 warped into image 0 (pixels).
        valid1: (B, L1) bool, the same for image 1.
        hw0_c: (h0, w0) coarse size of image 0.
        hw1_c: (h1, w1) coarse size of image 1.
        scale: coarse stride in pixels.
        offset: image position of coarse cell (0, 0), pixels.

    Returns:
        (correct, j_of_i): correct (B, L0) bool, cell ``i`` has a mutual match; j_of_i (B, L0)
        int64, the nearest cell of image 1 (-1 when none).
    """
    h0, w0 = int(hw0_c[0]), int(hw0_c[1])
    j_of_i = _nearest_cell(w_pt0, valid0, (int(hw1_c[0]), int(hw1_c[1])), scale, offset)
    i_of_j = _nearest_cell(w_pt1, valid1, (h0, w0), scale, offset)
    loop = torch.gather(i_of_j, 1, j_of_i.clamp(min=0))
    arange = torch.arange(h0 * w0, device=w_pt0.device)[None]
    return (j_of_i >= 0) & (loop == arange), j_of_i


def _to_depth_pixels(points: torch.Tensor, image_scale: torch.Tensor) -> torch.Tensor:
    """Map training-image pixels to depth-map pixels (``x_d = (x + 0.5) / f - 0.5``)."""
    return (points + 0.5) / image_scale[:, None, :] - 0.5


def _to_image_pixels(points: torch.Tensor, image_scale: torch.Tensor) -> torch.Tensor:
    """Map depth-map pixels to training-image pixels (``x = (x_d + 0.5) f - 0.5``)."""
    return (points + 0.5) * image_scale[:, None, :] - 0.5


@torch.no_grad()
def depth_warp_cells(depth0: torch.Tensor, depth1: torch.Tensor, K0: torch.Tensor,
                     K1: torch.Tensor, T_1_0: torch.Tensor, hw0_c: Tuple[int, int],
                     hw1_c: Tuple[int, int], scale: float, offset: float = 0.0,
                     image_scale: Optional[torch.Tensor] = None,
                     depth_tolerance: float = DEPTH_TOLERANCE) -> Dict[str, torch.Tensor]:
    """Warp all coarse cells both ways with depth (the sparse part of the ground truth).

    Args: as :func:`coarse_matches_from_depth`.

    Returns:
        dict with ``correct`` (B, L0) bool and ``j_of_i`` (B, L0) int64 (:func:`mutual_cells`),
        ``w_pt0`` (B, L0, 2) and ``pt1`` (B, L1, 2) float32 training-image pixels,
        ``matchable0`` (B, L0) and ``matchable1`` (B, L1) bool (valid warps).
    """
    _check_batch('depth0', depth0, (None, None, None))
    B = depth0.shape[0]
    if image_scale is None:
        image_scale = torch.ones(B, 2, dtype=torch.float64, device=depth0.device)
    _check_batch('image_scale', image_scale, (B, 2))
    if not scale > 0:
        raise ValueError(f'scale must be > 0, got {scale}')
    f = image_scale.double()
    if not bool((f > 0).all()):
        raise ValueError('image_scale must be positive')
    device = depth0.device
    h0, w0 = int(hw0_c[0]), int(hw0_c[1])
    h1, w1 = int(hw1_c[0]), int(hw1_c[1])
    pt0 = coarse_grid(h0, w0, scale, offset, device).double()[None].expand(B, -1, -1)
    pt1 = coarse_grid(h1, w1, scale, offset, device).double()[None].expand(B, -1, -1)
    w0_d, valid0 = warp_points_by_depth(_to_depth_pixels(pt0, f), depth0, K0, K1, T_1_0, depth1,
                                        depth_tolerance)
    T_0_1 = torch.linalg.inv(T_1_0.double())
    w1_d, valid1 = warp_points_by_depth(_to_depth_pixels(pt1, f), depth1, K1, K0, T_0_1, depth0,
                                        depth_tolerance)
    w_pt0 = _to_image_pixels(w0_d, f)
    w_pt1 = _to_image_pixels(w1_d, f)
    correct, j_of_i = mutual_cells(w_pt0, valid0, w_pt1, valid1, (h0, w0), (h1, w1), scale,
                                   offset)
    return {'correct': correct, 'j_of_i': j_of_i, 'w_pt0': w_pt0.float(), 'pt1': pt1.float(),
            'matchable0': valid0, 'matchable1': valid1}


@torch.no_grad()
def coarse_matches_from_depth(depth0: torch.Tensor, depth1: torch.Tensor, K0: torch.Tensor,
                              K1: torch.Tensor, T_1_0: torch.Tensor, hw0_c: Tuple[int, int],
                              hw1_c: Tuple[int, int], scale: float, offset: float = 0.0,
                              image_scale: Optional[torch.Tensor] = None,
                              depth_tolerance: float = DEPTH_TOLERANCE
                              ) -> Dict[str, torch.Tensor]:
    """Ground-truth coarse matches of a depth + pose pair, LoFTR style (see the module docstring).

    Args:
        depth0: (B, H0, W0) depth of image 0, metres (NaN or <= 0 invalid).
        depth1: (B, H1, W1) depth of image 1, metres.
        K0: (B, 3, 3) camera matrix of image 0 in depth-map pixels.
        K1: (B, 3, 3) camera matrix of image 1 in depth-map pixels.
        T_1_0: (B, 4, 4) camera-0 to camera-1 transform, metres.
        hw0_c: (h0, w0) coarse size of (the possibly resized) image 0.
        hw1_c: (h1, w1) coarse size of image 1.
        scale: coarse stride in pixels of the training images (8 for LoFTR).
        offset: training-image position of coarse cell (0, 0), pixels.
        image_scale: optional (B, 2) (fx, fy) training-image pixels per depth-map pixel, when
            the images were resized after rendering (``x = (x_d + 0.5) f - 0.5``); default 1.
        depth_tolerance: relative depth tolerance of the occlusion check.

    Returns:
        dict with ``conf_matrix_gt`` (B, L0, L1) float32 (1 at matches), ``b_ids``, ``i_ids``,
        ``j_ids`` (K,) int64, ``w_pt0`` (B, L0, 2) cells of image 0 warped into image 1 and
        ``pt1`` (B, L1, 2) cell positions of image 1 (training-image pixels), ``matchable0``
        (B, L0) / ``matchable1`` (B, L1) bool, cells whose warp is valid (covisible).

    Raises:
        ValueError: on bad shapes or values.
    """
    cells = depth_warp_cells(depth0, depth1, K0, K1, T_1_0, hw0_c, hw1_c, scale, offset,
                             image_scale, depth_tolerance)
    b_ids, i_ids = torch.nonzero(cells['correct'], as_tuple=True)
    j_ids = cells['j_of_i'][b_ids, i_ids]
    B = depth0.shape[0]
    conf_gt = torch.zeros(B, int(hw0_c[0]) * int(hw0_c[1]), int(hw1_c[0]) * int(hw1_c[1]),
                          device=depth0.device)
    conf_gt[b_ids, i_ids, j_ids] = 1.0
    return {'conf_matrix_gt': conf_gt, 'b_ids': b_ids, 'i_ids': i_ids, 'j_ids': j_ids,
            'w_pt0': cells['w_pt0'], 'pt1': cells['pt1'], 'matchable0': cells['matchable0'],
            'matchable1': cells['matchable1']}


# ----------------------------------------------------------------------------------------------
# Rendered views of synthetic scenes
# ----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class SceneView:
    """One rendered view of a synthetic room with exact ground truth.

    Attributes:
        image: (H, W) uint8 grey image.
        depth: (H, W) float32 depth in metres along the optical axis (NaN: nothing hit).
        K: (3, 3) float64 camera matrix, pixels.
        T_world_cam: (4, 4) float64 pose of the camera optical frame in the world.
        seed: scene seed (the room).
    """

    image: np.ndarray
    depth: np.ndarray
    K: np.ndarray
    T_world_cam: np.ndarray
    seed: int


@dataclasses.dataclass(frozen=True)
class ViewJitter:
    """Random changes of the trajectory poses of :func:`render_scene_views`.

    Attributes:
        yaw_deg: rotation about the camera's vertical axis drawn from +-this (degrees).
        pitch_deg: rotation about the camera's x axis drawn from +-this (degrees).
        roll_deg: rotation about the optical axis drawn from +-this (degrees).
        shift_m: horizontal position change drawn from +-this per axis (metres).
        lift_m: vertical position change drawn from +-this (metres).
        spacing_s: time between the trajectory samples (seconds; the camera moves about
            0.4-1 m/s along its loop).
    """

    yaw_deg: float = 25.0
    pitch_deg: float = 12.0
    roll_deg: float = 8.0
    shift_m: float = 0.3
    lift_m: float = 0.25
    spacing_s: float = 2.0


def render_scene_views(seed: int, num_views: int = DEFAULT_VIEWS_PER_SEED, width: int = 320,
                       height: int = 240, jitter: Optional[ViewJitter] = None
                       ) -> List[SceneView]:
    """Render ``num_views`` views of the synthetic room ``seed`` along its camera loop, jittered.

    View ``k`` is the trajectory pose at ``k * jitter.spacing_s`` seconds, rotated by a random
    yaw / pitch / roll and moved by a random shift (a shift that leaves the free space is
    dropped). The draws are seeded by ``seed``, so the views are reproducible.

    Args:
        seed: scene seed (>= 0).
        num_views: number of views (>= 2).
        width: image width in pixels.
        height: image height in pixels.
        jitter: ``ViewJitter`` (default ranges when None).

    Returns:
        The views in trajectory order.

    Raises:
        ValueError: for bad arguments.
    """
    from relperception.data.synthetic import SyntheticScene
    from relperception.transforms import make_transform
    from scipy.spatial.transform import Rotation

    if isinstance(num_views, bool) or not isinstance(num_views, (int, np.integer)) \
            or num_views < 2:
        raise ValueError(f'num_views must be an integer >= 2, got {num_views!r}')
    cfg = jitter or ViewJitter()
    if not cfg.spacing_s > 0 or min(cfg.yaw_deg, cfg.pitch_deg, cfg.roll_deg, cfg.shift_m,
                                    cfg.lift_m) < 0:
        raise ValueError(f'invalid view jitter {cfg}')
    scene = SyntheticScene(seed=int(seed), width=int(width), height=int(height))
    poses = scene.trajectory(int(num_views), fps=1.0 / float(cfg.spacing_s))
    rng = np.random.default_rng([int(seed), 0x5CE4E])
    views = []
    for pose in poses:
        # camera optical frame: y points down, so a yaw is a rotation about the camera y axis
        angles = rng.uniform(-1.0, 1.0, 3) * np.radians([cfg.yaw_deg, cfg.pitch_deg,
                                                         cfg.roll_deg])
        R_extra = Rotation.from_euler('yxz', angles).as_matrix()
        shift = rng.uniform(-1.0, 1.0, 3) * np.array([cfg.shift_m, cfg.shift_m, cfg.lift_m])
        T = pose @ make_transform(R_extra, np.zeros(3))
        moved = T.copy()
        moved[:3, 3] += shift
        try:
            rgb, depth, _ = scene.render(moved)
            T = moved
        except ValueError:   # the shift left the free space: keep the loop position
            rgb, depth, _ = scene.render(T)
        views.append(SceneView(image=cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY),
                               depth=depth.astype(np.float32), K=scene.camera.K.copy(),
                               T_world_cam=T, seed=int(seed)))
    return views


def relative_pose(view0: SceneView, view1: SceneView) -> np.ndarray:
    """Return ``T_1_0 = inv(T_world_cam1) @ T_world_cam0``, (4, 4) float64, metres."""
    from relperception.transforms import invert_transform

    return invert_transform(view1.T_world_cam) @ view0.T_world_cam


def _angle_deg(R: np.ndarray) -> float:
    return math.degrees(math.acos(float(np.clip((np.trace(R) - 1.0) / 2.0, -1.0, 1.0))))


def scene_pair_table(views: Sequence[SceneView], stride: int = 8,
                     depth_tolerance: float = DEPTH_TOLERANCE) -> np.ndarray:
    """Describe every ordered pair of views of the same seed: angle, baseline and overlap.

    Args:
        views: rendered views (pairs are formed only between views of the same seed, all of
            the same size).
        stride: coarse cell size in pixels for the overlap.
        depth_tolerance: relative depth tolerance of the occlusion check.

    Returns:
        (P, 5) float64 rows ``(a, b, rotation_deg, baseline_m, overlap)``: indices into
        ``views``, rotation angle and camera distance between them, and the fraction of coarse
        cells of view ``a`` with a mutual ground-truth match in view ``b``.

    Raises:
        ValueError: without views or for views of different sizes.
    """
    if not len(views):
        raise ValueError('no views')
    height, width = views[0].image.shape
    if any(v.image.shape != (height, width) for v in views):
        raise ValueError('all views must have the same size')
    hw = (height // stride, width // stride)
    rows = []
    by_seed: Dict[int, List[int]] = {}
    for index, view in enumerate(views):
        by_seed.setdefault(view.seed, []).append(index)
    for indices in by_seed.values():
        depth = torch.from_numpy(np.stack([np.nan_to_num(views[i].depth, nan=0.0)
                                           for i in indices]))
        K = torch.from_numpy(np.stack([views[i].K for i in indices]))
        for pos, a in enumerate(indices):
            others = [q for q in range(len(indices)) if q != pos]
            if not others:
                continue
            T = torch.from_numpy(np.stack([relative_pose(views[a], views[indices[q]])
                                           for q in others]))
            n = len(others)
            cells = depth_warp_cells(depth[pos:pos + 1].expand(n, -1, -1), depth[others],
                                     K[pos:pos + 1].expand(n, -1, -1), K[others], T, hw, hw,
                                     float(stride), 0.0, None, depth_tolerance)
            overlap = cells['correct'].double().mean(1).numpy()
            for k, q in enumerate(others):
                b = indices[q]
                Tk = T[k].numpy()
                rows.append((a, b, _angle_deg(Tk[:3, :3]), float(np.linalg.norm(Tk[:3, 3])),
                             float(overlap[k])))
    return np.asarray(rows, np.float64).reshape(-1, 5)


# ----------------------------------------------------------------------------------------------
# Sources with groups (for negative pairs)
# ----------------------------------------------------------------------------------------------

SYNTHETIC_GROUP_PREFIX = 'synth:'
"""Prefix of the group name of a synthetic seed (``'synth:<seed>'``); other groups are real."""


def synthetic_group(seed: int) -> str:
    """Return the group name of synthetic seed ``seed`` (its images and scene views)."""
    return f'{SYNTHETIC_GROUP_PREFIX}{seed}'


def load_grouped_sources(data_paths: Sequence[Union[str, np.ndarray]]
                         ) -> Tuple[List[Union[Path, np.ndarray]], List[str]]:
    """Expand training sources into images and the group (scene / sequence) of each.

    Two images of different groups share no content and may form a negative pair: each seed of
    a ``synth:`` spec is its own group (``'synth:<seed>'``, the same group as the scene views
    of that seed); a folder or file given as a source is one group (pass one sequence as one
    folder); an in-memory array is its own group.

    Args:
        data_paths: image files, folders, ``synth:SEEDS[:FRAMES[:WxH]]`` specs and (H, W)
            uint8 grey arrays.

    Returns:
        (sources, groups): image paths / (H, W) uint8 arrays and a group name per image.

    Raises:
        ValueError: for a malformed spec, a missing path or no data.
    """
    from relperception.training.dense_data import (
        parse_synthetic_spec, SYNTH_PREFIX, synthetic_frames)

    if isinstance(data_paths, (str, Path, np.ndarray)):
        data_paths = [data_paths]
    sources: List[Union[Path, np.ndarray]] = []
    groups: List[str] = []
    for number, item in enumerate(data_paths):
        if isinstance(item, np.ndarray):
            sources.append(item)
            groups.append(f'array:{number}')
            continue
        item = str(item)
        if item.startswith(SYNTH_PREFIX):
            spec = parse_synthetic_spec(item)
            images, _ = synthetic_frames(**spec)
            per_seed = spec['frames_per_seed']
            for k, rgb in enumerate(images):
                sources.append(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY))
                groups.append(synthetic_group(spec['seeds'][k // per_seed]))
        else:
            if not Path(item).exists():
                raise ValueError(f'training data {item} does not exist')
            for path in list_images(item):
                sources.append(path)
                groups.append(f'path:{item}')
    if not sources:
        raise ValueError('no training data given')
    return sources, groups


def load_scene_views(specs: Sequence[str], size: Tuple[int, int],
                     jitter: Optional[ViewJitter] = None) -> List[SceneView]:
    """Render the views of ``synth:SEEDS[:VIEWS[:WxH]]`` specs at the training size.

    Args:
        specs: scene specs; ``VIEWS`` views per seed (default ``DEFAULT_VIEWS_PER_SEED``); a
            ``WxH`` given must equal ``size``.
        size: (height, width) training size in pixels.
        jitter: ``ViewJitter``.

    Returns:
        All views, seed by seed.

    Raises:
        ValueError: for a malformed spec, a size other than ``size`` or no spec.
    """
    from relperception.training.dense_data import SYNTH_PREFIX

    if isinstance(specs, str):
        specs = [specs]
    if not specs:
        raise ValueError('no scene specs given')
    views: List[SceneView] = []
    for spec in specs:
        spec = str(spec)
        if not spec.startswith(SYNTH_PREFIX):
            raise ValueError(f'scene pairs need synth:SEEDS[:VIEWS] specs, got {spec!r}')
        parts = spec[len(SYNTH_PREFIX):].split(':')
        if len(parts) > 3:
            raise ValueError(f'bad scene spec {spec!r}: use synth:SEEDS[:VIEWS[:WxH]]')
        if len(parts) < 3:
            parts = parts + [''] * (2 - len(parts)) + [f'{size[1]}x{size[0]}']
        if not parts[1]:
            parts[1] = str(DEFAULT_VIEWS_PER_SEED)
        from relperception.training.dense_data import parse_synthetic_spec

        parsed = parse_synthetic_spec(SYNTH_PREFIX + ':'.join(parts))
        if (parsed['height'], parsed['width']) != tuple(size):
            raise ValueError(f'scene spec {spec!r} renders {parsed["width"]}x{parsed["height"]}, '
                             f'but the training size is {size[1]}x{size[0]}')
        for seed in parsed['seeds']:
            views.extend(render_scene_views(seed, parsed['frames_per_seed'], parsed['width'],
                                            parsed['height'], jitter))
    logger.info('rendered %d scene views (%dx%d)', len(views), size[1], size[0])
    return views


# ----------------------------------------------------------------------------------------------
# Mixed dataset
# ----------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PairMix:
    """Fractions and selection of :class:`MixedMatcherPairDataset`.

    Attributes:
        scene_fraction: probability of a scene pair (the rest, after negatives, homography
            pairs; all non-negative pairs are scene pairs without a homography dataset).
        negative_fraction: probability of a negative pair.
        wide_fraction: probability that a scene pair is wide-baseline.
        wide_angle_deg: rotation from which a scene pair is wide-baseline (degrees).
        min_angle_deg: smallest rotation of a moderate scene pair (degrees).
        min_overlap: smallest fraction of coarse cells of image 0 with a ground-truth match.
        swap_probability: probability of swapping the two images of a negative pair.
        real_negative_fraction: share of the negative pairs whose two images both come from
            real image sources (files, folders, arrays; not ``synth:`` seeds or scene views)
            of different groups, e.g. two street sequences; needs two such groups. The other
            negatives draw their first image from all sources.
    """

    scene_fraction: float = 0.45
    negative_fraction: float = 0.2
    wide_fraction: float = 0.5
    wide_angle_deg: float = WIDE_ANGLE_DEG
    min_angle_deg: float = 5.0
    min_overlap: float = 0.15
    swap_probability: float = 0.5
    real_negative_fraction: float = 0.0


def _check_mix(mix: PairMix) -> None:
    for name in ('scene_fraction', 'negative_fraction', 'wide_fraction', 'min_overlap',
                 'swap_probability', 'real_negative_fraction'):
        value = getattr(mix, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f'{name} must be in [0, 1], got {value}')
    if mix.scene_fraction + mix.negative_fraction > 1.0 + 1e-9:
        raise ValueError(f'scene_fraction + negative_fraction must be <= 1, got '
                         f'{mix.scene_fraction} + {mix.negative_fraction}')
    if not 0.0 <= mix.min_angle_deg < mix.wide_angle_deg <= 180.0:
        raise ValueError(f'need 0 <= min_angle_deg < wide_angle_deg <= 180, got '
                         f'{mix.min_angle_deg}, {mix.wide_angle_deg}')


class MixedMatcherPairDataset(Dataset):
    """Homography, scene and negative pairs in one dataset with one item layout.

    Sample ``index`` draws its kind and content from ``training.loop.item_rng(seed, epoch,
    index)``; homography pairs are ``homography[index % len(homography)]`` (that dataset's own
    seeding), so the data are reproducible and every epoch draws new pairs.

    Args:
        size: (height, width) of the pairs (multiples of 8).
        length: number of samples (virtual epoch length, >= 1).
        seed: base seed.
        homography: optional ``HomographyPairDataset`` of the same size.
        views: rendered scene views of that size (:func:`load_scene_views`); may be empty
            when ``mix.scene_fraction`` is 0.
        negative_sources: images for negative pairs: (H, W) uint8 arrays or paths.
        negative_groups: group of each negative source (:func:`load_grouped_sources`); two
            images of a negative pair come from different groups. Scene views are added as
            sources of group ``'synth:<seed>'``.
        mix: ``PairMix``.
        photometric: ``PhotometricConfig`` applied to each image independently (None: none).
        homography_config: homography of the second image of negative pairs (with
            probability 1/2; ``HomographyConfig`` defaults when None).

    Each item is a dict (all keys always present, so batches collate):
        ``image0``, ``image1`` (1, H, W) float32 in [0, 1]; ``kind`` int64 scalar
        (``KIND_*``); ``H_1_0`` (3, 3) float32 (homography pairs, identity otherwise);
        ``mask0``, ``mask1`` (H, W) bool, pixels with content; ``depth0``, ``depth1`` (H, W)
        float32 metres (scene pairs, 0 otherwise = invalid); ``K0``, ``K1`` (3, 3) float32
        (scene pairs, identity otherwise); ``T_1_0`` (4, 4) float32 camera-0 to camera-1
        (scene pairs, identity otherwise); ``image_scale`` (2,) float32 ones (training-image
        pixels per depth-map pixel, changed by ``matcher_train.rescale_batch``).

    Raises:
        ValueError: for inconsistent arguments (sizes, fractions without data, too few
            groups for negatives, no scene pair that passes the selection).
    """

    def __init__(self, size: Tuple[int, int], length: int, seed: int = 0,
                 homography: Optional[HomographyPairDataset] = None,
                 views: Sequence[SceneView] = (),
                 negative_sources: Sequence[Union[str, Path, np.ndarray]] = (),
                 negative_groups: Sequence[str] = (), mix: Optional[PairMix] = None,
                 photometric: Optional[PhotometricConfig] = DEFAULT_PHOTOMETRIC,
                 homography_config: Optional[HomographyConfig] = None):
        """Check the arguments and index the scene pairs (see the class docstring)."""
        height, width = int(size[0]), int(size[1])
        if height < 16 or width < 16 or height % 8 or width % 8:
            raise ValueError(f'size must be >= 16 and multiples of 8, got {size}')
        if length < 1:
            raise ValueError(f'length must be >= 1, got {length}')
        self.mix = mix or PairMix()
        _check_mix(self.mix)
        self.size = (height, width)
        self.length = int(length)
        self.seed = int(seed)
        self.epoch = 0
        self.photometric = photometric
        self.homography_config = homography_config or HomographyConfig()
        if homography is not None and tuple(homography.size) != self.size:
            raise ValueError(f'homography pairs are {homography.size}, expected {self.size}')
        self.homography = homography
        self.views = list(views)
        for view in self.views:
            if view.image.shape != self.size or view.depth.shape != self.size:
                raise ValueError(f'scene views must be {self.size}, got {view.image.shape}')
        if len(negative_groups) != len(negative_sources):
            raise ValueError('negative_groups must give one group per negative source')
        self.negative_sources = list(negative_sources) + [v.image for v in self.views]
        self.negative_groups = [str(g) for g in negative_groups] + [
            synthetic_group(v.seed) for v in self.views]
        self.wide_pairs = self.moderate_pairs = np.zeros((0, 5))
        scene_fraction = self.mix.scene_fraction
        if homography is None:
            scene_fraction = 1.0 - self.mix.negative_fraction
        self.scene_probability = scene_fraction
        if scene_fraction > 0:
            if not self.views:
                raise ValueError('scene pairs requested but no scene views given')
            table = scene_pair_table(self.views)
            table = table[table[:, 4] >= self.mix.min_overlap]
            self.wide_pairs = table[table[:, 2] >= self.mix.wide_angle_deg]
            self.moderate_pairs = table[(table[:, 2] >= self.mix.min_angle_deg)
                                        & (table[:, 2] < self.mix.wide_angle_deg)]
            if not len(self.wide_pairs) and not len(self.moderate_pairs):
                raise ValueError('no scene pair passes the angle and overlap selection')
            logger.info('scene pairs: %d wide (>= %g deg), %d moderate (overlap >= %g)',
                        len(self.wide_pairs), self.mix.wide_angle_deg, len(self.moderate_pairs),
                        self.mix.min_overlap)
        if self.mix.negative_fraction > 0 and len(set(self.negative_groups)) < 2:
            raise ValueError('negative pairs need sources of at least two groups (scenes or '
                             'image folders)')
        self.real_negative_indices = [k for k, g in enumerate(self.negative_groups)
                                      if not g.startswith(SYNTHETIC_GROUP_PREFIX)]
        real_groups = {self.negative_groups[k] for k in self.real_negative_indices}
        if self.mix.negative_fraction > 0 and self.mix.real_negative_fraction > 0 \
                and len(real_groups) < 2:
            raise ValueError('real_negative_fraction needs real image sources of at least two '
                             f'groups (image folders, files or arrays), got {len(real_groups)}')
        if homography is None and scene_fraction <= 0 and self.mix.negative_fraction < 1:
            raise ValueError('no homography dataset and no scene pairs')

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose random draws ``__getitem__`` uses."""
        self.epoch = int(epoch)
        if self.homography is not None:
            self.homography.set_epoch(epoch)

    def __len__(self) -> int:
        """Return the virtual length."""
        return self.length

    # -- items -----------------------------------------------------------------------------------
    def _blank(self) -> Dict[str, torch.Tensor]:
        height, width = self.size
        return {'H_1_0': torch.eye(3), 'depth0': torch.zeros(height, width),
                'depth1': torch.zeros(height, width), 'K0': torch.eye(3), 'K1': torch.eye(3),
                'T_1_0': torch.eye(4), 'image_scale': torch.ones(2),
                'mask0': torch.ones(height, width, dtype=torch.bool),
                'mask1': torch.ones(height, width, dtype=torch.bool)}

    def _augment(self, rng: np.random.Generator, image: np.ndarray) -> np.ndarray:
        image = image.astype(np.float32) / 255.0 if image.dtype == np.uint8 else image
        if self.photometric is not None:
            image = photometric_augment(rng, image, self.photometric)
        return image.astype(np.float32)

    def _scene_item(self, rng: np.random.Generator) -> Dict[str, torch.Tensor]:
        wide = len(self.wide_pairs) and (not len(self.moderate_pairs)
                                         or rng.random() < self.mix.wide_fraction)
        table = self.wide_pairs if wide else self.moderate_pairs
        a, b = (int(v) for v in table[int(rng.integers(len(table))), :2])
        view0, view1 = self.views[a], self.views[b]
        item = self._blank()
        item.update({
            'image0': torch.from_numpy(self._augment(rng, view0.image))[None],
            'image1': torch.from_numpy(self._augment(rng, view1.image))[None],
            'kind': torch.tensor(KIND_SCENE),
            'depth0': torch.from_numpy(np.nan_to_num(view0.depth, nan=0.0)),
            'depth1': torch.from_numpy(np.nan_to_num(view1.depth, nan=0.0)),
            'K0': torch.from_numpy(view0.K.astype(np.float32)),
            'K1': torch.from_numpy(view1.K.astype(np.float32)),
            'T_1_0': torch.from_numpy(relative_pose(view0, view1).astype(np.float32)),
        })
        return item

    def _crop(self, rng: np.random.Generator, source) -> np.ndarray:
        """Return a random crop of a source resized to the pair size, float32 in [0, 1]."""
        src = source if isinstance(source, np.ndarray) else read_gray(source)
        height, width = self.size
        crop_w = min(src.shape[1], src.shape[0] * width / height) * rng.uniform(0.6, 1.0)
        crop_h = crop_w * height / width
        x0 = rng.uniform(0, src.shape[1] - crop_w)
        y0 = rng.uniform(0, src.shape[0] - crop_h)
        zoom = width / crop_w
        A = np.array([[zoom, 0.0, (0.5 - x0) * zoom - 0.5], [0.0, zoom, (0.5 - y0) * zoom - 0.5]])
        src_f = src.astype(np.float32) / 255.0
        if zoom < 1.0:
            src_f = cv2.GaussianBlur(src_f, (0, 0), 0.5 / zoom)
        return cv2.warpAffine(src_f, A, (width, height), flags=cv2.INTER_LINEAR,
                              borderMode=cv2.BORDER_REFLECT)

    def _negative_item(self, rng: np.random.Generator) -> Dict[str, torch.Tensor]:
        groups = self.negative_groups
        candidates = range(len(groups))
        if self.mix.real_negative_fraction > 0 and rng.random() < self.mix.real_negative_fraction:
            candidates = self.real_negative_indices
        first = candidates[int(rng.integers(len(candidates)))]
        others = [k for k in candidates if groups[k] != groups[first]]
        second = others[int(rng.integers(len(others)))]
        if rng.random() < self.mix.swap_probability:
            first, second = second, first
        image0 = self._crop(rng, self.negative_sources[first])
        image1 = self._crop(rng, self.negative_sources[second])
        item = self._blank()
        if rng.random() < 0.5:   # warped like the second image of a homography pair
            height, width = self.size
            H = sample_homography(rng, height, width, self.homography_config)
            image1 = cv2.warpPerspective(image1, H, (width, height), flags=cv2.INTER_LINEAR,
                                         borderMode=cv2.BORDER_CONSTANT, borderValue=0)
            valid = cv2.warpPerspective(np.ones((height, width), np.uint8), H, (width, height),
                                        flags=cv2.INTER_NEAREST, borderMode=cv2.BORDER_CONSTANT,
                                        borderValue=0) > 0
            item['mask1'] = torch.from_numpy(valid)
        image0 = self._augment(rng, image0)
        image1 = np.where(item['mask1'].numpy(), self._augment(rng, image1), 0.0)
        item.update({'image0': torch.from_numpy(image0.astype(np.float32))[None],
                     'image1': torch.from_numpy(image1.astype(np.float32))[None],
                     'kind': torch.tensor(KIND_NEGATIVE)})
        return item

    def _homography_item(self, index: int) -> Dict[str, torch.Tensor]:
        pair = self.homography[index % len(self.homography)]
        item = self._blank()
        item.update(pair)
        item['kind'] = torch.tensor(KIND_HOMOGRAPHY)
        return item

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        """Return sample ``index`` (see the class docstring)."""
        if not 0 <= index < self.length:
            raise IndexError(index)
        rng = item_rng(self.seed, self.epoch, int(index))
        draw = rng.random()
        if draw < self.mix.negative_fraction:
            return self._negative_item(rng)
        if draw < self.mix.negative_fraction + self.scene_probability or self.homography is None:
            return self._scene_item(rng)
        return self._homography_item(int(index))


# ----------------------------------------------------------------------------------------------
# Ground truth of a mixed batch
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def mixed_ground_truth(batch: Dict[str, torch.Tensor], hw0_c: Tuple[int, int],
                       hw1_c: Tuple[int, int], scale: float, offset: float = 0.0,
                       depth_tolerance: float = DEPTH_TOLERANCE) -> Dict[str, torch.Tensor]:
    """Coarse ground truth of a collated :class:`MixedMatcherPairDataset` batch.

    Homography pairs use ``coarse_matches_from_homography``, scene pairs
    :func:`coarse_matches_from_depth`, negative pairs have no match and every cell unmatchable.

    Args:
        batch: collated items (see :class:`MixedMatcherPairDataset`), possibly resized by
            ``matcher_train.rescale_batch``.
        hw0_c: (h0, w0) coarse size of image 0.
        hw1_c: (h1, w1) coarse size of image 1.
        scale: coarse stride in pixels.
        offset: image position of coarse cell (0, 0), pixels.
        depth_tolerance: relative depth tolerance of the occlusion check.

    Returns:
        dict with ``conf_matrix_gt`` (B, L0, L1), ``b_ids``, ``i_ids``, ``j_ids`` (K,) sorted
        by batch item, ``w_pt0`` (B, L0, 2), ``pt1`` (B, L1, 2) (pixels), ``matchable0``
        (B, L0) and ``matchable1`` (B, L1) bool (cells with a valid warp; none for negatives).

    Raises:
        ValueError: for a batch without ``kind`` or with an unknown kind.
    """
    if 'kind' not in batch:
        raise ValueError('batch has no kind: not a MixedMatcherPairDataset batch')
    kind = batch['kind'].reshape(-1)
    known = (kind == KIND_HOMOGRAPHY) | (kind == KIND_SCENE) | (kind == KIND_NEGATIVE)
    if not bool(known.all()):
        raise ValueError(f'unknown pair kinds {sorted(set(kind.tolist()))}')
    hom = coarse_matches_from_homography(batch['H_1_0'], hw0_c, hw1_c, scale=scale,
                                         offset=offset, mask0=batch.get('mask0'),
                                         mask1=batch.get('mask1'))
    dep = depth_warp_cells(batch['depth0'], batch['depth1'], batch['K0'], batch['K1'],
                           batch['T_1_0'], hw0_c, hw1_c, scale, offset,
                           batch.get('image_scale'), depth_tolerance)
    is_h = kind == KIND_HOMOGRAPHY
    is_s = kind == KIND_SCENE
    keep_h = is_h[hom['b_ids']]
    b_s, i_s = torch.nonzero(dep['correct'] & is_s[:, None], as_tuple=True)
    b_ids = torch.cat([hom['b_ids'][keep_h], b_s])
    i_ids = torch.cat([hom['i_ids'][keep_h], i_s])
    j_ids = torch.cat([hom['j_ids'][keep_h], dep['j_of_i'][b_s, i_s]])
    order = torch.argsort(b_ids * (int(hw0_c[0]) * int(hw0_c[1])) + i_ids)
    b_ids, i_ids, j_ids = b_ids[order], i_ids[order], j_ids[order]
    B = kind.shape[0]
    conf_gt = torch.zeros(B, int(hw0_c[0]) * int(hw0_c[1]), int(hw1_c[0]) * int(hw1_c[1]),
                          device=kind.device)
    conf_gt[b_ids, i_ids, j_ids] = 1.0
    w_pt0 = torch.where(is_h[:, None, None], hom['w_pt0'], dep['w_pt0'])
    matchable0 = torch.where(is_h[:, None], hom['matchable0'],
                             dep['matchable0'] & is_s[:, None])
    matchable1 = torch.where(is_h[:, None], hom['matchable1'],
                             dep['matchable1'] & is_s[:, None])
    return {'conf_matrix_gt': conf_gt, 'b_ids': b_ids, 'i_ids': i_ids, 'j_ids': j_ids,
            'w_pt0': w_pt0, 'pt1': hom['pt1'], 'matchable0': matchable0,
            'matchable1': matchable1}


# ----------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def evaluate_scene_and_negative_pairs(model, items: Sequence[Dict[str, torch.Tensor]],
                                      thresholds_px: Sequence[float] = (3.0,),
                                      batch_size: int = 4,
                                      device: Union[str, torch.device] = 'cpu'
                                      ) -> Dict[str, float]:
    """Precision of the model's matches on scene pairs and its match count on negative pairs.

    A match (``mask`` true) of a scene pair is correct within ``t`` px when the depth warp of
    its ``keypoints0`` (:func:`warp_points_by_depth`) is valid and within ``t`` px of
    ``keypoints1``; a match whose warp is invalid (out of view, occluded) is wrong. Every match
    of a negative pair is wrong. Homography items are ignored (``evaluate_homography``).

    Args:
        model: a ``LoFTR`` (run in eval mode; its mode is restored).
        items: :class:`MixedMatcherPairDataset` items, not resized (``image_scale`` 1).
        thresholds_px: error thresholds in pixels.
        batch_size: pairs per forward pass.
        device: torch device of the model.

    Returns:
        dict with ``scene_pairs``, ``scene_matches_per_pair``, ``scene_precision_<t>px``
        (pooled; 0 without matches), ``negative_pairs``, ``negative_matches_per_pair`` and
        ``negative_matches_max`` (only the keys of the kinds present).

    Raises:
        ValueError: without scene or negative items.
    """
    chosen = [it for it in items if int(it['kind']) in (KIND_SCENE, KIND_NEGATIVE)]
    if not chosen:
        raise ValueError('no scene or negative pairs to evaluate')
    was_training = model.training
    model.eval()
    errors: List[np.ndarray] = []
    negative_counts: List[int] = []
    try:
        for start in range(0, len(chosen), batch_size):
            chunk = chosen[start:start + batch_size]
            batch = {k: torch.stack([it[k] for it in chunk]).to(device) for k in chunk[0]}
            out = model(batch['image0'], batch['image1'])
            warped, valid = warp_points_by_depth(out['keypoints0'].double(), batch['depth0'],
                                                 batch['K0'], batch['K1'], batch['T_1_0'],
                                                 batch['depth1'])
            err = (warped - out['keypoints1'].double()).norm(dim=-1)
            err = torch.where(valid, err, torch.full_like(err, float('inf')))
            for b, item in enumerate(chunk):
                mask = out['mask'][b]
                if int(item['kind']) == KIND_NEGATIVE:
                    negative_counts.append(int(mask.sum()))
                else:
                    errors.append(err[b][mask].cpu().numpy())
    finally:
        model.train(was_training)
    metrics: Dict[str, float] = {}
    if errors:
        pooled = np.concatenate(errors)
        metrics['scene_pairs'] = float(len(errors))
        metrics['scene_matches_per_pair'] = len(pooled) / len(errors)
        for t in thresholds_px:
            metrics[f'scene_precision_{t:g}px'] = (float((pooled <= t).mean()) if len(pooled)
                                                   else 0.0)
    if negative_counts:
        metrics['negative_pairs'] = float(len(negative_counts))
        metrics['negative_matches_per_pair'] = float(np.mean(negative_counts))
        metrics['negative_matches_max'] = float(np.max(negative_counts))
    return metrics
