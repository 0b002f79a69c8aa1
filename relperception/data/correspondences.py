# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Correspondences between two frames as a ``sensor_msgs/PointCloud2``, without importing ROS.

The ``correspondences`` topic carries the matches of an older frame 0 and a newer frame 1 as an
unorganised cloud (``height`` 1, ``width`` N, one point per match, little-endian, 28 bytes):

============== ====== ======== ===============================================================
field          offset datatype meaning
============== ====== ======== ===============================================================
x0             0      FLOAT32  pixel x in the older image (right, pixel centre at integer)
y0             4      FLOAT32  pixel y in the older image (down)
x1             8      FLOAT32  pixel x in the newer image
y1             12     FLOAT32  pixel y in the newer image
confidence     16     FLOAT32  match confidence in [0, 1]
stamp0_sec     20     UINT32   seconds of the OLDER frame's stamp (same in every point)
stamp0_nanosec 24     UINT32   nanoseconds of the OLDER frame's stamp (same in every point)
============== ====== ======== ===============================================================

FLOAT32 is PointField datatype 7 and UINT32 datatype 6. The message ``header`` is the NEWER
frame's (stamp and ``frame_id``); a PointCloud2 has one header only, so the older frame's stamp
travels in the points. With zero matches the cloud is empty and the older stamp is therefore
unknown: :func:`matches_from_cloud` returns ``None`` for it, and the odometry treats such a
message as 'no motion information' (it cannot tell which frame the newer one was compared to).

Readers locate the fields by NAME and offset, so clouds with extra fields, another field order
or padding (``point_step`` > 28, ``row_step`` > ``point_step * width``) parse too; big-endian
clouds are honoured. Functions are duck-typed like :mod:`relperception.data.messages`: they
read ROS field names, so ``rosbags`` and ``rclpy`` messages work alike; the builder returns a
dict of field values and the caller constructs the message class it has.
"""

from __future__ import annotations

import numpy as np

from relperception.core_types import Matches
from relperception.data.messages import NS_PER_SEC, ns_to_sec_nanosec

#: ``sensor_msgs/PointField`` datatype constants used here (and their numpy kinds).
UINT32 = 6
FLOAT32 = 7
#: numpy scalar kind (without byte order) of every PointField datatype.
_POINTFIELD_KINDS = {1: 'i1', 2: 'u1', 3: 'i2', 4: 'u2', 5: 'i4', 6: 'u4', 7: 'f4', 8: 'f8'}

#: (name, offset, datatype, count) of every field, in the order they are written.
CORRESPONDENCE_FIELDS = (
    ('x0', 0, FLOAT32, 1),
    ('y0', 4, FLOAT32, 1),
    ('x1', 8, FLOAT32, 1),
    ('y1', 12, FLOAT32, 1),
    ('confidence', 16, FLOAT32, 1),
    ('stamp0_sec', 20, UINT32, 1),
    ('stamp0_nanosec', 24, UINT32, 1),
)
#: Bytes per point of the written clouds.
POINT_STEP = 28

_WRITE_DTYPE = np.dtype({
    'names': [name for name, _, _, _ in CORRESPONDENCE_FIELDS],
    'formats': ['<' + _POINTFIELD_KINDS[datatype] for _, _, datatype, _ in CORRESPONDENCE_FIELDS],
    'offsets': [offset for _, offset, _, _ in CORRESPONDENCE_FIELDS],
    'itemsize': POINT_STEP,
})


def correspondence_cloud_fields(matches: Matches, stamp0_ns: int) -> dict:
    """Return the ``sensor_msgs/PointCloud2`` field values (header excluded) of ``matches``.

    Args:
        matches: correspondences older frame (``keypoints0``) -> newer frame (``keypoints1``),
            float32 pixels, confidence in [0, 1].
        stamp0_ns: stamp of the OLDER frame, integer nanoseconds (>= 0); the caller puts the
            newer frame's stamp into the header.

    Returns:
        dict with ``height`` 1, ``width`` N, ``fields`` (list of ``(name, offset, datatype,
        count)`` tuples, see :data:`CORRESPONDENCE_FIELDS`), ``is_bigendian`` False,
        ``point_step`` 28, ``row_step`` 28 * N, ``data`` (28 * N,) uint8 and ``is_dense``
        (False when a keypoint or confidence is not finite).

    Raises:
        ValueError: ``matches`` is not :class:`Matches` or ``stamp0_ns`` is not a valid stamp.
    """
    if not isinstance(matches, Matches):
        raise ValueError(  # noqa: TRY004 (house rule: ValueError at the boundary)
            f'matches must be relperception.core_types.Matches, got {type(matches).__name__}')
    if isinstance(stamp0_ns, bool) or not isinstance(stamp0_ns, (int, np.integer)):
        raise ValueError(f'stamp0_ns must be integer nanoseconds, got {stamp0_ns!r}')
    sec, nanosec = ns_to_sec_nanosec(int(stamp0_ns))
    points = np.empty(len(matches), dtype=_WRITE_DTYPE)
    points['x0'] = matches.keypoints0[:, 0]
    points['y0'] = matches.keypoints0[:, 1]
    points['x1'] = matches.keypoints1[:, 0]
    points['y1'] = matches.keypoints1[:, 1]
    points['confidence'] = matches.confidence
    points['stamp0_sec'] = sec
    points['stamp0_nanosec'] = nanosec
    is_dense = bool(np.isfinite(matches.keypoints0).all() and np.isfinite(matches.keypoints1).all()
                    and np.isfinite(matches.confidence).all())
    return {
        'height': 1,
        'width': len(matches),
        'fields': list(CORRESPONDENCE_FIELDS),
        'is_bigendian': False,
        'point_step': POINT_STEP,
        'row_step': POINT_STEP * len(matches),
        'data': points.view(np.uint8).reshape(-1),
        'is_dense': is_dense,
    }


def _field_tuple(field) -> tuple[str, int, int, int]:
    """Return ``(name, offset, datatype, count)`` of a PointField object or 4-tuple."""
    if isinstance(field, (tuple, list)):
        if len(field) != 4:
            raise ValueError(f'a field tuple must be (name, offset, datatype, count), '
                             f'got {field!r}')
        name, offset, datatype, count = field
    else:
        name, offset, datatype, count = field.name, field.offset, field.datatype, field.count
    return str(name), int(offset), int(datatype), int(count)


def matches_from_cloud(msg) -> tuple[Matches, int | None]:
    """Return the correspondences of a ``sensor_msgs/PointCloud2`` and the older frame's stamp.

    Args:
        msg: a PointCloud2 (rclpy or rosbags message, or anything with its fields: ``height``,
            ``width``, ``fields`` (PointField objects or ``(name, offset, datatype, count)``
            tuples), ``is_bigendian``, ``point_step``, ``row_step``, ``data`` (bytes-like)),
            in the layout documented in this module.

    Returns:
        ``(matches, stamp0_ns)``: :class:`Matches` (float32 pixels, older -> newer) and the
        older frame's stamp in integer nanoseconds, or None when the cloud is empty.

    Raises:
        ValueError: a required field is missing or has another datatype or count, the sizes
            (``data``, ``row_step``, ``point_step``, field offsets) do not agree, the
            ``stamp0_nanosec`` is out of range or the points disagree on the older stamp.
    """
    height, width = int(msg.height), int(msg.width)
    point_step, row_step = int(msg.point_step), int(msg.row_step)
    if height < 0 or width < 0:
        raise ValueError(f'cloud size must be non-negative, got {height}x{width}')
    fields = {}
    for field in msg.fields:
        name, offset, datatype, count = _field_tuple(field)
        fields[name] = (offset, datatype, count)
    order = '>' if bool(msg.is_bigendian) else '<'
    names, formats, offsets = [], [], []
    for name, _, datatype, _ in CORRESPONDENCE_FIELDS:
        if name not in fields:
            raise ValueError(f'correspondence cloud has no field {name!r}; fields: '
                             f'{sorted(fields)}')
        offset, got_datatype, count = fields[name]
        if got_datatype != datatype:
            raise ValueError(f'field {name!r} must have datatype {datatype} '
                             f'({_POINTFIELD_KINDS[datatype]}), got {got_datatype}')
        if count not in (0, 1):   # some writers leave count 0 for scalars
            raise ValueError(f'field {name!r} must have count 1, got {count}')
        if offset < 0 or offset + 4 > point_step:
            raise ValueError(f'field {name!r} at offset {offset} does not fit in '
                             f'point_step {point_step}')
        names.append(name)
        formats.append(order + _POINTFIELD_KINDS[datatype])
        offsets.append(offset)
    num_points = height * width
    if num_points and row_step < point_step * width:
        raise ValueError(f'row_step {row_step} < point_step {point_step} * width {width}')
    data = np.frombuffer(msg.data, dtype=np.uint8)
    if data.size != row_step * height:
        raise ValueError(f'data has {data.size} bytes, expected row_step * height = '
                         f'{row_step} * {height} = {row_step * height}')
    if num_points == 0:
        return Matches.empty(), None
    dtype = np.dtype({'names': names, 'formats': formats, 'offsets': offsets,
                      'itemsize': point_step})
    points = np.ndarray((height, width), dtype=dtype, buffer=data,
                        strides=(row_step, point_step)).reshape(-1)
    sec = points['stamp0_sec']
    nanosec = points['stamp0_nanosec']
    if np.any(sec != sec[0]) or np.any(nanosec != nanosec[0]):
        raise ValueError('the points of the cloud disagree on the older stamp (stamp0_sec, '
                         'stamp0_nanosec)')
    if int(nanosec[0]) >= NS_PER_SEC:
        raise ValueError(f'stamp0_nanosec must be < 1e9, got {int(nanosec[0])}')
    stamp0_ns = int(sec[0]) * NS_PER_SEC + int(nanosec[0])
    matches = Matches(np.stack([points['x0'], points['y0']], axis=1),
                      np.stack([points['x1'], points['y1']], axis=1),
                      points['confidence'])
    return matches, stamp0_ns
