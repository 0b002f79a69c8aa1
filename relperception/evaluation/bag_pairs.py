# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Image pairs with ground-truth relative pose sampled from a recording, for pair evaluation.

:func:`pairs_from_bag` reads a rosbag2 recording written by the converters or ``relperception
synth`` (image, CameraInfo and ground-truth pose topics) into the
:class:`relperception.data.pairs.ImagePair` of :mod:`relperception.evaluation.pairs`; the
ground truth is interpolated at the image stamps as in the offline evaluation
(:func:`relperception.evaluation.trajectory.interpolate_poses`).
"""

from __future__ import annotations

from collections import deque
import logging
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Optional

from relperception.data.pairs import check_gaps, ImagePair, relative_transform
from relperception.evaluation.trajectory import interpolate_poses

logger = logging.getLogger(__name__)


def pairs_from_bag(bag_path, gaps: Iterable[int] = (1,),
                   config: Optional[Mapping[str, Any]] = None, stride: int = 1,
                   max_pairs: Optional[int] = None) -> List[ImagePair]:
    """Sample pairs ``(frame i, frame i + gap)`` with ground-truth relative pose from a bag.

    Frames are the decodable images of the ``topics.image`` topic in stamp order (with the
    latest ``topics.camera_info``); ``i`` runs over every ``stride``-th frame. The ground-truth
    pose topic (``topics.ground_truth_pose``, ``T_world_cam``) is interpolated at each image
    stamp (at most 20 ms outside its range, as in the offline evaluation); pairs with a frame
    without ground truth are dropped. Only ``max(gaps) + 1`` frames are held in memory.

    Args:
        bag_path: rosbag2 directory or ``.mcap`` / ``.db3`` file.
        gaps: frame gaps (integers >= 1), e.g. ``(1, 5)``.
        config: flat configuration overrides (``topics.*``), None for the defaults.
        stride: first frames of pairs are ``0, stride, 2 * stride, ...`` (>= 1).
        max_pairs: stop after this many pairs per gap (None: all).

    Returns:
        the pairs, grouped by first frame; ``name`` is ``'<bag>:<i>-<i+gap>'``.

    Raises:
        FileNotFoundError: the bag does not exist.
        ValueError: bad arguments, unreadable bag, missing image / CameraInfo / ground-truth
            topic (the message lists the bag's topics).
    """
    from relperception.config import (DEFAULT_BASE_FRAME_ID, DEFAULT_CAMERA_MOUNT_XYZ_QXYZW,
                                      load_config)
    from relperception.data.bag import BagReader
    from relperception.data.bag_frames import (first_frame_id, FrameAssembler,
                                               GT_MAX_GAP_FACTOR, GT_TOLERANCE_S,
                                               read_camera_ground_truth, require_topic)
    from relperception.odometry.mount import camera_mount_transform
    from relperception.data.error_log import ErrorLog

    gaps = check_gaps(gaps)
    if int(stride) < 1:
        raise ValueError(f'stride must be >= 1, got {stride}')
    if max_pairs is not None and int(max_pairs) < 1:
        raise ValueError(f'max_pairs must be >= 1 or None, got {max_pairs}')
    config = load_config(overrides=dict(config or {}))
    bag_path = Path(bag_path)
    errors = ErrorLog()
    pairs: List[ImagePair] = []
    counts = dict.fromkeys(gaps, 0)
    with BagReader(bag_path) as reader:
        topics = reader.topics
        image_topic = require_topic(topics, config['topics.image'], 'image', bag_path)
        info_topic = require_topic(topics, config['topics.camera_info'], 'camera_info',
                                   bag_path)
        gt_topic = require_topic(topics, config['topics.ground_truth_pose'],
                                 'ground_truth_pose', bag_path)
        # the odometry node's default frames: ground truth of base_link is moved to the camera
        gt_stamps, gt_poses, _ = read_camera_ground_truth(
            reader, gt_topic, errors, first_frame_id(reader, image_topic),
            DEFAULT_BASE_FRAME_ID, camera_mount_transform(DEFAULT_CAMERA_MOUNT_XYZ_QXYZW))
        if len(gt_stamps) == 0:
            raise ValueError(f'bag {bag_path} has no readable ground-truth pose on {gt_topic}')
        assembler = FrameAssembler(False, errors)
        window: deque = deque(maxlen=gaps[-1] + 1)  # (index, frame, T_world_cam or None)
        index = 0
        warned_distortion = False

        def add(ready) -> bool:
            nonlocal index, warned_distortion
            for stamp, frame, _ in ready:
                if frame is None:
                    continue
                if frame.camera.has_distortion and not warned_distortion:
                    warned_distortion = True
                    logger.warning('%s: the camera has distortion %s; pairs use the raw '
                                   'pixels with K only', bag_path, frame.camera.distortion)
                pose, valid = interpolate_poses(gt_stamps, gt_poses, [stamp], GT_TOLERANCE_S,
                                                GT_MAX_GAP_FACTOR)
                window.append((index, frame, pose[0] if valid[0] else None))
                for gap in gaps:
                    if len(window) <= gap:
                        continue
                    first, frame0, pose0 = window[-1 - gap]
                    if first % stride or pose0 is None or window[-1][2] is None:
                        continue
                    if max_pairs is not None and counts[gap] >= max_pairs:
                        continue
                    counts[gap] += 1
                    pairs.append(ImagePair(
                        frame0.image, frame.image, frame0.camera.K, frame.camera.K,
                        relative_transform(pose0, window[-1][2]),
                        name=f'{bag_path.name}:{first}-{index}', source=str(bag_path), gap=gap))
                index += 1
            return max_pairs is None or min(counts.values()) < max_pairs

        for message in reader.messages([image_topic, info_topic]):
            ready = (assembler.add_camera_info(message) if message.topic == info_topic
                     else assembler.add_image(message))
            if not add(ready):
                break
        else:
            add(assembler.flush())
        for message in reader.errors:
            errors.add(message)
    if errors.count:
        logger.warning('%s: %d problems while reading pairs (first: %s)', bag_path,
                       errors.count, errors.kept[0] if errors.kept else '')
    pairs.sort(key=lambda p: (int(p.name.rsplit(':', 1)[1].split('-')[0]), p.gap))
    logger.info('%s: %d frames, %d pairs (%s)', bag_path, index, len(pairs),
                ', '.join(f'gap {g}: {c}' for g, c in counts.items()))
    return pairs
