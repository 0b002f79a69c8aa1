# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Count best-effort camera images that survive the trip between two processes (Fast DDS).

Two separate processes on this machine: one publishes ``sensor_msgs/Image`` 640x480 rgb8
(~0.9 MB) best-effort at 30 Hz for 5 s, the other counts what arrives. Run once with Fast DDS
defaults and once with ``FASTRTPS_DEFAULT_PROFILES_FILE`` = ``config/fastdds_profile.xml``
(shared memory with a 16 MiB segment, UDPv4 with 4 MiB buffers), and print received / sent
for both, so the result is a ratio measured in one run, not an absolute number. A third run
uses the profile with its UDPv4 transport only (shared memory removed), as between a robot and
a workstation, here over the loopback interface.

Usage::

    AMENT_PREFIX_PATH=.venv .venv/bin/python bench/dds_transport.py [--seconds 5] [--rate 30]
"""

import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import time
import uuid

PROFILE = Path(__file__).resolve().parents[1] / 'config' / 'fastdds_profile.xml'
PROFILE_VARIABLES = ('FASTRTPS_DEFAULT_PROFILES_FILE', 'FASTDDS_DEFAULT_PROFILES_FILE')


def _best_effort_qos():
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5,
                      reliability=ReliabilityPolicy.BEST_EFFORT)


def publish(topic, seconds, rate_hz, width, height, discovery_timeout_s):
    """Publish rgb8 images on ``topic`` once a subscriber is matched; print the sent count."""
    import numpy as np
    import rclpy
    from sensor_msgs.msg import Image

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('dds_bench_publisher', context=context)
    publisher = node.create_publisher(Image, topic, _best_effort_qos())
    pixels = np.random.default_rng(0).integers(0, 255, (height, width, 3), np.uint8)
    message = Image(height=height, width=width, encoding='rgb8', step=width * 3,
                    data=pixels.tobytes())
    deadline = time.monotonic() + discovery_timeout_s
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    matched = publisher.get_subscription_count() > 0
    time.sleep(0.5)  # let the subscriber match this writer too
    sent = 0
    period = 1.0 / rate_hz
    start = time.monotonic()
    for index in range(int(round(seconds * rate_hz))):
        time.sleep(max(0.0, start + index * period - time.monotonic()))
        message.header.frame_id = str(index)
        message.header.stamp = node.get_clock().now().to_msg()
        publisher.publish(message)
        sent += 1
    time.sleep(1.0)  # let the last samples drain before the participant goes away
    print(json.dumps({'sent': sent, 'matched': matched}), flush=True)
    node.destroy_node()
    context.try_shutdown()


def subscribe(topic, timeout_s):
    """Count images on ``topic`` until the publisher leaves (or ``timeout_s``); print it."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node('dds_bench_subscriber', context=context)
    received = {'count': 0, 'bytes_ok': 0}

    def on_image(message):
        received['count'] += 1
        received['bytes_ok'] += len(message.data) == message.step * message.height

    subscription = node.create_subscription(Image, topic, on_image, _best_effort_qos())
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    deadline = time.monotonic() + timeout_s
    seen_publisher = False
    while time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)
        publishers = subscription.get_publisher_count() if hasattr(
            subscription, 'get_publisher_count') else node.count_publishers(topic)
        if publishers:
            seen_publisher = True
        elif seen_publisher:
            break
    print(json.dumps(received), flush=True)
    executor.shutdown()
    node.destroy_node()
    context.try_shutdown()


def measure(profile, seconds, rate_hz, width, height):
    """Run one subscriber and one publisher process; return their counts.

    Args:
        profile: Fast DDS XML profile for both processes, or None for Fast DDS defaults.
        seconds: publishing time (s).
        rate_hz: publishing rate (Hz).
        width: image width (pixels).
        height: image height (pixels).

    Returns:
        ``{'sent': int, 'received': int, 'matched': bool}``.
    """
    environ = dict(os.environ)
    for name in PROFILE_VARIABLES:
        environ.pop(name, None)
    if profile is not None:
        environ['FASTRTPS_DEFAULT_PROFILES_FILE'] = str(profile)
    environ.setdefault('AMENT_PREFIX_PATH', sys.prefix)
    topic = f'/dds_bench_{uuid.uuid4().hex[:8]}/image'
    discovery_timeout_s = 10.0
    me = str(Path(__file__).resolve())
    subscriber = subprocess.Popen(
        [sys.executable, me, '--role', 'subscribe', '--topic', topic,
         '--timeout', str(discovery_timeout_s + seconds + 10.0)],
        env=environ, stdout=subprocess.PIPE, text=True)
    publisher = subprocess.Popen(
        [sys.executable, me, '--role', 'publish', '--topic', topic, '--seconds', str(seconds),
         '--rate', str(rate_hz), '--width', str(width), '--height', str(height),
         '--discovery-timeout', str(discovery_timeout_s)],
        env=environ, stdout=subprocess.PIPE, text=True)
    limit = discovery_timeout_s + seconds + 30.0
    published = json.loads(publisher.communicate(timeout=limit)[0].strip().splitlines()[-1])
    counted = json.loads(subscriber.communicate(timeout=limit)[0].strip().splitlines()[-1])
    return {'sent': published['sent'], 'received': counted['count'],
            'matched': published['matched']}


def udp_only_profile(directory):
    """Write the profile with the shared-memory transport removed; return its path."""
    import xml.etree.ElementTree as ElementTree

    namespace = 'http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles'
    ElementTree.register_namespace('', namespace)
    tree = ElementTree.parse(PROFILE)
    q = f'{{{namespace}}}'
    descriptors = tree.getroot().find(f'{q}profiles/{q}transport_descriptors')
    shm_ids = set()
    for descriptor in list(descriptors):
        if descriptor.findtext(f'{q}type') == 'SHM':
            shm_ids.add(descriptor.findtext(f'{q}transport_id'))
            descriptors.remove(descriptor)
    for transports in tree.getroot().iter(f'{q}userTransports'):
        for entry in list(transports):
            if entry.text in shm_ids:
                transports.remove(entry)
    path = Path(directory) / 'fastdds_profile_udp_only.xml'
    tree.write(path, encoding='UTF-8', xml_declaration=True)
    return path


def main(argv=None):
    """Run the comparison, or one role of it (internal ``--role``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=5.0, help='publishing time, s')
    parser.add_argument('--rate', type=float, default=30.0, help='publishing rate, Hz')
    parser.add_argument('--width', type=int, default=640)
    parser.add_argument('--height', type=int, default=480)
    parser.add_argument('--role', choices=('publish', 'subscribe'), help=argparse.SUPPRESS)
    parser.add_argument('--topic', help=argparse.SUPPRESS)
    parser.add_argument('--timeout', type=float, default=30.0, help=argparse.SUPPRESS)
    parser.add_argument('--discovery-timeout', type=float, default=10.0,
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == 'publish':
        publish(args.topic, args.seconds, args.rate, args.width, args.height,
                args.discovery_timeout)
        return 0
    if args.role == 'subscribe':
        subscribe(args.topic, args.timeout)
        return 0
    print(f'{args.width}x{args.height} rgb8 best-effort, {args.rate:g} Hz for '
          f'{args.seconds:g} s, two processes')
    with tempfile.TemporaryDirectory() as directory:
        settings = (('Fast DDS defaults', None), (f'profile {PROFILE.name}', PROFILE),
                    ('profile, UDPv4 only', udp_only_profile(directory)))
        for label, profile in settings:
            result = measure(profile, args.seconds, args.rate, args.width, args.height)
            ratio = result['received'] / max(result['sent'], 1)
            print(f'{label:28s} received/sent = {result["received"]}/{result["sent"]} '
                  f'= {ratio:.2f}' + ('' if result['matched'] else '  (never matched)'),
                  flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
