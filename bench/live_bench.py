# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Measure whether the node set keeps up with a 30 Hz 640x480 camera, live vs offline.

Writes a synthetic RGB-D recording (640x480, 30 Hz, 150 frames = 5 s by default), evaluates it
offline (``relperception eval``: no DDS) and replays it live (``relperception replay``: the
bag published through DDS, the node set (``visual_odometry_node``) in its own process, Fast DDS
profile applied), then prints both side by side: frames in/out, dropped %, median/p95
end-to-end latency (image published -> output received), offline per-frame time and ATE.
Target of the ROS layer issue: keep up with 30 Hz with < 2 % dropped frames and a median
end-to-end latency < 50 ms. It also measures what one publication of a 640x480 image costs as
raw CDR bytes vs deserialise-then-publish (the player publishes the bytes).

Usage::

    AMENT_PREFIX_PATH=.venv MPLBACKEND=Agg .venv/bin/python bench/live_bench.py \
        [--frames 150] [--fps 30] [--config config/ncc_realtime.yaml] [--in-process]
"""

import argparse
import logging
from pathlib import Path
import sys
import tempfile
import time
import uuid

TARGET_DROPPED_PERCENT = 2.0
TARGET_LATENCY_MS = 50.0


def publish_cost_ms(bag, repeats=200):
    """Return ms per publication of the bag's first image: raw bytes vs deserialised."""
    import rclpy
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image

    from relperception.data import topics
    from relperception.pipeline.live_eval import iter_raw_messages

    data = next(iter_raw_messages(bag, [topics.IMAGE])).data
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(f'publish_cost_{uuid.uuid4().hex[:6]}', context=context)
    publisher = node.create_publisher(Image, f'/bench_{uuid.uuid4().hex[:6]}/image', 5)
    try:
        start = time.perf_counter()
        for _ in range(repeats):
            publisher.publish(data)
        raw_ms = (time.perf_counter() - start) * 1e3 / repeats
        start = time.perf_counter()
        for _ in range(repeats):
            publisher.publish(deserialize_message(data, Image))
        typed_ms = (time.perf_counter() - start) * 1e3 / repeats
    finally:
        node.destroy_node()
        context.try_shutdown()
    return raw_ms, typed_ms


def _fmt(value, digits=1):
    return 'n/a' if value is None else f'{value:.{digits}f}'


def main(argv=None):
    """Run the benchmark and print the table; return 0."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--frames', type=int, default=150)
    parser.add_argument('--fps', type=float, default=30.0)
    parser.add_argument('--width', type=int, default=640)
    parser.add_argument('--height', type=int, default=480)
    parser.add_argument('--rate', type=float, default=1.0, help='playback speed factor')
    parser.add_argument('--config', help='configuration YAML (default: built-in defaults)')
    parser.add_argument('--in-process', action='store_true',
                        help='nodes in the replay process instead of one process each')
    parser.add_argument('--keep', metavar='DIR', help='write bag and reports here')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')

    from relperception.config import load_config
    from relperception.data.synthetic_bag import write_synthetic_bag
    from relperception.nodes import graph
    from relperception.nodes.replay import replay_bag
    from relperception.pipeline.offline_eval import evaluate_bag

    graph.ensure_ament_prefix()
    # Fast DDS reads the profile once, when this process creates its first participant: apply
    # it before anything here starts DDS (publish_cost_ms does), not only inside replay_bag.
    graph.apply_fastdds_profile()
    config = load_config(args.config)
    with tempfile.TemporaryDirectory(prefix='live_bench_') as scratch:
        folder = Path(args.keep) if args.keep else Path(scratch)
        bag = folder / 'bag'
        write_synthetic_bag(bag, frames=args.frames, width=args.width, height=args.height,
                            fps=args.fps, overwrite=True)
        offline = evaluate_bag(bag, folder / 'offline', config, progress=False, plots=False)
        raw_ms, typed_ms = publish_cost_ms(bag)
        live = replay_bag(bag, folder / 'live', config, rate=args.rate,
                          separate_processes=not args.in_process, fastdds_profile=True,
                          namespace=f'/live_bench_{uuid.uuid4().hex[:6]}', plots=False)

    odom = live['output_topics'][f'{live["live"]["namespace"]}/odom']
    corr = live['output_topics'][f'{live["live"]["namespace"]}/correspondences']
    dropped_percent = 100.0 * odom['dropped_frames'] / max(odom['frames_in'], 1)
    corr_dropped_percent = 100.0 * corr['dropped_frames'] / max(corr['frames_in'] - 1, 1)
    rows = [
        ('frames in', str(offline['frames_read']), str(odom['frames_in'])),
        ('frames out (correspondences)', '-', str(corr['frames_out'])),
        ('frames out (odom)', str(offline['frames_processed']), str(odom['frames_out'])),
        ('dropped % (correspondences)', '-', _fmt(corr_dropped_percent)),
        ('dropped % (odom)', '0.0', _fmt(dropped_percent)),
        ('latency median ms (corresp.)', '-', _fmt(corr['latency_ms_median'])),
        ('latency p95 ms (corresp.)', '-', _fmt(corr['latency_ms_p95'])),
        ('latency median ms (odom)', '-', _fmt(odom['latency_ms_median'])),
        ('latency p95 ms (odom)', '-', _fmt(odom['latency_ms_p95'])),
        ('per-frame VO time ms median', _fmt(offline['timing_median_ms']), '-'),
        ('per-frame VO time ms p95', _fmt(offline['timing_p95_ms']), '-'),
        ('ATE RMSE m', _fmt(offline['ate_rmse_m'], 4), _fmt(live['ate_rmse_m'], 4)),
    ]
    layout = 'in-process' if args.in_process else 'separate processes'
    print(f'{args.frames} frames {args.width}x{args.height} @ {args.fps:g} Hz, rate '
          f'{args.rate:g}, matcher {config["matcher"]}, live nodes: {layout}, Fast DDS profile')
    print(f'{"":32s} {"offline":>10s} {"live":>10s}')
    for name, off, on in rows:
        print(f'{name:32s} {off:>10s} {on:>10s}')
    for name, values in sorted(live.get('node_diagnostics', {}).items()):
        print(f'node {name}: processing median {values.get("processing_ms_median")} ms, '
              f'p95 {values.get("processing_ms_p95")} ms, dropped {values.get("frames_dropped")}'
              f' of {values.get("frames_received")} (last report)')
    print(f'publishing one {args.width}x{args.height} image: raw CDR bytes {raw_ms:.3f} ms, '
          f'deserialise + publish {typed_ms:.3f} ms')
    keeps_up = dropped_percent < TARGET_DROPPED_PERCENT
    fast = odom['latency_ms_median'] < TARGET_LATENCY_MS
    print(f'target: < {TARGET_DROPPED_PERCENT:g} % dropped: {"met" if keeps_up else "MISSED"} '
          f'({dropped_percent:.1f} %); median latency < {TARGET_LATENCY_MS:g} ms: '
          f'{"met" if fast else "MISSED"} ({odom["latency_ms_median"]:.1f} ms)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
