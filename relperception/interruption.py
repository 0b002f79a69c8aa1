# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""SIGTERM as an exception, so that long runs can stop cleanly and keep what they computed.

``relperception`` (the CLI) installs :func:`raise_on_sigterm` around a verb; jobs such as the
offline evaluation catch :data:`INTERRUPTIONS`, write their results marked incomplete, and
re-raise. Nothing is installed on import.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import logging
import signal
import threading
from typing import Optional

logger = logging.getLogger(__name__)


class Terminated(BaseException):  # noqa: N818 (named like KeyboardInterrupt)
    """SIGTERM arrived (raised in the main thread by :func:`raise_on_sigterm`'s handler).

    A ``BaseException``, like ``KeyboardInterrupt``: the ``except Exception`` that keeps a
    damaged bag's readable part (e.g. in the bag reader) must not take it for a read failure
    and carry on.
    """


#: What an interrupted run raises: Ctrl-C (SIGINT) and SIGTERM.
INTERRUPTIONS = (KeyboardInterrupt, Terminated)


_REASONS = {signal.SIGINT: 'interrupted (SIGINT)', signal.SIGTERM: 'terminated (SIGTERM)'}


def interruption_reason(error: BaseException) -> str:
    """Return 'interrupted (SIGINT)' or 'terminated (SIGTERM)' for an interruption."""
    return _REASONS[signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT]


def interruption_error(reason: str) -> BaseException:
    """Return the exception an interruption of ``reason`` raises (see :func:`interruption_reason`).

    Raises:
        ValueError: for a reason :func:`interruption_reason` never returns.
    """
    if reason == _REASONS[signal.SIGINT]:
        return KeyboardInterrupt()
    if reason == _REASONS[signal.SIGTERM]:
        return Terminated()
    raise ValueError(f'unknown interruption reason {reason!r}; expected one of '
                     f'{sorted(_REASONS.values())}')


class PendingInterruption:
    """What :func:`deferred_interruptions` recorded: the reason of the first signal, if any."""

    def __init__(self) -> None:
        """Start with nothing recorded."""
        self.reason: Optional[str] = None


@contextlib.contextmanager
def deferred_interruptions() -> Iterator[PendingInterruption]:
    """Record the first SIGINT or SIGTERM in the block instead of raising it.

    For loops whose state must not be cut in the middle of a step (an optimiser step): the loop
    checks ``pending.reason`` between steps, stops, saves and then raises
    ``interruption_error(pending.reason)``. A second signal raises at once. The previous
    handlers come back when the block ends. Outside the main thread nothing is installed and
    signals behave as before.

    Yields:
        the :class:`PendingInterruption` the handler fills.
    """
    pending = PendingInterruption()
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return

    def handler(signum, frame):
        if pending.reason is not None:
            raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
        pending.reason = _REASONS[signal.Signals(signum)]
        logger.warning('%s: stopping after the current step and saving (signal again to stop '
                       'at once)', pending.reason)

    previous = {signum: signal.signal(signum, handler) for signum in _REASONS}
    try:
        yield pending
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


#: Set by :func:`raise_on_sigterm`'s handler: SIGTERM arrived, whatever became of the
#: exception (one raised inside an import surfaces as an ImportError).
_SIGTERM_RECEIVED = threading.Event()


def sigterm_received() -> bool:
    """Return whether SIGTERM arrived since :func:`raise_on_sigterm` was last called.

    Both :func:`raise_on_sigterm`'s and :func:`exit_on_sigterm`'s handlers record it.
    """
    return _SIGTERM_RECEIVED.is_set()


def raise_on_sigterm():
    """Make SIGTERM raise :class:`Terminated` in the main thread.

    Returns:
        the previous handler (restore it with ``signal.signal(signal.SIGTERM, previous)``),
        or None when called outside the main thread (nothing is installed then).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    _SIGTERM_RECEIVED.clear()

    def handler(signum, frame):
        _SIGTERM_RECEIVED.set()
        raise Terminated()

    return signal.signal(signal.SIGTERM, handler)


def exit_on_sigterm():
    """Make SIGTERM end the process: ``SystemExit(128 + SIGTERM)`` in the main thread.

    For a worker process between jobs (exit handlers run, no traceback). The handler records
    the signal for :func:`sigterm_received` first: a pool's worker loop can take the
    ``SystemExit`` for a job's result and go on, and the next job then sees that SIGTERM came.
    Unlike :func:`raise_on_sigterm`, an earlier record is not cleared.

    Returns:
        the previous handler, or None when called outside the main thread (nothing is
        installed then).
    """
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        _SIGTERM_RECEIVED.set()
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, handler)
