# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""relperception.nodes.entrypoint: a node executable stops cleanly on SIGINT / SIGTERM."""

import os
import signal
import sys

import pytest

pytest.importorskip('rclpy')
pytest.importorskip('std_msgs')

from node_harness import signal_after_first_line, unique_namespace  # noqa: E402, I100, I202

# A node whose worker is in the middle of a frame when the signal arrives, and publishes the
# frame's result when it is done (as the real nodes do).
SLOW_NODE = """
import sys
import time
from rclpy.node import Node
from relperception.nodes.entrypoint import spin_node
from relperception.nodes.processing import FrameWorker
from std_msgs.msg import String


class SlowNode(Node):
    def __init__(self):
        super().__init__('slow_node')
        self.publisher = self.create_publisher(String, 'out', 1)
        self.worker = FrameWorker('slow_node work', self.process, self.get_logger())
        self.worker.submit('frame')

    def process(self, item):
        print('processing', flush=True)
        time.sleep(1.0)   # the signal arrives meanwhile
        self.publisher.publish(String(data=item))
        print('published', flush=True)

    def destroy_node(self):
        self.worker.stop()
        super().destroy_node()


spin_node(SlowNode, sys.argv)
"""


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_frame_lets_the_frame_finish(tmp_path, signum):
    env = dict(os.environ, ROS_LOG_DIR=str(tmp_path))
    line, returncode, output = signal_after_first_line(
        [sys.executable, '-c', SLOW_NODE, '--ros-args', '-r', f'__ns:={unique_namespace()}'],
        env, signum)
    assert line == 'processing', line
    # the node is destroyed after its worker finished the frame, while DDS still runs: the
    # result is published, not "frame failed: RCLError: ... context is invalid"
    assert returncode == 0, output
    assert 'published' in output, output
    assert 'frame failed' not in output and 'Traceback' not in output, output
