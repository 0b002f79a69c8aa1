# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Depth Anything V2 Small compatibility of the ``depth_anything_v2_*`` presets.

Always run (weights-free): the state-dict names and shapes of our preset equal those recorded
from the reference implementation (``test/fixtures/depth_anything_v2_vits_keys.json``, made from
``DepthAnythingV2(encoder='vits', features=64, out_channels=[48, 96, 192, 384])``), and a file
in the official layout loads through ``build_dense_model`` without manual renaming.

With ``DEPTH_ANYTHING_V2_REPO`` pointing to a checkout of
github.com/DepthAnything/Depth-Anything-V2 (only torch is needed; torchvision and xformers are
stubbed/optional): the reference model with seeded random weights and ours loaded from its
state dict give the same output at two input sizes (relative and metric variants).
"""

import contextlib
import json
import os
from pathlib import Path
import sys
import types

from conftest import REPO_ROOT
import pytest
from relperception.models.dense import build_dense_model
from relperception.models.presets import load_model_config
from relperception.models.weights import rename_keys
import torch

FIXTURE = REPO_ROOT / 'test' / 'fixtures' / 'depth_anything_v2_vits_keys.json'
PRESETS = ('depth_anything_v2_vits', 'depth_anything_v2_metric_hypersim_vits',
           'depth_anything_v2_metric_vkitti_vits')


def _reference_shapes():
    return json.loads(FIXTURE.read_text())['keys']


def _meta_model(name):
    with torch.device('meta'):
        return build_dense_model(load_model_config(name))


class TestStateDictLayout:
    """Weights-free checks against the recorded reference layout."""

    @pytest.mark.parametrize('name', PRESETS)
    def test_keys_and_shapes_equal_reference(self, name):
        """After the preset's key map, every reference key/shape is ours and vice versa."""
        conf = load_model_config(name)
        reference = _reference_shapes()
        renamed = rename_keys({k: torch.empty(0) for k in reference}, conf['key_map'])
        mapped = {new: reference[old] for old, new in zip(reference, renamed)}
        ours = {k: list(v.shape) for k, v in _meta_model(name).state_dict().items()}
        assert sorted(ours) == sorted(mapped)
        assert ours == mapped

    def test_official_file_layout_loads(self, tmp_path):
        """A .pth in the official layout loads with no renaming by the user."""
        torch.manual_seed(0)
        state = {k: torch.randn(v) * 0.02 for k, v in _reference_shapes().items()}
        path = tmp_path / 'depth_anything_v2_vits.pth'
        torch.save(state, path)
        model = build_dense_model(load_model_config('depth_anything_v2_vits'), weights=path)
        assert torch.equal(model.backbone.pos_embed, state['pretrained.pos_embed'])
        assert torch.equal(model.depth_head.scratch.refinenet1.out_conv.weight,
                           state['depth_head.scratch.refinenet1.out_conv.weight'])
        assert not model.training


@contextlib.contextmanager
def _reference_package(root: Path):
    """Import ``depth_anything_v2.dpt`` from ``root``; restore sys.path/sys.modules after."""
    saved_path, saved_modules = list(sys.path), dict(sys.modules)
    try:
        try:
            import torchvision.transforms  # noqa: F401
        except ImportError:  # the reference only needs Compose for its infer_image helper
            stub = types.ModuleType('torchvision')
            stub.transforms = types.ModuleType('torchvision.transforms')
            stub.transforms.Compose = list
            sys.modules['torchvision'] = stub
            sys.modules['torchvision.transforms'] = stub.transforms
        for key in [k for k in sys.modules if k.startswith('depth_anything_v2')]:
            del sys.modules[key]
        sys.path.insert(0, str(root))
        import depth_anything_v2.dpt as dpt
        yield dpt
    finally:
        sys.path[:] = saved_path
        for key in set(sys.modules) - set(saved_modules):
            del sys.modules[key]
        sys.modules.update(saved_modules)


def _randomise(model):
    """Seeded random weights with unit-scale activations (fan-in normal)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1 and 'pos_embed' not in name and 'token' not in name:
                p.normal_(0, p[0].numel() ** -0.5)
            else:
                base = 1.0 if name.endswith('gamma') or ('norm' in name and 'weight' in name) \
                    else 0.0
                p.copy_(base + 0.1 * torch.randn_like(p))
        last = model.depth_head.scratch.output_conv2[2]
        last.bias.fill_(0.5)
        last.weight.normal_(0, 0.1)


REPO = os.environ.get('DEPTH_ANYTHING_V2_REPO', '')


@pytest.mark.skipif(not REPO or not Path(REPO, 'depth_anything_v2', 'dpt.py').is_file(),
                    reason='set DEPTH_ANYTHING_V2_REPO to a Depth-Anything-V2 checkout')
class TestReferenceParity:
    """Output parity with the reference implementation (needs a checkout)."""

    @pytest.mark.parametrize('name,subdir,max_depth', [
        ('depth_anything_v2_vits', '', None),
        ('depth_anything_v2_metric_hypersim_vits', 'metric_depth', 20.0)])
    def test_same_output(self, name, subdir, max_depth):
        """Max abs difference < 1e-4 of the output scale at two sizes (multiples of 14)."""
        torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
        with _reference_package(Path(REPO, subdir)) as dpt:
            kwargs = {'encoder': 'vits', 'features': 64, 'out_channels': [48, 96, 192, 384]}
            if max_depth is not None:
                kwargs['max_depth'] = max_depth
            reference = dpt.DepthAnythingV2(**kwargs).eval()
        _randomise(reference)
        ours = build_dense_model(load_model_config(name), weights=reference.state_dict())
        torch.manual_seed(1)
        for size in ((154, 210), (126, 126)):
            image = torch.randn(1, 3, *size)
            with torch.no_grad():
                expected = reference(image)[:, None]
                actual = ours(image)['depth']
            assert actual.shape == expected.shape == (1, 1, *size)
            assert float(expected.std()) > 1e-3  # the comparison is not trivial
            scale = float(expected.abs().max())
            assert float((actual - expected).abs().max()) < 1e-4 * scale
