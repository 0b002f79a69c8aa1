# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""From a rosbag2 recording to :class:`~relperception.core_types.Frame` objects in stamp order.

:class:`FrameAssembler` pairs every image with the latest ``CameraInfo`` and, for RGB-D, the
depth image of the same header stamp (else the nearest within
:data:`DEPTH_PAIRING_TOLERANCE_S`); images wait for their depth, since the two topics may be
interleaved either way in a bag and either may be logged late: up to :data:`PAIRING_WINDOW_S`
of bag time (and :data:`MAX_PAIRING_BYTES`), not a fixed number of messages. Bad messages
(undecodable image, no CameraInfo yet, an image of another size than CameraInfo, depth of the
wrong size or without one valid pixel) go to an :class:`~relperception.data.error_log.ErrorLog`
and the frame is skipped or its depth ignored. :func:`require_topic`, :func:`resolve_mode` and
:func:`read_camera_ground_truth` are the other steps every reader of a recording takes (offline
evaluation, live replay, frame pairs). Ground truth may be ``PoseStamped``,
``PoseWithCovarianceStamped``, ``nav_msgs/Odometry``, ``TransformStamped`` or
``tf2_msgs/TFMessage``; poses of the robot base (child frame ``base_frame_id``) are moved to
the camera through the camera mount.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
import logging
import math
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
#: The time offset of the ground truth against the images is estimated within +- this many
#: seconds of the one applied (``eval --gt-time-offset``).
GT_OFFSET_SEARCH_S = 1.0
#: ... and reported as a warning when the motions correlate at least this well there (-1..1)
#: and it is more than GT_TOLERANCE_S from the one applied.
GT_OFFSET_MIN_CORRELATION = 0.5
#: An offset is only taken as found where its correlation beats the one at the applied offset
#: by at least this much (smooth, even motion correlates about as well at any offset).
GT_OFFSET_MIN_GAIN = 0.05
#: Auto mode runs RGB-D when the bag has at least this many depth images per image.
AUTO_RGBD_MIN_DEPTH_FRACTION = 0.5
#: Offline pairing (eval, ``eval --dense``) keeps an image waiting for its depth image (or
#: dense ground truth), and keeps depth images for the images to come, until the bag has moved
#: this far past it in log time (seconds): recordings log depth, or images, late.
PAIRING_WINDOW_S = 5.0
#: ... and holds at most this many bytes of message data waiting (images and depth together);
#: past it the oldest image is processed with what has arrived.
MAX_PAIRING_BYTES = 1 << 30

_NS_PER_S = 1_000_000_000

#: Largest ``--gt-time-offset`` magnitude, seconds: wide enough to move ground truth stamped
#: from 0 onto epoch stamps (about 1.7e9 s), narrow enough that every shifted stamp stays a
#: 64-bit nanosecond count.
MAX_GT_TIME_OFFSET_S = 4e9


def gt_time_offset_ns(offset_s) -> int:
    """Return the ground-truth time offset ``offset_s`` (seconds) in integer nanoseconds.

    The one check of the value that ``eval``, ``replay`` and ``compare`` (``--gt-time-offset``)
    add to the ground-truth stamps before association.

    Raises:
        ValueError: ``offset_s`` is not a finite number of at most ``MAX_GT_TIME_OFFSET_S``
            seconds either way.
    """
    try:
        offset = float(offset_s)
    except (TypeError, ValueError):
        raise ValueError(f'gt_time_offset_s must be a number of seconds, got {offset_s!r}') \
            from None
    if not math.isfinite(offset):
        raise ValueError(f'gt_time_offset_s must be finite, got {offset_s!r}')
    if abs(offset) > MAX_GT_TIME_OFFSET_S:
        raise ValueError(f'gt_time_offset_s must be within +-{MAX_GT_TIME_OFFSET_S:g} s (the '
                         f'shifted stamps must stay 64-bit nanoseconds), got {offset_s!r}')
    return round(offset * _NS_PER_S)


def message_stamp_ns(message) -> int:
    """Return the header stamp (ns) of a bag message, its log time when it has no header.

    Raises:
        ValueError: a header stamp that is not a valid time.
    """
    from relperception.data.messages import stamp_to_ns

    header = getattr(message.msg, 'header', None)
    return stamp_to_ns(header.stamp) if header is not None else message.log_time_ns


def message_nbytes(message) -> int:
    """Return the size of a bag message's ``data`` field (0 without one)."""
    data = getattr(message.msg, 'data', None)
    if data is None:
        return 0
    return int(data.nbytes) if hasattr(data, 'nbytes') else len(data)


class StampBuffer:
    """Bag messages kept by header stamp for pairing, bounded by bag log time and bytes.

    Offline, nothing forces a short queue: a message is dropped only once no later image can
    use it (:meth:`drop_before`) or the bag has moved :data:`PAIRING_WINDOW_S` past it
    (:meth:`drop_older`).
    """

    def __init__(self):
        """Start empty."""
        self.items: deque = deque()   # (stamp_ns, BagMessage, nbytes), in arrival order
        self.newest_ns: int | None = None
        self.nbytes = 0

    def __len__(self) -> int:
        """Return the number of messages kept."""
        return len(self.items)

    def add(self, stamp: int, message) -> None:
        """Keep ``message`` (header stamp ``stamp`` ns)."""
        size = message_nbytes(message)
        self.items.append((stamp, message, size))
        self.nbytes += size
        self.newest_ns = stamp if self.newest_ns is None else max(self.newest_ns, stamp)

    def first(self):
        """Return ``(stamp_ns, message)`` of the oldest message kept."""
        stamp, message, _ = self.items[0]
        return stamp, message

    def popleft(self):
        """Remove and return ``(stamp_ns, message)`` of the oldest message kept."""
        stamp, message, size = self.items.popleft()
        self.nbytes -= size
        return stamp, message

    def has_exact(self, stamp: int) -> bool:
        """Whether a message of exactly this stamp is kept."""
        return any(item[0] == stamp for item in self.items)

    def settled(self, stamp: int, tolerance_ns: int) -> bool:
        """Whether waiting longer cannot bring a better match for ``stamp``."""
        return self.has_exact(stamp) or (self.newest_ns is not None
                                         and self.newest_ns > stamp + tolerance_ns)

    def nearest(self, stamp: int, tolerance_ns: int):
        """Return the kept message nearest to ``stamp`` within the tolerance, or None."""
        best = None
        for item_stamp, message, _ in self.items:
            gap = abs(item_stamp - stamp)
            if gap <= tolerance_ns and (best is None or gap < best[0]):
                best = (gap, message)
        return None if best is None else best[1]

    def _keep(self, keep) -> None:
        kept = deque(item for item in self.items if keep(item))
        self.items = kept
        self.nbytes = sum(item[2] for item in kept)

    def drop_before(self, stamp: int) -> None:
        """Forget the messages stamped before ``stamp`` (no later image can use them)."""
        if self.items and min(item[0] for item in self.items) < stamp:
            self._keep(lambda item: item[0] >= stamp)

    def drop_older(self, log_time_ns: int) -> None:
        """Forget the messages logged before ``log_time_ns``."""
        if self.items and self.items[0][1].log_time_ns < log_time_ns:
            self._keep(lambda item: item[1].log_time_ns >= log_time_ns)


def pairing_overdue(newest_log_time_ns: int, message, held_bytes: int) -> bool:
    """Whether an image ``message`` waiting for its pair has waited long enough.

    True once the bag has moved :data:`PAIRING_WINDOW_S` of log time past it, or the messages
    held for pairing exceed :data:`MAX_PAIRING_BYTES`.
    """
    return (newest_log_time_ns - message.log_time_ns > PAIRING_WINDOW_S * _NS_PER_S
            or held_bytes > MAX_PAIRING_BYTES)


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


def find_depth_topic(bag_topics: Mapping[str, str], topic: str | None) -> str | None:
    """Return ``topic``, else its ``/compressedDepth`` variant, if the bag has it; else None.

    As :func:`require_topic` falls back to an image topic's ``/compressed`` variant, a bag
    recorded with ``compressed_depth_image_transport`` only is read from
    ``<topic>/compressedDepth``. None (logged) when the bag has neither, or ``topic`` is empty.
    """
    from relperception.data.topics import compressed_depth_topic

    if not topic:
        return None
    if topic in bag_topics:
        return topic
    if compressed_depth_topic(topic) in bag_topics:
        logger.info('reading %s (the bag has no %s)', compressed_depth_topic(topic), topic)
        return compressed_depth_topic(topic)
    logger.info('bag has no depth topic %s', topic)
    return None


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


def stamped_poses(message) -> list[tuple[int, str, np.ndarray]]:
    """Return ``(stamp_ns, child_frame_id, T_parent_child)`` of every pose a message holds.

    ``geometry_msgs/PoseStamped`` and ``PoseWithCovarianceStamped`` hold one pose and name no
    child frame (``''``); ``nav_msgs/Odometry`` one pose of its ``child_frame_id``;
    ``geometry_msgs/TransformStamped`` one transform; ``tf2_msgs/TFMessage`` one per
    transform. Frame ids lose a leading ``/``. A message without a header is stamped with its
    bag log time.

    Raises:
        ValueError, AttributeError: a malformed pose or stamp, or another message type.
    """
    from relperception.data.messages import (stamp_to_ns, transform_from_pose_msg,
                                             transform_from_transform_msg)

    msg = message.msg
    items = msg.transforms if hasattr(msg, 'transforms') else [msg]
    poses = []
    for item in items:
        header = getattr(item, 'header', None)
        stamp = stamp_to_ns(header.stamp) if header is not None else message.log_time_ns
        child = str(getattr(item, 'child_frame_id', '')).lstrip('/')
        if hasattr(item, 'transform'):
            poses.append((stamp, child, transform_from_transform_msg(item)))
        else:
            poses.append((stamp, child, transform_from_pose_msg(item)))
    return poses


def read_pose_topic(reader, topic: str | None, errors: ErrorLog) -> dict:
    """Return ``{child_frame_id: (stamps_ns (N,) int64, T_parent_child (N, 4, 4))}``.

    Reads a pose topic of any type :func:`stamped_poses` takes (``''`` is the child of pose
    messages that name none). Poses of each child come in stamp order, one per stamp: a
    repeated stamp keeps its first pose, and the repeats are reported in ``errors``.
    """
    by_child: dict = {}
    if topic is None:
        return by_child
    try:
        for message in reader.messages([topic]):
            try:
                for stamp, child, T in stamped_poses(message):
                    by_child.setdefault(child, ([], []))
                    by_child[child][0].append(stamp)
                    by_child[child][1].append(T)
            except (ValueError, AttributeError) as exc:
                errors.add(f'{topic} at {message.log_time_ns} ns: bad pose ({exc})')
    except Exception as exc:  # noqa: BLE001 - a damaged bag keeps what was read
        errors.add(f'reading ground truth stopped: {type(exc).__name__}: {exc}', logging.ERROR)
    return {child: _unique_stamps(topic, np.asarray(stamps, dtype=np.int64), np.stack(poses),
                                  errors)
            for child, (stamps, poses) in by_child.items()}


def _unique_stamps(topic: str, stamps: np.ndarray, poses: np.ndarray, errors: ErrorLog):
    """Sort poses by stamp and keep the first of each stamp (the repeats are reported)."""
    order = np.argsort(stamps, kind='stable')
    stamps, poses = stamps[order], poses[order]
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


def _no_poses():
    return np.zeros(0, np.int64), np.zeros((0, 4, 4))


def read_ground_truth(reader, topic: str | None, errors: ErrorLog):
    """Return (stamps_ns (N,) int64, T_parent_child (N, 4, 4)) of a pose topic.

    Poses come in stamp order, one per stamp: a repeated stamp keeps its first pose, and the
    repeats are reported in ``errors``. A topic with transforms of several child frames (a TF
    topic) gives those of the frame with the most poses, and says so in ``errors``; see
    :func:`read_camera_ground_truth` for the camera's poses.
    """
    by_child = read_pose_topic(reader, topic, errors)
    if not by_child:
        return _no_poses()
    child = max(by_child, key=lambda name: len(by_child[name][0]))
    if len(by_child) > 1:
        errors.add(f'{topic}: poses of {len(by_child)} child frames '
                   f'({", ".join(repr(name) for name in sorted(by_child))}); those of '
                   f'{child!r} are read')
    return by_child[child]


def read_camera_ground_truth(reader, topic: str | None, errors: ErrorLog,
                             camera_frame: str | None, base_frame: str, T_base_cam):
    """Return the ground truth as camera poses: ``(stamps_ns, T_world_cam, taken_as)``.

    The child frame of the poses decides (:func:`read_pose_topic`):

    * ``camera_frame`` (the images' ``header.frame_id``): camera poses as they are;
    * ``base_frame`` (the odometry node's ``base_frame_id``): poses of the robot base, moved to
      the camera by the mount, ``T_world_cam = T_world_base @ T_base_cam``;
    * a pose message that names no child frame (``PoseStamped``): camera poses, the
      convention of the bags relperception writes;
    * one other child frame: taken as camera poses, with a warning in ``errors``;
    * several other child frames (a TF topic without the camera or the base): no ground
      truth, with an error.

    Args:
        reader: an open :class:`~relperception.data.bag.BagReader`.
        topic: the ground-truth topic, None for none.
        errors: where problems are logged and counted.
        camera_frame: the camera's frame id ('' or None when unknown).
        base_frame: the robot base's frame id.
        T_base_cam: (4, 4) camera mount (the camera optical frame in the base frame).

    Returns:
        stamps (N,) int64, poses (N, 4, 4) and a sentence saying what the poses were taken
        as (None without ground truth).

    Raises:
        ValueError: a ``T_base_cam`` that is not a (4, 4) transform.
    """
    from relperception.transforms import check_transform

    T_base_cam = check_transform(T_base_cam, 'T_base_cam')
    camera_frame = (camera_frame or '').lstrip('/')
    base_frame = str(base_frame).lstrip('/')
    by_child = read_pose_topic(reader, topic, errors)
    if not by_child:
        return (*_no_poses(), None)
    if camera_frame and camera_frame in by_child:
        stamps, poses = by_child[camera_frame]
        taken_as = f'camera poses (child frame {camera_frame!r}, that of the images)'
        if camera_frame == base_frame:
            errors.add(f'{topic}: the frame {camera_frame!r} of the images is also the base '
                       'frame (base_frame_id): the ground truth cannot be told to be of the '
                       'camera or of the robot; it is taken as the camera poses')
    elif base_frame in by_child:
        stamps, poses = by_child[base_frame]
        poses = poses @ T_base_cam
        taken_as = (f'robot base poses (child frame {base_frame!r}, base_frame_id) moved to the '
                    'camera with the camera mount camera_mount_xyz_qxyzw')
        logger.info('%s: ground truth of the base frame %s: camera poses through the camera '
                    'mount', topic, base_frame)
    elif len(by_child) == 1:
        child, (stamps, poses) = next(iter(by_child.items()))
        if not child:
            taken_as = 'camera poses (the pose messages name no child frame)'
        else:
            taken_as = f'camera poses (assumed: child frame {child!r} is not known)'
            errors.add(f'{topic}: the child frame {child!r} of the ground truth is neither '
                       f'the camera frame {camera_frame or "(unknown)"!r} (frame_id of the '
                       f'images) nor the base frame {base_frame!r} (base_frame_id): its poses '
                       'are taken as camera poses; if they are the robot base, set '
                       'base_frame_id and camera_mount_xyz_qxyzw of visual_odometry_node')
    else:
        errors.add(f'{topic}: poses of the child frames '
                   f'{", ".join(repr(name) for name in sorted(by_child))}, none of them the '
                   f'camera frame {camera_frame or "(unknown)"!r} or the base frame '
                   f'{base_frame!r}: no ground truth', logging.ERROR)
        return (*_no_poses(), None)
    return stamps, poses, taken_as


def first_frame_id(reader, topic: str) -> str | None:
    """Return the ``header.frame_id`` of the first readable message on ``topic``, or None."""
    for message in reader.messages([topic]):
        header = getattr(message.msg, 'header', None)
        return None if header is None else str(header.frame_id)
    return None


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
        self.pending = StampBuffer()            # images, in arrival order
        self.depths = StampBuffer()
        self.log_time_ns: int | None = None     # of the newest message added
        self.frames_without_depth = 0
        #: depth images refused, by :data:`~relperception.imaging.depth_checks.DEPTH_PROBLEMS`.
        self.depth_problems: Counter = Counter()
        self.frames_skipped = 0
        #: 16-bit images whose values stay below the 16-bit range (10/12-bit data; the first
        #: is named in the errors, see :func:`relperception.imaging.low_range_16bit`).
        self.frames_16bit_low_range = 0
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

    def _seen(self, message) -> None:
        log_time = message.log_time_ns
        self.log_time_ns = log_time if self.log_time_ns is None else \
            max(self.log_time_ns, log_time)

    def add_depth(self, message) -> list:
        self._seen(message)
        stamp = self._checked_stamp(message)
        if stamp is None:
            return []
        self.depths.add(stamp, message)
        return self._ready()

    def add_image(self, message) -> list:
        self._seen(message)
        stamp = self._checked_stamp(message)
        if stamp is None:
            self.frames_skipped += 1
            return []
        self.pending.add(stamp, message)
        return self._ready()

    def flush(self) -> list:
        """Return every waiting frame (end of the bag)."""
        return self._ready(final=True)

    def _ready(self, final: bool = False) -> list:
        """Return (stamp_ns, frame or None, decode_ms) of the images that need not wait longer."""
        out = []
        window_ns = round(PAIRING_WINDOW_S * _NS_PER_S)
        if self.log_time_ns is not None:
            self.depths.drop_older(self.log_time_ns - window_ns)
        while self.pending:
            stamp, message = self.pending.first()
            overflow = pairing_overdue(self.log_time_ns, message,
                                       self.pending.nbytes + self.depths.nbytes)
            # The CameraInfo of the first image may follow it in the bag: wait for it.
            has_camera = self.camera is not None
            has_depth = not self.use_depth or self.depths.settled(stamp, self.tolerance_ns)
            done = final or overflow or (has_camera and has_depth)
            if not done:
                break
            self.pending.popleft()
            start = time.perf_counter()
            frame = self._build(stamp, message)
            elapsed_ms = 1e3 * (time.perf_counter() - start) - self.dense_ms.get(stamp, 0.0)
            out.append((stamp, frame, elapsed_ms))
        return out

    def _build(self, stamp: int, message):
        from relperception.data.messages import decode_image_message
        from relperception.imaging.image_encodings import low_range_16bit, to_mono8

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
            low_range = low_range_16bit(array, encoding)
            rgb = self._rgb(array, encoding) if self.predict_depth is not None else None
        except (ValueError, TypeError) as exc:
            self.errors.add(f'{where}: undecodable image ({exc}); frame skipped')
            self.frames_skipped += 1
            return None
        if low_range:
            self.frames_16bit_low_range += 1
            if self.frames_16bit_low_range == 1:
                self.errors.add(f'{where}: {low_range} (every such frame is counted in '
                                'frames_16bit_low_range)')
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
        message = self.depths.nearest(stamp, self.tolerance_ns)
        # images come in stamp order: older depth images can serve none of the next ones
        self.depths.drop_before(stamp - self.tolerance_ns)
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
