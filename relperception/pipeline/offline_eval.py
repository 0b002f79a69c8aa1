# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Offline evaluation of the VO pipeline on a rosbag2 recording.

:func:`evaluate_bag` reads a bag (topics from the ``topics.*`` configuration), runs
:class:`~relperception.pipeline.vo_pipeline.VOPipeline` on every image and scores the
trajectory against the ground-truth pose topic with evo. It writes into the output folder:

=================  =========================================================================
``trajectory.tum``   estimated camera poses (TUM format) in the ground-truth world frame: the
                     VO trajectory (world = first camera) left-multiplied by the ground-truth
                     pose at the first estimated frame (interpolated); in the VO frame when the
                     bag has no ground truth. Frames reported ``'lost'`` are left out.
``groundtruth.tum``  ground truth interpolated at the stamps of the estimated frames.
``summary.json``     metrics (:func:`~relperception.evaluation.trajectory.evaluate_trajectory`,
                     SE(3) alignment for RGB-D, Sim(3) for monocular and for an RGB-D run
                     in which no frame had usable depth; none when no frame was tracked),
                     frame counts, timing, and every error met on the way.
``timing.csv``       one row per processed frame: stamp, status, matches, inliers, keyframe,
                     depth used, VO processing time (ms) and the part of it spent waiting
                     for the previous keyframe's background work (``keyframe_wait_ms``; ~0
                     live when frames come slower than keyframes are completed), decode time
                     (ms). ``summary.json`` gives ``timing_*`` (all of it) and ``tracking_*``
                     (without that wait).
``trajectory.png``   top and side views of ground truth and aligned estimate.
``errors.png``       absolute position error over time.
=================  =========================================================================

The flow: bag -> frames (:mod:`relperception.data.bag_frames`: pairing of images, CameraInfo
and depth), the VO run (here), report and plots (:mod:`relperception.evaluation.vo_report`),
and with ``dense=True`` the dense scoring (:mod:`relperception.pipeline.dense_eval`;
``summary['dense']``).

Modes: ``'rgbd'`` needs the depth topic; ``'mono'`` ignores depth entirely (pure monocular,
the trajectory is defined up to scale and aligned with Sim(3)); ``'auto'`` chooses RGB-D when
the bag has depth for at least half of its images, monocular otherwise. With
``gt_scale=True`` (benchmark option ``--gt-scale``) a monocular run receives the ground-truth
distance travelled between consecutive frames as its scale hint; the summary says so.

Depth from the dense model (``depth_source='dense'``, CLI ``--depth-from dense``): instead of
the bag's depth topic, the depth of every frame is predicted from its RGB image by
:class:`~relperception.pipeline.dense_pipeline.DensePipeline` (the ``dense.*`` configuration;
metres, NaN invalid, as the VO expects) and the VO runs RGB-D (PnP on the predicted depth), so
the trajectory's scale is the depth model's and it is aligned with SE(3), no scale. This
measures what ``dense_node``'s ``depth`` remapped to ``visual_odometry_node``'s ``depth_in``
gives (metric monocular VO). The summary adds ``depth_source``, ``dense_model``,
``dense_relative``, ``dense_failures`` (frames whose prediction failed or had no valid pixel:
their depth is ignored and they count in ``frames_without_depth`` and the errors) and
``dense_timing_median_ms`` / ``dense_timing_p95_ms``; ``timing.csv`` gets a ``dense_ms``
column (not part of ``decode_ms``). The shipped default models learnt metric
depth on the synthetic rooms of :mod:`relperception.data.synthetic` only: on a synthetic
recording the result is meaningful, on real data (TUM, KITTI, your camera) its depth and so
the VO scale are not, until the model is trained on such data (``relperception train depth``)
and selected with ``dense.model`` / ``dense.weights``. A relative-depth model is accepted with
a warning (metres through ``dense.depth_scale`` only).

Robustness: a missing image or CameraInfo topic raises ``ValueError`` listing the bag's topics.
Bad messages (undecodable image, no CameraInfo yet, depth of the wrong size or without a single
valid pixel) are logged, counted in ``summary['errors']`` and the frame is skipped or its depth
ignored. A damaged or truncated bag is read up to the damage and everything computed so far is
written; ``summary['complete']`` is then False and the damage is in ``summary['errors']``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import logging
from pathlib import Path
import sys
import time
from typing import Any

import numpy as np
from relperception.config import (DEFAULT_BASE_FRAME_ID, DEFAULT_CAMERA_MOUNT_XYZ_QXYZW,
                                  load_config)
from relperception.data.bag_frames import (find_depth_topic, first_frame_id, FrameAssembler,
                                           gt_time_offset_ns, GT_TOLERANCE_S, MODES,
                                           read_camera_ground_truth, read_ground_truth,
                                           require_topic, resolve_mode)
from relperception.data.error_log import ErrorLog
from relperception.data.topics import GROUND_TRUTH_KEY
from relperception.evaluation.report import remove_earlier_outputs, write_json
from relperception.evaluation.trajectory import interpolate_poses
from relperception.evaluation.vo_report import (log_summary, NO_TRAJECTORY_METRICS,
                                                percentile, write_report)
from relperception.interruption import interruption_reason, INTERRUPTIONS
from relperception.odometry.map_tracker import SCALE_JUMP_FACTOR
from relperception.odometry.mount import camera_mount_transform
from relperception.pipeline.dense_eval import build_dense_depth, DENSE_SAMPLES, evaluate_dense

logger = logging.getLogger(__name__)

#: Where RGB-D odometry takes its depth: the bag's depth topic, or the dense model's prediction.
DEPTH_SOURCES = ('bag', 'dense')


def _depth_predictor(dense_depth):
    """Return ``rgb -> depth`` of a DensePipeline for :class:`FrameAssembler`, or None."""
    if dense_depth is None:
        return None

    def predict(rgb: np.ndarray) -> np.ndarray:
        return dense_depth.run(rgb, colors=False).depth

    return predict


def _gt_step_norm(gt_stamps, gt_poses, stamp0: int, stamp1: int) -> float | None:
    """Return the ground-truth distance (m) between two stamps, None if not covered."""
    if len(gt_stamps) == 0:
        return None
    poses, valid = interpolate_poses(gt_stamps, gt_poses, [stamp0, stamp1], GT_TOLERANCE_S)
    if not valid.all():
        return None
    return float(np.linalg.norm(poses[1][:3, 3] - poses[0][:3, 3]))


def _wheel_hints(reader, topic: str, bag_topics, gt_scale: bool, errors, T_base_cam):
    """Return the ``WheelHints`` of the bag's wheel odometry topic, or None without one."""
    from relperception.config import NODE_LOCAL_SPECS
    from relperception.odometry.wheel_hints import WheelHints

    if not topic:
        return None
    if topic not in bag_topics:
        logger.warning('bag has no wheel odometry topic %s: no translation hints', topic)
        return None
    if gt_scale:
        logger.info('--gt-scale: the ground-truth steps are the hints, not %s', topic)
        return None
    stamps, poses = read_ground_truth(reader, topic, errors)
    # The node's largest pose gap and speed.
    specs = NODE_LOCAL_SPECS['visual_odometry_node']
    hints = WheelHints(T_base_cam,
                       max_gap_s=specs['wheel_odom_max_gap_s'].default,
                       max_poses=max(2, len(stamps)),
                       max_speed_mps=specs['wheel_odom_max_speed_mps'].default)
    for stamp, T in zip(stamps.tolist(), poses):
        if not hints.add(stamp, T):
            logger.warning('%s pose at %.3f s refused: %s', topic, stamp / 1e9,
                           hints.last_refusal)
    if hints.refused or hints.restarts:
        logger.warning('%s: %d poses refused, %d restarts of the hints (see above)', topic,
                       hints.refused, hints.restarts)
    logger.info('%d wheel odometry poses on %s: translation hints for the monocular scale',
                len(hints), topic)
    return hints


#: Seed of the noise ``gt_scale_noise`` puts on the ground-truth steps.
HINT_NOISE_SEED = 0


def _check_hint_noise(noise, gt_scale: bool):
    """Return a () -> factor sampler for ``gt_scale_noise``, or None; ValueError if bad."""
    if noise is None:
        return None
    if not gt_scale:
        raise ValueError('gt_scale_noise needs gt_scale (the noise is put on its steps)')
    try:
        sigma, bias = (float(v) for v in noise)
    except (TypeError, ValueError):
        raise ValueError(f'gt_scale_noise must be (sigma_rel, bias_rel), got {noise!r}') \
            from None
    if not (np.isfinite(sigma) and 0 <= sigma < 0.5 and np.isfinite(bias) and -0.5 < bias < 1):
        raise ValueError(f'gt_scale_noise needs 0 <= sigma_rel < 0.5 and -0.5 < bias_rel < 1, '
                         f'got {noise!r}')
    rng = np.random.default_rng(HINT_NOISE_SEED)
    return lambda: max(0.0, (1.0 + bias) * (1.0 + rng.normal(0.0, sigma)))


def evaluate_bag(bag_path, output_dir, config: Mapping[str, Any] | None = None,
                 mode: str | None = None, max_frames: int | None = None,
                 progress: bool = True, gt_scale: bool = False,
                 plots: bool = True, dense: bool = False, dense_stride: int = 1,
                 dense_samples: int = DENSE_SAMPLES,
                 depth_source: str = 'bag',
                 gt_scale_noise: tuple[float, float] | None = None,
                 rectified_input: bool = False,
                 camera_mount_xyz_qxyzw: Sequence[float] = DEFAULT_CAMERA_MOUNT_XYZ_QXYZW,
                 base_frame_id: str = DEFAULT_BASE_FRAME_ID,
                 gt_time_offset_s: float = 0.0) -> dict[str, Any]:
    """Run the VO pipeline over a bag, score it against ground truth and write a report.

    Args:
        bag_path: rosbag2 directory or ``.mcap`` / ``.db3`` file.
        output_dir: folder for the outputs listed in the module docstring (created).
        config: flat configuration (:func:`relperception.config.load_config`); None for the
            defaults. Topics come from ``topics.*``, the mode from ``odometry.mode``.
        mode: ``'auto'``, ``'rgbd'`` or ``'mono'``; overrides ``odometry.mode``.
        max_frames: stop after this many images (None: all).
        progress: show a tqdm progress bar on stderr.
        gt_scale: monocular benchmark option: give VO the ground-truth distance between
            consecutive frames as scale hint.
        plots: write ``trajectory.png`` and ``errors.png`` (and, with ``dense``, the
            confusion matrix and the sample strips).
        dense: also evaluate the dense model (``dense.*``) against the bag's ground-truth
            depth and label topics (see the module docstring); ``summary['dense']``.
        dense_stride: evaluate the dense model on every n-th image (>= 1).
        dense_samples: number of sample strips written per kind (depth, labels).
        depth_source: ``'bag'`` (the depth topic) or ``'dense'``: the depth of every frame is
            predicted by :class:`~relperception.pipeline.dense_pipeline.DensePipeline` (the
            ``dense.*`` configuration) from its RGB image and the VO runs RGB-D on it (mode
            ``'auto'`` or ``'rgbd'``; the bag's depth topic is not read), aligned with SE(3):
            the scale is the depth model's. See the module docstring.
        gt_scale_noise: with ``gt_scale``, ``(sigma_rel, bias_rel)``: each ground-truth step
            is multiplied by ``(1 + bias_rel) * (1 + N(0, sigma_rel))`` (seeded, so runs
            repeat), like wheel odometry with a calibration error and per-step noise.
        rectified_input: the bag's images are already rectified: the camera is CameraInfo's
            ``p`` without distortion (the node's ``rectified_input`` parameter).
        camera_mount_xyz_qxyzw: the camera optical frame in the robot base frame (the odometry
            node's parameter): ground truth of the base frame is moved to the camera with it,
            and wheel odometry hints are read through it.
        base_frame_id: the robot base frame (the odometry node's parameter): ground truth whose
            child frame it is holds base poses (see
            :func:`~relperception.data.bag_frames.read_camera_ground_truth`; the summary's
            ``ground_truth_frame`` says what the poses were taken as).
        gt_time_offset_s: seconds added to the ground-truth stamps before they are associated
            with the frames (ground truth stamped 0.1 s late: -0.1); the summary reports it
            and the offset estimated from the motion (``gt_time_offset_estimate_s``).

    Returns:
        the summary dict that is also written to ``summary.json`` (see module docstring);
        metric keys (:data:`METRIC_KEYS`) are None when there is no ground truth.

    Raises:
        FileNotFoundError: if the bag does not exist.
        ValueError: unreadable bag, missing image / CameraInfo topic (the message lists the
            bag's topics), ``'rgbd'`` without depth, ``gt_scale`` without ground truth,
            ``depth_source='dense'`` with ``'mono'`` or a dense model that cannot be built,
            or a bad argument.
    """
    from relperception.data.bag import BagReader
    from relperception.pipeline.vo_pipeline import VOPipeline

    started = time.perf_counter()
    gt_offset_ns = gt_time_offset_ns(gt_time_offset_s)
    hint_noise = _check_hint_noise(gt_scale_noise, gt_scale)
    config = load_config(overrides=dict(config or {}))
    requested = str(mode if mode is not None else config['odometry.mode'])
    if requested not in MODES:
        raise ValueError(f'mode must be one of {MODES}, got {requested!r}')
    if max_frames is not None and int(max_frames) < 1:
        raise ValueError(f'max_frames must be >= 1 or None, got {max_frames}')
    if int(dense_stride) < 1 or int(dense_samples) < 0:
        raise ValueError(f'dense_stride must be >= 1 and dense_samples >= 0, got '
                         f'{dense_stride} and {dense_samples}')
    if depth_source not in DEPTH_SOURCES:
        raise ValueError(f'depth_source must be one of {DEPTH_SOURCES}, got {depth_source!r}')
    dense_depth = None
    if depth_source == 'dense':
        if requested == 'mono':
            raise ValueError("depth_source 'dense' feeds RGB-D odometry: use mode 'rgbd' or "
                             "'auto', not 'mono'")
        dense_depth = build_dense_depth(config)
    T_base_cam = camera_mount_transform(camera_mount_xyz_qxyzw)
    bag_path, output_dir = Path(bag_path), Path(output_dir)
    errors = ErrorLog()
    seen_reader_errors: set = set()
    rows: list = []
    poses_vo: list = []
    complete = True
    frames_read = 0

    with BagReader(bag_path) as reader:
        bag_topics = reader.topics
        counts = reader.message_counts
        image_topic = require_topic(bag_topics, config['topics.image'], 'image', bag_path)
        info_topic = require_topic(bag_topics, config['topics.camera_info'], 'camera_info',
                                   bag_path)
        depth_topic = find_depth_topic(bag_topics, config['topics.depth'])
        num_depth = counts.get(depth_topic, 0) if depth_topic is not None else 0
        if dense_depth is not None:
            resolved = 'rgbd'  # every frame gets predicted depth
        else:
            resolved = resolve_mode(requested, num_depth, counts.get(image_topic, 0),
                                    depth_topic or config['topics.depth'] or None)
        gt_topic = config['topics.ground_truth_pose'] or None
        if gt_topic is not None and gt_topic not in bag_topics:
            logger.warning('bag has no ground-truth topic %s: %s will be computed%s', gt_topic,
                           NO_TRAJECTORY_METRICS,
                           ' (the dense model is still scored against the depth and label '
                           'topics)' if dense else '')
            gt_topic = None
        if gt_scale and gt_topic is None:
            raise ValueError('gt_scale needs the ground-truth topic '
                             f"{config['topics.ground_truth_pose']!r}, which the bag lacks")
        use_depth = resolved == 'rgbd' and dense_depth is None
        errors.add_new(reader.errors, seen_reader_errors)

        gt_stamps, gt_poses, gt_frame = read_camera_ground_truth(
            reader, gt_topic, errors, first_frame_id(reader, image_topic), base_frame_id,
            T_base_cam, offset_ns=gt_offset_ns)
        errors.add_new(reader.errors, seen_reader_errors)
        found = reader.custom_data.get(GROUND_TRUTH_KEY)
        if found is not None:
            logger.info('ground truth of the bag (its converter): %s', found)
        wheel = _wheel_hints(reader, config['topics.wheel_odometry'], bag_topics, gt_scale,
                             errors, T_base_cam)
        errors.add_new(reader.errors, seen_reader_errors)
        # 'auto' stays 'auto' for the tracker, as in the live node: a frame whose depth is
        # refused is tracked monocularly instead of lost
        pipeline = VOPipeline({**config, 'odometry.mode': 'auto' if requested == 'auto'
                               and dense_depth is None else resolved})
        assembler = FrameAssembler(use_depth, errors,
                                   predict_depth=_depth_predictor(dense_depth),
                                   rectified_input=rectified_input)
        # only now that the bag and the configuration are known to work (a run that fails
        # on them leaves an earlier run's results as they were)
        remove_earlier_outputs(output_dir)
        wanted = [image_topic, info_topic] + ([depth_topic] if use_depth else [])
        total = counts.get(image_topic, 0)
        if max_frames is not None:
            total = min(total, int(max_frames))
        logger.info('evaluating %s: %d images, mode %s%s%s, %d ground-truth poses', bag_path,
                    counts.get(image_topic, 0), resolved, ' (gt scale)' if gt_scale else '',
                    ' on dense depth' if dense_depth is not None else '', len(gt_stamps))

        from tqdm import tqdm
        bar = tqdm(total=total, unit='frame', file=sys.stderr, disable=not progress,
                   desc='eval', dynamic_ncols=True)
        previous_stamp = None

        def consume(ready) -> bool:
            """Run VO on assembled frames; return False once max_frames is reached."""
            nonlocal frames_read, previous_stamp
            for stamp, frame, decode_ms in ready:
                if max_frames is not None and frames_read >= int(max_frames):
                    return False
                frames_read += 1
                bar.update(1)
                if frame is None:
                    continue
                hint = None
                if gt_scale and previous_stamp is not None:
                    hint = _gt_step_norm(gt_stamps, gt_poses, previous_stamp, stamp)
                    if hint is not None and hint_noise is not None:
                        hint *= hint_noise()
                elif wheel is not None:
                    hint = wheel.hint_m(stamp)
                result = pipeline.process(frame, translation_norm_m=hint)
                previous_stamp = stamp
                rows.append({'stamp_ns': stamp, 'status': result.status,
                             'num_matches': int(result.num_matches),
                             'num_inliers': int(result.num_inliers),
                             'is_keyframe': bool(result.is_keyframe),
                             'depth': frame.depth is not None,
                             'process_ms': pipeline.last_timing_ms,
                             'keyframe_wait_ms': pipeline.odometry.last_keyframe_wait_ms,
                             'decode_ms': decode_ms,
                             'dense_ms': assembler.dense_ms.pop(stamp, None),
                             'message': result.message,
                             'scale_source': result.scale_source})
                poses_vo.append(np.asarray(result.T_world_cam, dtype=np.float64))
                if result.status == 'lost':
                    logger.debug('frame %d lost: %s', stamp, result.message)
            return max_frames is None or frames_read < int(max_frames)

        interrupted = None
        try:
            keep_going = True
            for message in reader.messages(wanted):
                if message.topic == info_topic:
                    ready = assembler.add_camera_info(message)
                elif message.topic == image_topic:
                    ready = assembler.add_image(message)
                else:
                    ready = assembler.add_depth(message)
                keep_going = consume(ready)
                if not keep_going:
                    break
            if keep_going:
                consume(assembler.flush())
        except INTERRUPTIONS as exc:
            interrupted = exc
            complete = False
            errors.add(f'{interruption_reason(exc)} after {frames_read} frames: the results '
                       'of those frames are written', logging.ERROR)
        except Exception as exc:  # noqa: BLE001 - keep and report what was computed so far
            complete = False
            errors.add(f'processing stopped after {frames_read} frames: '
                       f'{type(exc).__name__}: {exc}', logging.ERROR)
        finally:
            bar.close()
        if reader.storage_damaged:
            complete = False
        errors.add_new(reader.errors, seen_reader_errors)
        dense_summary = None
        if dense and interrupted is None:
            dense_summary = evaluate_dense(reader, image_topic, config, output_dir, errors,
                                           max_frames=max_frames, stride=int(dense_stride),
                                           samples=int(dense_samples), plots=plots,
                                           progress=progress, pipeline=dense_depth)
            errors.add_new(reader.errors, seen_reader_errors)

    map_stats = pipeline.odometry.map_stats()
    pipeline.odometry.close()
    summary = write_report(output_dir, bag_path, config, requested, resolved, gt_scale, rows,
                           poses_vo, gt_stamps, gt_poses, errors, plots,
                           gt_time_offset_s=float(gt_time_offset_s))
    summary['local_map'] = map_stats
    if map_stats['map_initializations']:
        logger.info('local map: %d frames tracked against it, %d initialisation(s), %d keyframes, '
                    '%d points now; %d bundle adjustments (median %s ms)',
                    summary['frames_tracked_against_map'], map_stats['map_initializations'],
                    map_stats['map_keyframes'], map_stats['map_points'], map_stats['ba_calls'],
                    'n/a' if map_stats['ba_ms_median'] is None
                    else f"{map_stats['ba_ms_median']:.0f}")
    if map_stats['ba_unavailable']:
        errors.add(f"no bundle adjustment: {map_stats['ba_unavailable']}")
    if map_stats['scale_jumps']:
        logger.info('the keyframe-to-keyframe speed changed more than %gx %d times (scale '
                    'jumps or real accelerations)', SCALE_JUMP_FACTOR, map_stats['scale_jumps'])
    summary.update({
        'complete': complete,
        'frames_in_bag': int(counts.get(image_topic, 0)),
        'frames_read': frames_read,
        'frames_skipped': assembler.frames_skipped,
        'frames_without_depth': assembler.frames_without_depth,
        'frames_16bit_low_range': assembler.frames_16bit_low_range,
        'depth_problems': dict(assembler.depth_problems),
        'topics': {'image': image_topic, 'camera_info': info_topic,
                   'depth': depth_topic if use_depth else None, 'ground_truth_pose': gt_topic},
        'errors': errors.kept,
        'num_errors': errors.count,
        'elapsed_s': time.perf_counter() - started,
    })
    summary['depth_source'] = depth_source
    summary['ground_truth_frame'] = gt_frame
    if assembler.depth_problems:
        logger.warning('%d depth images were refused and their frames ran without depth: %s',
                       sum(assembler.depth_problems.values()),
                       ', '.join(f'{k} {v}' for k, v in assembler.depth_problems.items()))
    if dense_depth is not None:
        from relperception.pipeline.dense_pipeline import model_name

        dense_ms = [row['dense_ms'] for row in rows if row.get('dense_ms') is not None]
        name = model_name(dense_depth.conf)
        kind = ('RELATIVE depth turned into metres with dense.depth_scale: not metric'
                if dense_depth.relative else 'metric')
        summary.update({
            'dense_model': name,
            'dense_relative': dense_depth.relative,
            'dense_failures': assembler.dense_failures,
            'dense_timing_median_ms': percentile(dense_ms, 50),
            'dense_timing_p95_ms': percentile(dense_ms, 95),
        })
        if summary['metric_depth_used']:
            summary['scale_source'] = (f'depth predicted by the dense model {name} ({kind}; '
                                       'RGB-D odometry on predicted depth, SE(3) alignment)')
            if summary['frames_without_metric_scale']:
                summary['scale_source'] += (
                    f"; mixed: {summary['frames_without_metric_scale']} frames were tracked "
                    'without depth in a monocular, non-metric unit')
    if dense_summary is not None:
        summary['dense'] = dense_summary
        summary['outputs'].update(dense_summary.pop('outputs', {}))
    summary['interrupted'] = None if interrupted is None else interruption_reason(interrupted)
    write_json(output_dir / 'summary.json', summary)
    log_summary(summary)
    if interrupted is not None:
        raise interrupted
    return summary
