# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Spin an rclpy executor in a background thread and stop it without racing its shutdown."""

import threading
from typing import Optional

from rclpy.executors import SingleThreadedExecutor

#: seconds one ``spin_once`` waits for work before the thread looks at its stop flag again
SPIN_PERIOD_S = 0.1


class BackgroundSpin:
    """Spin ``executor`` in a daemon thread until :meth:`stop`.

    ``Executor.shutdown`` called from another thread while ``Executor.spin`` runs destroys the
    executor's guard condition under the spinning thread, which then fails in the middle of
    building its wait set (``AttributeError`` / ``InvalidHandle``, printed as an exception in
    the thread). Here the thread spins in ``spin_once`` steps of at most ``period_s`` and looks
    at a stop flag between them; :meth:`stop` sets the flag, joins the thread, and only then
    shuts the executor down. When :meth:`stop` returns True no callback of the executor runs
    any more, so its nodes can be destroyed.

    Only a ``SingleThreadedExecutor`` is accepted: its callbacks run in the spin thread. A
    ``MultiThreadedExecutor`` hands them to a thread pool that neither the spin thread nor
    rclpy's ``shutdown`` waits for: a callback still running there when the executor shuts down
    then fails to wake the executor through its destroyed guard condition (``InvalidHandle``),
    and the error is kept in a task nobody reads ("The following exception was never
    retrieved" when the interpreter exits).

    Args:
        executor: a ``SingleThreadedExecutor``, with its nodes added (more may be added while
            it spins).
        name: the thread's name (shown in logs and debuggers).
        period_s: longest wait of one ``spin_once`` in seconds (> 0); the stop latency.
    """

    def __init__(self, executor: SingleThreadedExecutor, name: str = 'relperception-executor',
                 period_s: float = SPIN_PERIOD_S):
        """Prepare the thread (not started).

        Raises:
            ValueError: ``executor`` is not a ``SingleThreadedExecutor``, or ``period_s`` <= 0.
        """
        if not isinstance(executor, SingleThreadedExecutor):
            raise ValueError('BackgroundSpin needs a SingleThreadedExecutor, got '
                             f'{type(executor).__name__}: its thread pool can still be running '
                             'callbacks after stop() has shut the executor down')
        if not period_s > 0:
            raise ValueError(f'period_s must be > 0 seconds, got {period_s}')
        self.executor = executor
        self.period_s = float(period_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name=name, daemon=True)

    def _spin(self) -> None:
        while not self._stop.is_set() and self.executor.context.ok():
            self.executor.spin_once(timeout_sec=self.period_s)

    def start(self) -> 'BackgroundSpin':
        """Start spinning; return ``self``."""
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """True while the spin thread runs."""
        return self._thread.is_alive()

    def stop(self, timeout_s: Optional[float] = 5.0) -> bool:
        """Stop spinning, then shut the executor down.

        Args:
            timeout_s: longest wait in seconds for the thread, then for the executor's
                shutdown (None: no limit).

        Returns:
            True when the thread ended and the executor shut down within ``timeout_s``.
        """
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        ended = not self._thread.is_alive()
        return self.executor.shutdown(timeout_sec=timeout_s) and ended
