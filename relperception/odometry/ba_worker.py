# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The worker process that runs bundle adjustments off the per-frame path.

gtsam holds Python's global interpreter lock while it optimises, so a worker *thread* would
stall matching and tracking for the whole adjustment. One worker *process* per Python process
(started with ``spawn`` on first use, so it inherits no ROS or DDS threads) serves every
:class:`~relperception.odometry.map_tracker.MapTracker`; arrays travel by pickling, which is
small next to the optimisation.

``spawn`` normally re-imports the parent's ``__main__`` script in the child, which would run a
user's unguarded script a second time; the worker is started with an empty ``__main__`` in
place (the child needs nothing from it), so any script may use visual odometry.

When visual odometry runs inside a ``multiprocessing`` worker (``relperception compare``), that
process joins its children when it exits *before* ordinary exit handlers run; the worker is
therefore shut down by a ``multiprocessing`` finaliser, or the process would wait for it
forever.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import multiprocessing.util
import signal
import sys
import threading
import types

from relperception.odometry.bundle_adjustment import bundle_adjust

_lock = threading.Lock()
_executor: concurrent.futures.ProcessPoolExecutor | None = None


def _warm_up() -> bool:
    """Import the bundle-adjustment library in the worker; return whether it is there."""
    try:
        import gtsam  # noqa: F401
    except ImportError:
        return False
    return True


def _leave_interrupts_to_the_parent() -> None:
    """Ignore Ctrl-C in the worker: the parent gets it and shuts the worker down.

    (A SIGINT to the process group printed the worker's KeyboardInterrupt traceback.)
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _pool() -> concurrent.futures.ProcessPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            executor = concurrent.futures.ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context('spawn'),
                initializer=_leave_interrupts_to_the_parent)
            main = sys.modules.get('__main__')
            sys.modules['__main__'] = types.ModuleType('__main__')
            try:
                executor.submit(_warm_up)   # starts the process and imports gtsam there
            finally:
                if main is not None:
                    sys.modules['__main__'] = main
            _executor = executor
            # Runs before a multiprocessing child joins its children (see the docstring).
            multiprocessing.util.Finalize(None, _shut_down, exitpriority=100)
        return _executor


def _shut_down() -> None:
    """Stop the worker process (at exit)."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
    if executor is not None:
        executor.shutdown(wait=True, cancel_futures=True)


def start_worker() -> None:
    """Start the worker process now (it imports gtsam) instead of at the first call."""
    _pool()


def submit_bundle_adjustment(*args, **kwargs) -> concurrent.futures.Future:
    """Run :func:`~relperception.odometry.bundle_adjustment.bundle_adjust` in the worker.

    Returns a future of its result. A worker that died is replaced on the next call.
    """
    global _executor
    try:
        return _pool().submit(bundle_adjust, *args, **kwargs)
    except concurrent.futures.process.BrokenProcessPool:
        with _lock:
            _executor = None
        return _pool().submit(bundle_adjust, *args, **kwargs)
