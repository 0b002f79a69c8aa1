# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``sensor_msgs/CompressedImage`` <-> numpy, compatible with image_transport's plugins.

``compressed`` (compressed_image_transport) writes ``format`` as
``'<encoding>; <jpeg|png> compressed <target>'`` where ``<target>`` is ``bgr8``/``bgr16`` for
colour images and empty for the rest (``'mono8; jpeg compressed '``); older writers just put
``'jpeg'`` or ``'png'``.

``compressedDepth`` (compressed_depth_image_transport) writes ``'<encoding>; compressedDepth
png'`` and ``data`` = a 12-byte little-endian header (int32 format, 0 = inverse depth; float32
depthQuantA; float32 depthQuantB) followed by a PNG. For ``16UC1`` the PNG holds the raw
millimetres. For ``32FC1`` it holds uint16 quantised inverse depth ``v``, decoded as
``depth = depthQuantA / (v - depthQuantB)`` metres, ``v == 0`` meaning invalid. The ``rvl``
variant is not supported.
"""

from __future__ import annotations

import logging
import struct

import cv2
import numpy as np

from .image_encodings import check_array, data_as_uint8, encoding_spec

logger = logging.getLogger(__name__)

_HEADER = struct.Struct('<iff')
_INV_DEPTH = 0
_JPEG_TAIL_BYTES = 1024
_COLOUR_8 = ('rgb8', 'bgr8', 'rgba8', 'bgra8')
_COLOUR_16 = ('rgb16', 'bgr16', 'rgba16', 'bgra16')
_COLOUR = _COLOUR_8 + _COLOUR_16
# cv2.cvtColor codes from the decoded channel order to the declared encoding (None: as is).
_FROM_BGR = {'rgb': cv2.COLOR_BGR2RGB, 'bgr': None,
             'rgba': cv2.COLOR_BGR2RGBA, 'bgra': cv2.COLOR_BGR2BGRA}
_FROM_BGRA = {'rgb': cv2.COLOR_BGRA2RGB, 'bgr': cv2.COLOR_BGRA2BGR,
              'rgba': cv2.COLOR_BGRA2RGBA, 'bgra': None}
_FROM_GRAY = {'rgb': cv2.COLOR_GRAY2RGB, 'bgr': cv2.COLOR_GRAY2BGR,
              'rgba': cv2.COLOR_GRAY2RGBA, 'bgra': cv2.COLOR_GRAY2BGRA}
# image_transport's decoder swaps R and B when the payload is declared RGB (no 'compressed bgr').
_FROM_RGB = {'rgb': None, 'bgr': cv2.COLOR_RGB2BGR,
             'rgba': cv2.COLOR_RGB2RGBA, 'bgra': cv2.COLOR_RGB2BGRA}
_FROM_RGBA = {'rgb': cv2.COLOR_RGBA2RGB, 'bgr': cv2.COLOR_RGBA2BGR,
              'rgba': None, 'bgra': cv2.COLOR_RGBA2BGRA}


def decode_image_bytes(payload: np.ndarray, what: str,
                       flags: int = cv2.IMREAD_UNCHANGED) -> np.ndarray:
    """Decode an encoded image (PNG, JPEG, ...) with OpenCV, refusing what it decodes wrongly.

    Args:
        payload: (N,) uint8 encoded bytes.
        what: what the bytes are (a file name, a topic), for messages.
        flags: ``cv2.IMREAD_*`` flags.

    Returns:
        the decoded array, in OpenCV's channel order (BGR for colour).

    Raises:
        ValueError: no data, a truncated JPEG (no end-of-image marker; some libjpeg builds
            decode it into a partly grey image) or data OpenCV cannot decode.
    """
    payload = np.asarray(payload, dtype=np.uint8).reshape(-1)
    if payload.size == 0:
        raise ValueError(f'{what}: no image data')
    if payload.size >= 2 and payload[0] == 0xFF and payload[1] == 0xD8:
        # Some libjpeg builds decode a truncated JPEG into a partly grey image: require the
        # end-of-image marker near the end (writers may pad a little after it).
        tail = payload[-_JPEG_TAIL_BYTES:]
        if not np.any((tail[:-1] == 0xFF) & (tail[1:] == 0xD9)):
            raise ValueError(f'{what}: truncated JPEG (no end-of-image marker)')
    try:
        image = cv2.imdecode(payload, flags)
    except cv2.error as error:
        raise ValueError(f'{what}: could not decode the image data ({error})') from None
    if image is None:
        raise ValueError(f'{what}: could not decode the image data ({payload.size} bytes); '
                         'truncated or corrupt?')
    return image


def _imencode(extension: str, image: np.ndarray, params) -> np.ndarray:
    ok, encoded = cv2.imencode(extension, image, params)
    if not ok:
        raise ValueError(f'cv2.imencode({extension!r}) failed for a {image.dtype} image of '
                         f'shape {image.shape}')
    return np.asarray(encoded, dtype=np.uint8).reshape(-1)


def _split_format(fmt: str) -> tuple[str, str]:
    """Split ``'<encoding>; <rest>'`` into (encoding, rest); ('', fmt) without a ';'."""
    if ';' not in fmt:
        return '', fmt.strip()
    encoding, rest = fmt.split(';', 1)
    return encoding.strip(), rest.strip()


def _decode_compressed_depth(encoding: str, rest: str, buffer: np.ndarray):
    what = f'compressedDepth image ({encoding!r})'
    if 'rvl' in rest.lower():
        raise ValueError(f'{what}: RVL compression is not supported, only PNG')
    if encoding not in ('16UC1', 'mono16', '32FC1'):
        raise ValueError(f'{what}: the format must start with the encoding 16UC1, mono16 or '
                         f"32FC1 followed by ';', got {encoding!r}")
    if buffer.size <= _HEADER.size:
        raise ValueError(f'{what}: data of {buffer.size} bytes is too short for the '
                         f'{_HEADER.size}-byte header plus an image')
    _, quant_a, quant_b = _HEADER.unpack(buffer[:_HEADER.size].tobytes())
    image = decode_image_bytes(buffer[_HEADER.size:], what)
    if image.dtype != np.uint16 or image.ndim != 2:
        raise ValueError(f'{what}: expected a one-channel 16-bit PNG, got {image.dtype} of '
                         f'shape {image.shape}')
    if encoding != '32FC1':
        return image, encoding
    values = image.astype(np.float32)
    with np.errstate(divide='ignore', invalid='ignore'):
        depth = np.float32(quant_a) / (values - np.float32(quant_b))
    depth[image == 0] = np.nan
    return depth.astype(np.float32, copy=False), encoding


def _convert_colour(image: np.ndarray, encoding: str, payload_is_bgr: bool) -> np.ndarray:
    order = encoding.rstrip('0123456789')
    if image.ndim == 2:
        code = _FROM_GRAY[order]
    elif image.shape[2] == 3:
        code = (_FROM_BGR if payload_is_bgr else _FROM_RGB)[order]
    elif image.shape[2] == 4:
        code = (_FROM_BGRA if payload_is_bgr else _FROM_RGBA)[order]
    else:
        raise ValueError(f'cannot read a {image.shape[2]}-channel image as {encoding}')
    return image if code is None else cv2.cvtColor(image, code)


def _match_depth(image: np.ndarray, dtype: np.dtype, encoding: str) -> np.ndarray:
    """Bring an 8/16-bit decoded image to the declared bit depth (JPEG is always 8-bit)."""
    if image.dtype == dtype:
        return image
    if image.dtype == np.uint8 and dtype == np.uint16:
        return image.astype(np.uint16) << 8
    if image.dtype == np.uint16 and dtype == np.uint8:
        return (image >> 8).astype(np.uint8)
    raise ValueError(f'decoded a {image.dtype} image, which cannot be read as {encoding}')


def compressed_to_numpy(msg) -> tuple[np.ndarray, str]:
    """Decode a ``sensor_msgs/CompressedImage`` (``compressed`` or ``compressedDepth``).

    Args:
        msg: object with ``format`` (str) and ``data`` (``bytes``, ``array.array('B')`` or 1-D
            ``np.uint8`` array), as rclpy, rosbags or image_transport produce it.

    Returns:
        (array, encoding). ``compressed``: the image in the encoding the format declares
        (``'rgb8; jpeg compressed bgr8'`` gives (H, W, 3) uint8 RGB); without a declared
        encoding colour comes back as ``bgr8``/``bgr16``/``bgra8`` and one channel as
        ``mono8``/``mono16``. ``compressedDepth``: (H, W) uint16 millimetres for
        ``16UC1``/``mono16``; (H, W) float32 metres, NaN where invalid, for ``32FC1``.

    Raises:
        ValueError: truncated or corrupt data, a short compressedDepth header, an unsupported
            format (RVL) or a decoded image that does not fit the declared encoding.
    """
    fmt = msg.format if isinstance(msg.format, str) else str(msg.format)
    buffer = data_as_uint8(msg.data)
    encoding, rest = _split_format(fmt)
    if 'compresseddepth' in fmt.lower():
        return _decode_compressed_depth(encoding, rest, buffer)

    image = decode_image_bytes(buffer, f'compressed image (format {fmt!r})')
    if not encoding:
        if image.ndim == 2:
            return image, 'mono8' if image.dtype == np.uint8 else 'mono16'
        suffix = '8' if image.dtype == np.uint8 else '16'
        return image, ('bgr' if image.shape[2] == 3 else 'bgra') + suffix

    try:
        spec = encoding_spec(encoding)
    except ValueError:
        raise ValueError(f'compressed image format {fmt!r} declares an unsupported encoding '
                         f'{encoding!r}') from None
    if encoding in _COLOUR:
        image = _convert_colour(image, encoding, 'compressed bgr' in rest.lower())
    elif spec.channels == 1 and image.ndim == 3:
        image = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY if image.shape[2] == 3
                             else cv2.COLOR_BGRA2GRAY)
    image = _match_depth(image, spec.dtype, encoding)
    check_array(image, encoding)
    return image, encoding


def numpy_to_compressed_fields(array_: np.ndarray, encoding: str, fmt: str = 'jpeg',
                               quality: int = 90, png_level: int = 3) -> dict:
    """Compress an image the way image_transport's ``compressed``/``compressedDepth`` do.

    Args:
        array_: image matching ``encoding`` (see :func:`~relperception.imaging.image_encodings.
            numpy_to_image_fields`).
        encoding: image encoding. ``jpeg``/``png``: colour and grey 8/16-bit encodings and
            8/16-bit ``*C1``/``*C3`` (plus ``*C4`` for PNG); colour is stored as BGR without
            alpha; JPEG stores 16-bit data scaled down by 256. ``compressedDepth``: ``16UC1``
            or ``mono16`` (millimetres, lossless) or ``32FC1`` (metres, quantised inverse
            depth; see ``depth_max``/``depth_quantization`` of
            :func:`compress_depth_32fc1`).
        fmt: ``'jpeg'`` (or ``'jpg'``), ``'png'`` or ``'compressedDepth'``.
        quality: JPEG quality, 1..100.
        png_level: PNG compression level, 0..9.

    Returns:
        dict with ``format`` (str) and ``data`` (1-D ``np.uint8`` array); rclpy messages take
        ``data.tobytes()``.

    Raises:
        ValueError: unknown ``fmt``, bad quality/level, or an encoding the format cannot hold.
    """
    fmt_key = str(fmt).lower()
    if fmt_key not in ('jpeg', 'jpg', 'png', 'compresseddepth'):
        raise ValueError(f"fmt must be 'jpeg', 'png' or 'compressedDepth', got {fmt!r}")
    if not 1 <= int(quality) <= 100:
        raise ValueError(f'JPEG quality must be in 1..100, got {quality}')
    if not 0 <= int(png_level) <= 9:
        raise ValueError(f'PNG compression level must be in 0..9, got {png_level}')
    spec = check_array(array_, encoding)
    png_params = [cv2.IMWRITE_PNG_COMPRESSION, int(png_level)]

    if fmt_key == 'compresseddepth':
        if encoding == '32FC1':
            return compress_depth_32fc1(array_, png_level=png_level)
        if encoding not in ('16UC1', 'mono16'):
            raise ValueError(f'compressedDepth holds 16UC1, mono16 or 32FC1, got {encoding}')
        image = np.ascontiguousarray(array_.reshape(array_.shape[:2]), dtype=np.uint16)
        header = np.frombuffer(_HEADER.pack(_INV_DEPTH, 0.0, 0.0), dtype=np.uint8)
        data = np.concatenate([header, _imencode('.png', image, png_params)])
        return {'format': f'{encoding}; compressedDepth png', 'data': data}

    fmt_key = 'jpeg' if fmt_key == 'jpg' else fmt_key
    if spec.dtype not in (np.uint8, np.uint16) or spec.channels == 2 \
            or encoding.startswith(('bayer_', 'yuv')):
        raise ValueError(f'{fmt_key} cannot hold {encoding} images; use an 8/16-bit colour or '
                         'grey encoding (or compressedDepth for depth)')
    image = array_.reshape(array_.shape[:2]) if spec.channels == 1 else array_
    target = ''
    if encoding in _COLOUR:
        order = encoding.rstrip('0123456789')
        code = {'rgb': cv2.COLOR_RGB2BGR, 'bgr': None,
                'rgba': cv2.COLOR_RGBA2BGR, 'bgra': cv2.COLOR_BGRA2BGR}[order]
        image = image if code is None else cv2.cvtColor(image, code)
    if fmt_key == 'jpeg':
        if spec.channels == 4 and encoding not in _COLOUR:
            raise ValueError(f'jpeg cannot hold 4-channel {encoding} images; use png')
        if image.dtype == np.uint16:
            image = (image >> 8).astype(np.uint8)
        encoded = _imencode('.jpg', image, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    else:
        encoded = _imencode('.png', image, png_params)
    if encoding in _COLOUR:
        target = 'bgr8' if image.dtype == np.uint8 else 'bgr16'
    return {'format': f'{encoding}; {fmt_key} compressed {target}', 'data': encoded}


def compress_depth_32fc1(depth_m: np.ndarray, depth_max: float = 10.0,
                         depth_quantization: float = 100.0, png_level: int = 3) -> dict:
    """Compress float32 metres as compressed_depth_image_transport does (inverse depth PNG).

    ``depthQuantA = q * (q + 1)`` and ``depthQuantB = 1 - depthQuantA / depth_max`` with
    ``q = depth_quantization``; each valid depth ``d`` is stored as the uint16
    ``trunc(depthQuantA / d + depthQuantB)``. Depths at or beyond ``depth_max``, non-finite or
    non-positive depths, and depths so small that the value overflows 16 bits are stored as 0
    (invalid). The error of a decoded depth ``d`` is below ``d**2 / depthQuantA`` metres.

    Args:
        depth_m: (H, W) or (H, W, 1) float32 depth in metres.
        depth_max: largest depth kept, metres (image_transport default 10).
        depth_quantization: ``q`` above (image_transport default 100).
        png_level: PNG compression level, 0..9.

    Returns:
        dict with ``format`` (``'32FC1; compressedDepth png'``) and ``data`` (1-D uint8).

    Raises:
        ValueError: wrong dtype/shape, or non-positive ``depth_max``/``depth_quantization``.
    """
    check_array(depth_m, '32FC1')
    if not depth_max > 0 or not depth_quantization > 0:
        raise ValueError(f'depth_max and depth_quantization must be positive, got {depth_max} '
                         f'and {depth_quantization}')
    depth = depth_m.reshape(depth_m.shape[:2])
    quant_a = np.float32(depth_quantization * (depth_quantization + 1.0))
    quant_b = np.float32(1.0 - quant_a / np.float32(depth_max))
    with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
        values = quant_a / depth.astype(np.float32) + quant_b
        valid = (depth > 0) & (depth < np.float32(depth_max)) & (values < 65536.0)
    quantised = np.zeros(depth.shape, dtype=np.uint16)
    quantised[valid] = values[valid].astype(np.uint16)
    header = np.frombuffer(_HEADER.pack(_INV_DEPTH, float(quant_a), float(quant_b)),
                           dtype=np.uint8)
    encoded = _imencode('.png', quantised, [cv2.IMWRITE_PNG_COMPRESSION, int(png_level)])
    return {'format': '32FC1; compressedDepth png', 'data': np.concatenate([header, encoded])}
