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

Export with dynamic height and width: in eager mode the resampling is ``F.interpolate`` itself
(bit-exact DINOv2). While tracing (``torch.jit.trace`` / ``torch.onnx.export``) it is computed
from the traced input size as two separable weight matrices, ``pos = Wh @ grid @ Ww^T`` with
``Wh`` (h, N0) and ``Ww`` (w, N0) built by ``bicubic_resize_matrix`` from ``arange`` (the same
source coordinates, clamped border taps and A = -0.75 cubic weights as PyTorch's
``upsample_bicubic2d``; within ~1e-6 of it). The exported graph then follows the input size
(MatMul / Floor / Clip / Equal / Where nodes only, no Resize), and at the square stored size it
selects identity matrices, so the stored embeddings are used unchanged there as in eager mode.
The scale arithmetic is done in float64 like PyTorch's (TensorRT's ONNX parser runs those few
shape-only ops in float32, which moves the weights by ~1e-6; in an FP16 engine they should be
kept in float32: a float16 source coordinate near 37 is off by up to 0.016 patch). With
``interpolate_antialias=True`` there is no such formulation here and a traced graph is fixed to
its example size.

``get_intermediate_layers(x, indices, return_class_token)`` returns the LayerNorm-ed outputs of
the given blocks reshaped to (B, D, H/p, W/p) maps (plus (B, D) class tokens).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn
import torch.nn.functional as F


_CUBIC_A = -0.75  # PyTorch's bicubic (OpenCV's) convolution constant


def _is_tracing() -> bool:
    """Return True while tracing / exporting, when shape values must stay symbolic."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def _size_tensor(n: Union[int, torch.Tensor]) -> torch.Tensor:
    """Return a size value as a 0-d tensor (traced sizes already are tensors: keep them)."""
    return n if isinstance(n, torch.Tensor) else torch.tensor(n)


def _offset_scale(n: Union[int, torch.Tensor], offset: float, side: int) -> torch.Tensor:
    """Return DINOv2's scale factor ``(n + offset) / side`` as a float64 0-d tensor."""
    return (_size_tensor(n).to(torch.float64) + offset) / side


def _cubic_near(x: torch.Tensor) -> torch.Tensor:
    """Cubic convolution weight for taps at distance ``x`` in [0, 1]."""
    return ((_CUBIC_A + 2) * x - (_CUBIC_A + 3)) * x * x + 1


def _cubic_far(x: torch.Tensor) -> torch.Tensor:
    """Cubic convolution weight for taps at distance ``x`` in [1, 2]."""
    return ((_CUBIC_A * x - 5 * _CUBIC_A) * x + 8 * _CUBIC_A) * x - 4 * _CUBIC_A


def bicubic_resize_matrix(out_size: Union[int, torch.Tensor], in_size: int,
                          scale_factor: Union[float, torch.Tensor],
                          identity_if: Optional[torch.Tensor] = None,
                          device: Optional[torch.device] = None) -> torch.Tensor:
    """Return the (out_size, in_size) matrix of PyTorch's 1-D bicubic resampling.

    ``W @ x`` along one axis equals ``F.interpolate(..., scale_factor=scale_factor,
    mode='bicubic', align_corners=False, antialias=False)`` along that axis (so the 2-D
    resampling of a (..., N, M) grid is ``Wh @ grid @ Ww^T``): source coordinate
    ``(i + 0.5) / scale_factor - 0.5`` with the step ``1 / scale_factor`` rounded to float32,
    cubic convolution with A = -0.75 over 4 taps, border taps clamped to the edge. Built
    from ``arange`` of ``out_size`` only, so it is traceable with a symbolic ``out_size``
    (the ONNX graph follows the input size). Matches PyTorch's CPU kernel within ~1e-6 (the
    kernel evaluates its weights in float32; they are evaluated in float64 here).

    Args:
        out_size: number of output samples (an int, or a traced size value).
        in_size: number of input samples (>= 1).
        scale_factor: output/input ratio as passed to ``interpolate`` (> 0; a float or a
            float64 0-d tensor).
        identity_if: optional 0-d bool tensor; where True the matrix is the (out_size,
            in_size) identity pattern instead (used at the stored size, which DINOv2 does
            not resample).
        device: device of the result (default CPU).

    Returns:
        (out_size, in_size) float32 weights; each row sums to 1.

    Raises:
        ValueError: ``in_size`` < 1 or a non-positive python ``scale_factor``.
    """
    if in_size < 1:
        raise ValueError(f'in_size must be >= 1, got {in_size}')
    if not isinstance(scale_factor, torch.Tensor):
        if scale_factor <= 0:
            raise ValueError(f'scale_factor must be > 0, got {scale_factor}')
        scale_factor = torch.tensor(float(scale_factor), dtype=torch.float64)
    f64 = torch.float64
    step = (1.0 / scale_factor.to(device=device, dtype=f64)).to(torch.float32).to(f64)
    dst = torch.arange(out_size, dtype=f64, device=device)
    # one rounding of step * (i + 0.5) - 0.5 to float32, as PyTorch's (fused) kernel
    src = (step * (dst + 0.5) - 0.5).to(torch.float32)
    index = torch.clamp(torch.floor(src), max=in_size - 1)
    t = torch.clamp(src - index, 0.0, 1.0).to(f64)
    weights = (_cubic_far(t + 1), _cubic_near(t), _cubic_near(1 - t), _cubic_far(2 - t))
    columns = torch.arange(in_size, dtype=torch.float32, device=device)
    matrix = torch.zeros((), dtype=f64, device=device)
    for offset, weight in zip((-1, 0, 1, 2), weights):
        tap = torch.clamp(index + offset, 0, in_size - 1)
        matrix = matrix + weight[:, None] * (tap[:, None] == columns[None]).to(f64)
    matrix = matrix.to(torch.float32)
    if identity_if is not None:
        rows = torch.arange(out_size, dtype=torch.float32, device=device)
        identity = (rows[:, None] == columns[None]).to(torch.float32)
        matrix = torch.where(identity_if.to(device), identity, matrix)
    return matrix


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
        self.pos_grid = grid  # N0: pos_embed holds (1, 1 + N0 * N0, D)
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

    def interpolate_pos_encoding(self, height: Union[int, torch.Tensor],
                                 width: Union[int, torch.Tensor]) -> torch.Tensor:
        """Return position embeddings (1, 1 + h*w, D) for an input of ``height`` x ``width``.

        Same arithmetic as DINOv2: bicubic resampling of the stored (N0, N0) grid with scale
        factors ``(n + interpolate_offset) / N0`` (float32), unchanged when the input is the
        square stored size. While tracing, the resampling is the traceable matrix form (see
        the module docstring) so that the graph follows the input size.

        Args:
            height: input height in pixels (a multiple of ``patch_size``; a traced size value
                while tracing).
            width: input width in pixels (same).

        Returns:
            (1, 1 + h*w, D) embeddings, h = height / patch_size, w = width / patch_size.

        Raises:
            ValueError: the offset rule gives another grid size than (h, w) (eager mode).
        """
        side = self.pos_grid
        h, w = height // self.patch_size, width // self.patch_size
        dtype = self.pos_embed.dtype
        pos = self.pos_embed.float()
        grid = pos[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
        if _is_tracing() and not self.interpolate_antialias:
            at_stored = (_size_tensor(h) == side) & (_size_tensor(w) == side)
            device = pos.device
            rows = bicubic_resize_matrix(h, side, _offset_scale(h, self.interpolate_offset, side),
                                         identity_if=at_stored, device=device)
            cols = bicubic_resize_matrix(w, side, _offset_scale(w, self.interpolate_offset, side),
                                         identity_if=at_stored, device=device)
            grid = torch.matmul(torch.matmul(rows, grid), cols.transpose(0, 1))
        else:
            h, w = int(h), int(w)  # antialias while tracing: fixed to the example size
            if h == w == side:
                return self.pos_embed
            # python floats (float64), as DINOv2: (n + offset) / sqrt(N0 * N0)
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
        # shape values, not python ints: traced into an ONNX graph they stay dynamic
        height, width = image.shape[-2], image.shape[-1]
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
        b, height, width = image.shape[0], image.shape[-2], image.shape[-1]
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
