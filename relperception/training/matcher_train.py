# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Train the LoFTR matcher on homographies, 3-D scene pairs and negatives (``train matcher``).

Each step draws image pairs from :class:`~relperception.training.homography.HomographyPairDataset`,
computes the exact coarse ground truth of the homography, and minimises LoFTR's coarse focal
loss on the dual-softmax confidence matrix plus the std-weighted fine L2 loss on the sub-window
expectation of the ground-truth coarse matches (at most ``max_fine_matches`` per image), using
the model's training hooks ``extract_features``, ``coarse_confidence`` and ``fine_refine``.
The generic :class:`~relperception.training.loop.Trainer` runs the optimisation (AdamW, warm-up
+ cosine schedule, checkpoints, resume, time budget).

Data (``data_paths``): image files and folders (png/jpg, read as grey) and/or synthetic scenes
``synth:SEEDS[:FRAMES[:WxH]]`` (``relperception.data.synthetic``, licence-free; see
``dense_data.parse_synthetic_spec``). Held-out evaluation (``evaluate_homography``) measures the
precision of the model's own matches (``mask``) against the true homography.

Mixed training (``scene_pairs``, negatives): the pairs come from
:class:`~relperception.training.scene_pairs.MixedMatcherPairDataset` -- the homographies above,
two views of synthetic rooms with depth-warp ground truth (LoFTR's ScanNet supervision) and
negative pairs of unrelated sources -- and the loss adds the unmatched-cell term of
:mod:`~relperception.training.loftr_losses`, so that cells without a correspondence (out of
view, occluded, or in an unrelated image) learn a low confidence. Validation then also reports
the precision on held-out scene pairs and the match count on held-out negative pairs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import cv2
import numpy as np
from relperception.atomic_files import write_text_atomic
from relperception.training.homography import (
    coarse_matches_from_homography, fine_offsets_gt, HomographyConfig, HomographyPairDataset,
    PhotometricConfig, warp_points)
from relperception.training.loftr_losses import loftr_loss, LoFTRLossConfig
from relperception.training.scene_pairs import (
    evaluate_scene_and_negative_pairs, load_grouped_sources, load_scene_views,
    mixed_ground_truth, MixedMatcherPairDataset, PairMix, synthetic_group)
import torch

logger = logging.getLogger(__name__)

PAIRS_PER_IMAGE = 50
"""Dataset samples per source image and epoch (each with a new homography)."""

DEFAULT_VAL_DATA = ('synth:900-901:4:640x480',)
"""Held-out validation sources when none are given (synthetic seeds kept out of training)."""

DEFAULT_SCALES = (0.5, 0.5, 0.6, 1.0)
"""Default per-step batch scales of ``train_matcher`` (mostly half resolution)."""

DEFAULT_PHOTOMETRIC = PhotometricConfig()
"""Default photometric augmentation of the training pairs."""

DEFAULT_VAL_SCENES = ('synth:900-901:12',)
"""Held-out scenes for the scene- and negative-pair validation of mixed training."""

DEFAULT_UNMATCHED_WEIGHT = 10.0
"""Weight of the unmatched-cell loss when scene or negative pairs are trained (else 0)."""

DEFAULT_UNMATCHED_GAMMA = 1.0
"""Focal gamma of the unmatched-cell loss when scene or negative pairs are trained.

Below the positive term's 2, so that cells just above the matcher's threshold still get a
useful gradient (with gamma 2 it vanishes quadratically towards confidence 0).
"""


def load_sources(data_paths: Union[str, Sequence[Union[str, np.ndarray]]]
                 ) -> List[Union[str, np.ndarray]]:
    """Expand training sources into image paths and in-memory grey images.

    Args:
        data_paths: image files, folders, ``synth:SEEDS[:FRAMES[:WxH]]`` specs and (H, W)
            uint8 grey arrays (passed through).

    Returns:
        List of paths (str) and (H, W) uint8 grey arrays, for ``HomographyPairDataset``.

    Raises:
        ValueError: for a malformed spec or a missing path.
    """
    from relperception.training.dense_data import (
        parse_synthetic_spec, SYNTH_PREFIX, synthetic_frames)

    if isinstance(data_paths, (str, Path)):
        data_paths = [data_paths]
    sources: List[Union[str, np.ndarray]] = []
    for item in data_paths:
        if isinstance(item, np.ndarray):
            sources.append(item)
            continue
        item = str(item)
        if item.startswith(SYNTH_PREFIX):
            images, _ = synthetic_frames(**parse_synthetic_spec(item))
            sources.extend(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY) for rgb in images)
        else:
            if not Path(item).exists():
                raise ValueError(f'training data {item} does not exist')
            sources.append(item)
    if not sources:
        raise ValueError('no training data given')
    return sources


def rescale_batch(batch: Dict[str, torch.Tensor], factor: float) -> Dict[str, torch.Tensor]:
    """Resize a homography batch by ``factor`` and adapt ``H_1_0`` and the masks.

    With pixel centres at integers a pixel ``x`` moves to ``(x + 0.5) * factor - 0.5``, so
    ``H' = S H S^-1`` with that scaling ``S``.

    Args:
        batch: ``image0``/``image1`` (B, 1, H, W), ``H_1_0`` (B, 3, 3), optional ``mask0``/
            ``mask1`` (B, H, W) and ``image_scale`` (B, 2) (scene pairs of
            ``scene_pairs.MixedMatcherPairDataset``: multiplied by the per-axis factor; their
            depth maps and camera matrices are kept at the rendered size).
        factor: scale factor (> 0); each side becomes the multiple of 8 nearest to
            ``side * factor``, at least 16 (:func:`scaled_size`: what LoFTR takes), and the
            homography follows the sizes so rounded.

    Returns:
        The rescaled batch (the input itself when ``factor`` is 1 or the size is unchanged).

    Raises:
        ValueError: for a factor that is not > 0.
    """
    if factor == 1.0:
        return batch
    height, width = batch['image0'].shape[-2:]
    size = scaled_size((height, width), factor)
    if size == (height, width):
        return batch
    out = dict(batch)
    for key in ('image0', 'image1'):
        out[key] = torch.nn.functional.interpolate(batch[key], size=size, mode='bilinear',
                                                   align_corners=False, antialias=factor < 1)
    for key in ('mask0', 'mask1'):
        if key in batch:
            mask = torch.nn.functional.interpolate(batch[key][:, None].float(), size=size,
                                                   mode='nearest')
            out[key] = mask[:, 0] > 0.5
    fx, fy = size[1] / width, size[0] / height
    if 'image_scale' in batch:   # scene pairs: depth maps and K stay, the GT maps the pixels
        out['image_scale'] = batch['image_scale'] * batch['image_scale'].new_tensor([fx, fy])
    S = batch['H_1_0'].new_tensor([[fx, 0.0, 0.5 * fx - 0.5], [0.0, fy, 0.5 * fy - 0.5],
                                   [0.0, 0.0, 1.0]])
    out['H_1_0'] = S @ batch['H_1_0'] @ torch.linalg.inv(S)
    return out


def scaled_size(size: Tuple[int, int], factor: float) -> Tuple[int, int]:
    """Return (height, width) ``size`` times ``factor``, each side a multiple of 8 (>= 16).

    Raises:
        ValueError: for a factor that is not > 0.
    """
    if not float(factor) > 0:
        raise ValueError(f'scale factor must be > 0, got {factor}')
    return tuple(max(16, 8 * int(round(int(side) * float(factor) / 8))) for side in size)


def make_loss_fn(loss_config: Optional[LoFTRLossConfig] = None, max_fine_matches: int = 128,
                 scales: Sequence[float] = (1.0,)):
    """Return ``loss_fn(model, batch) -> (loss, logs)`` for the ``Trainer``.

    Args:
        loss_config: loss weights (``LoFTRLossConfig``).
        max_fine_matches: ground-truth coarse matches per image used for the fine loss (a
            random subset; the fine stage costs time proportional to it).
        scales: each step resizes its batch by one of these factors (``rescale_batch``, to
            multiples of 8), drawn uniformly with torch's generator; smaller scales make steps
            cheaper.

    Returns:
        The loss function; ``batch`` is a collated ``HomographyPairDataset`` batch or a
        ``scene_pairs.MixedMatcherPairDataset`` batch (ground truth by pair kind,
        ``scene_pairs.mixed_ground_truth``; cells without a correspondence feed the unmatched
        term of ``loss_config``); logs are ``loss_c``, ``loss_f``, ``loss_u`` (unmatched term,
        when on) and ``gt_matches`` (mean per image).
    """
    cfg = loss_config or LoFTRLossConfig()
    scales = tuple(float(s) for s in scales)
    if not scales or min(scales) <= 0:
        raise ValueError(f'scales must be positive factors, got {scales}')

    def loss_fn(model, batch):
        if len(scales) > 1:
            batch = rescale_batch(batch, scales[int(torch.randint(len(scales), ()))])
        else:
            batch = rescale_batch(batch, scales[0])
        feats = model.extract_features(batch['image0'], batch['image1'])
        conf = model.coarse_confidence(feats['feat_c0'], feats['feat_c1'])
        offset = float(model.conf.get('keypoint_offset', 0.0))
        if 'kind' in batch:
            gt = mixed_ground_truth(batch, feats['hw0_c'], feats['hw1_c'],
                                    scale=float(model.stride_c), offset=offset)
        else:
            gt = coarse_matches_from_homography(
                batch['H_1_0'], feats['hw0_c'], feats['hw1_c'], scale=float(model.stride_c),
                offset=offset, mask0=batch.get('mask0'), mask1=batch.get('mask1'))
        b_ids, i_ids, j_ids = gt['b_ids'], gt['i_ids'], gt['j_ids']
        keep = _subsample_per_image(b_ids, len(batch['image0']), max_fine_matches)
        b_ids, i_ids, j_ids = b_ids[keep], i_ids[keep], j_ids[keep]
        expectation = target = None
        if len(b_ids):
            expectation = model.fine_refine(feats, b_ids, i_ids, j_ids)
            target = fine_offsets_gt(gt['w_pt0'], gt['pt1'], b_ids, i_ids, j_ids,
                                     fine_scale=float(model.stride_f),
                                     radius=float(model.window // 2))
        loss, logs = loftr_loss(conf, gt['conf_matrix_gt'], expectation, target, cfg,
                                unmatched0=~gt['matchable0'], unmatched1=~gt['matchable1'])
        logs['gt_matches'] = float(len(gt['b_ids'])) / max(len(batch['image0']), 1)
        return loss, logs

    return loss_fn


def _subsample_per_image(b_ids: torch.Tensor, batch: int, limit: int) -> torch.Tensor:
    """Return indices of at most ``limit`` random entries per batch item (torch's RNG)."""
    keep = []
    for b in range(batch):
        idx = torch.nonzero(b_ids == b, as_tuple=True)[0]
        if len(idx) > limit:
            idx = idx[torch.randperm(len(idx), device=idx.device)[:limit]]
        keep.append(idx)
    return torch.cat(keep) if keep else b_ids.new_zeros(0)


@torch.no_grad()
def evaluate_homography(model, pairs: Sequence[Dict[str, torch.Tensor]],
                        thresholds_px: Sequence[float] = (3.0, 5.0), batch_size: int = 4,
                        device: Union[str, torch.device] = 'cpu') -> Dict[str, float]:
    """Precision of the model's matches on homography pairs with known ``H_1_0``.

    A match (``mask`` true) is correct within ``t`` px when ``|H_1_0(keypoints0) -
    keypoints1| <= t``.

    Args:
        model: a ``LoFTR`` (run in eval mode; its mode is restored).
        pairs: items of ``HomographyPairDataset`` (``image0``, ``image1``, ``H_1_0``).
        thresholds_px: error thresholds in pixels.
        batch_size: pairs per forward pass.
        device: torch device of the model.

    Returns:
        dict with ``precision_<t>px`` (pooled over all matches; 0 without matches),
        ``matches_per_pair``, ``correct_per_pair_<t>px``, ``median_error_px`` (inf without
        matches) and ``pairs``.

    Raises:
        ValueError: without pairs.
    """
    if not len(pairs):
        raise ValueError('no evaluation pairs')
    was_training = model.training
    model.eval()
    errors = []
    try:
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start:start + batch_size]
            image0 = torch.stack([p['image0'] for p in chunk]).to(device)
            image1 = torch.stack([p['image1'] for p in chunk]).to(device)
            H = torch.stack([p['H_1_0'] for p in chunk]).to(device).double()
            out = model(image0, image1)
            warped, ok = warp_points(H, out['keypoints0'].double())
            err = (warped - out['keypoints1'].double()).norm(dim=-1)
            err = torch.where(ok, err, torch.full_like(err, float('inf')))
            for b in range(len(chunk)):
                errors.append(err[b][out['mask'][b]].cpu().numpy())
    finally:
        model.train(was_training)
    pooled = np.concatenate(errors) if errors else np.zeros(0)
    count = len(pairs)
    metrics = {'pairs': float(count), 'matches_per_pair': len(pooled) / count,
               'median_error_px': float(np.median(pooled)) if len(pooled) else float('inf')}
    for t in thresholds_px:
        correct = int((pooled <= t).sum())
        metrics[f'precision_{t:g}px'] = correct / len(pooled) if len(pooled) else 0.0
        metrics[f'correct_per_pair_{t:g}px'] = correct / count
    return metrics


def build_pairs(sources: Sequence[Union[str, np.ndarray]], count: int, size: Tuple[int, int],
                seed: int, homography: Optional[HomographyConfig] = None,
                photometric: Optional[PhotometricConfig] = DEFAULT_PHOTOMETRIC
                ) -> List[Dict[str, torch.Tensor]]:
    """Return ``count`` fixed homography pairs of ``sources`` (for evaluation).

    Args:
        sources: image paths/folders and/or grey arrays.
        count: number of pairs (cycling through the sources).
        size: (height, width) of the pairs.
        seed: seed of the draws.
        homography: ``HomographyConfig``.
        photometric: ``PhotometricConfig`` or None.

    Returns:
        List of ``HomographyPairDataset`` items.
    """
    ds = HomographyPairDataset(sources, size=size, length=max(int(count), 1), seed=seed,
                               homography=homography, photometric=photometric)
    return [ds[i] for i in range(int(count))]


def _describe(sources) -> List[str]:
    if isinstance(sources, (str, Path)):
        sources = [sources]
    return [f'array{tuple(d.shape)}' if isinstance(d, np.ndarray) else str(d) for d in sources]


def _validator(pairs, device, mixed_items=None):
    def validate(model):
        metrics = evaluate_homography(model, pairs, device=device) if pairs else {}
        if mixed_items:
            metrics.update(evaluate_scene_and_negative_pairs(model, mixed_items, device=device))
        return metrics
    return validate


def _mixed_dataset(data_paths, scene_pairs, pair_mix: PairMix, size, seed, batch_size,
                   homography, photometric):
    """Return the ``MixedMatcherPairDataset`` of ``train_matcher`` and its source count."""
    sources, groups = load_grouped_sources(data_paths)
    pairs = HomographyPairDataset(sources, size=size, length=1, seed=seed,
                                  homography=homography, photometric=photometric)
    pairs.length = max(len(pairs.sources) * PAIRS_PER_IMAGE, 1)
    views = load_scene_views(scene_pairs, size) if scene_pairs else []
    if not views:
        pair_mix = dataclasses.replace(pair_mix, scene_fraction=0.0)
    length = max((len(sources) + len(views)) * PAIRS_PER_IMAGE, batch_size)
    dataset = MixedMatcherPairDataset(size, length, seed, pairs, views, sources, groups,
                                      pair_mix, photometric, homography)
    return dataset, len(sources), len(views)


def _mixed_val_items(val_scenes, val_data, size, seed, count, photometric):
    """Return fixed scene and negative validation items of held-out scenes."""
    views = load_scene_views(val_scenes, size)
    sources, groups = load_grouped_sources(val_data) if val_data else ([], [])
    scene = MixedMatcherPairDataset(size, count, seed, None, views, sources, groups,
                                    PairMix(negative_fraction=0.0), photometric)
    items = [scene[i] for i in range(count)]
    if len(set(groups) | {synthetic_group(view.seed) for view in views}) < 2:
        logger.warning('validation of negative pairs needs two held-out sources (scenes or '
                       'folders); validating scene pairs only')
        return items
    negative = MixedMatcherPairDataset(size, count, seed + 1, None, views, sources, groups,
                                       PairMix(scene_fraction=0.0, negative_fraction=1.0),
                                       photometric)
    return items + [negative[i] for i in range(count)]


def train_matcher(config_name: str, data_paths: Union[str, Sequence[str]], output,
                  steps: Optional[int] = None, batch_size: int = 8, lr: float = 1e-3,
                  resume=False, device: Union[str, torch.device] = 'cpu', seed: int = 0,
                  num_threads: Optional[int] = None, time_budget_min: Optional[float] = None,
                  epochs: Optional[float] = None, image_size: Optional[Tuple[int, int]] = None,
                  val_data: Optional[Sequence[str]] = DEFAULT_VAL_DATA, val_pairs: int = 8,
                  val_every: int = 200, init_weights: Optional[str] = None,
                  warmup_steps: Optional[int] = None, checkpoint_every: int = 100,
                  max_fine_matches: int = 128, scales: Sequence[float] = DEFAULT_SCALES,
                  loss_config: Optional[LoFTRLossConfig] = None,
                  homography: Optional[HomographyConfig] = None,
                  photometric: Optional[PhotometricConfig] = DEFAULT_PHOTOMETRIC,
                  model_conf: Optional[Dict[str, Any]] = None,
                  scene_pairs: Optional[Sequence[str]] = None,
                  pair_mix: Optional[PairMix] = None,
                  val_scenes: Optional[Sequence[str]] = DEFAULT_VAL_SCENES,
                  progress: bool = True,
                  ema_decay: Optional[float] = None) -> Dict[str, Any]:
    """Train a LoFTR preset on homography, 3-D scene and negative pairs; write the results.

    Without ``scene_pairs`` and negatives (``pair_mix`` None or ``negative_fraction`` 0) this
    is the homography recipe (``HomographyPairDataset``, positive-only coarse loss). With them
    the pairs come from ``scene_pairs.MixedMatcherPairDataset`` (homographies of
    ``data_paths``, two-view pairs of the scenes of ``scene_pairs`` with depth-warp ground
    truth, and negatives of two different sources) and the default loss adds the unmatched-cell
    term (``DEFAULT_UNMATCHED_WEIGHT``, ``DEFAULT_UNMATCHED_GAMMA``).

    Args:
        config_name: LoFTR preset (``loftr_lite`` or ``loftr``).
        data_paths: training sources (see ``load_sources``).
        output: run folder: ``last.pt`` (checkpoint), ``model.safetensors``, ``metrics.json``.
        steps: optimiser steps (or give ``epochs`` / ``time_budget_min``).
        batch_size: pairs per step.
        lr: peak learning rate (AdamW, warm-up + cosine decay).
        resume: False, True (``<output>/last.pt`` if present) or a checkpoint path.
        device: torch device (the caller chooses; no auto-pick).
        seed: seed of the model initialisation, data order and augmentation.
        num_threads: torch CPU threads (None: unchanged).
        time_budget_min: stop after this many minutes; alone, the step count is estimated.
        epochs: epochs of ``PAIRS_PER_IMAGE`` pairs per source image, when ``steps`` is None.
        image_size: (height, width) training size; default the preset's ``input_size``.
        val_data: held-out sources for the homography validation (None/empty: none).
        val_pairs: number of validation pairs.
        val_every: steps between validations (0: only at the end).
        init_weights: optional weights file to start from (``models.weights`` formats).
        warmup_steps: linear warm-up steps; None: automatic, a few per cent of the run
            (``loop.effective_warmup``).
        checkpoint_every: steps between checkpoints.
        max_fine_matches: ground-truth matches per image for the fine loss.
        scales: per-step resize factors of the batch (``make_loss_fn``); the default trains
            mostly at half resolution (cheaper on CPU) and sometimes at full size.
        loss_config: ``LoFTRLossConfig``.
        homography: ``HomographyConfig`` of the training pairs.
        photometric: ``PhotometricConfig`` of the training pairs (None: none).
        model_conf: overrides merged into the preset (e.g. smaller sizes for tests).
        scene_pairs: ``synth:SEEDS[:VIEWS]`` specs of the rooms for two-view scene pairs,
            rendered at the training size (``scene_pairs.load_scene_views``); None: none.
        pair_mix: ``scene_pairs.PairMix`` (fractions of scene and negative pairs, the share of
            wide-baseline scene pairs); None: ``PairMix()`` with scene pairs, else no negatives.
        val_scenes: held-out scene specs whose scene and negative pairs (``val_pairs`` each)
            are validated in mixed training (``scene_pairs.evaluate_scene_and_negative_pairs``);
            None/empty: none.
        progress: show a progress bar.
        ema_decay: None, or the decay in (0, 1) of the moving average of the weights that is
            validated and written (``loop.Trainer``'s ``ema_decay``).

    Returns:
        Summary dict (also written to ``<output>/metrics.json``): ``weights``, ``checkpoint``,
        ``step``, ``finished``, ``seconds_this_run``, ``train`` (last logs), ``validation``
        (held-out metrics at the end), ``config``.

    Raises:
        ValueError: for bad options or data.
    """
    from relperception.matching.loftr.model import LoFTR
    from relperception.models.weights import load_state_dict_file
    from relperception.training.loop import (CHECKPOINT_NAME, finished_run_summary,
                                             seed_everything, Trainer)

    if not config_name:
        raise ValueError('config_name (the LoFTR preset) is required')
    if num_threads:
        torch.set_num_threads(int(num_threads))
    if batch_size < 1:
        raise ValueError(f'batch_size must be >= 1, got {batch_size}')
    seed_everything(seed)
    model = LoFTR(model_conf, preset=str(config_name))
    if init_weights:
        model.load_weights(load_state_dict_file(init_weights))
        logger.info('initial weights %s', init_weights)
    elif not (resume is not False and (resume is not True
                                       or (Path(output) / CHECKPOINT_NAME).is_file())):
        logger.info('no init_weights (--init): the whole LoFTR model (backbone, coarse and '
                    'fine transformers) starts from random initialisation')
    size = tuple(int(v) for v in (image_size or model.input_size))
    if pair_mix is None:
        pair_mix = PairMix() if scene_pairs else PairMix(scene_fraction=0.0,
                                                         negative_fraction=0.0)
    mixed = bool(scene_pairs) or pair_mix.negative_fraction > 0
    scene_views = 0
    if mixed:
        dataset, source_count, scene_views = _mixed_dataset(
            data_paths, scene_pairs, pair_mix, size, seed, batch_size, homography, photometric)
        length = len(dataset)
        if loss_config is None:
            loss_config = LoFTRLossConfig(unmatched_weight=DEFAULT_UNMATCHED_WEIGHT,
                                          unmatched_gamma=DEFAULT_UNMATCHED_GAMMA)
    else:
        sources = load_sources(data_paths)
        dataset = HomographyPairDataset(sources, size=size, length=1, seed=seed,
                                        homography=homography, photometric=photometric)
        length = max(len(dataset.sources) * PAIRS_PER_IMAGE, batch_size)
        dataset.length = length
        source_count = len(dataset.sources)
    if steps is None and epochs is not None:
        steps = max(1, round(float(epochs) * (length // batch_size)))
    if steps is None and time_budget_min is None:
        raise ValueError('give steps, epochs or time_budget_min')
    budget = None if time_budget_min is None else 60.0 * float(time_budget_min)

    validate = None
    val_items = mixed_items = None
    if val_data and val_pairs > 0:
        val_items = build_pairs(load_sources(val_data), val_pairs, size, seed + 7919,
                                homography, photometric)
    if mixed and val_scenes and val_pairs > 0:
        mixed_items = _mixed_val_items(val_scenes, val_data, size, seed + 7919, val_pairs,
                                       photometric)
    if val_items or mixed_items:
        validate = _validator(val_items, device, mixed_items)

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    config = {'task': 'matcher', 'preset': str(config_name),
              'data': _describe(data_paths),
              'val_data': _describe(val_data or []), 'batch_size': int(batch_size),
              'lr': float(lr), 'size': list(size), 'seed': int(seed),
              'init': str(init_weights or ''), 'source_images': source_count,
              'scales': [float(v) for v in scales], 'model_conf': dict(model_conf or {}),
              'homography': dataclasses.asdict(homography or HomographyConfig()),
              'ema_decay': ema_decay, 'command': ' '.join(sys.argv)}
    if mixed:
        config.update({'scene_pairs': list(scene_pairs or []), 'scene_views': scene_views,
                       'pair_mix': dataclasses.asdict(pair_mix),
                       'val_scenes': list(val_scenes or []),
                       'loss': dataclasses.asdict(loss_config or LoFTRLossConfig())})
    loss_fn = make_loss_fn(loss_config, max_fine_matches, scales)
    trainer = Trainer(model, loss_fn, output, device=device, lr=lr, total_steps=steps,
                      warmup_steps=warmup_steps, schedule='cosine', grad_clip=1.0,
                      checkpoint_every=checkpoint_every, time_budget_s=budget, seed=seed,
                      config=config, validate_fn=validate, validate_every=int(val_every),
                      progress=progress, ema_decay=ema_decay)
    start = time.monotonic()
    result = trainer.fit(dataset, batch_size=batch_size, resume=resume)
    if result.already_finished:
        return finished_run_summary(output, result)
    validation = dict(result.history[-1]) if result.history else {}
    if validate is not None and result.interrupted is None and (
            not result.history or result.history[-1]['step'] != result.step):
        validation = {'step': float(result.step), **validate(trainer.evaluated_model)}
    weights = trainer.export_weights(
        output / 'model.safetensors',
        {'preset': str(config_name), 'task': 'matcher', 'data': json.dumps(config['data']),
         'size': f'{size[0]}x{size[1]}', 'validation': json.dumps(validation)})
    summary = {'weights': str(weights), 'checkpoint': str(result.checkpoint),
               'step': result.step, 'finished': result.finished,
               'interrupted': result.interrupted,
               'seconds_this_run': time.monotonic() - start, 'train': result.last_logs,
               'validation': validation, 'history': result.history, 'config': config}
    write_text_atomic(output / 'metrics.json', json.dumps(summary, indent=2))
    logger.info('matcher training: step %d, weights %s, validation %s', result.step, weights,
                validation)
    return summary
