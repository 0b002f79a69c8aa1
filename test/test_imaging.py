# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of relperception.imaging: raw and compressed image messages, colour maps."""

import array  # noqa: I001 (ament/google import order, as flake8 checks it)
import struct
import time
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
from relperception.imaging import (
    CAMVID_CLASS_NAMES,
    CAMVID_PALETTE,
    check_depth,
    colorize_depth,
    colorize_labels,
    compressed_to_numpy,
    DEPTH_PROBLEMS,
    depth_to_metres,
    image_to_numpy,
    low_range_16bit,
    numpy_to_compressed_fields,
    numpy_to_image_fields,
    overlay,
    read_image_file,
    SUPPORTED_ENCODINGS,
    to_8bit,
    to_mono8,
    to_rgb8,
)
from relperception.imaging.image_encodings import encoding_spec

REQUIRED_ENCODINGS = ('mono8', 'mono16', 'rgb8', 'bgr8', 'rgba8', 'bgra8', '8UC1', '8UC3',
                      '16UC1', '32FC1')
HEIGHT, WIDTH = 5, 7


def random_image(encoding, height=HEIGHT, width=WIDTH, seed=0):
    """Return a random array of the encoding's dtype and shape, covering the value range."""
    dtype, channels = encoding_spec(encoding)
    rng = np.random.default_rng(seed)
    shape = (height, width, channels) if channels > 1 else (height, width)
    if dtype.kind == 'f':
        return (rng.standard_normal(shape) * 1e3).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def hand_built_message(image, encoding, padding_items=0, big_endian=False, data_type=bytes):
    """Build a duck-typed Image by hand: explicit byte order and row padding (in elements)."""
    dtype = encoding_spec(encoding).dtype
    stored = image.astype(dtype.newbyteorder('>' if big_endian else '<'))
    rows = stored.reshape(image.shape[0], -1).view(np.uint8)  # (H, W*C*itemsize) bytes
    pad = np.full((rows.shape[0], padding_items * dtype.itemsize), 0xAB, dtype=np.uint8)
    data = np.ascontiguousarray(np.concatenate([rows, pad], axis=1))
    return SimpleNamespace(height=image.shape[0], width=image.shape[1], encoding=encoding,
                           is_bigendian=int(big_endian), step=data.shape[1],
                           data=data_type(data.reshape(-1).tobytes()))


def message_from_fields(fields, **overrides):
    msg = SimpleNamespace(**fields)
    for key, value in overrides.items():
        setattr(msg, key, value)
    return msg


class TestImageToNumpy:
    def test_smoke(self):
        image = random_image('rgb8')
        result = image_to_numpy(message_from_fields(numpy_to_image_fields(image, 'rgb8')))
        np.testing.assert_array_equal(result, image)

    def test_required_encodings_supported(self):
        assert set(REQUIRED_ENCODINGS) <= set(SUPPORTED_ENCODINGS)

    @pytest.mark.parametrize('big_endian', [False, True], ids=['little', 'big'])
    @pytest.mark.parametrize('padding_items', [0, 3], ids=['unpadded', 'padded'])
    @pytest.mark.parametrize('encoding', SUPPORTED_ENCODINGS)
    def test_round_trip_hand_built(self, encoding, padding_items, big_endian):
        image = random_image(encoding)
        msg = hand_built_message(image, encoding, padding_items, big_endian)
        result = image_to_numpy(msg)
        dtype = encoding_spec(encoding).dtype
        assert result.shape == image.shape
        assert result.dtype == dtype and result.dtype.isnative
        np.testing.assert_array_equal(result, image)

    @pytest.mark.parametrize('encoding', SUPPORTED_ENCODINGS)
    def test_round_trip_fields(self, encoding):
        image = random_image(encoding, seed=1)
        fields = numpy_to_image_fields(image, encoding)
        dtype, channels = encoding_spec(encoding)
        assert fields['encoding'] == encoding and fields['is_bigendian'] == 0
        assert (fields['height'], fields['width']) == image.shape[:2]
        assert fields['step'] == WIDTH * channels * dtype.itemsize
        assert fields['data'].dtype == np.uint8 and fields['data'].ndim == 1
        assert fields['data'].flags.c_contiguous
        assert fields['data'].size == fields['step'] * fields['height']
        np.testing.assert_array_equal(image_to_numpy(message_from_fields(fields)), image)

    @pytest.mark.parametrize('data_type', [bytes, bytearray, memoryview,
                                           lambda b: array.array('B', b)])
    def test_data_containers(self, data_type):
        image = random_image('16UC1')
        msg = hand_built_message(image, '16UC1', padding_items=2, data_type=data_type)
        np.testing.assert_array_equal(image_to_numpy(msg), image)

    def test_zero_copy_unpadded_native(self):
        image = random_image('32FC1')
        fields = numpy_to_image_fields(image, '32FC1')
        result = image_to_numpy(message_from_fields(fields))
        assert np.shares_memory(result, fields['data'])
        writable = bytearray(fields['data'].tobytes())
        result = image_to_numpy(message_from_fields(fields, data=writable))
        result[0, 0] = 42.0  # a view: writing through it changes the message's buffer
        assert np.frombuffer(writable, dtype=np.float32)[0] == 42.0

    def test_copy_when_padded_or_swapped(self):
        image = random_image('16UC1')
        for msg in (hand_built_message(image, '16UC1', padding_items=1, data_type=bytearray),
                    hand_built_message(image, '16UC1', big_endian=True, data_type=bytearray)):
            result = image_to_numpy(msg)
            assert result.flags.c_contiguous
            assert not np.shares_memory(result, np.frombuffer(msg.data, dtype=np.uint8))
            np.testing.assert_array_equal(result, image)

    def test_big_endian_flag_ignored_for_bytes(self):
        image = random_image('bgr8')
        msg = hand_built_message(image, 'bgr8', big_endian=True)
        np.testing.assert_array_equal(image_to_numpy(msg), image)

    @pytest.mark.parametrize('encoding', ['rgb8', '32FC1', '16UC1', 'mono8'])
    @pytest.mark.parametrize('padding_items', [0, 1])
    def test_rosbags_message(self, encoding, padding_items):
        typesys = pytest.importorskip('rosbags.typesys')
        store = typesys.get_typestore(typesys.Stores.ROS2_JAZZY)
        Image = store.types['sensor_msgs/msg/Image']
        Header = store.types['std_msgs/msg/Header']
        Time = store.types['builtin_interfaces/msg/Time']
        image = random_image(encoding, height=6, width=9, seed=2)
        hand = hand_built_message(image, encoding, padding_items)
        msg = Image(header=Header(stamp=Time(sec=1, nanosec=2), frame_id='camera'),
                    height=hand.height, width=hand.width, encoding=encoding,
                    is_bigendian=0, step=hand.step,
                    data=np.frombuffer(hand.data, dtype=np.uint8))
        np.testing.assert_array_equal(image_to_numpy(msg), image)
        # As read from a bag: deserialised from CDR (data is a view of the raw buffer).
        raw = store.serialize_cdr(msg, 'sensor_msgs/msg/Image')
        decoded = store.deserialize_cdr(raw, 'sensor_msgs/msg/Image')
        np.testing.assert_array_equal(image_to_numpy(decoded), image)
        # And written from numpy_to_image_fields.
        fields = numpy_to_image_fields(image, encoding)
        built = Image(header=Header(stamp=Time(sec=0, nanosec=0), frame_id='camera'), **fields)
        raw = store.serialize_cdr(built, 'sensor_msgs/msg/Image')
        decoded = store.deserialize_cdr(raw, 'sensor_msgs/msg/Image')
        np.testing.assert_array_equal(image_to_numpy(decoded), image)

    @pytest.mark.parametrize('encoding', SUPPORTED_ENCODINGS)
    def test_rclpy_message(self, encoding):
        sensor_msgs = pytest.importorskip('sensor_msgs.msg')
        image = random_image(encoding, seed=3)
        fields = numpy_to_image_fields(image, encoding)
        msg = sensor_msgs.Image(height=fields['height'], width=fields['width'],
                                encoding=fields['encoding'],
                                is_bigendian=fields['is_bigendian'], step=fields['step'])
        msg.data = fields['data'].tobytes()
        np.testing.assert_array_equal(image_to_numpy(msg), image)

    def test_rclpy_message_padded_big_endian(self):
        sensor_msgs = pytest.importorskip('sensor_msgs.msg')
        image = random_image('16UC1', seed=4)
        hand = hand_built_message(image, '16UC1', padding_items=5, big_endian=True)
        msg = sensor_msgs.Image(height=hand.height, width=hand.width, encoding='16UC1',
                                is_bigendian=1, step=hand.step)
        msg.data = hand.data
        np.testing.assert_array_equal(image_to_numpy(msg), image)

    @pytest.mark.parametrize('padding_items', [0, 16])
    def test_speed_vga(self, padding_items):
        image = random_image('rgb8', height=480, width=640)
        msg = hand_built_message(image, 'rgb8', padding_items)
        times = []
        for _ in range(50):
            start = time.perf_counter()
            image_to_numpy(msg)
            times.append(time.perf_counter() - start)
        assert np.median(times) < 1e-3

    @pytest.mark.parametrize('change, match', [
        ({'encoding': 'rgb9'}, 'unsupported image encoding'),
        ({'encoding': None}, 'unsupported image encoding'),
        ({'height': 0, 'data': b''}, 'empty image'),
        ({'width': 0}, 'empty image'),
        ({'step': WIDTH * 3 - 1}, 'smaller than one row'),
        ({'data': b'\x00' * (WIDTH * 3 * HEIGHT - 1)}, 'expected step'),
        ({'data': b'\x00' * (WIDTH * 3 * HEIGHT + 1)}, '1 bytes more than step . height'),
        ({'data': [0] * (WIDTH * 3 * HEIGHT)}, 'image data must be'),
        ({'data': np.zeros(WIDTH * 3 * HEIGHT, dtype=np.int16)}, 'uint8'),
        ({'data': np.zeros((HEIGHT, WIDTH * 3), dtype=np.uint8)}, '1-D'),
        ({'data': array.array('H', [0] * (WIDTH * 3 * HEIGHT))}, 'typecode'),
        ({'height': 2.5}, 'integer'),
    ])
    def test_bad_input(self, change, match):
        msg = message_from_fields(numpy_to_image_fields(random_image('rgb8'), 'rgb8'), **change)
        with pytest.raises(ValueError, match=match):
            image_to_numpy(msg)

    def test_step_not_multiple_of_item_size(self):
        image = random_image('32FC1')
        fields = numpy_to_image_fields(image, '32FC1')
        step = fields['step'] + 2
        msg = message_from_fields(fields, step=step, data=bytes(step * HEIGHT))
        with pytest.raises(ValueError, match='multiple'):
            image_to_numpy(msg)


class TestNumpyToImageFields:
    def test_single_channel_with_trailing_axis(self):
        image = random_image('mono8')
        fields = numpy_to_image_fields(image[:, :, None], 'mono8')
        np.testing.assert_array_equal(image_to_numpy(message_from_fields(fields)), image)

    def test_big_endian_array_written_little_endian(self):
        image = random_image('16UC1')
        fields = numpy_to_image_fields(image.astype('>u2'), '16UC1')
        assert fields['is_bigendian'] == 0
        np.testing.assert_array_equal(fields['data'].view('<u2').reshape(image.shape), image)

    def test_non_contiguous_input(self):
        image = random_image('rgb8', height=8, width=10)[::2, ::3]
        fields = numpy_to_image_fields(image, 'rgb8')
        np.testing.assert_array_equal(image_to_numpy(message_from_fields(fields)), image)

    @pytest.mark.parametrize('array_, encoding, match', [
        (np.zeros((4, 4, 3), np.uint16), 'rgb8', 'dtype'),
        (np.zeros((4, 4), np.float64), '32FC1', 'dtype'),
        (np.zeros((4, 4), np.uint8), 'rgb8', 'shape'),
        (np.zeros((4, 4, 4), np.uint8), 'rgb8', 'shape'),
        (np.zeros((4,), np.uint8), 'mono8', 'shape'),
        (np.zeros((0, 4), np.uint8), 'mono8', 'empty'),
        (np.zeros((4, 4), np.uint8), 'nope', 'unsupported'),
        ([[0, 1]], 'mono8', 'numpy array'),
    ])
    def test_bad_input(self, array_, encoding, match):
        with pytest.raises(ValueError, match=match):
            numpy_to_image_fields(array_, encoding)


class TestToRgb8:
    def test_reference_orders(self):
        rgb = random_image('rgb8')
        rgba = np.dstack([rgb, random_image('mono8', seed=9)])
        np.testing.assert_array_equal(to_rgb8(rgb, 'rgb8'), rgb)
        np.testing.assert_array_equal(to_rgb8(rgb[..., ::-1].copy(), 'bgr8'), rgb)
        np.testing.assert_array_equal(to_rgb8(rgba, 'rgba8'), rgb)
        bgra = np.ascontiguousarray(rgba[..., [2, 1, 0, 3]])
        np.testing.assert_array_equal(to_rgb8(bgra, 'bgra8'), rgb)
        np.testing.assert_array_equal(to_rgb8(rgb[..., ::-1].copy(), '8UC3'), rgb)

    def test_grey_and_16_bit(self):
        grey = random_image('mono16')
        expected = np.repeat((grey // 256).astype(np.uint8)[:, :, None], 3, axis=2)
        result = to_rgb8(grey, 'mono16')
        assert result.shape == (HEIGHT, WIDTH, 3) and result.dtype == np.uint8
        np.testing.assert_array_equal(result, expected)
        np.testing.assert_array_equal(to_rgb8(grey // 256 * 0 + 7, 'mono16'), 0)
        rgb16 = random_image('rgb16')
        np.testing.assert_array_equal(to_rgb8(rgb16[..., ::-1].copy(), 'bgr16'),
                                      (rgb16 // 256).astype(np.uint8))

    @pytest.mark.parametrize('pattern', ['rggb', 'bggr', 'gbrg', 'grbg'])
    @pytest.mark.parametrize('bits', [8, 16])
    def test_bayer_flat_colour(self, pattern, bits):
        colour = np.array([200, 100, 50]) * (257 if bits == 16 else 1)
        dtype = np.uint8 if bits == 8 else np.uint16
        mosaic = np.zeros((8, 8), dtype=dtype)
        channel = {'r': 0, 'g': 1, 'b': 2}
        for index, letter in enumerate(pattern):
            mosaic[index // 2::2, index % 2::2] = colour[channel[letter]]
        rgb = to_rgb8(mosaic, f'bayer_{pattern}{bits}')
        np.testing.assert_array_equal(rgb[2:6, 2:6], np.broadcast_to([200, 100, 50], (4, 4, 3)))

    def test_yuv422_grey(self):
        uyvy = np.full((4, 6, 2), 128, dtype=np.uint8)
        uyvy[:, :, 1] = 150  # Y; U = V = 128: grey
        expected = 255.0 / 219.0 * (150 - 16)  # BT.601 studio range, as OpenCV converts
        np.testing.assert_allclose(to_rgb8(uyvy, 'yuv422').astype(int), expected, atol=1)
        yuyv = uyvy[:, :, ::-1].copy()
        np.testing.assert_allclose(to_rgb8(yuyv, 'yuv422_yuy2').astype(int), expected, atol=1)
        assert np.abs(to_rgb8(yuyv, 'yuv422').astype(int) - expected).max() > 10  # order matters

    def test_jazzy_yuv_names_are_the_same_layouts(self):
        rng = np.random.default_rng(0)
        packed = rng.integers(16, 235, (4, 6, 2), dtype=np.uint8)
        for alias, name in (('uyvy', 'yuv422'), ('yuyv', 'yuv422_yuy2')):
            np.testing.assert_array_equal(to_rgb8(packed, alias), to_rgb8(packed, name))
            np.testing.assert_array_equal(to_mono8(packed, alias), to_mono8(packed, name))
            message = message_from_fields(numpy_to_image_fields(packed, name), encoding=alias)
            np.testing.assert_array_equal(image_to_numpy(message), packed)

    @pytest.mark.parametrize('encoding', ['yuv422', 'yuv422_yuy2', 'uyvy', 'yuyv'])
    def test_odd_width_yuv422_is_a_value_error(self, encoding):
        odd = np.zeros((4, 5, 2), np.uint8)
        for convert in (to_rgb8, to_mono8):
            with pytest.raises(ValueError, match='needs an even width'):
                convert(odd, encoding)

    @pytest.mark.parametrize('array_, encoding', [
        (np.zeros((4, 4), np.float32), '32FC1'),
        (np.zeros((4, 4), np.uint16), '16UC1'),
        (np.zeros((4, 4), np.uint8), 'rgb8'),
        (np.zeros((4, 4, 3), np.float32), 'rgb8'),
    ])
    def test_bad_input(self, array_, encoding):
        with pytest.raises(ValueError):
            to_rgb8(array_, encoding)


class TestToMono8:
    @pytest.mark.parametrize('encoding', ['16UC1', '32FC1'])
    def test_depth_is_refused_as_a_picture_by_both_conversions(self, encoding):
        depth = random_image(encoding)
        for convert in (to_mono8, to_rgb8):
            with pytest.raises(ValueError, match='depth encoding'):
                convert(depth, encoding)

    def test_reference_luma(self):
        rgb = random_image('rgb8').astype(np.float64)
        expected = 0.299 * rgb[..., 0] + 0.587 * rgb[..., 1] + 0.114 * rgb[..., 2]
        for image, encoding in ((rgb, 'rgb8'), (rgb[..., ::-1], 'bgr8')):
            result = to_mono8(np.ascontiguousarray(image, dtype=np.uint8), encoding)
            assert result.shape == (HEIGHT, WIDTH) and result.dtype == np.uint8
            np.testing.assert_allclose(result, expected, atol=1.0)

    def test_mono_passthrough_and_16_bit(self):
        grey = random_image('mono8')
        np.testing.assert_array_equal(to_mono8(grey, 'mono8'), grey)
        deep = random_image('mono16')
        np.testing.assert_array_equal(to_mono8(deep, 'mono16'), deep >> 8)
        rgba16 = random_image('rgba16')
        np.testing.assert_allclose(to_mono8(rgba16, 'rgba16'),
                                   to_mono8((rgba16[..., :3] >> 8).astype(np.uint8), 'rgb8'))

    def test_bad_input(self):
        with pytest.raises(ValueError, match='cannot convert'):
            to_mono8(np.zeros((4, 4, 2), np.uint8), '8UC2')
        with pytest.raises(ValueError, match='dtype'):
            to_mono8(np.zeros((4, 4, 3), np.uint16), 'rgb8')


class TestDepthToMetres:
    @pytest.mark.parametrize('encoding', ['16UC1', 'mono16'])
    def test_millimetres(self, encoding):
        millimetres = np.array([[0, 1, 1500], [65535, 250, 0]], dtype=np.uint16)
        depth = depth_to_metres(millimetres, encoding)
        assert depth.dtype == np.float32 and depth.shape == (2, 3)
        expected = np.where(millimetres == 0, np.nan, millimetres / 1000.0)
        np.testing.assert_allclose(depth, expected, rtol=1e-6)

    def test_metres(self):
        metres = np.array([[0.0, -1.0, np.inf], [-np.inf, np.nan, 2.5]], dtype=np.float32)
        original = metres.copy()
        depth = depth_to_metres(metres, '32FC1')
        assert depth.dtype == np.float32
        assert np.isnan(depth).sum() == 5 and depth[1, 2] == np.float32(2.5)
        np.testing.assert_array_equal(metres, original)  # input untouched

    def test_through_a_message(self):
        millimetres = random_image('16UC1')
        msg = message_from_fields(numpy_to_image_fields(millimetres, '16UC1'))
        depth = depth_to_metres(image_to_numpy(msg), msg.encoding)
        np.testing.assert_allclose(depth[millimetres > 0], millimetres[millimetres > 0] / 1e3,
                                   rtol=1e-6)

    @pytest.mark.parametrize('array_, encoding', [
        (np.zeros((4, 4), np.uint8), '8UC1'),
        (np.zeros((4, 4, 3), np.uint8), 'rgb8'),
        (np.zeros((4, 4), np.float64), '32FC1'),
        (np.zeros((4, 4), np.float32), '16UC1'),
        (np.zeros((4, 4, 2), np.float32), '32FC1'),
    ])
    def test_bad_input(self, array_, encoding):
        with pytest.raises(ValueError):
            depth_to_metres(array_, encoding)


def smooth_rgb(height=48, width=64):
    """Return a smooth colour image with three different channels (JPEG-friendly)."""
    y, x = np.mgrid[0:height, 0:width]
    return np.dstack([x * 255 // (width - 1), y * 255 // (height - 1),
                      np.full_like(x, 60)]).astype(np.uint8)


class TestCompressed:
    def test_jpeg_rgb8_approximate(self):
        rgb = smooth_rgb()
        fields = numpy_to_compressed_fields(rgb, 'rgb8', 'jpeg', quality=95)
        assert fields['format'] == 'rgb8; jpeg compressed bgr8'
        assert fields['data'].dtype == np.uint8 and fields['data'].ndim == 1
        result, encoding = compressed_to_numpy(SimpleNamespace(**fields))
        assert encoding == 'rgb8' and result.shape == rgb.shape and result.dtype == np.uint8
        error = np.abs(result.astype(int) - rgb.astype(int))
        assert error.mean() < 2.0 and error.max() < 20  # a channel swap would give ~100

    def test_jpeg_mono8_format(self):
        grey = smooth_rgb()[:, :, 0].copy()
        fields = numpy_to_compressed_fields(grey, 'mono8')
        assert fields['format'] == 'mono8; jpeg compressed '
        result, encoding = compressed_to_numpy(SimpleNamespace(**fields))
        assert encoding == 'mono8' and result.shape == grey.shape
        assert np.abs(result.astype(int) - grey).mean() < 2.0

    def test_jpeg_16_bit_scaled(self):
        grey16 = smooth_rgb()[:, :, 0].astype(np.uint16) * 256
        result, encoding = compressed_to_numpy(
            SimpleNamespace(**numpy_to_compressed_fields(grey16, 'mono16', quality=100)))
        assert encoding == 'mono16' and result.dtype == np.uint16
        assert np.abs(result.astype(int) - grey16).mean() < 2 * 256

    @pytest.mark.parametrize('encoding', ['rgb8', 'bgr8', 'mono8', 'mono16', '16UC1', 'bgr16',
                                          'rgb16', '8UC1', '8UC3', '16UC3'])
    def test_png_exact(self, encoding):
        image = random_image(encoding, height=16, width=12, seed=5)
        fields = numpy_to_compressed_fields(image, encoding, 'png')
        assert fields['format'].startswith(f'{encoding}; png compressed ')
        result, decoded_encoding = compressed_to_numpy(SimpleNamespace(**fields))
        assert decoded_encoding == encoding
        np.testing.assert_array_equal(result, image)

    def test_png_alpha_dropped(self):
        rgba = random_image('rgba8', seed=6)
        result, encoding = compressed_to_numpy(
            SimpleNamespace(**numpy_to_compressed_fields(rgba, 'rgba8', 'png')))
        assert encoding == 'rgba8'
        np.testing.assert_array_equal(result[..., :3], rgba[..., :3])
        np.testing.assert_array_equal(result[..., 3], 255)

    def test_plain_formats(self):
        bgr = random_image('bgr8', seed=7)
        png = cv2.imencode('.png', bgr)[1].tobytes()
        result, encoding = compressed_to_numpy(SimpleNamespace(format='png', data=png))
        assert encoding == 'bgr8'
        np.testing.assert_array_equal(result, bgr)
        grey16 = random_image('mono16', seed=7)
        png16 = cv2.imencode('.png', grey16)[1]
        result, encoding = compressed_to_numpy(SimpleNamespace(format='png', data=png16))
        assert encoding == 'mono16'
        np.testing.assert_array_equal(result, grey16)
        jpeg = cv2.imencode('.jpg', smooth_rgb())[1].tobytes()
        result, encoding = compressed_to_numpy(SimpleNamespace(format='jpeg', data=jpeg))
        assert encoding == 'bgr8' and result.shape == (48, 64, 3)

    def test_payload_declared_rgb(self):
        rgb = random_image('rgb8', seed=8)
        # An RGB payload (not 'compressed bgr8'): the bytes stored in order R, G, B.
        payload = cv2.imencode('.png', rgb)[1]
        msg = SimpleNamespace(format='rgb8; png compressed rgb8', data=payload)
        result, _ = compressed_to_numpy(msg)
        np.testing.assert_array_equal(result, rgb)
        msg = SimpleNamespace(format='bgr8; png compressed rgb8', data=payload)
        result, _ = compressed_to_numpy(msg)
        np.testing.assert_array_equal(result, rgb[..., ::-1])

    @pytest.mark.parametrize('encoding', ['16UC1', 'mono16'])
    def test_compressed_depth_16uc1_exact(self, encoding):
        millimetres = random_image('16UC1', height=30, width=40, seed=9)
        fields = numpy_to_compressed_fields(millimetres, encoding, 'compressedDepth')
        assert fields['format'] == f'{encoding}; compressedDepth png'
        assert struct.unpack('<iff', fields['data'][:12].tobytes()) == (0, 0.0, 0.0)
        result, decoded_encoding = compressed_to_numpy(SimpleNamespace(**fields))
        assert decoded_encoding == encoding and result.dtype == np.uint16
        np.testing.assert_array_equal(result, millimetres)

    def test_compressed_depth_32fc1_hand_built(self):
        quant_a, quant_b = 10100.0, -1009.0  # image_transport defaults: q=100, max 10 m
        values = np.array([[0, 1, 1010], [5000, 9091, 65535]], dtype=np.uint16)
        payload = cv2.imencode('.png', values)[1].tobytes()
        msg = SimpleNamespace(format='32FC1; compressedDepth png',
                              data=struct.pack('<iff', 0, quant_a, quant_b) + payload)
        depth, encoding = compressed_to_numpy(msg)
        assert encoding == '32FC1' and depth.dtype == np.float32 and depth.shape == (2, 3)
        expected = np.where(values == 0, np.nan,
                            quant_a / (values.astype(np.float64) - quant_b))
        np.testing.assert_allclose(depth, expected, rtol=1e-6)
        assert depth[1, 1] == pytest.approx(1.0, rel=1e-6)  # A / 1 m + B = 9091
        assert depth[0, 1] == pytest.approx(10.0, rel=1e-6)  # value 1 is the 10 m maximum

    def test_compressed_depth_32fc1_round_trip(self):
        rng = np.random.default_rng(10)
        depth = rng.uniform(0.3, 12.0, size=(24, 32)).astype(np.float32)
        depth[0, :4] = [np.nan, 0.0, -1.0, np.inf]
        fields = numpy_to_compressed_fields(depth, '32FC1', 'compressedDepth')
        assert fields['format'] == '32FC1; compressedDepth png'
        result, _ = compressed_to_numpy(SimpleNamespace(**fields))
        kept = np.isfinite(depth) & (depth > 0) & (depth < 10.0)
        np.testing.assert_array_equal(np.isnan(result), ~kept)
        error = np.abs(result[kept] - depth[kept])
        assert np.all(error <= depth[kept] ** 2 / 10100.0 + 1e-5)

    def test_rosbags_and_rclpy_messages(self):
        rgb = random_image('rgb8', seed=11)
        fields = numpy_to_compressed_fields(rgb, 'rgb8', 'png')
        typesys = pytest.importorskip('rosbags.typesys')
        store = typesys.get_typestore(typesys.Stores.ROS2_JAZZY)
        Compressed = store.types['sensor_msgs/msg/CompressedImage']
        Header = store.types['std_msgs/msg/Header']
        Time = store.types['builtin_interfaces/msg/Time']
        msg = Compressed(header=Header(stamp=Time(sec=0, nanosec=0), frame_id='c'), **fields)
        raw = store.serialize_cdr(msg, 'sensor_msgs/msg/CompressedImage')
        decoded = store.deserialize_cdr(raw, 'sensor_msgs/msg/CompressedImage')
        np.testing.assert_array_equal(compressed_to_numpy(decoded)[0], rgb)
        sensor_msgs = pytest.importorskip('sensor_msgs.msg')
        ros_msg = sensor_msgs.CompressedImage(format=fields['format'])
        ros_msg.data = fields['data'].tobytes()
        np.testing.assert_array_equal(compressed_to_numpy(ros_msg)[0], rgb)

    def test_truncated_jpeg(self):
        fields = numpy_to_compressed_fields(smooth_rgb(), 'rgb8', 'jpeg')
        for size in (fields['data'].size // 2, fields['data'].size - 2, 2):
            msg = SimpleNamespace(format=fields['format'], data=fields['data'][:size])
            with pytest.raises(ValueError, match='truncated|decode'):
                compressed_to_numpy(msg)

    @pytest.mark.parametrize('fmt, data, match', [
        ('png', b'\x89PNG garbage', 'decode'),
        ('jpeg', b'', 'no image data'),
        ('16UC1; compressedDepth png', b'\x00' * 8, 'too short'),
        ('16UC1; compressedDepth rvl', b'\x00' * 40, 'RVL'),
        ('compressedDepth', b'\x00' * 40, 'encoding'),
        ('rgb9; png compressed bgr8', None, 'unsupported encoding'),
    ])
    def test_bad_input(self, fmt, data, match):
        if data is None:
            data = cv2.imencode('.png', random_image('bgr8'))[1]
        with pytest.raises(ValueError, match=match):
            compressed_to_numpy(SimpleNamespace(format=fmt, data=data))

    def test_compressed_depth_needs_16_bit_png(self):
        payload = cv2.imencode('.png', random_image('mono8'))[1].tobytes()
        msg = SimpleNamespace(format='16UC1; compressedDepth png',
                              data=struct.pack('<iff', 0, 0.0, 0.0) + payload)
        with pytest.raises(ValueError, match='16-bit'):
            compressed_to_numpy(msg)

    @pytest.mark.parametrize('array_, encoding, kwargs, match', [
        (np.zeros((4, 4, 3), np.uint8), 'rgb8', {'fmt': 'webp'}, 'fmt'),
        (np.zeros((4, 4, 3), np.uint8), 'rgb8', {'quality': 0}, 'quality'),
        (np.zeros((4, 4, 3), np.uint8), 'rgb8', {'fmt': 'png', 'png_level': 10}, 'level'),
        (np.zeros((4, 4), np.float32), '32FC1', {'fmt': 'jpeg'}, 'cannot hold'),
        (np.zeros((4, 4, 3), np.uint8), 'rgb8', {'fmt': 'compressedDepth'}, 'compressedDepth'),
        (np.zeros((4, 4, 4), np.uint8), '8UC4', {'fmt': 'jpeg'}, '4-channel'),
        (np.zeros((4, 4, 3), np.uint16), 'rgb8', {'fmt': 'png'}, 'dtype'),
    ])
    def test_bad_compress_input(self, array_, encoding, kwargs, match):
        with pytest.raises(ValueError, match=match):
            numpy_to_compressed_fields(array_, encoding, **kwargs)


def turbo_rgb(index):
    """Return turbo colours from OpenCV's applyColorMap for uint8 indices (reference)."""
    bgr = cv2.applyColorMap(np.asarray(index, dtype=np.uint8).reshape(-1, 1),
                            cv2.COLORMAP_TURBO)
    return bgr.reshape(-1, 3)[:, ::-1]


class TestReadImageFile:
    def test_reads_what_imread_reads_and_refuses_a_truncated_jpeg(self, tmp_path):
        rng = np.random.default_rng(0)
        bgr = cv2.GaussianBlur(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8), (5, 5), 0)
        whole = tmp_path / 'whole.jpg'
        assert cv2.imwrite(str(whole), bgr)
        for flags in (cv2.IMREAD_COLOR, cv2.IMREAD_GRAYSCALE, cv2.IMREAD_UNCHANGED):
            np.testing.assert_array_equal(read_image_file(whole, flags),
                                          cv2.imread(str(whole), flags))
        data = whole.read_bytes()
        half = tmp_path / 'half.jpg'
        half.write_bytes(data[:len(data) // 2])
        assert cv2.imread(str(half)) is not None   # OpenCV decodes half a JPEG without a word
        with pytest.raises(ValueError, match='half.jpg: truncated JPEG'):
            read_image_file(half, cv2.IMREAD_COLOR)
        empty = tmp_path / 'empty.png'
        empty.write_bytes(b'')
        with pytest.raises(ValueError, match='empty.png: no image data'):
            read_image_file(empty)
        with pytest.raises(FileNotFoundError):
            read_image_file(tmp_path / 'missing.png')


class TestReadDeepImageFiles:
    def test_a_16_bit_file_reads_as_the_same_image_message_does(self, tmp_path, caplog):
        # before, a file was scaled from the range its values use (12-bit data by 1/16) while
        # the nodes and eval scale the same picture as a message by 1/256: infer fed the model
        # another input than the nodes
        deep = np.random.default_rng(0).integers(0, 4096, (24, 32, 3)).astype(np.uint16)
        deep[0, 0] = 4095
        cv2.imwrite(str(tmp_path / 'deep.png'), deep)   # BGR on disk
        with caplog.at_level('WARNING'):
            colour = read_image_file(tmp_path / 'deep.png', cv2.IMREAD_COLOR)
        np.testing.assert_array_equal(cv2.cvtColor(colour, cv2.COLOR_BGR2RGB),
                                      to_rgb8(deep[:, :, ::-1], 'rgb16'))
        assert f"{tmp_path / 'deep.png'}: {low_range_16bit(deep, 'bgr16')}" in caplog.text
        grey16 = cv2.imread(str(tmp_path / 'deep.png'), cv2.IMREAD_GRAYSCALE | cv2.IMREAD_ANYDEPTH)
        np.testing.assert_array_equal(read_image_file(tmp_path / 'deep.png',
                                                      cv2.IMREAD_GRAYSCALE),
                                      to_mono8(grey16, 'mono16'))
        cv2.imwrite(str(tmp_path / 'grey.png'), deep[:, :, 1])
        np.testing.assert_array_equal(read_image_file(tmp_path / 'grey.png', cv2.IMREAD_COLOR),
                                      to_rgb8(deep[:, :, 1], 'mono16'))
        # a file using the high bits: the same rule, without a warning
        deep[0, 0] = 65535
        cv2.imwrite(str(tmp_path / 'full.png'), deep)
        caplog.clear()
        with caplog.at_level('WARNING'):
            colour = read_image_file(tmp_path / 'full.png', cv2.IMREAD_COLOR)
        np.testing.assert_array_equal(colour, to_8bit(deep))
        assert caplog.text == ''

    def test_a_float_image_is_named_as_such(self, tmp_path):
        cv2.imwrite(str(tmp_path / 'depth.tiff'), np.ones((24, 32), np.float32))
        with pytest.raises(ValueError, match='float32 image, not a camera picture'):
            read_image_file(tmp_path / 'depth.tiff', cv2.IMREAD_COLOR)


class TestColorizeDepth:
    def test_shape_dtype_nan_black(self):
        depth = np.linspace(0.5, 5.0, 12 * 16, dtype=np.float32).reshape(12, 16)
        depth[3, 4] = np.nan
        depth[5, 6] = 0.0
        rgb = colorize_depth(depth)
        assert rgb.shape == (12, 16, 3) and rgb.dtype == np.uint8
        np.testing.assert_array_equal(rgb[3, 4], 0)
        np.testing.assert_array_equal(rgb[5, 6], 0)
        valid = np.isfinite(depth) & (depth > 0)
        assert np.all(rgb[valid].max(axis=1) > 0)  # turbo has no black

    def test_reference_range_ends(self):
        depth = np.array([[1.0, 2.0, 3.0, 0.5, 9.0]], dtype=np.float32)
        rgb = colorize_depth(depth, min_m=1.0, max_m=3.0)
        np.testing.assert_array_equal(rgb[0], turbo_rgb([0, 127, 255, 0, 255]))

    def test_automatic_range_spans_colours(self):
        depth = np.tile(np.linspace(1.0, 4.0, 101, dtype=np.float32), (3, 1))
        rgb = colorize_depth(depth, percentiles=(0.0, 100.0))
        np.testing.assert_array_equal(rgb[0, 0], turbo_rgb([0])[0])
        np.testing.assert_array_equal(rgb[0, -1], turbo_rgb([255])[0])

    def test_degenerate(self):
        np.testing.assert_array_equal(colorize_depth(np.full((3, 4), np.nan, np.float32)), 0)
        constant = colorize_depth(np.full((3, 4), 2.0, np.float32))
        assert np.all(constant == constant[0, 0]) and constant[0, 0].max() > 0
        with pytest.raises(ValueError, match='2-D'):
            colorize_depth(np.zeros((3, 4, 1), np.float32))
        with pytest.raises(ValueError, match='greater'):
            colorize_depth(np.ones((3, 4), np.float32), min_m=2.0, max_m=1.0)


class TestColorizeLabels:
    def test_camvid_palette(self):
        assert len(CAMVID_CLASS_NAMES) == 11 and CAMVID_CLASS_NAMES[3] == 'Road'
        assert CAMVID_PALETTE.shape == (256, 3) and CAMVID_PALETTE.dtype == np.uint8
        assert tuple(CAMVID_PALETTE[CAMVID_CLASS_NAMES.index('Road')]) == (128, 64, 128)
        assert tuple(CAMVID_PALETTE[CAMVID_CLASS_NAMES.index('Sky')]) == (128, 128, 128)
        assert tuple(CAMVID_PALETTE[CAMVID_CLASS_NAMES.index('Car')]) == (64, 0, 128)
        assert len({tuple(c) for c in CAMVID_PALETTE[:11]}) == 11

    def test_reference(self):
        labels = np.random.default_rng(12).integers(0, 256, size=(6, 9)).astype(np.uint8)
        rgb = colorize_labels(labels)
        assert rgb.shape == (6, 9, 3) and rgb.dtype == np.uint8
        for (row, col), label in np.ndenumerate(labels):
            np.testing.assert_array_equal(rgb[row, col], CAMVID_PALETTE[label])

    def test_custom_palette_and_bad_input(self):
        palette = np.array([[0, 0, 0], [255, 0, 0]], dtype=np.uint8)
        labels = np.array([[0, 1], [1, 0]], dtype=np.int32)
        np.testing.assert_array_equal(colorize_labels(labels, palette)[0, 1], [255, 0, 0])
        with pytest.raises(ValueError, match='label ids'):
            colorize_labels(labels + 1, palette)
        with pytest.raises(ValueError, match='label ids'):
            colorize_labels(labels - 1, palette)
        with pytest.raises(ValueError, match='integer'):
            colorize_labels(labels.astype(np.float32))
        with pytest.raises(ValueError, match='palette'):
            colorize_labels(labels, palette.astype(np.float32))


class TestOverlay:
    def test_reference_blend(self):
        rgb = random_image('rgb8')
        color = random_image('rgb8', seed=13)
        np.testing.assert_array_equal(overlay(rgb, color, alpha=0.0), rgb)
        np.testing.assert_array_equal(overlay(rgb, color, alpha=1.0), color)
        half = overlay(rgb, color)
        assert half.dtype == np.uint8 and half.shape == rgb.shape
        expected = (rgb.astype(float) + color.astype(float)) / 2
        np.testing.assert_allclose(half, expected, atol=1.0)

    def test_mask(self):
        rgb = np.zeros((4, 4, 3), np.uint8)
        color = np.full((4, 4, 3), 200, np.uint8)
        mask = np.zeros((4, 4), bool)
        mask[1, 2] = True
        result = overlay(rgb, color, alpha=0.5, mask=mask)
        np.testing.assert_array_equal(result[1, 2], 100)
        assert result.sum() == 300

    def test_bad_input(self):
        rgb = np.zeros((4, 4, 3), np.uint8)
        with pytest.raises(ValueError, match='alpha'):
            overlay(rgb, rgb, alpha=1.5)
        with pytest.raises(ValueError, match='H, W, 3'):
            overlay(rgb, np.zeros((4, 5, 3), np.uint8))
        with pytest.raises(ValueError, match='uint8'):
            overlay(rgb, rgb.astype(np.float32))
        with pytest.raises(ValueError, match='mask'):
            overlay(rgb, rgb, mask=np.ones((3, 3), bool))


class TestRealFrames:
    """Real TUM RGB-D frames (development data; skipped when absent)."""

    def test_tum_rgb_and_depth_through_messages(self):
        from conftest import shared_dataset
        folder = shared_dataset('tum_rgbd_fr3_long_office_household_1hz_17f')
        bgr = cv2.imread(str(min((folder / 'rgb').glob('*.png'))), cv2.IMREAD_COLOR)
        raw = cv2.imread(str(min((folder / 'depth').glob('*.png'))), cv2.IMREAD_UNCHANGED)
        assert bgr is not None and raw is not None and raw.dtype == np.uint16
        rgb = np.ascontiguousarray(bgr[..., ::-1])
        msg = message_from_fields(numpy_to_image_fields(rgb, 'rgb8'))
        np.testing.assert_array_equal(to_rgb8(image_to_numpy(msg), 'rgb8'), rgb)
        jpeg = SimpleNamespace(**numpy_to_compressed_fields(rgb, 'rgb8', quality=90))
        decoded, _ = compressed_to_numpy(jpeg)
        psnr = cv2.PSNR(decoded, rgb)
        assert psnr > 30.0
        depth_msg = SimpleNamespace(**numpy_to_compressed_fields(raw, '16UC1', 'compressedDepth'))
        np.testing.assert_array_equal(compressed_to_numpy(depth_msg)[0], raw)
        colour = colorize_depth(raw.astype(np.float32) / 5000.0)  # TUM: 5000 units per metre
        np.testing.assert_array_equal(colour[raw == 0], 0)


class TestDepthChecks:
    """check_depth: refused depth gets a named problem; real depth passes."""

    @staticmethod
    def _depth_m():
        from relperception.data.synthetic import SyntheticScene

        scene = SyntheticScene(seed=2, width=160, height=120)
        return scene.render(scene.trajectory(1)[0])[1].astype(np.float32)

    def test_good_depth_passes_in_both_encodings(self):
        depth = self._depth_m()
        millimetres = np.nan_to_num(depth * 1000).astype(np.uint16)
        for values, encoding in ((depth, '32FC1'), (millimetres, '16UC1'),
                                 (millimetres[..., None], 'mono16')):
            check = check_depth(values, encoding, depth.shape)
            assert check.problem is None and check.message == ''
            np.testing.assert_allclose(check.depth, depth, atol=1e-3, equal_nan=True)

    def test_each_problem_is_named(self):
        depth = self._depth_m()
        millimetres = np.nan_to_num(depth * 1000).astype(np.uint16)
        cases = {
            'undecodable': (millimetres, 'rgb8'),
            'wrong_size': (depth[::2, ::2].copy(), '32FC1'),
            'byte_swapped': (millimetres.byteswap(), '16UC1'),
            'no_valid_pixel': (-depth, '32FC1'),
            'implausible_range': (depth * 1000, '32FC1'),
        }
        assert set(cases) == set(DEPTH_PROBLEMS)
        for problem, (values, encoding) in cases.items():
            check = check_depth(values, encoding, depth.shape)
            assert check.depth is None and check.problem == problem, (problem, check)
            assert check.message
        metres_as_mm = np.nan_to_num(depth).astype(np.uint16)   # 2, 3, 4 "millimetres"
        assert check_depth(metres_as_mm, '16UC1', depth.shape).problem == 'implausible_range'
        all_nan = np.full_like(depth, np.nan)
        assert check_depth(all_nan, '32FC1', depth.shape).problem == 'no_valid_pixel'

    def test_real_sensor_depth_passes(self):
        from conftest import shared_dataset

        tum = shared_dataset('tum_rgbd_fr3_long_office_household_1hz_17f')
        nyu_sun = shared_dataset('rgbd_single_frames_nyu_sun')
        for path in sorted((tum / 'depth').glob('*.png'))[:5] + [nyu_sun / 'SUN_depth.png']:
            raw = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
            assert raw.dtype == np.uint16, path
            check = check_depth(raw, '16UC1', raw.shape)
            assert check.problem is None, (path, check.message)
            # The same data with its bytes swapped is caught.
            assert check_depth(raw.byteswap(), '16UC1', raw.shape).problem == 'byte_swapped'
        # NYU_depth.pgm stores its samples little-endian, against the PGM format: OpenCV reads
        # them swapped, and that is what the check says.
        nyu = cv2.imread(str(nyu_sun / 'NYU_depth.pgm'), cv2.IMREAD_UNCHANGED)
        assert check_depth(nyu, '16UC1', nyu.shape).problem == 'byte_swapped'
        assert check_depth(nyu.byteswap(), '16UC1', nyu.shape).problem != 'byte_swapped'


def test_low_range_16bit_is_one_rule():
    from relperception.imaging import LOW_RANGE_16BIT_MAX

    twelve_bit = np.full((4, 6), LOW_RANGE_16BIT_MAX - 1, np.uint16)
    text = low_range_16bit(twelve_bit, 'mono16')
    assert 'maximum 4095' in text and 'only 16 grey levels' in text and 'mono8' in text
    assert low_range_16bit(twelve_bit + 1, 'mono16') == ''   # uses the high bits
    assert low_range_16bit(np.dstack([twelve_bit] * 3), 'rgb16') != ''
    assert low_range_16bit(twelve_bit.astype(np.uint8), 'mono8') == ''
    assert low_range_16bit(twelve_bit, '16UC1') == ''   # depth: refused elsewhere
