# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Flood test: matcher_node fed 640x480 images at 3x its processing rate over real DDS.

Three processes, as on a robot: the node (``python -m relperception.nodes.matcher_node`` with
the remappings of :func:`relperception.nodes.graph.node_set`), an image publisher (this file
run as a script) and this test process, which watches ``correspondences`` and
``/diagnostics`` and samples the node's resident memory. The node and the publisher get the
packaged Fast DDS profile through ``FASTRTPS_DEFAULT_PROFILES_FILE`` in their environment;
the images are published from a child process because Fast DDS reads that variable once per
process, and this pytest process may have started DDS already in an earlier test.

The images lost BEFORE they reach the node's callback (DDS, or the keep-last-5 history of
the best-effort subscription overwritten while the executor is busy) are invisible to the
node: its ``frames_received`` counts only delivered messages. The test reports them as
``published - frames_received`` and checks only that the node never claims more than was
published; every frame the node did receive must be accounted for as processed, dropped
or failed.
"""

import argparse
import json
import os
from pathlib import Path
import signal
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('sensor_msgs')
DiagnosticArray = pytest.importorskip('diagnostic_msgs.msg').DiagnosticArray

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import qos_profile_sensor_data, QoSProfile  # noqa: E402
from relperception.config import defaults, section  # noqa: E402
from relperception.data.messages import ns_to_sec_nanosec, stamp_to_ns  # noqa: E402
from relperception.data.synthetic import iter_sequence  # noqa: E402
from relperception.imaging import numpy_to_image_fields, to_mono8  # noqa: E402
from relperception.matching import build_matcher  # noqa: E402
from relperception.nodes import graph  # noqa: E402
from relperception.nodes.background_spin import BackgroundSpin  # noqa: E402
from sensor_msgs.msg import Image, PointCloud2  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 640, 480
NUM_FRAMES = 10
FLOOD_FACTOR = 3.0
FLOOD_S = 20.0
WINDOW_S = 5.0
RSS_MARGIN_FRACTION = 0.15
RSS_MARGIN_BYTES = 30 * 2**20
BIG_WIDTH, BIG_HEIGHT = 8000, 6000    # one 144 MB rgb8 image
BIG_RSS_FRACTION = 0.20               # RSS after it: within 20 % of before


# --- the publisher (runs in a child process) -------------------------------------------------

def publish_images(frames_path, topic, rate_hz, duration_s, frame_id, summary_path,
                   insert_path=None, insert_at=-1):
    """Publish the stacked rgb8 frames of ``frames_path`` cyclically, stamped with now.

    Args:
        frames_path: ``.npy`` file holding an (N, H, W, 3) uint8 stack.
        topic: absolute image topic.
        rate_hz: publishing rate in Hz (the schedule never bursts to catch up).
        duration_s: seconds to publish after the node's subscription has matched.
        frame_id: ``header.frame_id`` of every image.
        summary_path: JSON file written at the end: published count, start and end wall
            times (integer ns) and whether a subscriber was matched.
        insert_path: optional ``.npy`` file of one (H, W, 3) uint8 image published, by the
            same writer, as message number ``insert_at`` (0-based) instead of a frame.

    Returns:
        0 when a subscriber matched, 1 otherwise.
    """
    stack = np.load(frames_path)
    os.environ.setdefault('AMENT_PREFIX_PATH', sys.prefix)
    context = rclpy.Context()
    rclpy.init(args=[], context=context)
    node = rclpy.create_node(f'flood_publisher_{uuid.uuid4().hex[:8]}', context=context)
    messages = []
    for rgb in stack:
        fields = numpy_to_image_fields(rgb, 'rgb8')
        msg = Image(height=fields['height'], width=fields['width'], encoding=fields['encoding'],
                    is_bigendian=fields['is_bigendian'], step=fields['step'],
                    data=fields['data'].tobytes())
        msg.header.frame_id = frame_id
        messages.append(msg)
    inserted = None
    if insert_path:
        fields = numpy_to_image_fields(np.load(insert_path), 'rgb8')
        inserted = Image(height=fields['height'], width=fields['width'],
                         encoding=fields['encoding'], is_bigendian=fields['is_bigendian'],
                         step=fields['step'], data=fields['data'].tobytes())
        inserted.header.frame_id = frame_id
        del fields
    publisher = node.create_publisher(Image, topic, qos_profile_sensor_data)
    summary = {'published': 0, 'start_ns': 0, 'end_ns': 0, 'matched': False}
    try:
        deadline = time.monotonic() + 30.0
        while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        summary['matched'] = publisher.get_subscription_count() > 0
        time.sleep(0.5)   # let the node's reader match our writer, too
        period_s = 1.0 / float(rate_hz)
        summary['start_ns'] = time.time_ns()
        start = next_time = time.monotonic()
        while summary['matched'] and time.monotonic() - start < duration_s:
            msg = messages[summary['published'] % len(messages)]
            if summary['published'] == insert_at and inserted is not None:
                msg = inserted
            msg.header.stamp.sec, msg.header.stamp.nanosec = ns_to_sec_nanosec(time.time_ns())
            publisher.publish(msg)
            summary['published'] += 1
            next_time += period_s
            now = time.monotonic()
            if next_time > now:
                time.sleep(next_time - now)
            elif now - next_time > period_s:
                next_time = now          # behind schedule: go on at the rate, no burst
        summary['end_ns'] = time.time_ns()
    finally:
        Path(summary_path).write_text(json.dumps(summary), encoding='utf-8')
        node.destroy_node()
        context.try_shutdown()
    return 0 if summary['matched'] else 1


# --- helpers ---------------------------------------------------------------------------------

def vm_rss_bytes(pid):
    """Return the resident set size of process ``pid`` in bytes (None once it is gone)."""
    try:
        for line in Path(f'/proc/{pid}/status').read_text().splitlines():
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def stop_process(process, sig=signal.SIGTERM, timeout=20.0):
    """Signal ``process``, kill it after ``timeout`` s; return its exit code."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10.0)
    return process.returncode


def child_environment(tmp_path):
    """Return the environment of the child processes: the packaged Fast DDS profile set."""
    environ = dict(os.environ, ROS_LOG_DIR=str(tmp_path / 'ros_log'),
                   AMENT_PREFIX_PATH=os.environ.get('AMENT_PREFIX_PATH', sys.prefix),
                   PYTHONUNBUFFERED='1')
    environ.pop(graph.FASTDDS_PROFILE_ENV_NEW, None)
    environ.update(graph.fastdds_environment(str(graph.fastdds_profile_path())))
    return environ


def start_matcher_node(tmp_path, namespace):
    """Start ``matcher_node`` in ``namespace`` as its own process (packaged Fast DDS profile).

    Returns:
        ``(environ, log file, process)``: the child environment (for the publishers too), the
        open log file (``tmp_path/matcher_node.log``) and the ``Popen``.
    """
    description = graph.node_set(image_topic=f'{namespace}/image',
                                 camera_info_topic=f'{namespace}/camera_info',
                                 namespace=namespace)[0]
    environ = child_environment(tmp_path)
    node_log = open(tmp_path / 'matcher_node.log', 'w', encoding='utf-8')
    process = subprocess.Popen(
        [sys.executable, '-m', 'relperception.nodes.matcher_node']
        + description.ros_arguments() + ['-r', f'__ns:={namespace}'],
        cwd=REPO_ROOT, env=environ, stdout=node_log, stderr=subprocess.STDOUT)
    return environ, node_log, process


def render_frames():
    """Render the flood's frames and time the matcher on consecutive pairs.

    Returns:
        ``(stack, processing_ms)``: (N, H, W, 3) uint8 frames and the median NCC time in ms.
    """
    _, sequence = iter_sequence(NUM_FRAMES, seed=11, width=WIDTH, height=HEIGHT)
    stack = np.stack([frame.rgb for frame in sequence])
    grays = [to_mono8(rgb, 'rgb8') for rgb in stack]
    matcher = build_matcher('ncc', section(defaults(), 'ncc'))
    times_ms = []
    for index in range(len(grays) - 1):
        start = time.perf_counter()
        matcher.match(grays[index], grays[index + 1])
        times_ms.append(1e3 * (time.perf_counter() - start))
    return stack, float(np.median(times_ms))


class Probe:
    """A node in this process recording correspondence stamps and the node's diagnostics."""

    def __init__(self, context, namespace, hardware_id):
        self.node = rclpy.create_node('flood_probe', context=context, namespace=namespace)
        self.hardware_id = hardware_id
        self.outputs = []          # (receipt wall time ns, header stamp ns)
        self.reports = []          # (receipt wall time ns, {key: value}, message)
        self._lock = threading.Lock()
        self.correspondences = self.node.create_subscription(
            PointCloud2, 'correspondences', self._on_cloud, QoSProfile(depth=10))
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diagnostics,
                                      QoSProfile(depth=10))
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self.spinner = BackgroundSpin(self.executor, name='flood-probe').start()

    def _on_cloud(self, msg):
        now = time.time_ns()
        with self._lock:
            self.outputs.append((now, stamp_to_ns(msg.header.stamp)))

    def _on_diagnostics(self, msg):
        now = time.time_ns()
        for status in msg.status:
            if status.hardware_id == self.hardware_id and status.name.endswith(': matching'):
                with self._lock:
                    self.reports.append(
                        (now, {v.key: v.value for v in status.values}, status.message))

    def snapshot(self):
        """Return copies of the outputs and reports recorded so far."""
        with self._lock:
            return list(self.outputs), list(self.reports)

    def close(self):
        """Stop spinning and destroy the node."""
        assert self.spinner.stop(5.0)
        self.node.destroy_node()


def latencies_ms(outputs, begin_ns, end_ns):
    """Return the latencies (ms) of outputs whose stamp lies in [begin_ns, end_ns)."""
    return np.array([(receipt - stamp) / 1e6 for receipt, stamp in outputs
                     if begin_ns <= stamp < end_ns])


# --- the test --------------------------------------------------------------------------------

class TestFlood:
    """The issue's flood test, on the shipped ``matcher_node`` executable."""

    @pytest.mark.slow
    def test_matcher_node_under_3x_flood(self, tmp_path):
        """Latency bounded, memory flat, every received frame accounted for, clean exit."""
        namespace = f'/test_flood_{uuid.uuid4().hex[:10]}'
        frame_id = f'flood_camera_{uuid.uuid4().hex[:8]}'
        environ, node_log, node_process = start_matcher_node(tmp_path, namespace)
        publisher_process = None
        context = rclpy.Context()
        rclpy.init(context=context)
        probe = None
        try:
            stack, processing_ms = render_frames()          # while the node starts
            rate_hz = FLOOD_FACTOR * 1e3 / processing_ms
            frames_path = tmp_path / 'frames.npy'
            np.save(frames_path, stack)
            del stack
            probe = Probe(context, namespace, frame_id)
            deadline = time.monotonic() + 30.0
            while (probe.correspondences.get_publisher_count() == 0
                   and time.monotonic() < deadline and node_process.poll() is None):
                time.sleep(0.05)
            assert probe.correspondences.get_publisher_count() > 0, (
                'matcher_node did not come up: '
                + (tmp_path / 'matcher_node.log').read_text()[-3000:])

            summary_path = tmp_path / 'publisher.json'
            publisher_process = subprocess.Popen(
                [sys.executable, __file__, '--frames', str(frames_path),
                 '--topic', f'{namespace}/image', '--rate', f'{rate_hz:.3f}',
                 '--duration', str(FLOOD_S), '--frame-id', frame_id,
                 '--summary', str(summary_path)],
                cwd=REPO_ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)
            rss_samples = []                                  # (wall time ns, bytes)
            deadline = time.monotonic() + FLOOD_S + 40.0
            while publisher_process.poll() is None and time.monotonic() < deadline:
                rss_samples.append((time.time_ns(), vm_rss_bytes(node_process.pid)))
                time.sleep(0.25)
            publisher_output, _ = publisher_process.communicate(timeout=10.0)
            assert publisher_process.returncode == 0, publisher_output[-3000:]
            summary = json.loads(summary_path.read_text(encoding='utf-8'))
            start_ns, end_ns = summary['start_ns'], summary['end_ns']

            # Wait until the node has finished the last frame and reported it: two reports
            # after the flood with the same counts.
            deadline = time.monotonic() + 10.0
            final = None
            while time.monotonic() < deadline and final is None:
                _, reports = probe.snapshot()
                late = [values for receipt, values, _ in reports
                        if receipt > end_ns + 0.5e9]
                if len(late) >= 2 and late[-1] == late[-2]:
                    final = late[-1]
                time.sleep(0.1)
            outputs, reports = probe.snapshot()
            node_alive = node_process.poll() is None
            node_rc = stop_process(node_process)
        finally:
            if publisher_process is not None and publisher_process.poll() is None:
                publisher_process.kill()
                publisher_process.wait(10.0)
            stop_process(node_process)
            node_log.close()
            if probe is not None:
                probe.close()
            context.try_shutdown()
        log = (tmp_path / 'matcher_node.log').read_text(encoding='utf-8')

        # figures
        published = summary['published']
        flood_s = (end_ns - start_ns) / 1e9
        first = latencies_ms(outputs, start_ns, start_ns + int(WINDOW_S * 1e9))
        last = latencies_ms(outputs, end_ns - int(WINDOW_S * 1e9), end_ns)
        during = [(t, rss) for t, rss in rss_samples if start_ns <= t <= end_ns and rss]
        assert during, f'no memory samples of the node during the flood: {rss_samples[-3:]}'
        rss_5s = next((rss for t, rss in during if t >= start_ns + WINDOW_S * 1e9), during[0][1])
        rss_end = during[-1][1]
        assert final is not None, f'no settled diagnostics after the flood: {reports[-3:]}'
        counts = {key: int(final[key]) for key in
                  ('frames_received', 'frames_processed', 'frames_dropped', 'errors')}
        figures = (
            f'R = {1e3 / processing_ms:.1f} Hz (NCC {processing_ms:.1f} ms), published '
            f'{published} in {flood_s:.1f} s ({published / flood_s:.1f} Hz); {counts}; lost '
            f'before the node: {published - counts["frames_received"]}; outputs '
            f'{len(outputs)}; latency median first 5 s {np.median(first):.1f} ms, last 5 s '
            f'{np.median(last):.1f} ms; node processing median '
            f'{final["processing_ms_median"]} ms; RSS {rss_5s / 2**20:.1f} MiB after 5 s, '
            f'{rss_end / 2**20:.1f} MiB at the end')
        print(figures)

        # (d) the node survived the flood and stopped cleanly on SIGTERM
        assert node_alive, log[-3000:]
        assert node_rc == 0, log[-3000:]
        assert 'Traceback' not in log, log[-3000:]
        # the flood was a flood: faster than the matcher, and more arrived than was processed
        assert published / flood_s > 1.5e3 / processing_ms, figures
        # (c) every frame the node received is accounted for, and drops are counted
        assert counts['frames_received'] <= published, figures
        assert counts['frames_received'] == (counts['frames_processed']
                                             + counts['frames_dropped'] + counts['errors'])
        assert counts['frames_dropped'] > 0 and counts['errors'] == 0, figures
        # each processed frame but the first gives one output (reliable, but keep-last 10)
        assert 0.9 * (counts['frames_processed'] - 1) <= len(outputs), figures
        assert len(outputs) <= counts['frames_processed'] - 1, figures
        # (a) no growing backlog: latency late in the flood is not above that early on
        node_processing_ms = max(processing_ms, float(final['processing_ms_median']))
        assert len(first) >= 10 and len(last) >= 10, figures
        assert np.median(last) <= np.median(first) + 2 * node_processing_ms + 20.0, figures
        assert np.median(last) < 5 * node_processing_ms + 50.0, figures
        assert np.median(first) < 5 * node_processing_ms + 50.0, figures
        # (b) memory does not grow
        assert rss_end - rss_5s <= max(RSS_MARGIN_FRACTION * rss_5s, RSS_MARGIN_BYTES), figures

    @pytest.mark.slow
    def test_oversized_image_is_accounted_for_and_released(self, tmp_path):
        """One 144 MB image among 640x480 ones: received or counted lost, memory released."""
        namespace = f'/test_big_{uuid.uuid4().hex[:10]}'
        frame_id = f'big_camera_{uuid.uuid4().hex[:8]}'
        environ, node_log, node_process = start_matcher_node(tmp_path, namespace)
        context = rclpy.Context()
        rclpy.init(context=context)
        probe = None

        summary_path = tmp_path / 'publisher.json'

        def settled_report():
            deadline = time.monotonic() + 15.0
            while time.monotonic() < deadline:
                _, reports = probe.snapshot()
                if len(reports) >= 2 and reports[-1][1] == reports[-2][1]:
                    return reports[-1][1]
                time.sleep(0.2)
            return reports[-1][1] if reports else {}

        try:
            stack, _ = render_frames()
            small_path, big_path = tmp_path / 'small.npy', tmp_path / 'big.npy'
            np.save(small_path, stack)
            big = np.zeros((BIG_HEIGHT, BIG_WIDTH, 3), np.uint8)
            big[::7, ::5] = 255
            np.save(big_path, big)
            del stack, big
            probe = Probe(context, namespace, frame_id)
            # one camera (one writer): 8 s of 640x480 at 10 Hz, the big image as message 80,
            # then 640x480 again; RSS sampled just before the big image and at the end
            publisher = subprocess.Popen(
                [sys.executable, __file__, '--frames', str(small_path),
                 '--topic', f'{namespace}/image', '--rate', '10', '--duration', '16',
                 '--frame-id', frame_id, '--summary', str(summary_path),
                 '--insert', str(big_path), '--insert-at', '80'],
                cwd=REPO_ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)
            rss_before = None
            while publisher.poll() is None:
                _, reports = probe.snapshot()
                if reports and int(reports[-1][1].get('frames_received', 0)) < 75:
                    rss_before = vm_rss_bytes(node_process.pid)
                time.sleep(0.25)
            output, _ = publisher.communicate(timeout=60)
            assert publisher.returncode == 0, output[-3000:]
            published = json.loads(summary_path.read_text(encoding='utf-8'))['published']
            final = settled_report()
            rss_after = vm_rss_bytes(node_process.pid)
            node_alive = node_process.poll() is None
        finally:
            stop_process(node_process)
            node_log.close()
            if probe is not None:
                probe.close()
            context.try_shutdown()
        log = (tmp_path / 'matcher_node.log').read_text(encoding='utf-8')
        received = int(final.get('frames_received', 0))
        lost = int(final.get('image_lost_in_transport', 0))
        figures = (f'published {published}, received {received}, lost in transport {lost}; '
                   f'RSS {rss_before / 2**20:.1f} MiB before the big image, '
                   f'{rss_after / 2**20:.1f} MiB after; node log tail: {log[-1500:]}')
        print(figures)
        assert node_alive, figures
        # nothing vanished silently: every image was received or counted lost in transport
        assert received + lost == published, figures
        if lost:
            assert 'lost in transport' in log, figures
        # the big image's buffers do not stay resident
        assert rss_after <= (1.0 + BIG_RSS_FRACTION) * rss_before, figures


def main(argv=None):
    """Run the image publisher of the flood test (``python test/test_flood.py --help``).

    Args:
        argv: command-line arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument('--frames', required=True)
    parser.add_argument('--topic', required=True)
    parser.add_argument('--rate', type=float, required=True)
    parser.add_argument('--duration', type=float, required=True)
    parser.add_argument('--frame-id', required=True)
    parser.add_argument('--summary', required=True)
    parser.add_argument('--insert', help='.npy file of one image published as message '
                                         'number --insert-at')
    parser.add_argument('--insert-at', type=int, default=-1)
    args = parser.parse_args(argv)
    return publish_images(args.frames, args.topic, args.rate, args.duration, args.frame_id,
                          args.summary, args.insert, args.insert_at)


if __name__ == '__main__':
    sys.exit(main())
