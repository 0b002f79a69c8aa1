# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Subscribe to ``depth_in`` and look depth images up by stamp.

``depth_in`` is a ``sensor_msgs/Image`` (16UC1 / mono16 millimetres or 32FC1 metres,
registered to the colour image) or, with the read-only node-local parameter
``depth_transport: compressedDepth``, a ``sensor_msgs/CompressedImage`` on
``depth_in/compressedDepth`` as ``compressed_depth_image_transport`` writes it. The last
``depth_queue_size`` messages (read-only node-local parameter, default
:data:`DEPTH_CACHE_SIZE`) are kept (decoded only when looked up, on the worker) and found by
stamp, exact or nearest within a tolerance. :class:`DepthSync` counts the frames that found
their depth image and those that did not, logs once when RGB-D falls back to monocular and
once when depth is back, and reports the miss rate. Messages of a wrong encoding or size are
rejected at once; the others are checked when looked up
(:func:`~relperception.imaging.depth_checks.check_depth`: byte order, valid pixels, plausible
range). Every refusal is logged (throttled per problem) and counted by problem in
:attr:`DepthInput.problems`, which the node reports in its diagnostics.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from relperception.config import NODE_LOCAL_SPECS, ParameterSpec
from relperception.core_types import Camera
from relperception.data.input_counters import DEPTH_HITS, FRAMES_WITHOUT_DEPTH
from relperception.data.messages import stamp_to_ns
from relperception.imaging import check_depth, compressed_to_numpy, DepthCheck, image_to_numpy
from relperception.nodes.lost_messages import LostMessages
from relperception.nodes.overridable_qos import create_overridable_subscription
from relperception.nodes.parameters import declare_parameters
from relperception.nodes.processing import ReasonThrottle
from relperception.pipeline.realtime import LEVEL_OK, LEVEL_WARN
from sensor_msgs.msg import CompressedImage, Image

#: Node-local parameters (:data:`relperception.config.NODE_LOCAL_SPECS`).
DEPTH_TRANSPORT: ParameterSpec = NODE_LOCAL_SPECS['visual_odometry_node']['depth_transport']
DEPTH_QUEUE_SIZE: ParameterSpec = NODE_LOCAL_SPECS['visual_odometry_node']['depth_queue_size']
DEPTH_CACHE_SIZE: int = DEPTH_QUEUE_SIZE.default

_RAW_DEPTH_ENCODINGS = ('16UC1', 'mono16', '32FC1')


class _Refused(Exception):
    """A depth message refused on arrival, with its problem name."""

    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem = problem


class DepthCache:
    """Thread-safe bounded store of depth messages, looked up by stamp.

    Args:
        size: number of messages kept (oldest evicted).
    """

    def __init__(self, size: int = DEPTH_CACHE_SIZE) -> None:
        self._lock = threading.Condition()
        self._items: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._size = int(size)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def put(self, stamp_ns: int, item: Any) -> None:
        """Store ``item`` under ``stamp_ns`` (integer nanoseconds), evicting the oldest."""
        with self._lock:
            self._items[stamp_ns] = item
            self._items.move_to_end(stamp_ns)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
            self._lock.notify_all()

    def clear(self) -> None:
        """Forget every item."""
        with self._lock:
            self._items.clear()

    def nearest(self, stamp_ns: int, max_dt_ns: int, wait_s: float = 0.0) -> Optional[Any]:
        """Return the item with the stamp closest to ``stamp_ns`` within ``max_dt_ns``, or None.

        Args:
            stamp_ns: the stamp looked for.
            max_dt_ns: largest stamp difference accepted.
            wait_s: wait up to this long for such an item to arrive (the depth image of a
                frame may arrive after the colour image).
        """
        with self._lock:
            found = self._lock.wait_for(lambda: self._nearest(stamp_ns, max_dt_ns) is not None,
                                        timeout=wait_s) if wait_s > 0 else True
            return self._nearest(stamp_ns, max_dt_ns) if found else None

    def _nearest(self, stamp_ns: int, max_dt_ns: int) -> Optional[Any]:
        if stamp_ns in self._items:
            return self._items[stamp_ns]
        if not self._items:
            return None
        best = min(self._items, key=lambda stamp: abs(stamp - stamp_ns))
        return self._items[best] if abs(best - stamp_ns) <= max_dt_ns else None


class DepthInput:
    """The ``depth_in`` subscription of a node and its stamp lookup.

    Args:
        node: the subscribing node (``depth_transport`` is declared on it).
        camera: returns the camera of the latest valid ``camera_info`` (None before one), to
            reject depth of another size early.
        lost: counts the depth images lost in transport (as input ``depth``); None: not
            counted.
    """

    def __init__(self, node: Node, camera: Callable[[], Optional[Camera]],
                 lost: Optional[LostMessages] = None) -> None:
        specs = {spec.name: spec for spec in (DEPTH_TRANSPORT, DEPTH_QUEUE_SIZE)}
        declare_parameters(node, list(specs), specs=specs)
        self.transport = node.get_parameter(DEPTH_TRANSPORT.name).value
        self._node = node
        self._camera = camera
        self._cache = DepthCache(node.get_parameter(DEPTH_QUEUE_SIZE.name).value)
        #: depth messages received (any outcome).
        self.received = 0
        #: depth messages rejected on arrival (encoding or size).
        self.rejected = 0
        #: depth images refused, by :data:`~relperception.imaging.depth_checks.DEPTH_PROBLEMS`
        #: (on arrival or at lookup).
        self.problems: collections.Counter = collections.Counter()
        #: stamp (ns) of the newest depth message received, None before the first.
        self.newest_stamp_ns: Optional[int] = None
        # one period per problem: a second kind of bad depth is not hidden behind the first
        self._throttle = ReasonThrottle(1.0)
        events = None if lost is None else lost.callbacks('depth')
        if self.transport == 'compressedDepth':
            topic = node.resolve_topic_name('depth_in') + '/compressedDepth'
            self._subscription = create_overridable_subscription(
                node, CompressedImage, topic, self._on_depth, qos_profile_sensor_data,
                event_callbacks=events)
        else:
            self._subscription = create_overridable_subscription(
                node, Image, 'depth_in', self._on_depth, qos_profile_sensor_data,
                event_callbacks=events)

    def __len__(self) -> int:
        return len(self._cache)

    def clear(self) -> None:
        """Forget the cached depth images."""
        self._cache.clear()

    def _on_depth(self, msg) -> None:
        self.received += 1
        camera = self._camera()
        try:
            stamp_ns = stamp_to_ns(msg.header.stamp)
            # A compressed image's encoding and size are only known once decoded (on the
            # worker, at lookup).
            if not isinstance(msg, CompressedImage):
                self._check_raw(msg, camera)
        except (ValueError, _Refused) as error:
            self.rejected += 1
            self.problems[getattr(error, 'problem', 'undecodable')] += 1
            self._warn(f'skipping depth_in message: {error}')
            return
        self._store(stamp_ns, msg)

    @staticmethod
    def _check_raw(msg: Image, camera: Optional[Camera]) -> None:
        if msg.encoding not in _RAW_DEPTH_ENCODINGS:
            raise _Refused('undecodable', f'encoding {msg.encoding!r} is not 16UC1 (mm) '
                                          'or 32FC1 (m)')
        if camera is not None and (msg.width, msg.height) != (camera.width, camera.height):
            raise _Refused('wrong_size', f'depth is {msg.width}x{msg.height} but '
                                         f'camera_info says {camera.width}x{camera.height}')

    def _store(self, stamp_ns: int, msg) -> None:
        newest = self.newest_stamp_ns
        self.newest_stamp_ns = stamp_ns if newest is None else max(newest, stamp_ns)
        self._cache.put(stamp_ns, msg)

    def lookup(self, stamp_ns: int, camera: Camera, max_dt_ns: int,
               wait_s: float = 0.0) -> Optional[np.ndarray]:
        """Return the (H, W) float32 metres depth nearest ``stamp_ns``, or None.

        None when no depth lies within ``max_dt_ns`` (after waiting up to ``wait_s`` for it,
        once depth has been received at all) or the one found is refused by
        :func:`~relperception.imaging.depth_checks.check_depth` (logged, throttled, counted in
        :attr:`problems`).
        """
        wait_s = wait_s if self.newest_stamp_ns is not None else 0.0
        msg = self._cache.nearest(stamp_ns, max_dt_ns, wait_s)
        if msg is None:
            return None
        try:
            if isinstance(msg, CompressedImage):
                array, encoding = compressed_to_numpy(msg)
            else:
                array, encoding = image_to_numpy(msg), msg.encoding
        except ValueError as error:
            check = DepthCheck(None, 'undecodable', f'undecodable depth ({error})')
        else:
            check = check_depth(array, encoding, (camera.height, camera.width))
        if check.depth is None:
            self.problems[check.problem] += 1
            self._warn(
                f'depth image at {stamp_ns} ns refused ({check.problem}): {check.message}; '
                f'the frame runs without depth ({sum(self.problems.values())} refused so far)')
        return check.depth

    def _warn(self, text: str) -> None:
        """Log ``text`` as a warning, throttled per reason (numbers aside)."""
        if self._throttle.ready(text):
            self._node.get_logger().warning(text)


class DepthSync:
    """Whether each frame found its depth image: counts, fallback log lines, miss rate.

    Args:
        logger: the node's logger.
        max_miss_rate: a share of frames without depth above this, over one diagnostics
            period, is reported as WARN.
    """

    def __init__(self, logger, max_miss_rate: float) -> None:
        """Start with no frame counted."""
        self._logger = logger
        self.max_miss_rate = float(max_miss_rate)
        #: frames that found a usable depth image / that did not (while depth arrives).
        self.hits = 0
        self.misses = 0
        self._monocular = False
        self._misses_in_a_row = 0
        self._reported = (0, 0)

    def record(self, found: bool, stamp_ns: int, max_dt_s: float) -> None:
        """Count one frame processed while depth arrives; log a switch to or from monocular."""
        if found:
            self.hits += 1
            if self._monocular:
                self._logger.info(f'depth is back: RGB-D again after {self._misses_in_a_row} '
                                  f'frames without depth ({self.misses} in all)')
            self._monocular, self._misses_in_a_row = False, 0
            return
        self.misses += 1
        self._misses_in_a_row += 1
        if not self._monocular:
            self._logger.warning(
                f'no usable depth image within {max_dt_s * 1e3:.0f} ms of the frame at '
                f'{stamp_ns} ns: running monocular until depth is back (depth_max_dt_s, '
                'depth_wait_s; refused depth images are counted by problem)')
        self._monocular = True

    def report(self) -> Tuple[int, str, Dict[str, str]]:
        """Return ``(level, message, values)`` for the period since the last report."""
        hits, misses = self.hits - self._reported[0], self.misses - self._reported[1]
        self._reported = (self.hits, self.misses)
        rate = misses / (hits + misses) if hits + misses else 0.0
        values = {DEPTH_HITS: str(self.hits), FRAMES_WITHOUT_DEPTH: str(self.misses),
                  'depth_miss_rate': f'{rate:.3f}'}
        if rate > self.max_miss_rate:
            return (LEVEL_WARN, f'{rate:.0%} of the frames had no usable depth image (more '
                                f'than depth_max_miss_rate {self.max_miss_rate:.0%}): they run '
                                'monocular', values)
        return LEVEL_OK, '', values
