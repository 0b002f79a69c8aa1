# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""KITTI odometry sequence (left grey camera, else left colour camera) -> rosbag2.

Layout::

    <sequence>/image_0/%06d.png  (or image_l/)  8-bit grey, rectified; or, where the colour
                           download alone is there, image_2/ (left colour camera, P2)
    <sequence>/calib.txt   'P0: 12 floats' lines, or bare lines of 12 floats (first line = P0)
    <sequence>/poses.txt   optional; 12 floats per frame, row-major 3x4 T_world_cam0 (metres)
    <sequence>/times.txt   optional; seconds since the sequence start, one per frame

KITTI's poses are those of the grey camera 0. For ``image_2/`` they are moved to camera 2
(``T_world_cam2 = T_world_cam0 @ T_cam0_cam2``, ``T_cam0_cam2`` the rectified baseline
``-K^-1 P2[:, 3]``), so the ground truth is the pose of the camera whose images are written.

The official odometry download keeps the poses apart, ``dataset/poses/NN.txt`` next to
``dataset/sequences/NN/``: that file is found too (or give it with ``poses=``). Which poses were
used (or that none were found) is logged and returned as ``gt_source``.

Frame ``i`` is the image named ``i`` (``%06d``) and uses line ``i`` of ``poses.txt`` and
``times.txt``. Stamps are the ``times.txt`` seconds as integer nanoseconds, exactly, with no
offset, so results line up with ``times.txt``; without ``times.txt`` frames are 0.1 s apart
(10 Hz) and a warning is logged.

Written topics: ``IMAGE`` (mono8), ``CAMERA_INFO`` (K from P0, no distortion) and, with
``poses.txt``, ``GT_POSE`` at each image stamp.
"""

from __future__ import annotations

from collections.abc import Sequence
from logging import getLogger
from pathlib import Path

import numpy as np

from ...core_types import Camera, check_intrinsics
from ...data import topics
from ...data.bag import BagWriter
from ...data.converters import (check_same_encoding, list_images, read_colour_image,
                                require_dir)
from ...data.messages import seconds_to_ns

logger = getLogger(__name__)

DEFAULT_RATE_HZ = 10.0
#: Image folders read, first found wins, with the projection matrix of their camera.
IMAGE_FOLDERS = (('image_0', 'P0'), ('image_l', 'P0'), ('image_2', 'P2'))


def _numeric_lines(path: Path):
    try:
        with open(path, encoding='utf-8') as handle:
            for number, line in enumerate(handle, start=1):
                line = line.strip()
                if line and not line.startswith('#'):
                    yield number, line
    except UnicodeDecodeError as error:
        raise ValueError(f'{path}: not a text file ({error.reason} at byte '
                         f'{error.start})') from None


def _count_text(values: np.ndarray) -> str:
    """Say what is wrong with a row that should hold 12 finite values."""
    if values.size != 12:
        return f'got {values.size}'
    return f'got {int((~np.isfinite(values)).sum())} NaN or infinite among them'


def read_kitti_calib(path: Path, camera: str = 'P0') -> np.ndarray:
    """Return the (3, 4) float64 projection matrix ``camera`` (``P0``..``P3``) of ``calib.txt``.

    Lines are either ``'P0: v1 ... v12'`` or 12 bare floats (the n-th line is ``Pn``).

    Raises:
        FileNotFoundError: missing file.
        ValueError: malformed line (with its line number) or no such matrix.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'calibration file {path} does not exist')
    bare_index = 0
    for number, line in _numeric_lines(path):
        if ':' in line:
            name, values = line.split(':', 1)
            name = name.strip()
        else:
            name, values = f'P{bare_index}', line
            bare_index += 1
        if name != camera:
            continue
        try:
            P = np.array([float(v) for v in values.split()], dtype=np.float64)
        except ValueError as exc:
            raise ValueError(f'{path}:{number}: malformed {name} ({exc})') from None
        if P.shape != (12,) or not np.all(np.isfinite(P)):
            raise ValueError(f'{path}:{number}: {name} needs 12 finite values, {_count_text(P)}')
        return P.reshape(3, 4)
    raise ValueError(f'{path} has no {camera} projection matrix')


def read_kitti_poses(path: Path) -> np.ndarray:
    """Read ``poses.txt`` as (N, 4, 4) float64 ``T_world_cam`` (metres), values exactly as written.

    Raises:
        ValueError: for a line without 12 finite floats (line number in the message).
    """
    path = Path(path)
    poses = []
    for number, line in _numeric_lines(path):
        try:
            values = np.array([float(v) for v in line.split()], dtype=np.float64)
        except ValueError as exc:
            raise ValueError(f'{path}:{number}: malformed pose line ({exc})') from None
        if values.shape != (12,) or not np.all(np.isfinite(values)):
            raise ValueError(f'{path}:{number}: a pose line needs 12 finite values, '
                             f'{_count_text(values)}')
        T = np.eye(4)
        T[:3, :] = values.reshape(3, 4)
        poses.append(T)
    if not poses:
        raise ValueError(f'{path} has no poses')
    return np.stack(poses)


def read_kitti_times(path: Path) -> list[int]:
    """Read ``times.txt`` (one time in seconds per line) as exact integer nanoseconds.

    Raises:
        ValueError: for a malformed line (line number in the message).
    """
    path = Path(path)
    stamps = []
    for number, line in _numeric_lines(path):
        try:
            stamps.append(seconds_to_ns(line.split()[0]))
        except ValueError as exc:
            raise ValueError(f'{path}:{number}: malformed time ({exc})') from None
        if stamps[-1] < 0:
            raise ValueError(f'{path}:{number}: time {line.split()[0]} s is negative; times '
                             'count seconds from the sequence start')
    if not stamps:
        raise ValueError(f'{path} has no times')
    for index in range(1, len(stamps)):
        if stamps[index] <= stamps[index - 1]:
            raise ValueError(f'{path}: time {index} ({stamps[index] / 1e9:g} s) is not after '
                             f'time {index - 1} ({stamps[index - 1] / 1e9:g} s); frames need '
                             'increasing times')
    return stamps


def camera_from_camera0(P: np.ndarray, P0: np.ndarray) -> np.ndarray:
    """Return ``T_cam0_cam`` (4, 4), metres: the pose of a rectified camera in camera 0's frame.

    KITTI's rectified cameras share one orientation; ``P = K [I | t]`` with ``t`` the
    camera-0 origin seen from that camera, so ``T_cam0_cam`` is the translation ``-K^-1 P[:, 3]``.

    Args:
        P: (3, 4) projection matrix of the camera (``P0`` .. ``P3`` of ``calib.txt``).
        P0: (3, 4) projection matrix of camera 0.

    Raises:
        ValueError: the two left 3x3 blocks differ (not rectified together) or are singular.
    """
    P, P0 = np.asarray(P, np.float64), np.asarray(P0, np.float64)
    if P.shape != (3, 4) or P0.shape != (3, 4):
        raise ValueError(f'projection matrices must be (3, 4), got {P.shape} and {P0.shape}')
    if not np.allclose(P[:, :3], P0[:, :3], rtol=1e-6, atol=1e-9):
        raise ValueError('the camera and camera 0 have different intrinsics: not one '
                         'rectified KITTI rig')
    try:
        t = np.linalg.solve(P[:, :3], P[:, 3])
    except np.linalg.LinAlgError:
        raise ValueError('singular projection matrix') from None
    T_cam0_cam = np.eye(4)
    T_cam0_cam[:3, 3] = -t
    return T_cam0_cam


def _frame_index(path: Path) -> int:
    try:
        return int(path.stem)
    except ValueError:
        raise ValueError(f'{path.name}: KITTI images must be named by frame number '
                         '(%06d.png)') from None


def _check_frame_numbers(images: Sequence[Path], indices: Sequence[int]) -> None:
    """Refuse two files of one frame number; warn about frame numbers without a file."""
    first_file: dict[int, Path] = {}
    for path, index in zip(images, indices):
        if index in first_file:
            raise ValueError(f'{first_file[index].name} and {path.name} in {path.parent} are '
                             f'both frame {index}: keep one file per frame (their poses and '
                             'times would be written twice at one stamp)')
        first_file[index] = path
    missing = sorted(set(range(max(indices) + 1)) - set(indices))
    if missing:
        logger.warning('%s has no image for %d frame numbers (first: %d); those frames are '
                       'left out, the others keep their own poses and times', images[0].parent,
                       len(missing), missing[0])


def find_kitti_poses(sequence_dir: Path) -> Path | None:
    """Return the poses file of a KITTI sequence folder, or None.

    Its own ``poses.txt``, else the official layout's ``<dataset>/poses/<NN>.txt`` for
    ``<dataset>/sequences/<NN>``.
    """
    own = sequence_dir / 'poses.txt'
    if own.is_file():
        return own
    official = sequence_dir.parent.parent / 'poses' / f'{sequence_dir.name}.txt'
    if sequence_dir.parent.name == 'sequences' and official.is_file():
        return official
    return None


def convert_kitti(sequence_dir, output_bag, storage: str = 'mcap',
                  times: Sequence[float | str] | None = None,
                  overwrite: bool = False, poses=None) -> dict[str, object]:
    """Convert a KITTI odometry sequence folder to a rosbag2 bag (see the module docstring).

    Args:
        sequence_dir: folder with ``image_0/``, ``image_l/`` or ``image_2/`` and
            ``calib.txt``.
        output_bag: bag directory to create.
        storage: ``'mcap'`` or ``'sqlite3'``.
        times: per-frame times in seconds (index = frame number) replacing ``times.txt``.
        overwrite: replace an existing bag.
        poses: a poses file (KITTI format) to use instead of the one found
            (:func:`find_kitti_poses`).

    Returns:
        summary dict: ``path``, ``storage``, ``messages`` per topic, ``start_ns``, ``end_ns``,
        ``frames``, ``gt_poses``, ``gt_source`` (the poses file, or None), ``times_source``
        (``'times.txt'``, ``'argument'`` or ``'10 Hz'``), ``K`` (3x3 list), ``image_folder``
        (the folder read).

    Raises:
        FileNotFoundError: missing folder, image folder or ``calib.txt``.
        ValueError: malformed calibration/pose/time lines, too few poses or times.
    """
    sequence_dir = require_dir(sequence_dir, 'KITTI sequence folder')
    folder, projection = next(((sequence_dir / name, matrix) for name, matrix in IMAGE_FOLDERS
                               if (sequence_dir / name).is_dir()), (None, None))
    if folder is None:
        raise FileNotFoundError(f'{sequence_dir} has no '
                                f'{" or ".join(name for name, _ in IMAGE_FOLDERS)} folder')
    images = list_images(folder)
    indices = [_frame_index(p) for p in images]
    _check_frame_numbers(images, indices)
    last = max(indices)

    P0 = read_kitti_calib(sequence_dir / 'calib.txt', 'P0')
    P = P0 if projection == 'P0' else read_kitti_calib(sequence_dir / 'calib.txt', projection)
    T_cam0_cam = camera_from_camera0(P, P0)
    first, first_encoding = read_colour_image(images[0])
    height, width = first.shape[:2]
    camera = Camera(K=P[:, :3], width=width, height=height)
    for problem in check_intrinsics(camera.K, width, height):
        logger.warning('%s: calib.txt %s %s%s', sequence_dir, projection, problem.message,
                       '; eval, replay and the nodes refuse such a CameraInfo'
                       if problem.impossible else '')

    if times is not None:
        stamps = [seconds_to_ns(t if isinstance(t, str) else repr(float(t))) for t in times]
        times_source = 'argument'
    elif (sequence_dir / 'times.txt').is_file():
        stamps = read_kitti_times(sequence_dir / 'times.txt')
        times_source = 'times.txt'
    else:
        logger.warning('%s has no times.txt; assuming %.0f Hz from t = 0', sequence_dir,
                       DEFAULT_RATE_HZ)
        stamps = [i * 100_000_000 for i in range(last + 1)]
        times_source = '10 Hz'
    if len(stamps) <= last:
        raise ValueError(f'{times_source} has {len(stamps)} times but the images go up to '
                         f'frame {last}')

    gt_source = Path(poses) if poses is not None else find_kitti_poses(sequence_dir)
    poses = None
    if gt_source is not None:
        if not gt_source.is_file():
            raise FileNotFoundError(f'poses file {gt_source} does not exist')
        poses = read_kitti_poses(gt_source)
        if len(poses) <= last:
            raise ValueError(f'{gt_source} has {len(poses)} poses but the images go up to '
                             f'frame {last}')
        poses = poses @ T_cam0_cam
        logger.info('ground truth: %s (%d poses%s)', gt_source, len(poses),
                    '' if projection == 'P0' else f", moved from camera 0 to {folder.name}'s "
                    f'camera by {np.linalg.norm(T_cam0_cam[:3, 3]):.3f} m')
    else:
        logger.warning('%s has no poses.txt and no ../../poses/%s.txt (official layout); '
                       'writing no %s: give the poses file with --poses', sequence_dir,
                       sequence_dir.name, topics.GT_POSE)

    order = sorted(range(len(images)), key=lambda k: (stamps[indices[k]], indices[k]))
    with BagWriter(output_bag, storage=storage, overwrite=overwrite) as writer:
        for k in order:
            index, stamp = indices[k], stamps[indices[k]]
            image, encoding = read_colour_image(images[k])
            if image.shape[:2] != (height, width):
                raise ValueError(f'{images[k]}: size differs from the first frame')
            check_same_encoding(images[k], encoding, images[0], first_encoding)
            writer.write_image(topics.IMAGE, stamp, image, encoding, topics.CAMERA_FRAME)
            writer.write_camera_info(topics.CAMERA_INFO, stamp, camera, topics.CAMERA_FRAME)
            if poses is not None:
                try:
                    writer.write_pose(topics.GT_POSE, stamp, poses[index], topics.WORLD_FRAME)
                except ValueError as exc:
                    raise ValueError(f'{gt_source.name}, pose of frame {index} '
                                     f'(line {index + 1}): {exc}') from None
        writer.set_custom_data(topics.GROUND_TRUTH_KEY, 'none' if poses is None else
                               f'{gt_source} ({len(images)} poses on {topics.GT_POSE})')
    summary = writer.summary()
    summary.update(frames=len(images), gt_poses=0 if poses is None else len(images),
                   gt_source=None if gt_source is None else str(gt_source),
                   times_source=times_source, K=camera.K.tolist())
    summary['image_folder'] = folder.name
    logger.info('KITTI %s -> %s: %d frames from %s, GT %s, times from %s', sequence_dir.name,
                output_bag, len(images), folder.name, 'yes' if poses is not None else 'no',
                times_source)
    return summary
