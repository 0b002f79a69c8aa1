# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Dataset -> rosbag2 converters (TUM RGB-D, KITTI odometry, image + label folders).

Every converter keeps the dataset's own timestamps, writes the topics of
:mod:`relperception.data.topics` in time order and returns a summary dict::

    {'path': str, 'storage': str, 'messages': {topic: count}, 'start_ns': int, 'end_ns': int,
     ...converter-specific keys}

The converters are importable from here (``from relperception.data.converters import
convert_tum``); their modules load on first use.
"""

from __future__ import annotations

from importlib import import_module
from logging import getLogger
from pathlib import Path

import numpy as np

logger = getLogger(__name__)

IMAGE_SUFFIXES = ('.png', '.jpg', '.jpeg', '.ppm', '.pgm', '.bmp', '.tif', '.tiff')

_LAZY = {'convert_tum': 'tum', 'convert_kitti': 'kitti', 'convert_image_folder': 'images'}

__all__ = ['IMAGE_SUFFIXES', 'check_same_encoding', 'convert_image_folder', 'convert_kitti',
           'convert_tum', 'list_images', 'read_colour_image', 'read_raw_image', 'require_dir']


def __getattr__(name: str):
    if name in _LAZY:
        module = import_module(f'{__name__}.{_LAZY[name]}')
        return getattr(module, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def require_dir(path, what: str) -> Path:
    """Return ``path`` as a Path; raise ``FileNotFoundError`` naming ``what`` if it is no dir."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f'{what} {path} does not exist or is not a directory')
    return path


def list_images(folder: Path) -> list[Path]:
    """Return the image files of ``folder`` sorted by name.

    Raises:
        FileNotFoundError: if ``folder`` is missing.
        ValueError: if it holds no image files.
    """
    folder = require_dir(folder, 'image folder')
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f'no image files ({", ".join(IMAGE_SUFFIXES)}) in {folder}')
    return files


def _imread(path: Path) -> np.ndarray:
    from relperception.imaging import read_image_file

    return read_image_file(path)


def read_colour_image(path: Path) -> tuple[np.ndarray, str]:
    """Read an 8-bit image file as ``(array, encoding)``.

    Returns (H, W, 3) uint8 RGB with ``'rgb8'`` for colour files (alpha dropped) and (H, W) uint8
    with ``'mono8'`` for grey files.

    Raises:
        ValueError: for unreadable files or bit depths other than 8.
    """
    import cv2
    image = _imread(path)
    if image.dtype != np.uint8:
        raise ValueError(f'{path}: expected an 8-bit image, got {image.dtype}')
    if image.ndim == 2:
        return image, 'mono8'
    if image.shape[2] == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2RGB), 'rgb8'
    if image.shape[2] == 3:
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB), 'rgb8'
    raise ValueError(f'{path}: unsupported channel count {image.shape[2]}')


def check_same_encoding(path: Path, encoding: str, first_path: Path,
                        first_encoding: str) -> None:
    """Raise ValueError when ``path`` (``encoding``) is not of the first frame's kind.

    One image topic holds one kind of picture: a colour file among grey ones (or the reverse)
    is refused, naming both files, rather than written with another encoding.
    """
    if encoding != first_encoding:
        kinds = {'mono8': 'grey', 'rgb8': 'colour'}
        raise ValueError(f'{path} is a {kinds.get(encoding, encoding)} image but the first '
                         f'frame {first_path.name} is {kinds.get(first_encoding, first_encoding)}'
                         ': convert the files to one kind (all grey or all colour) first')


def read_raw_image(path: Path) -> np.ndarray:
    """Read an image file unchanged (dtype and channels as stored, channels in BGR order).

    Raises:
        ValueError: for unreadable files.
    """
    return _imread(path)
