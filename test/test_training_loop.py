# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of the generic training loop (relperception.training.loop)."""

import math
import time

import numpy as np
import pytest
from relperception.training.loop import (
    DEFAULT_WARMUP_STEPS, effective_warmup, item_rng, lr_factor, plain_config, seed_everything,
    Trainer)
import torch


class _Regression(torch.utils.data.Dataset):
    """y = x . w on 40 fixed random points; ``set_epoch`` records the epochs seen."""

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(40, 4, generator=g)
        self.y = self.x @ torch.tensor([1.0, -2.0, 3.0, 0.5])
        self.epochs = []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {'x': self.x[i], 'y': self.y[i]}


class _Interrupt(Exception):
    pass


def _loss_fn(stop_after=None):
    calls = [0]

    def loss_fn(model, batch):
        calls[0] += 1
        if stop_after is not None and calls[0] > stop_after:
            raise _Interrupt()
        loss = ((model(batch['x']).squeeze(-1) - batch['y']) ** 2).mean()
        return loss, {'mse': float(loss.detach())}
    return loss_fn


def _trainer(out, stop_after=None, **kwargs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1))
    conf = {'total_steps': 30, 'lr': 1e-2, 'warmup_steps': 3, 'checkpoint_every': 7,
            'progress': False, 'seed': 3, 'config': {'name': 'toy', 'path': out}}
    conf.update(kwargs)
    return Trainer(model, _loss_fn(stop_after), out, **conf)


class TestLrFactor:
    def test_warmup_then_cosine(self):
        assert lr_factor(0, 100, warmup_steps=4) == pytest.approx(0.2)
        assert lr_factor(3, 100, warmup_steps=4) == pytest.approx(0.8)
        assert lr_factor(4, 100, warmup_steps=4) == pytest.approx(1.0)
        assert lr_factor(100, 100, warmup_steps=4, min_factor=0.01) == pytest.approx(0.01)
        mid = lr_factor(52, 100, warmup_steps=4, min_factor=0.0)
        assert mid == pytest.approx(0.5)

    def test_poly_monotone(self):
        values = [lr_factor(s, 50, schedule='poly') for s in range(51)]
        assert all(a >= b for a, b in zip(values, values[1:]))
        assert values[0] == 1.0 and values[-1] == pytest.approx(0.01)

    def test_constant(self):
        assert lr_factor(77, 10, schedule='constant') == 1.0

    def test_unknown_schedule(self):
        with pytest.raises(ValueError, match='schedule'):
            lr_factor(0, 10, schedule='step')


class TestWarmup:
    def test_automatic_warmup_scales_with_the_run(self):
        assert effective_warmup(None, 39) == 2            # 5 % of a short run
        assert effective_warmup(None, 10 ** 5) == DEFAULT_WARMUP_STEPS
        assert effective_warmup(None, None) == DEFAULT_WARMUP_STEPS   # not yet estimated
        assert effective_warmup(None, 5) == 0
        assert effective_warmup(50, 39) == 50             # a given count is kept
        for bad in ((-1, 10), (None, 0)):
            with pytest.raises(ValueError):
                effective_warmup(*bad)

    def test_short_time_budget_reaches_peak_and_decays(self, tmp_path):
        """A budget of fewer steps than the default warm-up still runs the whole schedule."""
        lrs = []
        model = torch.nn.Linear(4, 1)

        def slow_loss(m, batch):
            lrs.append(trainer.optimizer.param_groups[0]['lr'])
            time.sleep(0.02)
            return ((m(batch['x']).squeeze(-1) - batch['y']) ** 2).mean(), {}
        trainer = Trainer(model, slow_loss, tmp_path, lr=1e-2, total_steps=None,
                          warmup_steps=None, schedule='poly', time_budget_s=1.0,
                          estimate_steps=3, checkpoint_every=5, progress=False)
        result = trainer.fit(_Regression(), batch_size=8)
        assert 3 < trainer.total_steps < DEFAULT_WARMUP_STEPS
        peak = max(lrs)
        assert peak > 0.9e-2                              # the warm-up ended inside the run
        assert lrs.index(peak) < len(lrs) // 2
        assert lrs[-1] < 0.3 * peak                       # and the schedule decayed
        assert result.finished or result.step >= 0.8 * trainer.total_steps

    def test_explicit_warmup_longer_than_the_run_is_warned_about(self, tmp_path, caplog):
        trainer = _trainer(tmp_path, total_steps=4, warmup_steps=10)
        trainer.fit(_Regression(), batch_size=8)
        assert any('warm-up of 10 steps' in r.getMessage() and r.levelname == 'WARNING'
                   for r in caplog.records)


class TestSeeding:
    def test_item_rng_reproducible(self):
        a = item_rng(1, 2, 3).random(5)
        assert np.array_equal(a, item_rng(1, 2, 3).random(5))
        assert not np.array_equal(a, item_rng(1, 3, 3).random(5))

    def test_seed_everything(self):
        seed_everything(5)
        a = torch.rand(3)
        seed_everything(5)
        assert torch.equal(a, torch.rand(3))
        with pytest.raises(ValueError):
            seed_everything(-1)

    def test_plain_config(self, tmp_path):
        assert plain_config({'a': (1, tmp_path)}) == {'a': [1, str(tmp_path)]}
        with pytest.raises(ValueError, match='primitives'):
            plain_config({'a': object()})


class TestTrainer:
    def test_loss_decreases_and_history(self, tmp_path):
        trainer = _trainer(tmp_path, total_steps=40, lr=5e-2, grad_clip=0.0,
                           validate_fn=lambda m: {'score': 1.0})
        data = _Regression()
        with torch.no_grad():
            before = float(((trainer.model.eval()(data.x).squeeze(-1) - data.y) ** 2).mean())
        result = trainer.fit(data, batch_size=8)
        with torch.no_grad():
            after = float(((trainer.model.eval()(data.x).squeeze(-1) - data.y) ** 2).mean())
        assert result.finished and result.step == 40
        assert after < 0.5 * before
        # 5 steps per epoch: epochs 0..7, one validation per epoch end.
        assert result.epoch == 7 and len(result.history) == 8
        assert data.epochs[0] == 0 and data.epochs[-1] == 7
        assert result.checkpoint == tmp_path / 'last.pt'

    def test_checkpoint_weights_only(self, tmp_path):
        trainer = _trainer(tmp_path, total_steps=6)
        trainer.fit(_Regression(), batch_size=8)
        state = torch.load(tmp_path / 'last.pt', map_location='cpu', weights_only=True)
        assert {'model', 'optimizer', 'scheduler', 'step', 'epoch', 'config', 'rng'} <= set(state)
        assert state['step'] == 6 and state['epoch'] == 1
        assert state['config'] == {'name': 'toy', 'path': str(tmp_path)}
        assert torch.equal(state['model']['0.weight'], trainer.model[0].weight.detach())

    def test_resume_identical(self, tmp_path):
        full = _trainer(tmp_path / 'full')
        full.fit(_Regression(), batch_size=8)
        broken = _trainer(tmp_path / 'run', stop_after=17)
        with pytest.raises(_Interrupt):
            broken.fit(_Regression(), batch_size=8)
        # checkpoints at steps 5, 7, 10, 14, 15 (epoch ends and every 7): the last is step 15
        assert torch.load(tmp_path / 'run' / 'last.pt', weights_only=True)['step'] == 15
        resumed = _trainer(tmp_path / 'run')
        result = resumed.fit(_Regression(), batch_size=8, resume=True)
        assert result.step == 30
        for key, value in full.model.state_dict().items():
            assert torch.equal(value, resumed.model.state_dict()[key]), key
        for a, b in zip(full.optimizer.param_groups, resumed.optimizer.param_groups):
            assert a['lr'] == b['lr']

    def test_checkpoints_do_not_change_the_run(self, tmp_path):
        """Each new DataLoader drew from the global RNG (dropout): checkpoints changed runs."""
        every_step = _trainer(tmp_path / 'a', checkpoint_every=1, total_steps=12)
        every_step.fit(_Regression(), batch_size=8)
        default = _trainer(tmp_path / 'b', checkpoint_every=7, total_steps=12)
        default.fit(_Regression(), batch_size=8)
        for key, value in default.model.state_dict().items():
            assert torch.equal(value, every_step.model.state_dict()[key]), key

    def test_resume_missing_file(self, tmp_path):
        with pytest.raises(FileNotFoundError):
            _trainer(tmp_path).fit(_Regression(), batch_size=8, resume=tmp_path / 'nope.pt')

    @pytest.mark.parametrize('changed, words', [
        ({'lr': 1e-3}, 'peak learning rate 0.01, this run with 0.001'),
        ({'weight_decay': 0.5}, 'weight decay 0.0001, this run with 0.5'),
        ({'param_groups': lambda m: [{'params': m[0].parameters()},
                                     {'params': m[3].parameters(), 'lr_scale': 0.1}]},
         '2 parameter groups, this run 4'),
        ({'param_groups': lambda m: [{'params': m.parameters(), 'lr_scale': 0.5}]},
         'learning-rate scale 1, this run with 0.5'),
    ])
    def test_resume_refuses_another_optimiser(self, tmp_path, changed, words):
        """The optimiser state of the checkpoint would win: a resumed run must not differ."""
        def trainer(param_groups=None, **kwargs):
            run = _trainer(tmp_path, total_steps=4, **kwargs)
            if param_groups is not None:
                run = _trainer(tmp_path, total_steps=4, param_groups=param_groups(run.model),
                               **kwargs)
            return run

        trainer().fit(_Regression(), batch_size=8, resume=False)
        with pytest.raises(ValueError, match='resumed run keeps') as error:
            trainer(**changed).fit(_Regression(), batch_size=8, resume=True)
        assert words in str(error.value) and str(tmp_path / 'last.pt') in str(error.value)
        assert trainer().fit(_Regression(), batch_size=8, resume=True).step == 4

    def test_resume_beyond_the_steps_and_from_weights_is_refused(self, tmp_path):
        trainer = _trainer(tmp_path, total_steps=4)
        trainer.fit(_Regression(), batch_size=8)
        with pytest.raises(ValueError, match='at step 4, beyond the 3 steps of this run: '
                                             'nothing is left to train'):
            _trainer(tmp_path, total_steps=3).fit(_Regression(), batch_size=8, resume=True)
        weights = trainer.export_weights(tmp_path / 'model.safetensors')
        with pytest.raises(ValueError, match='is a weights file, not a training checkpoint'):
            _trainer(tmp_path).fit(_Regression(), batch_size=8, resume=weights)
        with pytest.raises(FileNotFoundError, match='it is a folder'):
            _trainer(tmp_path).fit(_Regression(), batch_size=8, resume=tmp_path)

    def test_resume_of_a_finished_run_says_so(self, tmp_path, caplog):
        assert not _trainer(tmp_path, total_steps=4).fit(_Regression(), batch_size=8)\
            .already_finished
        before = (tmp_path / 'last.pt').read_bytes()
        with caplog.at_level('INFO'):
            result = _trainer(tmp_path, total_steps=4).fit(_Regression(), batch_size=8,
                                                           resume=True)
        assert result.already_finished and result.step == 4 and result.checkpoint is None
        assert 'already finished' in caplog.text and 'step 4 of 4' in caplog.text
        assert (tmp_path / 'last.pt').read_bytes() == before

    def test_resume_true_without_checkpoint_starts(self, tmp_path):
        result = _trainer(tmp_path, total_steps=2).fit(_Regression(), batch_size=8, resume=True)
        assert result.step == 2

    def test_time_budget_estimates_steps(self, tmp_path):
        trainer = _trainer(tmp_path, total_steps=None, time_budget_s=0.5, estimate_steps=3)
        result = trainer.fit(_Regression(), batch_size=8)
        assert trainer.total_steps is not None and trainer.total_steps >= 4
        assert result.seconds < 5.0
        assert torch.load(tmp_path / 'last.pt', weights_only=True)['total_steps'] \
            == trainer.total_steps

    def test_validation_at_most_once_per_step(self, tmp_path):
        # validate_every 5 = the epoch length: each epoch end would otherwise validate twice
        trainer = _trainer(tmp_path, total_steps=12, validate_every=5,
                           validate_fn=lambda m: {'score': 1.0})
        result = trainer.fit(_Regression(), batch_size=8)
        steps = [h['step'] for h in result.history]
        assert steps == [5.0, 10.0, 12.0]

    def test_time_budget_stops_with_checkpoint_and_validation(self, tmp_path):
        trainer = _trainer(tmp_path, total_steps=10 ** 6, time_budget_s=0.3,
                           validate_fn=lambda m: {'score': 2.0})
        result = trainer.fit(_Regression(), batch_size=8)
        assert not result.finished and 0 < result.step < 10 ** 6
        assert result.history[-1]['step'] == result.step
        assert torch.load(tmp_path / 'last.pt', weights_only=True)['step'] == result.step

    def test_budget_spent_before_the_step_time_is_measured_says_so(self, tmp_path, caplog):
        # the warning used to read 'time budget of 0 s used up at step 1 of None'
        trainer = _trainer(tmp_path, total_steps=None, time_budget_s=1e-7, estimate_steps=5)
        with caplog.at_level('WARNING', logger='relperception.training.loop'):
            result = trainer.fit(_Regression(), batch_size=8)
        assert not result.finished and result.step < 5
        assert 'time budget of 1e-07 s used up at step' in caplog.text
        assert 'barely trained' in caplog.text and 'None' not in caplog.text

    def test_export_weights(self, tmp_path):
        from relperception.models.weights import load_state_dict_file, read_metadata

        trainer = _trainer(tmp_path, total_steps=3)
        trainer.fit(_Regression(), batch_size=8)
        path = trainer.export_weights(tmp_path / 'toy.safetensors', {'data': 'toy'})
        state = load_state_dict_file(path)
        assert torch.equal(state['3.bias'], trainer.model[3].bias.detach())
        meta = read_metadata(path)
        assert meta['step'] == '3' and meta['data'] == 'toy'

    def test_non_finite_loss(self, tmp_path):
        model = torch.nn.Linear(4, 1)
        trainer = Trainer(model, lambda m, b: (m(b['x']).sum() * math.inf, {}), tmp_path,
                          total_steps=3, progress=False)
        with pytest.raises(RuntimeError, match='non-finite'):
            trainer.fit(_Regression(), batch_size=8)

    def test_bad_arguments(self, tmp_path):
        model = torch.nn.Linear(4, 1)
        with pytest.raises(ValueError):
            Trainer(model, _loss_fn(), tmp_path, total_steps=None)
        with pytest.raises(ValueError):
            Trainer(model, _loss_fn(), tmp_path, total_steps=0)
        with pytest.raises(ValueError, match='schedule'):
            Trainer(model, _loss_fn(), tmp_path, schedule='exp')
        with pytest.raises(ValueError, match='batch_size'):
            Trainer(model, _loss_fn(), tmp_path, progress=False).fit(_Regression(),
                                                                     batch_size=64)

    def test_lr_scale_groups(self, tmp_path):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
        trainer = Trainer(model, _loss_fn(), tmp_path, lr=1e-2, total_steps=5,
                          schedule='constant', progress=False,
                          param_groups=[{'params': model[0].parameters(), 'lr_scale': 0.1},
                                        {'params': model[1].parameters()}])
        lrs = sorted({g['lr'] for g in trainer.optimizer.param_groups})
        assert lrs == pytest.approx([1e-3, 1e-2])


class TestWeightAverage:
    """``ema_decay``: the moving average of the weights is validated, exported and resumed."""

    def test_average_follows_definition(self, tmp_path):
        trainer = _trainer(tmp_path, ema_decay=0.5, total_steps=4)
        data = _Regression()
        batch = {'x': data.x[:8], 'y': data.y[:8]}
        expected = None
        for _ in range(4):
            trainer.train_step(batch)
            weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
            # the first update copies the weights; then ema = 0.5 ema + 0.5 weights
            expected = weights if expected is None else {
                k: 0.5 * expected[k] + 0.5 * weights[k] for k in weights}
        averaged = trainer.evaluated_model.state_dict()
        for key, value in expected.items():
            assert torch.allclose(averaged[key], value, atol=1e-6), key
        assert not torch.equal(averaged['0.weight'], trainer.model[0].weight.detach())

    def test_validation_and_export_use_average(self, tmp_path):
        seen = []
        trainer = _trainer(tmp_path, ema_decay=0.9, total_steps=10,
                           validate_fn=lambda m: seen.append(m) or {'score': 1.0})
        trainer.fit(_Regression(), batch_size=8)
        assert seen and all(m is trainer.evaluated_model for m in seen)
        assert trainer.evaluated_model is not trainer.model
        from safetensors import safe_open

        path = trainer.export_weights(tmp_path / 'w.safetensors')
        with safe_open(str(path), 'pt') as f:
            assert f.metadata()['ema_decay'] == '0.9'
            assert torch.equal(f.get_tensor('0.weight'),
                               trainer.evaluated_model[0].weight.detach())

    def test_resume_continues_average(self, tmp_path):
        full = _trainer(tmp_path / 'full', ema_decay=0.8)
        full.fit(_Regression(), batch_size=8)
        broken = _trainer(tmp_path / 'run', stop_after=17, ema_decay=0.8)
        with pytest.raises(_Interrupt):
            broken.fit(_Regression(), batch_size=8)
        assert 'ema' in torch.load(tmp_path / 'run' / 'last.pt', weights_only=True)
        resumed = _trainer(tmp_path / 'run', ema_decay=0.8)
        resumed.fit(_Regression(), batch_size=8, resume=True)
        for key, value in full.evaluated_model.state_dict().items():
            assert torch.allclose(value, resumed.evaluated_model.state_dict()[key]), key

    def test_checkpoint_without_average_starts_from_weights(self, tmp_path):
        plain = _trainer(tmp_path, total_steps=5)
        plain.fit(_Regression(), batch_size=8)
        averaged = _trainer(tmp_path, total_steps=5, ema_decay=0.99)
        averaged.load_checkpoint()
        for key, value in plain.model.state_dict().items():
            assert torch.equal(averaged.evaluated_model.state_dict()[key], value), key

    def test_resume_without_average_says_so(self, tmp_path, caplog):
        _trainer(tmp_path, total_steps=5, ema_decay=0.9).fit(_Regression(), batch_size=8)
        plain = _trainer(tmp_path, total_steps=5)
        with caplog.at_level('WARNING', logger='relperception.training.loop'):
            plain.load_checkpoint()
        assert 'holds a weight average' in caplog.text
        assert plain.evaluated_model is plain.model

    @pytest.mark.parametrize('decay', [0.0, 1.0, -0.1, 1.5])
    def test_decay_bounds(self, tmp_path, decay):
        with pytest.raises(ValueError, match='ema_decay'):
            _trainer(tmp_path, ema_decay=decay)
