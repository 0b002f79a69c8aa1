# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Keep the newest input and process it off the executor thread.

A subscription callback hands its message to :meth:`FrameWorker.submit`, which only stores
it (replacing, and counting as dropped, an item the worker has not started yet) and returns.
A daemon thread takes the newest item and calls the processing callback; an exception is
logged (throttled) and counted, and the worker goes on with the next item, so one bad message
never stops a node. Processing times go into a :class:`RunningStats` for diagnostics.
"""

from __future__ import annotations

import math
import re
import threading
import time
from typing import Callable, Dict, Generic, Optional, Tuple

from relperception.data.input_counters import FRAMES_REPLACED
from relperception.pipeline.realtime import Item, LatestSlot, RunningStats


#: Numbers in a log line (stamps, sizes), ignored when telling reasons apart.
_NUMBERS = re.compile(r'-?\d+(\.\d+)?')
#: Distinct reasons whose last log time is kept (then forgotten all at once).
MAX_REASONS_KEPT = 64


class ReasonThrottle:
    """Throttle log lines per reason, not per call site.

    rclpy's ``throttle_duration_sec`` is kept per call site, so a second, different problem
    logged from the same line within the period is never seen; here lines that differ only
    in their numbers (stamps, sizes, counts) are one reason, and each reason has its own period.

    Args:
        period_s: minimum interval between two lines of the same reason (seconds).
    """

    def __init__(self, period_s: float = 1.0) -> None:
        self.period_s = float(period_s)
        self._logged_at: Dict[str, float] = {}
        self._lock = threading.Lock()

    def ready(self, text: str) -> bool:
        """Return whether ``text`` may be logged now (and note it as logged if so)."""
        reason = _NUMBERS.sub('#', text)
        now = time.monotonic()
        with self._lock:
            if now - self._logged_at.get(reason, -math.inf) < self.period_s:
                return False
            if len(self._logged_at) >= MAX_REASONS_KEPT:
                self._logged_at.clear()
            self._logged_at[reason] = now
            return True


class SkipFrame(Exception):
    """Raised by a processing callback to skip an item that is not an error (e.g. a duplicate).

    The worker logs the message (throttled) and counts the item as dropped, not as an error
    (with ``error``: as an error), and under ``reason`` too.

    Args:
        message: why, for the log.
        reason: counter name of why, one of
            :data:`relperception.data.input_counters.FRAME_SKIP_REASONS` (reported in
            ``/diagnostics``); None: counted only as dropped.
        error: count the item as failed (an error), not as dropped.
    """

    def __init__(self, message: str, reason: Optional[str] = None, error: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.error = error


class FrameWorker(Generic[Item]):
    """A daemon thread that processes the newest submitted item.

    Args:
        name: thread name, also used in log lines.
        process: callback run on the worker thread for each taken item. Raise
            :class:`SkipFrame` to skip an item (counted as dropped) or any other exception to
            report a failure (counted as an error); both are logged and the worker goes on.
        logger: logger with ``warning`` and ``error`` methods (an rclpy node logger or a
            ``logging.Logger``).
        stats: statistics to record arrivals, drops, errors and processing times in (a new
            :class:`RunningStats` if None); only this worker should count into it.
        poll_s: how often the idle worker checks for shutdown (seconds).
        log_throttle_s: minimum interval between two log lines of the same reason (seconds;
            lines that differ only in their numbers are one reason).
        capacity: how many unprocessed items are kept (1: only the newest; more: the newest
            ``capacity`` in arrival order, for inputs that are increments). Older ones are
            dropped and counted.
        clock_ns: the node's clock (``lambda: node.get_clock().now().nanoseconds``), read at
            each arrival so that :meth:`record_latency` tells a stamp on another clock from a
            slow frame whatever the clock's rate (sim time); None: judged from the latency.
    """

    def __init__(self, name: str, process: Callable[[Item], None], logger,
                 stats: Optional[RunningStats] = None, poll_s: float = 0.1,
                 log_throttle_s: float = 1.0, capacity: int = 1,
                 clock_ns: Optional[Callable[[], int]] = None) -> None:
        if not callable(process):
            raise ValueError('process must be callable')
        if not poll_s > 0:
            raise ValueError(f'poll_s must be > 0, got {poll_s}')
        self.name = name
        self.stats = stats if stats is not None else RunningStats()
        self._process = process
        self._logger = logger
        self._poll_s = float(poll_s)
        # Throttled per reason, not per call site (rclpy's throttle would hide a second,
        # different problem behind the first one for a whole period).
        self._throttle = ReasonThrottle(log_throttle_s)
        self._slot: LatestSlot[Item] = LatestSlot(capacity)
        self._clock_ns = clock_ns
        # receipt of the item in progress: monotonic seconds, node clock ns (or None)
        self._received_at: Tuple[float, Optional[int]] = (math.nan, None)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: Item) -> bool:
        """Hand ``item`` to the worker without blocking.

        Args:
            item: the newest input (e.g. a message); not None.

        Returns:
            True when an item the worker had not started was replaced (counted as dropped).
        """
        if item is None:
            raise ValueError('FrameWorker cannot take None')
        self.stats.record_arrival()
        on_clock = None if self._clock_ns is None else int(self._clock_ns())
        replaced = self._slot.put((item, (time.monotonic(), on_clock)))
        if replaced:
            self.stats.record_drop(reason=FRAMES_REPLACED)
        return replaced

    @property
    def idle(self) -> bool:
        """Whether every submitted item has been processed, dropped or reported as failed."""
        stats = self.stats.snapshot()
        return stats.received == stats.processed + stats.dropped + stats.errors

    @property
    def running(self) -> bool:
        """Whether the worker thread is alive."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop taking items and join the thread (waits for the item in progress).

        Items still waiting are never processed: they are counted as dropped, so every
        submitted item ends up processed, dropped or failed.

        Args:
            timeout: seconds to wait for the item in progress to finish.
        """
        self._slot.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        while self._slot.take(0) is not None:
            self.stats.record_drop()

    def record_latency(self, stamp_ns: int, now_ns: Optional[int] = None) -> None:
        """Record the latency of an output of the item in progress (call from ``process``).

        Args:
            stamp_ns: the input's header stamp (ns, on the node's clock if all is well).
            now_ns: the node's clock now, at publishing (ns); None: read from ``clock_ns``.

        Records ``now - stamp``, the steady time since the item was submitted and, with
        ``clock_ns``, the stamp's age on the node's clock when it arrived; see
        :meth:`relperception.pipeline.realtime.RunningStats.record_latency` for a stamp off
        the node's clock.
        """
        if now_ns is None:
            if self._clock_ns is None:
                raise ValueError('record_latency needs now_ns for a worker without clock_ns')
            now_ns = int(self._clock_ns())
        received_s, received_ns = self._received_at
        since_receipt_ms = 1e3 * (time.monotonic() - received_s)
        age_ms = None if received_ns is None else (received_ns - stamp_ns) / 1e6
        self.stats.record_latency((now_ns - stamp_ns) / 1e6, since_receipt_ms, age_ms)

    def _log(self, error: bool, text: str) -> None:
        """Log ``text`` unless the same reason (digits aside) was logged within the throttle."""
        if not self._throttle.ready(text):
            return
        # one call site per severity: rclpy refuses two severities from one line
        if error:
            self._logger.error(text)
        else:
            self._logger.warning(text)

    def _run(self) -> None:
        while not self._slot.closed:
            taken = self._slot.take(self._poll_s)
            if taken is None:
                continue
            item, self._received_at = taken
            start = time.perf_counter()
            try:
                self._process(item)
            except SkipFrame as skip:
                if skip.error:
                    self.stats.record_error(skip.reason)
                    self._log(True, f'{self.name}: frame failed: {skip}')
                else:
                    self.stats.record_drop(reason=skip.reason)
                    self._log(False, f'{self.name}: skipped a frame: {skip}')
            except Exception as error:  # noqa: B902 - the worker must survive any failure
                self.stats.record_error()
                self._log(True, f'{self.name}: frame failed: {type(error).__name__}: {error}')
            else:
                self.stats.record_processing(time.perf_counter() - start)
