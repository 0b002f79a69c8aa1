# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Dense evaluation of a recording: the dense model's depth and labels against ground truth.

:func:`evaluate_dense` runs :class:`~relperception.pipeline.dense_pipeline.DensePipeline` (the
``dense.*`` configuration) on every ``stride``-th image of a bag that has a ground-truth depth
topic ``topics.ground_truth_depth`` (default: ``topics.depth``) and/or a label topic
``topics.ground_truth_labels``. Ground-truth depth passes the odometry's depth checks first
(:func:`~relperception.data.bag_frames.check_depth_message`: wrong size, byte-swapped, no valid
pixel, implausible range such as millimetres labelled ``32FC1``); a refused image is not scored
and is counted by problem in ``depth_refused``. Depth is scored with
:mod:`relperception.evaluation.depth` (a
metric model as predicted; a relative model after a per-image least-squares scale and shift fit
in inverse depth, the MiDaS / Depth Anything protocol) and labels with
:mod:`relperception.evaluation.segmentation` (ground-truth ids the model does not have are
ignored and counted). The output folder receives ``dense_samples/{depth,labels}_<n>.png``
(input | prediction | ground truth) and ``confusion_matrix.png``.

:func:`build_dense_depth` builds the model whose depth replaces a depth camera
(``eval --depth-from dense``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
import logging
from pathlib import Path
import sys
from typing import Any

import numpy as np
from relperception.config import section
from relperception.data.bag_frames import (check_depth_message, DEPTH_PAIRING_TOLERANCE_S,
                                           find_depth_topic, message_stamp_ns,
                                           pairing_overdue, PAIRING_WINDOW_S, StampBuffer)
from relperception.data.error_log import ErrorLog
from relperception.evaluation.vo_report import percentile

logger = logging.getLogger(__name__)

#: Unknown ground-truth class ids named in the message about them (a few examples).
UNKNOWN_IDS_NAMED = 5
#: Sample strips written per kind (depth, labels) by the dense evaluation.
DENSE_SAMPLES = 3

_NS_PER_S = 1_000_000_000


def _check_scored_labels(confusion, unknown: int, unknown_ids: list, topic: str,
                         errors: ErrorLog) -> None:
    """Name label scores that describe no or few of the labelled pixels (an ERROR each)."""
    ids = ', '.join(map(str, unknown_ids[:UNKNOWN_IDS_NAMED]))
    classes = (f'the model has {confusion.num_classes} classes, ids 0-'
               f'{confusion.num_classes - 1}; {confusion.ignore_index} = ignore')
    if not confusion.total:
        errors.add(f'no ground-truth label pixel on {topic} could be scored ({classes}'
                   + (f'; {unknown} pixels carry other ids, e.g. {ids}' if unknown else
                      ': every pixel is the ignore id') + '): no mIoU', logging.ERROR)
    elif unknown > confusion.total:
        errors.add(f'{unknown} ground-truth label pixels on {topic} carry class ids the model '
                   f'does not have (e.g. {ids}; {classes}) against {confusion.total} scored: '
                   'the mIoU describes the fewer; labels in another id space?', logging.ERROR)


def build_dense_depth(config: Mapping[str, Any]):
    """Return the DensePipeline that predicts the VO depth; ValueError if it cannot be built.

    A relative-depth model is accepted with a warning: its metres are only as good as
    ``dense.depth_scale`` (``summary['dense_relative']`` says so).
    """
    from relperception.pipeline.dense_pipeline import DensePipeline, model_name

    try:
        pipeline = DensePipeline(config)
    except (OSError, RuntimeError) as exc:
        raise ValueError(f'cannot build the dense model for depth_source dense: {exc}') from exc
    if pipeline.relative:
        logger.warning('dense model %s predicts relative inverse depth: the odometry scale '
                       'is only as good as dense.depth_scale (%g)', model_name(pipeline.conf),
                       pipeline.conf['depth_scale'])
    return pipeline


class _DenseGroundTruth:
    """Pairs sampled images with the ground-truth depth / label images of the same stamp.

    Bounded as the odometry's pairing is (:class:`~relperception.data.bag_frames.StampBuffer`):
    by bag log time (:data:`PAIRING_WINDOW_S`) and bytes, not by a count of messages.
    """

    def __init__(self, topics: Mapping[str, str | None]):
        self.topics = {kind: topic for kind, topic in topics.items() if topic}
        self.buffers = {kind: StampBuffer() for kind in self.topics}
        self.pending = StampBuffer()
        self.log_time_ns: int | None = None
        self.tolerance_ns = round(DEPTH_PAIRING_TOLERANCE_S * _NS_PER_S)

    def seen(self, message) -> None:
        """Note the log time of a message read from the bag."""
        log_time = message.log_time_ns
        self.log_time_ns = log_time if self.log_time_ns is None else \
            max(self.log_time_ns, log_time)

    def add_ground_truth(self, kind: str, stamp: int, message) -> None:
        self.buffers[kind].add(stamp, message)

    def ready(self, final: bool = False) -> list:
        """Return ``(stamp, image message, {kind: gt message or None})`` of settled images."""
        out = []
        window_ns = round(PAIRING_WINDOW_S * _NS_PER_S)
        if self.log_time_ns is not None:
            for buffer in self.buffers.values():
                buffer.drop_older(self.log_time_ns - window_ns)
        while self.pending:
            stamp, message = self.pending.first()
            settled = all(self.buffers[kind].settled(stamp, self.tolerance_ns)
                          for kind in self.topics)
            overflow = pairing_overdue(self.log_time_ns, message, self.pending.nbytes
                                       + sum(b.nbytes for b in self.buffers.values()))
            if not (final or settled or overflow):
                break
            self.pending.popleft()
            out.append((stamp, message, {kind: self.buffers[kind].nearest(stamp,
                                                                          self.tolerance_ns)
                                         for kind in self.topics}))
            for buffer in self.buffers.values():
                buffer.drop_before(stamp - self.tolerance_ns)
        return out


def _dense_topics(reader, config: Mapping[str, Any]) -> dict:
    present = reader.topics
    depth_topic = find_depth_topic(present, config['topics.ground_truth_depth']
                                   or config['topics.depth'] or None)
    labels_topic = config['topics.ground_truth_labels'] or None
    return {'depth': depth_topic,
            'labels': labels_topic if labels_topic in present else None}


def evaluate_dense(reader, image_topic: str, config: Mapping[str, Any], output_dir: Path,
                   errors: ErrorLog, max_frames: int | None = None, stride: int = 1,
                   samples: int = DENSE_SAMPLES, plots: bool = True,
                   progress: bool = False, pipeline=None) -> dict[str, Any]:
    """Score the dense model of ``config`` against a bag's ground-truth depth and labels.

    Args:
        reader: an open :class:`relperception.data.bag.BagReader`.
        image_topic: the image topic to run the model on (Image or CompressedImage).
        config: flat validated configuration (``dense.*``, ``topics.ground_truth_depth``,
            ``topics.depth``, ``topics.ground_truth_labels``).
        output_dir: report folder (``dense_samples/``, ``confusion_matrix.png``).
        errors: where problems are logged and counted.
        max_frames: only the first ``max_frames`` images of the bag are considered.
        stride: evaluate every ``stride``-th image.
        samples: sample strips written per kind.
        plots: write the confusion matrix plot and the sample strips.
        progress: show a tqdm progress bar.
        pipeline: an already built ``DensePipeline`` of the same ``dense.*`` configuration to
            reuse (e.g. the one that predicts the VO depth), or None to build one.

    Returns:
        JSON-able dict: ``model``, ``relative``, ``depth_alignment``, ``topics``,
        ``frames_evaluated``, ``depth`` (:class:`DepthMetricsAccumulator` result or None),
        ``segmentation`` (:meth:`ConfusionMatrix.summary` or None), ``unknown_gt_label_pixels``,
        ``depth_refused`` (ground-truth depth images refused by the odometry's checks,
        :func:`~relperception.imaging.depth_checks.check_depth`, by problem),
        ``labels_refused`` (label images that are not single-channel class ids),
        ``timing_median_ms`` / ``timing_p95_ms`` and ``outputs`` (file names). With neither
        ground-truth topic in the bag, or a model that cannot be built, the dict says why in
        ``skipped`` and the error log has the reason.
    """
    from relperception.data.messages import decode_image_message
    from relperception.evaluation.depth import align_inverse_depth, DepthMetricsAccumulator
    from relperception.evaluation.segmentation import ConfusionMatrix
    from relperception.imaging.image_encodings import to_rgb8
    from relperception.pipeline.dense_pipeline import DensePipeline, model_name

    topics = _dense_topics(reader, config)
    result: dict[str, Any] = {'model': model_name(section(config, 'dense')), 'topics': topics,
                              'frames_evaluated': 0, 'depth': None, 'segmentation': None,
                              'outputs': {}}
    if not any(topics.values()):
        message = ('dense evaluation skipped: the bag has neither the ground-truth depth topic '
                   f"{config['topics.ground_truth_depth'] or config['topics.depth']!r} nor the "
                   f"label topic {config['topics.ground_truth_labels']!r}")
        errors.add(message, logging.ERROR)
        result['skipped'] = message
        return result
    try:
        pipeline = pipeline if pipeline is not None else DensePipeline(config)
    except (ValueError, OSError, RuntimeError) as exc:
        message = f'dense evaluation skipped: cannot build the dense model: {exc}'
        errors.add(message, logging.ERROR)
        result['skipped'] = message
        return result
    result['relative'] = pipeline.relative
    result['depth_alignment'] = ('per-image scale and shift in inverse depth (least squares)'
                                 if pipeline.relative else 'none (metric prediction)')
    min_depth = float(config['dense.min_depth_m']) or 1e-3
    max_depth = float(config['dense.max_depth_m'])
    depth_acc = DepthMetricsAccumulator(min_depth=min_depth, max_depth=max_depth)
    confusion = None
    if pipeline.has_segmentation and topics['labels']:
        names = pipeline.class_names or None
        num_classes = len(names) if names else None
        confusion = ('pending', names, num_classes)
    unknown_labels = 0
    unknown_ids: set = set()   # a few of the unknown class ids, for the message
    # ground-truth depth refused by the odometry's checks, by problem (DEPTH_PROBLEMS)
    depth_refused: Counter = Counter()
    labels_refused = 0
    timings: list = []
    written = {'depth': 0, 'labels': 0}
    sample_dir = output_dir / 'dense_samples'
    pairing = _DenseGroundTruth(topics)
    kinds = {topic: kind for kind, topic in topics.items() if topic}

    total = reader.message_counts.get(image_topic, 0)
    if max_frames is not None:
        total = min(total, int(max_frames))
    # Samples spread over the run (not its first, nearly identical frames).
    expected = max(1, -(-total // stride))
    due_at = np.linspace(0, expected - 1, max(1, samples)).round().astype(int)

    def write_sample(kind: str, rgb, prediction, truth, stamp: int) -> None:
        """Write the next sample strip of ``kind`` (depth / labels) once its frame is due."""
        if not plots or written[kind] >= samples:
            return
        frame = result['frames_evaluated'] - 1
        if frame < due_at[written[kind]]:
            return
        from relperception.evaluation.dense_plots import sample_strip

        name = f'{kind}_{written[kind]}.png'
        caption = f'{result["model"]} - frame {frame} of {expected} (stamp {stamp} ns)'
        sample_strip(rgb, prediction, truth, kind=kind, path_png=sample_dir / name,
                     caption=caption, class_names=pipeline.class_names or None)
        result['outputs'][f'dense_sample_{kind}_{written[kind]}'] = f'dense_samples/{name}'
        written[kind] += 1

    def evaluate(stamp: int, message, gt: dict) -> None:
        nonlocal confusion, unknown_labels, labels_refused
        where = f'{message.topic} at {stamp} ns'
        try:
            array, encoding = decode_image_message(message.msg, message.msgtype)
            rgb = np.ascontiguousarray(to_rgb8(array, encoding))
        except (ValueError, TypeError) as exc:
            errors.add(f'{where}: undecodable image ({exc}); dense frame skipped')
            return
        out = pipeline.run(rgb, colors=False)
        timings.append(out.timing_ms['total'])
        result['frames_evaluated'] += 1
        if gt.get('depth') is not None:
            check = check_depth_message(gt['depth'], rgb.shape[:2])
            if check.depth is None:
                depth_refused[check.problem] += 1
                errors.add(f"{gt['depth'].topic} for the image at {stamp} ns: ground-truth "
                           f'depth refused ({check.message}); depth not scored '
                           f'(dense.depth_refused.{check.problem})')
            else:
                gt_depth = check.depth
                try:
                    if pipeline.relative:
                        pred, _, _ = align_inverse_depth(out.raw_depth, gt_depth,
                                                         min_depth=min_depth,
                                                         max_depth=max_depth)
                    else:
                        pred = out.raw_depth
                    depth_acc.update(pred, gt_depth)
                    write_sample('depth', rgb, pred, gt_depth, stamp)
                except ValueError as exc:
                    errors.add(f'{where}: depth not scored ({exc})')
        elif topics['depth']:
            errors.add(f'{where}: no ground-truth depth within '
                       f'{DEPTH_PAIRING_TOLERANCE_S * 1e3:.0f} ms')
        if out.labels is not None and gt.get('labels') is not None:
            try:
                gt_array, gt_encoding = decode_image_message(gt['labels'].msg,
                                                             gt['labels'].msgtype)
                gt_labels = np.asarray(gt_array)
                if gt_labels.ndim == 3 and gt_labels.shape[2] == 1:
                    gt_labels = gt_labels[..., 0]
                elif gt_labels.ndim == 3:
                    labels_refused += 1
                    errors.add(f"{gt['labels'].topic} for the image at {stamp} ns: label "
                               f'image refused: {gt_encoding} has {gt_labels.shape[2]} '
                               'channels (a colour palette?); labels must be single-channel '
                               'class ids (mono8, 8UC1, mono16, 16UC1); labels not scored')
                    return
                if gt_labels.shape != out.labels.shape or gt_labels.dtype.kind not in 'iu':
                    raise ValueError(f'ground-truth labels are {gt_labels.dtype} '
                                     f'{gt_labels.shape}, prediction {out.labels.shape}')
                if isinstance(confusion, tuple):
                    _, names, num_classes = confusion
                    num_classes = num_classes or int(out.logits.shape[0])
                    confusion = ConfusionMatrix(num_classes, ignore_index=255,
                                                class_names=names)
                unknown = (gt_labels >= confusion.num_classes) & (gt_labels != 255)
                if unknown.any():
                    unknown_labels += int(unknown.sum())
                    if len(unknown_ids) < UNKNOWN_IDS_NAMED:
                        unknown_ids.update(int(v) for v in np.unique(gt_labels[unknown])
                                           [:UNKNOWN_IDS_NAMED])
                    gt_labels = np.where(unknown, 255, gt_labels).astype(np.uint8)
                confusion.update(out.labels, gt_labels)
                write_sample('labels', rgb, out.labels, gt_labels.astype(np.uint8), stamp)
            except ValueError as exc:
                errors.add(f'{where}: labels not scored ({exc})')

    from tqdm import tqdm
    bar = tqdm(total=total, unit='frame', file=sys.stderr, disable=not progress,
               desc='dense', dynamic_ncols=True)
    images_seen = 0
    try:
        for message in reader.messages([image_topic] + list(kinds)):
            try:
                stamp = message_stamp_ns(message)
            except ValueError as exc:
                errors.add(f'{message.topic}: bad header stamp ({exc})')
                continue
            pairing.seen(message)
            if message.topic == image_topic:
                if max_frames is not None and images_seen >= int(max_frames):
                    break
                if images_seen % stride == 0:
                    pairing.pending.add(stamp, message)
                images_seen += 1
                bar.update(1)
            else:
                pairing.add_ground_truth(kinds[message.topic], stamp, message)
            for ready in pairing.ready():
                evaluate(*ready)
        for ready in pairing.ready(final=True):
            evaluate(*ready)
    except Exception as exc:  # noqa: BLE001 - keep and report what was computed so far
        errors.add(f'dense evaluation stopped after {result["frames_evaluated"]} frames: '
                   f'{type(exc).__name__}: {exc}', logging.ERROR)
    finally:
        bar.close()
    if depth_acc.num_images or depth_acc.num_skipped:
        result['depth'] = depth_acc.compute()
    result['depth_refused'] = dict(depth_refused)
    result['labels_refused'] = labels_refused
    if labels_refused:
        errors.add(f"{labels_refused} label images on {topics['labels']} were refused (not "
                   'single-channel class ids): segmentation not scored on them', logging.ERROR)
    if depth_refused:
        errors.add(f'{sum(depth_refused.values())} ground-truth depth images on '
                   f"{topics['depth']} were refused by the odometry's depth checks and not "
                   f"scored: {', '.join(f'{k} {v}' for k, v in depth_refused.items())}",
                   logging.ERROR)
    if isinstance(confusion, ConfusionMatrix):
        result['segmentation'] = confusion.summary()
        if plots and confusion.total:
            from relperception.evaluation.dense_plots import plot_confusion_matrix

            try:
                plot_confusion_matrix(
                    output_dir / 'confusion_matrix.png', confusion,
                    title=(f'{result["model"]}: mIoU {100 * confusion.miou():.1f} %, pixel '
                           f'accuracy {100 * confusion.pixel_accuracy():.1f} %, '
                           f'{result["frames_evaluated"]} frames'))
                result['outputs']['confusion_matrix'] = 'confusion_matrix.png'
            except (ValueError, RuntimeError, OSError) as exc:
                errors.add(f'confusion matrix plot failed: {exc}', logging.ERROR)
    result['unknown_gt_label_pixels'] = unknown_labels
    if isinstance(confusion, ConfusionMatrix):
        _check_scored_labels(confusion, unknown_labels, sorted(unknown_ids), topics['labels'],
                             errors)
    result['frames_with_nonfinite_output'] = pipeline.frames_with_nonfinite_output
    if pipeline.frames_with_nonfinite_output:
        errors.add(f'the dense model output NaN/infinite values in '
                   f'{pipeline.frames_with_nonfinite_output} of {result["frames_evaluated"]} '
                   'frames (broken weights or export): that depth was not scored and those '
                   'pixels count as wrong labels', logging.ERROR)
    result['timing_median_ms'] = percentile(timings, 50)
    result['timing_p95_ms'] = percentile(timings, 95)
    depth_text = 'n/a' if result['depth'] is None else \
        f"abs_rel {result['depth']['abs_rel']:.4g}, delta1 {result['depth']['delta1']:.3f}"
    seg_text = 'n/a' if result['segmentation'] is None \
        or not np.isfinite(result['segmentation']['miou']) else \
        f"mIoU {result['segmentation']['miou']:.3f}"
    logger.info('dense evaluation (%s): %d frames; depth %s; segmentation %s',
                result['model'], result['frames_evaluated'], depth_text, seg_text)
    return result
