# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Offline evaluation of the VO pipeline on a rosbag2 recording.

:func:`evaluate_bag` reads a bag (topics from the ``topics.*`` configuration), runs
:class:`~relperception.pipeline.vo_pipeline.VOPipeline` on every image and scores the
trajectory against the ground-truth pose topic with evo. It writes into the output folder:

=================  =========================================================================
``trajectory.tum``   estimated camera poses (TUM format) in the ground-truth world frame: the
                     VO trajectory (world = first camera) left-multiplied by the ground-truth
                     pose at the first estimated frame (interpolated); in the VO frame when the
                     bag has no ground truth. Frames reported ``'lost'`` are left out.
``groundtruth.tum``  ground truth interpolated at the stamps of the estimated frames.
``summary.json``     metrics (:func:`~relperception.evaluation.trajectory.evaluate_trajectory`,
                     SE(3) alignment for RGB-D, Sim(3) for monocular), frame counts, timing,
                     and every error met on the way.
``timing.csv``       one row per processed frame: stamp, status, matches, inliers, keyframe,
                     depth used, VO processing time (ms), decode time (ms).
``trajectory.png``   top and side views of ground truth and aligned estimate.
``errors.png``       absolute position error over time.
=================  =========================================================================

Dense evaluation (``dense=True``, when the bag has a ground-truth depth topic
``topics.ground_truth_depth`` (default: ``topics.depth``) and/or a label topic
``topics.ground_truth_labels``): :class:`~relperception.pipeline.dense_pipeline.DensePipeline`
(the ``dense.*`` configuration) runs on every ``dense_stride``-th image; depth is scored with
:mod:`relperception.evaluation.depth` (a metric model as predicted; a relative model after a
per-image least-squares scale and shift fit in inverse depth, the MiDaS / Depth Anything
protocol) and labels with :mod:`relperception.evaluation.segmentation` (ground-truth ids the
model does not have are ignored and counted). ``summary['dense']`` holds the metrics, and the
folder receives ``dense_samples/{depth,labels}_<n>.png`` (input | prediction | ground truth)
and ``confusion_matrix.png``.

Pairing: each image is paired with the depth image of the same header stamp, or else the
nearest one within 20 ms; images wait in a short queue for their depth (the two topics may be
interleaved either way in the bag). The latest ``CameraInfo`` gives the intrinsics.

Modes: ``'rgbd'`` needs the depth topic; ``'mono'`` ignores depth entirely (pure monocular,
the trajectory is defined up to scale and aligned with Sim(3)); ``'auto'`` chooses RGB-D when
the bag has depth for at least half of its images, monocular otherwise. With
``gt_scale=True`` (benchmark option ``--gt-scale``) a monocular run receives the ground-truth
distance travelled between consecutive frames as its scale hint; the summary says so.

Depth from the dense model (``depth_source='dense'``, CLI ``--depth-from dense``): instead of
the bag's depth topic, the depth of every frame is predicted from its RGB image by
:class:`~relperception.pipeline.dense_pipeline.DensePipeline` (the ``dense.*`` configuration;
metres, NaN invalid, as the VO expects) and the VO runs RGB-D (PnP on the predicted depth), so
the trajectory's scale is the depth model's and it is aligned with SE(3), no scale. This
measures what ``dense_node``'s ``depth`` remapped to ``visual_odometry_node``'s ``depth_in``
gives (metric monocular VO). The summary adds ``depth_source``, ``dense_model``,
``dense_relative``, ``dense_failures`` (frames whose prediction failed or had no valid pixel:
their depth is ignored and they count in ``frames_without_depth`` and the errors) and
``dense_timing_median_ms`` / ``dense_timing_p95_ms``; ``timing.csv`` gets a ``dense_ms``
column (not part of ``decode_ms``). The shipped default model ``conv_small`` learnt metric
depth on the synthetic rooms of :mod:`relperception.data.synthetic` only: on a synthetic
recording the result is meaningful, on real data (TUM, KITTI, your camera) its depth and so
the VO scale are not, until the model is trained on such data (``relperception train depth``)
and selected with ``dense.model`` / ``dense.weights``. A relative-depth model is accepted with
a warning (metres through ``dense.depth_scale`` only).

Robustness: a missing image or CameraInfo topic raises ``ValueError`` listing the bag's topics.
Bad messages (undecodable image, no CameraInfo yet, depth of the wrong size or without a single
valid pixel) are logged, counted in ``summary['errors']`` and the frame is skipped or its depth
ignored. A damaged or truncated bag is read up to the damage and everything computed so far is
written; ``summary['complete']`` is then False and the damage is in ``summary['errors']``.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
import csv
import logging
import math
from pathlib import Path
import sys
import time
from typing import Any

import numpy as np
from relperception.config import load_config, section
from relperception.evaluation.report import plot_errors, plot_trajectories, write_json
from relperception.evaluation.trajectory import (evaluate_trajectory, interpolate_poses,
                                                 PER_POSE_KEY, summary_metrics, write_tum)
from relperception.odometry.map_tracker import SCALE_JUMP_FACTOR
from relperception.transforms import invert_transform

logger = logging.getLogger(__name__)

MODES = ('auto', 'rgbd', 'mono')
#: Where RGB-D odometry takes its depth: the bag's depth topic, or the dense model's prediction.
DEPTH_SOURCES = ('bag', 'dense')

#: Largest stamp difference of an image and the depth image paired with it (seconds).
DEPTH_PAIRING_TOLERANCE_S = 0.02
#: Auto mode runs RGB-D when the bag has at least this many depth images per image.
AUTO_RGBD_MIN_DEPTH_FRACTION = 0.5
#: Largest stamp difference when ground truth is associated with a frame (seconds).
GT_TOLERANCE_S = 0.02
#: Images waiting for their depth image; older ones are processed without waiting longer.
_MAX_PENDING_IMAGES = 8
#: Depth messages kept for pairing.
_MAX_BUFFERED_DEPTHS = 32
#: Error messages kept in the summary (all are counted).
_MAX_ERRORS_KEPT = 200
#: Sample strips written per kind (depth, labels) by the dense evaluation.
DENSE_SAMPLES = 3
#: Images waiting for their dense ground truth; older ones are evaluated with what arrived.
_MAX_PENDING_DENSE = 8

#: Metric keys of the summary (None when they cannot be computed, e.g. no ground truth).
METRIC_KEYS = ('ate_rmse_m', 'ate_mean_m', 'ate_median_m', 'ate_max_m', 'rpe_trans_rmse_m',
               'rpe_rot_rmse_deg', 'drift_percent', 'rot_drift_deg_per_m', 'scale',
               'num_poses_matched', 'path_length_m', 'alignment')

_NS_PER_S = 1_000_000_000


class ErrorLog:
    """Collects error messages: logs each one, keeps the first few hundred, counts all."""

    def __init__(self):
        """Start with no error."""
        self.kept: list[str] = []
        self.count = 0

    def add(self, message: str, level: int = logging.WARNING) -> None:
        """Log ``message`` at ``level``, count it and keep it if fewer than the limit are kept."""
        self.count += 1
        logger.log(level, '%s', message)
        if len(self.kept) < _MAX_ERRORS_KEPT:
            self.kept.append(message)

    def add_new(self, messages, already: set) -> None:
        """Add, as errors, the ``messages`` not in ``already`` (which receives them)."""
        for message in messages:
            if message not in already:
                already.add(message)
                self.add(message, logging.ERROR)


def _require_topic(bag_topics: Mapping[str, str], topic: str, what: str, bag_path) -> str:
    """Return the topic to read for ``topic`` (or its ``/compressed`` variant), else raise."""
    from relperception.data.topics import compressed_topic

    if topic in bag_topics:
        return topic
    if what == 'image' and compressed_topic(topic) in bag_topics:
        logger.info('reading %s (the bag has no %s)', compressed_topic(topic), topic)
        return compressed_topic(topic)
    listing = ', '.join(f'{name} ({kind})' for name, kind in sorted(bag_topics.items()))
    raise ValueError(f'bag {bag_path} has no {what} topic {topic!r} (set topics.{what} in the '
                     f'configuration); its topics: {listing or "none"}')


def _resolve_mode(requested: str, num_depth: int, num_images: int,
                  depth_topic: str | None) -> str:
    """Return 'rgbd' or 'mono'; 'auto' is RGB-D when at least half the images have depth."""
    if requested not in MODES:
        raise ValueError(f'mode must be one of {MODES}, got {requested!r}')
    if requested == 'rgbd' and num_depth == 0:
        raise ValueError(f"mode 'rgbd' needs depth, but the bag has no messages on the depth "
                         f'topic {depth_topic!r}')
    if requested == 'auto':
        if 0 < num_depth < AUTO_RGBD_MIN_DEPTH_FRACTION * num_images:
            logger.warning('only %d depth images for %d images: auto mode runs monocular '
                           '(use --mode rgbd to force RGB-D)', num_depth, num_images)
        rgbd = num_depth > 0 and num_depth >= AUTO_RGBD_MIN_DEPTH_FRACTION * num_images
        return 'rgbd' if rgbd else 'mono'
    return requested


def read_ground_truth(reader, topic: str | None, errors: ErrorLog):
    """Return (stamps_ns (N,) int64, T_world_cam (N, 4, 4)) of the ground-truth topic."""
    from relperception.data.messages import stamp_to_ns, transform_from_pose_msg

    stamps, poses = [], []
    if topic is None:
        return np.zeros(0, np.int64), np.zeros((0, 4, 4))
    try:
        for message in reader.messages([topic]):
            try:
                header = getattr(message.msg, 'header', None)
                stamp = stamp_to_ns(header.stamp) if header is not None else \
                    message.log_time_ns
                poses.append(transform_from_pose_msg(message.msg))
                stamps.append(stamp)
            except (ValueError, AttributeError) as exc:
                errors.add(f'{topic} at {message.log_time_ns} ns: bad pose ({exc})')
    except Exception as exc:  # noqa: BLE001 - a damaged bag keeps what was read
        errors.add(f'reading ground truth stopped: {type(exc).__name__}: {exc}', logging.ERROR)
    if not stamps:
        return np.zeros(0, np.int64), np.zeros((0, 4, 4))
    stamps = np.asarray(stamps, dtype=np.int64)
    order = np.argsort(stamps, kind='stable')
    return stamps[order], np.stack(poses)[order]


class _FrameAssembler:
    """Pairs images with CameraInfo and depth and turns them into Frames, in stamp order.

    With ``dense_depth`` (a :class:`~relperception.pipeline.dense_pipeline.DensePipeline`) the
    depth of every frame is predicted from its RGB image instead of read from the depth topic
    (``use_depth`` must then be False: nothing waits for depth messages); the prediction time
    of each frame is in :attr:`dense_ms` (stamp -> ms) and failures in :attr:`dense_failures`.
    """

    def __init__(self, use_depth: bool, errors: ErrorLog, dense_depth=None):
        if dense_depth is not None and use_depth:
            raise ValueError('dense_depth replaces the depth topic: use_depth must be False')
        self.use_depth = use_depth
        self.errors = errors
        self.dense_depth = dense_depth
        self.dense_ms: dict[int, float] = {}
        self.dense_failures = 0
        self.camera = None
        self.pending: deque = deque()           # (stamp_ns, BagMessage) of images
        self.depths: deque = deque(maxlen=_MAX_BUFFERED_DEPTHS)  # (stamp_ns, BagMessage)
        self.newest_depth_ns: int | None = None
        self.frames_without_depth = 0
        self.frames_skipped = 0
        self.tolerance_ns = round(DEPTH_PAIRING_TOLERANCE_S * _NS_PER_S)

    @staticmethod
    def _stamp(message) -> int:
        from relperception.data.messages import stamp_to_ns

        header = getattr(message.msg, 'header', None)
        return stamp_to_ns(header.stamp) if header is not None else message.log_time_ns

    def add_camera_info(self, message) -> list:
        from relperception.data.messages import camera_from_camera_info

        try:
            self.camera = camera_from_camera_info(message.msg)
        except (ValueError, AttributeError) as exc:
            self.errors.add(f'{message.topic} at {message.log_time_ns} ns: bad CameraInfo '
                            f'({exc})')
            return []
        return self._ready()

    def add_depth(self, message) -> list:
        try:
            stamp = self._stamp(message)
        except ValueError as exc:
            self.errors.add(f'{message.topic}: bad header stamp ({exc})')
            return []
        self.depths.append((stamp, message))
        self.newest_depth_ns = stamp if self.newest_depth_ns is None else \
            max(self.newest_depth_ns, stamp)
        return self._ready()

    def add_image(self, message) -> list:
        try:
            stamp = self._stamp(message)
        except ValueError as exc:
            self.errors.add(f'{message.topic}: bad header stamp ({exc})')
            self.frames_skipped += 1
            return []
        self.pending.append((stamp, message))
        return self._ready()

    def flush(self) -> list:
        """Return every waiting frame (end of the bag)."""
        return self._ready(final=True)

    def _has_exact_depth(self, stamp: int) -> bool:
        return any(depth_stamp == stamp for depth_stamp, _ in self.depths)

    def _ready(self, final: bool = False) -> list:
        """Return (stamp_ns, frame or None, decode_ms) of the images that need not wait longer."""
        out = []
        while self.pending:
            stamp, message = self.pending[0]
            overflow = len(self.pending) > _MAX_PENDING_IMAGES
            # The CameraInfo of the first image may follow it in the bag: wait for it.
            has_camera = self.camera is not None
            has_depth = (not self.use_depth or self._has_exact_depth(stamp)
                         or (self.newest_depth_ns is not None
                             and self.newest_depth_ns > stamp + self.tolerance_ns))
            done = final or overflow or (has_camera and has_depth)
            if not done:
                break
            self.pending.popleft()
            start = time.perf_counter()
            frame = self._build(stamp, message)
            elapsed_ms = 1e3 * (time.perf_counter() - start) - self.dense_ms.get(stamp, 0.0)
            out.append((stamp, frame, elapsed_ms))
        return out

    def _nearest_depth(self, stamp: int):
        best = None
        for depth_stamp, message in self.depths:
            gap = abs(depth_stamp - stamp)
            if gap <= self.tolerance_ns and (best is None or gap < best[0]):
                best = (gap, message)
        return None if best is None else best[1]

    def _build(self, stamp: int, message):
        from relperception.data.messages import decode_image_message
        from relperception.imaging.image_encodings import to_mono8
        from relperception.core_types import Frame

        where = f'{message.topic} at {stamp} ns'
        if self.camera is None:
            self.errors.add(f'{where}: no CameraInfo received yet; frame skipped')
            self.frames_skipped += 1
            return None
        try:
            array, encoding = decode_image_message(message.msg, message.msgtype)
            image = to_mono8(array, encoding)
            rgb = self._rgb(array, encoding) if self.dense_depth is not None else None
        except (ValueError, TypeError) as exc:
            self.errors.add(f'{where}: undecodable image ({exc}); frame skipped')
            self.frames_skipped += 1
            return None
        if image.shape != (self.camera.height, self.camera.width):
            self.errors.add(f'{where}: image is {image.shape[1]}x{image.shape[0]} but CameraInfo '
                            f'says {self.camera.width}x{self.camera.height}; frame skipped')
            self.frames_skipped += 1
            return None
        if self.dense_depth is not None:
            depth = self._dense_depth_for(stamp, rgb)
        else:
            depth = self._depth_for(stamp, image.shape) if self.use_depth else None
        if (self.use_depth or self.dense_depth is not None) and depth is None:
            self.frames_without_depth += 1
        return Frame(image=np.ascontiguousarray(image), stamp_ns=stamp, camera=self.camera,
                     depth=depth)

    @staticmethod
    def _rgb(array: np.ndarray, encoding: str) -> np.ndarray:
        from relperception.imaging.image_encodings import to_rgb8

        return np.ascontiguousarray(to_rgb8(array, encoding))

    def _dense_depth_for(self, stamp: int, rgb: np.ndarray):
        """Return the dense model's depth (H, W) float32 metres (NaN invalid), or None."""
        start = time.perf_counter()
        try:
            depth = self.dense_depth.run(rgb, colors=False).depth
        except (ValueError, RuntimeError) as exc:
            self.dense_ms[stamp] = 1e3 * (time.perf_counter() - start)
            self.dense_failures += 1
            self.errors.add(f'image at {stamp} ns: dense depth failed ({exc}); depth ignored')
            return None
        self.dense_ms[stamp] = 1e3 * (time.perf_counter() - start)
        if not np.isfinite(depth).any():
            self.dense_failures += 1
            self.errors.add(f'image at {stamp} ns: dense depth has no valid pixel (all outside '
                            '[dense.min_depth_m, dense.max_depth_m]); depth ignored')
            return None
        return depth

    def _depth_for(self, stamp: int, shape):
        from relperception.data.messages import decode_image_message
        from relperception.imaging.image_encodings import depth_to_metres

        message = self._nearest_depth(stamp)
        if message is None:
            self.errors.add(f'image at {stamp} ns: no depth image within '
                            f'{DEPTH_PAIRING_TOLERANCE_S * 1e3:.0f} ms; depth ignored')
            return None
        where = f'{message.topic} for the image at {stamp} ns'
        try:
            array, encoding = decode_image_message(message.msg, message.msgtype)
            depth = depth_to_metres(array, encoding)
        except (ValueError, TypeError) as exc:
            self.errors.add(f'{where}: undecodable depth ({exc}); depth ignored')
            return None
        if depth.shape != tuple(shape):
            self.errors.add(f'{where}: depth is {depth.shape[1]}x{depth.shape[0]}, image is '
                            f'{shape[1]}x{shape[0]}; depth ignored')
            return None
        if not np.isfinite(depth).any():
            self.errors.add(f'{where}: no valid depth pixel (all NaN, zero or negative); depth '
                            'ignored')
            return None
        return depth


def _gt_step_norm(gt_stamps, gt_poses, stamp0: int, stamp1: int) -> float | None:
    """Return the ground-truth distance (m) between two stamps, None if not covered."""
    if len(gt_stamps) == 0:
        return None
    poses, valid = interpolate_poses(gt_stamps, gt_poses, [stamp0, stamp1], GT_TOLERANCE_S)
    if not valid.all():
        return None
    return float(np.linalg.norm(poses[1][:3, 3] - poses[0][:3, 3]))


def _write_timing_csv(path: Path, rows: list) -> None:
    dense = any(row.get('dense_ms') is not None for row in rows)
    fields = ('frame', 'stamp_ns', 'status', 'num_matches', 'num_inliers', 'is_keyframe',
              'depth', 'process_ms', 'decode_ms', 'scale_source') + (
                  ('dense_ms',) if dense else ())
    with open(path, 'w', newline='', encoding='utf-8') as stream:
        writer = csv.writer(stream)
        writer.writerow(fields)
        for index, row in enumerate(rows):
            values = [index, row['stamp_ns'], row['status'], row['num_matches'],
                      row['num_inliers'], int(row['is_keyframe']), int(row['depth']),
                      f"{row['process_ms']:.3f}", f"{row['decode_ms']:.3f}",
                      row.get('scale_source', '')]
            if dense:
                dense_ms = row.get('dense_ms')
                values.append('' if dense_ms is None else f'{dense_ms:.3f}')
            writer.writerow(values)


def _percentile(values, q: float) -> float:
    values = np.asarray(values, dtype=np.float64)
    return float(np.percentile(values, q)) if len(values) else float('nan')


def evaluate_bag(bag_path, output_dir, config: Mapping[str, Any] | None = None,
                 mode: str | None = None, max_frames: int | None = None,
                 progress: bool = True, gt_scale: bool = False,
                 plots: bool = True, dense: bool = False, dense_stride: int = 1,
                 dense_samples: int = DENSE_SAMPLES,
                 depth_source: str = 'bag') -> dict[str, Any]:
    """Run the VO pipeline over a bag, score it against ground truth and write a report.

    Args:
        bag_path: rosbag2 directory or ``.mcap`` / ``.db3`` file.
        output_dir: folder for the outputs listed in the module docstring (created).
        config: flat configuration (:func:`relperception.config.load_config`); None for the
            defaults. Topics come from ``topics.*``, the mode from ``odometry.mode``.
        mode: ``'auto'``, ``'rgbd'`` or ``'mono'``; overrides ``odometry.mode``.
        max_frames: stop after this many images (None: all).
        progress: show a tqdm progress bar on stderr.
        gt_scale: monocular benchmark option: give VO the ground-truth distance between
            consecutive frames as scale hint.
        plots: write ``trajectory.png`` and ``errors.png`` (and, with ``dense``, the
            confusion matrix and the sample strips).
        dense: also evaluate the dense model (``dense.*``) against the bag's ground-truth
            depth and label topics (see the module docstring); ``summary['dense']``.
        dense_stride: evaluate the dense model on every n-th image (>= 1).
        dense_samples: number of sample strips written per kind (depth, labels).
        depth_source: ``'bag'`` (the depth topic) or ``'dense'``: the depth of every frame is
            predicted by :class:`~relperception.pipeline.dense_pipeline.DensePipeline` (the
            ``dense.*`` configuration) from its RGB image and the VO runs RGB-D on it (mode
            ``'auto'`` or ``'rgbd'``; the bag's depth topic is not read), aligned with SE(3):
            the scale is the depth model's. See the module docstring.

    Returns:
        the summary dict that is also written to ``summary.json`` (see module docstring);
        metric keys (:data:`METRIC_KEYS`) are None when there is no ground truth.

    Raises:
        FileNotFoundError: if the bag does not exist.
        ValueError: unreadable bag, missing image / CameraInfo topic (the message lists the
            bag's topics), ``'rgbd'`` without depth, ``gt_scale`` without ground truth,
            ``depth_source='dense'`` with ``'mono'`` or a dense model that cannot be built,
            or a bad argument.
    """
    from relperception.data.bag import BagReader
    from relperception.pipeline.vo_pipeline import VOPipeline

    started = time.perf_counter()
    config = load_config(overrides=dict(config or {}))
    requested = str(mode if mode is not None else config['odometry.mode'])
    if requested not in MODES:
        raise ValueError(f'mode must be one of {MODES}, got {requested!r}')
    if max_frames is not None and int(max_frames) < 1:
        raise ValueError(f'max_frames must be >= 1 or None, got {max_frames}')
    if int(dense_stride) < 1 or int(dense_samples) < 0:
        raise ValueError(f'dense_stride must be >= 1 and dense_samples >= 0, got '
                         f'{dense_stride} and {dense_samples}')
    if depth_source not in DEPTH_SOURCES:
        raise ValueError(f'depth_source must be one of {DEPTH_SOURCES}, got {depth_source!r}')
    dense_depth = None
    if depth_source == 'dense':
        if requested == 'mono':
            raise ValueError("depth_source 'dense' feeds RGB-D odometry: use mode 'rgbd' or "
                             "'auto', not 'mono'")
        dense_depth = _build_dense_depth(config)
    bag_path, output_dir = Path(bag_path), Path(output_dir)
    errors = ErrorLog()
    seen_reader_errors: set = set()
    rows: list = []
    poses_vo: list = []
    complete = True
    frames_read = 0

    with BagReader(bag_path) as reader:
        bag_topics = reader.topics
        counts = reader.message_counts
        image_topic = _require_topic(bag_topics, config['topics.image'], 'image', bag_path)
        info_topic = _require_topic(bag_topics, config['topics.camera_info'], 'camera_info',
                                    bag_path)
        depth_topic = config['topics.depth'] or None
        num_depth = counts.get(depth_topic, 0) if depth_topic is not None else 0
        if depth_topic is not None and depth_topic not in bag_topics:
            logger.info('bag has no depth topic %s', depth_topic)
        if dense_depth is not None:
            resolved = 'rgbd'  # every frame gets predicted depth
        else:
            resolved = _resolve_mode(requested, num_depth, counts.get(image_topic, 0),
                                     depth_topic)
        gt_topic = config['topics.ground_truth_pose'] or None
        if gt_topic is not None and gt_topic not in bag_topics:
            logger.warning('bag has no ground-truth topic %s; no metrics will be computed',
                           gt_topic)
            gt_topic = None
        if gt_scale and gt_topic is None:
            raise ValueError('gt_scale needs the ground-truth topic '
                             f"{config['topics.ground_truth_pose']!r}, which the bag lacks")
        use_depth = resolved == 'rgbd' and dense_depth is None
        errors.add_new(reader.errors, seen_reader_errors)

        gt_stamps, gt_poses = read_ground_truth(reader, gt_topic, errors)
        errors.add_new(reader.errors, seen_reader_errors)
        pipeline = VOPipeline({**config, 'odometry.mode': resolved})
        assembler = _FrameAssembler(use_depth, errors, dense_depth=dense_depth)
        wanted = [image_topic, info_topic] + ([depth_topic] if use_depth else [])
        total = counts.get(image_topic, 0)
        if max_frames is not None:
            total = min(total, int(max_frames))
        logger.info('evaluating %s: %d images, mode %s%s%s, %d ground-truth poses', bag_path,
                    counts.get(image_topic, 0), resolved, ' (gt scale)' if gt_scale else '',
                    ' on dense depth' if dense_depth is not None else '', len(gt_stamps))

        from tqdm import tqdm
        bar = tqdm(total=total, unit='frame', file=sys.stderr, disable=not progress,
                   desc='eval', dynamic_ncols=True)
        previous_stamp = None

        def consume(ready) -> bool:
            """Run VO on assembled frames; return False once max_frames is reached."""
            nonlocal frames_read, previous_stamp
            for stamp, frame, decode_ms in ready:
                if max_frames is not None and frames_read >= int(max_frames):
                    return False
                frames_read += 1
                bar.update(1)
                if frame is None:
                    continue
                hint = None
                if gt_scale and previous_stamp is not None:
                    hint = _gt_step_norm(gt_stamps, gt_poses, previous_stamp, stamp)
                result = pipeline.process(frame, translation_norm_m=hint)
                previous_stamp = stamp
                rows.append({'stamp_ns': stamp, 'status': result.status,
                             'num_matches': int(result.num_matches),
                             'num_inliers': int(result.num_inliers),
                             'is_keyframe': bool(result.is_keyframe),
                             'depth': frame.depth is not None,
                             'process_ms': pipeline.last_timing_ms, 'decode_ms': decode_ms,
                             'dense_ms': assembler.dense_ms.pop(stamp, None),
                             'message': result.message,
                             'scale_source': result.scale_source})
                poses_vo.append(np.asarray(result.T_world_cam, dtype=np.float64))
                if result.status == 'lost':
                    logger.debug('frame %d lost: %s', stamp, result.message)
            return max_frames is None or frames_read < int(max_frames)

        try:
            keep_going = True
            for message in reader.messages(wanted):
                if message.topic == info_topic:
                    ready = assembler.add_camera_info(message)
                elif message.topic == image_topic:
                    ready = assembler.add_image(message)
                else:
                    ready = assembler.add_depth(message)
                keep_going = consume(ready)
                if not keep_going:
                    break
            if keep_going:
                consume(assembler.flush())
        except Exception as exc:  # noqa: BLE001 - keep and report what was computed so far
            complete = False
            errors.add(f'processing stopped after {frames_read} frames: '
                       f'{type(exc).__name__}: {exc}', logging.ERROR)
        finally:
            bar.close()
        if reader.salvaged or any('damaged' in e for e in reader.errors):
            complete = False
        errors.add_new(reader.errors, seen_reader_errors)
        dense_summary = None
        if dense:
            dense_summary = evaluate_dense(reader, image_topic, config, output_dir, errors,
                                           max_frames=max_frames, stride=int(dense_stride),
                                           samples=int(dense_samples), plots=plots,
                                           progress=progress, pipeline=dense_depth)
            errors.add_new(reader.errors, seen_reader_errors)

    map_stats = pipeline.odometry.map_stats()
    pipeline.odometry.close()
    summary = write_report(output_dir, bag_path, config, requested, resolved, gt_scale, rows,
                           poses_vo, gt_stamps, gt_poses, errors, plots)
    summary['local_map'] = map_stats
    if map_stats['scale_jumps']:
        logger.info('the keyframe-to-keyframe speed changed more than %gx %d times (scale '
                    'jumps or real accelerations)', SCALE_JUMP_FACTOR, map_stats['scale_jumps'])
    summary.update({
        'complete': complete,
        'frames_in_bag': int(counts.get(image_topic, 0)),
        'frames_read': frames_read,
        'frames_skipped': assembler.frames_skipped,
        'frames_without_depth': assembler.frames_without_depth,
        'topics': {'image': image_topic, 'camera_info': info_topic,
                   'depth': depth_topic if use_depth else None, 'ground_truth_pose': gt_topic},
        'errors': errors.kept,
        'num_errors': errors.count,
        'elapsed_s': time.perf_counter() - started,
    })
    summary['depth_source'] = depth_source
    if dense_depth is not None:
        from relperception.pipeline.dense_pipeline import model_name

        dense_ms = [row['dense_ms'] for row in rows if row.get('dense_ms') is not None]
        name = model_name(dense_depth.conf)
        kind = ('RELATIVE depth turned into metres with dense.depth_scale: not metric'
                if dense_depth.relative else 'metric')
        summary.update({
            'dense_model': name,
            'dense_relative': dense_depth.relative,
            'dense_failures': assembler.dense_failures,
            'dense_timing_median_ms': _percentile(dense_ms, 50),
            'dense_timing_p95_ms': _percentile(dense_ms, 95),
            'scale_source': (f'depth predicted by the dense model {name} ({kind}; RGB-D '
                             'odometry on predicted depth, SE(3) alignment)'),
        })
    if dense_summary is not None:
        summary['dense'] = dense_summary
        summary['outputs'].update(dense_summary.pop('outputs', {}))
    write_json(output_dir / 'summary.json', summary)
    _log_summary(summary)
    return summary


def _build_dense_depth(config: Mapping[str, Any]):
    """Return the DensePipeline that predicts the VO depth; ValueError if it cannot be built.

    A relative-depth model is accepted with a warning: its metres are only as good as
    ``dense.depth_scale`` (``summary['dense_relative']`` says so).
    """
    from relperception.pipeline.dense_pipeline import DensePipeline, model_name

    try:
        pipeline = DensePipeline(config)
    except (OSError, RuntimeError) as exc:
        raise ValueError(f'cannot build the dense model for depth_source dense: {exc}') from exc
    if pipeline.relative:
        logger.warning('dense model %s predicts relative inverse depth: the odometry scale '
                       'is only as good as dense.depth_scale (%g)', model_name(pipeline.conf),
                       pipeline.conf['depth_scale'])
    return pipeline


class _DenseGroundTruth:
    """Pairs sampled images with the ground-truth depth / label images of the same stamp."""

    def __init__(self, topics: Mapping[str, str | None]):
        self.topics = {kind: topic for kind, topic in topics.items() if topic}
        self.buffers = {kind: deque(maxlen=_MAX_BUFFERED_DEPTHS) for kind in self.topics}
        self.newest = dict.fromkeys(self.topics)
        self.pending: deque = deque()
        self.tolerance_ns = round(DEPTH_PAIRING_TOLERANCE_S * _NS_PER_S)

    def add_ground_truth(self, kind: str, stamp: int, message) -> None:
        self.buffers[kind].append((stamp, message))
        newest = self.newest[kind]
        self.newest[kind] = stamp if newest is None else max(newest, stamp)

    def _settled(self, kind: str, stamp: int) -> bool:
        newest = self.newest[kind]
        return (any(s == stamp for s, _ in self.buffers[kind])
                or (newest is not None and newest > stamp + self.tolerance_ns))

    def _nearest(self, kind: str, stamp: int):
        best = None
        for gt_stamp, message in self.buffers[kind]:
            gap = abs(gt_stamp - stamp)
            if gap <= self.tolerance_ns and (best is None or gap < best[0]):
                best = (gap, message)
        return None if best is None else best[1]

    def ready(self, final: bool = False) -> list:
        """Return ``(stamp, image message, {kind: gt message or None})`` of settled images."""
        out = []
        while self.pending:
            stamp, message = self.pending[0]
            settled = all(self._settled(kind, stamp) for kind in self.topics)
            if not (final or settled or len(self.pending) > _MAX_PENDING_DENSE):
                break
            self.pending.popleft()
            out.append((stamp, message, {kind: self._nearest(kind, stamp)
                                         for kind in self.topics}))
        return out


def _dense_topics(reader, config: Mapping[str, Any]) -> dict:
    depth_topic = config['topics.ground_truth_depth'] or config['topics.depth'] or None
    labels_topic = config['topics.ground_truth_labels'] or None
    present = reader.topics
    return {'depth': depth_topic if depth_topic in present else None,
            'labels': labels_topic if labels_topic in present else None}


def evaluate_dense(reader, image_topic: str, config: Mapping[str, Any], output_dir: Path,
                   errors: ErrorLog, max_frames: int | None = None, stride: int = 1,
                   samples: int = DENSE_SAMPLES, plots: bool = True,
                   progress: bool = False, pipeline=None) -> dict[str, Any]:
    """Score the dense model of ``config`` against a bag's ground-truth depth and labels.

    Args:
        reader: an open :class:`relperception.data.bag.BagReader`.
        image_topic: the image topic to run the model on (Image or CompressedImage).
        config: flat validated configuration (``dense.*``, ``topics.ground_truth_depth``,
            ``topics.depth``, ``topics.ground_truth_labels``).
        output_dir: report folder (``dense_samples/``, ``confusion_matrix.png``).
        errors: where problems are logged and counted.
        max_frames: only the first ``max_frames`` images of the bag are considered.
        stride: evaluate every ``stride``-th image.
        samples: sample strips written per kind.
        plots: write the confusion matrix plot and the sample strips.
        progress: show a tqdm progress bar.
        pipeline: an already built ``DensePipeline`` of the same ``dense.*`` configuration to
            reuse (e.g. the one that predicts the VO depth), or None to build one.

    Returns:
        JSON-able dict: ``model``, ``relative``, ``depth_alignment``, ``topics``,
        ``frames_evaluated``, ``depth`` (:class:`DepthMetricsAccumulator` result or None),
        ``segmentation`` (:meth:`ConfusionMatrix.summary` or None), ``unknown_gt_label_pixels``,
        ``timing_median_ms`` / ``timing_p95_ms`` and ``outputs`` (file names). With neither
        ground-truth topic in the bag, or a model that cannot be built, the dict says why in
        ``skipped`` and the error log has the reason.
    """
    from relperception.data.messages import decode_image_message
    from relperception.evaluation.depth import align_inverse_depth, DepthMetricsAccumulator
    from relperception.evaluation.segmentation import ConfusionMatrix
    from relperception.imaging.image_encodings import depth_to_metres, to_rgb8
    from relperception.pipeline.dense_pipeline import DensePipeline, model_name

    topics = _dense_topics(reader, config)
    result: dict[str, Any] = {'model': model_name(section(config, 'dense')), 'topics': topics,
                              'frames_evaluated': 0, 'depth': None, 'segmentation': None,
                              'outputs': {}}
    if not any(topics.values()):
        message = ('dense evaluation skipped: the bag has neither the ground-truth depth topic '
                   f"{config['topics.ground_truth_depth'] or config['topics.depth']!r} nor the "
                   f"label topic {config['topics.ground_truth_labels']!r}")
        errors.add(message, logging.ERROR)
        result['skipped'] = message
        return result
    try:
        pipeline = pipeline if pipeline is not None else DensePipeline(config)
    except (ValueError, OSError, RuntimeError) as exc:
        message = f'dense evaluation skipped: cannot build the dense model: {exc}'
        errors.add(message, logging.ERROR)
        result['skipped'] = message
        return result
    result['relative'] = pipeline.relative
    result['depth_alignment'] = ('per-image scale and shift in inverse depth (least squares)'
                                 if pipeline.relative else 'none (metric prediction)')
    min_depth = float(config['dense.min_depth_m']) or 1e-3
    max_depth = float(config['dense.max_depth_m'])
    depth_acc = DepthMetricsAccumulator(min_depth=min_depth, max_depth=max_depth)
    confusion = None
    if pipeline.has_segmentation and topics['labels']:
        names = pipeline.class_names or None
        num_classes = len(names) if names else None
        confusion = ('pending', names, num_classes)
    unknown_labels = 0
    timings: list = []
    written = {'depth': 0, 'labels': 0}
    sample_dir = output_dir / 'dense_samples'
    pairing = _DenseGroundTruth(topics)
    kinds = {topic: kind for kind, topic in topics.items() if topic}

    def evaluate(stamp: int, message, gt: dict) -> None:
        nonlocal confusion, unknown_labels
        where = f'{message.topic} at {stamp} ns'
        try:
            array, encoding = decode_image_message(message.msg, message.msgtype)
            rgb = np.ascontiguousarray(to_rgb8(array, encoding))
        except (ValueError, TypeError) as exc:
            errors.add(f'{where}: undecodable image ({exc}); dense frame skipped')
            return
        out = pipeline.run(rgb, colors=False)
        timings.append(out.timing_ms['total'])
        result['frames_evaluated'] += 1
        if gt.get('depth') is not None:
            try:
                gt_array, gt_encoding = decode_image_message(gt['depth'].msg,
                                                             gt['depth'].msgtype)
                gt_depth = depth_to_metres(gt_array, gt_encoding)
                if gt_depth.shape != rgb.shape[:2]:
                    raise ValueError(f'ground-truth depth is {gt_depth.shape[1]}x'
                                     f'{gt_depth.shape[0]}, image {rgb.shape[1]}x'
                                     f'{rgb.shape[0]}')
                if pipeline.relative:
                    pred, _, _ = align_inverse_depth(out.raw_depth, gt_depth,
                                                     min_depth=min_depth, max_depth=max_depth)
                else:
                    pred = out.raw_depth
                depth_acc.update(pred, gt_depth)
                if plots and written['depth'] < samples:
                    from relperception.evaluation.dense_plots import sample_strip

                    name = f'depth_{written["depth"]}.png'
                    sample_strip(rgb, pred, gt_depth, kind='depth',
                                 path_png=sample_dir / name)
                    result['outputs'][f'dense_sample_depth_{written["depth"]}'] = \
                        f'dense_samples/{name}'
                    written['depth'] += 1
            except ValueError as exc:
                errors.add(f'{where}: depth not scored ({exc})')
        elif topics['depth']:
            errors.add(f'{where}: no ground-truth depth within '
                       f'{DEPTH_PAIRING_TOLERANCE_S * 1e3:.0f} ms')
        if out.labels is not None and gt.get('labels') is not None:
            try:
                gt_array, _ = decode_image_message(gt['labels'].msg, gt['labels'].msgtype)
                gt_labels = np.asarray(gt_array)
                if gt_labels.ndim == 3:
                    gt_labels = gt_labels[..., 0]
                if gt_labels.shape != out.labels.shape or gt_labels.dtype.kind not in 'iu':
                    raise ValueError(f'ground-truth labels are {gt_labels.dtype} '
                                     f'{gt_labels.shape}, prediction {out.labels.shape}')
                if isinstance(confusion, tuple):
                    _, names, num_classes = confusion
                    num_classes = num_classes or int(out.logits.shape[0])
                    confusion = ConfusionMatrix(num_classes, ignore_index=255,
                                                class_names=names)
                unknown = (gt_labels >= confusion.num_classes) & (gt_labels != 255)
                if unknown.any():
                    unknown_labels += int(unknown.sum())
                    gt_labels = np.where(unknown, 255, gt_labels).astype(np.uint8)
                confusion.update(out.labels, gt_labels)
                if plots and written['labels'] < samples:
                    from relperception.evaluation.dense_plots import sample_strip

                    name = f'labels_{written["labels"]}.png'
                    sample_strip(rgb, out.labels, gt_labels.astype(np.uint8), kind='labels',
                                 path_png=sample_dir / name)
                    result['outputs'][f'dense_sample_labels_{written["labels"]}'] = \
                        f'dense_samples/{name}'
                    written['labels'] += 1
            except ValueError as exc:
                errors.add(f'{where}: labels not scored ({exc})')

    from tqdm import tqdm
    total = reader.message_counts.get(image_topic, 0)
    if max_frames is not None:
        total = min(total, int(max_frames))
    bar = tqdm(total=total, unit='frame', file=sys.stderr, disable=not progress,
               desc='dense', dynamic_ncols=True)
    images_seen = 0
    try:
        for message in reader.messages([image_topic] + list(kinds)):
            try:
                stamp = _FrameAssembler._stamp(message)
            except ValueError as exc:
                errors.add(f'{message.topic}: bad header stamp ({exc})')
                continue
            if message.topic == image_topic:
                if max_frames is not None and images_seen >= int(max_frames):
                    break
                if images_seen % stride == 0:
                    pairing.pending.append((stamp, message))
                images_seen += 1
                bar.update(1)
            else:
                pairing.add_ground_truth(kinds[message.topic], stamp, message)
            for ready in pairing.ready():
                evaluate(*ready)
        for ready in pairing.ready(final=True):
            evaluate(*ready)
    except Exception as exc:  # noqa: BLE001 - keep and report what was computed so far
        errors.add(f'dense evaluation stopped after {result["frames_evaluated"]} frames: '
                   f'{type(exc).__name__}: {exc}', logging.ERROR)
    finally:
        bar.close()
    if depth_acc.num_images or depth_acc.num_skipped:
        result['depth'] = depth_acc.compute()
    if isinstance(confusion, ConfusionMatrix):
        result['segmentation'] = confusion.summary()
        if plots and confusion.total:
            from relperception.evaluation.dense_plots import plot_confusion_matrix

            try:
                plot_confusion_matrix(output_dir / 'confusion_matrix.png', confusion)
                result['outputs']['confusion_matrix'] = 'confusion_matrix.png'
            except (ValueError, RuntimeError, OSError) as exc:
                errors.add(f'confusion matrix plot failed: {exc}', logging.ERROR)
    result['unknown_gt_label_pixels'] = unknown_labels
    result['timing_median_ms'] = _percentile(timings, 50)
    result['timing_p95_ms'] = _percentile(timings, 95)
    depth_text = 'n/a' if result['depth'] is None else \
        f"abs_rel {result['depth']['abs_rel']:.4g}, delta1 {result['depth']['delta1']:.3f}"
    seg_text = 'n/a' if result['segmentation'] is None else \
        f"mIoU {result['segmentation']['miou']:.3f}"
    logger.info('dense evaluation (%s): %d frames; depth %s; segmentation %s',
                result['model'], result['frames_evaluated'], depth_text, seg_text)
    return result


def write_report(output_dir: Path, bag_path: Path, config, requested: str, resolved: str,
                 gt_scale: bool, rows: list, poses_vo: list, gt_stamps, gt_poses,
                 errors: ErrorLog, plots: bool) -> dict[str, Any]:
    """Write trajectories, metrics, timing and plots; return the summary (without errors).

    Shared by the offline evaluation and the live replay (``live_eval``), so that both write
    the same files.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    statuses = [row['status'] for row in rows]
    process_ms = [row['process_ms'] for row in rows]
    alignment = 'se3' if resolved == 'rgbd' else 'sim3'
    if resolved == 'rgbd':
        scale_source = 'depth (metric RGB-D)'
    elif gt_scale:
        scale_source = ('ground-truth distance between consecutive frames (benchmark option '
                        '--gt-scale; not available to a real monocular system)')
    else:
        scale_source = ('none metric: monocular trajectory in the unit of its first map '
                        '(the local map carries it), Sim(3) alignment')
    summary: dict[str, Any] = {
        'bag': str(bag_path),
        'output_dir': str(output_dir),
        'requested_mode': requested,
        'mode': resolved,
        'gt_scale': bool(gt_scale),
        'scale_source': scale_source,
        'frames_processed': len(rows),
        'frames_tracked': sum(s == 'tracking' for s in statuses),
        'frames_lost': sum(s == 'lost' for s in statuses),
        'reinitializations': sum(s == 'reinitialized' for s in statuses),
        'keyframes': sum(bool(row['is_keyframe']) for row in rows),
        'frames_tracked_against_map': sum(row.get('scale_source') == 'map' for row in rows),
        'frames_by_scale_source': dict(Counter(
            row['scale_source'] for row in rows if row.get('scale_source'))),
        'timing_median_ms': _percentile(process_ms, 50),
        'timing_p95_ms': _percentile(process_ms, 95),
        'timing_mean_ms': float(np.mean(process_ms)) if process_ms else float('nan'),
        'timing_max_ms': float(np.max(process_ms)) if process_ms else float('nan'),
        'ground_truth_poses': len(gt_stamps),
        'matcher': config['matcher'],
    }
    summary.update(dict.fromkeys(METRIC_KEYS))
    summary['alignment'] = alignment
    _write_timing_csv(output_dir / 'timing.csv', rows)

    keep = [i for i, row in enumerate(rows) if row['status'] != 'lost']
    stamps = np.asarray([rows[i]['stamp_ns'] for i in keep], dtype=np.int64)
    poses = np.stack([poses_vo[i] for i in keep]) if keep else np.zeros((0, 4, 4))
    summary['outputs'] = {}
    if len(stamps) == 0:
        errors.add('no frame was tracked; no trajectory written', logging.ERROR)
        return summary
    gt_at_frames, valid = (interpolate_poses(gt_stamps, gt_poses, stamps, GT_TOLERANCE_S)
                           if len(gt_stamps) else (None, np.zeros(len(stamps), bool)))
    if valid.any():
        first = int(np.flatnonzero(valid)[0])
        T_gtworld_vo = gt_at_frames[first] @ invert_transform(poses[first])
        poses = T_gtworld_vo[None] @ poses
        summary['trajectory_frame'] = 'ground-truth world (VO anchored at the first frame)'
    else:
        summary['trajectory_frame'] = 'first camera (no ground truth at the frame stamps)'
        if len(gt_stamps):
            errors.add(f'ground truth [{gt_stamps[0]}, {gt_stamps[-1]}] ns does not cover the '
                       f'frames [{stamps[0]}, {stamps[-1]}] ns; no metrics', logging.ERROR)
    write_tum(output_dir / 'trajectory.tum', stamps, poses)
    summary['outputs']['trajectory'] = 'trajectory.tum'
    if not valid.any():
        return summary
    write_tum(output_dir / 'groundtruth.tum', stamps[valid], gt_at_frames[valid])
    summary['outputs']['groundtruth'] = 'groundtruth.tum'
    try:
        result = evaluate_trajectory(stamps, poses, stamps[valid], gt_at_frames[valid],
                                     alignment=alignment, max_time_diff_s=GT_TOLERANCE_S)
    except ValueError as exc:
        errors.add(f'trajectory evaluation failed: {exc}', logging.ERROR)
        return summary
    summary.update(summary_metrics(result))
    if plots:
        _plot(output_dir, result, rows, resolved, alignment, summary, errors)
    return summary


def _plot(output_dir: Path, result: dict, rows: list, resolved: str, alignment: str,
          summary: dict, errors: ErrorLog) -> None:
    per_pose = result[PER_POSE_KEY]
    title = (f'{resolved} VO, {alignment} aligned: ATE RMSE {result["ate_rmse_m"]:.4f} m, '
             f'{result["num_poses_matched"]} poses')
    origin_ns = int(per_pose['stamps_ns'][0])
    events = {}
    for status in ('lost', 'reinitialized'):
        times = [(row['stamp_ns'] - origin_ns) / _NS_PER_S for row in rows
                 if row['status'] == status]
        if times:
            events[status] = times
    try:
        plot_trajectories(output_dir / 'trajectory.png', per_pose['gt_xyz'], per_pose['est_xyz'],
                          title, est_label=f'{resolved} VO')
        plot_errors(output_dir / 'errors.png', per_pose['stamps_s'], per_pose['ape_m'],
                    title=f'{resolved} VO: absolute position error ({alignment})',
                    events=events)
        summary['outputs'].update({'trajectory_plot': 'trajectory.png',
                                   'errors_plot': 'errors.png'})
    except (ValueError, RuntimeError, OSError) as exc:
        errors.add(f'plotting failed: {exc}', logging.ERROR)


def _log_summary(summary: Mapping[str, Any]) -> None:
    def fmt(value, unit=''):
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return 'n/a'
        return f'{value:.4g}{unit}' if isinstance(value, float) else f'{value}{unit}'

    logger.info('%s: %s mode, %d frames processed, %d lost, %d re-initialisations, '
                '%d errors', summary['bag'], summary['mode'], summary['frames_processed'],
                summary['frames_lost'], summary['reinitializations'], summary['num_errors'])
    logger.info('ATE RMSE %s, RPE %s / %s, drift %s, scale %s (%s); VO %s median, %s p95',
                fmt(summary.get('ate_rmse_m'), ' m'), fmt(summary.get('rpe_trans_rmse_m'), ' m'),
                fmt(summary.get('rpe_rot_rmse_deg'), ' deg'),
                fmt(summary.get('drift_percent'), ' %'), fmt(summary.get('scale')),
                summary.get('alignment'), fmt(summary.get('timing_median_ms'), ' ms'),
                fmt(summary.get('timing_p95_ms'), ' ms'))
