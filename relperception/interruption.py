# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""SIGTERM as an exception, so that long runs can stop cleanly and keep what they computed.

``relperception`` (the CLI) installs :func:`raise_on_sigterm` around a verb; jobs such as the
offline evaluation catch :data:`INTERRUPTIONS`, write their results marked incomplete, and
re-raise. Nothing is installed on import.
"""

from __future__ import annotations

import signal
import threading


class Terminated(BaseException):  # noqa: N818 (named like KeyboardInterrupt)
    """SIGTERM arrived (raised in the main thread by :func:`raise_on_sigterm`'s handler).

    A ``BaseException``, like ``KeyboardInterrupt``: the ``except Exception`` that keeps a
    damaged bag's readable part (e.g. in the bag reader) must not take it for a read failure
    and carry on.
    """


#: What an interrupted run raises: Ctrl-C (SIGINT) and SIGTERM.
INTERRUPTIONS = (KeyboardInterrupt, Terminated)


def interruption_reason(error: BaseException) -> str:
    """Return 'interrupted (SIGINT)' or 'terminated (SIGTERM)' for an interruption."""
    return 'terminated (SIGTERM)' if isinstance(error, Terminated) else 'interrupted (SIGINT)'


def raise_on_sigterm():
    """Make SIGTERM raise :class:`Terminated` in the main thread.

    Returns:
        the previous handler (restore it with ``signal.signal(signal.SIGTERM, previous)``),
        or None when called outside the main thread (nothing is installed then).
    """
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise Terminated()

    return signal.signal(signal.SIGTERM, handler)
