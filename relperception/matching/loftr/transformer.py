# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""LoFTR's local feature transformer: alternating self- and cross-attention layers.

Two attention kinds: ``'linear'`` (the kernelised attention of "Transformers are RNNs" with
``phi(x) = elu(x) + 1``, as LoFTR) and ``'full'`` (softmax attention through
``torch.nn.functional.scaled_dot_product_attention``). Parameter names follow kornia / LoFTR:
``layers.<i>.{q_proj,k_proj,v_proj,merge,mlp.0,mlp.2,norm1,norm2}``.
"""

from typing import Optional, Sequence, Tuple

from relperception.matching.loftr.fast_path import apply_linear
import torch
from torch import nn
import torch.nn.functional as F

ATTENTION_KINDS = ('linear', 'full')
LAYER_KINDS = ('self', 'cross')


def _phi(x: torch.Tensor) -> torch.Tensor:
    """Positive feature map of linear attention."""
    return F.elu(x) + 1.0


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     eps: float = 1e-6) -> torch.Tensor:
    """Kernelised attention ``phi(q) (phi(k)^T v) / (phi(q) . sum_s phi(k_s))``.

    Args:
        q: (N, L, H, D) queries.
        k: (N, S, H, D) keys.
        v: (N, S, H, V) values.
        eps: added to the normaliser (as in LoFTR: ``phi(q) . sum_s phi(k_s) + eps``).

    Returns:
        (N, L, H, V) attended values. Both sums over S are taken as means (the same quotient),
        which keeps them in range in float16.
    """
    q = _phi(q).transpose(1, 2)  # (N, H, L, D); matmuls rather than einsum: TensorRT friendly
    k = _phi(k).transpose(1, 2)  # (N, H, S, D)
    length = v.shape[1]
    kv = k.transpose(2, 3) @ (v.transpose(1, 2) / length)  # (N, H, D, V): mean of k v^T
    # numerator and normaliser in one product: the mean key is an extra column of kv
    both = q @ torch.cat([kv, k.mean(dim=2).unsqueeze(-1)], dim=3)  # (N, H, L, V + 1)
    denominator = both[..., -1:] + eps / length
    denominator = denominator.clamp_min(torch.finfo(denominator.dtype).tiny)
    return (both[..., :-1] / denominator).transpose(1, 2)


def full_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention, scale 1/sqrt(D): (N,L,H,D), (N,S,H,D), (N,S,H,V) -> (N,L,H,V)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


class EncoderLayer(nn.Module):
    """One LoFTR encoder layer: multi-head attention, merge, LayerNorm, 2-layer MLP, residual."""

    def __init__(self, d_model: int, nhead: int, attention: str = 'linear'):
        """Create the layer.

        Args:
            d_model: feature channels C.
            nhead: attention heads (C must be divisible by it).
            attention: ``'linear'`` or ``'full'``.

        Raises:
            ValueError: for an unknown attention kind or indivisible ``d_model``.
        """
        super().__init__()
        if attention not in ATTENTION_KINDS:
            raise ValueError(f'attention must be one of {ATTENTION_KINDS}, got {attention!r}')
        if d_model % nhead:
            raise ValueError(f'd_model {d_model} is not divisible by nhead {nhead}')
        self.nhead = nhead
        self.dim = d_model // nhead
        self.attention = attention
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.merge = nn.Linear(d_model, d_model, bias=False)
        self.mlp = nn.Sequential(nn.Linear(2 * d_model, 2 * d_model, bias=False), nn.ReLU(True),
                                 nn.Linear(2 * d_model, d_model, bias=False))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def _heads(self, proj: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return apply_linear(proj, x).reshape(x.shape[0], -1, self.nhead, self.dim)  # (N,L,H,D)

    def forward(self, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """Update ``x`` (N, L, C) with messages from ``source`` (N, S, C); returns (N, L, C)."""
        q = self._heads(self.q_proj, x)
        k = self._heads(self.k_proj, source)
        v = self._heads(self.v_proj, source)
        if self.attention == 'linear':
            message = linear_attention(q, k, v)
        else:
            message = full_attention(q, k, v)
        message = self.norm1(apply_linear(self.merge, message.flatten(2)))
        hidden = apply_linear(self.mlp[0], torch.cat([x, message], dim=2))
        message = self.norm2(apply_linear(self.mlp[2], self.mlp[1](hidden)))
        return x + message

    def attention_weights(self, x: torch.Tensor, source: torch.Tensor,
                          query_index: torch.Tensor) -> torch.Tensor:
        """Attention weights of chosen queries over the source tokens (for visualisation).

        Args:
            x: (N, L, C) tokens entering this layer (queries).
            source: (N, S, C) tokens attended to.
            query_index: (Q,) int64 indices into L.

        Returns:
            (N, Q, H, S) weights summing to 1 over S: the normalised kernel weights
            ``phi(q) . phi(k_s) / sum_s phi(q) . phi(k_s)`` for linear attention, the softmax
            weights for full attention.
        """
        q = self._heads(self.q_proj, x[:, query_index])
        k = self._heads(self.k_proj, source)
        if self.attention == 'linear':
            scores = torch.einsum('nqhd,nshd->nqhs', _phi(q), _phi(k))
            return scores / scores.sum(dim=-1, keepdim=True)
        scores = torch.einsum('nqhd,nshd->nqhs', q, k) / self.dim ** 0.5
        return scores.softmax(dim=-1)


class LocalFeatureTransformer(nn.Module):
    """A stack of self/cross encoder layers applied to two token sets."""

    def __init__(self, d_model: int, nhead: int, layer_names: Sequence[str],
                 attention: str = 'linear'):
        """Create the stack.

        Args:
            d_model: feature channels C.
            nhead: attention heads.
            layer_names: sequence of ``'self'`` / ``'cross'``.
            attention: ``'linear'`` or ``'full'``.

        Raises:
            ValueError: for an unknown layer name (or invalid layer arguments).
        """
        super().__init__()
        bad = [n for n in layer_names if n not in LAYER_KINDS]
        if bad:
            raise ValueError(f'layer names must be in {LAYER_KINDS}, got {bad}')
        self.d_model = d_model
        self.layer_names = list(layer_names)
        self.layers = nn.ModuleList(EncoderLayer(d_model, nhead, attention) for _ in layer_names)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, feat0: torch.Tensor, feat1: torch.Tensor,
                num_layers: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Transform (N, L, C) and (N, S, C) tokens; returns both updated.

        Args:
            feat0: (N, L, C) tokens of image 0.
            feat1: (N, S, C) tokens of image 1.
            num_layers: apply only the first ``num_layers`` layers (None: all).

        Raises:
            ValueError: if the channel count differs from ``d_model``.
        """
        if feat0.shape[-1] != self.d_model or feat1.shape[-1] != self.d_model:
            raise ValueError(f'expected {self.d_model} channels, got {feat0.shape[-1]} and '
                             f'{feat1.shape[-1]}')
        names = self.layer_names if num_layers is None else self.layer_names[:num_layers]
        for layer, name in zip(self.layers, names):
            if name == 'self':
                feat0, feat1 = layer(feat0, feat0), layer(feat1, feat1)
            else:
                feat0 = layer(feat0, feat1)
                feat1 = layer(feat1, feat0)
        return feat0, feat1

    def attention_weights(self, layer_index: int, x: torch.Tensor, source: torch.Tensor,
                          query_index) -> torch.Tensor:
        """Attention weights of layer ``layer_index`` for chosen query tokens.

        Args:
            layer_index: index into ``layer_names``.
            x: (L, C) or (1, L, C) tokens entering the layer on the query side.
            source: (S, C) or (1, S, C) tokens attended to (``x`` itself for a self layer).
            query_index: int or (Q,) indices into L.

        Returns:
            (heads, S) for an int ``query_index``, else (Q, heads, S); rows sum to 1.

        Raises:
            ValueError: for an out-of-range layer index.
        """
        if not 0 <= layer_index < len(self.layers):
            raise ValueError(f'layer_index {layer_index} outside [0, {len(self.layers)})')
        single = isinstance(query_index, int)
        index = torch.as_tensor([query_index] if single else query_index, dtype=torch.long,
                                device=x.device).reshape(-1)
        x = x if x.dim() == 3 else x.unsqueeze(0)
        source = source if source.dim() == 3 else source.unsqueeze(0)
        weights = self.layers[layer_index].attention_weights(x, source, index)[0]
        return weights[0] if single else weights
