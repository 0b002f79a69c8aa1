# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""relperception.nodes.entrypoint: a node executable stops cleanly on SIGINT / SIGTERM."""

import os
import signal
import subprocess
import sys
import time

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


# A node whose clean-up (destroy_node) or exit (an atexit handler, as the bundle-adjustment
# worker's join) takes long, with a multiprocessing child that ignores Ctrl-C (as that worker).
STUCK_NODE = """
import atexit
import multiprocessing
import signal
import sys
import time
from rclpy.node import Node
from relperception.nodes.entrypoint import spin_node


def ignoring_ctrl_c():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(60)


def slow_exit():
    print('exiting', flush=True)
    time.sleep(20)


class StuckNode(Node):
    def __init__(self):
        super().__init__('stuck_node')
        self.child = multiprocessing.get_context('spawn').Process(target=ignoring_ctrl_c)
        self.child.start()
        atexit.register(slow_exit)   # runs before multiprocessing joins the child
        print('child', self.child.pid, flush=True)

    def destroy_node(self):
        if sys.argv[1] == 'destroy':
            print('destroying', flush=True)
            time.sleep(20)
        super().destroy_node()


if __name__ == '__main__':
    spin_node(StuckNode, sys.argv[2:])
"""


@pytest.mark.parametrize('where', ['destroy', 'exit'])
@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_leaves_at_once_without_a_traceback(tmp_path, where, signum):
    script = tmp_path / 'stuck_node.py'
    script.write_text(STUCK_NODE)
    process = subprocess.Popen(
        [sys.executable, str(script), where, '--ros-args', '-r', f'__ns:={unique_namespace()}'],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, ROS_LOG_DIR=str(tmp_path)))
    try:
        child = int(process.stdout.readline().split()[1])
        process.send_signal(signum)
        waited_for = 'destroying' if where == 'destroy' else 'exiting'
        assert process.stdout.readline().strip() == waited_for
        process.send_signal(signum)
        output, _ = process.communicate(timeout=10)   # not the 20 s of the clean-up
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 128 + signum, output
    assert 'Traceback' not in output and 'KeyboardInterrupt' not in output, output
    assert f'second {signal.Signals(signum).name}: leaving now' in output, output
    with pytest.raises(ProcessLookupError):   # the child is gone (or a zombie of init's)
        for _ in range(100):
            os.kill(child, 0)
            time.sleep(0.05)
