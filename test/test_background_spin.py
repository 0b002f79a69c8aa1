# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""relperception.nodes.background_spin: spins, stops, and never fails in its thread on stop."""

import threading
import time

from conftest import wait_for
import pytest

rclpy = pytest.importorskip('rclpy')

from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor  # noqa: E402
from relperception.nodes.background_spin import BackgroundSpin  # noqa: E402

STOPS = 400


@pytest.fixture
def thread_exceptions():
    """Collect exceptions that end any thread during the test (threading.excepthook)."""
    caught = []
    previous = threading.excepthook
    threading.excepthook = caught.append
    yield caught
    threading.excepthook = previous


def test_callbacks_run_until_stop(context):
    node = rclpy.create_node('spin_probe', context=context)
    ticks = []
    node.create_timer(0.01, lambda: ticks.append(time.monotonic()))
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = BackgroundSpin(executor, name='spin-test').start()
    try:
        assert wait_for(lambda: len(ticks) >= 5)
        assert spinner.running
    finally:
        assert spinner.stop(5.0)
        node.destroy_node()
    assert not spinner.running
    count = len(ticks)
    time.sleep(0.1)
    assert len(ticks) == count


def test_stopping_while_busy_raises_nothing_in_the_thread(context, thread_exceptions):
    # Executor.shutdown from another thread during Executor.spin destroys the guard condition
    # the spinning thread is putting into its wait set; stopping here must never do that. Nor
    # may a callback run once stop() has returned, when the node is destroyed
    late = 0
    for index in range(STOPS):
        node = rclpy.create_node(f'spin_stop_{index}', context=context)
        calls = []
        node.create_timer(0.0005, lambda calls=calls: calls.append(None))
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        spinner = BackgroundSpin(executor, period_s=0.001).start()
        time.sleep(0.0002 * (index % 7))
        assert spinner.stop(5.0)
        count = len(calls)
        time.sleep(0.002)
        late += len(calls) != count
        node.destroy_node()
    assert thread_exceptions == []
    assert late == 0, f'callbacks ran after stop() in {late} of {STOPS} stops'


def test_a_thread_pool_executor_is_refused(context):
    # in 400 stops as above, a MultiThreadedExecutor's pool finished callbacks after
    # the executor's shutdown; each failed on its destroyed guard condition, an InvalidHandle
    # kept in a task nobody reads, printed as "never retrieved" when the interpreter exits
    executor = MultiThreadedExecutor(num_threads=2, context=context)
    try:
        with pytest.raises(ValueError, match='SingleThreadedExecutor, got MultiThreadedExecutor'):
            BackgroundSpin(executor)
    finally:
        executor.shutdown()


def test_stop_before_start_shuts_the_executor_down(context):
    executor = SingleThreadedExecutor(context=context)
    spinner = BackgroundSpin(executor)
    assert spinner.stop(1.0)
    assert not spinner.running


@pytest.mark.parametrize('period_s', [0.0, -1.0])
def test_period_must_be_positive(context, period_s):
    with pytest.raises(ValueError, match='period_s'):
        BackgroundSpin(SingleThreadedExecutor(context=context), period_s=period_s)
