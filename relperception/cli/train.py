# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception train seg|depth|matcher``: train the dense heads or the LoFTR matcher.

Dense recipe (what the shipped weights were trained with; ``fast_seg`` / ``vit_hybrid`` ran
step 1 with ``--device-augment`` at full resolution, see their model cards):

1. ``train seg --config conv_small --data CAMVID_TRAIN --val-data CAMVID_VAL -o runs/seg``:
   backbone + segmentation head from scratch on a CamVid-layout folder (random scale crop at the
   preset input size, flip, colour jitter; cross entropy, optionally median-frequency class
   weights); validation mIoU on the whole validation images at the preset input size at every
   checkpoint and epoch end.
2. ``train depth --config conv_small --init runs/seg/model.safetensors --data synth:0-15:30
   --val-data synth:1000-1001:10 -o runs/depth``: the depth head on RGB-D frames (a bag with
   image + depth topics, or ``synth:`` scenes rendered at start-up), SILog + 0.1 L1 loss. The
   backbone is frozen by default (``--backbone-lr-scale 0``: its batch-norm statistics too), so
   the segmentation quality of step 1 is kept exactly; a positive scale fine-tunes it at a
   lower learning rate (and changes the segmentation output).

Every run writes ``<output>/last.pt`` (checkpoint; ``--resume`` continues at the same step
with the checkpoint's optimiser: a different ``--lr``, ``--weight-decay``,
``--backbone-lr-scale`` or ``--init`` is refused, left out they are the checkpoint's; a new run
into a folder that holds a ``last.pt`` is refused),
``<output>/model.safetensors`` (the weights; its metadata ``trained_heads`` names the heads that
were trained, by this run or in the ``--init`` weights while the backbone under them stays
frozen, so that ``relperception infer`` does not write the output of an untrained or outdated
head; ``last.pt`` holds the same metadata, so a resumed run and ``--init last.pt`` keep it)
and ``<output>/metrics.json`` (with ``--val-data`` the validation metrics of every checkpoint
in ``history``, the last ones in ``metrics``; without it
there are none, which the run says at its start and end). Without ``--init`` the run says which
parts start from random initialisation. The warm-up defaults to a few per cent of the run
(``training.loop.effective_warmup``); ``--time-budget-min`` alone fits the whole schedule into
the budget. Matcher training (``train matcher``) uses homographies of ``--data`` and, with
``--scene-pairs synth:SEEDS[:VIEWS]``, two-view pairs of synthetic rooms with depth-warp ground
truth (``training.scene_pairs``) plus negative pairs (``--negative-fraction``, default 0.2
with scene pairs; ``--real-negative-fraction`` of them between two real image folders of
``--data``, e.g. two street sequences) and the unmatched-cell loss (``--unmatched-weight`` 10 and
``--unmatched-gamma`` 1 by default then).
With ``--val-data`` the weights of the best validation so far (largest ``miou`` for ``seg``,
smallest ``abs_rel`` for ``depth``) are kept as ``<output>/best.safetensors`` with
``<output>/best_metrics.json`` (step, epoch, every metric, per-class IoU for ``seg``); the
summary names them under ``best``. ``--report-data`` scores more data at every validation
(``report/<name>/<metric>`` in the history) without letting it choose the checkpoint: the
leave-one-sequence-out measurement of the ``fast_seg`` model card, which ``train seg
--hold-out-sequence SEQ`` runs in one command (the frames ``SEQ_*`` of ``--data`` are left out
of training and scored as ``report/heldout-SEQ/<metric>``). ``--device-augment``
(``seg``) keeps the training images on the device as uint8 and augments each batch there
(``training.device_augment``), and ``--bf16`` autocasts the forward pass: the GPU recipe of the
``fast_seg`` preset (README). ``--ship NAME`` also copies the weights to
``relperception/weights/NAME.safetensors`` and registers them in the manifest
(``models.weights.add_to_manifest``); NAME must be the weights name of a preset with the
architecture trained (checked before training, :func:`check_ship_name`). The device is
``--device`` (default cpu).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path
import shutil
import sys
import time

from relperception.atomic_files import write_text_atomic
from relperception.cli.common import (finite_float, int_at_least, nonnegative_float,
                                      positive_float)
from relperception.models.presets import preset_for_backbone

HELP = 'train the dense segmentation / depth heads or the LoFTR matcher (checkpoints, resume)'
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)

#: Prefix of the ``--report-data`` metrics in the validation history (``report/<name>/miou``).
REPORT_PREFIX = 'report/'
#: Report name of a sequence held out of ``train seg`` (``report/heldout-<sequence>/miou``).
HELD_OUT_PREFIX = 'heldout-'
#: Defaults of the optimiser options of a new run. A resumed run keeps its checkpoint's values
#: (the optimiser state holds them): left out, they are read from the checkpoint's config; a
#: given value that differs is refused (:func:`resumed_checkpoint`).
DENSE_LR = 2e-3
MATCHER_LR = 1e-3
WEIGHT_DECAY = 1e-4
BACKBONE_LR_SCALE = 0.0


def held_out_name(sequence: str) -> str:
    """Return the report name of a sequence held out of training (``heldout-<sequence>``)."""
    return f'{HELD_OUT_PREFIX}{sequence}'


def add_hold_out_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--hold-out-sequence`` (seg, seg-adjust); ``what`` says what happens to the frames."""
    parser.add_argument('--hold-out-sequence', nargs='+', metavar='SEQ',
                        help='recording sequences of --data (frames named SEQ_<frame>, '
                             f"CamVid's naming) {what}, recorded as report/"
                             f'{HELD_OUT_PREFIX}SEQ/<metric>: the leave-one-sequence-out '
                             'measurement of how the model does on a street it has not seen')


def hold_out_sequences(args: argparse.Namespace) -> list:
    """Return ``--hold-out-sequence`` without repeats (empty when not given)."""
    return list(dict.fromkeys(str(s) for s in getattr(args, 'hold_out_sequence', None) or ()))


def _size(text: str):
    try:
        h, w = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected HxW, got {text!r}') from None
    if h < 1 or w < 1:
        raise argparse.ArgumentTypeError(f'sizes must be positive, got {text!r}')
    return h, w


def _common(parser: argparse.ArgumentParser, dense: bool = True) -> None:
    default = preset_for_backbone('conv') if dense else None
    parser.add_argument('--config', default=default, required=not dense,
                        help='model preset name or YAML file' +
                             (f' (default {default}, the dense.backbone: conv default)'
                              if dense else ''))
    parser.add_argument('--data', required=True, nargs='+' if not dense else None,
                        help='training data (see the task help)')
    parser.add_argument('-o', '--output', required=True, help='run folder (checkpoints, weights)')
    parser.add_argument('--steps', type=int_at_least(1), help='optimiser steps')
    parser.add_argument('--epochs', type=positive_float, help='epochs (when --steps is not given)')
    parser.add_argument('--time-budget-min', type=positive_float,
                        help='stop after this many minutes; alone (no --steps/--epochs), the '
                             'step count is estimated from the measured step time and the '
                             'warm-up and learning-rate schedule are fitted to the budget')
    parser.add_argument('--batch-size', type=int_at_least(1), default=8,
                        help='samples per step (8)')
    parser.add_argument('--lr', type=positive_float,
                        help=f'peak learning rate ({DENSE_LR if dense else MATCHER_LR:g}; a '
                             "resumed run keeps its checkpoint's)")
    parser.add_argument('--resume', nargs='?', const=True, default=False, metavar='CKPT',
                        help='continue from CKPT (default <output>/last.pt)')
    parser.add_argument('--device', default='cpu', help="torch device: 'cpu' (default), 'cuda'")
    parser.add_argument('--seed', type=int, default=0, help='seed (0)')
    parser.add_argument('--num-threads', type=int_at_least(1), help='torch CPU threads')
    parser.add_argument('--ema-decay', type=float,
                        help='validate, keep and export a moving average of the weights with '
                             'this decay in (0, 1), e.g. 0.999 (default: the weights as '
                             'trained)')
    if not dense:
        return
    parser.add_argument('--val-data', help='validation data (same kind as --data)')
    parser.add_argument('--report-data', nargs='+', metavar='SOURCE',
                        help='more data of the same kind, scored at every validation and '
                             'recorded as report/<name>/<metric> in metrics.json, never used '
                             'to choose the checkpoint (e.g. a sequence left out of --data, '
                             'to see how the run generalises); needs --val-data')
    parser.add_argument('--init', help='initial weights (e.g. the model.safetensors of a run)')
    parser.add_argument('--init-partial', action='store_true',
                        help='load only the --init tensors whose names and shapes the model has '
                             '(e.g. fast_seg weights into vit_hybrid); the rest start random')
    parser.add_argument('--crop', type=_size, help='training crop HxW (default: the preset input)')
    parser.add_argument('--scale-range', type=float, nargs=2, metavar=('MIN', 'MAX'),
                        help='random zoom range around the preset input scale')
    parser.add_argument('--colour-jitter', type=float, nargs=4,
                        metavar=('BRIGHTNESS', 'CONTRAST', 'SATURATION', 'HUE'),
                        help='colour-jitter ranges: factors drawn from [1 - x, 1 + x] (x in '
                             '[0, 1]) and a hue shift in [-HUE, HUE] turns (HUE <= 0.5); '
                             '0 0 0 0 turns it off (default: DenseAugment.default_conf, hue 0 '
                             'for depth)')
    parser.add_argument('--weight-decay', type=nonnegative_float,
                        help=f'AdamW decay ({WEIGHT_DECAY:g}; a resumed run keeps its '
                             "checkpoint's)")
    parser.add_argument('--warmup-steps', type=int_at_least(0), default=None,
                        help='linear warm-up steps (default: automatic, a few per cent of the '
                             'run)')
    parser.add_argument('--schedule', choices=('cosine', 'poly', 'constant'), default='poly')
    parser.add_argument('--grad-clip', type=finite_float, default=5.0,
                        help='max gradient norm (5; <= 0: no clipping)')
    parser.add_argument('--checkpoint-every', type=int_at_least(1), default=200,
                        help='steps (200)')
    parser.add_argument('--val-every', type=int_at_least(0), default=0,
                        help='steps between validations (0: at every checkpoint and epoch '
                             'end)')
    parser.add_argument('--workers', type=int_at_least(0), default=0,
                        help='data loader processes (0)')
    parser.add_argument('--max-images', type=int_at_least(1),
                        help='use only the first N training samples')
    parser.add_argument('--ship', metavar='NAME',
                        help='copy the weights to relperception/weights/NAME.safetensors and '
                             'register them in the manifest')
    parser.add_argument('--ship-half', action='store_true',
                        help='ship the weights as float16 (half the file size; the model '
                             'loads them into float32)')
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')
    parser.add_argument('--device-augment', action='store_true',
                        help='seg: keep the training images on --device as uint8 and augment '
                             'each batch there (fast GPU training on a small set; validation '
                             'and checkpoints only every --val-every / --checkpoint-every '
                             'steps, not at the many epoch ends)')
    parser.add_argument('--bf16', action='store_true',
                        help='bfloat16 autocast of the forward pass (mixed precision; for a '
                             'GPU)')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sub-commands ``seg``, ``depth``, ``seg-adjust`` and ``matcher``."""
    sub = parser.add_subparsers(dest='task', metavar='TASK')
    sub.required = True
    seg = sub.add_parser('seg', help='segmentation on a CamVid-layout folder '
                                     '(images/ + labels/)')
    _common(seg)
    add_hold_out_argument(seg, 'left out of training and scored at every validation; needs '
                               '--val-data')
    seg.add_argument('--class-weights', choices=('none', 'median'), default='median',
                     help='cross-entropy class weights: median frequency (default) or none')
    depth = sub.add_parser('depth', help='metric depth on a bag (image + depth topics) or '
                                         'synth:SEEDS[:FRAMES[:WxH]] scenes')
    _common(depth)
    depth.add_argument('--backbone-lr-scale', type=nonnegative_float,
                       help=f'backbone learning rate / --lr; {BACKBONE_LR_SCALE:g} (default) '
                            "freezes it (a resumed run keeps its checkpoint's)")
    depth.add_argument('--silog-weight', type=nonnegative_float, default=1.0,
                       help='weight of the scale-invariant log loss (1)')
    depth.add_argument('--l1-weight', type=nonnegative_float, default=0.1,
                       help='weight of the L1 depth loss (0.1); with --silog-weight, not both 0')
    depth.add_argument('--image-topic', help='image topic of the bags of --data, --val-data '
                                             'and --report-data (default topics.IMAGE)')
    depth.add_argument('--depth-topic', help='depth topic of the bags of --data, --val-data '
                                             'and --report-data (default topics.DEPTH)')
    from relperception.cli import seg_adjust

    adjust = sub.add_parser('seg-adjust', help='remove the class-weight bias of trained '
                                               'segmentation weights (logit adjustment, tau '
                                               'chosen on validation data)')
    seg_adjust.add_arguments(adjust)
    matcher = sub.add_parser('matcher', help='LoFTR on random homographies of image files, '
                                             'synthetic 3-D scene pairs and negative pairs')
    _common(matcher, dense=False)
    matcher.add_argument('--val-data', nargs='+', metavar='SOURCE',
                         help='held-out image sources for validation (default: synthetic '
                              'scenes not used for training)')
    matcher.add_argument('--init', help='initial weights (ours, kornia or official LoFTR)')
    matcher.add_argument('--image-size', type=_size, metavar='HxW',
                         help='training size (default: the preset input size)')
    matcher.add_argument('--ship', metavar='NAME',
                         help='copy the weights to relperception/weights/NAME.safetensors and '
                              'register them in the manifest')
    matcher.add_argument('--ship-half', action='store_true',
                         help='ship the weights as float16 (half the file size)')
    matcher.add_argument('--no-progress', action='store_true', help='no progress bar')
    matcher.add_argument('--scene-pairs', nargs='+', metavar='SPEC',
                         help='synthetic rooms for two-view 3-D pairs with depth-warp ground '
                              'truth, synth:SEEDS[:VIEWS] (default 40 views per seed, rendered '
                              'at the training size); default: none (homographies only)')
    matcher.add_argument('--scene-fraction', type=float,
                         help='share of scene pairs with --scene-pairs (PairMix.scene_fraction, '
                              '0.45; the rest after negatives are homography pairs of --data)')
    matcher.add_argument('--wide-fraction', type=float,
                         help='share of wide-baseline scene pairs (rotation >= 30 deg) with '
                              '--scene-pairs (PairMix.wide_fraction, 0.5)')
    matcher.add_argument('--negative-fraction', type=float, default=None,
                         help='share of negative pairs (two images of different sources, no '
                              'match); default 0.2 with --scene-pairs, else 0')
    matcher.add_argument('--real-negative-fraction', type=float, default=0.0,
                         help='share of the negative pairs drawn between two real image '
                              'sources of different groups (folders of --data, e.g. two '
                              'street sequences) rather than from all sources (0)')
    matcher.add_argument('--unmatched-weight', type=float, default=None,
                         help='weight of the loss that pushes the best confidence of cells '
                              'without a correspondence to 0; default 10 with scene or '
                              'negative pairs, else 0 (the positive-only homography recipe)')
    matcher.add_argument('--unmatched-gamma', type=float, default=None,
                         help='focal gamma of that loss (default 1 with scene or negative '
                              'pairs)')
    matcher.add_argument('--unmatched-top-fraction', type=float, default=1.0,
                         help='average that loss over this fraction (0, 1] of the unmatched '
                              'cells with the largest confidence, the hard negatives (1: all)')
    matcher.add_argument('--max-zoom', type=float, default=None,
                         help='homography pairs: zoom drawn log-uniformly from [1/Z, Z] '
                              '(default: HomographyConfig.max_scale)')
    matcher.add_argument('--val-scenes', nargs='+', metavar='SPEC',
                         help='held-out rooms for the scene / negative-pair validation of '
                              'mixed training (default synth:900-901:12)')


def run(args: argparse.Namespace) -> int:
    """Run the chosen training task; return 0 when it completed (or stopped on the budget)."""
    import torch
    from relperception.training.loop import check_ema_decay

    if args.task == 'seg-adjust':
        from relperception.cli import seg_adjust

        return seg_adjust.run(args)
    check_ema_decay(args.ema_decay)   # before any data is loaded
    if getattr(args, 'ship_half', False) and args.ship is None:
        raise ValueError('--ship-half applies with --ship NAME (it stores the shipped file '
                         'in float16)')
    if getattr(args, 'report_data', None) and not args.val_data:
        raise ValueError('--report-data needs --val-data (the data that chooses the '
                         'checkpoint)')
    if hold_out_sequences(args) and not args.val_data:
        raise ValueError('--hold-out-sequence needs --val-data (the data that chooses the '
                         'checkpoint; the held-out frames never do)')
    check_ship_name(args.ship, args.task, args.config)
    if args.task == 'depth':
        _refuse_ignored_depth_options(args)
    if args.task == 'depth' and args.silog_weight == 0 and args.l1_weight == 0:
        raise ValueError('--silog-weight and --l1-weight are both 0: nothing to train')
    from relperception.training.augment import check_colour_jitter, check_scale_range

    if getattr(args, 'scale_range', None) is not None:
        check_scale_range(args.scale_range, '--scale-range')
    if getattr(args, 'colour_jitter', None) is not None:
        check_colour_jitter(*args.colour_jitter)
    if args.num_threads:
        torch.set_num_threads(int(args.num_threads))
    if args.task == 'matcher':
        from relperception.training.matcher_train import train_matcher

        resumed_checkpoint(args)

        extra = {} if args.val_data is None else {'val_data': args.val_data}
        extra.update(_matcher_mix_options(args))
        extra.update(_matcher_homography_options(args))
        result = train_matcher(config_name=args.config, data_paths=args.data,
                               output=args.output, steps=args.steps, epochs=args.epochs,
                               batch_size=args.batch_size, lr=args.lr, resume=args.resume,
                               device=args.device, seed=args.seed,
                               num_threads=args.num_threads,
                               time_budget_min=args.time_budget_min,
                               image_size=args.image_size, init_weights=args.init,
                               progress=not args.no_progress, ema_decay=args.ema_decay,
                               **extra)
        _raise_if_interrupted(result)
        if args.ship is not None:
            metrics = {k: v for k, v in result['validation'].items()
                       if isinstance(v, (int, float))}
            result['shipped'] = str(ship_weights(args.ship, Path(result['weights']),
                                                 args.config, 'matcher', metrics,
                                                 result['config'], half=args.ship_half))
        if isinstance(result, dict):
            for key in ('weights', 'step', 'metrics'):
                if key in result:
                    logger.info('%s: %s', key, result[key])
        return int(result) if isinstance(result, int) else 0
    summary = train_dense(args)
    _raise_if_interrupted(summary)
    logger.info('weights: %s', summary['weights'])
    for key, value in summary['metrics'].items():
        logger.info('  %-24s %s', key, f'{value:.4f}' if isinstance(value, float) else value)
    return 0


def _matcher_homography_options(args: argparse.Namespace) -> dict:
    """Return the ``train_matcher`` keywords of ``--max-zoom`` ({} without it).

    Raises:
        ValueError: for a zoom outside [1, ``homography.MAX_HOMOGRAPHY_SCALE``].
    """
    if args.max_zoom is None:
        return {}
    from relperception.training.homography import HomographyConfig, MAX_HOMOGRAPHY_SCALE

    if not 1.0 <= args.max_zoom <= MAX_HOMOGRAPHY_SCALE:
        raise ValueError(f'--max-zoom must be in [1, {MAX_HOMOGRAPHY_SCALE:g}], got '
                         f'{args.max_zoom:g}')
    return {'homography': HomographyConfig(max_scale=float(args.max_zoom))}


def _matcher_mix_options(args: argparse.Namespace) -> dict:
    """Return the ``train_matcher`` keywords of the scene / negative-pair options.

    Raises:
        ValueError: for fractions outside [0, 1] or a negative weight.
    """
    from relperception.training.loftr_losses import LoFTRLossConfig
    from relperception.training.matcher_train import (DEFAULT_UNMATCHED_GAMMA,
                                                      DEFAULT_UNMATCHED_WEIGHT)
    from relperception.training.scene_pairs import PairMix

    negative = args.negative_fraction
    if negative is None:
        negative = PairMix.negative_fraction if args.scene_pairs else 0.0
    scene_fraction = PairMix.scene_fraction if args.scene_fraction is None \
        else args.scene_fraction
    wide_fraction = PairMix.wide_fraction if args.wide_fraction is None else args.wide_fraction
    for name, value in (('--scene-fraction', scene_fraction),
                        ('--wide-fraction', wide_fraction),
                        ('--negative-fraction', negative),
                        ('--real-negative-fraction', args.real_negative_fraction)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f'{name} must be in [0, 1], got {value}')
    if args.unmatched_weight is not None and args.unmatched_weight < 0:
        raise ValueError(f'--unmatched-weight must be >= 0, got {args.unmatched_weight}')
    if args.unmatched_gamma is not None and args.unmatched_gamma < 0:
        raise ValueError(f'--unmatched-gamma must be >= 0, got {args.unmatched_gamma}')
    if not 0.0 < args.unmatched_top_fraction <= 1.0:
        raise ValueError('--unmatched-top-fraction must be in (0, 1], got '
                         f'{args.unmatched_top_fraction}')
    _refuse_ignored_mix_options(args, negative)
    gamma = DEFAULT_UNMATCHED_GAMMA if args.unmatched_gamma is None else args.unmatched_gamma
    top = args.unmatched_top_fraction
    if not args.scene_pairs and not negative:
        if args.unmatched_weight:
            return {'loss_config': LoFTRLossConfig(unmatched_weight=args.unmatched_weight,
                                                   unmatched_gamma=gamma,
                                                   unmatched_top_fraction=top)}
        return {}
    extra = {'scene_pairs': args.scene_pairs,
             'pair_mix': PairMix(scene_fraction=scene_fraction if args.scene_pairs else 0.0,
                                 negative_fraction=negative, wide_fraction=wide_fraction,
                                 real_negative_fraction=args.real_negative_fraction)}
    weight = DEFAULT_UNMATCHED_WEIGHT if args.unmatched_weight is None else args.unmatched_weight
    extra['loss_config'] = LoFTRLossConfig(unmatched_weight=weight, unmatched_gamma=gamma,
                                           unmatched_top_fraction=top)
    if args.val_scenes is not None:
        extra['val_scenes'] = args.val_scenes
    return extra


def _refuse_ignored_mix_options(args: argparse.Namespace, negative: float) -> None:
    """Raise ``ValueError`` for a matcher option that the chosen pairs would ignore.

    ``negative`` is the negative-pair fraction in effect. Scene-pair shares need
    ``--scene-pairs``; the negative and validation-scene options need scene or negative pairs;
    the shape of the unmatched-cell loss needs that loss (scene or negative pairs, or
    ``--unmatched-weight``).
    """
    if not args.scene_pairs:
        for option, value in (('--scene-fraction', args.scene_fraction),
                              ('--wide-fraction', args.wide_fraction)):
            if value is not None:
                raise ValueError(f'{option} applies with --scene-pairs (without them there are '
                                 'no scene pairs to share out)')
    if args.scene_pairs or negative:
        return
    for option, given in (('--real-negative-fraction', bool(args.real_negative_fraction)),
                          ('--val-scenes', args.val_scenes is not None)):
        if given:
            raise ValueError(f'{option} applies with --scene-pairs or --negative-fraction '
                             '(homography pairs only: no negative or scene pairs)')
    if not args.unmatched_weight:
        for option, given in (('--unmatched-gamma', args.unmatched_gamma is not None),
                              ('--unmatched-top-fraction', args.unmatched_top_fraction != 1.0)):
            if given:
                raise ValueError(f'{option} applies with --unmatched-weight, --scene-pairs or '
                                 '--negative-fraction (the unmatched-cell loss is off without '
                                 'them)')


def _refuse_ignored_depth_options(args: argparse.Namespace) -> None:
    """Raise ``ValueError`` for a ``train depth`` option its data sources would ignore.

    ``--max-images`` selects frames of a bag (``synth:`` specs count their own frames);
    ``--image-topic`` / ``--depth-topic`` name topics of the bags among ``--data``,
    ``--val-data`` and ``--report-data``.
    """
    from relperception.training.dense_data import SYNTH_PREFIX

    if args.max_images is not None and str(args.data).startswith(SYNTH_PREFIX):
        raise ValueError(f'--max-images applies to bag data; --data {args.data} renders its '
                         'frames itself (synth:SEEDS:FRAMES sets how many)')
    sources = [args.data, args.val_data, *(args.report_data or ())]
    bags = [s for s in sources if s is not None and not str(s).startswith(SYNTH_PREFIX)]
    for option, value in (('--image-topic', args.image_topic),
                          ('--depth-topic', args.depth_topic)):
        if value is not None and not bags:
            raise ValueError(f'{option} applies to bags; --data, --val-data and --report-data '
                             'are all synth: scenes, which have no topics')


def _raise_if_interrupted(summary: dict) -> None:
    """Raise the interruption that stopped training, once its results are written."""
    from relperception.interruption import interruption_error

    if summary.get('interrupted'):
        logger.error('%s at step %d: weights %s and metrics.json hold that step (not shipped); '
                     'continue with --resume', summary['interrupted'], summary['step'],
                     summary['weights'])
        raise interruption_error(summary['interrupted'])


def _optimiser_defaults(args: argparse.Namespace) -> dict:
    """Return the optimiser options of the task of ``args`` with their new-run defaults."""
    defaults = {'lr': MATCHER_LR if args.task == 'matcher' else DENSE_LR}
    if hasattr(args, 'weight_decay'):
        defaults['weight_decay'] = WEIGHT_DECAY
    if hasattr(args, 'backbone_lr_scale'):
        defaults['backbone_lr_scale'] = BACKBONE_LR_SCALE
    return defaults


def _option(name: str) -> str:
    """Return the command-line spelling of an option's ``dest`` (``lr`` -> ``--lr``)."""
    return '--' + name.replace('_', '-')


def resumed_checkpoint(args: argparse.Namespace):
    """Return the checkpoint ``args`` continue (None for a new run); settle the optimiser options.

    The optimiser options left out (None) become the checkpoint's recorded values, or the
    defaults of a new run (:func:`_optimiser_defaults`).

    Raises:
        FileNotFoundError: ``--resume`` names a missing checkpoint.
        ValueError: a new run into a folder that holds one (``last.pt``); a file that is no
            checkpoint, a checkpoint of another task or preset, a ``--steps`` below its step,
            or an optimiser option or ``--init`` that differs from the checkpoint's (a resumed
            run keeps them).
    """
    from relperception.training.loop import (CHECKPOINT_NAME, checkpoint_to_resume,
                                             read_checkpoint)

    earlier = [Path(args.output) / name for name in (CHECKPOINT_NAME, 'model.safetensors')]
    existing = next((path for path in earlier if path.is_file()), None)
    if args.resume is False and existing is not None:
        raise ValueError(f"-o {args.output} already holds a run's weights ({existing}): "
                         'continue a training run with --resume, or give another -o folder (a '
                         'new run there would overwrite them)')
    path = checkpoint_to_resume(args.output, args.resume)
    state = None if path is None else read_checkpoint(path)
    config = dict(state.get('config') or {}) if state is not None else {}
    if state is not None:
        _check_resumed_run(args, path, state, config)
    for name, default in _optimiser_defaults(args).items():
        given, recorded = getattr(args, name), config.get(name)
        if given is not None and recorded is not None and \
                not math.isclose(float(given), float(recorded), rel_tol=1e-9, abs_tol=1e-12):
            others = ', '.join(_option(n) for n in _optimiser_defaults(args))
            raise ValueError(f'{_option(name)} {given:g} differs from the {float(recorded):g} '
                             f"of the checkpoint {path}: a resumed run keeps its checkpoint's "
                             f'optimiser ({others}); leave {_option(name)} out, or start a new '
                             f'run from its weights in another folder (--init '
                             f'{Path(args.output) / "model.safetensors"} -o NEW_FOLDER)')
        if given is None:
            setattr(args, name, default if recorded is None else recorded)
    return state


def _check_resumed_run(args: argparse.Namespace, path: Path, state: dict,
                       config: dict) -> None:
    """Raise ``ValueError`` when checkpoint ``path`` is not one that ``args`` can continue."""
    task = config.get('task')
    if task is not None and task != args.task:
        raise ValueError(f'{path} is a checkpoint of `train {task}`, not of `train '
                         f'{args.task}`: continue it with `train {task} --resume`, or start '
                         f'this run in another -o folder (--init with the weights of that run '
                         'starts from them)')
    if args.task == 'matcher':
        preset = str(args.config)
    else:
        from relperception.models.presets import load_model_config

        preset = load_model_config(args.config)['name']
    recorded = config.get('preset')
    if recorded is not None and recorded != preset:
        raise ValueError(f'{path} is a checkpoint of preset {recorded!r}, this run trains '
                         f'--config {args.config} ({preset!r}): resume it with --config '
                         f'{recorded}')
    if args.steps is not None and args.steps < int(state['step']):
        raise ValueError(f'--steps {args.steps} is below the step {int(state["step"])} of the '
                         f'checkpoint {path}: nothing is left to train; give more steps to '
                         'continue it')
    init, recorded_init = getattr(args, 'init', None), config.get('init') or None
    if init and 'init' in config and (recorded_init is None or
                                      Path(init).resolve() != Path(recorded_init).resolve()):
        raise ValueError(f'--init {init} differs from the checkpoint {path}, which started '
                         f'from {recorded_init or "random weights"}: a resumed run continues '
                         "the checkpoint's weights; leave --init out to resume, or start a "
                         'new run from these weights in another -o folder')


def _fitting_tensors(model, path: str) -> dict:
    """Return the tensors of weights file ``path`` but those ``model`` has in another shape.

    Those are logged and left out (``--init-partial``); the model ignores the names it lacks.

    Raises:
        ValueError: no parameter of the model is in the file (name and shape; counters such
            as batch-norm's ``num_batches_tracked`` do not count): nothing would be loaded.
    """
    from relperception.models.weights import load_state_dict_file

    expected = model.state_dict()
    state = load_state_dict_file(path)
    reshaped = sorted(k for k, v in state.items()
                      if k in expected and tuple(v.shape) != tuple(expected[k].shape))
    parameters = [name for name, _ in model.named_parameters()]
    if not any(k in state and k not in reshaped for k in parameters):
        raise ValueError(f'--init-partial: no weight of {path} fits the model (none of its '
                         f'{len(state)} tensors has the name and shape of one of the '
                         f"model's {len(parameters)} parameters): nothing would be loaded; are "
                         'these weights of another model?')
    if reshaped:
        logger.warning('--init-partial: %d tensors of %s have another shape in this model and '
                       'start random: %s', len(reshaped), path, ', '.join(reshaped))
    return {k: v for k, v in state.items() if k not in reshaped}


def _loaded_heads(model, state: dict) -> set:
    """Return the heads of ``model`` whose every tensor ``state`` holds (loaded from it)."""
    expected = model.state_dict()
    return {head for head in _model_heads(model)
            if all(k in state for k in expected if k.startswith(f'{head}_head.'))}


def train_dense(args: argparse.Namespace) -> dict:
    """Train the ``seg`` or ``depth`` task of ``args``; return the summary written to JSON.

    Raises:
        ValueError: bad options or data.
    """
    from relperception.models.dense import build_dense_model
    from relperception.models.presets import load_model_config
    from relperception.cli.seg_adjust import ADJUSTMENT_KEY, CLASS_WEIGHTS_KEY
    from relperception.models.trained_heads import parse_trained_heads, TRAINED_HEADS_KEY
    from relperception.models.weights import load_weights, read_weights_metadata
    from relperception.training import dense_data
    from relperception.training.augment import DenseAugment
    from relperception.training.loop import finished_run_summary, seed_everything, Trainer

    checkpoint = resumed_checkpoint(args)   # settles the optimiser options first
    seed_everything(args.seed)
    held_out = hold_out_sequences(args)      # seg only (the option is not on the depth parser)
    conf = load_model_config(args.config)
    inp = conf['input']
    model = build_dense_model(conf)
    loaded_heads = None      # all the heads of --init, unless --init-partial leaves some out
    if args.init and checkpoint is None:    # a resumed run continues the checkpoint's weights
        init = args.init
        if args.init_partial:
            init = _fitting_tensors(model, args.init)
            loaded_heads = _loaded_heads(model, init)
        try:
            load_weights(model, init, strict=not args.init_partial)
        except ValueError as err:
            hint = '' if args.init_partial else (
                '; --init-partial loads only the tensors whose names and shapes fit')
            raise ValueError(f'{err}{hint}') from err
        logger.info('initial weights %s%s', args.init,
                    " (partial: the file's tensors the model lacks or shapes differently are "
                    "skipped; the model's tensors the file lacks start random)"
                    if args.init_partial else '')
    elif args.init_partial:
        raise ValueError('--init-partial needs --init')
    # what the weights of the run are: the resumed checkpoint records it, else --init says
    recorded = (checkpoint or {}).get('metadata') or {}
    if TRAINED_HEADS_KEY in recorded:
        trained_heads = parse_trained_heads(recorded[TRAINED_HEADS_KEY], args.resume) or ()
        outdated = ()
        init_metadata = recorded
    else:
        init = args.init
        if checkpoint is not None:   # written before checkpoints held metadata: its --init
            init = (checkpoint.get('config') or {}).get('init')
            init = init if init and Path(init).is_file() else None
        trained_heads, outdated = _run_heads(model, args, init, loaded_heads)
        init_metadata = read_weights_metadata(init) if init else {}
    if outdated:
        weights = Path(args.output) / 'model.safetensors'
        logger.warning('the %s of --init %s trained on the backbone that this run changes; '
                       'it is recorded as untrained (its output is not used); train it again '
                       'afterwards: %s', ' and '.join(f'{h} head' for h in outdated),
                       'was' if len(outdated) == 1 else 'were',
                       '; '.join(_retrain_command(h, weights) for h in outdated))
    crop = args.crop or (int(inp['height']), int(inp['width']))
    multiple = int(model.size_multiple)
    if crop[0] % multiple or crop[1] % multiple:
        raise ValueError(f'--crop {crop[0]}x{crop[1]} must be a multiple of {multiple}')
    from relperception.config import SPECS
    largest = (int(SPECS['dense.input_height'].max_value),
               int(SPECS['dense.input_width'].max_value))
    if crop[0] > largest[0] or crop[1] > largest[1]:   # mostly padding, and out of memory
        raise ValueError(f'--crop {crop[0]}x{crop[1]} is larger than the largest network '
                         f'input, {largest[0]}x{largest[1]} (HxW): give a crop within it, e.g. '
                         f"the preset's {int(inp['height'])}x{int(inp['width'])}")
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    _log_initialisation(model, args, output)
    if not args.val_data:
        logger.warning(_no_validation_message(args.task))
    mean, std = inp['mean'], inp['std']
    ignore = int(conf.get('ignore_index', 255))
    eval_modules = []
    param_groups = None
    if args.device_augment and args.task != 'seg':
        raise ValueError('--device-augment is for train seg')
    autocast = _autocast(args)
    make_batch = None
    # the segmentation head's class weights and logit adjustment, kept by a depth run
    inherited = {k: v for k, v in init_metadata.items()
                 if k in (CLASS_WEIGHTS_KEY, ADJUSTMENT_KEY)}
    class_weighted = False

    if args.task == 'seg':
        if model.segmentation_head is None:
            raise ValueError(f'preset {args.config} has no segmentation head')
        num_classes = model.num_classes
        dataset = dense_data.SegmentationFolderDataset(
            args.data, num_classes, None, mean, std, args.seed, ignore, args.max_images,
            exclude_sequences=held_out)
        # each image zoomed to the model's input height first (images may differ in size)
        augment = DenseAugment({'size': crop, 'scale_range': tuple(args.scale_range or
                                                                   (0.75, 1.5)),
                                'base_height': int(inp['height']), 'ignore_index': ignore,
                                **_jitter_conf(args)})
        dataset.augment = augment
        weights = None
        if args.class_weights == 'median':
            from relperception.training.dense_losses import median_frequency_weights

            weights = median_frequency_weights(dataset.class_pixel_counts())
            logger.info('class weights %s', [round(float(w), 2) for w in weights])
        class_weighted = weights is not None
        inherited[CLASS_WEIGHTS_KEY] = json.dumps(weights.tolist() if class_weighted else None)
        inherited.pop(ADJUSTMENT_KEY, None)   # this run retrains the classifier
        if args.device_augment:
            dataset, make_batch = _device_dataset(dataset, augment, args)
        loss_fn = _seg_loss(ignore, weights, make_batch, autocast)
        validate = None
        if args.val_data:
            def seg_validator(source, sequences=None):
                val = dense_data.SegmentationFolderDataset(source, num_classes,
                                                           ignore_index=ignore,
                                                           sequences=sequences)
                return _validator(dense_data.evaluate_segmentation, val.images, val.labels,
                                  conf, args.device)
            validate = _with_reports(seg_validator, args.val_data, args.report_data,
                                     [(held_out_name(seq), seg_validator(args.data, [seq]))
                                      for seq in held_out])
    else:
        if model.depth_head is None:
            raise ValueError(f'preset {args.config} has no depth head')
        if conf['depth_mode'] != 'metric':
            raise ValueError('train depth trains metric depth heads only')

        def bag_options(source, **more):
            # synth: specs take no bag options (refused above when given for them alone)
            if str(source).startswith(dense_data.SYNTH_PREFIX):
                return {}
            return {'image_topic': args.image_topic, 'depth_topic': args.depth_topic, **more}

        images, depths = dense_data.load_depth_source(
            args.data, **bag_options(args.data, max_frames=args.max_images))
        max_depth = dense_data.model_max_depth(conf)
        dense_data.check_depth_range(depths, max_depth, args.data)
        augment = DenseAugment({'size': crop, 'scale_range': tuple(args.scale_range or
                                                                   (0.8, 1.25)),
                                'base_height': int(inp['height']),
                                'hue': 0.0, **_jitter_conf(args)})
        dataset = dense_data.DepthFramesDataset(images, depths, augment, mean, std, args.seed)
        loss_fn = _depth_loss(args.silog_weight, args.l1_weight, autocast)
        scale = float(args.backbone_lr_scale)
        if scale < 0:
            raise ValueError('--backbone-lr-scale must be >= 0')
        for p in model.parameters():
            p.requires_grad_(False)
        for p in model.depth_head.parameters():
            p.requires_grad_(True)
        param_groups = [{'params': list(model.depth_head.parameters())}]
        if scale > 0:
            for p in model.backbone.parameters():
                p.requires_grad_(True)
            param_groups.append({'params': list(model.backbone.parameters()),
                                 'lr_scale': scale})
        else:
            eval_modules.append(model.backbone)
        if model.segmentation_head is not None:
            eval_modules.append(model.segmentation_head)
        validate = None
        if args.val_data:
            def depth_validator(source):
                v_images, v_depths = dense_data.load_depth_source(source, **bag_options(source))
                dense_data.check_depth_range(v_depths, max_depth, source)   # not at step N
                return _validator(dense_data.evaluate_depth, v_images, v_depths, conf,
                                  args.device)
            validate = _with_reports(depth_validator, args.val_data, args.report_data)

    steps = args.steps
    per_epoch = len(dataset) // args.batch_size
    if steps is None and args.epochs is not None:
        steps = max(1, round(args.epochs * per_epoch))
    if steps is None and args.time_budget_min is None:
        raise ValueError('give --steps, --epochs or --time-budget-min')
    budget = None if args.time_budget_min is None else 60.0 * float(args.time_budget_min)
    config = {'task': args.task, 'preset': conf['name'], 'data': str(args.data),
              'val_data': args.val_data, 'report_data': args.report_data,
              'hold_out_sequences': held_out,
              'batch_size': args.batch_size, 'lr': args.lr, 'weight_decay': args.weight_decay,
              'backbone_lr_scale': getattr(args, 'backbone_lr_scale', None),
              'crop': list(crop), 'seed': args.seed, 'init': args.init,
              'init_partial': bool(args.init_partial),
              'device_augment': bool(args.device_augment), 'bf16': bool(args.bf16),
              'ema_decay': args.ema_decay, 'augment': dict(augment.conf),
              'command': ' '.join(sys.argv)}
    weights_metadata = {'preset': conf['name'], 'task': args.task, 'data': str(args.data),
                        TRAINED_HEADS_KEY: ','.join(trained_heads), **inherited}
    keep_best = _best_keeper(args.task, output, weights_metadata) if validate else None
    trainer = Trainer(model, loss_fn, output, device=args.device, lr=args.lr,
                      weight_decay=args.weight_decay, total_steps=steps,
                      warmup_steps=args.warmup_steps, schedule=args.schedule,
                      grad_clip=args.grad_clip, checkpoint_every=args.checkpoint_every,
                      time_budget_s=budget, seed=args.seed, config=config,
                      param_groups=param_groups, validate_fn=validate,
                      validate_every=args.val_every or args.checkpoint_every,
                      progress=not args.no_progress,
                      eval_modules=eval_modules, epoch_end_events=not args.device_augment,
                      on_validation=keep_best, ema_decay=args.ema_decay,
                      weights_metadata=weights_metadata)
    start = time.monotonic()
    result = trainer.fit(dataset, batch_size=args.batch_size, resume=args.resume,
                         num_workers=args.workers)
    if result.already_finished:
        return finished_run_summary(output, result)
    metrics = dict(result.history[-1]) if result.history else {}
    metrics.update({f'train_{k}': v for k, v in result.last_logs.items()})
    weights_path = trainer.export_weights(
        output / 'model.safetensors', {**weights_metadata, 'metrics': json.dumps(metrics)})
    summary = {'weights': str(weights_path), 'checkpoint': str(result.checkpoint),
               'step': result.step, 'epoch': result.epoch, 'finished': result.finished,
               'interrupted': result.interrupted,
               'seconds_this_run': time.monotonic() - start, 'metrics': metrics,
               'history': result.history, 'config': config,
               'trained_heads': list(trained_heads)}
    best = output / BEST_METRICS_NAME
    if validate and best.is_file():
        summary['best'] = json.loads(best.read_text(encoding='utf-8'))
    write_text_atomic(output / 'metrics.json', json.dumps(summary, indent=2))
    if not args.val_data:
        logger.warning(_no_validation_message(args.task))
    elif class_weighted:
        best_weights = output / BEST_WEIGHTS_NAME
        logger.info('class weights make the trained head prefer rare classes; `relperception '
                    'train seg-adjust --config %s --init %s --val-data %s%s -o DIR` removes '
                    'that preference (logit adjustment, tau chosen on the validation data)',
                    args.config, best_weights if best_weights.is_file() else weights_path,
                    args.val_data,
                    f' --data {args.data} --hold-out-sequence {" ".join(held_out)}'
                    if held_out else '')
    if args.ship is not None and result.interrupted is None:
        summary['shipped'] = str(ship_weights(args.ship, weights_path, conf['name'], args.task,
                                              metrics, config, half=args.ship_half))
    return summary


#: A name ``--ship`` accepts: the stem of a file in the weights folder, no path parts.
SHIP_NAME_PATTERN = r'[A-Za-z0-9][A-Za-z0-9_.-]*'


def check_plain_ship_name(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is a plain file-name stem (:data:`SHIP_NAME_PATTERN`).

    The shipped file is ``<weights folder>/<name>.safetensors``: a name with path parts (``/``,
    ``..``) would write outside the weights folder, an empty one a hidden ``.safetensors``.
    """
    import re

    if not isinstance(name, str) or re.fullmatch(SHIP_NAME_PATTERN, name) is None:
        raise ValueError(f'--ship {name!r} is not a plain name (letters, digits, then also _ . '
                         '-; no path parts): the weights are shipped as '
                         'relperception/weights/NAME.safetensors')


def check_ship_name(name, task: str, config) -> None:
    """Raise ``ValueError`` unless the weights a run trains may be shipped as ``name``.

    The package loads shipped weights by the weights name of a preset (``models.presets``:
    ``weights``; a LoFTR preset's own name), so ``name`` must be one a preset of the same kind
    loads (dense for ``seg``, ``depth``, ``seg-adjust``; LoFTR for ``matcher``) and that preset
    must have the architecture of ``config`` (the run's ``--config``): otherwise its users
    would load weights that do not fit. None (no ``--ship``) passes.
    """
    if name is None:
        return
    check_plain_ship_name(name)
    if task == 'matcher':
        from relperception.matching.loftr.presets import preset_conf, PRESETS as LOFTR_PRESETS

        shipped = {preset: preset for preset in LOFTR_PRESETS}
        kind = 'LoFTR'

        def architecture(preset):
            return preset_conf(str(preset))
    else:
        from relperception.models.presets import load_model_config, PRESETS as DENSE_PRESETS

        shipped = {conf['weights']: preset for preset, conf in DENSE_PRESETS.items()
                   if conf.get('weights')}
        kind = 'dense'

        def architecture(preset):
            return load_model_config(preset)['model']
    if name not in shipped:
        raise ValueError(f'--ship {name}: no {kind} preset loads weights of that name (`train '
                         f'{task}` trains {kind} weights; their shipped names: '
                         f'{", ".join(sorted(shipped))})')
    if architecture(shipped[name]) != architecture(config):
        raise ValueError(f'--ship {name}: preset {shipped[name]} loads those weights and its '
                         f'architecture differs from --config {config}: ship the weights under '
                         'the name of a preset with the architecture they were trained in')


def ship_weights(name: str, weights_path: Path, preset: str, task: str, metrics: dict,
                 config: dict, half: bool = False, weights_dir=None) -> Path:
    """Copy weights into the package's ``weights/`` folder and register them in the manifest.

    Metrics of earlier tasks already in the manifest entry (e.g. ``seg`` before ``depth``) are
    kept under their task name. With ``half`` floating-point tensors are stored as float16.
    ``weights_dir`` defaults to the package's ``relperception/weights``.

    Raises:
        ValueError: ``name`` is not a plain name (:func:`check_plain_ship_name`).
    """
    from relperception.models.weights import (
        add_to_manifest, load_state_dict_file, read_manifest, read_metadata, save_weights,
        WEIGHTS_DIR)

    check_plain_ship_name(name)
    folder = Path(weights_dir or WEIGHTS_DIR)
    target = folder / f'{name}.safetensors'
    if half:
        state = {k: v.half() if v.is_floating_point() else v
                 for k, v in load_state_dict_file(weights_path).items()}
        meta = dict(read_metadata(weights_path))
        meta['dtype'] = 'float16'
        save_weights(state, target, metadata=meta)
    else:
        shutil.copyfile(weights_path, target)
    previous = read_manifest(folder).get(name, {})
    all_metrics = dict(previous.get('metrics', {}))
    all_metrics[task] = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    commands = dict(previous.get('commands', {}))
    commands[task] = config.get('command', '')
    add_to_manifest(name, target, folder, preset=preset, metrics=all_metrics, commands=commands,
                    model_card=f'{name}.md', dtype='float16' if half else 'float32')
    logger.info('shipped %s -> %s', weights_path, target)
    return target


#: the head (``models.trained_heads.HEAD_NAMES``) each dense task trains
_TASK_HEADS = {'seg': 'segmentation', 'depth': 'depth'}


def _task_head(task: str) -> str:
    """Return the name of the head (``models.trained_heads.HEAD_NAMES``) a dense task trains."""
    return _TASK_HEADS[task]


def _retrain_command(head: str, weights: Path) -> str:
    """Return the quoted ``train <task> --init <weights>`` command that trains ``head``."""
    task = next(t for t, h in _TASK_HEADS.items() if h == head)
    return f'`train {task} --init {weights}`'


def _model_heads(model) -> list:
    """Return the names of the heads ``model`` (a ``DenseModel``) has."""
    return [name for name, head in (('depth', model.depth_head),
                                    ('segmentation', model.segmentation_head))
            if head is not None]


def _trains_backbone(args: argparse.Namespace) -> bool:
    """Return True when the run changes the backbone (``seg``; ``depth`` with a positive scale)."""
    return args.task == 'seg' or float(getattr(args, 'backbone_lr_scale', 0.0)) > 0


def _run_heads(model, args: argparse.Namespace, init, loaded=None) -> tuple:
    """Return ``(trained, outdated)``: sorted head names once this run is done.

    ``trained``: the run's own head, and the heads the weights ``init`` (None: none) record as
    trained (their ``trained_heads`` metadata; a file without it counts as having every head
    trained, ``models.weights.read_trained_heads``) and that were loaded from it (``loaded``,
    the heads ``--init-partial`` loaded whole; None: all) unless they are ``outdated``: a head
    learns on the backbone's features, so once the run changes the backbone
    (:func:`_trains_backbone`) a head of ``init`` it does not train no longer fits and is
    recorded as untrained.
    """
    from relperception.models.weights import read_trained_heads

    heads = set(_model_heads(model))
    own = _task_head(args.task)
    from_init = set()
    if init:
        recorded = read_trained_heads(init)
        from_init = set(heads) if recorded is None else set(recorded) & heads
        if loaded is not None:
            from_init &= set(loaded)
    outdated = from_init - {own} if _trains_backbone(args) else set()
    trained = (({own} | from_init) - outdated) & heads
    return tuple(sorted(trained)), tuple(sorted(outdated))


def _log_initialisation(model, args: argparse.Namespace, output: Path) -> None:
    """Log one line naming what starts from random initialisation (no ``--init``)."""
    if args.init:
        return
    if args.resume is not False and (args.resume is not True
                                     or (output / 'last.pt').is_file()):
        return   # the checkpoint holds the trained state
    heads = _model_heads(model)
    own = _task_head(args.task)
    others = [h for h in heads if h != own]
    parts = ', '.join(['backbone'] + [f'{h} head' for h in heads])
    untrained = ' and '.join(f'the {h} head' for h in others)
    if args.task == 'seg':
        retrain = '; '.join(_retrain_command(h, output / 'model.safetensors') for h in others)
        logger.info('no --init: %s start from random initialisation; this run trains the '
                    'backbone and the segmentation head%s', parts,
                    f', {untrained} stays untrained (recorded in the weights; train it with '
                    f'{retrain})' if others else '')
    elif _trains_backbone(args):
        logger.info('no --init: %s start from random initialisation; this run trains the '
                    'backbone and the depth head%s', parts,
                    f', {untrained} stays untrained (recorded in the weights)' if others else '')
    else:
        logger.warning('no --init: %s start from random initialisation and the backbone is '
                       'frozen (--backbone-lr-scale 0): the depth head learns on random '
                       'features%s; pass --init with the weights of `train seg` or a positive '
                       '--backbone-lr-scale', parts,
                       f' and {untrained} stays untrained' if others else '')


def _no_validation_message(task: str) -> str:
    """Return the line that says a run without ``--val-data`` reports no quality."""
    if task == 'seg':
        what, gain = 'a CamVid-layout folder (images/ + labels/, e.g. a validation split)', 'mIoU'
    else:
        what = ('RGB-D frames not trained on (a bag with image + depth topics, or synth:SEEDS '
                'scenes such as synth:1000-1001:10)')
        gain = 'depth errors'
    return (f'no --val-data: no validation metrics; pass {what} as --val-data to get {gain} '
            'at every checkpoint in metrics.json')


def _validator(evaluate, images, targets, conf, device):
    def validate(model):
        return evaluate(model, images, targets, conf, device)
    return validate


def _with_reports(make_validator, val_source: str, report_sources, more_reports=()):
    """Return a validator of ``val_source`` that also scores every report source.

    ``make_validator(source)`` loads one source and returns its ``validate(model) -> dict``.
    The report metrics are added as ``report/<name>/<metric>`` (``<name>`` the source's
    :func:`report_names` entry), so that the checkpoint is still chosen on ``val_source``.
    ``more_reports``: ``(name, validate)`` pairs scored the same way (held-out sequences).
    """
    validate = make_validator(val_source)
    reports = [(name, make_validator(source))
               for name, source in zip(report_names(report_sources or ()),
                                       report_sources or ())] + list(more_reports)
    if not reports:
        return validate

    def validate_with_reports(model):
        metrics = dict(validate(model))
        for name, report in reports:
            metrics.update({f'{REPORT_PREFIX}{name}/{k}': v for k, v in report(model).items()})
        return metrics
    return validate_with_reports


def report_names(sources) -> list:
    """Return the metric name of each ``--report-data`` source: its last path part.

    A trailing ``/`` is ignored (``synth:`` sources are their own name); a name given twice
    gets ``-2``, ``-3``, ... appended; a source without a name part (``/``) is its text with
    ``/`` replaced by ``_``.
    """
    names = []
    for source in sources:
        base = Path(str(source).rstrip('/')).name or str(source).replace('/', '_')
        name, count = base, 1
        while name in names:
            count += 1
            name = f'{base}-{count}'
        names.append(name)
    return names


def _autocast(args: argparse.Namespace):
    """Return a context factory: bfloat16 autocast on ``--device`` with ``--bf16``, else none."""
    import contextlib

    import torch
    from relperception.runtime.devices import torch_device

    if not args.bf16:
        return contextlib.nullcontext
    device_type = torch_device(args.device).type
    return lambda: torch.autocast(device_type=device_type, dtype=torch.bfloat16)


def _jitter_conf(args: argparse.Namespace) -> dict:
    """Return the ``DenseAugment`` colour keys of ``--colour-jitter`` ({} when not given)."""
    from relperception.training.augment import COLOUR_JITTER_KEYS

    return {} if args.colour_jitter is None else dict(zip(COLOUR_JITTER_KEYS, args.colour_jitter))


def _device_dataset(dataset, augment, args: argparse.Namespace):
    """Return ``(DeviceSegmentationData, its make_batch)`` of a loaded segmentation dataset."""
    import torch
    from relperception.runtime.devices import torch_device
    from relperception.training.device_augment import DeviceSegmentationData

    device = torch_device(args.device)
    if device.type == 'cuda':
        torch.backends.cudnn.benchmark = True   # fixed crop size: pick the fastest kernels
    data = DeviceSegmentationData(dataset.images, dataset.labels, device, augment.conf,
                                  dataset.mean, dataset.std, args.seed)
    return data, data.make_batch


#: Metric that picks the best validation of a task, and whether larger is better.
BEST_METRIC = {'seg': ('miou', True), 'depth': ('abs_rel', False)}
#: Files of the best validation in the run folder: its weights and its metrics.
BEST_WEIGHTS_NAME = 'best.safetensors'
BEST_METRICS_NAME = 'best_metrics.json'


def _best_keeper(task: str, output: Path, metadata: dict):
    """Return an ``on_validation`` callback that keeps the weights of the best validation.

    The best so far is read from the trainer's history (restored on ``--resume``); an
    improvement writes ``best.safetensors`` (``metadata`` plus the metrics) and
    ``best_metrics.json`` (``step``, ``epoch``, ``metric``, ``metrics``, ``weights``).
    """
    import math

    key, larger = BEST_METRIC[task]

    def better(value, other):
        return value > other if larger else value < other

    def keep(trainer, metrics):
        value = metrics.get(key)
        if value is None or not math.isfinite(value):
            return
        earlier = [h[key] for h in trainer.history[:-1]
                   if key in h and math.isfinite(h[key])]
        if earlier and not all(better(value, e) for e in earlier):
            return
        path = trainer.export_weights(output / BEST_WEIGHTS_NAME,
                                      {**metadata, 'metrics': json.dumps(metrics)})
        record = {'step': trainer.step, 'epoch': trainer.epoch, 'metric': key,
                  'value': value, 'metrics': metrics, 'weights': str(path)}
        write_text_atomic(output / BEST_METRICS_NAME, json.dumps(record, indent=2))
        logger.info('best %s so far %.4f at step %d: %s', key, value, trainer.step, path)
    return keep


def _seg_loss(ignore: int, weights, make_batch=None, autocast=None):
    import contextlib

    from relperception.training.dense_losses import segmentation_loss

    autocast = autocast or contextlib.nullcontext

    def loss_fn(model, batch):
        if make_batch is not None:
            batch = make_batch(batch)
        with autocast():
            logits = model(batch['image'])['logits']
        loss = segmentation_loss(logits.float(), batch['labels'], ignore, weights)
        return loss, {}
    return loss_fn


def _depth_loss(silog_weight: float, l1_weight: float, autocast=None):
    import contextlib

    from relperception.training.dense_losses import depth_loss

    autocast = autocast or contextlib.nullcontext

    def loss_fn(model, batch):
        with autocast():
            pred = model(batch['image'])['depth']
        return depth_loss(pred.float(), batch['depth'], None, silog_weight, l1_weight)
    return loss_fn
