# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Generic training loop: AdamW, warm-up + cosine/poly schedule, clipping, checkpoints, resume.

Usage::

    trainer = Trainer(model, loss_fn, 'runs/seg', device='cpu', lr=1e-3, total_steps=2000)
    trainer.fit(dataset, batch_size=8)            # resumes from runs/seg/last.pt if resume=True
    trainer.export_weights('runs/seg/model.safetensors')

``loss_fn(model, batch) -> (loss, logs)``: ``batch`` is what the ``DataLoader`` yields (tensors
moved to ``device``, recursively through dicts/lists/tuples), ``loss`` a scalar tensor and
``logs`` a dict of floats shown on the progress bar and kept in the history.

Determinism and resume
----------------------
Data order is a permutation drawn from ``(seed, epoch)``; if the dataset has ``set_epoch(epoch)``
it is called before each epoch so item augmentation can be seeded from ``(seed, epoch, index)``
(see :func:`item_rng`). Each ``DataLoader`` draws its seed from its own generator
(:func:`loader_generator`), never from torch's global one, which drives dropout: where the
checkpoints fall (``checkpoint_every``, an interruption) does not change the run. A resumed run
skips the samples of the interrupted epoch that were already used and continues at the same step
with the same model, optimiser, scheduler and RNG state (CPU, and CUDA on a CUDA device), so it
trains as the uninterrupted run would; a trainer built with another peak learning rate, weight
decay or parameter groups than the checkpoint's is refused (:meth:`Trainer.check_optimiser`: the
checkpoint's would win silently), and so is a checkpoint beyond ``total_steps``. Checkpoints
(``<output>/last.pt``, written atomically) hold only tensors and primitive containers, so
``torch.load(path, weights_only=True)`` reads them::

    {'model', 'optimizer', 'scheduler', 'step', 'epoch', 'config', 'rng', 'history',
     'total_steps', 'metadata'}     # plus 'ema' (the averaged weights) with ``ema_decay``

Weight averaging
----------------
``ema_decay`` keeps an exponential moving average of the weights and batch-norm statistics
(``torch.optim.swa_utils.AveragedModel``), updated after every optimiser step:
``ema = decay * ema + (1 - decay) * weights``. Validation, ``on_validation`` and
:meth:`Trainer.export_weights` then use the average (:attr:`Trainer.evaluated_model`); the
checkpoint holds both, so a resumed run continues the same average. A checkpoint written
without averaging starts the average from its weights.

Time budget
-----------
``time_budget_s`` stops training (with a checkpoint) when the wall time spent in this process
exceeds it. With ``total_steps=None`` and a time budget the step count is estimated from the
speed of the first ``estimate_steps`` steps and re-estimated at every checkpoint from the mean
time per step so far (validation and checkpoints included), so the learning-rate schedule is
stretched or compressed to end when the budget does; the current estimate is stored in the
checkpoint and a resumed run keeps it. With a given ``total_steps`` and a budget the budget only
stops training (continue with ``resume``); a warning after the first steps says when the steps
will not fit, i.e. the run will stop before the schedule ends.

Warm-up
-------
``warmup_steps=None`` (the CLI default) is :func:`effective_warmup`'s automatic warm-up:
``AUTO_WARMUP_FRACTION`` of the run, at most ``DEFAULT_WARMUP_STEPS``, so a short run (a small
time budget) reaches the peak learning rate and decays instead of spending itself in warm-up.
While the step count of a budgeted run is not yet estimated it ramps as if it were
``DEFAULT_WARMUP_STEPS`` long. A given count is used as it is (resumed runs and recipes stay
reproducible); a warning says when it exceeds ``MAX_WARMUP_FRACTION`` of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
import logging
import math
import os
from pathlib import Path
import pickle
import random
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from relperception.interruption import deferred_interruptions
from relperception.runtime.devices import torch_device
import torch

logger = logging.getLogger(__name__)

LossFn = Callable[[torch.nn.Module, Any], Tuple[torch.Tensor, Dict[str, float]]]
CHECKPOINT_NAME = 'last.pt'
SCHEDULES = ('cosine', 'poly', 'constant')
#: Longest automatic warm-up (``warmup_steps=None``), in optimiser steps.
DEFAULT_WARMUP_STEPS = 100
#: Automatic warm-up as a fraction of the run's optimiser steps (capped at
#: ``DEFAULT_WARMUP_STEPS``).
AUTO_WARMUP_FRACTION = 0.05
#: A given warm-up longer than this fraction of the run's optimiser steps is warned about.
MAX_WARMUP_FRACTION = 0.5


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators with ``seed`` (>= 0)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f'seed must be a non-negative integer, got {seed!r}')
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    torch.manual_seed(int(seed))


def item_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """Return the NumPy generator for the augmentation of item ``index`` in ``epoch``.

    Independent of worker processes and data order, so runs and resumed runs are reproducible.
    """
    return np.random.default_rng([int(seed), int(epoch), int(index), 0xA46])


def loader_generator(seed: int, epoch: int, step: int) -> torch.Generator:
    """Return the generator of the ``DataLoader`` that starts at ``step`` of ``epoch``.

    A ``DataLoader`` draws its base seed (the seed of its worker processes) when it starts
    iterating, from torch's global generator unless it has its own; the global generator also
    drives dropout, so each checkpoint (a new loader) would change the rest of the run.
    """
    state = np.random.SeedSequence([int(seed), int(epoch), int(step), 0x10AD]).generate_state(2)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def lr_factor(step: int, total_steps: int, warmup_steps: int = 0, schedule: str = 'cosine',
              min_factor: float = 0.01, power: float = 0.9) -> float:
    """Return the learning-rate multiplier at ``step`` (0-based).

    Linear warm-up from ``1 / (warmup_steps + 1)`` to 1 over ``warmup_steps`` steps, then
    ``cosine`` decay to ``min_factor``, ``poly`` decay ``(1 - t) ** power`` (floored at
    ``min_factor``) or ``constant`` 1, with ``t`` the fraction of post-warm-up steps done.

    Raises:
        ValueError: for an unknown ``schedule``.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f'schedule must be one of {SCHEDULES}, got {schedule!r}')
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == 'constant':
        return 1.0
    span = max(int(total_steps) - int(warmup_steps), 1)
    t = min(max((step - warmup_steps) / span, 0.0), 1.0)
    if schedule == 'cosine':
        return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * t))
    return max((1.0 - t) ** power, min_factor)


def check_ema_decay(ema_decay: Optional[float]) -> Optional[float]:
    """Return ``ema_decay`` as a float (or None); raise ``ValueError`` outside (0, 1)."""
    if ema_decay is None:
        return None
    if not 0.0 < float(ema_decay) < 1.0:
        raise ValueError(f'ema_decay must be None or in (0, 1), got {ema_decay}')
    return float(ema_decay)


def effective_warmup(warmup_steps: Optional[int], total_steps: Optional[int]) -> int:
    """Return the warm-up steps used for a run of ``total_steps`` optimiser steps.

    Args:
        warmup_steps: None for the automatic warm-up, ``round(AUTO_WARMUP_FRACTION * total)``
            steps but at most ``DEFAULT_WARMUP_STEPS``; or a count >= 0, returned as it is.
        total_steps: optimiser steps of the run (>= 1), or None while unknown (a budgeted run
            before its estimate: the automatic warm-up is then ``DEFAULT_WARMUP_STEPS``).

    Returns:
        The warm-up length in steps (>= 0).

    Raises:
        ValueError: a negative ``warmup_steps`` or a ``total_steps`` < 1.
    """
    if warmup_steps is not None and int(warmup_steps) < 0:
        raise ValueError(f'warmup_steps must be >= 0 or None (automatic), got {warmup_steps}')
    if total_steps is not None and int(total_steps) < 1:
        raise ValueError(f'total_steps must be >= 1 or None (unknown), got {total_steps}')
    if warmup_steps is not None:
        return int(warmup_steps)
    if total_steps is None:
        return DEFAULT_WARMUP_STEPS
    return min(DEFAULT_WARMUP_STEPS, int(AUTO_WARMUP_FRACTION * int(total_steps) + 0.5))


def to_device(batch: Any, device: torch.device) -> Any:
    """Move the tensors in ``batch`` (nested dicts/lists/tuples) to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def plain_config(value: Any) -> Any:
    """Return ``value`` with Paths as str and tuples as lists, for ``weights_only`` checkpoints.

    Raises:
        ValueError: for values that are no primitive (None, bool, int, float, str, containers).
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): plain_config(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_config(v) for v in value]
    raise ValueError(f'config values must be primitives, got {type(value).__name__}: {value!r}')


#: Keys every checkpoint of :class:`Trainer` holds.
CHECKPOINT_KEYS = ('model', 'optimizer', 'scheduler', 'step', 'epoch', 'rng')


def read_checkpoint(path) -> dict:
    """Return the checkpoint dict of a :class:`Trainer` checkpoint file (``last.pt``).

    Only tensors and plain containers are read (``torch.load(..., weights_only=True)``).

    Raises:
        FileNotFoundError: no such file (for a folder, the message names its checkpoint).
        ValueError: a file that is no checkpoint of this trainer: unreadable, a weights file
            (``.safetensors``: weights are loaded into the model, not resumed), or a dict
            without the :data:`CHECKPOINT_KEYS`.
    """
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f'no checkpoint {path}: it is a folder (its checkpoint would be '
                                f'{path / CHECKPOINT_NAME})')
    if not path.is_file():
        raise FileNotFoundError(f'no checkpoint {path}')
    if path.suffix == '.safetensors':
        raise ValueError(f'{path} is a weights file, not a training checkpoint such as '
                         f'{CHECKPOINT_NAME}: a run starts from weights by loading them into '
                         "the model (the command line's --init), it resumes only a checkpoint")
    try:
        state = torch.load(path, map_location='cpu', weights_only=True)
    except pickle.UnpicklingError:
        raise ValueError(f'{path} was refused: it holds Python objects beyond tensors and '
                         'plain containers, which a checkpoint of this trainer never does '
                         '(only such files are loaded, never arbitrary pickles)') from None
    except Exception as error:  # the unpickler raises KeyError, IndexError, ... on other bytes
        raise ValueError(f'{path} is not a readable checkpoint: '
                         f'{type(error).__name__}: {error}') from None
    if not isinstance(state, dict):
        raise ValueError(f'{path} is no training checkpoint (a {type(state).__name__})')
    missing = set(CHECKPOINT_KEYS) - set(state)
    if missing:
        raise ValueError(f'{path} is no training checkpoint (missing {sorted(missing)})')
    return state


def checkpoint_to_resume(output_dir, resume) -> Optional[Path]:
    """Return the checkpoint that ``resume`` (as :meth:`Trainer.fit` takes it) continues.

    Args:
        output_dir: the run folder.
        resume: False (start afresh); True (``<output_dir>/last.pt`` when it exists); or a
            checkpoint path.

    Returns:
        The checkpoint path, or None when the run starts afresh.
    """
    if resume is False or resume is None:
        return None
    if resume is True:
        path = Path(output_dir) / CHECKPOINT_NAME
        return path if path.is_file() else None
    return Path(resume)


class _EpochSampler(torch.utils.data.Sampler):
    """Permutation of ``range(n)`` drawn from ``(seed, epoch)``, minus its first ``skip``."""

    def __init__(self, n: int, seed: int, epoch: int, shuffle: bool, skip: int = 0):
        super().__init__()
        if shuffle:
            generator = torch.Generator().manual_seed(int(seed) * 100_003 + int(epoch))
            order = torch.randperm(n, generator=generator).tolist()
        else:
            order = list(range(n))
        self.order = order[skip:]

    def __iter__(self):
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


@dataclass
class FitResult:
    """Summary of :meth:`Trainer.fit`.

    Attributes:
        step: optimiser steps done in total (including those of resumed runs).
        epoch: epochs started (0-based index of the current/last one).
        finished: True when ``total_steps`` were reached (False: stopped by the time budget
            or interrupted).
        seconds: wall time of this call.
        last_logs: the logs of the last step.
        history: one dict per validation (``step``, ``epoch`` and the metrics).
        checkpoint: path of the last checkpoint written.
        interrupted: None, or the reason (``interruption_reason``) when SIGINT or SIGTERM
            stopped training after a complete step; the checkpoint holds that step. The caller
            writes what it keeps and raises ``interruption_error(interrupted)``.
        already_finished: True when the resumed checkpoint had already reached
            ``total_steps``: nothing was trained and no checkpoint written; the caller leaves
            the finished run's files as they are (:func:`finished_run_summary`).
    """

    step: int
    epoch: int
    finished: bool
    seconds: float
    last_logs: Dict[str, float]
    history: List[Dict[str, float]]
    checkpoint: Optional[Path]
    interrupted: Optional[str] = None
    already_finished: bool = False


class Trainer:
    """Train ``model`` with AdamW on the batches of a map-style dataset.

    Args:
        model: the module to train (moved to ``device``).
        loss_fn: ``loss_fn(model, batch) -> (scalar loss tensor, dict of float logs)``.
        output_dir: folder for ``last.pt`` (created).
        device: torch device string or object; the caller chooses it (no auto-pick).
        lr: peak learning rate.
        weight_decay: AdamW decay, applied to weights with ndim >= 2 only.
        total_steps: optimiser steps to run; None with ``time_budget_s``: estimated (see the
            module docstring).
        warmup_steps: linear warm-up steps; None: automatic, scaled to the run
            (:func:`effective_warmup`).
        schedule: ``cosine``, ``poly`` or ``constant`` (see :func:`lr_factor`).
        min_lr_factor: final learning rate as a fraction of ``lr``.
        grad_clip: maximum gradient norm (<= 0: no clipping).
        checkpoint_every: steps between checkpoints (also written at the end, at each epoch end
            and when the time budget stops training).
        time_budget_s: stop after this many seconds of wall time (None: no limit).
        seed: seed of the global generators, the data order and the augmentation.
        config: primitive dict stored in every checkpoint (e.g. the CLI arguments).
        param_groups: optional list of ``{'params': [...], 'lr_scale': float}``; default: all
            parameters that require gradients at scale 1.
        validate_fn: ``validate_fn(model) -> dict of float metrics``, called at each epoch end
            and every ``validate_every`` steps (0: epoch ends only), in eval mode, without grad;
            at most once per step.
        validate_every: steps between validations, 0 for epoch ends only.
        progress: show a tqdm progress bar.
        estimate_steps: steps timed to estimate ``total_steps`` under a time budget.
        eval_modules: sub-modules kept in eval mode while training (frozen parts: their
            batch-norm statistics and dropout stay fixed).
        epoch_end_events: validate and write a checkpoint at each epoch end (default). False
            for many short epochs (a small dataset trained fast): then only every
            ``validate_every`` / ``checkpoint_every`` steps, at the end and when stopped.
        on_validation: ``on_validation(trainer, metrics)``, called after each validation once
            its entry is in ``history`` (e.g. to keep the weights of the best one).
        ema_decay: None (no averaging) or the decay in (0, 1) of the moving average of the
            weights that is validated and exported (module docstring, "Weight averaging").
        weights_metadata: string metadata of the weights (e.g. which heads are trained):
            written by :meth:`export_weights` and kept in every checkpoint under
            ``metadata``, so that a checkpoint used as weights says what they are
            (``models.weights.read_weights_metadata``).
    """

    def __init__(self, model: torch.nn.Module, loss_fn: LossFn, output_dir,
                 device='cpu', lr: float = 1e-3, weight_decay: float = 1e-4,
                 total_steps: Optional[int] = 1000, warmup_steps: Optional[int] = 0,
                 schedule: str = 'cosine', min_lr_factor: float = 0.01, grad_clip: float = 1.0,
                 checkpoint_every: int = 500, time_budget_s: Optional[float] = None,
                 seed: int = 0, config: Optional[dict] = None,
                 param_groups: Optional[List[dict]] = None,
                 validate_fn: Optional[Callable[[torch.nn.Module], Dict[str, float]]] = None,
                 validate_every: int = 0, progress: bool = True, estimate_steps: int = 10,
                 eval_modules: Sequence[torch.nn.Module] = (),
                 epoch_end_events: bool = True,
                 on_validation: Optional[Callable[['Trainer', Dict[str, float]], None]] = None,
                 ema_decay: Optional[float] = None,
                 weights_metadata: Optional[Dict[str, str]] = None):
        """Build the optimiser and scheduler (see the class docstring)."""
        ema_decay = check_ema_decay(ema_decay)
        if total_steps is None and time_budget_s is None:
            raise ValueError('give total_steps, time_budget_s or both')
        if total_steps is not None and int(total_steps) < 1:
            raise ValueError(f'total_steps must be >= 1, got {total_steps}')
        if time_budget_s is not None and not time_budget_s > 0:
            raise ValueError(f'time_budget_s must be > 0, got {time_budget_s}')
        if not lr > 0:
            raise ValueError(f'lr must be > 0, got {lr}')
        if schedule not in SCHEDULES:
            raise ValueError(f'schedule must be one of {SCHEDULES}, got {schedule!r}')
        if (warmup_steps is not None and warmup_steps < 0) or checkpoint_every < 1 \
                or validate_every < 0:
            raise ValueError('warmup_steps (or None) and validate_every must be >= 0, '
                             'checkpoint_every >= 1')
        seed_everything(seed)
        self.device = torch_device(device)
        self.model = model.to(self.device)
        self.loss_fn = loss_fn
        self.output_dir = Path(output_dir)
        self.lr = float(lr)
        self.total_steps = None if total_steps is None else int(total_steps)
        self.warmup_steps = None if warmup_steps is None else int(warmup_steps)
        self.schedule = schedule
        self.min_lr_factor = float(min_lr_factor)
        self.grad_clip = float(grad_clip)
        self.checkpoint_every = int(checkpoint_every)
        self.time_budget_s = time_budget_s
        self.seed = int(seed)
        self.config = plain_config(dict(config or {}))
        self.validate_fn = validate_fn
        self.validate_every = int(validate_every)
        self.progress = bool(progress)
        self.estimate_steps = max(int(estimate_steps), 1)
        self.eval_modules = list(eval_modules)
        self.epoch_end_events = bool(epoch_end_events)
        self.on_validation = on_validation
        self.weights_metadata = {str(k): str(v) for k, v in (weights_metadata or {}).items()}
        self.step = 0
        self.epoch = 0
        self.history: List[Dict[str, float]] = []

        groups = []
        if param_groups is None:
            param_groups = [{'params': [p for p in model.parameters() if p.requires_grad]}]
        for group in param_groups:
            params = [p for p in group['params'] if p.requires_grad]
            scale = float(group.get('lr_scale', 1.0))
            decay = [p for p in params if p.ndim >= 2]
            no_decay = [p for p in params if p.ndim < 2]
            for plist, wd in ((decay, weight_decay), (no_decay, 0.0)):
                if plist:
                    groups.append({'params': plist, 'lr': self.lr * scale,
                                   'weight_decay': wd, 'lr_scale': scale})
        if not groups:
            raise ValueError('the model has no parameter that requires gradients')
        self.optimizer = torch.optim.AdamW(groups, lr=self.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._factor)
        self.ema_decay = ema_decay
        self.ema = None
        if self.ema_decay is not None:
            from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

            self.ema = AveragedModel(self.model, multi_avg_fn=get_ema_multi_avg_fn(
                self.ema_decay), use_buffers=True)

    @property
    def evaluated_model(self) -> torch.nn.Module:
        """The weights that are validated and exported: the moving average, or the model."""
        return self.model if self.ema is None else self.ema.module

    # -- schedule -------------------------------------------------------------------------------
    def _factor(self, step: int) -> float:
        total = self.total_steps if self.total_steps is not None else 10 ** 9
        return lr_factor(step, total, self.warmup, self.schedule, self.min_lr_factor)

    @property
    def warmup(self) -> int:
        """Warm-up steps of the current schedule (:func:`effective_warmup`)."""
        return effective_warmup(self.warmup_steps, self.total_steps)

    def _apply_schedule(self) -> None:
        """Set the learning rate of the next step after ``total_steps`` changed."""
        factor = self._factor(self.step)
        for group, base in zip(self.optimizer.param_groups, self.scheduler.base_lrs):
            group['lr'] = base * factor

    def _describe_schedule(self) -> None:
        """Log the warm-up and decay of the run once its step count is known."""
        warmup = self.warmup
        if self.warmup_steps is not None and warmup > MAX_WARMUP_FRACTION * self.total_steps:
            logger.warning('the warm-up of %d steps is more than %.0f %% of the %d-step run: '
                           'the learning rate %s; leave the warm-up out for the automatic one '
                           '(%d steps)', warmup, 100 * MAX_WARMUP_FRACTION, self.total_steps,
                           'never reaches its peak' if warmup >= self.total_steps else
                           'decays only late', effective_warmup(None, self.total_steps))
        logger.info('learning rate %.2e: %d warm-up steps of %d, then %s decay', self.lr,
                    warmup, self.total_steps, self.schedule)

    def _fit_budget(self, elapsed: float, steps_done: int, estimating: bool) -> Optional[int]:
        """Return the steps that fit the time budget at the speed so far; update the estimate.

        ``elapsed`` seconds were spent on ``steps_done`` steps in this call of :meth:`fit`;
        with ``estimating`` ``total_steps`` becomes the estimate (>= the next step).
        """
        if self.time_budget_s is None or steps_done < 1:
            return None
        per_step = elapsed / steps_done
        fit = self.step + max(int((self.time_budget_s - elapsed) / max(per_step, 1e-9)), 0)
        if estimating:
            first = self.total_steps is None
            self.total_steps = max(self.step + 1, fit)
            self._apply_schedule()
            log = logger.info if first else logger.debug
            log('%.3f s/step: %d steps fit the %.0f s budget', per_step, self.total_steps,
                self.time_budget_s)
        return fit

    @property
    def checkpoint_path(self) -> Path:
        """``<output_dir>/last.pt``."""
        return self.output_dir / CHECKPOINT_NAME

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Return the checkpoint dict (tensors and primitive containers only)."""
        return {
            'model': {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            'optimizer': self.optimizer.state_dict(),
            'scheduler': self.scheduler.state_dict(),
            'step': self.step,
            'epoch': self.epoch,
            'total_steps': self.total_steps,
            'config': self.config,
            'history': plain_config(self.history),
            'metadata': dict(self.weights_metadata),
            **({} if self.ema is None else {'ema': {
                k: v.detach().cpu() for k, v in self.ema.state_dict().items()}}),
            'rng': {'torch': torch.get_rng_state(),
                    'numpy': _numpy_state(),
                    'python': plain_config(random.getstate()),
                    **({'cuda': torch.cuda.get_rng_state_all()}
                       if self.device.type == 'cuda' else {})},
        }

    def save_checkpoint(self, path=None) -> Path:
        """Write the checkpoint atomically (default ``<output_dir>/last.pt``); return its path."""
        path = Path(path) if path is not None else self.checkpoint_path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + '.tmp')
        torch.save(self.state_dict(), tmp)
        os.replace(tmp, path)
        logger.debug('checkpoint step %d -> %s', self.step, path)
        return path

    def load_checkpoint(self, path=None) -> None:
        """Restore model, optimiser, scheduler, step, epoch, history and RNG from a checkpoint.

        Raises:
            FileNotFoundError: if the file does not exist.
            ValueError: if it is no checkpoint of this trainer (missing keys, other model, an
                optimiser with other parameter groups, learning rate or weight decay:
                :meth:`check_optimiser`).
        """
        path = Path(path) if path is not None else self.checkpoint_path
        state = read_checkpoint(path)
        try:
            self.model.load_state_dict(state['model'])
        except RuntimeError as exc:
            raise ValueError(f'{path} does not fit this model: {exc}') from exc
        self.check_optimiser(state, path)
        if self.ema is not None:
            if 'ema' in state:
                self.ema.load_state_dict(state['ema'])
            else:
                logger.info('%s holds no weight average: it starts from the weights', path)
                self.ema.module.load_state_dict(self.model.state_dict())
                self.ema.n_averaged.fill_(1)
        elif 'ema' in state:
            logger.warning('%s holds a weight average, which this run (no ema_decay) does not '
                           'continue: it validates and exports the trained weights', path)
        self.optimizer.load_state_dict(state['optimizer'])
        self.scheduler.load_state_dict(state['scheduler'])
        self.step = int(state['step'])
        self.epoch = int(state['epoch'])
        if self.total_steps is None and state.get('total_steps') is not None:
            self.total_steps = int(state['total_steps'])   # the estimate of a budgeted run
        self.history = list(state.get('history', []))
        rng = state['rng']
        torch.set_rng_state(rng['torch'])
        _set_numpy_state(rng['numpy'])
        python = rng['python']
        random.setstate((python[0], tuple(python[1]), python[2]))
        if self.device.type == 'cuda' and 'cuda' in rng:
            torch.cuda.set_rng_state_all(rng['cuda'])
        logger.info('resumed from %s at step %d (epoch %d)', path, self.step, self.epoch)

    def check_optimiser(self, state: dict, path) -> None:
        """Raise ``ValueError`` unless checkpoint ``state`` was trained as this trainer trains.

        A resumed run continues the checkpoint's optimiser and learning-rate schedule, which
        hold the parameter groups (which parameters train, at which learning-rate scale), the
        peak learning rate and the weight decay: a trainer built with other values would
        silently train with the checkpoint's, so it is refused (``path`` names the file).
        """
        saved = state['optimizer'].get('param_groups', [])
        current = self.optimizer.param_groups
        if len(saved) != len(current) or any(len(a['params']) != len(b['params'])
                                             for a, b in zip(saved, current)):
            raise ValueError(f'{path} trains other parameters than this run ({len(saved)} '
                             f'parameter groups, this run {len(current)}): a resumed run keeps '
                             "the checkpoint's parameter groups (which parts train, at which "
                             'learning-rate scale)')
        for key, what in (('lr_scale', 'learning-rate scale'),
                          ('initial_lr', 'peak learning rate'), ('weight_decay', 'weight decay')):
            for a, b in zip(saved, current):
                old, new = float(a.get(key, b[key])), float(b[key])
                if key == 'initial_lr':      # the peak learning rate before the group's scale
                    old, new = old / max(b['lr_scale'], 1e-30), new / max(b['lr_scale'], 1e-30)
                if not math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-12):
                    raise ValueError(f'{path} trains with {what} {old:g}, this run with '
                                     f"{new:g}: a resumed run keeps the checkpoint's optimiser "
                                     '(peak learning rate, weight decay, learning-rate scales); '
                                     'resume with its values, or start a new run from its '
                                     'weights')

    def export_weights(self, path, metadata: Optional[Dict[str, str]] = None) -> Path:
        """Save :attr:`evaluated_model` as safetensors (``models.weights.save_weights``).

        The metadata: step, epoch, seed, the trainer's ``weights_metadata``, then ``metadata``.
        """
        from relperception.models.weights import save_weights

        meta = {'step': str(self.step), 'epoch': str(self.epoch), 'seed': str(self.seed)}
        if self.ema is not None:
            meta['ema_decay'] = str(self.ema_decay)
        meta.update(self.weights_metadata)
        meta.update({str(k): str(v) for k, v in (metadata or {}).items()})
        save_weights(self.evaluated_model, path, metadata=meta)
        return Path(path)

    # -- training -------------------------------------------------------------------------------
    def _validate(self) -> Dict[str, float]:
        model = self.evaluated_model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                metrics = {k: float(v) for k, v in self.validate_fn(model).items()}
        finally:
            model.train(was_training)
        entry = {'step': float(self.step), 'epoch': float(self.epoch), **metrics}
        self.history.append(entry)
        logger.info('validation step %d epoch %d: %s', self.step, self.epoch,
                    ', '.join(f'{k}={v:.4f}' for k, v in metrics.items()))
        if self.on_validation is not None:
            self.on_validation(self, metrics)
        return metrics

    def _validate_once(self) -> None:
        """Validate unless this step's validation is already in the history."""
        if not self.history or self.history[-1].get('step') != float(self.step):
            self._validate()

    def train_step(self, batch) -> Dict[str, float]:
        """Run one optimiser step on ``batch``; return the logs (with ``loss`` and ``lr``).

        Raises:
            RuntimeError: if the loss is not finite.
        """
        self.model.train()
        for module in self.eval_modules:
            module.eval()
        batch = to_device(batch, self.device)
        loss, logs = self.loss_fn(self.model, batch)
        if not torch.isfinite(loss):
            raise RuntimeError(f'non-finite loss {float(loss.detach())} at step {self.step}')
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(
                [p for g in self.optimizer.param_groups for p in g['params']], self.grad_clip)
            logs = {**logs, 'grad_norm': float(norm)}
        lr = self.optimizer.param_groups[0]['lr'] / self.optimizer.param_groups[0]['lr_scale']
        self.optimizer.step()
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        self.step += 1
        return {'loss': float(loss.detach()), 'lr': float(lr),
                **{k: float(v) for k, v in logs.items()}}

    def fit(self, dataset, batch_size: int = 8, resume=False, num_workers: int = 0,
            collate_fn=None, shuffle: bool = True) -> FitResult:
        """Train until ``total_steps`` or the time budget; write checkpoints; return a summary.

        SIGINT or SIGTERM (main thread) stop training after the current step: the checkpoint
        is written and the result says ``interrupted``; a second signal stops at once.

        Args:
            dataset: map-style dataset (``__len__``, ``__getitem__``, optional ``set_epoch``).
            batch_size: samples per step; the last incomplete batch of an epoch is dropped.
            resume: False; True for ``<output_dir>/last.pt`` if it exists; or a checkpoint path
                (must exist).
            num_workers: ``DataLoader`` worker processes.
            collate_fn: ``DataLoader`` collate function (default: torch's).
            shuffle: draw a new permutation each epoch.

        Returns:
            a :class:`FitResult`.

        Raises:
            ValueError: if the dataset holds fewer than ``batch_size`` samples, the checkpoint
                does not fit (:meth:`load_checkpoint`) or is beyond ``total_steps``.
            FileNotFoundError: if ``resume`` names a missing checkpoint.
        """
        n = len(dataset)
        if batch_size < 1 or n < batch_size:
            raise ValueError(f'need batch_size >= 1 and at least batch_size samples, got '
                             f'batch_size={batch_size} for {n} samples')
        if resume is True:
            if self.checkpoint_path.is_file():
                self.load_checkpoint()
            else:
                logger.info('no checkpoint in %s: starting from scratch', self.output_dir)
        elif resume:
            self.load_checkpoint(resume)
        if self.total_steps is not None and self.step > self.total_steps:
            raise ValueError(f'the checkpoint is at step {self.step}, beyond the '
                             f'{self.total_steps} steps of this run: nothing is left to train; '
                             f'give more than {self.step} steps to continue it')
        steps_per_epoch = n // batch_size
        start = time.monotonic()
        start_step = self.step
        logs: Dict[str, float] = {}
        checkpoint = None
        finished = self.total_steps is not None and self.step >= self.total_steps
        already_finished = finished and resume is not False and resume is not None
        if already_finished:
            logger.info('the run in %s already finished: its checkpoint is at step %d of %d, '
                        'nothing is left to train (give more than %d steps to continue it)',
                        self.output_dir, self.step, self.total_steps, self.step)
        stopped = False
        # A budgeted run without step count fits its schedule to the budget (module docstring).
        estimating = self.total_steps is None and self.time_budget_s is not None
        measured = False
        if self.total_steps is not None and not finished:
            self._describe_schedule()
        smoothed_loss = None
        from tqdm.auto import tqdm

        bar = tqdm(total=self.total_steps, initial=self.step, disable=not self.progress,
                   desc='train', dynamic_ncols=True, leave=True)
        with deferred_interruptions() as pending:
            try:
                while not finished and not stopped and pending.reason is None:
                    done_in_epoch = self.step - self.epoch * steps_per_epoch
                    if done_in_epoch >= steps_per_epoch:
                        self.epoch += 1
                        done_in_epoch = 0
                    if hasattr(dataset, 'set_epoch'):
                        dataset.set_epoch(self.epoch)
                    sampler = _EpochSampler(n, self.seed, self.epoch, shuffle,
                                            skip=done_in_epoch * batch_size)
                    loader = torch.utils.data.DataLoader(
                        dataset, batch_size=batch_size, sampler=sampler, drop_last=True,
                        num_workers=num_workers, collate_fn=collate_fn,
                        pin_memory=self.device.type == 'cuda',
                        generator=loader_generator(self.seed, self.epoch, self.step))
                    for batch in loader:
                        logs = self.train_step(batch)
                        smoothed_loss = logs['loss'] if smoothed_loss is None else \
                            0.9 * smoothed_loss + 0.1 * logs['loss']
                        bar.update(1)
                        bar.set_postfix(loss=f'{smoothed_loss:.4f}', lr=f'{logs["lr"]:.2e}',
                                        ep=self.epoch)
                        elapsed = time.monotonic() - start
                        if self.time_budget_s is not None and not measured and \
                                self.step - start_step >= self.estimate_steps:
                            measured = True
                            fit = self._fit_budget(elapsed, self.step - start_step, estimating)
                            if estimating:
                                bar.total = self.total_steps
                                self._describe_schedule()
                            elif fit < 0.95 * self.total_steps:
                                logger.warning(
                                    'about %d of the %d steps fit the %.0f s time budget: '
                                    'training will stop near step %d before the learning-rate '
                                    'schedule ends; continue it with resume, or give only the '
                                    'time budget (no step count) to fit the schedule into it',
                                    fit, self.total_steps, self.time_budget_s, fit)
                        finished = self.total_steps is not None and self.step >= self.total_steps
                        stopped = (not finished and self.time_budget_s is not None
                                   and elapsed > self.time_budget_s)
                        if pending.reason is not None:
                            break
                        if self.validate_fn is not None and self.validate_every and \
                                self.step % self.validate_every == 0 and not finished:
                            self._validate_once()
                        if self.step % self.checkpoint_every == 0 or finished or stopped:
                            break
                    epoch_end = self.epoch_end_events and \
                        self.step - self.epoch * steps_per_epoch >= steps_per_epoch
                    if self.validate_fn is not None and pending.reason is None and (
                            epoch_end or finished or stopped):
                        self._validate_once()
                    if estimating and measured and not finished and not stopped:
                        # stretch / compress the schedule to the budget left (docstring)
                        self._fit_budget(time.monotonic() - start, self.step - start_step, True)
                        bar.total = self.total_steps
                    if self.epoch_end_events or finished or stopped or \
                            pending.reason is not None or self.step % self.checkpoint_every == 0:
                        checkpoint = self.save_checkpoint()
            finally:
                bar.close()
        if stopped and self.total_steps is None:
            logger.warning('time budget of %.3g s used up at step %d, before the %d steps that '
                           'measure the step time: the learning rate was still warming up, so '
                           'these weights are barely trained; give a budget of minutes',
                           self.time_budget_s, self.step, self.estimate_steps)
        elif stopped:
            logger.warning('time budget of %.3g s used up at step %d of %d; the schedule did not '
                           'finish', self.time_budget_s, self.step, self.total_steps)
        if pending.reason is not None:
            logger.warning('%s at step %d of %s: checkpoint %s written (resume with --resume)',
                           pending.reason, self.step, self.total_steps, checkpoint)
        return FitResult(step=self.step, epoch=self.epoch, finished=finished,
                         seconds=time.monotonic() - start, last_logs=logs,
                         history=list(self.history), checkpoint=checkpoint,
                         interrupted=pending.reason, already_finished=already_finished)


def finished_run_summary(output_dir, result: FitResult) -> dict:
    """Return the summary of a run that :meth:`Trainer.fit` found already finished.

    A resumed run whose checkpoint had reached ``total_steps`` trains nothing, so its
    ``model.safetensors`` and ``metrics.json`` stay as the finished run wrote them (rewriting
    them would drop the last step's training losses). Logs that, and returns the run's
    ``metrics.json`` (or, where it is missing or unreadable, the weights path and step) with
    ``already_finished: True``.

    Args:
        output_dir: the run's folder.
        result: what :meth:`Trainer.fit` returned (``already_finished`` true).
    """
    output_dir = Path(output_dir)
    logger.info('%s and %s are left as the finished run wrote them', output_dir /
                'model.safetensors', output_dir / 'metrics.json')
    try:
        summary = json.loads((output_dir / 'metrics.json').read_text(encoding='utf-8'))
    except (OSError, ValueError):
        summary = None
    if not isinstance(summary, dict):
        summary = {'weights': str(output_dir / 'model.safetensors'), 'step': result.step,
                   'finished': True, 'metrics': {}, 'validation': {},
                   'history': list(result.history)}
    return {**summary, 'interrupted': None, 'already_finished': True}


def _numpy_state() -> dict:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {'name': str(name), 'keys': torch.from_numpy(np.asarray(keys, np.int64)),
            'pos': int(pos), 'has_gauss': int(has_gauss), 'cached': float(cached)}


def _set_numpy_state(state: dict) -> None:
    np.random.set_state((state['name'], state['keys'].numpy().astype(np.uint32),
                         state['pos'], state['has_gauss'], state['cached']))
