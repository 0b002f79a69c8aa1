# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Image files: read with the checks of the compressed-image decoder, written whole or not at all.

PNG, JPEG and the other formats OpenCV reads and writes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
from relperception.atomic_files import atomic_path
from relperception.imaging.compressed import decode_image_bytes
from relperception.imaging.image_encodings import low_range_16bit, to_8bit
from relperception.validation import check_not_folder

logger = logging.getLogger(__name__)


def read_image_file(path: str | Path, flags: int = cv2.IMREAD_UNCHANGED) -> np.ndarray:
    """Read an image file (what ``cv2.imread`` reads), refusing a file it would misread.

    Args:
        path: the image file.
        flags: ``cv2.IMREAD_*`` flags (``cv2.IMREAD_COLOR``: (H, W, 3) BGR uint8,
            ``cv2.IMREAD_GRAYSCALE``: (H, W) uint8, the default: as stored).

    Returns:
        the image array (OpenCV's channel order). With ``IMREAD_COLOR`` or
        ``IMREAD_GRAYSCALE`` a 16-bit file is brought to 8 bits by 1/256
        (:func:`relperception.imaging.to_8bit`), as the nodes and ``eval`` scale a 16-bit
        image message; one whose values stay below the 16-bit range (10/12-bit data) is
        warned about (:func:`relperception.imaging.low_range_16bit`).

    Raises:
        FileNotFoundError: no such file.
        ValueError: an empty, truncated (a JPEG without its end-of-image marker) or
            undecodable file, or (as 8-bit) a floating-point image; the message names it.
    """
    path = Path(path)
    check_not_folder(path, 'image file')
    if not path.is_file():
        raise FileNotFoundError(f'image file not found: {path}')
    payload = np.fromfile(path, dtype=np.uint8)
    if flags not in (cv2.IMREAD_COLOR, cv2.IMREAD_GRAYSCALE):
        return decode_image_bytes(payload, str(path), flags)
    try:
        image = decode_image_bytes(payload, str(path), flags | cv2.IMREAD_ANYDEPTH)
    except ValueError:   # OpenCV cannot convert e.g. a float TIFF: say what the file holds
        try:
            image = decode_image_bytes(payload, str(path), cv2.IMREAD_UNCHANGED)
        except ValueError:
            image = None
        if image is None or image.dtype in (np.uint8, np.uint16):
            raise
    if image.dtype == np.uint16:
        # as the nodes and eval read a 16-bit image message: one image, one model input
        problem = low_range_16bit(image, 'mono16' if image.ndim == 2 else 'bgr16')
        if problem:
            logger.warning('%s: %s', path, problem)
        return to_8bit(image)
    if image.dtype != np.uint8:
        raise ValueError(f'{path}: a {image.dtype} image, not a camera picture (a depth map '
                         'or another measurement?); give 8- or 16-bit images')
    return image


def write_image(path: str | Path, image: np.ndarray) -> Path:
    """Write an RGB or single-channel image through a temporary file; return the path.

    Args:
        path: output file; its suffix picks the format (``.png``, ``.jpg``, ...); parent
            folders are created.
        image: (H, W, 3) uint8 RGB, or (H, W) uint8 / uint16 single channel (written as is).

    Raises:
        ValueError: for another shape or dtype.
        OSError: when OpenCV cannot write the file.
    """
    if not isinstance(image, np.ndarray) or image.dtype not in (np.uint8, np.uint16) or not (
            image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 3)):
        raise ValueError('image must be (H, W, 3) RGB or (H, W), uint8 or uint16; got '
                         f'{getattr(image, "shape", None)} {getattr(image, "dtype", None)}')
    pixels = cv2.cvtColor(image, cv2.COLOR_RGB2BGR) if image.ndim == 3 else image
    path = Path(path)
    with atomic_path(path) as temporary:
        try:
            written = cv2.imwrite(str(temporary), pixels)
        except cv2.error as error:   # e.g. no writer for the suffix
            raise OSError(f'cannot write {path}: {str(error).strip().splitlines()[-1]}') from None
        if not written:
            raise OSError(f'cannot write {path}')
    return path


#: The first bytes of every PNG file.
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
#: PNG colour type of an indexed-colour (palette) image.
PNG_INDEXED_COLOUR = 3


def read_palette_indices(path: str | Path) -> np.ndarray | None:
    """Return the palette indices of an indexed-colour (palette) PNG file, None for others.

    A palette PNG stores one index per pixel and a table of colours; OpenCV decodes the
    colours. Label maps are often stored so (class id = index, the palette only shows them in
    colour), so this reads the indices themselves: the file is decoded with its palette
    replaced by one whose entry ``i`` is grey level ``i``, which is exact whatever colours
    (repeated ones included) the original palette holds.

    Args:
        path: the image file.

    Returns:
        (H, W) uint8 indices, or None when the file is no indexed-colour PNG.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a palette PNG whose chunks are damaged or that OpenCV cannot decode.
    """
    import struct
    import zlib

    path = Path(path)
    check_not_folder(path, 'image file')
    if not path.is_file():
        raise FileNotFoundError(f'image file not found: {path}')
    data = path.read_bytes()
    if not data.startswith(PNG_SIGNATURE):
        return None
    offset, indexed = len(PNG_SIGNATURE), False
    while offset + 8 <= len(data):
        length, kind = struct.unpack('>I4s', data[offset:offset + 8])
        body = offset + 8
        if body + length + 4 > len(data):
            break
        if kind == b'IHDR':
            indexed = length >= 10 and data[body + 9] == PNG_INDEXED_COLOUR
            if not indexed:
                return None
        elif kind == b'PLTE' and indexed:
            if length % 3 or not 0 < length // 3 <= 256:
                raise ValueError(f'{path}: damaged PNG palette ({length} bytes)')
            grey = bytes(np.repeat(np.arange(length // 3, dtype=np.uint8), 3))
            chunk = b'PLTE' + grey
            patched = (data[:offset] + struct.pack('>I', length) + chunk +
                       struct.pack('>I', zlib.crc32(chunk) & 0xFFFFFFFF) +
                       data[body + length + 4:])
            image = decode_image_bytes(np.frombuffer(patched, np.uint8), str(path),
                                       cv2.IMREAD_COLOR)
            return np.ascontiguousarray(image[..., 0])
        elif kind in (b'IDAT', b'IEND'):
            break
        offset = body + length + 4
    if indexed:
        raise ValueError(f'{path}: damaged palette PNG (no palette before the image data)')
    return None
