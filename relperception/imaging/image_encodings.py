# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Conversion between ``sensor_msgs/Image`` fields and numpy arrays (cv_bridge replacement).

The message is duck-typed: anything with the attributes ``height``, ``width``, ``encoding``,
``is_bigendian``, ``step`` and ``data`` works, so the same code serves rclpy messages (``data`` is
an ``array.array('B')``), rosbags messages (``data`` is a 1-D ``np.uint8`` array) and plain
objects (``data`` may also be ``bytes``, ``bytearray`` or a ``memoryview``).

Encoding names follow ``sensor_msgs/image_encodings.hpp`` (REP 118 for depth): ``mono16`` and
``16UC1`` depth images hold millimetres, ``32FC1`` depth images hold metres. Jazzy's ``uyvy`` and
``yuyv`` are the layouts of ``yuv422`` and ``yuv422_yuy2`` (:data:`ENCODING_ALIASES`). Data must
be exactly ``step * height`` bytes, as cv_bridge's C++ ``toCvCopy`` requires (its Python
``imgmsg_to_cv2`` ignores trailing bytes; an image with them is refused here, with a message
that counts them).
"""

from __future__ import annotations

import array
import logging
from typing import NamedTuple

import cv2
import numpy as np

logger = logging.getLogger(__name__)


class EncodingSpec(NamedTuple):
    """Storage layout of one image encoding: element type and channels per pixel."""

    dtype: np.dtype
    channels: int


def _build_specs() -> dict[str, EncodingSpec]:
    specs = {}
    u8, u16 = np.dtype(np.uint8), np.dtype(np.uint16)
    for name, dtype, channels in (
            ('mono8', u8, 1), ('mono16', u16, 1),
            ('rgb8', u8, 3), ('bgr8', u8, 3), ('rgba8', u8, 4), ('bgra8', u8, 4),
            ('rgb16', u16, 3), ('bgr16', u16, 3), ('rgba16', u16, 4), ('bgra16', u16, 4),
            ('bayer_rggb8', u8, 1), ('bayer_bggr8', u8, 1),
            ('bayer_gbrg8', u8, 1), ('bayer_grbg8', u8, 1),
            ('bayer_rggb16', u16, 1), ('bayer_bggr16', u16, 1),
            ('bayer_gbrg16', u16, 1), ('bayer_grbg16', u16, 1),
            ('yuv422', u8, 2), ('yuv422_yuy2', u8, 2)):
        specs[name] = EncodingSpec(dtype, channels)
    for prefix, dtype in (('8U', np.uint8), ('8S', np.int8), ('16U', np.uint16),
                          ('16S', np.int16), ('32S', np.int32), ('32F', np.float32),
                          ('64F', np.float64)):
        for channels in (1, 2, 3, 4):
            specs[f'{prefix}C{channels}'] = EncodingSpec(np.dtype(dtype), channels)
    return specs


#: Other names of the same layouts: ROS 2 Jazzy's ``sensor_msgs/image_encodings`` names
#: UYVY and YUYV 4:2:2 ``uyvy`` / ``yuyv``, and keeps ``yuv422`` / ``yuv422_yuy2`` (deprecated).
ENCODING_ALIASES = {'uyvy': 'yuv422', 'yuyv': 'yuv422_yuy2'}
#: YUV 4:2:2 encodings: two pixels share their U and V samples, so the width must be even.
YUV422_ENCODINGS = ('yuv422', 'yuv422_yuy2', *ENCODING_ALIASES)

_SPECS: dict[str, EncodingSpec] = _build_specs()
_SPECS.update({alias: _SPECS[name] for alias, name in ENCODING_ALIASES.items()})

#: Every encoding that :func:`image_to_numpy` and :func:`numpy_to_image_fields` accept.
SUPPORTED_ENCODINGS = tuple(_SPECS)

#: Encodings that :func:`depth_to_metres` accepts (REP 118).
DEPTH_ENCODINGS = ('16UC1', 'mono16', '32FC1')

# cv2.cvtColor codes towards RGB and towards grey, per colour/grey encoding.
_TO_RGB = {
    'bgr8': cv2.COLOR_BGR2RGB, 'bgr16': cv2.COLOR_BGR2RGB, '8UC3': cv2.COLOR_BGR2RGB,
    'rgba8': cv2.COLOR_RGBA2RGB, 'rgba16': cv2.COLOR_RGBA2RGB,
    'bgra8': cv2.COLOR_BGRA2RGB, 'bgra16': cv2.COLOR_BGRA2RGB, '8UC4': cv2.COLOR_BGRA2RGB,
    'mono8': cv2.COLOR_GRAY2RGB, 'mono16': cv2.COLOR_GRAY2RGB, '8UC1': cv2.COLOR_GRAY2RGB,
    'bayer_rggb8': cv2.COLOR_BayerRGGB2RGB, 'bayer_bggr8': cv2.COLOR_BayerBGGR2RGB,
    'bayer_gbrg8': cv2.COLOR_BayerGBRG2RGB, 'bayer_grbg8': cv2.COLOR_BayerGRBG2RGB,
    'bayer_rggb16': cv2.COLOR_BayerRGGB2RGB, 'bayer_bggr16': cv2.COLOR_BayerBGGR2RGB,
    'bayer_gbrg16': cv2.COLOR_BayerGBRG2RGB, 'bayer_grbg16': cv2.COLOR_BayerGRBG2RGB,
    'yuv422': cv2.COLOR_YUV2RGB_UYVY, 'yuv422_yuy2': cv2.COLOR_YUV2RGB_YUY2,
}
_TO_MONO = {
    'rgb8': cv2.COLOR_RGB2GRAY, 'rgb16': cv2.COLOR_RGB2GRAY,
    'bgr8': cv2.COLOR_BGR2GRAY, 'bgr16': cv2.COLOR_BGR2GRAY, '8UC3': cv2.COLOR_BGR2GRAY,
    'rgba8': cv2.COLOR_RGBA2GRAY, 'rgba16': cv2.COLOR_RGBA2GRAY,
    'bgra8': cv2.COLOR_BGRA2GRAY, 'bgra16': cv2.COLOR_BGRA2GRAY, '8UC4': cv2.COLOR_BGRA2GRAY,
    'bayer_rggb8': cv2.COLOR_BayerRGGB2GRAY, 'bayer_bggr8': cv2.COLOR_BayerBGGR2GRAY,
    'bayer_gbrg8': cv2.COLOR_BayerGBRG2GRAY, 'bayer_grbg8': cv2.COLOR_BayerGRBG2GRAY,
    'bayer_rggb16': cv2.COLOR_BayerRGGB2GRAY, 'bayer_bggr16': cv2.COLOR_BayerBGGR2GRAY,
    'bayer_gbrg16': cv2.COLOR_BayerGBRG2GRAY, 'bayer_grbg16': cv2.COLOR_BayerGRBG2GRAY,
    'yuv422': cv2.COLOR_YUV2GRAY_UYVY, 'yuv422_yuy2': cv2.COLOR_YUV2GRAY_YUY2,
}
_MONO_AS_IS = ('mono8', '8UC1', 'mono16')
for _table in (_TO_RGB, _TO_MONO):
    _table.update({alias: _table[name] for alias, name in ENCODING_ALIASES.items()})

#: Encodings that :func:`to_rgb8` accepts.
RGB_CONVERTIBLE_ENCODINGS = tuple(sorted(set(_TO_RGB) | {'rgb8', 'rgb16'}))
#: Encodings that :func:`to_mono8` accepts.
MONO_CONVERTIBLE_ENCODINGS = tuple(sorted(set(_TO_MONO) | set(_MONO_AS_IS)))


def _refuse_unconvertible(encoding: str, target: str, convertible) -> None:
    """Raise the ValueError of an encoding that ``target`` cannot be made from.

    ``16UC1`` and ``32FC1`` are depth (REP 118), never a camera picture: the message says so,
    since a depth topic remapped onto an image topic is the likely cause.
    """
    if encoding in convertible:
        return
    if encoding in ('16UC1', '32FC1'):
        raise ValueError(f'{encoding!r} is a depth encoding (REP 118), not a camera image: is a '
                         'depth topic connected to the image input? (a 16-bit grey camera '
                         "publishes 'mono16')")
    raise ValueError(f'cannot convert {encoding!r} to {target}; convertible encodings: '
                     f'{", ".join(convertible)}')


def encoding_spec(encoding: str) -> EncodingSpec:
    """Return the element dtype (native byte order) and channel count of ``encoding``.

    Raises:
        ValueError: if the encoding is not one of :data:`SUPPORTED_ENCODINGS`.
    """
    try:
        return _SPECS[encoding]
    except (KeyError, TypeError):
        raise ValueError(
            f'unsupported image encoding {encoding!r}; supported: '
            f'{", ".join(SUPPORTED_ENCODINGS)}') from None


def data_as_uint8(data) -> np.ndarray:
    """View a message's ``data`` field as a 1-D uint8 array without copying."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise ValueError(f'image data must be a uint8 array, got dtype {data.dtype}')
        if data.ndim != 1:
            raise ValueError(f'image data must be 1-D, got shape {data.shape}')
        return data
    if isinstance(data, array.array):
        if data.typecode != 'B':
            raise ValueError(
                f"image data must be array.array('B'), got typecode {data.typecode!r}")
        return np.frombuffer(data, dtype=np.uint8)
    if isinstance(data, (bytes, bytearray)):
        return np.frombuffer(data, dtype=np.uint8)
    if isinstance(data, memoryview):
        if data.itemsize != 1 or data.format not in ('B', 'b', 'c'):
            raise ValueError(f'image data memoryview must hold bytes, got format {data.format!r}')
        return np.frombuffer(data, dtype=np.uint8)
    raise ValueError(
        "image data must be bytes, bytearray, memoryview, array.array('B') or a 1-D uint8 "
        f'numpy array, got {type(data).__name__}')


def _positive_int(value, name: str) -> int:
    try:
        result = int(value)
    except (TypeError, ValueError):
        raise ValueError(f'image {name} must be an integer, got {value!r}') from None
    if result != value:
        raise ValueError(f'image {name} must be an integer, got {value!r}')
    return result


def image_to_numpy(msg) -> np.ndarray:
    """Convert a ``sensor_msgs/Image`` (rclpy, rosbags or duck-typed) to a numpy array.

    Args:
        msg: object with ``height``, ``width`` (pixels), ``encoding`` (str), ``is_bigendian``
            (0/1), ``step`` (bytes per row) and ``data`` (``bytes``, ``bytearray``,
            ``memoryview``, ``array.array('B')`` or 1-D ``np.uint8`` array of ``step * height``
            bytes).

    Returns:
        (H, W) array for one-channel encodings, (H, W, C) otherwise, with the encoding's dtype
        in native byte order (e.g. uint8 for ``rgb8``, uint16 for ``16UC1`` millimetres,
        float32 for ``32FC1`` metres). When the rows have no padding, the byte order is native
        (or the type has one byte) and the data are aligned, the result is a zero-copy view of
        ``msg.data`` (read-only when ``data`` is immutable, e.g. ``bytes``); otherwise it is a
        C-contiguous copy.

    Raises:
        ValueError: unknown encoding, empty image, wrong data type, ``step`` smaller than a row
            or not a multiple of the element size, or ``len(data) != step * height``.
    """
    encoding = msg.encoding
    dtype, channels = encoding_spec(encoding)
    height = _positive_int(msg.height, 'height')
    width = _positive_int(msg.width, 'width')
    step = _positive_int(msg.step, 'step')
    if height <= 0 or width <= 0:
        raise ValueError(f'empty image: {width}x{height} pixels ({encoding})')
    buffer = data_as_uint8(msg.data)
    itemsize = dtype.itemsize
    row_bytes = width * channels * itemsize
    if step < row_bytes:
        raise ValueError(
            f'step {step} is smaller than one row of {width} {encoding} pixels '
            f'({row_bytes} bytes)')
    if step % itemsize:
        raise ValueError(f'step {step} is not a multiple of the {encoding} element size '
                         f'{itemsize}')
    if buffer.size > step * height:
        # cv_bridge (C++, what image_transport and image_pipeline use) refuses it too
        raise ValueError(
            f'image data has {buffer.size - step * height} bytes more than step * height = '
            f'{step} * {height} = {step * height} (trailing bytes after the last row, or a '
            'wrong step or height)')
    if buffer.size != step * height:
        raise ValueError(
            f'image data has {buffer.size} bytes, expected step * height = {step} * {height} '
            f'= {step * height}')

    big_endian = bool(msg.is_bigendian) and itemsize > 1
    stored = dtype.newbyteorder('>') if big_endian else dtype.newbyteorder('<')
    shape = (height, width, channels) if channels > 1 else (height, width)
    strides = (step, channels * itemsize, itemsize)[:len(shape)]
    view = np.ndarray(shape=shape, dtype=stored, buffer=buffer, strides=strides)
    if stored.isnative and step == row_bytes and view.flags.aligned:
        return view
    return np.ascontiguousarray(view, dtype=dtype)


def check_array(array_, encoding: str) -> EncodingSpec:
    """Check that ``array_`` has the dtype and shape of ``encoding``; return the spec.

    One-channel encodings take (H, W) or (H, W, 1); others take (H, W, C). The byte order of
    the array is not checked.

    Raises:
        ValueError: unknown encoding, wrong dtype, wrong shape or an empty array.
    """
    spec = encoding_spec(encoding)
    if not isinstance(array_, np.ndarray):
        raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
            f'expected a numpy array for {encoding}, got {type(array_).__name__}')
    if array_.dtype.kind != spec.dtype.kind or array_.dtype.itemsize != spec.dtype.itemsize:
        raise ValueError(f'{encoding} needs dtype {spec.dtype}, got {array_.dtype}')
    if spec.channels == 1:
        ok = array_.ndim == 2 or (array_.ndim == 3 and array_.shape[2] == 1)
    else:
        ok = array_.ndim == 3 and array_.shape[2] == spec.channels
    if not ok:
        wanted = '(H, W)' if spec.channels == 1 else f'(H, W, {spec.channels})'
        raise ValueError(f'{encoding} needs an array of shape {wanted}, got {array_.shape}')
    if array_.shape[0] == 0 or array_.shape[1] == 0:
        raise ValueError(f'empty image: shape {array_.shape}')
    return spec


def numpy_to_image_fields(array_: np.ndarray, encoding: str) -> dict:
    """Return the fields of a ``sensor_msgs/Image`` holding ``array_`` with ``encoding``.

    Args:
        array_: (H, W) or (H, W, C) array whose dtype matches ``encoding`` (e.g. (H, W, 3)
            uint8 for ``rgb8``, (H, W) float32 metres for ``32FC1``).
        encoding: one of :data:`SUPPORTED_ENCODINGS`.

    Returns:
        dict with ``height``, ``width``, ``encoding``, ``is_bigendian`` (always 0: the data are
        written little-endian), ``step`` (bytes per row, no padding) and ``data`` (1-D
        C-contiguous ``np.uint8`` array; it shares memory with ``array_`` when that is already
        C-contiguous and little-endian). rosbags messages take ``data`` as is; rclpy messages
        take ``data.tobytes()``.

    Raises:
        ValueError: unknown encoding, dtype or shape not matching the encoding, empty array.
    """
    spec = check_array(array_, encoding)
    little = np.ascontiguousarray(array_, dtype=spec.dtype.newbyteorder('<'))
    height, width = little.shape[:2]
    return {
        'height': int(height),
        'width': int(width),
        'encoding': encoding,
        'is_bigendian': 0,
        'step': int(width * spec.channels * spec.dtype.itemsize),
        'data': little.reshape(-1).view(np.uint8),
    }


def _check_yuv422_width(array_: np.ndarray, encoding: str) -> None:
    """Raise ValueError for a YUV 4:2:2 image of odd width (OpenCV cannot convert it)."""
    if encoding in YUV422_ENCODINGS and array_.shape[1] % 2:
        raise ValueError(f'{encoding} (YUV 4:2:2) needs an even width: pairs of pixels share '
                         f'their chroma, got width {array_.shape[1]}')


def _squeeze_channel(array_: np.ndarray) -> np.ndarray:
    return array_[:, :, 0] if array_.ndim == 3 and array_.shape[2] == 1 else array_


def to_8bit(array_: np.ndarray) -> np.ndarray:
    """Return a 16-bit camera image as 8 bits: scaled down by 256 (the high byte), as cv_bridge.

    The one rule for 16-bit pictures: the nodes and ``eval`` (through :func:`to_rgb8` /
    :func:`to_mono8`) and image files (:func:`relperception.imaging.read_image_file`, as
    ``infer``, ``match`` and ``eval-pairs`` read them), so that one image gives one model input
    everywhere. See :func:`low_range_16bit` for 10/12-bit data in the low bits.

    Args:
        array_: uint16 or uint8 array of any shape (uint8 is returned as it is).

    Returns:
        a uint8 array of the same shape.
    """
    if array_.dtype.itemsize == 2:
        return (array_ >> 8).astype(np.uint8)
    return array_


#: A 16-bit camera image whose values all stay below this holds 10- or 12-bit data in its low
#: bits (machine-vision cameras): scaled to 8 bits by 1/256 (:func:`to_8bit`), as cv_bridge
#: does, it keeps at most 16 grey levels. The one rule of the nodes, ``eval`` and image files
#: (``infer``).
LOW_RANGE_16BIT_MAX = 4096


def low_range_16bit(array_: np.ndarray, encoding: str) -> str:
    """Say what goes wrong with a 16-bit image whose values stay below the 16-bit range.

    Args:
        array_: the image as :func:`image_to_numpy` returns it for ``encoding``.
        encoding: its encoding (only 16-bit camera encodings, e.g. ``mono16``, ``rgb16``,
            ``bayer_rggb16``, are looked at).

    Returns:
        '' for an 8-bit image or 16-bit data that use the upper bits; else a one-line
        warning: the maximum, how many grey levels the scaling by 1/256 leaves and what to do
        (publish ``mono8``, or set the camera to 16-bit full range), when every value is
        below :data:`LOW_RANGE_16BIT_MAX`.
    """
    if encoding not in RGB_CONVERTIBLE_ENCODINGS and encoding not in MONO_CONVERTIBLE_ENCODINGS:
        return ''
    if encoding_spec(encoding).dtype.itemsize != 2 or array_.size == 0:
        return ''
    top = int(array_.max())
    if top >= LOW_RANGE_16BIT_MAX:
        return ''
    return (f'16-bit {encoding} image whose values stay below {LOW_RANGE_16BIT_MAX} (maximum '
            f'{top}: 10/12-bit data in the low bits?): scaled to 8 bits by 1/256 as cv_bridge '
            f'does, it keeps only {(top >> 8) + 1} grey levels; publish mono8, or set the '
            'camera to 16-bit full range (data in the high bits)')


def to_rgb8(array_: np.ndarray, encoding: str) -> np.ndarray:
    """Convert a colour or grey image to (H, W, 3) uint8 RGB.

    BGR orders are swapped, alpha is dropped, grey is replicated, Bayer mosaics are demosaiced
    (bilinear, OpenCV), YUV 4:2:2 is converted, 16-bit data are scaled down by 256. The
    OpenCV-style ``8UC3``/``8UC4`` are read as BGR/BGRA. ``rgb8`` input is returned as is.

    Args:
        array_: image as returned by :func:`image_to_numpy` for ``encoding``.
        encoding: one of :data:`RGB_CONVERTIBLE_ENCODINGS`.

    Raises:
        ValueError: encoding without a colour meaning (e.g. ``32FC1``), or array not matching it.
    """
    _refuse_unconvertible(encoding, 'rgb8', RGB_CONVERTIBLE_ENCODINGS)
    check_array(array_, encoding)
    _check_yuv422_width(array_, encoding)
    array_ = _squeeze_channel(array_)
    if encoding == 'rgb8':
        return array_
    if encoding.startswith('bayer_'):
        # Demosaic at full depth, then scale: keeps the 16-bit precision of the interpolation.
        return to_8bit(cv2.cvtColor(array_, _TO_RGB[encoding]))
    if encoding == 'rgb16':
        return to_8bit(array_)
    return cv2.cvtColor(to_8bit(array_), _TO_RGB[encoding])


def to_mono8(array_: np.ndarray, encoding: str) -> np.ndarray:
    """Convert a colour or grey image to (H, W) uint8 grey.

    Colour uses OpenCV's luma weights (0.299 R + 0.587 G + 0.114 B), alpha is ignored, Bayer
    and YUV 4:2:2 are converted by OpenCV, 16-bit data (``mono16``, ``rgb16``, ...) are scaled
    down by 256. Depth encodings (``16UC1``, ``32FC1``) are refused, as by :func:`to_rgb8`.
    ``mono8``/``8UC1`` input is returned as is.

    Args:
        array_: image as returned by :func:`image_to_numpy` for ``encoding``.
        encoding: one of :data:`MONO_CONVERTIBLE_ENCODINGS`.

    Raises:
        ValueError: encoding without a grey meaning (e.g. ``32FC1``), or array not matching it.
    """
    _refuse_unconvertible(encoding, 'mono8', MONO_CONVERTIBLE_ENCODINGS)
    check_array(array_, encoding)
    _check_yuv422_width(array_, encoding)
    array_ = _squeeze_channel(array_)
    if encoding in _MONO_AS_IS:
        return to_8bit(array_)
    if encoding.startswith('bayer_'):
        return to_8bit(cv2.cvtColor(array_, _TO_MONO[encoding]))
    return cv2.cvtColor(to_8bit(array_), _TO_MONO[encoding])


def depth_to_metres(array_: np.ndarray, encoding: str) -> np.ndarray:
    """Convert a depth image to (H, W) float32 metres with NaN where invalid (REP 118).

    Args:
        array_: (H, W) or (H, W, 1) depth image: uint16 millimetres for ``16UC1``/``mono16``,
            float32 metres for ``32FC1``.
        encoding: ``'16UC1'``, ``'mono16'`` or ``'32FC1'``.

    Returns:
        (H, W) float32 metres, a new array. Zero, negative, infinite and NaN depths become NaN.

    Raises:
        ValueError: other encodings, or an array that does not match the encoding.
    """
    if encoding not in DEPTH_ENCODINGS:
        raise ValueError(f'{encoding!r} is not a depth encoding; expected one of '
                         f'{", ".join(DEPTH_ENCODINGS)}')
    check_array(array_, encoding)
    array_ = _squeeze_channel(array_)
    if encoding == '32FC1':
        depth = np.array(array_, dtype=np.float32)
        with np.errstate(invalid='ignore'):
            depth[~(np.isfinite(depth) & (depth > 0))] = np.nan
        return depth
    depth = array_.astype(np.float32)
    depth *= np.float32(0.001)
    depth[array_ == 0] = np.nan
    return depth
