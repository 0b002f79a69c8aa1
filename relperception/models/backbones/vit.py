# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Vision Transformer backbone with DINOv2 parameter names and position-embedding behaviour.

Parameter names follow DINOv2 (and the ``pretrained.`` part of Depth Anything V2):
``patch_embed.proj``, ``cls_token`` (1, 1, D), ``pos_embed`` (1, 1 + N0, D), ``mask_token``
(1, D), optional ``register_tokens`` (1, R, D), ``blocks.N.{norm1, attn.qkv, attn.proj, ls1.gamma,
norm2, mlp.fc1, mlp.fc2, ls2.gamma}`` and the final ``norm`` (LayerNorm, eps 1e-6), so DINOv2 /
Depth Anything V2 weights load without renaming (``block_chunks=0`` layout).

Position embeddings are stored for ``img_size / patch_size`` patches per side (37 for DINOv2's
518 / 14) and are resampled for every input whose sides are multiples of the patch size the way
DINOv2 does it: bicubic ``interpolate`` with ``scale_factor = (n + interpolate_offset) / N0``
(offset 0.1, no antialias by default), which makes outputs match the reference bit-for-bit in
layout. ``mask_token`` is kept for weight compatibility (masked training is not implemented).

``get_intermediate_layers(x, indices, return_class_token)`` returns the LayerNorm-ed outputs of
the given blocks reshaped to (B, D, H/p, W/p) maps (plus (B, D) class tokens).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn
import torch.nn.functional as F


class Attention(nn.Module):
    """Multi-head self-attention with a fused ``qkv`` projection."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True):
        """Build the layer (``dim`` must be divisible by ``num_heads``)."""
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'embed_dim {dim} is not divisible by num_heads {num_heads}')
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return attention of the tokens ``x`` (B, N, D) -> (B, N, D)."""
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, d // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, d))


class LayerScale(nn.Module):
    """Per-channel learned scale ``gamma`` (DINOv2 ``ls1``/``ls2``)."""

    def __init__(self, dim: int, init_value: float = 1e-5):
        """Build the layer with ``gamma`` filled with ``init_value``."""
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_value)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return ``x * gamma``."""
        return x * self.gamma


class Mlp(nn.Module):
    """Two-layer GELU MLP (``fc1``, ``fc2``)."""

    def __init__(self, dim: int, hidden: int):
        """Build the MLP ``dim -> hidden -> dim``."""
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the MLP output (same shape as ``x``)."""
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block with optional LayerScale."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, layerscale: Optional[float]):
        """Build the block; ``layerscale`` None/0 disables ``ls1``/``ls2``."""
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.ls1 = LayerScale(dim, layerscale) if layerscale else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim, layerscale) if layerscale else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the block output for tokens ``x`` (B, N, D)."""
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class PatchEmbed(nn.Module):
    """Non-overlapping patch projection ``proj`` (Conv2d with kernel = stride = patch)."""

    def __init__(self, patch_size: int, dim: int):
        """Build the projection of 3-channel patches to ``dim`` channels."""
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return patch tokens (B, H/p * W/p, D), row-major."""
        return self.proj(x).flatten(2).transpose(1, 2)


class VisionTransformer(nn.Module):
    """DINOv2-style ViT returning multi-scale (here: same-scale) feature maps.

    Input: ``image`` (B, 3, H, W) float32 normalised (ImageNet mean/std for DINOv2 weights),
    H and W multiples of ``patch_size``. ``forward`` returns one (B, D, H/p, W/p) map per
    ``out_indices`` block (after the final LayerNorm, as DINOv2's ``get_intermediate_layers``).
    """

    default_conf: Dict[str, Any] = {
        'name': 'vit',
        'patch_size': 14,
        'embed_dim': 384,
        'depth': 12,
        'num_heads': 6,
        'mlp_ratio': 4.0,
        'img_size': 518,          # position embeddings are stored for img_size / patch_size
        'layerscale': 1.0,        # LayerScale init value (DINOv2: 1e-5; DA-V2 builds with 1.0)
        'num_register_tokens': 0,
        'interpolate_offset': 0.1,
        'interpolate_antialias': False,
        'out_indices': [2, 5, 8, 11],
    }

    def __init__(self, conf: Optional[Dict[str, Any]] = None):
        """Build the backbone from ``conf`` merged over ``default_conf``.

        Raises:
            ValueError: inconsistent sizes or out_indices.
        """
        super().__init__()
        self.conf = conf = {**self.default_conf, **(conf or {})}
        p, dim, depth = int(conf['patch_size']), int(conf['embed_dim']), int(conf['depth'])
        if p < 1 or conf['img_size'] % p:
            raise ValueError(f'img_size {conf["img_size"]} must be a multiple of the patch size '
                             f'{p}')
        out_indices = [int(i) for i in conf['out_indices']]
        if not out_indices or any(not 0 <= i < depth for i in out_indices):
            raise ValueError(f'vit out_indices must lie in 0..{depth - 1}, got {out_indices}')
        self.patch_size = p
        self.embed_dim = dim
        self.num_register_tokens = int(conf['num_register_tokens'])
        self.interpolate_offset = float(conf['interpolate_offset'])
        self.interpolate_antialias = bool(conf['interpolate_antialias'])
        grid = conf['img_size'] // p
        self.patch_embed = PatchEmbed(p, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, grid * grid + 1, dim))
        self.register_tokens = (nn.Parameter(torch.zeros(1, self.num_register_tokens, dim))
                                if self.num_register_tokens else None)
        self.blocks = nn.ModuleList(
            Block(dim, int(conf['num_heads']), float(conf['mlp_ratio']), conf['layerscale'])
            for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mask_token = nn.Parameter(torch.zeros(1, dim))
        self.out_indices = out_indices
        self.out_channels: List[int] = [dim] * len(out_indices)
        self.strides: List[int] = [p] * len(out_indices)
        self.stride = p
        self.size_multiple = p
        self.has_class_token = True
        self._init_weights()

    def _init_weights(self) -> None:
        """Initialise as DINOv2 (truncated normal 0.02 for linears and pos_embed)."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        if self.register_tokens is not None:
            nn.init.normal_(self.register_tokens, std=1e-6)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def interpolate_pos_encoding(self, height: int, width: int) -> torch.Tensor:
        """Return position embeddings (1, 1 + h*w, D) for an input of ``height`` x ``width``.

        Same arithmetic as DINOv2: bicubic resampling of the stored (N0, N0) grid with scale
        factors ``(n + interpolate_offset) / N0`` (float32), unchanged when the input is the
        square stored size.
        """
        stored = self.pos_embed.shape[1] - 1
        h, w = height // self.patch_size, width // self.patch_size
        if h * w == stored and h == w:
            return self.pos_embed
        dtype = self.pos_embed.dtype
        pos = self.pos_embed.float()
        side = math.sqrt(stored)
        grid = pos[:, 1:].reshape(1, int(side), int(side), -1).permute(0, 3, 1, 2)
        scale = ((h + self.interpolate_offset) / side, (w + self.interpolate_offset) / side)
        grid = F.interpolate(grid, scale_factor=scale, mode='bicubic',
                             antialias=self.interpolate_antialias)
        if grid.shape[-2:] != (h, w):
            raise ValueError(f'position embedding resampled to {tuple(grid.shape[-2:])}, '
                             f'expected {(h, w)}; use another interpolate_offset')
        grid = grid.permute(0, 2, 3, 1).reshape(1, h * w, -1)
        return torch.cat((pos[:, :1], grid), dim=1).to(dtype)

    def prepare_tokens(self, image: torch.Tensor) -> torch.Tensor:
        """Return the input token sequence (B, 1 + R + h*w, D): class, registers, patches."""
        if image.dim() != 4 or image.shape[1] != 3:
            raise ValueError(f'image must be (B, 3, H, W), got {tuple(image.shape)}')
        # python ints: the position-embedding resampling is a constant of the input size (an
        # exported ONNX/TensorRT graph is specialised to its input size)
        height, width = int(image.shape[-2]), int(image.shape[-1])
        if height % self.patch_size or width % self.patch_size:
            raise ValueError(f'image size {height}x{width} must be a multiple of the patch size '
                             f'{self.patch_size}')
        x = self.patch_embed(image)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + self.interpolate_pos_encoding(height, width)
        if self.register_tokens is not None:
            x = torch.cat((x[:, :1], self.register_tokens.expand(x.shape[0], -1, -1), x[:, 1:]),
                          dim=1)
        return x

    def get_intermediate_layers(self, image: torch.Tensor,
                                indices: Union[int, Sequence[int]] = 1,
                                return_class_token: bool = False, norm: bool = True
                                ) -> Union[List[torch.Tensor],
                                           List[Tuple[torch.Tensor, torch.Tensor]]]:
        """Return the outputs of some blocks as maps.

        Args:
            image: (B, 3, H, W) normalised image, sides multiples of ``patch_size``.
            indices: block indices, or an int n for the last n blocks.
            return_class_token: also return each block's class token.
            norm: apply the final LayerNorm (DINOv2 default).

        Returns:
            List of (B, D, H/p, W/p) maps, or of ``(map, class_token (B, D))`` pairs.
        """
        if isinstance(indices, int):
            indices = range(len(self.blocks) - indices, len(self.blocks))
        wanted = {int(i) for i in indices}
        b, height, width = image.shape[0], int(image.shape[-2]), int(image.shape[-1])
        h, w = height // self.patch_size, width // self.patch_size
        x = self.prepare_tokens(image)
        outputs = []
        for i, block in enumerate(self.blocks[:max(wanted) + 1]):
            x = block(x)
            if i in wanted:
                outputs.append(self.norm(x) if norm else x)
        skip = 1 + self.num_register_tokens
        maps = [o[:, skip:].transpose(1, 2).reshape(b, -1, h, w) for o in outputs]
        if return_class_token:
            return [(m, o[:, 0]) for m, o in zip(maps, outputs)]
        return maps

    def forward_with_tokens(self, image: torch.Tensor
                            ) -> Tuple[List[torch.Tensor], Optional[List[torch.Tensor]]]:
        """Return ``(maps, class_tokens)`` of the ``out_indices`` blocks."""
        pairs = self.get_intermediate_layers(image, self.out_indices, return_class_token=True)
        return [m for m, _ in pairs], [t for _, t in pairs]

    def forward(self, image: torch.Tensor) -> List[torch.Tensor]:
        """Return the (B, D, H/p, W/p) maps of the ``out_indices`` blocks."""
        return self.get_intermediate_layers(image, self.out_indices)
