# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the real-time primitives (ROS-free): mailbox, statistics, worker thread."""

import logging
import threading
import time

from conftest import wait_for
import numpy as np
import pytest

from relperception.nodes.processing import FrameWorker, SkipFrame
from relperception.pipeline.realtime import (
    diagnostic_report,
    LatestSlot,
    LEVEL_OK,
    LEVEL_WARN,
    RunningStats,
    VersionedConfig,
)


class FakeClock:
    """A settable monotonic clock."""

    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


class TestLatestSlot:

    def test_smoke(self):
        slot = LatestSlot()
        assert slot.put('a') is False
        assert slot.pending
        assert slot.take(0.0) == 'a'
        assert not slot.pending
        assert (slot.received, slot.dropped) == (1, 0)

    def test_keeps_newest_and_counts_drops_exactly(self):
        slot = LatestSlot()
        results = [slot.put(i) for i in range(5)]
        assert results == [False, True, True, True, True]
        assert (slot.received, slot.dropped) == (5, 4)
        assert slot.take(0.0) == 4
        assert slot.take(0.0) is None
        assert slot.put(5) is False     # the slot was emptied: no drop
        assert slot.dropped == 4

    def test_take_timeout(self):
        slot = LatestSlot()
        start = time.monotonic()
        assert slot.take(0.05) is None
        assert time.monotonic() - start >= 0.045

    def test_take_wakes_on_put_and_close(self):
        slot = LatestSlot()
        taken = []
        consumer = threading.Thread(target=lambda: taken.append(slot.take(5.0)))
        consumer.start()
        time.sleep(0.02)
        slot.put('x')
        consumer.join(1.0)
        assert taken == ['x']
        consumer = threading.Thread(target=lambda: taken.append(slot.take(None)))
        consumer.start()
        time.sleep(0.02)
        start = time.monotonic()
        slot.close()
        consumer.join(1.0)
        assert not consumer.is_alive() and time.monotonic() - start < 0.5
        assert taken == ['x', None] and slot.closed

    def test_thread_safety_with_producer_thread(self):
        slot = LatestSlot()
        count = 20000
        done = threading.Event()

        def produce():
            for i in range(count):
                slot.put(i)
            done.set()

        producer = threading.Thread(target=produce)
        producer.start()
        taken = []
        while not (done.is_set() and not slot.pending):
            item = slot.take(0.01)
            if item is not None:
                taken.append(item)
        producer.join()
        assert taken[-1] == count - 1                 # the newest item is never lost
        assert np.all(np.diff(taken) > 0)              # order kept, nothing taken twice
        assert slot.received == count
        assert len(taken) + slot.dropped == count      # every item is taken or counted dropped

    def test_degenerate(self):
        with pytest.raises(ValueError, match='None'):
            LatestSlot().put(None)


class TestRunningStats:

    def test_input_rate(self):
        clock = FakeClock()
        stats = RunningStats(rate_window=10, clock=clock)
        assert stats.input_rate_hz() == 0.0
        for _ in range(50):
            stats.record_arrival()
            clock.now += 0.1
        assert stats.input_rate_hz() == pytest.approx(10.0)
        for _ in range(10):                    # the window forgets the old rate
            stats.record_arrival()
            clock.now += 0.04
        assert stats.input_rate_hz() == pytest.approx(25.0)

    def test_stamps_off_the_clock_are_counted_not_recorded(self):
        stats = RunningStats(clock=FakeClock())
        stats.record_latency(30.0, 20.0)             # 10 ms from stamp to receipt
        stats.record_latency(-2000.0, 20.0)          # a stamp 2 s in the future
        stats.record_latency(3.6e6 + 25.0, 25.0)     # an hour old: another clock
        snapshot = stats.snapshot()
        assert snapshot.latency_ms_median == pytest.approx(30.0)
        assert snapshot.receipt_latency_ms_median == pytest.approx(20.0)
        assert snapshot.stamps_off_clock == 2
        assert snapshot.stamp_clock_offset_s == pytest.approx(3600.0)
        level, message, values = diagnostic_report(snapshot)
        assert level == LEVEL_WARN and '2 input stamps 3600.000 s behind' in message
        assert dict(values)['stamps_off_clock'] == '2'

    def test_sim_time_at_another_rate_is_not_taken_for_another_clock(self):
        # replayed twice as fast: a 1.5 s frame is 3 s on the node's (sim) clock, but the
        # stamp was 10 ms old on that clock when it arrived
        stats = RunningStats(clock=FakeClock())
        stats.record_latency(3010.0, 1500.0, age_at_receipt_ms=10.0)
        snapshot = stats.snapshot()
        assert snapshot.stamps_off_clock == 0
        assert snapshot.latency_ms_median == pytest.approx(3010.0)
        stats.record_latency(3010.0, 1500.0, age_at_receipt_ms=3.6e6)
        assert stats.snapshot().stamps_off_clock == 1

    def test_windows_bounded_and_values_match_reference(self):
        rng = np.random.default_rng(0)
        stats = RunningStats(window=64, rate_window=8, clock=FakeClock())
        processing_s = rng.uniform(0.001, 0.05, 1000)
        latency_ms = rng.uniform(1.0, 100.0, 1000)
        for seconds, milliseconds in zip(processing_s, latency_ms):
            stats.record_arrival()
            stats.record_processing(seconds)
            stats.record_latency(milliseconds)
        assert stats.window_sizes == (8, 64, 64)
        snapshot = stats.snapshot()
        expected_processing = np.percentile(processing_s[-64:] * 1e3, [50, 95])
        expected_latency = np.percentile(latency_ms[-64:], [50, 95])
        assert snapshot.processing_ms_median == pytest.approx(expected_processing[0])
        assert snapshot.processing_ms_p95 == pytest.approx(expected_processing[1])
        assert snapshot.latency_ms_median == pytest.approx(expected_latency[0])
        assert snapshot.latency_ms_p95 == pytest.approx(expected_latency[1])
        assert (snapshot.received, snapshot.processed) == (1000, 1000)

    def test_counters(self):
        stats = RunningStats()
        stats.record_drop()
        stats.record_drop(3)
        stats.record_error()
        snapshot = stats.snapshot()
        assert (snapshot.dropped, snapshot.errors, snapshot.received) == (4, 1, 0)
        assert np.isnan(snapshot.processing_ms_median) and np.isnan(snapshot.latency_ms_p95)
        assert snapshot.last_arrival_s is None

    def test_degenerate(self):
        with pytest.raises(ValueError, match='window'):
            RunningStats(window=0)
        with pytest.raises(ValueError, match='rate_window'):
            RunningStats(rate_window=1)


class TestDiagnosticReport:

    def test_drops_and_errors_by_reason(self):
        stats = RunningStats()
        stats.record_arrival()
        stats.record_drop(reason='frames_bad_stamp')
        stats.record_drop()   # no reason given: only in frames_dropped
        first = stats.snapshot()
        stats.record_drop(2, reason='frames_bad_stamp')
        stats.record_error('frames_undecodable')
        level, message, values = diagnostic_report(stats.snapshot(), first)
        values = dict(values)
        assert (values['frames_dropped'], values['errors']) == ('4', '1')
        assert (values['frames_bad_stamp'], values['frames_undecodable']) == ('3', '1')
        assert level == LEVEL_WARN
        assert 'by reason: 2 frames_bad_stamp, 1 frames_undecodable' in message

    def test_levels(self):
        clock = FakeClock()
        stats = RunningStats(clock=clock)
        level, message, _ = diagnostic_report(stats.snapshot())
        assert level == LEVEL_WARN and 'no input' in message
        for _ in range(5):
            stats.record_arrival()
            stats.record_processing(0.01)
            clock.now += 0.1
        first = stats.snapshot()
        level, message, values = diagnostic_report(first)
        assert level == LEVEL_OK, message
        values = dict(values)
        assert values['frames_received'] == '5' and values['frames_processed'] == '5'
        assert float(values['input_rate_hz']) == pytest.approx(10.0)
        assert float(values['processing_ms_median']) == pytest.approx(10.0)
        assert set(values) == {'input_rate_hz', 'processing_ms_median', 'processing_ms_p95',
                               'latency_ms_median', 'latency_ms_p95',
                               'receipt_latency_ms_median', 'receipt_latency_ms_p95',
                               'stamps_off_clock', 'stamp_clock_offset_s', 'frames_received',
                               'frames_processed', 'frames_dropped', 'errors'}
        stats.record_arrival()
        stats.record_drop()
        second = stats.snapshot()
        level, message, values = diagnostic_report(second, first)
        assert level == LEVEL_WARN and '1 frames dropped' in message
        assert dict(values)['frames_dropped'] == '1'
        stats.record_arrival()
        level, message, _ = diagnostic_report(stats.snapshot(), second)   # no new drop
        assert level == LEVEL_OK, message
        clock.now += 3.0
        level, message, _ = diagnostic_report(stats.snapshot(), second, stale_after_s=2.0)
        assert level == LEVEL_WARN and 'no input for 3.0 s' in message


class TestVersionedConfig:

    def test_updates_from_threads(self):
        config = VersionedConfig({'a': 1})
        copy, version = config.get()
        copy['a'] = 2
        assert config.get() == ({'a': 1}, 0)
        threads = [threading.Thread(target=lambda i=i: [config.update({'a': i})
                                                        for _ in range(100)])
                   for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert config.version == 400


class TestFrameWorker:

    def test_processes_newest_and_survives_failures(self):
        processed = []
        gate = threading.Event()
        started = threading.Event()

        def process(item):
            if item == 'bad':
                raise RuntimeError('broken item')
            if item == 'skip':
                raise SkipFrame('duplicate')
            if item == 'block':
                started.set()
                gate.wait(5.0)
            processed.append(item)

        worker = FrameWorker('test worker', process, logging.getLogger('test_worker'))
        try:
            worker.submit('block')
            assert started.wait(5.0)
            assert worker.submit(1) is False
            assert worker.submit(2) is True      # 1 was never started: dropped
            gate.set()
            assert wait_for(lambda: worker.idle, timeout=5.0)
            assert processed == ['block', 2]
            for item in ('bad', 'skip', 3):
                worker.submit(item)
                assert wait_for(lambda: worker.idle, timeout=5.0)
            assert processed == ['block', 2, 3]
            snapshot = worker.stats.snapshot()
            assert (snapshot.received, snapshot.processed, snapshot.dropped,
                    snapshot.errors) == (6, 3, 2, 1)
            assert worker.running
        finally:
            worker.stop()
        assert not worker.running

    def test_each_reason_is_logged_and_repeats_are_throttled(self, caplog):
        def process(item):
            raise SkipFrame(item)

        worker = FrameWorker('w', process, logging.getLogger('test_reasons'),
                             log_throttle_s=60.0)
        try:
            with caplog.at_level(logging.WARNING, logger='test_reasons'):
                for item in ('stamp 5 ns is not after 7 ns', 'stamp 8 ns is not after 9 ns',
                             'undecodable image: encoding x', 'no valid camera_info'):
                    worker.submit(item)
                    assert wait_for(lambda: worker.idle, timeout=5.0)
        finally:
            worker.stop()
        logged = [r.getMessage() for r in caplog.records]
        # three reasons, each logged once (the second stamp line repeats the first's reason)
        assert logged == ['w: skipped a frame: stamp 5 ns is not after 7 ns',
                          'w: skipped a frame: undecodable image: encoding x',
                          'w: skipped a frame: no valid camera_info']
        assert worker.stats.snapshot().dropped == 4

    def test_degenerate(self):
        with pytest.raises(ValueError, match='callable'):
            FrameWorker('w', None, logging.getLogger('w'))
        with pytest.raises(ValueError, match='poll_s'):
            FrameWorker('w', print, logging.getLogger('w'), poll_s=0)


class TestLatestSlotCapacity:

    def test_keeps_newest_in_arrival_order_and_counts_drops(self):
        slot = LatestSlot(capacity=3)
        replaced = [slot.put(i) for i in range(5)]
        assert replaced == [False, False, False, True, True]
        assert slot.dropped == 2 and slot.received == 5
        assert [slot.take(timeout=0) for _ in range(4)] == [2, 3, 4, None]

    def test_bad_capacity(self):
        for capacity in (0, -1, 1.5, True):
            with pytest.raises(ValueError):
                LatestSlot(capacity=capacity)
