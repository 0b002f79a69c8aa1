# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""TUM RGB-D benchmark sequence -> rosbag2.

Layout (https://cvg.cit.tum.de/data/datasets/rgbd-dataset/file_formats)::

    <sequence>/rgb/<timestamp>.png      8-bit colour
    <sequence>/depth/<timestamp>.png    uint16, value / 5000 = metres, 0 = no reading
    <sequence>/groundtruth.txt          'timestamp tx ty tz qx qy qz qw' (T_world_cam), '#' comment
    <sequence>/rgb.txt, depth.txt       optional lists 'timestamp filename'

Written topics (stamps are TUM's absolute seconds, converted exactly from the decimal strings):

* ``IMAGE`` (rgb8) and ``CAMERA_INFO`` at every RGB stamp;
* ``DEPTH`` as **32FC1 metres** (NaN where the sensor gave 0), one per RGB frame that has a depth
  frame within 20 ms (the tolerance of TUM's ``associate.py``, paired one to one with the most
  pairs: :func:`associate`), **stamped with the RGB stamp** so that image and depth pair by
  equal stamps; unpaired depth frames are dropped;
* ``GT_POSE`` (PoseStamped, frame ``world``) at every ground-truth line whose stamp lies within
  0.5 s of the RGB time range, at the ground-truth stamp.
"""

from __future__ import annotations

from collections.abc import Sequence
from logging import getLogger
from pathlib import Path
from re import compile as compile_pattern

import numpy as np

from ...core_types import Camera
from ...data import topics
from ...data.bag import BagWriter
from ...data.converters import (check_same_encoding, read_colour_image, read_raw_image,
                                require_dir)
from ...data.messages import seconds_to_ns
from ...transforms import transform_from_quaternion_xyzw

logger = getLogger(__name__)

DEPTH_SCALE = 5000.0
"""TUM depth PNG units per metre."""

MAX_DIFFERENCE_S = 0.02
GT_MARGIN_S = 0.5

# Intrinsics of the RGB cameras (TUM file-format page): fx, fy, cx, cy, plumb_bob k1 k2 p1 p2 k3.
TUM_INTRINSICS = {
    1: (517.3, 516.5, 318.6, 255.3, (0.2624, -0.9531, -0.0054, 0.0026, 1.1633)),
    2: (520.9, 521.0, 325.1, 249.7, (0.2312, -0.7849, -0.0033, -0.0001, 0.9172)),
    3: (535.4, 539.2, 320.1, 247.6, (0.0, 0.0, 0.0, 0.0, 0.0)),
}
_CAMERA_PATTERN = compile_pattern(r'(?<![a-z])(?:freiburg|fr)_?([123])(?![0-9])')


def tum_camera(freiburg: int, width: int = 640, height: int = 480) -> Camera:
    """Return the RGB camera of TUM's Kinect/Xtion ``freiburg`` 1, 2 or 3 (pixels, plumb_bob)."""
    if freiburg not in TUM_INTRINSICS:
        raise ValueError(f'TUM camera must be freiburg 1, 2 or 3, got {freiburg!r}')
    fx, fy, cx, cy, dist = TUM_INTRINSICS[freiburg]
    K = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
    return Camera(K=K, width=width, height=height, distortion=np.array(dist))


def freiburg_from_name(name: str) -> int | None:
    """Return 1, 2 or 3 from a sequence name such as ``rgbd_dataset_freiburg1_xyz`` or ``fr3``."""
    match = _CAMERA_PATTERN.search(name.lower())
    return int(match.group(1)) if match else None


def _data_lines(path: Path):
    """Yield ``(line_number, fields)`` of the non-comment, non-empty lines of a text file."""
    with open(path, encoding='utf-8') as handle:
        for number, line in enumerate(handle, start=1):
            line = line.split('#', 1)[0].strip()
            if line:
                yield number, line.replace(',', ' ').split()


def read_tum_list(path: Path) -> list[tuple[int, str]]:
    """Read an ``rgb.txt`` / ``depth.txt`` list as ``[(stamp_ns, relative file name), ...]``.

    Raises:
        ValueError: for a malformed line (the line number is in the message).
    """
    entries = []
    for number, fields in _data_lines(path):
        if len(fields) != 2:
            raise ValueError(f'{path}:{number}: expected "timestamp filename", got {fields}')
        try:
            entries.append((seconds_to_ns(fields[0]), fields[1]))
        except ValueError as exc:
            raise ValueError(f'{path}:{number}: {exc}') from None
    return entries


def read_tum_trajectory(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a TUM trajectory file (``timestamp tx ty tz qx qy qz qw`` per line).

    Returns:
        stamps (N,) int64 nanoseconds (exact) and poses (N, 4, 4) float64 ``T_world_cam``
        (metres).

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: for a malformed line (line number in the message) or an empty file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'trajectory file {path} does not exist')
    stamps, poses = [], []
    for number, fields in _data_lines(path):
        if len(fields) != 8:
            raise ValueError(f'{path}:{number}: expected 8 values "timestamp tx ty tz qx qy qz '
                             f'qw", got {len(fields)}')
        try:
            stamp = seconds_to_ns(fields[0])
            values = np.array([float(v) for v in fields[1:]])
            if not np.all(np.isfinite(values)):
                raise ValueError('non-finite value')
            T = transform_from_quaternion_xyzw(values[:3], values[3:])
        except ValueError as exc:
            raise ValueError(f'{path}:{number}: malformed pose line ({exc})') from None
        stamps.append(stamp)
        poses.append(T)
    if not stamps:
        raise ValueError(f'trajectory file {path} has no poses')
    return np.array(stamps, dtype=np.int64), np.stack(poses)


def associate(stamps0_ns: Sequence[int], stamps1_ns: Sequence[int],
              max_difference_ns: int = 20_000_000) -> list[tuple[int, int]]:
    """Pair two stamp lists one to one by time difference, as many as possible.

    All pairs with ``|t0 - t1| < max_difference_ns`` are candidates (the rule of TUM's
    ``associate.py``). Among the one-to-one pairings of the candidates, the one with the most
    pairs and, among those, the smallest total difference is taken (an optimal assignment per
    group of overlapping candidates). Taking the closest pairs first, as ``associate.py`` does,
    can leave a frame unpaired whose only candidate went to a neighbour that had another.

    Args:
        stamps0_ns: (N,) integer nanoseconds.
        stamps1_ns: (M,) integer nanoseconds.
        max_difference_ns: strict upper bound on the pairing distance, nanoseconds.

    Returns:
        ``[(i, j), ...]`` index pairs sorted by ``i``.
    """
    a = np.asarray(stamps0_ns, dtype=np.int64).reshape(-1)
    b = np.asarray(stamps1_ns, dtype=np.int64).reshape(-1)
    if max_difference_ns <= 0:
        raise ValueError(f'max_difference_ns must be > 0, got {max_difference_ns}')
    if a.size == 0 or b.size == 0:
        return []
    order = np.argsort(b, kind='stable')
    b_sorted = b[order]
    lo = np.searchsorted(b_sorted, a - max_difference_ns, side='right')
    hi = np.searchsorted(b_sorted, a + max_difference_ns, side='left')
    edges = [(i, int(order[k]), abs(int(a[i]) - int(b_sorted[k])))
             for i in range(a.size) for k in range(lo[i], hi[i])]
    return sorted(_optimal_pairs(edges, a.size))


def _optimal_pairs(edges: list[tuple[int, int, int]], num0: int) -> list[tuple[int, int]]:
    """Most pairs, then least total difference, per connected group of candidate edges."""
    from scipy.optimize import linear_sum_assignment
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if not edges:
        return []
    index1 = sorted({j for _, j, _ in edges})
    column = {j: num0 + n for n, j in enumerate(index1)}
    rows = [i for i, _, _ in edges]
    cols = [column[j] for _, j, _ in edges]
    size = num0 + len(index1)
    graph = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(size, size))
    _, labels = connected_components(graph, directed=False)
    groups: dict[int, list[tuple[int, int, int]]] = {}
    for edge in edges:
        groups.setdefault(int(labels[edge[0]]), []).append(edge)
    pairs = []
    for group in groups.values():
        left = sorted({i for i, _, _ in group})
        right = sorted({j for _, j, _ in group})
        # an unpaired frame costs more than any sum of differences: most pairs first
        missing = float(sum(d for _, _, d in group) + 1)
        cost = np.full((len(left), len(right)), missing)
        position0 = {i: n for n, i in enumerate(left)}
        position1 = {j: n for n, j in enumerate(right)}
        for i, j, difference in group:
            cost[position0[i], position1[j]] = float(difference)
        chosen0, chosen1 = linear_sum_assignment(cost)
        pairs += [(left[r], right[c]) for r, c in zip(chosen0, chosen1)
                  if cost[r, c] < missing]
    return pairs


def _frame_list(sequence_dir: Path, kind: str) -> list[tuple[int, Path]]:
    """Return ``[(stamp_ns, file)]`` of ``rgb`` or ``depth``, from ``<kind>.txt`` or the folder."""
    listing = sequence_dir / f'{kind}.txt'
    if listing.is_file():
        entries = [(stamp, sequence_dir / name) for stamp, name in read_tum_list(listing)]
        missing = [str(p) for _, p in entries if not p.is_file()]
        if missing:
            raise FileNotFoundError(f'{listing} lists {len(missing)} missing files, e.g. '
                                    f'{missing[0]}')
    else:
        folder = sequence_dir / kind
        if not folder.is_dir():
            return []
        entries = []
        for path in sorted(folder.glob('*.png')):
            try:
                entries.append((seconds_to_ns(path.stem), path))
            except ValueError:
                raise ValueError(f'{path.name}: TUM file names must be timestamps '
                                 '(<seconds>.<fraction>.png)') from None
    return sorted(entries, key=lambda e: e[0])


def read_tum_depth(path: Path) -> np.ndarray:
    """Read a TUM depth PNG as (H, W) float32 metres, NaN where the sensor gave 0.

    Raises:
        ValueError: if the file is not a single-channel uint16 image.
    """
    raw = read_raw_image(path)
    if raw.dtype != np.uint16 or raw.ndim != 2:
        raise ValueError(f'{path}: TUM depth must be single-channel uint16, got {raw.dtype} '
                         f'{raw.shape}')
    depth = raw.astype(np.float32) / np.float32(DEPTH_SCALE)
    depth[raw == 0] = np.nan
    return depth


def convert_tum(sequence_dir, output_bag, storage: str = 'mcap', camera: Camera | None = None,
                overwrite: bool = False, max_difference_s: float = MAX_DIFFERENCE_S
                ) -> dict[str, object]:
    """Convert a TUM RGB-D sequence folder to a rosbag2 bag (see the module docstring).

    Args:
        sequence_dir: the sequence folder (``rgb/``, optional ``depth/``, ``groundtruth.txt``).
        output_bag: bag directory to create.
        storage: ``'mcap'`` or ``'sqlite3'``.
        camera: intrinsics; default: freiburg 1/2/3 from the folder name.
        overwrite: replace an existing bag.
        max_difference_s: RGB-depth pairing tolerance in seconds (strict).

    Returns:
        summary dict: ``path``, ``storage``, ``messages`` per topic, ``start_ns``, ``end_ns``,
        ``rgb_frames``, ``depth_paired``, ``depth_unpaired``, ``gt_poses``, ``camera`` (name).

    Raises:
        FileNotFoundError: missing folder, ``rgb/`` or listed files.
        ValueError: no RGB frames, unknown camera, malformed ``groundtruth.txt`` line.
    """
    sequence_dir = require_dir(sequence_dir, 'TUM sequence folder').resolve()
    rgb = _frame_list(sequence_dir, 'rgb')
    if not rgb:
        if not (sequence_dir / 'rgb').is_dir():
            raise FileNotFoundError(f'{sequence_dir} has no rgb/ folder (not a TUM sequence?)')
        raise ValueError(f'{sequence_dir / "rgb"} holds no PNG frames')
    depth = _frame_list(sequence_dir, 'depth')

    first_image, first_encoding = read_colour_image(rgb[0][1])
    height, width = first_image.shape[:2]
    camera_name = 'given'
    if camera is None:
        freiburg = freiburg_from_name(sequence_dir.name)
        if freiburg is None:
            raise ValueError(f'cannot tell the TUM camera from the folder name '
                             f'{sequence_dir.name!r} (expects freiburg1/2/3 or fr1/2/3); '
                             'pass the intrinsics explicitly')
        if (width, height) != (640, 480):
            raise ValueError(f'the TUM freiburg{freiburg} camera is 640x480 but the images are '
                             f'{width}x{height}; pass the intrinsics explicitly')
        camera = tum_camera(freiburg, width, height)
        camera_name = f'freiburg{freiburg}'
    if (camera.width, camera.height) != (width, height):
        raise ValueError(f'camera is {camera.width}x{camera.height} but the images are '
                         f'{width}x{height}')

    rgb_stamps = [s for s, _ in rgb]
    pairs = associate(rgb_stamps, [s for s, _ in depth],
                      max_difference_ns=round(max_difference_s * 1e9))
    depth_for_rgb = dict(pairs)

    gt_path = sequence_dir / 'groundtruth.txt'
    gt_stamps, gt_poses = (np.zeros(0, np.int64), np.zeros((0, 4, 4)))
    if gt_path.is_file():
        gt_stamps, gt_poses = read_tum_trajectory(gt_path)
    else:
        logger.warning('%s has no groundtruth.txt; writing no %s', sequence_dir, topics.GT_POSE)
    margin = seconds_to_ns(GT_MARGIN_S)
    inside = np.flatnonzero((gt_stamps >= rgb_stamps[0] - margin)
                            & (gt_stamps <= rgb_stamps[-1] + margin))
    if gt_path.is_file() and inside.size == 0:
        logger.warning('no ground-truth pose lies within %.1f s of the images', GT_MARGIN_S)

    # (stamp, kind order, kind, index): written in time order, image before depth before pose.
    events = [(s, 0, 'rgb', i) for i, s in enumerate(rgb_stamps)]
    events += [(int(gt_stamps[k]), 2, 'gt', int(k)) for k in inside]
    events.sort()
    with BagWriter(output_bag, storage=storage, overwrite=overwrite) as writer:
        for stamp, _, kind, index in events:
            if kind == 'gt':
                writer.write_pose(topics.GT_POSE, stamp, gt_poses[index], topics.WORLD_FRAME)
                continue
            image, encoding = (first_image, first_encoding) if index == 0 else \
                read_colour_image(rgb[index][1])
            if image.shape[:2] != (height, width):
                raise ValueError(f'{rgb[index][1]}: size {image.shape[1]}x{image.shape[0]} '
                                 f'differs from the first frame ({width}x{height})')
            check_same_encoding(rgb[index][1], encoding, rgb[0][1], first_encoding)
            writer.write_image(topics.IMAGE, stamp, image, encoding, topics.CAMERA_FRAME)
            writer.write_camera_info(topics.CAMERA_INFO, stamp, camera, topics.CAMERA_FRAME)
            if index in depth_for_rgb:
                depth_m = read_tum_depth(depth[depth_for_rgb[index]][1])
                if depth_m.shape != (height, width):
                    raise ValueError(f'{depth[depth_for_rgb[index]][1]}: depth size differs '
                                     'from the RGB frames')
                writer.write_image(topics.DEPTH, stamp, depth_m, '32FC1', topics.CAMERA_FRAME)
        writer.set_custom_data(topics.GROUND_TRUTH_KEY,
                               f'{gt_path} ({inside.size} poses on {topics.GT_POSE})'
                               if inside.size else 'none')
    summary = writer.summary()
    summary.update(rgb_frames=len(rgb), depth_paired=len(pairs),
                   depth_unpaired=len(depth) - len(pairs), gt_poses=int(inside.size),
                   camera=camera_name)
    logger.info('TUM %s -> %s: %d RGB, %d depth paired (%d dropped), %d GT poses',
                sequence_dir.name, output_bag, len(rgb), len(pairs), len(depth) - len(pairs),
                inside.size)
    return summary
