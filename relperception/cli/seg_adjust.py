# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception train seg-adjust``: remove the class-weight bias of segmentation weights.

``train seg`` weights the cross entropy by class (median frequency, the default), which makes
the trained head prefer rare classes everywhere. This step subtracts ``tau * log(w_c)`` from
the logits (``training.logit_adjustment``), choosing ``tau`` on ``--val-data`` among
``--taus`` (or taking ``--tau``), and folds the offsets into the classifier's bias: the written
weights have the same tensors, size and speed, and an unchanged depth head.

Writes ``<output>/model.safetensors`` (metadata ``logit_adjustment``: tau, class weights,
offsets) and ``<output>/metrics.json`` (every tau's validation and ``--report-data`` metrics,
the chosen one under ``metrics``). The class weights are read from the weights' metadata
(``train seg`` records them) or, for weights that do not record them, recomputed from
``--data``, the training folder. ``--hold-out-sequence SEQ`` scores the frames ``SEQ_*`` of
``--data`` at every tau as ``report/heldout-SEQ`` (weights trained with ``train seg
--hold-out-sequence SEQ``: the leave-one-sequence-out measurement, adjusted).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
import sys

from relperception.atomic_files import write_text_atomic
from relperception.cli.common import int_at_least

logger = logging.getLogger(__name__)

#: Weights-metadata key of the class weights ``train seg`` trained with (JSON list, or none).
CLASS_WEIGHTS_KEY = 'class_weights'
#: Weights-metadata key written by this step (JSON: tau, class weights, offsets).
ADJUSTMENT_KEY = 'logit_adjustment'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``train seg-adjust``."""
    from relperception.cli.train import add_hold_out_argument
    from relperception.models.presets import preset_for_backbone
    from relperception.training.logit_adjustment import DEFAULT_TAUS

    default = preset_for_backbone('conv')
    parser.add_argument('--config', default=default,
                        help=f'model preset name or YAML file (default {default})')
    parser.add_argument('--init', required=True,
                        help="the trained weights to adjust (a run's best.safetensors, or a "
                             'shipped file)')
    parser.add_argument('--data',
                        help='the training folder the weights were trained on (CamVid '
                             'layout), to recompute their class weights when the weights do '
                             'not record them')
    parser.add_argument('--val-data', required=True,
                        help='labelled folder that chooses tau (CamVid layout)')
    parser.add_argument('--taus', type=float, nargs='+', metavar='TAU',
                        help=f'tau values to score (default {" ".join(map(str, DEFAULT_TAUS))})')
    parser.add_argument('--tau', type=float,
                        help='use this tau instead of choosing one (scored next to tau 0; not '
                             'with --taus)')
    parser.add_argument('--report-data', nargs='+', metavar='SOURCE',
                        help='more labelled folders scored at every tau, never choosing it')
    add_hold_out_argument(parser, 'that the weights were trained without (train seg '
                                  '--hold-out-sequence), scored at every tau; needs --data')
    parser.add_argument('-o', '--output', required=True, help='output folder')
    parser.add_argument('--ship', metavar='NAME',
                        help='copy the adjusted weights to relperception/weights/'
                             'NAME.safetensors and register them in the manifest')
    parser.add_argument('--device', default='cpu', help="torch device: 'cpu' (default), 'cuda'")
    parser.add_argument('--num-threads', type=int_at_least(1), help='torch CPU threads')


def run(args: argparse.Namespace) -> int:
    """Adjust, score and write the weights; return 0."""
    import torch
    from relperception.cli.train import (check_ship_name, held_out_name, hold_out_sequences,
                                         report_names, REPORT_PREFIX, ship_weights)
    from relperception.models.dense import build_dense_model
    from relperception.models.presets import load_model_config
    from relperception.models.weights import load_weights, read_weights_metadata, save_weights
    from relperception.training import dense_data
    from relperception.training.logit_adjustment import (DEFAULT_TAUS, fold_logit_offsets,
                                                         logit_offsets, score_logit_offsets)

    if args.tau is not None and args.taus is not None:
        raise ValueError('--tau and --taus exclude each other: --tau uses one tau (scored next '
                         'to tau 0), --taus chooses among several')
    taus = sorted({float(t) for t in ([0.0, args.tau] if args.tau is not None else
                                      args.taus or DEFAULT_TAUS)})
    for tau in taus:
        logit_offsets([1.0], tau)          # range check before anything loads
    check_ship_name(args.ship, 'seg-adjust', args.config)
    if (Path(args.output) / 'last.pt').is_file():
        raise ValueError(f'-o {args.output} holds a training run (last.pt): the adjusted '
                         'weights would replace its model.safetensors; give another -o folder')
    held_out = hold_out_sequences(args)
    if held_out and not args.data:
        raise ValueError('--hold-out-sequence needs --data, the folder holding those '
                         'sequences (the training folder)')
    if args.num_threads:
        torch.set_num_threads(int(args.num_threads))
    conf = load_model_config(args.config)
    model = build_dense_model(conf)
    if model.segmentation_head is None:
        raise ValueError(f'preset {args.config} has no segmentation head')
    load_weights(model, args.init)     # a clear message for a missing or unreadable file
    metadata = read_weights_metadata(args.init)
    if ADJUSTMENT_KEY in metadata:
        tau = json.loads(metadata[ADJUSTMENT_KEY]).get('tau')
        raise ValueError(f'{args.init} is already logit-adjusted (tau {tau}); adjust the '
                         'weights as trained')
    model.to(args.device).eval()
    ignore = int(conf.get('ignore_index', 255))
    weights = _class_weights(metadata, args.data, model.num_classes, ignore, held_out)
    offsets = {tau: logit_offsets(weights, tau) for tau in taus}
    # name -> (folder, sequences of it or None)
    sources = {'val': (args.val_data, None)}
    sources.update((f'{REPORT_PREFIX}{name}', (source, None)) for name, source in
                   zip(report_names(args.report_data or ()), args.report_data or ()))
    sources.update((f'{REPORT_PREFIX}{held_out_name(seq)}', (args.data, [seq]))
                   for seq in held_out)
    by_tau = {tau: {} for tau in taus}
    for name, (source, sequences) in sources.items():
        data = dense_data.SegmentationFolderDataset(source, model.num_classes,
                                                    ignore_index=ignore, sequences=sequences)
        scores = score_logit_offsets(model, data.images, data.labels, conf, offsets,
                                     args.device)
        for tau in taus:
            by_tau[tau][name] = scores[tau]
    chosen = args.tau if args.tau is not None else max(
        taus, key=lambda t: (by_tau[t]['val']['miou'], -t))
    for tau in taus:
        logger.info('tau %.2f: %s%s', tau, '  '.join(
            f'{name} mIoU {by_tau[tau][name]["miou"]:.4f}' for name in sources),
            '  (chosen)' if tau == chosen else '')
    fold_logit_offsets(model, offsets[chosen])
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    adjustment = {'tau': chosen, 'class_weights': [float(w) for w in weights],
                  'offsets': [float(v) for v in offsets[chosen]], 'chosen_on': args.val_data}
    metrics = dict(by_tau[chosen]['val'])
    for name in list(sources)[1:]:
        metrics.update({f'{name}/{k}': v for k, v in by_tau[chosen][name].items()})
    path = save_weights(model, output / 'model.safetensors',
                        metadata={**metadata, ADJUSTMENT_KEY: json.dumps(adjustment),
                                  'metrics': json.dumps(metrics)})
    config = {'init': args.init, 'val_data': args.val_data, 'data': args.data,
              'report_data': args.report_data, 'hold_out_sequences': held_out, 'taus': taus,
              'command': ' '.join(sys.argv)}
    summary = {'weights': str(path), 'tau': chosen, 'adjustment': adjustment,
               'metrics': metrics, 'by_tau': {str(t): by_tau[t] for t in taus},
               'config': config}
    if args.ship is not None:
        summary['shipped'] = str(ship_weights(args.ship, path, conf['name'], 'seg-adjust',
                                              metrics, config))
    write_text_atomic(output / 'metrics.json', json.dumps(summary, indent=2))
    logger.info('weights: %s (tau %.2f, val mIoU %.4f, as trained %.4f)', path, chosen,
                metrics['miou'], by_tau[0.0]['val']['miou'] if 0.0 in by_tau else float('nan'))
    return 0


def _class_weights(metadata: dict, data, num_classes: int, ignore: int,
                   held_out=()) -> list:
    """Return the class weights the weights were trained with (metadata, else from ``data``).

    Recomputed from ``data``, the frames of the ``held_out`` sequences are left out, as
    ``train seg --hold-out-sequence`` left them out of its counts.
    """
    recorded = metadata.get(CLASS_WEIGHTS_KEY)
    if recorded is not None:
        weights = json.loads(recorded)
        if weights is None:
            raise ValueError('these weights were trained without class weights '
                             '(--class-weights none): there is no bias to remove')
        if data and not held_out:
            logger.info('class weights from the weights file; --data is not needed')
    elif data:
        from relperception.training.dense_data import SegmentationFolderDataset
        from relperception.training.dense_losses import median_frequency_weights

        counts = SegmentationFolderDataset(data, num_classes, ignore_index=ignore,
                                           exclude_sequences=held_out).class_pixel_counts()
        weights = median_frequency_weights(counts).tolist()
    else:
        raise ValueError('the weights do not record their class weights; give --data, the '
                         'training folder they were trained on with median-frequency weights')
    if len(weights) != num_classes:
        raise ValueError(f'{len(weights)} class weights for {num_classes} classes')
    logger.info('class weights %s', [round(float(w), 2) for w in weights])
    return weights
