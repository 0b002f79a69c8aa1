# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The ``main`` of every node executable: init, spin one node, shut down cleanly."""

import signal
import threading
from typing import Callable, List, Optional

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
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
    second signal acts as it would without this function (Ctrl-C interrupts the clean-up).

    Args:
        node_factory: builds the node (called after ``rclpy.init``).
        args: command-line arguments for ``rclpy.init`` (None: ``sys.argv``).
    """
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop = threading.Event()
    previous_handlers = {}

    def request_stop(signum, _frame) -> None:
        stop.set()
        for each, handler in previous_handlers.items():
            signal.signal(each, handler)

    for signum in (signal.SIGINT, signal.SIGTERM):
        previous_handlers[signum] = signal.signal(signum, request_stop)
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
        try:
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)
            executor.shutdown()
            if node is not None:
                node.destroy_node()
        except KeyboardInterrupt:   # a second Ctrl-C during the clean-up: leave now
            pass
        rclpy.try_shutdown()
