# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Named dense-model configurations: architecture, input size, preprocessing, labels, weights.

A model config (``load_model_config(name_or_yaml)``) is a dict::

    name         preset name
    description  one line
    model        DenseModel conf (backbone, heads, depth_mode, max_depth)
    input        preprocessing (see relperception.models.preprocess):
                   height, width   network input size (fixed) or minimum side (lower_bound)
                   resize          'fixed': resize to exactly height x width;
                                   'lower_bound': keep the aspect ratio, scale so that both sides
                                   are >= height/width, round each side to a multiple of
                                   ``multiple`` (Depth Anything V2)
                   multiple        input sides are multiples of it (ViT: the patch size;
                                   ResNet: 16 or 32 keeps the feature maps aligned)
                   interpolation   'area' | 'linear' | 'cubic' (OpenCV INTER_*)
                   mean, std       per-channel RGB normalisation of [0, 1] images
    depth_mode   'metric' (metres) | 'relative' (inverse depth, larger = closer)
    class_names  segmentation classes (index = logit channel); [] without a segmentation head
    ignore_index label value ignored by losses and metrics (255)
    weights      name of the shipped weights (relperception/weights/<name>.safetensors), or ''
    key_map      prefix renaming applied when loading a full-model weights file (foreign files)

Presets:

* ``conv_small`` (the earlier ``dense.backbone: conv`` default): ResNet-18 at width 0.25
  (channels 16/32/64/128, torchvision names) + DPT metric depth head (features 32, max 80 m) +
  CamVid segmentation head; input 240 x 320 fixed. About 1 M parameters (~4 MB fp32, 2 MB as
  float16), so the weights ship with the package; ~35 ms per 240 x 320 frame on one CPU
  thread. A full-width ResNet-18 (11 M parameters, 45 MB) is available as ``resnet18`` for
  users' weights.
* ``vit_small`` (the earlier ``dense.backbone: vit`` default): a small DINOv2-style ViT
  (embed 192, 6 blocks, 3 heads, patch 16, 2.9 M backbone parameters, 3.3 M in all, ~13 MB
  fp32, ~7 MB saved as float16) with the same heads; input 240 x 320 fixed. A real ViT-S/14
  (22 M parameters, 88 MB fp32) is too big to ship; it is available as ``vit_s14`` /
  ``depth_anything_v2_vits`` for external weights.
* ``depth_anything_v2_vits``: Depth Anything V2 Small, relative inverse depth; loads the
  official ``depth_anything_v2_vits.pth`` unchanged (key map ``pretrained.`` -> ``backbone.``).
  Preprocessing as the reference ``infer_image(raw, 518)``: RGB / 255, resize keeping the aspect
  ratio so that both sides are >= 518 and multiples of 14 (cv2.INTER_CUBIC), ImageNet mean/std;
  the (B, 1, h, w) output is resized back bilinearly (align_corners=True) to the input size.
* ``depth_anything_v2_metric_hypersim_vits`` (indoor, max 20 m) and
  ``depth_anything_v2_metric_vkitti_vits`` (outdoor, max 80 m): the metric fine-tunes (sigmoid
  head * max_depth, metres), same preprocessing.
* ``fast_seg`` (shipped default of ``dense.backbone: conv``): real-time CPU segmentation
  network of the Fast-SCNN / BiSeNet family (``relperception.models.fast_seg``: learning to
  downsample to stride 8, a detail path at stride 8, an inverted-residual context path to
  stride 32 with a global pool, fusion at stride 8, classification refined at stride 4) with a
  light metric depth head (three separable convolutions on the fused map, refined at stride 4);
  CamVid classes, input 360 x 480 fixed (CamVid's own size, multiple 8). Segmentation trained on
  CamVid at full resolution (``train seg --device-augment``, see the README), depth on the
  synthetic rooms with the backbone frozen (``relperception/weights/fast_seg.md``).
* ``vit_hybrid`` (shipped default of ``dense.backbone: vit``): the attention counterpart of
  ``fast_seg`` (a hybrid ViT, as ViT's ResNet-stem hybrids): the same convolutional stem,
  detail path, stride-16 stage, fusion and heads, with the stride-32 convolutional stage
  replaced by 4 transformer blocks (128 dims, 4 heads, global self-attention over every
  stride-16 token, depthwise-convolution position encoding, so any input size works); both
  heads trained as ``fast_seg``'s (``relperception/weights/vit_hybrid.md``). Users' DINOv2 /
  Depth Anything V2 weights load into ``vit_s14`` / ``depth_anything_v2_vits`` (named with
  ``dense.model``), not into this hybrid.
* ``resnet18`` / ``resnet34`` / ``resnet50``, ``vit_s14`` / ``vit_b14`` / ``vit_s16`` /
  ``vit_b16``: full-size architectures with both heads, for users' own weights (no weights
  shipped); backbone-only torchvision / DINOv2 files load with
  ``dense.load_backbone_weights``.

``dense.backbone`` (ROS parameter) maps ``conv`` -> ``fast_seg`` and ``vit`` -> ``vit_hybrid``
(``preset_for_backbone``; ``BACKBONE_PRESETS``). This module does not import torch.
"""

from __future__ import annotations

import copy
import logging
import math
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import yaml

logger = logging.getLogger(__name__)

#: The preset a model YAML file without ``base:`` starts from.
YAML_DEFAULT_BASE = 'conv_small'

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]

#: CamVid 11-class (SegNet) labels; raw label 11 ("Unlabelled") is mapped to ``ignore_index``.
CAMVID_CLASSES = ['Sky', 'Building', 'Pole', 'Road', 'Pavement', 'Tree', 'SignSymbol', 'Fence',
                  'Car', 'Pedestrian', 'Bicyclist']
IGNORE_INDEX = 255

#: ``dense.backbone`` value -> preset of the shipped default model.
BACKBONE_PRESETS = {'conv': 'fast_seg', 'vit': 'vit_hybrid'}

_DA_KEY_MAP = {'pretrained.': 'backbone.'}


def deep_merge(base: Mapping[str, Any], update: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Return ``base`` recursively updated with ``update`` (``None`` values replace dicts)."""
    out = copy.deepcopy(dict(base))
    for key, value in (update or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _input(height: int, width: int, multiple: int, resize: str = 'fixed',
           interpolation: str = 'area') -> Dict[str, Any]:
    return {'height': height, 'width': width, 'resize': resize, 'multiple': multiple,
            'interpolation': interpolation, 'mean': list(IMAGENET_MEAN),
            'std': list(IMAGENET_STD)}


def _seg_depth_heads(depth_features: int = 64, seg_features: int = 64,
                     head_features: int = 32) -> Dict[str, Any]:
    return {'depth': {'features': depth_features, 'head_features': head_features},
            'segmentation': {'num_classes': len(CAMVID_CLASSES), 'features': seg_features}}


def _preset(description: str, model: Dict[str, Any], inp: Dict[str, Any],
            weights: str = '', key_map: Optional[Dict[str, str]] = None,
            class_names: Optional[list] = None) -> Dict[str, Any]:
    has_seg = bool((model.get('heads') or {}).get('segmentation'))
    return {'description': description, 'model': model, 'input': inp,
            'depth_mode': model.get('depth_mode', 'metric'),
            'class_names': list(CAMVID_CLASSES if class_names is None else class_names)
            if has_seg else [],
            'ignore_index': IGNORE_INDEX, 'weights': weights, 'key_map': key_map}


def _vit_backbone(dim: int, heads: int, patch: int, depth: int = 12,
                  out_indices=(2, 5, 8, 11), img_size: int = 518) -> Dict[str, Any]:
    return {'name': 'vit', 'embed_dim': dim, 'num_heads': heads, 'depth': depth,
            'patch_size': patch, 'img_size': img_size, 'out_indices': list(out_indices)}


def _depth_anything(max_depth: Optional[float]) -> Dict[str, Any]:
    metric = max_depth is not None
    model = {
        'backbone': _vit_backbone(384, 6, 14),
        'depth_mode': 'metric' if metric else 'relative',
        'max_depth': float(max_depth or 20.0),
        'heads': {'depth': {'features': 64, 'out_channels': [48, 96, 192, 384],
                            'use_bn': False, 'use_clstoken': False, 'head_features': 32},
                  'segmentation': None},
    }
    what = f'metric depth (m, max {max_depth:g})' if metric else 'relative inverse depth'
    return _preset(f'Depth Anything V2 Small (ViT-S/14 + DPT), {what}; official weights file '
                   'needed', model, _input(518, 518, 14, 'lower_bound', 'cubic'),
                   key_map=dict(_DA_KEY_MAP))


#: The ``fast_seg`` model conf; ``vit_hybrid`` is it with the attention context.
_FAST_SEG_MODEL = {
    'architecture': 'fast_seg',
    'backbone': {'stem_channels': [32, 48, 64], 'detail_blocks': 3,
                 'context_channels': [96, 128], 'context_blocks': [3, 4],
                 'context_dilations': [1, 2, 4], 'expansion': 6, 'fusion_channels': 128},
    'depth_mode': 'metric', 'max_depth': 80.0,
    'heads': {'depth': {'features': 64, 'blocks': 3, 'dilations': [2, 4], 'refine_features': 32},
              'segmentation': {'num_classes': len(CAMVID_CLASSES), 'features': 96,
                               'refine_features': 32, 'dropout': 0.1}}}

PRESETS: Dict[str, Dict[str, Any]] = {
    'conv_small': _preset(
        'ResNet-18 x0.25 + DPT metric depth + CamVid segmentation (shipped weights)',
        {'backbone': {'name': 'resnet18', 'width': 0.25, 'out_indices': [1, 2, 3, 4]},
         'depth_mode': 'metric', 'max_depth': 80.0,
         'heads': _seg_depth_heads(depth_features=32, seg_features=32, head_features=16)},
        _input(240, 320, 16), weights='conv_small'),
    'vit_small': _preset(
        'DINOv2-style ViT (192 dims, 6 blocks, patch 16) + DPT metric depth + CamVid '
        'segmentation (shipped weights)',
        {'backbone': _vit_backbone(192, 3, 16, depth=6, out_indices=(1, 2, 4, 5), img_size=224),
         'depth_mode': 'metric', 'max_depth': 80.0,
         'heads': deep_merge(_seg_depth_heads(depth_features=32, seg_features=32,
                                              head_features=16),
                             {'depth': {'out_channels': [32, 48, 64, 96]}})},
        _input(240, 320, 16), weights='vit_small'),
    'fast_seg': _preset(
        'shipped conv default: real-time CPU segmentation (Fast-SCNN / BiSeNet family) + light '
        'metric depth head, CamVid classes, 360 x 480',
        _FAST_SEG_MODEL, _input(360, 480, 8), weights='fast_seg'),
    'vit_hybrid': _preset(
        "shipped ViT default: hybrid ViT, fast_seg's convolutional stem to stride 16, then 4 "
        'transformer blocks (global self-attention over the stride-16 tokens) in place of the '
        'stride-32 conv stage; light metric depth head, CamVid classes, 360 x 480',
        deep_merge(_FAST_SEG_MODEL, {'backbone': {
            'context_dilations': [1], 'context': 'attention', 'attention_blocks': 4,
            'attention_heads': 4, 'attention_mlp_ratio': 2.0}}),
        _input(360, 480, 8), weights='vit_hybrid'),
    'depth_anything_v2_vits': _depth_anything(None),
    'depth_anything_v2_metric_hypersim_vits': _depth_anything(20.0),
    'depth_anything_v2_metric_vkitti_vits': _depth_anything(80.0),
}
for _depth in (18, 34, 50):
    PRESETS[f'resnet{_depth}'] = _preset(
        f'ResNet-{_depth} (torchvision names) + DPT metric depth + CamVid segmentation; '
        'for your own weights',
        {'backbone': {'name': f'resnet{_depth}', 'width': 1.0, 'out_indices': [1, 2, 3, 4]},
         'depth_mode': 'metric', 'max_depth': 80.0, 'heads': _seg_depth_heads()},
        _input(256, 320, 32))
for _size, (_dim, _heads) in (('s', (384, 6)), ('b', (768, 12))):
    for _patch in (14, 16):
        PRESETS[f'vit_{_size}{_patch}'] = _preset(
            f'ViT-{_size.upper()}/{_patch} (DINOv2 names) + DPT metric depth + CamVid '
            'segmentation; for your own weights',
            {'backbone': _vit_backbone(_dim, _heads, _patch,
                                       img_size=518 if _patch == 14 else 224),
             'depth_mode': 'metric', 'max_depth': 80.0, 'heads': _seg_depth_heads()},
            _input(252 if _patch == 14 else 256, 336 if _patch == 14 else 320, _patch))


def preset_for_backbone(family: str) -> str:
    """Return the shipped default preset of a ``dense.backbone`` value (``conv``/``vit``).

    Raises:
        ValueError: unknown family.
    """
    if family not in BACKBONE_PRESETS:
        raise ValueError(f'dense.backbone must be one of {sorted(BACKBONE_PRESETS)}, '
                         f'got {family!r}')
    return BACKBONE_PRESETS[family]


def load_model_config(name_or_yaml: Union[str, Path]) -> Dict[str, Any]:
    """Return a model config from a preset name or a YAML file.

    A YAML file holds a mapping deep-merged over the preset named by its ``base`` key (default
    ``conv_small``), e.g.::

        base: resnet18
        model: {heads: {segmentation: {num_classes: 19}}}
        class_names: [road, sidewalk, ...]
        input: {height: 384, width: 640}

    A file that changes ``model`` no longer uses the base's shipped weights (``weights: ''``)
    unless it names them again.

    Args:
        name_or_yaml: a key of ``PRESETS`` or the path of a ``.yaml``/``.yml`` file.

    Returns:
        A new dict (see the module docstring) with ``name`` set (the preset name, or the YAML
        file's stem).

    Raises:
        ValueError: unknown preset, unreadable/invalid YAML, or an invalid merged config.
        FileNotFoundError: a ``.yaml`` path that does not exist.
    """
    key = str(name_or_yaml)
    if key in PRESETS:
        conf = copy.deepcopy(PRESETS[key])
        conf['name'] = key
        return _validate(conf)
    path = Path(key)
    if path.suffix.lower() not in ('.yaml', '.yml'):
        raise ValueError(f'unknown model preset {key!r}; choose one of {sorted(PRESETS)} or '
                         'give a .yaml file')
    if not path.is_file():
        raise FileNotFoundError(f'model config file {path} does not exist')
    try:
        with open(path, encoding='utf-8') as handle:
            data = yaml.safe_load(handle) or {}
    except yaml.YAMLError as err:
        raise ValueError(f'{path}: invalid YAML ({err})') from err
    if not isinstance(data, dict):
        raise ValueError(f'{path}: expected a mapping at the top level')
    if 'base' not in data:
        logger.info('%s names no base: preset; it is built on %r (write base: PRESET to start '
                    'from another, e.g. fast_seg)', path, YAML_DEFAULT_BASE)
    base = data.pop('base', YAML_DEFAULT_BASE)
    if not isinstance(base, str) or base not in PRESETS:
        raise ValueError(f'{path}: base {base!r} is not a preset; choose one of '
                         f'{sorted(PRESETS)}')
    _check_yaml_keys(path, data, PRESETS[base])
    conf = deep_merge(PRESETS[base], data)
    if 'model' in data and 'weights' not in data:
        conf['weights'] = ''  # another architecture: the base's shipped weights do not apply
    conf.setdefault('name', path.stem)
    if 'name' not in data:
        conf['name'] = path.stem
    conf['base'] = base
    if 'depth_mode' in (data.get('model') or {}) and 'depth_mode' not in data:
        conf['depth_mode'] = conf['model']['depth_mode']
    try:
        return _validate(conf)
    except ValueError as err:
        raise ValueError(f'{path}: {err}') from None


def _check_yaml_keys(path: Path, data: Dict[str, Any], base: Dict[str, Any]) -> None:
    """Refuse keys a model YAML file misspells and values of the wrong kind, naming the key.

    Checked: the top-level keys, the keys of ``input`` and of ``model`` (against the base
    preset and every preset of the same architecture), and that a mapping stays a mapping.
    """
    unknown = sorted(set(data) - set(base) - {'name'})
    ros_blocks = [value['ros__parameters'] for value in data.values()
                  if isinstance(value, dict) and 'ros__parameters' in value]
    if 'dense' in unknown or ros_blocks or any(str(k).startswith('dense.') for k in unknown):
        model = None
        for block in [data, *(b for b in ros_blocks if isinstance(b, dict))]:
            dense = block.get('dense')
            model = model or (dense.get('model') if isinstance(dense, dict) else None) \
                or block.get('dense.model')
        form = 'a ROS 2 parameter file' if ros_blocks else 'a parameter file (dense: ...)'
        raise ValueError(f'{path} is {form}, not a model file: give its '
                         f'dense.model ({model or "a preset name"}) here, or the parameter '
                         'file to a verb that reads parameter files (infer, eval, run)')
    if unknown:
        raise ValueError(f'{path}: unknown keys {unknown}')
    for key, value in data.items():
        if isinstance(base.get(key), dict) and not isinstance(value, dict):
            raise ValueError(f'{path}: {key} must be a mapping (as in the base preset), got '
                             f'{type(value).__name__}')
    unknown = sorted(f'input.{k}' for k in set(data.get('input') or {}) - set(base['input']))
    model = data.get('model') or {}
    architecture = model.get('architecture', base['model'].get('architecture', 'dense'))
    known = {'architecture', *base['model']}
    for preset in PRESETS.values():
        if preset['model'].get('architecture', 'dense') == architecture:
            known.update(preset['model'])
    unknown += sorted(f'model.{k}' for k in set(model) - known)
    if unknown:
        raise ValueError(f'{path}: unknown keys {unknown} (misspelt? the base preset has '
                         f'input: {sorted(base["input"])}, model: {sorted(base["model"])})')


def with_input_size(conf: Dict[str, Any], height: int = 0, width: int = 0) -> Dict[str, Any]:
    """Return a copy of a model config with another network input size.

    Args:
        conf: a model config.
        height: new ``input.height`` (0 = keep), a multiple of ``input.multiple``.
        width: new ``input.width`` (0 = keep).

    Returns:
        The new config (validated).

    Raises:
        ValueError: a size that is not a multiple of ``input.multiple``.
    """
    conf = copy.deepcopy(conf)
    if height:
        conf['input']['height'] = int(height)
    if width:
        conf['input']['width'] = int(width)
    return _validate(conf)


def _validate(conf: Dict[str, Any]) -> Dict[str, Any]:
    """Check the preprocessing and label entries of a model config; return it."""
    inp = conf['input']
    if inp['resize'] not in ('fixed', 'lower_bound'):
        raise ValueError(f"input.resize must be 'fixed' or 'lower_bound', got {inp['resize']!r}")
    if inp['interpolation'] not in ('area', 'linear', 'cubic'):
        raise ValueError('input.interpolation must be area, linear or cubic, '
                         f'got {inp["interpolation"]!r}')
    for key in ('height', 'width', 'multiple'):
        if not isinstance(inp[key], int) or isinstance(inp[key], bool):
            raise ValueError(f'input.{key} must be a whole number of pixels, got '
                             f'{inp[key]!r}')
    for key in ('mean', 'std'):
        values = inp[key]
        if not isinstance(values, (list, tuple)) or len(values) != 3 or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in values):
            raise ValueError(f'input.{key} needs 3 finite numbers (one per RGB channel, on '
                             f'the 0-1 scale), got {values!r}')
    multiple = int(inp['multiple'])
    if multiple < 1 or int(inp['height']) < multiple or int(inp['width']) < multiple:
        raise ValueError(f'input height/width {inp["height"]}x{inp["width"]} must be >= '
                         f'multiple {multiple} >= 1')
    if inp['resize'] == 'fixed' and (int(inp['height']) % multiple
                                     or int(inp['width']) % multiple):
        raise ValueError(f'fixed input size {inp["height"]}x{inp["width"]} must be a multiple of '
                         f'{multiple}')
    if len(inp['mean']) != 3 or len(inp['std']) != 3 or min(inp['std']) <= 0:
        raise ValueError('input.mean and input.std need 3 values, std > 0')
    model = conf['model']
    if model.get('depth_mode', 'metric') != conf['depth_mode']:
        raise ValueError(f'depth_mode {conf["depth_mode"]!r} differs from model.depth_mode '
                         f'{model.get("depth_mode")!r}')
    names = conf.get('class_names') or []
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ValueError(f'class_names must be a list of names, got {names!r}')
    seg = (model.get('heads') or {}).get('segmentation')
    if seg and conf['class_names'] and len(conf['class_names']) != int(seg['num_classes']):
        raise ValueError(f'{len(conf["class_names"])} class_names for '
                         f'{seg["num_classes"]} segmentation classes')
    return conf
