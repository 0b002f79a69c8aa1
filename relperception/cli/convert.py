# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception convert tum|kitti|images SRC -o BAG``: dataset folder -> rosbag2 bag."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

HELP = 'convert a TUM RGB-D, KITTI odometry or image(+label) folder to a rosbag2 bag'
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``convert``."""
    parser.add_argument('format', choices=('tum', 'kitti', 'images'), help='dataset layout')
    parser.add_argument('source', help='dataset folder (for images: the image folder, or a '
                                       'folder with images/ and labels/)')
    parser.add_argument('-o', '--output', required=True, help='bag directory to create')
    parser.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap')
    parser.add_argument('--overwrite', action='store_true', help='replace an existing bag')
    parser.add_argument('--intrinsics', type=float, nargs=4, metavar=('FX', 'FY', 'CX', 'CY'),
                        help='camera intrinsics in pixels (tum, images); no distortion')
    parser.add_argument('--labels', help='images: label folder (default SRC/labels when SRC '
                                         'has images/ and labels/)')
    parser.add_argument('--fps', type=float, default=1.0, help='images: frame rate, Hz')
    parser.add_argument('--poses', metavar='FILE',
                        help='kitti: the ground-truth poses file (default: SRC/poses.txt, or '
                             "the official layout's dataset/poses/NN.txt for "
                             'dataset/sequences/NN)')


def _camera(args, folder: Path):
    """Return the camera of ``--intrinsics`` for the images of ``folder`` (None without).

    What :func:`relperception.core_types.check_intrinsics` finds is warned about: the bag is
    written as asked, but ``eval``, ``replay`` and the nodes refuse a ``CameraInfo`` it finds
    impossible (a principal point outside the images, ...) and warn about a suspect one (a
    principal point far from the centre: intrinsics of another image size).
    """
    from relperception.core_types import Camera, check_intrinsics
    if args.intrinsics is None:
        return None
    fx, fy, cx, cy = args.intrinsics
    width, height = _image_size(folder)
    camera = Camera.from_intrinsics(fx, fy, cx, cy, width, height)
    for problem in check_intrinsics(camera.K, width, height):
        logger.warning('%s: --intrinsics %s%s', folder, problem.message,
                       '; eval, replay and the nodes refuse such a CameraInfo'
                       if problem.impossible else '')
    return camera


def _image_size(folder: Path):
    from relperception.data.converters import list_images, read_colour_image
    image, _ = read_colour_image(list_images(folder)[0])
    return image.shape[1], image.shape[0]


def run(args: argparse.Namespace) -> int:
    """Run the converter of ``args.format`` and log what was written."""
    try:
        summary = _convert(args)
    except FileExistsError as exc:
        logger.error('%s', exc)
        return 1
    logger.info('wrote %s (%s), stamps %s .. %s ns', summary['path'], summary['storage'],
                summary['start_ns'], summary['end_ns'])
    for topic, count in sorted(summary['messages'].items()):
        logger.info('  %-28s %6d messages', topic, count)
    return 0


def _convert(args: argparse.Namespace) -> dict:
    from relperception.data import converters

    source = Path(args.source)
    if not source.exists():
        raise FileNotFoundError(f'source folder {source} does not exist')
    if not source.is_dir():
        raise ValueError(f'source {source} is a file; give the dataset folder (for images: '
                         f'the folder of the image files)')
    if args.poses and args.format != 'kitti':
        raise ValueError('--poses is for kitti (TUM ground truth is groundtruth.txt)')
    if args.format == 'tum':
        camera = _camera(args, source / 'rgb')
        summary = converters.convert_tum(source, args.output, storage=args.storage,
                                         camera=camera, overwrite=args.overwrite)
    elif args.format == 'kitti':
        if args.intrinsics:
            raise ValueError('kitti takes its intrinsics from calib.txt; drop --intrinsics')
        summary = converters.convert_kitti(source, args.output, storage=args.storage,
                                           overwrite=args.overwrite, poses=args.poses)
    else:
        images_dir, labels_dir = source, args.labels
        if (source / 'images').is_dir():
            images_dir = source / 'images'
            if labels_dir is None and (source / 'labels').is_dir():
                labels_dir = source / 'labels'
        camera = _camera(args, images_dir)
        summary = converters.convert_image_folder(images_dir, args.output, labels_dir=labels_dir,
                                                  fps=args.fps, camera=camera,
                                                  storage=args.storage, overwrite=args.overwrite)
    return summary
