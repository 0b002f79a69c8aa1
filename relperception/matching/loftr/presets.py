# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Model configurations of the LoFTR-style matcher.

``loftr`` has the sizes of the paper and of ``kornia.feature.LoFTR`` (its state dicts and the
official outdoor/indoor checkpoints load into it); ``loftr_lite`` is a smaller variant for CPU
and Jetson real time, trained by ``relperception`` itself. The key layout mirrors kornia's
``default_cfg`` (``resnetfpn``, ``coarse``, ``match_coarse``, ``fine``) plus ``input_size``,
the default (height, width) the matcher resizes images to.
"""

import copy
from typing import Any, Dict, Mapping, Optional

PRESETS: Dict[str, Dict[str, Any]] = {
    'loftr': {
        'resolution': (8, 2),
        'fine_window_size': 5,
        'fine_concat_coarse_feat': True,
        'resnetfpn': {'initial_dim': 128, 'block_dims': [128, 196, 256]},
        'coarse': {'d_model': 256, 'nhead': 8, 'layer_names': ['self', 'cross'] * 4,
                   'attention': 'linear', 'temp_bug_fix': False},
        'match_coarse': {'thr': 0.2, 'border_rm': 2, 'match_type': 'dual_softmax',
                         'dsmax_temperature': 0.1, 'skh_iters': 3, 'skh_init_bin_score': 1.0,
                         'skh_prefilter': True},
        'fine': {'d_model': 128, 'nhead': 8, 'layer_names': ['self', 'cross'],
                 'attention': 'linear'},
        'input_size': (480, 640),
    },
    'loftr_lite': {
        'resolution': (8, 2),
        'fine_window_size': 5,
        'fine_concat_coarse_feat': True,
        'resnetfpn': {'initial_dim': 64, 'block_dims': [64, 96, 128]},
        'coarse': {'d_model': 128, 'nhead': 4, 'layer_names': ['self', 'cross'] * 2,
                   'attention': 'linear', 'temp_bug_fix': True},
        'match_coarse': {'thr': 0.2, 'border_rm': 2, 'match_type': 'dual_softmax',
                         'dsmax_temperature': 0.1, 'skh_iters': 3, 'skh_init_bin_score': 1.0,
                         'skh_prefilter': True},
        'fine': {'d_model': 64, 'nhead': 4, 'layer_names': ['self', 'cross'],
                 'attention': 'linear'},
        'input_size': (240, 320),
    },
}


def available_presets():
    """Return the preset names."""
    return sorted(PRESETS)


def merge_conf(base: Mapping[str, Any], update: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Return a deep copy of ``base`` with ``update`` merged in recursively (dicts only).

    Raises:
        ValueError: for a key of ``update`` that ``base`` does not have.
    """
    out = copy.deepcopy(dict(base))
    for key, value in (update or {}).items():
        if key not in out:
            raise ValueError(f'unknown LoFTR config key {key!r}; known: {sorted(out)}')
        if isinstance(out[key], dict) and isinstance(value, Mapping):
            out[key] = merge_conf(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def preset_conf(name: str, update: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Return the configuration of preset ``name`` with ``update`` merged in.

    Raises:
        ValueError: for an unknown preset name or config key.
    """
    if name not in PRESETS:
        raise ValueError(f'unknown LoFTR preset {name!r}; choose one of {available_presets()}')
    return merge_conf(PRESETS[name], update)
