# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of relperception.data.correspondences (matches <-> sensor_msgs/PointCloud2 layout)."""

import numpy as np
import pytest

from relperception.core_types import Matches
from relperception.data.bag import default_typestore
from relperception.data.correspondences import (
    correspondence_cloud_fields,
    CORRESPONDENCE_FIELDS,
    FLOAT32,
    matches_from_cloud,
    POINT_STEP,
    UINT32,
)

STAMP0_NS = 1_700_000_123_456_789_012


def _matches(count=50, seed=0):
    rng = np.random.default_rng(seed)
    return Matches(rng.uniform(0, 640, (count, 2)), rng.uniform(0, 480, (count, 2)),
                   rng.uniform(0, 1, count))


def _assert_same(matches, expected):
    np.testing.assert_array_equal(matches.keypoints0, expected.keypoints0)
    np.testing.assert_array_equal(matches.keypoints1, expected.keypoints1)
    np.testing.assert_array_equal(matches.confidence, expected.confidence)


class _Cloud:
    """A duck-typed PointCloud2 (plain attributes)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _rosbags_cloud(fields_dict, stamp_ns=STAMP0_NS + 100_000_000):
    """Build a rosbags PointCloud2 from the field dict and pass it through CDR."""
    store = default_typestore()
    types = store.types
    sec, nanosec = divmod(stamp_ns, 1_000_000_000)
    header = types['std_msgs/msg/Header'](
        stamp=types['builtin_interfaces/msg/Time'](sec=sec, nanosec=nanosec), frame_id='camera')
    point_fields = [types['sensor_msgs/msg/PointField'](name=n, offset=o, datatype=d, count=c)
                    for n, o, d, c in fields_dict['fields']]
    msg = types['sensor_msgs/msg/PointCloud2'](
        header=header, height=fields_dict['height'], width=fields_dict['width'],
        fields=point_fields, is_bigendian=fields_dict['is_bigendian'],
        point_step=fields_dict['point_step'], row_step=fields_dict['row_step'],
        data=fields_dict['data'], is_dense=fields_dict['is_dense'])
    raw = store.serialize_cdr(msg, 'sensor_msgs/msg/PointCloud2')
    return store.deserialize_cdr(raw, 'sensor_msgs/msg/PointCloud2')


class TestCorrespondenceCloudFields:
    def test_smoke_layout(self):
        fields = correspondence_cloud_fields(_matches(7), STAMP0_NS)
        assert fields['height'] == 1 and fields['width'] == 7
        assert fields['point_step'] == POINT_STEP == 28 and fields['row_step'] == 28 * 7
        assert fields['is_bigendian'] is False and fields['is_dense'] is True
        assert fields['data'].dtype == np.uint8 and fields['data'].shape == (28 * 7,)
        names = [f[0] for f in fields['fields']]
        assert names == ['x0', 'y0', 'x1', 'y1', 'confidence', 'stamp0_sec', 'stamp0_nanosec']
        assert [f[2] for f in fields['fields']] == [FLOAT32] * 5 + [UINT32] * 2
        assert (FLOAT32, UINT32) == (7, 6)

    def test_reference_bytes(self):
        # Independent packing with struct: little-endian 5 x float32 + 2 x uint32 per point.
        import struct
        matches = _matches(3)
        data = correspondence_cloud_fields(matches, STAMP0_NS)['data'].tobytes()
        sec, nanosec = divmod(STAMP0_NS, 1_000_000_000)
        expected = b''.join(
            struct.pack('<5f2I', *matches.keypoints0[i], *matches.keypoints1[i],
                        matches.confidence[i], sec, nanosec) for i in range(3))
        assert data == expected

    def test_round_trip_duck_typed(self):
        matches = _matches()
        fields = correspondence_cloud_fields(matches, STAMP0_NS)
        decoded, stamp0_ns = matches_from_cloud(_Cloud(**fields))
        _assert_same(decoded, matches)
        assert stamp0_ns == STAMP0_NS

    def test_non_finite_is_not_dense(self):
        matches = Matches(np.array([[np.nan, 1.0]]), np.zeros((1, 2)), np.ones(1))
        assert correspondence_cloud_fields(matches, 0)['is_dense'] is False

    def test_empty(self):
        fields = correspondence_cloud_fields(Matches.empty(), STAMP0_NS)
        assert fields['width'] == 0 and fields['row_step'] == 0 and fields['data'].size == 0
        decoded, stamp0_ns = matches_from_cloud(_Cloud(**fields))
        assert len(decoded) == 0 and stamp0_ns is None

    def test_bad_input(self):
        with pytest.raises(ValueError):
            correspondence_cloud_fields(np.zeros((3, 4)), STAMP0_NS)
        with pytest.raises(ValueError):
            correspondence_cloud_fields(_matches(3), -1)
        with pytest.raises(ValueError):
            correspondence_cloud_fields(_matches(3), 1.5)
        with pytest.raises(ValueError):
            correspondence_cloud_fields(_matches(3), 2**31 * 1_000_000_000)


class TestMatchesFromCloud:
    def test_rosbags_round_trip(self):
        matches = _matches(40)
        msg = _rosbags_cloud(correspondence_cloud_fields(matches, STAMP0_NS))
        decoded, stamp0_ns = matches_from_cloud(msg)
        _assert_same(decoded, matches)
        assert stamp0_ns == STAMP0_NS

    def test_rclpy_round_trip(self):
        sensor_msgs = pytest.importorskip('sensor_msgs.msg')
        matches = _matches(40)
        fields = correspondence_cloud_fields(matches, STAMP0_NS)
        msg = sensor_msgs.PointCloud2(
            height=fields['height'], width=fields['width'],
            fields=[sensor_msgs.PointField(name=n, offset=o, datatype=d, count=c)
                    for n, o, d, c in fields['fields']],
            is_bigendian=fields['is_bigendian'], point_step=fields['point_step'],
            row_step=fields['row_step'], is_dense=fields['is_dense'])
        msg.data = fields['data'].tobytes()
        decoded, stamp0_ns = matches_from_cloud(msg)
        _assert_same(decoded, matches)
        assert stamp0_ns == STAMP0_NS

    def test_other_order_extra_fields_padding_big_endian(self):
        # An independent writer: big-endian, fields in another order, an extra float64 field,
        # 4 bytes of padding per point and 8 bytes per row, 2 rows (organised cloud).
        matches = _matches(6)
        sec, nanosec = divmod(STAMP0_NS, 1_000_000_000)
        layout = [('stamp0_nanosec', 0, UINT32), ('confidence', 4, FLOAT32),
                  ('y1', 8, FLOAT32), ('x1', 12, FLOAT32), ('score', 16, 8),
                  ('y0', 24, FLOAT32), ('x0', 28, FLOAT32), ('stamp0_sec', 32, UINT32)]
        kinds = {FLOAT32: '>f4', UINT32: '>u4', 8: '>f8'}
        dtype = np.dtype({'names': [n for n, _, _ in layout],
                          'formats': [kinds[d] for _, _, d in layout],
                          'offsets': [o for _, o, _ in layout], 'itemsize': 40})
        points = np.zeros(6, dtype)
        points['x0'], points['y0'] = matches.keypoints0.T
        points['x1'], points['y1'] = matches.keypoints1.T
        points['confidence'] = matches.confidence
        points['score'] = 3.0
        points['stamp0_sec'], points['stamp0_nanosec'] = sec, nanosec
        rows = points.view(np.uint8).reshape(2, 3 * 40)
        data = np.concatenate([rows, np.zeros((2, 8), np.uint8)], axis=1).reshape(-1)
        cloud = _Cloud(height=2, width=3, is_bigendian=True, point_step=40, row_step=128,
                       fields=[(n, o, d, 1) for n, o, d in layout], data=data.tobytes(),
                       is_dense=True)
        decoded, stamp0_ns = matches_from_cloud(cloud)
        _assert_same(decoded, matches)
        assert stamp0_ns == STAMP0_NS
        # The same through rosbags CDR.
        msg = _rosbags_cloud({'height': 2, 'width': 3, 'fields': cloud.fields,
                              'is_bigendian': True, 'point_step': 40, 'row_step': 128,
                              'data': data, 'is_dense': True})
        _assert_same(matches_from_cloud(msg)[0], matches)

    def test_no_copy_of_data(self):
        fields = correspondence_cloud_fields(_matches(1000), STAMP0_NS)
        data = fields['data']
        decoded, _ = matches_from_cloud(_Cloud(**fields))
        assert len(decoded) == 1000
        view = np.frombuffer(data, np.uint8)
        assert np.shares_memory(view, data)

    def _fields(self, **changes):
        fields = correspondence_cloud_fields(_matches(5), STAMP0_NS)
        fields.update(changes)
        return _Cloud(**fields)

    def test_missing_field(self):
        fields = [f for f in CORRESPONDENCE_FIELDS if f[0] != 'stamp0_sec']
        with pytest.raises(ValueError, match='stamp0_sec'):
            matches_from_cloud(self._fields(fields=fields))

    def test_wrong_datatype(self):
        fields = [(n, o, 8 if n == 'x0' else d, c) for n, o, d, c in CORRESPONDENCE_FIELDS]
        with pytest.raises(ValueError, match='datatype'):
            matches_from_cloud(self._fields(fields=fields))
        fields = [(n, o, d, 3 if n == 'y1' else c) for n, o, d, c in CORRESPONDENCE_FIELDS]
        with pytest.raises(ValueError, match='count'):
            matches_from_cloud(self._fields(fields=fields))
        with pytest.raises(ValueError):
            matches_from_cloud(self._fields(fields=[('x0', 0, 7)]))

    def test_size_mismatch(self):
        good = correspondence_cloud_fields(_matches(5), STAMP0_NS)
        with pytest.raises(ValueError, match='bytes'):
            matches_from_cloud(self._fields(data=good['data'][:-1]))
        with pytest.raises(ValueError, match='row_step'):
            matches_from_cloud(self._fields(row_step=20 * 5, data=good['data'][:100]))
        with pytest.raises(ValueError, match='point_step'):
            matches_from_cloud(self._fields(point_step=20, row_step=100,
                                            data=good['data'][:100]))
        with pytest.raises(ValueError, match='row_step'):
            matches_from_cloud(self._fields(width=6))
        with pytest.raises(ValueError, match='bytes'):
            matches_from_cloud(self._fields(height=2))

    def test_inconsistent_or_invalid_stamp(self):
        fields = correspondence_cloud_fields(_matches(5), STAMP0_NS)
        data = fields['data'].copy()
        points = data.view(np.dtype([('pad', 'V24'), ('nanosec', '<u4')]))
        points['nanosec'][2] += 1
        with pytest.raises(ValueError, match='disagree'):
            matches_from_cloud(self._fields(data=data))
        points['nanosec'] = 1_000_000_000
        with pytest.raises(ValueError, match='nanosec'):
            matches_from_cloud(self._fields(data=data))
