# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of relperception.models.weights (safe loading, checks, manifest)."""

import json
import os

import pytest
from relperception.models import weights as W
import torch


class _CodePickle:
    """Object whose unpickling would call ``os.system`` (never executed by the loader)."""

    def __reduce__(self):
        return (os.system, ('echo should-never-run',))


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))


class TestLoadStateDictFile:
    """Loading files safely."""

    def test_safetensors_round_trip(self, tmp_path):
        """Saved tensors and metadata come back unchanged."""
        net = _net()
        path = W.save_weights(net, tmp_path / 'a.safetensors', {'epochs': 3, 'note': 'x'})
        state = W.load_state_dict_file(path)
        assert set(state) == set(net.state_dict())
        for key, value in net.state_dict().items():
            assert torch.equal(state[key], value)
        assert W.read_metadata(path) == {'epochs': '3', 'note': 'x'}

    def test_torch_checkpoint_unwrapped(self, tmp_path):
        """Checkpoints with 'state_dict'/'model' are unwrapped."""
        net = _net()
        for wrapper in ('state_dict', 'model'):
            path = tmp_path / f'{wrapper}.pth'
            torch.save({wrapper: net.state_dict(), 'epoch': 7, 'lr': 0.1}, path)
            state = W.load_state_dict_file(path)
            assert set(state) == set(net.state_dict())

    def test_code_pickle_refused(self, tmp_path):
        """A pickle referencing a callable is refused, naming it."""
        path = tmp_path / 'evil.pth'
        torch.save({'weight': torch.zeros(2), 'payload': _CodePickle()}, path)
        with pytest.raises(ValueError, match='refused') as info:
            W.load_state_dict_file(path)
        assert 'system' in str(info.value)  # names the callable it refused

    def test_missing_and_garbage(self, tmp_path):
        """Missing and corrupt files give clear errors."""
        with pytest.raises(FileNotFoundError):
            W.load_state_dict_file(tmp_path / 'nope.pth')
        bad = tmp_path / 'bad.safetensors'
        bad.write_bytes(b'not a safetensors file')
        with pytest.raises(ValueError, match='safetensors'):
            W.load_state_dict_file(bad)
        bad = tmp_path / 'bad.pth'
        bad.write_bytes(b'garbage')
        with pytest.raises(ValueError):
            W.load_state_dict_file(bad)

    @pytest.mark.parametrize('content', [b'hello\n', b'\x89PNG\r\n\x1a\n' + bytes(range(256)),
                                         bytes(range(256)) * 4, b''])
    def test_any_other_file_is_a_value_error(self, tmp_path, content):
        """Bytes that are no weights file (text, an image, noise) raise ValueError.

        The weights-only unpickler raises KeyError, IndexError, ... on such bytes; a user who
        passes the wrong file gets a message that names it, not an internal error.
        """
        bad = tmp_path / 'not_weights.png'
        bad.write_bytes(content)
        with pytest.raises(ValueError, match='not_weights.png: not a weights file'):
            W.load_state_dict_file(bad)


class TestLoadWeights:
    """Checked loading into a module."""

    def test_round_trip_into_fresh_module(self, tmp_path):
        """A fresh module reproduces the source outputs."""
        src = _net()
        path = W.save_weights(src, tmp_path / 'w.safetensors')
        dst = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
        W.load_weights(dst, path)
        x = torch.rand(1, 3, 8, 8)
        assert torch.equal(src.eval()(x), dst.eval()(x))

    def test_key_map_prefix_and_callable(self):
        """Prefix dicts (None drops) and callables rename keys."""
        src = _net()
        wrapped = {f'encoder.{k}': v for k, v in src.state_dict().items()}
        wrapped['head.fc.weight'] = torch.zeros(1)
        dst = _net()
        W.load_weights(dst, wrapped, key_map={'encoder.': '', 'head.': None})
        W.load_weights(dst, wrapped, key_map=lambda k: k[8:] if k.startswith('encoder.') else None)

    def test_errors_name_the_keys(self):
        """Missing, unexpected and mis-shaped keys are all named."""
        state = dict(_net().state_dict())
        state['0.weight'] = torch.zeros(5, 3, 3, 3)  # wrong shape
        del state['1.running_mean']  # missing
        state['extra.bias'] = torch.zeros(1)  # unexpected
        with pytest.raises(ValueError) as info:
            W.load_weights(_net(), state)
        msg = str(info.value)
        assert '1 missing keys: 1.running_mean' in msg
        assert '1 unexpected keys: extra.bias' in msg
        assert '0.weight: file (5, 3, 3, 3) vs model (4, 3, 3, 3)' in msg

    @pytest.mark.parametrize('name', ['net.SAFETENSORS', 'net.pth', 'net'])
    def test_a_safetensors_file_is_known_by_its_header(self, tmp_path, name):
        saved = W.save_weights(_net(), tmp_path / 'net.safetensors')
        other = tmp_path / name
        saved.rename(other)
        loaded = W.load_weights(_net(), other)
        assert torch.equal(loaded[0].weight, _net()[0].weight)
        assert set(W.load_state_dict_file(other)) == set(_net().state_dict())

    def test_integer_tensors_for_float_weights_are_refused(self):
        state = {k: v.to(torch.int64) if v.is_floating_point() else v
                 for k, v in _net().state_dict().items()}
        with pytest.raises(ValueError, match=r'floating-point weights stored as non-float '
                                             r'tensors: .*0\.weight: torch\.int64'):
            W.load_weights(_net(), state)
        half = {k: v.half() if v.is_floating_point() else v   # another float type is fine
                for k, v in _net().state_dict().items()}
        W.load_weights(_net(), half)

    def test_non_strict_still_checks_shapes(self):
        """strict=False skips missing keys but not shapes."""
        state = {'0.weight': torch.ones(4, 3, 3, 3), 'extra': torch.zeros(1)}
        net = W.load_weights(_net(), state, strict=False)
        assert torch.equal(net[0].weight, torch.ones(4, 3, 3, 3))
        with pytest.raises(ValueError, match='shape mismatches'):
            W.load_weights(_net(), {'0.weight': torch.ones(1)}, strict=False)

    def test_long_lists_truncated(self):
        """Long key lists are truncated with a count."""
        net = torch.nn.Sequential(*[torch.nn.Linear(1, 1) for _ in range(30)])
        with pytest.raises(ValueError, match=r'60 missing keys: .*\(48 more\)'):
            W.load_weights(net, {})

    def test_save_rejects_other_suffix(self, tmp_path):
        """Only .safetensors files are written."""
        with pytest.raises(ValueError, match='safetensors'):
            W.save_weights(_net(), tmp_path / 'w.pth')


class TestShippedWeights:
    """Manifest and checksum logic of shipped weights."""

    def test_absent_says_how_to_get_it(self, tmp_path):
        """Absent weights say how to train or pass them."""
        (tmp_path / 'manifest.json').write_text('{}')
        with pytest.raises(FileNotFoundError, match="'conv_small'.*train.*weights file"):
            W.shipped_weights('conv_small', tmp_path)

    def test_registered_and_checked(self, tmp_path):
        """add_to_manifest registers; corruption and removal are caught."""
        path = W.save_weights(_net(), tmp_path / 'tiny.safetensors')
        entry = W.add_to_manifest('tiny', path, tmp_path, preset='tiny', miou=0.5)
        assert entry['sha256'] == W.file_sha256(path)
        manifest = json.loads((tmp_path / 'manifest.json').read_text())
        assert manifest['tiny']['miou'] == 0.5
        assert W.shipped_weights('tiny', tmp_path) == path
        # corrupt one byte at the end: the checksum must catch it
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(ValueError, match='checksum mismatch'):
            W.shipped_weights('tiny', tmp_path)
        path.unlink()
        with pytest.raises(FileNotFoundError, match='missing'):
            W.shipped_weights('tiny', tmp_path)

    def test_outside_folder_refused(self, tmp_path):
        """Only files inside the weights folder can be registered."""
        path = W.save_weights(_net(), tmp_path / 'a' / 'w.safetensors')
        with pytest.raises(ValueError, match='inside'):
            W.add_to_manifest('w', path, tmp_path)

    def test_package_manifest_is_valid(self):
        """Every entry of the package's manifest verifies."""
        manifest = W.read_manifest()
        for name, entry in manifest.items():
            assert W.shipped_weights(name).is_file()
            assert entry['file'].endswith('.safetensors')
