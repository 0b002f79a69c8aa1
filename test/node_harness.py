# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Real-rclpy harness of the node tests: a node under test and a probe node in one executor.

Imported by the node test modules after they skipped cleanly without ``rclpy`` /
``sensor_msgs`` (``pytest.importorskip``), since it imports both. Every harness runs in its own
namespace, so tests in one process do not hear each other.
"""

import select
import subprocess
import time
import uuid

from conftest import wait_for
import rclpy
from rclpy.executors import SingleThreadedExecutor
from relperception.data.messages import camera_info_fields, ns_to_sec_nanosec
from relperception.imaging import numpy_to_image_fields
from relperception.nodes.background_spin import BackgroundSpin
from sensor_msgs.msg import CameraInfo, Image


def unique_namespace() -> str:
    """Return a namespace no other test uses, e.g. ``/test_1f3a9c0b2d``."""
    return f'/test_{uuid.uuid4().hex[:10]}'


def image_msg(rgb, stamp_ns: int, frame_id: str = 'camera') -> Image:
    """Return an ``rgb8`` ``sensor_msgs/Image`` of an (H, W, 3) uint8 array, stamped."""
    fields = numpy_to_image_fields(rgb, 'rgb8')
    msg = Image(height=fields['height'], width=fields['width'], encoding=fields['encoding'],
                is_bigendian=fields['is_bigendian'], step=fields['step'],
                data=fields['data'].tobytes())
    msg.header.stamp.sec, msg.header.stamp.nanosec = ns_to_sec_nanosec(stamp_ns)
    msg.header.frame_id = frame_id
    return msg


def camera_info_msg(camera, frame_id: str = 'camera') -> CameraInfo:
    """Return the ``sensor_msgs/CameraInfo`` of a ``relperception`` camera (stamp 0)."""
    fields = camera_info_fields(camera)
    msg = CameraInfo(height=fields['height'], width=fields['width'],
                     distortion_model=fields['distortion_model'], d=fields['d'].tolist(),
                     k=fields['k'], r=fields['r'], p=fields['p'])
    msg.header.frame_id = frame_id
    return msg


def settled_statuses(diagnostics, received: int) -> list:
    """Return the diagnostic statuses that account for all of ``received`` frames.

    A frame is counted as received when it arrives and as processed, dropped or an error only
    after the worker is done with it, so a report can fall in between; only reports where
    ``frames_processed + frames_dropped + errors == frames_received == received`` are kept.
    """
    def settled(values):
        counts = [int(values.get(k, 0)) for k in ('frames_processed', 'frames_dropped',
                                                  'errors')]
        return values.get('frames_received') == str(received) and sum(counts) == received

    return [s for array in diagnostics for s in array.status
            if settled({v.key: v.value for v in s.values})]


class NodeHarness:
    """``node_class`` under test and a ``probe`` node spinning in one SingleThreadedExecutor.

    Subclasses create the probe's publishers and subscriptions after ``__init__``, then call
    :meth:`start` with the condition under which the two are connected.

    Args:
        context: an initialised ``rclpy.Context`` (the ``context`` fixture).
        node_class: the node to test; built with ``context``, the namespace and ``overrides``.
        overrides: ``rclpy.parameter.Parameter`` overrides of the node.
        namespace: the namespace (default: a unique one).
    """

    def __init__(self, context, node_class, overrides=(), namespace=None):
        """Create the node under test and the probe node (not spinning yet)."""
        self.namespace = namespace or unique_namespace()
        self.node = node_class(context=context, namespace=self.namespace,
                               parameter_overrides=list(overrides))
        self.probe = rclpy.create_node('probe', context=context, namespace=self.namespace)
        self.executor = SingleThreadedExecutor(context=context)
        self.spinner = BackgroundSpin(self.executor, name='node-harness')

    def start(self, connected) -> None:
        """Spin both nodes in a thread; assert that ``connected()`` becomes true."""
        self.executor.add_node(self.node)
        self.executor.add_node(self.probe)
        self.spinner.start()
        assert wait_for(connected), 'the probe and the node under test did not connect'

    def publish_and_wait(self, publisher, msg, timeout: float = 10.0) -> None:
        """Publish ``msg`` and wait until the node's worker received it and is idle again."""
        stats = self.node.worker.stats
        before = stats.snapshot().received
        publisher.publish(msg)
        assert wait_for(lambda: stats.snapshot().received == before + 1), 'message lost'
        assert wait_for(lambda: self.node.worker.idle, timeout=timeout)

    @staticmethod
    def wait_exactly(received: list, count: int, what: str) -> None:
        """Wait for ``count`` messages in ``received``, then assert that no more arrive soon."""
        assert wait_for(lambda: len(received) >= count), f'{len(received)} {what}'
        time.sleep(0.05)
        assert len(received) == count

    def close(self) -> None:
        """Stop spinning, destroy both nodes and check that the node's worker stopped."""
        assert self.spinner.stop(5.0)
        self.node.destroy_node()
        self.probe.destroy_node()
        assert not self.node.worker.running


def signal_after_first_line(command: list, env: dict, signum: int, timeout_s: float = 30.0):
    """Start a node process, send it ``signum`` once it printed a line, wait for it to end.

    Returns:
        ``(first_line, returncode, output)``: the first printed line (stripped) and, after the
        signal, the exit code and the rest of stdout and stderr.
    """
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=env)
    try:
        ready, _, _ = select.select([process.stdout], [], [], timeout_s)
        assert ready, f'the node printed nothing in {timeout_s:g} s'
        line = process.stdout.readline().strip()
        process.send_signal(signum)
        output, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return line, process.returncode, output
