# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Calibration images from the user's own recording, for INT8 quantisation of an export.

:func:`read_calibration_images` reads ``frames`` images spread evenly over a bag's image topic
(the bag reader of :mod:`relperception.data.bag`, ``Image`` or ``CompressedImage``), as RGB for
the dense models or grey pairs for LoFTR; the model's own preprocessing turns them into inputs
(``relperception.models.calibration``, ``relperception.matching.loftr.calibration``) and
:mod:`relperception.runtime.quantize` calibrates on them.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List

import numpy as np
from relperception.data.topics import IMAGE

logger = logging.getLogger(__name__)

#: Calibration images read from the bag by default.
DEFAULT_CALIBRATION_FRAMES = 64


def read_calibration_images(bag, topic: str = IMAGE,
                            frames: int = DEFAULT_CALIBRATION_FRAMES, grey: bool = False,
                            gap: int = 0) -> List[Any]:
    """Read calibration images spread evenly over a bag's image topic.

    Args:
        bag: a rosbag2 directory or ``.mcap`` / ``.db3`` file.
        topic: the image topic (``sensor_msgs/Image``; its ``/compressed`` variant is read
            when only that is recorded).
        frames: how many images (or pairs) to return, at most; fewer when the topic has fewer
            messages.
        grey: return (H, W) uint8 grey images (``to_mono8``, as the VO pipeline reads them)
            instead of (H, W, 3) uint8 RGB (``to_rgb8``, as the dense pipeline reads them).
        gap: 0 for single images; > 0 for pairs ``(image i, image i + gap)`` counted in
            messages of the topic.

    Returns:
        A list of images, or of ``(image0, image1)`` tuples when ``gap`` > 0, in bag order.

    Raises:
        FileNotFoundError: the bag does not exist.
        ValueError: ``frames`` < 1 or ``gap`` < 0, not a bag, no such topic (the message lists
            the bag's topics), or no image on it could be read.
    """
    from relperception.data.bag import BagReader
    from relperception.data.bag_frames import require_topic
    from relperception.data.messages import decode_image_message
    from relperception.imaging.image_encodings import to_mono8, to_rgb8

    if int(frames) < 1:
        raise ValueError(f'calibration frames must be >= 1, got {frames}')
    if int(gap) < 0:
        raise ValueError(f'gap must be >= 0, got {gap}')
    convert = to_mono8 if grey else to_rgb8
    with BagReader(bag) as reader:
        name = require_topic(reader.topics, topic, 'image', bag)
        count = int(reader.message_counts.get(name, 0))
        starts = _spread(count - int(gap), int(frames))
        wanted = set(starts) | {s + int(gap) for s in starts}
        images: Dict[int, np.ndarray] = {}
        problems = []
        for index, message in enumerate(reader.messages([name])):
            if index > max(wanted, default=-1):
                break
            if index not in wanted:
                continue
            try:
                array, encoding = decode_image_message(message.msg, message.msgtype)
                images[index] = np.ascontiguousarray(convert(array, encoding))
            except (ValueError, TypeError) as exc:
                problems.append(f'message {index}: {exc}')
    if problems:
        logger.warning('%d calibration images of %s could not be read (first: %s)',
                       len(problems), name, problems[0])
    if gap:
        result = [(images[s], images[s + gap]) for s in starts
                  if s in images and s + gap in images]
    else:
        result = [images[s] for s in starts if s in images]
    if not result:
        raise ValueError(f'no calibration image could be read from topic {name!r} of bag '
                         f'{bag} ({count} messages'
                         + (f', {gap} apart in pairs' if gap else '')
                         + (f'; {problems[0]}' if problems else '') + ')')
    logger.info('read %d calibration %s from %s of %s (%d messages)', len(result),
                'pairs' if gap else 'images', name, bag, count)
    return result


def _spread(count: int, frames: int) -> List[int]:
    """Return up to ``frames`` distinct message indices spread evenly over ``range(count)``."""
    if count <= 0:
        return []
    return sorted({int(i) for i in np.linspace(0, count - 1, min(frames, count)).round()})
