# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Folder of images (+ optional label images) -> rosbag2, e.g. CamVid.

Layout (CamVid / SegNet)::

    images/<name>.png   8-bit colour or grey
    labels/<name>.png   8-bit single-channel class ids, same name and size (CamVid: 11 = ignore)

Images are taken in file-name order and stamped ``start_time_ns + i / fps``. Written topics:
``IMAGE`` (rgb8, or mono8 for grey files), ``CAMERA_INFO`` and, with labels, ``GT_LABELS``
(mono8) at the same stamps. Without given intrinsics the camera is a guess -- fx = fy = image
width (about 53 degrees horizontal field of view), principal point at the image centre
((W - 1) / 2, (H - 1) / 2), no distortion -- and a warning says so.
"""

from __future__ import annotations

from logging import getLogger
from pathlib import Path

import numpy as np

from ...core_types import Camera
from ...data import topics
from ...data.bag import BagWriter
from ...data.converters import (check_same_encoding, list_images, read_colour_image,
                                read_raw_image)
from ...validation import check_frame_rate

logger = getLogger(__name__)

DEFAULT_START_TIME_NS = 1_000_000_000
"""First stamp: 1 s rather than 0, which ROS tools read as "no time"."""


def guess_camera(width: int, height: int) -> Camera:
    """Return the documented fallback camera: fx = fy = width, centred, no distortion."""
    return Camera.from_intrinsics(float(width), float(width), (width - 1) / 2.0,
                                  (height - 1) / 2.0, width, height)


def _read_label(path: Path, shape) -> np.ndarray:
    label = read_raw_image(path)
    if label.dtype != np.uint8 or label.ndim != 2:
        raise ValueError(f'{path}: labels must be single-channel 8-bit class ids, got '
                         f'{label.dtype} with shape {label.shape} (a colour-coded label image?)')
    if label.shape != tuple(shape):
        raise ValueError(f'{path}: label size {label.shape[::-1]} differs from its image '
                         f'{tuple(shape)[::-1]}')
    return label


def convert_image_folder(images_dir, output_bag, labels_dir=None, fps: float = 1.0,
                         camera: Camera | None = None, storage: str = 'mcap',
                         overwrite: bool = False,
                         start_time_ns: int = DEFAULT_START_TIME_NS) -> dict[str, object]:
    """Convert an image folder (+ label folder) to a rosbag2 bag (see the module docstring).

    Args:
        images_dir: folder of image files.
        output_bag: bag directory to create.
        labels_dir: optional folder of label images with the same file names.
        fps: frame rate used for the stamps, Hz (in (0, ``MAX_FRAME_RATE_HZ``]).
        camera: intrinsics; default: the guess of :func:`guess_camera` (with a warning).
        storage: ``'mcap'`` or ``'sqlite3'``.
        overwrite: replace an existing bag.
        start_time_ns: stamp of the first image, integer nanoseconds.

    Returns:
        summary dict: ``path``, ``storage``, ``messages`` per topic, ``start_ns``, ``end_ns``,
        ``frames``, ``labels``, ``camera_guessed``, ``names`` (file stems in stamp order).

    Raises:
        FileNotFoundError: missing folders or a missing label file.
        ValueError: empty folder, bad fps, images of different sizes, non-8-bit labels, or
            the image folder given as the label folder.
    """
    check_frame_rate(fps)
    if int(start_time_ns) < 0:
        raise ValueError(f'start_time_ns must be >= 0, got {start_time_ns}')
    images = list_images(Path(images_dir))
    labels = None
    if labels_dir is not None:
        labels_dir = Path(labels_dir)
        if not labels_dir.is_dir():
            raise FileNotFoundError(f'label folder {labels_dir} does not exist')
        if labels_dir.resolve() == Path(images_dir).resolve():
            raise ValueError(f'the label folder {labels_dir} is the image folder: its grey '
                             'images would be written as class ids; give the folder of the '
                             'label images')
        labels = []
        for image_path in images:
            candidates = [labels_dir / image_path.name, labels_dir / f'{image_path.stem}.png']
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                raise FileNotFoundError(f'no label image for {image_path.name} in {labels_dir}')
            labels.append(found)

    first, first_encoding = read_colour_image(images[0])
    height, width = first.shape[:2]
    camera_guessed = camera is None
    if camera is None:
        camera = guess_camera(width, height)
        logger.warning('no intrinsics given for %s: guessing fx = fy = %d px, principal point '
                       'at the centre; metric results will be off', images_dir, width)
    elif (camera.width, camera.height) != (width, height):
        raise ValueError(f'camera is {camera.width}x{camera.height} but the images are '
                         f'{width}x{height}')

    period_ns = 1e9 / float(fps)
    with BagWriter(output_bag, storage=storage, overwrite=overwrite) as writer:
        for i, image_path in enumerate(images):
            stamp = int(start_time_ns) + round(i * period_ns)
            image, encoding = read_colour_image(image_path)
            if image.shape[:2] != (height, width):
                raise ValueError(f'{image_path}: size {image.shape[1]}x{image.shape[0]} differs '
                                 f'from the first image ({width}x{height})')
            check_same_encoding(image_path, encoding, images[0], first_encoding)
            writer.write_image(topics.IMAGE, stamp, image, encoding, topics.CAMERA_FRAME)
            writer.write_camera_info(topics.CAMERA_INFO, stamp, camera, topics.CAMERA_FRAME)
            if labels is not None:
                label = _read_label(labels[i], (height, width))
                writer.write_image(topics.GT_LABELS, stamp, label, 'mono8', topics.CAMERA_FRAME)
        writer.set_custom_data(topics.GROUND_TRUTH_KEY,
                               f'labels ({len(labels)} on {topics.GT_LABELS})' if labels
                               else 'none')
    summary = writer.summary()
    summary.update(frames=len(images), labels=0 if labels is None else len(labels),
                   camera_guessed=camera_guessed, names=[p.stem for p in images])
    logger.info('images %s -> %s: %d frames, %d labels', images_dir, output_bag, len(images),
                summary['labels'])
    return summary
