# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""From a rosbag2 recording to :class:`~relperception.core_types.Frame` objects in stamp order.

:class:`FrameAssembler` pairs every image with the latest ``CameraInfo`` and, for RGB-D, the
depth image of the same header stamp (else the nearest within
:data:`DEPTH_PAIRING_TOLERANCE_S`); images wait in a short queue for their depth, since the two
topics may be interleaved either way in a bag. Bad messages (undecodable image, no CameraInfo
yet, an image of another size than CameraInfo, depth of the wrong size or without one valid
pixel) go to an :class:`~relperception.data.error_log.ErrorLog` and the frame is skipped or its
depth ignored. :func:`require_topic`, :func:`resolve_mode` and :func:`read_ground_truth` are the
other steps every reader of a recording takes (offline evaluation, live replay, frame pairs).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
import logging
import time

import numpy as np
from relperception.config import SPECS
from relperception.core_types import Frame
from relperception.data.error_log import ErrorLog

logger = logging.getLogger(__name__)

#: Odometry modes a recording is read for (the schema's ``odometry.mode`` choices).
MODES = tuple(SPECS['odometry.mode'].choices)
#: Largest stamp difference of an image and the depth image paired with it (seconds).
DEPTH_PAIRING_TOLERANCE_S = 0.02
#: Largest stamp difference when ground truth is associated with a frame (seconds).
GT_TOLERANCE_S = 0.02
#: Ground truth is not interpolated across a gap longer than this many times its median pose
#: interval (frames there have no ground truth).
GT_MAX_GAP_FACTOR = 5.0
#: Auto mode runs RGB-D when the bag has at least this many depth images per image.
AUTO_RGBD_MIN_DEPTH_FRACTION = 0.5
#: Images waiting for their depth image; older ones are processed without waiting longer.
MAX_PENDING_IMAGES = 8
#: Depth messages kept for pairing.
MAX_BUFFERED_DEPTHS = 32

_NS_PER_S = 1_000_000_000


def message_stamp_ns(message) -> int:
    """Return the header stamp (ns) of a bag message, its log time when it has no header.

    Raises:
        ValueError: a header stamp that is not a valid time.
    """
    from relperception.data.messages import stamp_to_ns

    header = getattr(message.msg, 'header', None)
    return stamp_to_ns(header.stamp) if header is not None else message.log_time_ns


def check_depth_message(message, image_shape):
    """Decode a depth message (Image or compressedDepth) and apply the odometry's checks.

    Args:
        message: a bag message (``msg``, ``msgtype``) of a depth topic.
        image_shape: (height, width) of the colour image the depth belongs to.

    Returns:
        The :class:`~relperception.imaging.depth_checks.DepthCheck`: the depth in metres, or
        the problem (one of ``DEPTH_PROBLEMS``; ``undecodable`` for a message that cannot be
        decoded) and a sentence.
    """
    from relperception.data.messages import decode_image_message
    from relperception.imaging.depth_checks import check_depth, DepthCheck

    try:
        array, encoding = decode_image_message(message.msg, message.msgtype)
    except (ValueError, TypeError) as exc:
        return DepthCheck(None, 'undecodable', f'undecodable depth ({exc})')
    return check_depth(array, encoding, image_shape)


def require_topic(bag_topics: Mapping[str, str], topic: str, what: str, bag_path) -> str:
    """Return the topic to read for ``topic`` (or its ``/compressed`` variant).

    Args:
        bag_topics: the bag's topic -> type.
        topic: the configured topic.
        what: its role (``image``, ``camera_info``, ...), for the message.
        bag_path: the bag, for the message.

    Raises:
        ValueError: the bag has neither, with the list of its topics.
    """
    from relperception.data.topics import compressed_topic

    if topic in bag_topics:
        return topic
    if what == 'image' and compressed_topic(topic) in bag_topics:
        logger.info('reading %s (the bag has no %s)', compressed_topic(topic), topic)
        return compressed_topic(topic)
    listing = ', '.join(f'{name} ({kind})' for name, kind in sorted(bag_topics.items()))
    raise ValueError(f'bag {bag_path} has no {what} topic {topic!r} (set topics.{what} in the '
                     f'configuration); its topics: {listing or "none"}')


def resolve_mode(requested: str, num_depth: int, num_images: int,
                 depth_topic: str | None) -> str:
    """Return 'rgbd' or 'mono'; 'auto' is RGB-D when at least half the images have depth.

    Raises:
        ValueError: an unknown mode, or 'rgbd' for a bag without depth.
    """
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
    """Return (stamps_ns (N,) int64, T_world_cam (N, 4, 4)) of the ground-truth topic.

    Poses come in stamp order, one per stamp: a repeated stamp keeps its first pose, and the
    repeats are reported in ``errors``.
    """
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
    stamps, poses = stamps[order], np.stack(poses)[order]
    repeated = np.flatnonzero(np.diff(stamps) == 0) + 1
    if len(repeated):
        # the same instant twice: keep the first pose, and say whether the two disagree
        moved = np.linalg.norm(poses[repeated, :3, 3] - poses[repeated - 1, :3, 3], axis=1)
        errors.add(f'{topic}: {len(repeated)} poses repeat the stamp of the pose before them '
                   f'({int((moved > 1e-6).sum())} at another position, up to '
                   f'{float(moved.max()):.3g} m away); the first pose of each stamp is kept')
        keep = np.ones(len(stamps), bool)
        keep[repeated] = False
        stamps, poses = stamps[keep], poses[keep]
    return stamps, poses


def _same_camera(camera0, camera1) -> bool:
    return (camera0.width, camera0.height, camera0.distortion_model) == (
        camera1.width, camera1.height, camera1.distortion_model) and np.array_equal(
        camera0.K, camera1.K) and np.array_equal(camera0.distortion, camera1.distortion)


def _intrinsics_text(camera) -> str:
    K = camera.K
    return ' '.join(f'{v:.6g}' for v in (K[0, 0], K[1, 1], K[0, 2], K[1, 2]))


class FrameAssembler:
    """Pairs images with CameraInfo and depth and turns them into Frames, in stamp order.

    With ``predict_depth`` (``rgb (H, W, 3) uint8 -> depth (H, W) float32 metres, NaN
    invalid``, e.g. a dense model) the depth of every frame is predicted from its RGB image
    instead of read from the depth topic (``use_depth`` must then be False: nothing waits for
    depth messages); the prediction time of each frame is in :attr:`dense_ms` (stamp -> ms) and
    failures (``ValueError`` / ``RuntimeError``, no valid pixel) in :attr:`dense_failures`.

    Args:
        use_depth: pair every image with the depth image of its stamp (RGB-D).
        errors: where problems are logged and counted.
        predict_depth: optional depth predictor replacing the depth topic.
        rectified_input: the images are already rectified (``image_rect``): the camera is the
            left 3x3 block of CameraInfo's ``p`` without distortion, as the node's
            ``rectified_input`` parameter does.
    """

    def __init__(self, use_depth: bool, errors: ErrorLog, predict_depth=None,
                 rectified_input: bool = False):
        """Start with no frame; see the class docstring."""
        if predict_depth is not None and use_depth:
            raise ValueError('predict_depth replaces the depth topic: use_depth must be False')
        self.use_depth = use_depth
        self.errors = errors
        self.predict_depth = predict_depth
        self.rectified_input = bool(rectified_input)
        self.dense_ms: dict[int, float] = {}
        self.dense_failures = 0
        self.camera = None
        self.pending: deque = deque()           # (stamp_ns, BagMessage) of images
        self.depths: deque = deque(maxlen=MAX_BUFFERED_DEPTHS)  # (stamp_ns, BagMessage)
        self.newest_depth_ns: int | None = None
        self.frames_without_depth = 0
        #: depth images refused, by :data:`~relperception.imaging.depth_checks.DEPTH_PROBLEMS`.
        self.depth_problems: Counter = Counter()
        self.frames_skipped = 0
        self.last_image_stamp_ns: int | None = None
        self.tolerance_ns = round(DEPTH_PAIRING_TOLERANCE_S * _NS_PER_S)

    def add_camera_info(self, message) -> list:
        from relperception.data.messages import camera_from_camera_info

        try:
            camera = camera_from_camera_info(message.msg, rectified=self.rectified_input)
        except (ValueError, AttributeError) as exc:
            self.errors.add(f'{message.topic} at {message.log_time_ns} ns: bad CameraInfo '
                            f'({exc})')
            return []
        previous = self.camera
        if previous is not None and not _same_camera(previous, camera):
            self.errors.add(f'{message.topic} at {message.log_time_ns} ns: the camera changed '
                            f'(fx fy cx cy {_intrinsics_text(previous)} -> '
                            f'{_intrinsics_text(camera)}, {previous.width}x{previous.height} '
                            f'-> {camera.width}x{camera.height}); the frames after it use the '
                            'new one')
        self.camera = camera
        return self._ready()

    def _checked_stamp(self, message) -> int | None:
        """Return the message's stamp (ns), or None after recording a bad header stamp."""
        try:
            return message_stamp_ns(message)
        except ValueError as exc:
            self.errors.add(f'{message.topic}: bad header stamp ({exc})')
            return None

    def add_depth(self, message) -> list:
        stamp = self._checked_stamp(message)
        if stamp is None:
            return []
        self.depths.append((stamp, message))
        self.newest_depth_ns = stamp if self.newest_depth_ns is None else \
            max(self.newest_depth_ns, stamp)
        return self._ready()

    def add_image(self, message) -> list:
        stamp = self._checked_stamp(message)
        if stamp is None:
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
            overflow = len(self.pending) > MAX_PENDING_IMAGES
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

        where = f'{message.topic} at {stamp} ns'
        last = self.last_image_stamp_ns
        if last is not None and stamp <= last:
            self.errors.add(f'{where}: header stamp not after the previous image ({last} ns; '
                            'stamps repeated or out of order in the recording); frame skipped')
            self.frames_skipped += 1
            return None
        self.last_image_stamp_ns = stamp
        if self.camera is None:
            self.errors.add(f'{where}: no CameraInfo received yet; frame skipped')
            self.frames_skipped += 1
            return None
        try:
            array, encoding = decode_image_message(message.msg, message.msgtype)
            image = to_mono8(array, encoding)
            rgb = self._rgb(array, encoding) if self.predict_depth is not None else None
        except (ValueError, TypeError) as exc:
            self.errors.add(f'{where}: undecodable image ({exc}); frame skipped')
            self.frames_skipped += 1
            return None
        if image.shape != (self.camera.height, self.camera.width):
            self.errors.add(f'{where}: image is {image.shape[1]}x{image.shape[0]} but CameraInfo '
                            f'says {self.camera.width}x{self.camera.height}; frame skipped')
            self.frames_skipped += 1
            return None
        if self.predict_depth is not None:
            depth = self._dense_depth_for(stamp, rgb)
        else:
            depth = self._depth_for(stamp, image.shape) if self.use_depth else None
        if (self.use_depth or self.predict_depth is not None) and depth is None:
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
            depth = self.predict_depth(rgb)
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
        message = self._nearest_depth(stamp)
        if message is None:
            self.errors.add(f'image at {stamp} ns: no depth image within '
                            f'{DEPTH_PAIRING_TOLERANCE_S * 1e3:.0f} ms; depth ignored')
            return None
        where = f'{message.topic} for the image at {stamp} ns'
        check = check_depth_message(message, shape)
        if check.depth is None:
            self.depth_problems[check.problem] += 1
            self.errors.add(f'{where}: {check.message}; depth ignored (depth_problems.'
                            f'{check.problem})')
        return check.depth
