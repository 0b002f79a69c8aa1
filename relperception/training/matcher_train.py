# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Train the LoFTR matcher on random homographies of single images (``train matcher``).

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
"""

from __future__ import annotations

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
            ``mask1`` (B, H, W).
        factor: scale factor; the new size (rounded) must stay a multiple of 8.

    Returns:
        The rescaled batch (the input itself when ``factor`` is 1).

    Raises:
        ValueError: if the new size is no multiple of 8.
    """
    if factor == 1.0:
        return batch
    height, width = batch['image0'].shape[-2:]
    size = (int(round(height * factor)), int(round(width * factor)))
    if size[0] % 8 or size[1] % 8 or min(size) < 16:
        raise ValueError(f'scale {factor} gives {size}, not a multiple of 8 (>= 16)')
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
    S = batch['H_1_0'].new_tensor([[fx, 0.0, 0.5 * fx - 0.5], [0.0, fy, 0.5 * fy - 0.5],
                                   [0.0, 0.0, 1.0]])
    out['H_1_0'] = S @ batch['H_1_0'] @ torch.linalg.inv(S)
    return out


def make_loss_fn(loss_config: Optional[LoFTRLossConfig] = None, max_fine_matches: int = 128,
                 scales: Sequence[float] = (1.0,)):
    """Return ``loss_fn(model, batch) -> (loss, logs)`` for the ``Trainer``.

    Args:
        loss_config: loss weights (``LoFTRLossConfig``).
        max_fine_matches: ground-truth coarse matches per image used for the fine loss (a
            random subset; the fine stage costs time proportional to it).
        scales: each step resizes its batch by one of these factors (``rescale_batch``), drawn
            uniformly with torch's generator; smaller scales make steps cheaper.

    Returns:
        The loss function; ``batch`` is a collated ``HomographyPairDataset`` batch, logs are
        ``loss_c``, ``loss_f`` and ``gt_matches`` (mean per image).
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
        gt = coarse_matches_from_homography(
            batch['H_1_0'], feats['hw0_c'], feats['hw1_c'], scale=float(model.stride_c),
            offset=float(model.conf.get('keypoint_offset', 0.0)), mask0=batch.get('mask0'),
            mask1=batch.get('mask1'))
        b_ids, i_ids, j_ids = gt['b_ids'], gt['i_ids'], gt['j_ids']
        keep = _subsample_per_image(b_ids, len(batch['image0']), max_fine_matches)
        b_ids, i_ids, j_ids = b_ids[keep], i_ids[keep], j_ids[keep]
        expectation = target = None
        if len(b_ids):
            expectation = model.fine_refine(feats, b_ids, i_ids, j_ids)
            target = fine_offsets_gt(gt['w_pt0'], gt['pt1'], b_ids, i_ids, j_ids,
                                     fine_scale=float(model.stride_f),
                                     radius=float(model.window // 2))
        loss, logs = loftr_loss(conf, gt['conf_matrix_gt'], expectation, target, cfg)
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


def _validator(pairs, device):
    def validate(model):
        return evaluate_homography(model, pairs, device=device)
    return validate


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
                  progress: bool = True) -> Dict[str, Any]:
    """Train a LoFTR preset on random homographies; write checkpoints, weights and metrics.

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
        val_data: held-out sources for validation (None/empty: no validation).
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
        progress: show a progress bar.

    Returns:
        Summary dict (also written to ``<output>/metrics.json``): ``weights``, ``checkpoint``,
        ``step``, ``finished``, ``seconds_this_run``, ``train`` (last logs), ``validation``
        (held-out metrics at the end), ``config``.

    Raises:
        ValueError: for bad options or data.
    """
    from relperception.matching.loftr.model import LoFTR
    from relperception.models.weights import load_state_dict_file
    from relperception.training.loop import CHECKPOINT_NAME, seed_everything, Trainer

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
    sources = load_sources(data_paths)
    dataset = HomographyPairDataset(sources, size=size, length=1, seed=seed,
                                    homography=homography, photometric=photometric)
    length = max(len(dataset.sources) * PAIRS_PER_IMAGE, batch_size)
    dataset.length = length
    if steps is None and epochs is not None:
        steps = max(1, round(float(epochs) * (length // batch_size)))
    if steps is None and time_budget_min is None:
        raise ValueError('give steps, epochs or time_budget_min')
    budget = None if time_budget_min is None else 60.0 * float(time_budget_min)

    validate = None
    if val_data and val_pairs > 0:
        val_items = build_pairs(load_sources(val_data), val_pairs, size, seed + 7919,
                                homography, photometric)
        validate = _validator(val_items, device)

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    config = {'task': 'matcher', 'preset': str(config_name),
              'data': _describe(data_paths),
              'val_data': _describe(val_data or []), 'batch_size': int(batch_size),
              'lr': float(lr), 'size': list(size), 'seed': int(seed),
              'init': str(init_weights or ''), 'source_images': len(dataset.sources),
              'scales': [float(v) for v in scales], 'model_conf': dict(model_conf or {}),
              'command': ' '.join(sys.argv)}
    loss_fn = make_loss_fn(loss_config, max_fine_matches, scales)
    trainer = Trainer(model, loss_fn, output, device=device, lr=lr, total_steps=steps,
                      warmup_steps=warmup_steps, schedule='cosine', grad_clip=1.0,
                      checkpoint_every=checkpoint_every, time_budget_s=budget, seed=seed,
                      config=config, validate_fn=validate, validate_every=int(val_every),
                      progress=progress)
    start = time.monotonic()
    result = trainer.fit(dataset, batch_size=batch_size, resume=resume)
    validation = dict(result.history[-1]) if result.history else {}
    if validate is not None and result.interrupted is None and (
            not result.history or result.history[-1]['step'] != result.step):
        validation = {'step': float(result.step), **validate(trainer.model)}
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
