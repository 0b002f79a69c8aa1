# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Real-time building blocks shared by the nodes, free of ROS so plain pytest covers them.

* :class:`LatestSlot` - a thread-safe single-item mailbox: the producer (a subscription
  callback) never blocks, a newer item replaces an unprocessed one and the replacement is
  counted as a drop; the consumer (a worker thread) blocks with a timeout.
* :class:`RunningStats` - bounded windows of arrival times, processing times and latencies
  plus counters, for diagnostics.
* :func:`diagnostic_report` - turns two consecutive :class:`StatsSnapshot` into a level, a
  message and the key/value pairs of a ``diagnostic_msgs/DiagnosticStatus``.
* :class:`VersionedConfig` - a configuration dict that one thread updates (parameter callbacks)
  while another applies it between frames.

Nothing here queues without bound: every window is a ``collections.deque(maxlen=...)``.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
import threading
import time
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Tuple, TypeVar

import numpy as np

Item = TypeVar('Item')

#: Diagnostic levels, as in ``diagnostic_msgs/DiagnosticStatus``.
LEVEL_OK = 0
LEVEL_WARN = 1
LEVEL_ERROR = 2


class LatestSlot(Generic[Item]):
    """Thread-safe mailbox that holds only the newest item(s).

    With ``capacity`` 1 (the default) it keeps only the newest item: a frame not yet processed
    is replaced by the next one. A larger ``capacity`` keeps the newest ``capacity`` items in
    arrival order and drops the oldest when full (for inputs that are increments, such as
    correspondences between consecutive frames, where every message carries motion). Either
    way it never blocks and never grows beyond ``capacity``.

    Args:
        capacity: the most items held (>= 1).

    Attributes:
        received: number of items put so far.
        dropped: number of items discarded before anyone took them.
    """

    def __init__(self, capacity: int = 1) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f'capacity must be an integer >= 1, got {capacity!r}')
        self._condition = threading.Condition()
        self._items: collections.deque = collections.deque(maxlen=capacity)
        self._closed = False
        self.capacity = capacity
        self.received = 0
        self.dropped = 0

    def put(self, item: Item) -> bool:
        """Store ``item``, discarding the oldest unprocessed one when full; never blocks.

        Args:
            item: anything (not None: ``take`` returns None for "nothing").

        Returns:
            True when an unprocessed item was discarded (a drop, counted in ``dropped``).

        Raises:
            ValueError: if ``item`` is None.
        """
        if item is None:
            raise ValueError('LatestSlot cannot hold None (take() uses None for "nothing")')
        with self._condition:
            replaced = len(self._items) == self.capacity
            self._items.append(item)
            self.received += 1
            if replaced:
                self.dropped += 1
            self._condition.notify()
        return replaced

    def take(self, timeout: Optional[float] = None) -> Optional[Item]:
        """Remove and return the oldest held item, waiting up to ``timeout`` seconds for one.

        Args:
            timeout: seconds to wait (None: until an item arrives or the slot is closed).

        Returns:
            The item, or None on timeout or once the slot is closed and empty.
        """
        with self._condition:
            if not self._items and not self._closed:
                self._condition.wait_for(lambda: bool(self._items) or self._closed, timeout)
            if not self._items:
                return None
            return self._items.popleft()

    def close(self) -> None:
        """Wake every waiting ``take``; later ``take`` calls return at once."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def pending(self) -> bool:
        """Whether an item waits to be taken."""
        return bool(self._items)


@dataclass(frozen=True)
class StatsSnapshot:
    """A consistent copy of :class:`RunningStats` at one moment.

    Attributes:
        time_s: monotonic clock reading of the snapshot (seconds).
        input_rate_hz: arrivals per second over the rate window (0.0 with < 2 arrivals).
        processing_ms_median: median processing time over the window (ms, NaN if none).
        processing_ms_p95: 95th percentile processing time (ms, NaN if none).
        latency_ms_median: median input stamp -> output publish latency (ms, NaN if none;
            stamps off the node's clock are left out, see ``stamps_off_clock``).
        latency_ms_p95: 95th percentile latency (ms, NaN if none).
        received: items received so far.
        processed: items processed successfully so far.
        dropped: items dropped so far (replaced before processing, or skipped as invalid).
        errors: items whose processing failed so far.
        last_arrival_s: monotonic time of the last arrival (None before the first).
        receipt_latency_ms_median: median message receipt -> output publish latency (ms,
            steady time: queueing and processing, whatever clock the stamps follow; NaN if
            none).
        receipt_latency_ms_p95: 95th percentile of it (ms, NaN if none).
        stamps_off_clock: outputs whose input stamp lay more than
            :data:`STAMP_CLOCK_TOLERANCE_S` from the node's clock at receipt (another clock:
            a camera's own, a bag replayed without sim time); their latency is not recorded.
        stamp_clock_offset_s: receipt time minus stamp of the last such output (seconds; NaN
            if none).
        reasons: ``{reason: count}`` of the dropped or failed items whose reason was given
            (e.g. ``frames_bad_stamp``), so far.
    """

    time_s: float
    input_rate_hz: float
    processing_ms_median: float
    processing_ms_p95: float
    latency_ms_median: float
    latency_ms_p95: float
    received: int
    processed: int
    dropped: int
    errors: int
    last_arrival_s: Optional[float]
    receipt_latency_ms_median: float = float('nan')
    receipt_latency_ms_p95: float = float('nan')
    stamps_off_clock: int = 0
    stamp_clock_offset_s: float = float('nan')
    reasons: Mapping[str, int] = field(default_factory=dict)


def _median_p95(values) -> Tuple[float, float]:
    if not values:
        return float('nan'), float('nan')
    array = np.fromiter(values, dtype=np.float64, count=len(values))
    median, p95 = np.percentile(array, [50.0, 95.0])
    return float(median), float(p95)


#: A stamp further than this (seconds, either way) from the node's clock when the message arrived
#: is on another clock (a camera's own, a bag replayed without sim time): transport takes far
#: less, and clocks synchronised over a network agree far better.
STAMP_CLOCK_TOLERANCE_S = 1.0


class RunningStats:
    """Bounded running statistics of a processing stage; every method is thread-safe.

    Args:
        window: number of recent processing times and latencies kept (>= 1).
        rate_window: number of recent arrival times used for the input rate (>= 2).
        clock: monotonic clock in seconds (injectable for tests).
    """

    def __init__(self, window: int = 100, rate_window: int = 30,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if int(window) < 1:
            raise ValueError(f'window must be >= 1, got {window}')
        if int(rate_window) < 2:
            raise ValueError(f'rate_window must be >= 2, got {rate_window}')
        self._lock = threading.Lock()
        self._clock = clock
        self._arrivals: collections.deque = collections.deque(maxlen=int(rate_window))
        self._processing_ms: collections.deque = collections.deque(maxlen=int(window))
        self._latency_ms: collections.deque = collections.deque(maxlen=int(window))
        self._receipt_latency_ms: collections.deque = collections.deque(maxlen=int(window))
        self.stamps_off_clock = 0
        self._stamp_clock_offset_s = float('nan')
        self.received = 0
        self.processed = 0
        self.dropped = 0
        self.errors = 0
        self._reasons: collections.Counter = collections.Counter()

    def record_arrival(self) -> None:
        """Count one received item and remember its arrival time for the input rate."""
        now = self._clock()
        with self._lock:
            self.received += 1
            self._arrivals.append(now)

    def record_drop(self, count: int = 1, reason: Optional[str] = None) -> None:
        """Count ``count`` dropped items (replaced by a newer one or skipped).

        Args:
            count: how many.
            reason: counter name of why (e.g. ``frames_bad_stamp``), reported by itself
                beside ``frames_dropped``; None: not told apart.
        """
        with self._lock:
            self.dropped += int(count)
            if reason:
                self._reasons[reason] += int(count)

    def record_error(self, reason: Optional[str] = None) -> None:
        """Count one item whose processing failed (``reason``: as in :meth:`record_drop`)."""
        with self._lock:
            self.errors += 1
            if reason:
                self._reasons[reason] += 1

    def record_processing(self, seconds: float) -> None:
        """Count one processed item that took ``seconds`` of processing time."""
        with self._lock:
            self.processed += 1
            self._processing_ms.append(1e3 * float(seconds))

    def record_latency(self, milliseconds: float, since_receipt_ms: Optional[float] = None,
                       age_at_receipt_ms: Optional[float] = None) -> None:
        """Record the latency of one output.

        Args:
            milliseconds: input stamp -> output publish, on the node's clock (ms).
            since_receipt_ms: message receipt -> output publish, steady time (ms); None: not
                known. With it, a stamp that lay more than :data:`STAMP_CLOCK_TOLERANCE_S` from
                the node's clock at receipt is counted in ``stamps_off_clock`` instead of being
                recorded as a latency.
            age_at_receipt_ms: the node's clock at receipt minus the stamp (ms), which tells
                that; None: taken as ``milliseconds - since_receipt_ms`` (true while the node's
                clock runs at the rate of steady time, not under sim time at another rate).
        """
        with self._lock:
            if since_receipt_ms is not None:
                self._receipt_latency_ms.append(float(since_receipt_ms))
                offset_s = (float(milliseconds) - float(since_receipt_ms) if age_at_receipt_ms
                            is None else float(age_at_receipt_ms)) / 1e3
                if not abs(offset_s) <= STAMP_CLOCK_TOLERANCE_S:
                    self.stamps_off_clock += 1
                    self._stamp_clock_offset_s = offset_s
                    return
            self._latency_ms.append(float(milliseconds))

    def input_rate_hz(self) -> float:
        """Return the arrival rate over the rate window in Hz (0.0 with fewer than 2 arrivals)."""
        with self._lock:
            arrivals = list(self._arrivals)
        if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
            return 0.0
        return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])

    def snapshot(self) -> StatsSnapshot:
        """Return a consistent copy of the counters and window statistics."""
        now = self._clock()
        with self._lock:
            processing = list(self._processing_ms)
            latency = list(self._latency_ms)
            receipt = list(self._receipt_latency_ms)
            off_clock, offset_s = self.stamps_off_clock, self._stamp_clock_offset_s
            counters = (self.received, self.processed, self.dropped, self.errors)
            reasons = dict(self._reasons)
            last = self._arrivals[-1] if self._arrivals else None
        processing_median, processing_p95 = _median_p95(processing)
        latency_median, latency_p95 = _median_p95(latency)
        receipt_median, receipt_p95 = _median_p95(receipt)
        return StatsSnapshot(
            time_s=now, input_rate_hz=self.input_rate_hz(),
            processing_ms_median=processing_median, processing_ms_p95=processing_p95,
            latency_ms_median=latency_median, latency_ms_p95=latency_p95,
            received=counters[0], processed=counters[1], dropped=counters[2],
            errors=counters[3], last_arrival_s=last, receipt_latency_ms_median=receipt_median,
            receipt_latency_ms_p95=receipt_p95, stamps_off_clock=off_clock,
            stamp_clock_offset_s=offset_s, reasons=reasons)

    @property
    def window_sizes(self) -> Tuple[int, int, int]:
        """Current lengths of the arrival, processing-time and latency windows."""
        with self._lock:
            return len(self._arrivals), len(self._processing_ms), len(self._latency_ms)


def _format(value: float) -> str:
    return 'nan' if not np.isfinite(value) else f'{value:.2f}'


def diagnostic_report(current: StatsSnapshot, previous: Optional[StatsSnapshot] = None,
                      stale_after_s: float = 2.0) -> Tuple[int, str, List[Tuple[str, str]]]:
    """Summarise a stage's health for a ``diagnostic_msgs/DiagnosticStatus``.

    The level is WARN when no input arrived for ``stale_after_s`` (or never), when frames were
    dropped or failed since ``previous``, or when outputs had input stamps off the node's clock
    since ``previous`` (their stamp latency is not measured; the message says by how much and
    the receipt latency stands); OK otherwise. The message then gives the new drops
    (failures) with the total since the start: ``'6 frames dropped since the last report, 8 in
    all'`` (only the total without ``previous``), and those of them whose reason was recorded
    by reason: ``'by reason: 4 frames_bad_stamp, 2 frames_replaced'``.

    Args:
        current: the newest snapshot.
        previous: the snapshot of the previous report (None: count since start).
        stale_after_s: seconds without input after which the stage is reported stale.

    Returns:
        ``(level, message, values)``: level ``LEVEL_OK`` or ``LEVEL_WARN``, a one-line message
        and ``(key, value)`` string pairs: input_rate_hz, processing_ms_median,
        processing_ms_p95, latency_ms_median, latency_ms_p95, receipt_latency_ms_median,
        receipt_latency_ms_p95, stamps_off_clock, stamp_clock_offset_s, frames_received,
        frames_processed, frames_dropped, errors, then one ``(reason, count)`` per reason
        of drops and failures met so far (:attr:`StatsSnapshot.reasons`, sorted).
    """
    dropped = current.dropped - (previous.dropped if previous else 0)
    errors = current.errors - (previous.errors if previous else 0)
    problems = []
    if current.last_arrival_s is None:
        problems.append('no input received')
    elif current.time_s - current.last_arrival_s > stale_after_s:
        problems.append(f'no input for {current.time_s - current.last_arrival_s:.1f} s')
    since = '' if previous is None else ' since the last report, {} in all'
    if dropped > 0:
        problems.append(f'{dropped} frames dropped' + since.format(current.dropped))
    if errors > 0:
        problems.append(f'{errors} errors' + since.format(current.errors))
    before = previous.reasons if previous else {}
    grown = {reason: count - before.get(reason, 0) for reason, count in current.reasons.items()
             if count > before.get(reason, 0)}
    if grown:
        problems.append('by reason: ' + ', '.join(f'{n} {reason}'
                                                  for reason, n in sorted(grown.items())))
    off_clock = current.stamps_off_clock - (previous.stamps_off_clock if previous else 0)
    if off_clock > 0:
        offset_s = current.stamp_clock_offset_s
        problems.append(
            f'{off_clock} input stamps {abs(offset_s):.3f} s '
            f'{"behind" if offset_s > 0 else "ahead of"} this node\'s clock (a camera or bag '
            'on another clock? use_sim_time?): latency from stamps not measured, see '
            'receipt_latency_ms')
    level = LEVEL_WARN if problems else LEVEL_OK
    message = '; '.join(problems) if problems else (
        f'{current.input_rate_hz:.1f} Hz, processing {_format(current.processing_ms_median)} ms')
    values = [
        ('input_rate_hz', _format(current.input_rate_hz)),
        ('processing_ms_median', _format(current.processing_ms_median)),
        ('processing_ms_p95', _format(current.processing_ms_p95)),
        ('latency_ms_median', _format(current.latency_ms_median)),
        ('latency_ms_p95', _format(current.latency_ms_p95)),
        ('receipt_latency_ms_median', _format(current.receipt_latency_ms_median)),
        ('receipt_latency_ms_p95', _format(current.receipt_latency_ms_p95)),
        ('stamps_off_clock', str(current.stamps_off_clock)),
        ('stamp_clock_offset_s', _format(current.stamp_clock_offset_s)),
        ('frames_received', str(current.received)),
        ('frames_processed', str(current.processed)),
        ('frames_dropped', str(current.dropped)),
        ('errors', str(current.errors)),
        *((reason, str(count)) for reason, count in sorted(current.reasons.items())),
    ]
    return level, message, values


class VersionedConfig:
    """A flat configuration dict updated by one thread and applied by another between frames.

    Args:
        config: the initial flat configuration (dotted parameter names -> values).
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._lock = threading.Lock()
        self._config: Dict[str, Any] = dict(config)
        self._version = 0

    def update(self, changes: Mapping[str, Any]) -> int:
        """Apply ``changes`` (name -> value) and return the new version number."""
        with self._lock:
            self._config.update(changes)
            self._version += 1
            return self._version

    def get(self) -> Tuple[Dict[str, Any], int]:
        """Return a copy of the configuration and its version number."""
        with self._lock:
            return dict(self._config), self._version

    @property
    def version(self) -> int:
        """Number of updates applied so far."""
        with self._lock:
            return self._version
