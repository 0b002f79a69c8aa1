# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The ``main`` of every node executable: init, spin one node, shut down cleanly."""

from typing import Callable, List, Optional

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node


def spin_node(node_factory: Callable[[], Node], args: Optional[List[str]] = None) -> None:
    """Run the node made by ``node_factory`` until Ctrl-C / SIGTERM, then clean up.

    A single-threaded executor on purpose: the callbacks only hand messages to the nodes'
    worker threads, and rclpy's ``MultiThreadedExecutor`` spinning under a 3x image flood held
    the GIL so much that matching starved (test/test_flood.py: latency 55 -> 370 ms).

    Args:
        node_factory: builds the node (called after ``rclpy.init``).
        args: command-line arguments for ``rclpy.init`` (None: ``sys.argv``).
    """
    rclpy.init(args=args)
    node = None
    executor = SingleThreadedExecutor()
    try:
        node = node_factory()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RuntimeError:
        # rclpy's SIGINT handler can shut the context down while the executor builds its wait
        # set ("the given context is not valid"): a clean stop, not a failure.
        if rclpy.ok():
            raise
    finally:
        executor.shutdown()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
