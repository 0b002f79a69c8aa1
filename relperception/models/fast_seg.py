# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Real-time CPU segmentation network (Fast-SCNN / BiSeNet family) with a light depth head.

``FastSegModel(conf)`` follows the LightGlue convention: ``default_conf`` is deep-merged with
the user conf; a head set to ``None`` is not built (at least one head is required). It answers
the same calls and returns the same outputs as :class:`relperception.models.dense.DenseModel`,
so the pipeline, training, evaluation and export code treat both alike.

Architecture (strides relative to the input):

* ``backbone`` (:class:`FastSegBackbone`):

  - learning to downsample: 3x3 convolution (stride 2), two depthwise-separable convolutions
    (stride 2 each) to ``stem_channels`` at strides 2, 4 and 8;
  - detail path: ``detail_blocks`` residual depthwise-separable blocks at stride 8 (spatial
    detail, as BiSeNet's spatial path);
  - context path: inverted-residual stages (MobileNetV2 blocks, expansion ``expansion``) at
    strides 16 and 32 (``context_channels`` / ``context_blocks``; the depthwise convolutions of
    the last stage dilated by ``context_dilations`` for a wider receptive field), plus a global
    average pool broadcast back (BiSeNet's context embedding);
  - with ``context: attention`` (preset ``vit_hybrid``, a hybrid ViT) the stride-32 stage is
    replaced by :class:`AttentionContext`: transformer blocks with global self-attention over
    the stride-16 tokens, then the same global pool;
  - feature fusion at stride 8 (Fast-SCNN's FFM): the context map (stride 32, or 16) upsampled, a
    depthwise 3x3 and a 1x1 convolution, added to 1x1 projections of the detail map and of the
    upsampled stride-16 map, ReLU;
  - outputs: ``[stride-4 map, stride-8 fused map]``.

* ``segmentation_head`` (:class:`FastSegHead`): two depthwise-separable convolutions on the
  stride-8 map, a 1x1 projection upsampled to stride 4 and concatenated with a projection of
  the stride-4 map (classifying at stride 8 alone loses thin classes: poles, signs), one
  depthwise-separable refinement, dropout and a 1x1 classifier at stride 4; the logits are
  bilinearly upsampled (align_corners=False) to the input size.
* ``depth_head`` (:class:`LightDepthHead`): ``blocks`` depthwise-separable convolutions on the
  stride-8 fused map (the ones after the first dilated by ``dilations`` for a wider view),
  optionally (``refine_features`` > 0) upsampled to stride 4, concatenated with a projection
  of the stride-4 map and refined by one more separable convolution (as the segmentation
  head), then a 1x1 convolution, bilinear upsampling to the input size and
  ``sigmoid * max_depth`` (metric, metres) or ReLU (relative inverse depth).

Input of ``forward``: ``image`` (B, 3, H, W) float32 normalised with the preset's mean/std
(ImageNet), H and W multiples of ``size_multiple`` (8); other sizes raise ``ValueError``.
Output dict (at the input resolution H x W):

* ``depth`` (B, 1, H, W) float32: metres when ``depth_mode == 'metric'`` (in (0, max_depth)),
  else relative inverse depth (>= 0); only with a depth head;
* ``logits`` (B, num_classes, H, W) float32: only with a segmentation head.

Every operator exports to ONNX with a dynamic input size (no adaptive pooling to fixed bins,
sizes of upsampling taken from the tensors) and is in TensorRT's ONNX operator set.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from relperception.models.backbones.vit import Block
from relperception.models.preprocess import check_network_input
from relperception.models.presets import deep_merge
import torch
from torch import nn
import torch.nn.functional as F

#: Input sides must be multiples of this (the stride of the fused map).
SIZE_MULTIPLE = 8
#: Kinds of context path: MobileNetV2 stages to stride 32, or self-attention at stride 16.
CONTEXT_KINDS = ('conv', 'attention')


def conv_bn_relu(cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1,
                 dilation: int = 1, relu: bool = True) -> nn.Sequential:
    """Return convolution (no bias) + BatchNorm [+ ReLU]; padding keeps ``H / stride``."""
    padding = dilation * (kernel - 1) // 2
    layers = [nn.Conv2d(cin, cout, kernel, stride, padding, dilation=dilation, groups=groups,
                        bias=False), nn.BatchNorm2d(cout)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


def separable(cin: int, cout: int, stride: int = 1, dilation: int = 1,
              relu: bool = True) -> nn.Sequential:
    """Return a depthwise 3x3 (+BN+ReLU) then pointwise 1x1 (+BN[+ReLU]) convolution."""
    return nn.Sequential(conv_bn_relu(cin, cin, 3, stride, groups=cin, dilation=dilation),
                         conv_bn_relu(cin, cout, 1, relu=relu))


class ResidualSeparable(nn.Module):
    """Depthwise-separable convolution with an identity shortcut, then ReLU (same shape)."""

    def __init__(self, channels: int, dilation: int = 1):
        """Build the block on ``channels`` channels."""
        super().__init__()
        self.body = separable(channels, channels, dilation=dilation, relu=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``relu(x + body(x))``, (B, C, H, W)."""
        return F.relu(x + self.body(x))


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, depthwise 3x3 (strided / dilated), linear 1x1 project."""

    def __init__(self, cin: int, cout: int, stride: int = 1, expansion: int = 4,
                 dilation: int = 1):
        """Build the block; the shortcut exists when the shape is kept."""
        super().__init__()
        hidden = int(cin * expansion)
        self.body = nn.Sequential(
            conv_bn_relu(cin, hidden, 1),
            conv_bn_relu(hidden, hidden, 3, stride, groups=hidden, dilation=dilation),
            conv_bn_relu(hidden, cout, 1, relu=False))
        self.shortcut = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the block output (B, cout, ceil(H / stride), ceil(W / stride))."""
        out = self.body(x)
        return x + out if self.shortcut else out


def _resize(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Bilinearly resize ``x`` to the spatial size of ``like`` (dynamic in ONNX)."""
    return F.interpolate(x, size=like.shape[-2:], mode='bilinear', align_corners=False)


class AttentionContext(nn.Module):
    """Global self-attention context at stride 16 (hybrid ViT: convolutional stem, then tokens).

    A 1x1 projection to ``dim`` channels, a depthwise 3x3 convolutional position encoding added
    to the map (CPVT's PEG: no fixed grid, so any input size works and exports as a plain
    convolution), ``blocks`` pre-norm transformer blocks (``relperception.models.backbones.vit``
    ``Block``: multi-head self-attention over all stride-16 tokens, GELU MLP) and a final
    LayerNorm.

    Input of ``forward``: (B, cin, h, w). Output: (B, dim, h, w), same h, w.
    """

    def __init__(self, cin: int, dim: int, blocks: int, heads: int, mlp_ratio: float):
        """Build the module; ``dim`` must be divisible by ``heads``.

        Raises:
            ValueError: non-positive sizes or ``dim % heads != 0``.
        """
        super().__init__()
        if min(cin, dim, blocks, heads) < 1 or mlp_ratio <= 0:
            raise ValueError(f'attention context sizes must be positive, got cin {cin}, dim '
                             f'{dim}, blocks {blocks}, heads {heads}, mlp_ratio {mlp_ratio}')
        self.proj = conv_bn_relu(cin, dim, 1)
        self.position = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.blocks = nn.ModuleList([Block(dim, heads, mlp_ratio, None) for _ in range(blocks)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the attended map (B, dim, h, w) of ``x`` (B, cin, h, w)."""
        x = self.proj(x)
        x = x + self.position(x)
        b, c, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)
        for block in self.blocks:
            tokens = block(tokens)
        return self.norm(tokens).transpose(1, 2).reshape(b, c, h, w)


class FastSegBackbone(nn.Module):
    """Learning to downsample, detail path, context path and fusion (module docstring).

    Input: ``image`` (B, 3, H, W). Output of ``forward``: ``[(B, C4, H/4, W/4),
    (B, fusion_channels, H/8, W/8)]`` with ``C4 = stem_channels[1]`` (``out_channels``,
    ``strides``), for H and W multiples of 8.
    """

    default_conf: Dict[str, Any] = {
        'stem_channels': [32, 48, 64],      # strides 2, 4, 8
        'detail_blocks': 3,                 # residual separable blocks at stride 8
        'context_channels': [96, 128],      # strides 16, 32
        'context_blocks': [3, 4],
        'context_dilations': [1, 2, 4],     # depthwise dilations of the stride-32 blocks
        'expansion': 6,
        'fusion_channels': 128,
        'context': 'conv',                  # conv | attention (stride-32 stage replaced)
        'attention_blocks': 4,              # attention only: transformer blocks at stride 16
        'attention_heads': 4,
        'attention_mlp_ratio': 2.0,
    }

    def __init__(self, conf: Optional[Dict[str, Any]] = None):
        """Build the backbone from ``conf`` merged over ``default_conf``.

        With ``context: attention`` the stride-32 inverted-residual stage is replaced by an
        :class:`AttentionContext` on the stride-16 map (``context_channels[1]`` wide, so the
        global pool and the fusion keep their shapes); ``context_blocks[1]`` and
        ``context_dilations`` are then unused.

        Raises:
            ValueError: lists of the wrong length or non-positive sizes.
        """
        super().__init__()
        self.conf = conf = {**self.default_conf, **(conf or {})}
        stem = [int(c) for c in conf['stem_channels']]
        ctx = [int(c) for c in conf['context_channels']]
        blocks = [int(n) for n in conf['context_blocks']]
        dilations = [int(d) for d in conf['context_dilations']] or [1]
        fusion = int(conf['fusion_channels'])
        if len(stem) != 3 or len(ctx) != 2 or len(blocks) != 2:
            raise ValueError('fast_seg backbone needs 3 stem_channels, 2 context_channels and 2 '
                             f'context_blocks, got {stem}, {ctx}, {blocks}')
        if min(stem + ctx + [fusion]) < 1 or min(blocks) < 1 or min(dilations) < 1 \
                or int(conf['detail_blocks']) < 0 or float(conf['expansion']) <= 0:
            raise ValueError(f'fast_seg backbone sizes must be positive, got {conf}')
        if conf['context'] not in CONTEXT_KINDS:
            raise ValueError(f'fast_seg backbone context must be one of {list(CONTEXT_KINDS)}, '
                             f'got {conf["context"]!r}')
        expansion = float(conf['expansion'])
        self.stem = nn.Sequential(conv_bn_relu(3, stem[0], 3, 2),
                                  separable(stem[0], stem[1], stride=2))
        self.down8 = separable(stem[1], stem[2], stride=2)
        self.detail = nn.Sequential(*[ResidualSeparable(stem[2])
                                      for _ in range(int(conf['detail_blocks']))])
        stages, cin = [], stem[2]
        for stage, (cout, count) in enumerate(zip(ctx, blocks)):
            layers = []
            for i in range(count):
                dilation = dilations[i % len(dilations)] if stage == 1 and i > 0 else 1
                layers.append(InvertedResidual(cin, cout, 2 if i == 0 else 1, expansion,
                                               dilation))
                cin = cout
            stages.append(nn.Sequential(*layers))
            if conf['context'] == 'attention':
                break   # the stride-32 stage is replaced by attention at stride 16
        self.context16 = stages[0]
        self.context32: Optional[nn.Module] = None
        self.context_attention: Optional[AttentionContext] = None
        if conf['context'] == 'attention':
            self.context_attention = AttentionContext(
                ctx[0], ctx[1], int(conf['attention_blocks']), int(conf['attention_heads']),
                float(conf['attention_mlp_ratio']))
        else:
            self.context32 = stages[1]
        self.global_context = conv_bn_relu(ctx[1], ctx[1], 1)
        self.fuse_context = nn.Sequential(
            conv_bn_relu(ctx[1], ctx[1], 3, groups=ctx[1]),
            conv_bn_relu(ctx[1], fusion, 1, relu=False))
        self.fuse_detail = conv_bn_relu(stem[2], fusion, 1, relu=False)
        self.fuse_context16 = conv_bn_relu(ctx[0], fusion, 1, relu=False)
        self.out_channels: List[int] = [stem[1], fusion]
        self.strides: List[int] = [4, 8]
        self.stride = 8
        self.size_multiple = SIZE_MULTIPLE
        self.has_class_token = False

    def forward_with_tokens(self, image: torch.Tensor
                            ) -> Tuple[List[torch.Tensor], Optional[List[torch.Tensor]]]:
        """Return ``(maps, None)``: a convolutional backbone has no class tokens."""
        return self.forward(image), None

    def forward(self, image: torch.Tensor) -> List[torch.Tensor]:
        """Return ``[stride-4 map, stride-8 fused map]`` (see the class docstring)."""
        x4 = self.stem(image)
        x8 = self.detail(self.down8(x4))
        ctx16 = self.context16(x8)
        if self.context32 is not None:
            ctx = self.context32(ctx16)
        else:
            ctx = self.context_attention(ctx16)
        ctx = ctx + self.global_context(ctx.mean(dim=(2, 3), keepdim=True))
        fused = self.fuse_detail(x8) + self.fuse_context(_resize(ctx, x8)) \
            + _resize(self.fuse_context16(ctx16), x8)
        return [x4, F.relu(fused)]


class FastSegHead(nn.Module):
    """Stride-8 classifier features refined at stride 4 with the stem's map (module docstring).

    Inputs of ``forward``: ``maps`` ``[(B, C4, H/4, W/4), (B, C8, H/8, W/8)]``, ``image_size``
    (H, W). Output: logits (B, num_classes, H, W) float32.
    """

    default_conf: Dict[str, Any] = {
        'num_classes': 11,
        'in_channels': [48, 128],    # of the stride-4 and stride-8 maps
        'features': 96,              # stride-8 classifier features
        'refine_features': 32,       # channels of each stride-4 input of the refinement
        'dropout': 0.1,
    }

    def __init__(self, conf: Optional[Dict[str, Any]] = None):
        """Build the head from ``conf`` merged over ``default_conf``.

        Raises:
            ValueError: ``num_classes`` < 1 or non-positive sizes.
        """
        super().__init__()
        self.conf = conf = {**self.default_conf, **(conf or {})}
        c4, c8 = (int(c) for c in conf['in_channels'])
        features, refine = int(conf['features']), int(conf['refine_features'])
        if int(conf['num_classes']) < 1:
            raise ValueError(f'num_classes must be >= 1, got {conf["num_classes"]!r}')
        if min(c4, c8, features, refine) < 1:
            raise ValueError(f'fast_seg head sizes must be positive, got {conf}')
        self.classifier8 = nn.Sequential(separable(c8, features), separable(features, features))
        self.project8 = conv_bn_relu(features, refine, 1)
        self.project4 = conv_bn_relu(c4, refine, 1)
        self.refine = separable(2 * refine, 2 * refine)
        self.dropout = nn.Dropout2d(float(conf['dropout']))
        self.classifier = nn.Conv2d(2 * refine, int(conf['num_classes']), 1)

    def forward(self, maps: Sequence[torch.Tensor], image_size) -> torch.Tensor:
        """Return logits (B, num_classes, H, W) at ``image_size``."""
        x4, x8 = maps[0], maps[1]
        up = _resize(self.project8(self.classifier8(x8)), x4)
        x = self.refine(torch.cat([up, self.project4(x4)], dim=1))
        logits = self.classifier(self.dropout(x))
        return F.interpolate(logits, size=image_size, mode='bilinear', align_corners=False)


class LightDepthHead(nn.Module):
    """Depthwise-separable convolutions on the stride-8 map, upsampled (module docstring).

    Inputs of ``forward``: ``maps`` (``[(B, C4, H/4, W/4), (B, C8, H/8, W/8)]``; only the
    stride-8 map ``maps[-1]`` without refinement), ``image_size`` (H, W). Output: (B, 1, H, W)
    metric depth in metres (sigmoid * ``max_depth``) or relative inverse depth (ReLU, >= 0).
    """

    default_conf: Dict[str, Any] = {
        'in_channels': [48, 128],  # of the stride-4 and stride-8 maps (an int: stride 8 only)
        'features': 32,
        'blocks': 1,               # separable convolutions at stride 8
        'dilations': [1],          # of blocks 2.. (cycled)
        'refine_features': 0,      # > 0: refine at stride 4 with the stem's map
        'depth_mode': 'metric',    # metric | relative
        'max_depth': 80.0,
    }

    def __init__(self, conf: Optional[Dict[str, Any]] = None):
        """Build the head from ``conf`` merged over ``default_conf``.

        Raises:
            ValueError: unknown depth_mode or non-positive sizes.
        """
        super().__init__()
        self.conf = conf = {**self.default_conf, **(conf or {})}
        if conf['depth_mode'] not in ('metric', 'relative'):
            raise ValueError(f"depth_mode must be 'metric' or 'relative', "
                             f'got {conf["depth_mode"]!r}')
        channels = conf['in_channels']
        c4, c8 = (int(c) for c in channels) if isinstance(channels, (list, tuple)) \
            else (0, int(channels))
        features, refine = int(conf['features']), int(conf['refine_features'])
        dilations = [int(d) for d in conf['dilations']] or [1]
        if c8 < 1 or features < 1 or int(conf['blocks']) < 1 or refine < 0 \
                or min(dilations) < 1 or (refine and c4 < 1) \
                or not float(conf['max_depth']) > 0:
            raise ValueError('depth head sizes, blocks, dilations and max_depth must be positive '
                             f'(refine_features >= 0, with a stride-4 input), got {conf}')
        self.metric = conf['depth_mode'] == 'metric'
        self.max_depth = float(conf['max_depth'])
        self.use_clstoken = False
        self.body = separable(c8, features)
        self.context = nn.Sequential(*[
            separable(features, features, dilation=dilations[i % len(dilations)])
            for i in range(int(conf['blocks']) - 1)])
        self.project4 = conv_bn_relu(c4, refine, 1) if refine else None
        self.refine = separable(features + refine, features) if refine else None
        self.out = nn.Conv2d(features, 1, 1)

    def forward(self, maps: Sequence[torch.Tensor], image_size, tokens=None) -> torch.Tensor:
        """Return depth (B, 1, H, W) at ``image_size`` (``tokens`` is unused)."""
        x = self.context(self.body(maps[-1]))
        if self.refine is not None:
            x4 = maps[0]
            x = self.refine(torch.cat([_resize(x, x4), self.project4(x4)], dim=1))
        x = F.interpolate(self.out(x), size=image_size, mode='bilinear', align_corners=False)
        return torch.sigmoid(x) * self.max_depth if self.metric else F.relu(x)


class FastSegModel(nn.Module):
    """Fast segmentation network with an optional light depth head (module docstring)."""

    default_conf: Dict[str, Any] = {
        'architecture': 'fast_seg',
        'backbone': dict(FastSegBackbone.default_conf),
        'depth_mode': 'metric',      # metric (metres) | relative (inverse depth)
        'max_depth': 80.0,           # metric only: depth = sigmoid * max_depth (m)
        'heads': {
            'depth': {'features': 32},
            'segmentation': {'num_classes': 11, 'features': 96, 'refine_features': 32,
                             'dropout': 0.1},
        },
    }

    def __init__(self, conf: Optional[Dict[str, Any]] = None):
        """Build the model from ``conf`` deep-merged over ``default_conf``.

        Raises:
            ValueError: invalid options, no head or an unknown depth_mode.
        """
        super().__init__()
        self.conf = conf = deep_merge(self.default_conf, conf)
        if conf['depth_mode'] not in ('metric', 'relative'):
            raise ValueError(f"depth_mode must be 'metric' or 'relative', "
                             f'got {conf["depth_mode"]!r}')
        heads = conf.get('heads') or {}
        if not heads.get('depth') and not heads.get('segmentation'):
            raise ValueError('FastSegModel needs at least one head (heads.depth or '
                             'heads.segmentation)')
        self.backbone = FastSegBackbone(conf['backbone'])
        c4, c8 = self.backbone.out_channels
        self.depth_head = None
        self.segmentation_head = None
        if heads.get('depth'):
            self.depth_head = LightDepthHead({**heads['depth'], 'in_channels': [c4, c8],
                                              'depth_mode': conf['depth_mode'],
                                              'max_depth': float(conf['max_depth'])})
        if heads.get('segmentation'):
            self.segmentation_head = FastSegHead({**heads['segmentation'],
                                                  'in_channels': [c4, c8]})
        self.size_multiple = self.backbone.size_multiple
        self.num_classes = (int(self.segmentation_head.conf['num_classes'])
                            if self.segmentation_head is not None else 0)

    def forward(self, image: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Return ``{'depth': (B,1,H,W), 'logits': (B,K,H,W)}`` (see the module docstring)."""
        size = check_network_input(image, self.size_multiple, 'fast_seg')
        maps = self.backbone(image)
        out = {}
        if self.depth_head is not None:
            out['depth'] = self.depth_head(maps, size)
        if self.segmentation_head is not None:
            out['logits'] = self.segmentation_head(maps, size)
        return out
