# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The ``main`` of every node executable: init, spin one node, shut down cleanly."""

import multiprocessing
import os
import signal
import sys
import threading
from typing import Callable, List, Optional

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
import rclpy.logging
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from relperception.nodes.background_spin import SPIN_PERIOD_S


def spin_node(node_factory: Callable[[], Node], args: Optional[List[str]] = None) -> None:
    """Run the node made by ``node_factory`` until Ctrl-C / SIGTERM, then clean up.

    A single-threaded executor on purpose: the callbacks only hand messages to the nodes'
    worker threads, and rclpy's ``MultiThreadedExecutor`` spinning under a 3x image flood held
    the GIL so much that matching starved (test/test_flood.py: latency 55 -> 370 ms).

    The first SIGINT / SIGTERM stops spinning; the node is then destroyed (its worker finishes
    the frame in progress and publishes it) before ROS shuts down. rclpy's own signal handler
    would shut the context down first, and the frame in progress would fail to publish. A
    second signal, during the clean-up or while the process exits (joining the
    bundle-adjustment worker), leaves at once (:func:`leave_now`): one log line, the
    ``multiprocessing`` children terminated, exit code 128 + the signal (130 for Ctrl-C, 143
    for SIGTERM), no traceback. The handlers stay installed until the process exits.

    Args:
        node_factory: builds the node (called after ``rclpy.init``).
        args: command-line arguments for ``rclpy.init`` (None: ``sys.argv``).
    """
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()

    def on_signal(signum, _frame) -> None:
        if stop.is_set():
            leave_now(signum)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    node = None
    executor = SingleThreadedExecutor()
    try:
        node = node_factory()
        executor.add_node(node)
        while not stop.is_set():
            executor.spin_once(timeout_sec=SPIN_PERIOD_S)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        stop.set()   # from here on, a signal is a second one
        executor.shutdown()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()


def leave_now(signum: int) -> None:
    """Exit at once with code ``128 + signum``, after one log line; never returns.

    The child processes (the bundle-adjustment worker, which ignores Ctrl-C) get SIGTERM
    first, so none is left behind.
    """
    rclpy.logging.get_logger('relperception').warning(
        f'second {signal.Signals(signum).name}: leaving now without finishing the clean-up')
    for pid in child_pids():
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:   # gone meanwhile
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe: nothing more can be said
            pass
    os._exit(128 + signum)


def child_pids() -> List[int]:
    """Return the process ids of this process's children.

    From ``/proc`` where there is one: ``multiprocessing`` forgets its children once its exit
    handler ran, and a signal may come later, while the process exits. Else the children
    ``multiprocessing`` knows.
    """
    pids = {child.pid for child in multiprocessing.active_children() if child.pid}
    own = os.getpid()
    try:
        entries = [entry for entry in os.listdir('/proc') if entry.isdigit()]
    except OSError:
        return sorted(pids)
    for entry in entries:
        try:
            with open(f'/proc/{entry}/stat', 'rb') as stream:
                stat = stream.read()
        except OSError:   # gone meanwhile, or not ours to read
            continue
        # pid (command) state ppid ...: the command may hold spaces and parentheses
        fields = stat[stat.rfind(b')') + 2:].split()
        if len(fields) > 1 and fields[1] == str(own).encode():
            pids.add(int(entry))
    return sorted(pids)
