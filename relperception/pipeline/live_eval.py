# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Score a live replay: recorded node outputs + the input bag -> the ``eval`` report files.

ROS-free. ``relperception replay`` (:mod:`relperception.nodes.replay`) plays a bag through
DDS, records the node outputs into ``DIR/recorded_bag`` (log time = wall-clock receipt time,
nanoseconds) and writes ``DIR/input_publish_times.csv`` (stamp of each input image and the
wall-clock time it was published). :func:`evaluate_recording` turns those into the files of
``relperception eval`` (:mod:`relperception.pipeline.offline_eval`):

=========================  ===================================================================
``trajectory.tum``         camera poses from the recorded ``odom`` (``T_odom_base`` mapped back
                           to ``T_world_cam`` through the camera mount, see
                           :func:`camera_poses_from_odom`), in the ground-truth world frame.
``groundtruth.tum``        ground truth at the stamps of those poses.
``summary.json``           the ``eval`` keys (SE(3) alignment for RGB-D with depth, else
                           Sim(3)) and ``output_topics``: per output topic ``frames_in``,
                           ``frames_out``, ``dropped_frames``, ``latency_ms_median``,
                           ``latency_ms_p95``.
``timing.csv``             the ``eval`` columns, one row per recorded ``odom``; in a live run
                           ``process_ms`` is the end-to-end latency (image published -> odom
                           received) and ``decode_ms`` is 0.
``latency.csv``            one row per input image: stamp, publish wall time, and the latency of
                           each output topic (empty where that output never came).
``trajectory.png``,        as in ``eval``.
``errors.png``
=========================  ===================================================================

Latency = wall-clock receipt of an output - wall-clock publication of the input image with the
same header stamp (outputs carry the stamp of the newer input frame). Pairwise outputs
(correspondences, and the odometry built on them) cannot exist for the first frame, so the
frames a topic could have produced are ``frames_in - 1``; ``dropped_frames`` is what is missing
from that.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
import csv
import logging
import math
from pathlib import Path
import struct
import time
from typing import Any

import numpy as np
from relperception.atomic_files import atomic_open
from relperception.config import DEFAULT_BASE_FRAME_ID, load_config
from relperception.data.bag import BagReader, RawBagMessage
from relperception.data.input_counters import (DEPTH_HITS, DEPTH_PROBLEM_PREFIX,
                                               FRAMES_WITHOUT_DEPTH, input_counters)
from relperception.evaluation.report import write_json
from relperception.odometry.mount import (
    camera_from_odom,
    camera_mount_transform,
    DEFAULT_CAMERA_MOUNT_XYZ_QXYZW,
)

logger = logging.getLogger(__name__)

#: The camera mount ``visual_odometry_node`` uses by default (x y z qx qy qz qw): the
#: optical-to-body rotation, no translation (the node's ``camera_mount_xyz_qxyzw`` parameter).

#: File names written next to the report.
RECORDED_BAG = 'recorded_bag'
PUBLISH_TIMES_CSV = 'input_publish_times.csv'
LATENCY_CSV = 'latency.csv'

_NS_PER_MS = 1_000_000
_CDR_HEADER = 4


def iter_raw_messages(bag_path, topics: Iterable[str] | None = None,
                      damage: list | None = None) -> Iterator[RawBagMessage]:
    """Yield the serialised messages of ``topics`` (all when None) in log-time order.

    No deserialisation happens: the bytes go to DDS as they are. A damaged bag is read as
    ``eval`` reads it (:class:`~relperception.data.bag.BagReader`: a truncated MCAP up to the
    damage, a damaged SQLite 3 bag row by row past it).

    Args:
        bag_path: rosbag2 directory or bare ``.mcap`` / ``.db3`` file.
        topics: topic names to read; None for every topic.
        damage: when given, the reader's descriptions of the damage are appended to it once
            the iteration ends (nothing for an intact bag).

    Yields:
        :class:`~relperception.data.bag.RawBagMessage` items.

    Raises:
        FileNotFoundError: when the bag does not exist.
        ValueError: when it cannot be opened as a bag.
    """
    with BagReader(bag_path) as reader:
        try:
            yield from reader.raw_messages(topics)
        finally:
            if damage is not None and reader.storage_damaged:
                damage.extend(reader.errors)


def header_stamp_ns(data: bytes) -> int:
    """Return the ``header.stamp`` (int ns) of a CDR message that starts with a ``Header``.

    ``Image``, ``CameraInfo``, ``PointCloud2``, ``Odometry``, ``Path`` and ``DiagnosticArray``
    all do; the stamp is the first field after the 4-byte encapsulation header.

    Args:
        data: serialised message (bytes, CDR little or big endian).

    Returns:
        ``sec * 1e9 + nanosec`` as int.

    Raises:
        ValueError: when ``data`` is too short or not plain CDR.
    """
    if len(data) < _CDR_HEADER + 8:
        raise ValueError(f'a CDR message with a header needs >= 12 bytes, got {len(data)}')
    if data[0] != 0 or data[1] not in (0, 1):
        raise ValueError(f'not a plain CDR encapsulation: {bytes(data[:2]).hex()}')
    order = '<' if data[1] == 1 else '>'
    sec, nanosec = struct.unpack_from(order + 'iI', data, _CDR_HEADER)
    return sec * 1_000_000_000 + nanosec


def write_publish_times(path, stamps_ns: Sequence[int], publish_wall_ns: Sequence[int]) -> None:
    """Write ``stamp_ns,publish_wall_ns`` rows (both int nanoseconds) to a CSV file.

    Args:
        path: CSV file to write.
        stamps_ns: header stamps of the published input images.
        publish_wall_ns: wall-clock (``time.time_ns``) publication times, same length.
    """
    if len(stamps_ns) != len(publish_wall_ns):
        raise ValueError(f'{len(stamps_ns)} stamps but {len(publish_wall_ns)} publish times')
    with atomic_open(path, newline='') as stream:
        writer = csv.writer(stream)
        writer.writerow(('stamp_ns', 'publish_wall_ns'))
        writer.writerows(zip((int(s) for s in stamps_ns), (int(w) for w in publish_wall_ns)))


def read_publish_times(path) -> dict[int, int]:
    """Return ``{stamp_ns: publish_wall_ns}`` from :func:`write_publish_times`'s file.

    A stamp published twice keeps its first publication time.
    """
    times: dict[int, int] = {}
    with open(path, newline='', encoding='utf-8') as stream:
        for row in csv.DictReader(stream):
            times.setdefault(int(row['stamp_ns']), int(row['publish_wall_ns']))
    return times


def _percentile(values, q: float) -> float:
    values = np.asarray(values, dtype=np.float64)
    return float(np.percentile(values, q)) if len(values) else float('nan')


def topic_stats(publish_wall_ns: Mapping[int, int], receipts: Sequence[tuple[int, int]],
                pairwise: bool = True) -> dict[str, Any]:
    """Count one output topic's frames and latencies against the published inputs.

    Args:
        publish_wall_ns: ``{input stamp_ns: publish wall time ns}`` of the input images.
        receipts: ``(header stamp_ns, receipt wall time ns)`` of each output message.
        pairwise: the output needs two frames (none for the first input frame).

    Returns:
        ``frames_in`` (inputs published), ``frames_out`` (distinct output stamps that match an
        input), ``dropped_frames`` (``frames_in - 1`` for pairwise outputs, else
        ``frames_in``, minus ``frames_out``; never negative), ``unmatched_out`` (outputs whose
        stamp no input had), ``latency_ms_median``, ``latency_ms_p95``, ``latency_ms_max``
        (float ms, NaN without matched outputs; first receipt of each stamp).
    """
    frames_in = len(publish_wall_ns)
    first_receipt: dict[int, int] = {}
    unmatched = 0
    for stamp, wall in receipts:
        if stamp not in publish_wall_ns:
            unmatched += 1
            continue
        if stamp not in first_receipt or wall < first_receipt[stamp]:
            first_receipt[stamp] = wall
    latencies = [(wall - publish_wall_ns[stamp]) / _NS_PER_MS
                 for stamp, wall in first_receipt.items()]
    possible = max(frames_in - 1, 0) if pairwise else frames_in
    return {
        'frames_in': frames_in,
        'frames_out': len(first_receipt),
        'dropped_frames': max(possible - len(first_receipt), 0),
        'unmatched_out': unmatched,
        'latency_ms_median': _percentile(latencies, 50),
        'latency_ms_p95': _percentile(latencies, 95),
        'latency_ms_max': float(np.max(latencies)) if latencies else float('nan'),
    }


def latency_text(stats: Mapping[str, Any]) -> str:
    """Say one output topic's latency for a log line, from :func:`topic_stats`.

    Returns:
        ``'latency median 12.3 ms, p95 45.6 ms'``, or ``'no output'`` when no output matched
        an input (its latencies are NaN).
    """
    median, p95 = stats['latency_ms_median'], stats['latency_ms_p95']
    if not (np.isfinite(median) and np.isfinite(p95)):
        return 'no output'
    return f'latency median {median:.1f} ms, p95 {p95:.1f} ms'


def camera_poses_from_odom(T_odom_base: np.ndarray,
                           camera_mount_xyz_qxyzw: Sequence[float] = DEFAULT_CAMERA_MOUNT_XYZ_QXYZW
                           ) -> np.ndarray:
    """Invert ``T_odom_base = T_base_cam @ T_world_cam @ inv(T_base_cam)`` of the VO node.

    Args:
        T_odom_base: (N, 4, 4) or (4, 4) float64 poses of the recorded ``odom`` (metres).
        camera_mount_xyz_qxyzw: the node's ``camera_mount_xyz_qxyzw`` parameter: 7 numbers,
            camera optical frame in the base frame (metres, scalar-last quaternion).

    Returns:
        ``T_world_cam = inv(T_base_cam) @ T_odom_base @ T_base_cam``, same shape, float64
        (world = the camera at the odometry's first frame).

    Raises:
        ValueError: for a mount that is not 7 finite numbers or poses that are not 4x4.
    """
    return camera_from_odom(T_odom_base, camera_mount_transform(camera_mount_xyz_qxyzw))


def _number(text: str):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return text
    return value if math.isfinite(value) else None


def _level(level) -> int | None:
    if isinstance(level, (bytes, bytearray)):
        return int(level[0]) if level else None
    return int(level)


def _read_recording(recorded_bag, output_topics: Mapping[str, str]):
    """Return receipts per topic, odom poses and the last diagnostics of the recorded bag."""
    from relperception.data.messages import stamp_to_ns, transform_from_pose_msg

    receipts: dict[str, list] = {topic: [] for topic in output_topics.values()}
    odom_topic = output_topics.get('odom')
    correspondences_topic = output_topics.get('correspondences')
    diagnostics_topic = output_topics.get('diagnostics')
    odom_rows: list = []
    num_matches: dict[int, int] = {}
    diagnostics: dict[str, dict] = {}
    errors: list[str] = []
    with BagReader(recorded_bag) as reader:
        for message in reader.messages():
            msg = message.msg
            try:
                stamp = stamp_to_ns(msg.header.stamp)
            except (AttributeError, ValueError) as exc:
                errors.append(f'{message.topic}: bad header ({exc})')
                continue
            if message.topic in receipts:
                receipts[message.topic].append((stamp, message.log_time_ns))
            if message.topic == odom_topic:
                try:
                    odom_rows.append((stamp, message.log_time_ns,
                                      transform_from_pose_msg(msg.pose.pose)))
                except ValueError as exc:
                    errors.append(f'{odom_topic} at {stamp} ns: bad pose ({exc})')
            elif message.topic == correspondences_topic:
                num_matches[stamp] = int(msg.width) * int(msg.height)
            elif message.topic == diagnostics_topic:
                for status in msg.status:
                    diagnostics[status.name] = {
                        'level': _level(status.level),
                        'message': status.message,
                        **{kv.key: _number(kv.value) for kv in status.values}}
        errors.extend(reader.errors)
    return receipts, odom_rows, num_matches, diagnostics, errors


def _node_input_problems(diagnostics: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Sum the non-zero refused-input counters over the nodes' last diagnostics statuses."""
    totals: dict[str, int] = {}
    for values in diagnostics.values():
        for name, count in input_counters(values).items():
            if count:
                totals[name] = totals.get(name, 0) + count
    return totals


def _depth_hits(diagnostics: Mapping[str, Mapping[str, Any]]) -> int | None:
    """Return the frames that ran with depth, summed over the nodes; None if none says."""
    hits = [values[DEPTH_HITS] for values in diagnostics.values()
            if isinstance(values.get(DEPTH_HITS), (int, float))]
    return int(sum(hits)) if hits else None


def _write_latency_csv(path: Path, publish_wall_ns: Mapping[int, int],
                       receipts: Mapping[str, Sequence[tuple[int, int]]],
                       topics: Sequence[str]) -> None:
    first: dict[str, dict[int, int]] = {}
    for topic in topics:
        first[topic] = {}
        for stamp, wall in receipts.get(topic, ()):
            if stamp not in first[topic] or wall < first[topic][stamp]:
                first[topic][stamp] = wall
    with atomic_open(path, newline='') as stream:
        writer = csv.writer(stream)
        writer.writerow(['stamp_ns', 'publish_wall_ns']
                        + [f'latency_ms{topic.replace("/", "_")}' for topic in topics])
        for stamp in sorted(publish_wall_ns):
            wall = publish_wall_ns[stamp]
            cells = [stamp, wall]
            for topic in topics:
                got = first[topic].get(stamp)
                cells.append('' if got is None else f'{(got - wall) / _NS_PER_MS:.3f}')
            writer.writerow(cells)


def evaluate_recording(input_bag, recorded_bag, publish_times, output_dir,
                       output_topics: Mapping[str, str], config: Mapping[str, Any] | None = None,
                       mode: str = 'rgbd',
                       camera_mount_xyz_qxyzw: Sequence[float] = DEFAULT_CAMERA_MOUNT_XYZ_QXYZW,
                       plots: bool = True, extra: Mapping[str, Any] | None = None,
                       base_frame_id: str = DEFAULT_BASE_FRAME_ID,
                       gt_time_offset_s: float = 0.0) -> dict[str, Any]:
    """Write the ``eval`` report of a live replay and return its summary.

    Args:
        input_bag: the replayed bag (its ``topics.ground_truth_pose`` gives the ground truth).
        recorded_bag: the bag of recorded outputs (log time = wall-clock receipt, ns).
        publish_times: ``{stamp_ns: publish wall ns}`` of the input images, or the CSV file of
            :func:`write_publish_times`.
        output_dir: report folder (created).
        output_topics: role -> absolute topic of the recorded outputs; roles ``odom`` (needed
            for the trajectory), ``correspondences``, ``path`` (per-frame outputs, counted and
            timed) and ``diagnostics`` (the last status of each node goes into the summary).
        config: flat configuration (``topics.ground_truth_pose``, ``matcher``); None: defaults.
        mode: ``'rgbd'`` or ``'mono'``, as the nodes ran: SE(3) alignment for ``'rgbd'``
            unless the nodes' diagnostics say that no frame had depth (``depth_hits`` 0:
            the odometry ran monocular), Sim(3) otherwise.
        camera_mount_xyz_qxyzw: the odometry node's camera mount (x y z qx qy qz qw); ground
            truth of the base frame is moved to the camera with it too.
        plots: write ``trajectory.png`` and ``errors.png``.
        extra: more entries for the summary (e.g. the replay's rate and process layout).
        base_frame_id: the odometry node's base frame: ground truth whose child frame it is
            holds robot base poses (``summary['ground_truth_frame']`` says what was read).
        gt_time_offset_s: seconds added to the ground-truth stamps before they are associated
            with the recorded odometry, as ``eval --gt-time-offset`` does (the summary reports
            it and the offset estimated from the motion, ``gt_time_offset_estimate_s``).

    Returns:
        The summary written to ``summary.json`` (the ``eval`` keys plus ``output_topics``,
        ``node_diagnostics`` and ``live``).

    Raises:
        FileNotFoundError: when a bag or the publish-times file is missing.
        ValueError: for an unknown mode, no ``odom`` role or a ground-truth time offset that is
            not a finite number.
    """
    from relperception.data.bag_frames import (first_frame_id, gt_time_offset_ns,
                                               read_camera_ground_truth)
    from relperception.data.topics import compressed_topic
    from relperception.data.error_log import ErrorLog
    from relperception.evaluation.vo_report import NO_TRAJECTORY_METRICS, write_report

    started = time.perf_counter()
    if mode not in ('rgbd', 'mono'):
        raise ValueError(f"mode must be 'rgbd' or 'mono', got {mode!r}")
    if 'odom' not in output_topics:
        raise ValueError(f'output_topics needs an "odom" entry, got {dict(output_topics)}')
    gt_offset_ns = gt_time_offset_ns(gt_time_offset_s)
    config = load_config(overrides=dict(config or {}))
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    if not isinstance(publish_times, Mapping):
        publish_times = read_publish_times(publish_times)
    errors = ErrorLog()

    gt_topic = config['topics.ground_truth_pose'] or None
    with BagReader(input_bag) as reader:
        if gt_topic is not None and gt_topic not in reader.topics:
            errors.add(f'bag has no ground-truth topic {gt_topic}: {NO_TRAJECTORY_METRICS}')
            gt_topic = None
        image_topic = config['topics.image']
        if image_topic not in reader.topics and compressed_topic(image_topic) in reader.topics:
            image_topic = compressed_topic(image_topic)
        gt_stamps, gt_poses, gt_frame = read_camera_ground_truth(
            reader, gt_topic, errors, first_frame_id(reader, image_topic), base_frame_id,
            camera_mount_transform(camera_mount_xyz_qxyzw), offset_ns=gt_offset_ns)
        frames_in_bag = reader.message_counts.get(image_topic, 0)

    # The player read the input as eval does; damage there makes the run incomplete.
    input_damage = list((extra or {}).get('input_damage') or [])
    for message in input_damage:
        errors.add(f'input bag: {message}', logging.ERROR)
    interrupted = (extra or {}).get('interrupted')
    if interrupted:
        errors.add(f'{interrupted} during the replay: the outputs recorded until then are '
                   'scored', logging.ERROR)
    published = (extra or {}).get('images_published')
    if isinstance(published, int) and published > len(publish_times):
        # outputs carry the input's stamp: images of one stamp cannot be told apart
        errors.add(f'{published - len(publish_times)} of the {published} images played repeat '
                   'the header stamp of an earlier one (stamps repeated in the recording): '
                   'each stamp is counted and scored once')
    receipts, odom_rows, num_matches, diagnostics, read_errors = _read_recording(
        recorded_bag, output_topics)
    for message in read_errors:
        errors.add(message)
    odom_rows.sort(key=lambda row: row[0])
    unique_rows, seen = [], set()
    for row in odom_rows:
        if row[0] not in seen:
            seen.add(row[0])
            unique_rows.append(row)
    # The node falls back to monocular on frames without usable depth: the alignment follows
    # the depth it used (as far as its diagnostics tell), not the mode of the plan.
    depth_used = mode == 'rgbd' and _depth_hits(diagnostics) != 0
    rows, poses = [], []
    if unique_rows:
        T_world_cam = camera_poses_from_odom(np.stack([row[2] for row in unique_rows]),
                                             camera_mount_xyz_qxyzw)
        for (stamp, receipt, _), pose in zip(unique_rows, T_world_cam):
            sent = publish_times.get(stamp)
            rows.append({'stamp_ns': stamp, 'status': 'tracking',
                         'num_matches': num_matches.get(stamp, -1), 'num_inliers': -1,
                         'is_keyframe': False, 'depth': depth_used,
                         'process_ms': (receipt - sent) / _NS_PER_MS if sent else float('nan'),
                         'decode_ms': 0.0, 'message': ''})
            poses.append(pose)

    problems = _node_input_problems(diagnostics)
    for name, count in sorted(problems.items()):
        errors.add(f'the nodes refused or lost inputs: {name} {count} (see node_diagnostics)')
    summary = write_report(output_dir, Path(input_bag), config, mode, mode, False, rows, poses,
                           gt_stamps, gt_poses, errors, plots,
                           gt_time_offset_s=float(gt_time_offset_s))
    per_frame = [role for role in ('correspondences', 'odom', 'path') if role in output_topics]
    # The VO node publishes odom and path for every frame, the correspondences it used from
    # the second frame on.
    stats = {output_topics[role]: topic_stats(publish_times, receipts[output_topics[role]],
                                              pairwise=role == 'correspondences')
             for role in per_frame}
    _write_latency_csv(output_dir / LATENCY_CSV, publish_times, receipts,
                       [output_topics[role] for role in per_frame])
    summary['outputs']['latency'] = LATENCY_CSV
    odom_stats = stats[output_topics['odom']]
    summary.update({
        'timing_source': 'live: end-to-end latency, input image published -> odom received',
        'complete': not input_damage and not interrupted,
        'interrupted': interrupted or None,
        'frames_in_bag': int(frames_in_bag),
        'frames_read': len(publish_times),
        'frames_skipped': odom_stats['dropped_frames'],
        'frames_without_depth': problems.get(FRAMES_WITHOUT_DEPTH, 0),
        'depth_problems': {name[len(DEPTH_PROBLEM_PREFIX):]: count
                           for name, count in problems.items()
                           if name.startswith(DEPTH_PROBLEM_PREFIX)},
        'input_problems': problems,
        'topics': {'image': config['topics.image'], 'camera_info': config['topics.camera_info'],
                   'depth': config['topics.depth'] if mode == 'rgbd' else None,
                   'ground_truth_pose': gt_topic},
        'ground_truth_frame': gt_frame,
        'output_topics': stats,
        'node_diagnostics': diagnostics,
        'recorded_messages': {topic: len(items) for topic, items in receipts.items()},
        'live': dict(extra or {}),
        'errors': errors.kept,
        'num_errors': errors.count,
        'elapsed_s': time.perf_counter() - started,
    })
    write_json(output_dir / 'summary.json', summary)
    logger.info('live: %d frames in, odom %d out (%d dropped), %s; ATE RMSE %s m',
                odom_stats['frames_in'], odom_stats['frames_out'],
                odom_stats['dropped_frames'], latency_text(odom_stats),
                'n/a' if summary.get('ate_rmse_m') is None else f"{summary['ate_rmse_m']:.4g}")
    return summary
