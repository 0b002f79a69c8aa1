# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Image pairs with ground-truth relative pose, for two-view (relative pose) evaluation.

An :class:`ImagePair` holds two grey images, their intrinsics and ``T_0to1``, the rigid
transform that maps points from camera-0 coordinates into camera-1 coordinates
(``T_0to1 = inv(T_world_cam1) @ T_world_cam0``, REP 103 optical frames, metres), which is
what the LoFTR / SuperGlue evaluation protocol expects.

Four sources:

* :func:`load_pairs_npz`: pairs given explicitly in an ``.npz`` file (format in its docstring;
  :func:`save_pairs_npz` writes it);
* :func:`load_pairs_txt`: a SuperGlue / LoFTR ``pairs_with_gt.txt`` pair list (image names,
  EXIF rotations, K0, K1, T_0to1 per line); :func:`load_pairs` picks the reader by suffix;
* ``relperception.evaluation.bag_pairs.pairs_from_bag``: pairs sampled at chosen frame gaps
  from a rosbag2 recording written by the converters or ``relperception synth`` (image,
  CameraInfo and ground-truth pose topics; the ground truth interpolated with
  ``relperception.evaluation.trajectory``);
* :func:`synthetic_pairs`: pairs rendered by :mod:`relperception.data.synthetic` (exact poses).
"""

from __future__ import annotations

from dataclasses import dataclass
import logging
from pathlib import Path
from typing import Iterable, List, Optional, Sequence
import zipfile
import zlib

import cv2
import numpy as np
from relperception.atomic_files import atomic_path
from relperception.core_types import check_intrinsics
from relperception.imaging import read_image_file
from relperception.transforms import check_transform, invert_transform, nearest_rigid

logger = logging.getLogger(__name__)


@dataclass
class ImagePair:
    """Two grey images with intrinsics and ground-truth relative pose.

    Attributes:
        image0: (H0, W0) uint8 grey image.
        image1: (H1, W1) uint8 grey image.
        K0: (3, 3) float64 camera matrix of ``image0`` in pixels; one that
            :func:`relperception.core_types.check_intrinsics` finds impossible for the image
            (a principal point outside it: K of another image size; a field of view, fx / fy
            or skew no lens gives) is refused (ValueError).
        K1: (3, 3) float64 camera matrix of ``image1`` in pixels (the same rule).
        T_0to1: (4, 4) float64 rigid transform from camera-0 to camera-1 coordinates, metres.
        name: identifier for reports (e.g. ``'kitti06:12-17'``).
        source: where the pair comes from (bag path, npz file, ``'synthetic'``).
        gap: frame gap between the two images when sampled from a sequence, else None.
    """

    image0: np.ndarray
    image1: np.ndarray
    K0: np.ndarray
    K1: np.ndarray
    T_0to1: np.ndarray
    name: str = ''
    source: str = ''
    gap: Optional[int] = None

    def __post_init__(self):
        for attr in ('image0', 'image1'):
            image = getattr(self, attr)
            if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 2 \
                    or image.size == 0:
                raise ValueError(f'ImagePair.{attr} must be a non-empty (H, W) uint8 grey '
                                 f'array, got {getattr(image, "dtype", type(image))} of shape '
                                 f'{getattr(image, "shape", None)}')
        for attr, image in (('K0', self.image0), ('K1', self.image1)):
            K = np.array(getattr(self, attr), dtype=np.float64, order='C', copy=True)
            if K.shape != (3, 3) or not np.isfinite(K).all() or K[0, 0] <= 0 or K[1, 1] <= 0:
                raise ValueError(f'ImagePair.{attr} must be a finite (3, 3) camera matrix with '
                                 f'fx, fy > 0, got {K.tolist()}')
            height, width = image.shape
            impossible = [p.message for p in check_intrinsics(K, width, height)
                          if p.impossible]
            if impossible:
                raise ValueError(f'ImagePair.{attr} ' + '; '.join(impossible))
            setattr(self, attr, K)
        self.T_0to1 = check_transform(self.T_0to1, 'T_0to1').copy()


def relative_transform(T_world_cam0, T_world_cam1) -> np.ndarray:
    """Return ``T_0to1 = inv(T_world_cam1) @ T_world_cam0`` (camera 0 -> camera 1), (4, 4)."""
    T0 = check_transform(T_world_cam0, 'T_world_cam0')
    T1 = check_transform(T_world_cam1, 'T_world_cam1')
    return invert_transform(T1) @ T0


def _to_gray(image: np.ndarray, what: str) -> np.ndarray:
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise ValueError(f'{what} must be uint8, got {image.dtype}')
    if image.ndim == 3 and image.shape[2] == 3:
        return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    if image.ndim != 2:
        raise ValueError(f'{what} must be (H, W) grey or (H, W, 3) RGB, got {image.shape}')
    return np.ascontiguousarray(image)


def check_gaps(gaps: Iterable[int]) -> List[int]:
    """Return the frame gaps sorted and without repeats; raise ValueError unless all are >= 1."""
    gaps = sorted({int(g) for g in gaps})
    if not gaps or gaps[0] < 1:
        raise ValueError(f'gaps must be one or more integers >= 1, got {gaps}')
    return gaps


# -- explicit pairs -------------------------------------------------------------------------------

def load_pairs_npz(path) -> List[ImagePair]:
    """Read pairs with ground truth from an ``.npz`` file.

    Arrays (``N`` pairs; no pickled objects):

    * ``K0``, ``K1``: (N, 3, 3) or (3, 3) (shared) float camera matrices, pixels;
    * ``T_0to1``: (N, 4, 4) float camera-0 -> camera-1 transforms, metres;
    * images, either ``image0``, ``image1``: (N, H, W) uint8 grey or (N, H, W, 3) uint8 RGB,
      or ``paths0``, ``paths1``: (N,) strings, image files relative to the npz file's folder
      (read with OpenCV, converted to grey);
    * optional ``names``: (N,) strings; optional ``gaps``: (N,) int frame gaps (values < 1
      mean 'not from a sequence').

    Args:
        path: the ``.npz`` file.

    Returns:
        the pairs, in file order.

    Raises:
        FileNotFoundError: the file (or an image file) does not exist.
        ValueError: missing arrays, inconsistent counts or shapes, unreadable images.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'pairs file {path} does not exist')
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {key: archive[key] for key in archive.files}
    except (ValueError, OSError) as exc:   # e.g. an array of Python objects (pickled)
        raise ValueError(f'cannot read pairs file {path}: {exc}') from exc
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:   # cut off or not an npz
        raise ValueError(f'cannot read pairs file {path}: not a complete .npz archive '
                         f'({exc})') from exc
    keys = set(data)
    required = {'K0', 'K1', 'T_0to1'}
    if not required <= keys:
        raise ValueError(f'{path} lacks arrays {sorted(required - keys)}; it has '
                         f'{sorted(keys)}')
    T = np.asarray(data['T_0to1'], dtype=np.float64)
    if T.ndim != 3 or T.shape[1:] != (4, 4):
        raise ValueError(f'{path}: T_0to1 must be (N, 4, 4), got {T.shape}')
    n = len(T)
    Ks = []
    for key in ('K0', 'K1'):
        K = np.asarray(data[key], dtype=np.float64)
        if K.shape == (3, 3):
            K = np.broadcast_to(K, (n, 3, 3))
        if K.shape != (n, 3, 3):
            raise ValueError(f'{path}: {key} must be (3, 3) or ({n}, 3, 3), got {K.shape}')
        Ks.append(K)
    if {'image0', 'image1'} <= keys:
        images = [data['image0'], data['image1']]
        for key, stack in zip(('image0', 'image1'), images):
            if len(stack) != n:
                raise ValueError(f'{path}: {key} has {len(stack)} images for {n} poses')
        images = [[_to_gray(stack[i], f'{path}: {key}[{i}]') for i in range(n)]
                  for key, stack in zip(('image0', 'image1'), images)]
    elif {'paths0', 'paths1'} <= keys:
        images = []
        for key in ('paths0', 'paths1'):
            names = [str(p) for p in data[key]]
            if len(names) != n:
                raise ValueError(f'{path}: {key} has {len(names)} paths for {n} poses')
            images.append([_read_gray(path.parent / name) for name in names])
    else:
        raise ValueError(f'{path} needs image0/image1 arrays or paths0/paths1 file names; '
                         f'it has {sorted(keys)}')
    names = ([str(s) for s in data['names']] if 'names' in keys
             else [f'{path.stem}:{i}' for i in range(n)])
    gaps = ([int(g) if int(g) >= 1 else None for g in data['gaps']] if 'gaps' in keys
            else [None] * n)
    if len(names) != n or len(gaps) != n:
        raise ValueError(f'{path}: names / gaps must have {n} entries')
    pairs = []
    for i in range(n):
        try:
            pairs.append(ImagePair(images[0][i], images[1][i], Ks[0][i], Ks[1][i], T[i],
                                   name=names[i], source=str(path), gap=gaps[i]))
        except ValueError as exc:
            raise ValueError(f'{path}: pair {i} ({names[i]}): {exc}') from None
    return pairs


def _read_gray(path: Path) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f'image {path} does not exist')
    return read_image_file(path, cv2.IMREAD_GRAYSCALE)


PAIRS_TXT_FIELDS = 38
"""Fields of a ``pairs_with_gt.txt`` line: name0 name1 rot0 rot1 K0 (9) K1 (9) T_0to1 (16)."""

ROTATION_TOLERANCE = 1e-3
"""Largest ``|R @ R.T - I|`` entry accepted (and snapped to SO(3)) in a text ``T_0to1``."""


def load_pairs_txt(path, image_dir=None, max_pairs: Optional[int] = None) -> List[ImagePair]:
    """Read a SuperGlue / LoFTR pair list with ground truth (``pairs_with_gt.txt``).

    One pair per line, 38 whitespace-separated fields::

        name0 name1 rot0 rot1 K0(9) K1(9) T_0to1(16)

    * ``name0``, ``name1``: image files relative to ``image_dir`` (SuperGlue's ``--input_dir``),
      read with OpenCV as grey at their stored size (no resizing: K must be for that size);
    * ``rot0``, ``rot1``: EXIF rotations, integers 0-3: image ``i`` is rotated by
      ``rot_i * 90`` degrees counter-clockwise as SuperGlue's ``read_image`` does
      (``np.rot90(image, rot_i)``, so a (H, W) image becomes (W, H) for odd ``rot_i``); the
      camera matrix and ``T_0to1`` are rotated with it (an in-plane rotation of the camera
      frame about its optical axis) so that the ground truth describes the rotated images;
    * ``K0``, ``K1``: row-major (3, 3) camera matrices in pixels of the stored images
      (``[fx, s, cx; 0, fy, cy; 0, 0, 1]``, fx, fy > 0; skew ``s`` must be 0 when rotating by
      90 or 270 degrees);
    * ``T_0to1``: row-major (4, 4) rigid transform from camera-0 to camera-1 coordinates
      (metres for ScanNet; an arbitrary but consistent unit for SfM data such as MegaDepth).
      Rotation blocks rounded in the text (``|R @ R.T - I|`` up to :data:`ROTATION_TOLERANCE`)
      are snapped to the nearest rotation.

    Blank lines and lines starting with ``#`` are skipped. An image listed several times is
    read once.

    Args:
        path: the ``.txt`` pair list.
        image_dir: folder the image names are relative to (None: the list's folder).
        max_pairs: read at most this many pairs (the first ones; None: all).

    Returns:
        the pairs in file order; ``name`` is ``'<name0> - <name1>'``, ``source`` the list's path,
        ``gap`` None.

    Raises:
        FileNotFoundError: the list or ``image_dir`` does not exist.
        ValueError: a bad ``max_pairs``, a list that is not UTF-8 text, or a line (named by file
            and line number) with another number of fields than 38, a field that is not a
            (finite) number, a rotation outside 0-3, a missing or unreadable image, an invalid
            or singular camera matrix, or a ``T_0to1`` that is not rigid.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'pairs file {path} does not exist')
    if max_pairs is not None and (isinstance(max_pairs, bool) or int(max_pairs) < 1):
        raise ValueError(f'max_pairs must be >= 1 or None, got {max_pairs}')
    image_dir = path.parent if image_dir is None else Path(image_dir)
    if not image_dir.is_dir():
        raise FileNotFoundError(f'image folder {image_dir} (for {path}) does not exist')
    try:
        text = path.read_bytes().decode('utf-8')
    except UnicodeDecodeError as exc:
        raise ValueError(f'{path} is not a UTF-8 text pair list ({exc})') from exc
    images: dict = {}   # (file, rotation) -> grey image, shared by the pairs that list it
    pairs: List[ImagePair] = []
    for number, line in enumerate(text.split('\n'), start=1):
        fields = line.split()
        if not fields or fields[0].startswith('#'):
            continue
        if max_pairs is not None and len(pairs) >= int(max_pairs):
            break
        pairs.append(_parse_pair_line(fields, f'{path}, line {number}', image_dir, images,
                                      str(path)))
    logger.info('%s: %d pairs', path, len(pairs))
    return pairs


def load_pairs(path, image_dir=None) -> List[ImagePair]:
    """Read pairs with ground truth from an ``.npz`` file or a ``.txt`` pair list.

    Args:
        path: ``.npz`` (:func:`load_pairs_npz`; image paths relative to its folder) or ``.txt``
            (:func:`load_pairs_txt`, the SuperGlue / LoFTR ``pairs_with_gt.txt`` format).
        image_dir: ``.txt`` only: folder the image names are relative to (None: the list's
            folder); ignored for ``.npz``.

    Returns:
        the pairs, in file order.

    Raises:
        FileNotFoundError: the file (or an image) does not exist.
        ValueError: another suffix than ``.npz`` / ``.txt``, or a malformed file.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == '.npz':
        return load_pairs_npz(path)
    if suffix == '.txt':
        return load_pairs_txt(path, image_dir)
    raise ValueError(f'{path}: pair files must be .npz (arrays K0, K1, T_0to1 and images) or '
                     f'.txt (SuperGlue / LoFTR pairs_with_gt.txt), got suffix {path.suffix!r}')


def _parse_pair_line(fields: List[str], where: str, image_dir: Path, images: dict,
                     source: str) -> ImagePair:
    if len(fields) != PAIRS_TXT_FIELDS:
        raise ValueError(f'{where}: {len(fields)} fields, expected {PAIRS_TXT_FIELDS}: name0 '
                         'name1 rot0 rot1, K0 (9 numbers), K1 (9), T_0to1 (16)')
    rotations = []
    for index, key in ((2, 'rot0'), (3, 'rot1')):
        try:
            rotation = int(fields[index])
        except ValueError:
            rotation = -1
        if not 0 <= rotation <= 3:
            raise ValueError(f'{where}: {key} must be an integer 0-3 (multiples of 90 '
                             f'degrees), got {fields[index]!r}')
        rotations.append(rotation)
    numbers = np.empty(PAIRS_TXT_FIELDS - 4)
    for index, text in enumerate(fields[4:]):
        try:
            numbers[index] = float(text)
        except ValueError:
            numbers[index] = np.nan
        if not np.isfinite(numbers[index]):
            raise ValueError(f'{where}: field {index + 5} ({_field_name(index)}) must be a '
                             f'finite number, got {text!r}')
    Ks = [_check_text_K(numbers[:9].reshape(3, 3), 'K0', where),
          _check_text_K(numbers[9:18].reshape(3, 3), 'K1', where)]
    T_0to1 = _check_text_T(numbers[18:].reshape(4, 4), where)
    grey = []
    in_plane = []
    for i, (name, rotation) in enumerate(zip(fields[:2], rotations)):
        file = image_dir / name
        if (file, rotation) not in images:
            if not file.is_file():
                raise ValueError(f'{where}: image{i} {file} does not exist')
            try:
                image = _read_gray(file)
            except ValueError as exc:
                raise ValueError(f'{where}: {exc}') from exc
            images[(file, rotation)] = np.ascontiguousarray(np.rot90(image, rotation))
        image = images[(file, rotation)]
        height, width = image.shape if rotation % 2 == 0 else image.shape[::-1]
        if rotation % 2 and abs(Ks[i][0, 1]) > 1e-9 * Ks[i][0, 0]:
            raise ValueError(f'{where}: K{i} has skew {Ks[i][0, 1]}; a camera with skew cannot '
                             f'be rotated by {rotation * 90} degrees')
        pixels, R = _rot90_maps(rotation, width, height)
        Ks[i] = pixels @ Ks[i] @ R.T
        in_plane.append(R)
        grey.append(image)
    T_0to1 = T_0to1.copy()
    T_0to1[:3, :3] = in_plane[1] @ T_0to1[:3, :3] @ in_plane[0].T
    T_0to1[:3, 3] = in_plane[1] @ T_0to1[:3, 3]
    try:
        return ImagePair(grey[0], grey[1], Ks[0], Ks[1], T_0to1,
                         name=f'{fields[0]} - {fields[1]}', source=source)
    except ValueError as exc:
        raise ValueError(f'{where}: {exc}') from None


def _field_name(index: int) -> str:
    """Return the name of number ``index`` (0 = first K0 entry) of a pair-list line."""
    if index < 18:
        return f'K{index // 9}[{index % 9 // 3}, {index % 3}]'
    return f'T_0to1[{(index - 18) // 4}, {(index - 18) % 4}]'


def _check_text_K(K: np.ndarray, name: str, where: str) -> np.ndarray:
    if not np.allclose(K[2], (0.0, 0.0, 1.0), rtol=0.0, atol=1e-9) or abs(K[1, 0]) > 1e-9:
        raise ValueError(f'{where}: {name} must be [fx, s, cx, 0, fy, cy, 0, 0, 1], got '
                         f'{K.ravel().tolist()}')
    if K[0, 0] <= 0 or K[1, 1] <= 0:
        raise ValueError(f'{where}: {name} is singular or invalid: fx, fy must be > 0, got '
                         f'{K[0, 0]}, {K[1, 1]}')
    return K


def _check_text_T(T: np.ndarray, where: str) -> np.ndarray:
    R = T[:3, :3]
    error = float(np.abs(R @ R.T - np.eye(3)).max())
    if not np.allclose(T[3], (0.0, 0.0, 0.0, 1.0), rtol=0.0, atol=1e-9) \
            or error > ROTATION_TOLERANCE or np.linalg.det(R) <= 0:
        raise ValueError(f'{where}: T_0to1 is not a rigid transform (last row '
                         f'{T[3].tolist()}, |R R^T - I| = {error:.2g}, det R = '
                         f'{np.linalg.det(R):.3g}; expected [0, 0, 0, 1], <= '
                         f'{ROTATION_TOLERANCE:g}, +1)')
    return nearest_rigid(T)


def _rot90_maps(rotation: int, width: int, height: int):
    """Return the pixel map (3, 3) and camera rotation (3, 3) of ``np.rot90(image, rotation)``.

    ``np.rot90`` turns the (height, width) image counter-clockwise on screen: the pixel
    ``(x, y)`` moves to ``(y, width - 1 - x)`` (rotation 1), ``(width - 1 - x, height - 1 - y)``
    (2) or ``(height - 1 - y, x)`` (3), i.e. ``p' = A @ p`` (homogeneous). The camera frame
    turns with it about the optical axis: ``X' = R @ X`` with the 2 x 2 block of ``A``, so the
    rotated camera matrix is ``A @ K @ R.T``.
    """
    cos, sin = ((1, 0), (0, -1), (-1, 0), (0, 1))[rotation]   # of -rotation * 90 degrees
    offset = ((0, 0), (0, width - 1), (width - 1, height - 1), (height - 1, 0))[rotation]
    R = np.array([[cos, -sin, 0.0], [sin, cos, 0.0], [0.0, 0.0, 1.0]])
    pixels = R.copy()
    pixels[:2, 2] = offset
    return pixels, R


def save_pairs_npz(path, pairs: Sequence[ImagePair]) -> Path:
    """Write pairs in the format of :func:`load_pairs_npz` (images stored in the file).

    Args:
        path: output ``.npz`` (parent folders are created).
        pairs: one or more pairs; all images must have the same size.

    Returns:
        the written path.

    Raises:
        ValueError: no pairs, or images of different sizes.
    """
    if not pairs:
        raise ValueError('no pairs to save')
    shapes = {p.image0.shape for p in pairs} | {p.image1.shape for p in pairs}
    if len(shapes) != 1:
        raise ValueError(f'save_pairs_npz needs images of one size, got {sorted(shapes)}; '
                         'write files and use paths0/paths1 instead')
    path = Path(path)
    if path.suffix != '.npz':
        raise ValueError(f'{path}: the pairs file name must end in .npz')
    with atomic_path(path) as temporary:
        np.savez_compressed(
            temporary, image0=np.stack([p.image0 for p in pairs]),
            image1=np.stack([p.image1 for p in pairs]), K0=np.stack([p.K0 for p in pairs]),
            K1=np.stack([p.K1 for p in pairs]), T_0to1=np.stack([p.T_0to1 for p in pairs]),
            names=np.array([p.name for p in pairs]),
            gaps=np.array([-1 if p.gap is None else p.gap for p in pairs]))
    return path


def synthetic_pairs(num_pairs: int, gaps: Iterable[int] = (1,), seed: int = 0,
                    width: int = 640, height: int = 480, fps: float = 10.0,
                    sequence_frames: int = 300) -> List[ImagePair]:
    """Render pairs with exact ground truth from a synthetic scene (:mod:`..synthetic`).

    ``num_pairs`` first frames are spread evenly over a ``sequence_frames`` long loop of the
    scene's trajectory (frame ``i`` at time ``i / fps``); for each of them and each gap the pair
    ``(i, i + gap)`` is rendered. At 10 fps the camera moves 0.04-0.08 m per frame.

    Args:
        num_pairs: number of first frames (>= 1); ``num_pairs * len(gaps)`` pairs result.
        gaps: frame gaps (integers >= 1).
        seed: scene and trajectory seed.
        width: image width in pixels.
        height: image height in pixels.
        fps: frame rate of the trajectory sampling (Hz); lower = wider baselines.
        sequence_frames: length of the sampled trajectory (> max(gaps)).

    Returns:
        the pairs; ``name`` is ``'synthetic<seed>:<i>-<i+gap>'``.

    Raises:
        ValueError: bad arguments.
    """
    from relperception.data.synthetic import SyntheticScene

    gaps = check_gaps(gaps)
    if int(num_pairs) < 1:
        raise ValueError(f'num_pairs must be >= 1, got {num_pairs}')
    if int(sequence_frames) <= gaps[-1]:
        raise ValueError(f'sequence_frames must exceed the largest gap {gaps[-1]}, got '
                         f'{sequence_frames}')
    scene = SyntheticScene(seed=seed, width=width, height=height)
    poses = scene.trajectory(int(sequence_frames), fps)
    last_start = int(sequence_frames) - 1 - gaps[-1]
    starts = sorted({int(round(s)) for s in np.linspace(0, last_start, int(num_pairs))})
    cache: dict = {}

    def gray(index: int) -> np.ndarray:
        if index not in cache:
            rgb, _, _ = scene.render(poses[index])
            cache[index] = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        return cache[index]

    K = scene.camera.K
    pairs = []
    for start in starts:
        for gap in gaps:
            pairs.append(ImagePair(gray(start), gray(start + gap), K, K,
                                   relative_transform(poses[start], poses[start + gap]),
                                   name=f'synthetic{seed}:{start}-{start + gap}',
                                   source='synthetic', gap=gap))
    return pairs
