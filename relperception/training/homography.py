# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Self-supervised matcher training data: random homographies of single real images.

A training pair is one grey source image seen twice: ``image0`` is a random crop/resize of the
source and ``image1`` is the same source region warped by a random homography ``H_1_0`` (which
maps pixel coordinates of image 0 to pixel coordinates of image 1), each with its own
photometric augmentation. Because the warp is known exactly, so are the correspondences: the
functions below turn ``H_1_0`` into LoFTR's coarse ground truth (mutual nearest coarse cells, as
the ``spvs_coarse`` supervision of the LoFTR paper) and the fine-level offsets.

Pixel convention: OpenCV's, pixel centres at integer coordinates. A coarse cell ``(x, y)`` of a
stride-``s`` feature map stands for the image point ``(s * x + offset, s * y + offset)`` where
``offset`` is the model's cell offset (0 for kornia/zju LoFTR, whose coarse keypoints are
``index * 8``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import cv2
import numpy as np
from relperception.imaging import read_image_file
from relperception.training.loop import item_rng
import torch
from torch.utils.data import Dataset

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = ('.png', '.jpg', '.jpeg', '.ppm', '.pgm', '.bmp')
"""File name suffixes (lower case) read as images by ``list_images``."""


# ----------------------------------------------------------------------------------------------
# Homography sampling
# ----------------------------------------------------------------------------------------------

#: Largest ``HomographyConfig.max_scale``: a larger zoom range leaves almost no draw with the
#: overlap the pairs need (and an infinite one cannot be drawn from).
MAX_HOMOGRAPHY_SCALE = 8.0


@dataclasses.dataclass(frozen=True)
class HomographyConfig:
    """Ranges of the random homographies of ``sample_homography``.

    Attributes:
        max_angle_deg: in-plane rotation drawn uniformly from +-this (degrees).
        max_scale: isotropic zoom drawn log-uniformly from [1/max_scale, max_scale]
            (1 <= max_scale <= ``MAX_HOMOGRAPHY_SCALE``).
        max_perspective: each corner moves independently by up to this fraction of the image
            size (perspective and shear).
        max_translation: shift drawn uniformly from +-this fraction of the image size.
        min_overlap: minimum fraction of image 0 that must land inside image 1.
        max_tries: attempts before falling back to the identity.
    """

    max_angle_deg: float = 30.0
    max_scale: float = 1.4
    max_perspective: float = 0.12
    max_translation: float = 0.15
    min_overlap: float = 0.5
    max_tries: int = 50


def homography_overlap(H_1_0: np.ndarray, height: int, width: int, step: int = 8) -> float:
    """Return the fraction of image-0 points that ``H_1_0`` maps inside image 1.

    Args:
        H_1_0: (3, 3) homography mapping image-0 pixels to image-1 pixels.
        height: image height in pixels (both images).
        width: image width in pixels (both images).
        step: grid spacing of the tested points (pixels).

    Returns:
        Fraction in [0, 1].
    """
    ys, xs = np.mgrid[0:height:step, 0:width:step]
    pts = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float64)
    warped, ok = warp_points_np(H_1_0, pts)
    inside = ok & (warped[:, 0] >= -0.5) & (warped[:, 0] <= width - 0.5) \
        & (warped[:, 1] >= -0.5) & (warped[:, 1] <= height - 0.5)
    return float(inside.mean())


def warp_points_np(H: np.ndarray, points: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Apply a homography to points.

    Args:
        H: (3, 3) homography.
        points: (N, 2) pixel coordinates.

    Returns:
        (warped (N, 2) float64, valid (N,) bool) where ``valid`` is false for points mapped to or
        behind the line at infinity.
    """
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    hom = np.concatenate([pts, np.ones((len(pts), 1))], 1) @ np.asarray(H, np.float64).T
    valid = hom[:, 2] > 1e-8
    z = np.where(valid, hom[:, 2], 1.0)
    return hom[:, :2] / z[:, None], valid


def sample_homography(rng: np.random.Generator, height: int, width: int,
                      config: Optional[HomographyConfig] = None) -> np.ndarray:
    """Draw a random homography that keeps most of the image in view.

    The image corners are rotated and zoomed about the image centre, moved independently
    (perspective) and shifted (translation); ``H_1_0`` maps the original corners to the moved
    ones. Draws whose overlap (``homography_overlap``) is below ``config.min_overlap`` are
    rejected.

    Args:
        rng: numpy random generator.
        height: image height in pixels (>= 16).
        width: image width in pixels (>= 16).
        config: ranges; default ``HomographyConfig()``.

    Returns:
        (3, 3) float64 ``H_1_0`` mapping image-0 pixel coordinates to image-1 pixel coordinates.

    Raises:
        ValueError: on a too small image or invalid ranges.
    """
    cfg = config or HomographyConfig()
    if height < 16 or width < 16:
        raise ValueError(f'image must be at least 16x16 pixels, got {height}x{width}')
    if not 1.0 <= cfg.max_scale <= MAX_HOMOGRAPHY_SCALE or cfg.max_angle_deg < 0 \
            or cfg.max_perspective < 0 \
            or cfg.max_translation < 0 or not 0.0 <= cfg.min_overlap <= 1.0:
        raise ValueError(f'invalid homography ranges: {cfg}')
    corners = np.array([[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]],
                       np.float64)
    centre = np.array([(width - 1) / 2.0, (height - 1) / 2.0])
    size = np.array([width, height], np.float64)
    for _ in range(max(1, int(cfg.max_tries))):
        angle = math.radians(rng.uniform(-cfg.max_angle_deg, cfg.max_angle_deg))
        scale = math.exp(rng.uniform(-math.log(cfg.max_scale), math.log(cfg.max_scale)))
        c, s = math.cos(angle), math.sin(angle)
        rot = np.array([[c, -s], [s, c]]) * scale
        moved = (corners - centre) @ rot.T + centre
        moved += rng.uniform(-cfg.max_perspective, cfg.max_perspective, (4, 2)) * size
        moved += rng.uniform(-cfg.max_translation, cfg.max_translation, 2) * size
        H = cv2.getPerspectiveTransform(corners.astype(np.float32), moved.astype(np.float32))
        H = H / H[2, 2]
        if np.linalg.cond(H) > 1e8:
            continue
        if homography_overlap(H, height, width) >= cfg.min_overlap:
            return H
    logger.debug('no homography with overlap >= %.2f in %d tries, using identity',
                 cfg.min_overlap, cfg.max_tries)
    return np.eye(3)


# ----------------------------------------------------------------------------------------------
# Photometric augmentation
# ----------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PhotometricConfig:
    """Ranges of ``photometric_augment`` (each image of a pair is augmented independently).

    Attributes:
        brightness: additive shift drawn from +-this (fraction of the grey range).
        contrast: multiplicative factor drawn from [1 - contrast, 1 + contrast].
        gamma: exponent drawn log-uniformly from [1/gamma, gamma] (>= 1).
        noise_std: Gaussian noise standard deviation drawn from [0, noise_std] (fraction).
        blur_probability: probability of a Gaussian blur.
        max_blur_sigma: blur sigma drawn from [0.3, max_blur_sigma] pixels.
    """

    brightness: float = 0.15
    contrast: float = 0.3
    gamma: float = 1.5
    noise_std: float = 0.03
    blur_probability: float = 0.3
    max_blur_sigma: float = 1.5


def photometric_augment(rng: np.random.Generator, image: np.ndarray,
                        config: Optional[PhotometricConfig] = None) -> np.ndarray:
    """Randomly change brightness, contrast, gamma, add noise and blur.

    Args:
        rng: numpy random generator.
        image: (H, W) float32 grey image in [0, 1].
        config: ranges; default ``PhotometricConfig()``.

    Returns:
        (H, W) float32 image in [0, 1].

    Raises:
        ValueError: if ``image`` is not 2-D.
    """
    cfg = config or PhotometricConfig()
    if image.ndim != 2:
        raise ValueError(f'image must be (H, W), got shape {image.shape}')
    out = image.astype(np.float32, copy=True)
    if cfg.max_blur_sigma > 0 and rng.random() < cfg.blur_probability:
        sigma = rng.uniform(0.3, max(0.3, cfg.max_blur_sigma))
        out = cv2.GaussianBlur(out, (0, 0), sigma)
    if cfg.gamma > 1.0:
        out = np.power(np.clip(out, 0.0, 1.0),
                       math.exp(rng.uniform(-math.log(cfg.gamma), math.log(cfg.gamma))))
    mean = float(out.mean())
    out = (out - mean) * rng.uniform(1.0 - cfg.contrast, 1.0 + cfg.contrast) + mean
    out += rng.uniform(-cfg.brightness, cfg.brightness)
    if cfg.noise_std > 0:
        out += rng.standard_normal(out.shape).astype(np.float32) * rng.uniform(0, cfg.noise_std)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Image sources
# ----------------------------------------------------------------------------------------------

def list_images(paths: Union[str, Path, Sequence[Union[str, Path]]]) -> List[Path]:
    """Expand files and folders (searched recursively) into a sorted list of image files.

    Args:
        paths: one path or a sequence of image files and/or folders.

    Returns:
        Sorted, de-duplicated list of image paths (suffixes ``IMAGE_SUFFIXES``).

    Raises:
        ValueError: if a path does not exist or no image is found.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    found = set()
    for item in paths:
        path = Path(item)
        if path.is_dir():
            found.update(p for p in path.rglob('*')
                         if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        elif path.is_file():
            found.add(path)
        else:
            raise ValueError(f'image path {path} does not exist')
    if not found:
        raise ValueError(f'no image files ({", ".join(IMAGE_SUFFIXES)}) found in {list(paths)}')
    return sorted(found)


def read_gray(path: Union[str, Path]) -> np.ndarray:
    """Read an image file as (H, W) uint8 grey.

    Args:
        path: image file.

    Returns:
        (H, W) uint8 array.

    Raises:
        OSError: if OpenCV cannot read the file.
    """
    try:
        return read_image_file(path, cv2.IMREAD_GRAYSCALE)
    except ValueError as error:
        raise OSError(f'cannot read image {path}: {error}') from None


# ----------------------------------------------------------------------------------------------
# Dataset
# ----------------------------------------------------------------------------------------------

class HomographyPairDataset(Dataset):
    """Pairs of one grey image and its random homographic warp, with photometric changes.

    Sample ``index`` uses image ``index % num_images`` and the generator
    ``training.loop.item_rng(seed, epoch, index)`` (``set_epoch`` is called by the ``Trainer``),
    so a sample is reproducible and every epoch draws new homographies.

    Args:
        images: image files/folders (see ``list_images``) and/or (H, W) uint8 arrays (kept in
            memory; files are read on access).
        size: (height, width) of the training images (multiples of 8).
        length: number of samples (virtual epoch length).
        seed: base seed.
        homography: ``HomographyConfig``.
        photometric: ``PhotometricConfig`` or None for no photometric change.
        crop_scale: (min, max) fraction of the source's shorter side covered by the crop before
            the resize to ``size``.

    Each item is a dict:
        ``image0``, ``image1``: (1, H, W) float32 in [0, 1];
        ``H_1_0``: (3, 3) float32, maps image-0 pixels to image-1 pixels;
        ``mask0``, ``mask1``: (H, W) bool, pixels with source content (image 1 has none where
        the warp leaves the source image).
    """

    def __init__(self, images: Sequence[Union[str, Path, np.ndarray]],
                 size: Tuple[int, int] = (240, 320), length: int = 10000, seed: int = 0,
                 homography: Optional[HomographyConfig] = None,
                 photometric: Optional[PhotometricConfig] = PhotometricConfig(),
                 crop_scale: Tuple[float, float] = (0.6, 1.0)):
        """Collect the sources and check the arguments (see the class docstring)."""
        height, width = int(size[0]), int(size[1])
        if height < 16 or width < 16 or height % 8 or width % 8:
            raise ValueError(f'size must be >= 16 and multiples of 8, got {size}')
        if length < 1:
            raise ValueError(f'length must be >= 1, got {length}')
        if not 0.0 < crop_scale[0] <= crop_scale[1] <= 1.0:
            raise ValueError(f'crop_scale must satisfy 0 < min <= max <= 1, got {crop_scale}')
        self.sources: List[Union[Path, np.ndarray]] = []
        paths = []
        for item in images:
            if isinstance(item, np.ndarray):
                if item.ndim != 2 or item.dtype != np.uint8:
                    raise ValueError(f'image arrays must be (H, W) uint8, got {item.shape} '
                                     f'{item.dtype}')
                self.sources.append(item)
            else:
                paths.append(item)
        if paths:
            self.sources.extend(list_images(paths))
        if not self.sources:
            raise ValueError('no source images given')
        self.size = (height, width)
        self.length = int(length)
        self.seed = int(seed)
        self.homography = homography or HomographyConfig()
        self.photometric = photometric
        self.crop_scale = (float(crop_scale[0]), float(crop_scale[1]))
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose random draws ``__getitem__`` uses."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Return the virtual length."""
        return self.length

    def _source(self, index: int) -> np.ndarray:
        source = self.sources[index % len(self.sources)]
        return source if isinstance(source, np.ndarray) else read_gray(source)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        """Return sample ``index`` (see the class docstring)."""
        if not 0 <= index < self.length:
            raise IndexError(index)
        rng = item_rng(self.seed, self.epoch, int(index))
        src = self._source(index)
        height, width = self.size
        # Crop: an axis-aligned region of the source with the training aspect ratio.
        side_scale = rng.uniform(*self.crop_scale)
        crop_w = min(src.shape[1], src.shape[0] * width / height) * side_scale
        crop_h = crop_w * height / width
        x0 = rng.uniform(0, src.shape[1] - crop_w)
        y0 = rng.uniform(0, src.shape[0] - crop_h)
        zoom = width / crop_w
        # A_0_src maps source pixels to image-0 pixels (pixel centres at integers).
        A_0_src = np.array([[zoom, 0.0, (0.5 - x0) * zoom - 0.5],
                            [0.0, zoom, (0.5 - y0) * zoom - 0.5],
                            [0.0, 0.0, 1.0]])
        H_1_0 = sample_homography(rng, height, width, self.homography)
        src_f = src.astype(np.float32) / 255.0
        if zoom < 1.0:   # anti-alias before shrinking
            src_f = cv2.GaussianBlur(src_f, (0, 0), 0.5 / zoom)
        ones = np.ones(src.shape, np.uint8)
        out = []
        for M in (A_0_src, H_1_0 @ A_0_src):
            warped = cv2.warpPerspective(src_f, M, (width, height), flags=cv2.INTER_LINEAR,
                                         borderMode=cv2.BORDER_CONSTANT, borderValue=0)
            valid = cv2.warpPerspective(ones, M, (width, height), flags=cv2.INTER_NEAREST,
                                        borderMode=cv2.BORDER_CONSTANT, borderValue=0) > 0
            if self.photometric is not None:
                warped = photometric_augment(rng, warped, self.photometric)
            out.append((np.where(valid, warped, 0.0).astype(np.float32), valid))
        (image0, mask0), (image1, mask1) = out
        return {
            'image0': torch.from_numpy(image0)[None],
            'image1': torch.from_numpy(image1)[None],
            'H_1_0': torch.from_numpy(H_1_0.astype(np.float32)),
            'mask0': torch.from_numpy(mask0),
            'mask1': torch.from_numpy(mask1),
        }


# ----------------------------------------------------------------------------------------------
# Ground-truth correspondences
# ----------------------------------------------------------------------------------------------

def warp_points(H: torch.Tensor, points: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Apply batched homographies to points.

    Args:
        H: (B, 3, 3) homographies.
        points: (B, N, 2) pixel coordinates.

    Returns:
        (warped (B, N, 2), valid (B, N) bool), ``valid`` false for points sent to or behind the
        line at infinity.
    """
    hom = torch.cat([points, torch.ones_like(points[..., :1])], -1) @ H.transpose(1, 2)
    valid = hom[..., 2] > 1e-8
    z = torch.where(valid, hom[..., 2], torch.ones_like(hom[..., 2]))
    return hom[..., :2] / z[..., None], valid


def coarse_grid(height_c: int, width_c: int, scale: float, offset: float = 0.0,
                device: Optional[torch.device] = None) -> torch.Tensor:
    """Return the (height_c * width_c, 2) image positions of the coarse cells, row-major.

    Args:
        height_c: coarse rows.
        width_c: coarse columns.
        scale: coarse stride in pixels.
        offset: image position of cell (0, 0) along each axis (pixels).
        device: torch device.

    Returns:
        (L, 2) float32 (x, y) pixel positions, cell ``i`` at ``(i % width_c, i // width_c)``.
    """
    ys, xs = torch.meshgrid(torch.arange(height_c, device=device, dtype=torch.float32),
                            torch.arange(width_c, device=device, dtype=torch.float32),
                            indexing='ij')
    return torch.stack([xs.reshape(-1), ys.reshape(-1)], -1) * scale + offset


def _sample_mask(mask: Optional[torch.Tensor], points: torch.Tensor,
                 inside: torch.Tensor) -> torch.Tensor:
    if mask is None:
        return inside
    B, H, W = mask.shape
    xi = points[..., 0].round().long().clamp(0, W - 1)
    yi = points[..., 1].round().long().clamp(0, H - 1)
    batch = torch.arange(B, device=mask.device)[:, None].expand_as(xi)
    return inside & mask[batch, yi, xi].bool()


@torch.no_grad()
def coarse_matches_from_homography(H_1_0: torch.Tensor, hw0_c: Tuple[int, int],
                                   hw1_c: Tuple[int, int], scale: float, offset: float = 0.0,
                                   mask0: Optional[torch.Tensor] = None,
                                   mask1: Optional[torch.Tensor] = None
                                   ) -> Dict[str, torch.Tensor]:
    """Ground-truth coarse matches of a homography, LoFTR style (mutual nearest cells).

    Cell ``i`` of image 0 is warped to image 1 and rounded to the nearest coarse cell ``j``;
    the match ``(i, j)`` is kept when ``j`` lies inside image 1 (and its pixel is valid in
    ``mask1``), cell ``i`` is valid in ``mask0``, and warping cell ``j`` back with
    ``H_1_0^-1`` rounds to ``i`` again (mutual nearest neighbours; this removes many-to-one
    matches when image 1 is zoomed out).

    Args:
        H_1_0: (B, 3, 3) homographies mapping image-0 pixels to image-1 pixels.
        hw0_c: (h0, w0) coarse size of image 0.
        hw1_c: (h1, w1) coarse size of image 1.
        scale: coarse stride in pixels (8 for LoFTR).
        offset: image position of coarse cell (0, 0) (see the module docstring).
        mask0: optional (B, H0, W0) bool, valid pixels of image 0.
        mask1: optional (B, H1, W1) bool, valid pixels of image 1.

    Returns:
        dict with ``conf_matrix_gt`` (B, L0, L1) float32 (1 at matches), ``b_ids``, ``i_ids``,
        ``j_ids`` (K,) int64, ``w_pt0`` (B, L0, 2) cells of image 0 warped to image 1 (pixels),
        ``pt1`` (B, L1, 2) cell positions of image 1 (pixels), ``matchable0`` (B, L0) and
        ``matchable1`` (B, L1) bool: cells that the warp (or its inverse) maps inside the
        other image (``h * scale`` by ``w * scale`` pixels) onto valid mask pixels, i.e. cells
        that have a true correspondence (whether or not it passes the mutual check).

    Raises:
        ValueError: on bad shapes.
    """
    if H_1_0.ndim != 3 or H_1_0.shape[1:] != (3, 3):
        raise ValueError(f'H_1_0 must be (B, 3, 3), got {tuple(H_1_0.shape)}')
    B = H_1_0.shape[0]
    device = H_1_0.device
    H = H_1_0.double()
    h0, w0 = int(hw0_c[0]), int(hw0_c[1])
    h1, w1 = int(hw1_c[0]), int(hw1_c[1])
    pt0 = coarse_grid(h0, w0, scale, offset, device).double()[None].expand(B, -1, -1)
    pt1 = coarse_grid(h1, w1, scale, offset, device).double()[None].expand(B, -1, -1)
    w_pt0, ok0 = warp_points(H, pt0)
    w_pt1, ok1 = warp_points(torch.linalg.inv(H), pt1)

    def nearest(points, ok, h, w):
        cell = ((points - offset) / scale).round()
        inside = ok & (cell[..., 0] >= 0) & (cell[..., 0] < w) & (cell[..., 1] >= 0) \
            & (cell[..., 1] < h)
        cell = cell.nan_to_num(0.0).clamp(-1, max(h, w) + 1).long()
        index = cell[..., 1] * w + cell[..., 0]
        return torch.where(inside, index, torch.full_like(index, -1)), inside

    def in_image(points, ok, h, w):
        return ok & (points[..., 0] >= -0.5) & (points[..., 0] < w * scale - 0.5) \
            & (points[..., 1] >= -0.5) & (points[..., 1] < h * scale - 0.5)

    j_of_i, inside01 = nearest(w_pt0, ok0, h1, w1)
    i_of_j, inside10 = nearest(w_pt1, ok1, h0, w0)
    valid0 = _sample_mask(mask0, pt0, torch.ones_like(inside01)) & inside01
    valid0 = _sample_mask(mask1, w_pt0, valid0)
    valid1 = _sample_mask(mask1, pt1, inside10)
    matchable0 = _sample_mask(mask0, pt0, in_image(w_pt0, ok0, h1, w1))
    matchable0 = _sample_mask(mask1, w_pt0, matchable0)
    matchable1 = _sample_mask(mask1, pt1, in_image(w_pt1, ok1, h0, w0))
    matchable1 = _sample_mask(mask0, w_pt1, matchable1)
    i_of_j = torch.where(valid1, i_of_j, torch.full_like(i_of_j, -1))
    loop = torch.gather(i_of_j, 1, j_of_i.clamp(min=0))
    arange = torch.arange(h0 * w0, device=device)[None]
    correct = valid0 & (loop == arange)
    b_ids, i_ids = torch.nonzero(correct, as_tuple=True)
    j_ids = j_of_i[b_ids, i_ids]
    conf_gt = torch.zeros(B, h0 * w0, h1 * w1, device=device)
    conf_gt[b_ids, i_ids, j_ids] = 1.0
    return {'conf_matrix_gt': conf_gt, 'b_ids': b_ids, 'i_ids': i_ids, 'j_ids': j_ids,
            'w_pt0': w_pt0.float(), 'pt1': pt1.float(), 'matchable0': matchable0,
            'matchable1': matchable1}


def fine_offsets_gt(w_pt0: torch.Tensor, pt1: torch.Tensor, b_ids: torch.Tensor,
                    i_ids: torch.Tensor, j_ids: torch.Tensor, fine_scale: float,
                    radius: float) -> torch.Tensor:
    """Ground-truth fine offsets in window units, as LoFTR's ``spvs_fine``.

    The fine window around coarse cell ``j`` of image 1 spans ``+-radius`` fine pixels, i.e.
    ``+-radius * fine_scale`` image pixels; the target is where cell ``i`` of image 0 really
    lands, relative to the cell centre, in those units (values beyond +-1 are outside the
    window and ignored by the fine loss).

    Args:
        w_pt0: (B, L0, 2) image-0 cells warped to image 1 (``coarse_matches_from_homography``).
        pt1: (B, L1, 2) image-1 cell positions.
        b_ids: (K,) batch indices.
        i_ids: (K,) image-0 cell indices.
        j_ids: (K,) image-1 cell indices.
        fine_scale: fine stride in pixels (2 for LoFTR).
        radius: half window size in fine pixels (``fine_window_size // 2``).

    Returns:
        (K, 2) float32 (dx, dy) targets.
    """
    return (w_pt0[b_ids, i_ids] - pt1[b_ids, j_ids]) / (fine_scale * radius)
