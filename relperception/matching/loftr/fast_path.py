# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""CPU inference kernels of LoFTR: oneDNN convolutions instead of BLAS matrix products.

In eval mode on CPU (and not while tracing for export) the model runs its dense layers through
oneDNN (``torch.nn.functional.conv2d`` on channels-last tensors) rather than through the BLAS
library behind ``torch.nn.functional.linear``:

* ``folded_conv``: a convolution with its BatchNorm folded into the weights, channels-last;
* ``pointwise_linear``: a linear layer on tokens as a 1x1 convolution over channels-last
  pixels. Measured on the 2-core AMD EPYC development machine (torch 2.13, MKL 2024.2): a
  (4800, 256) x (256, 256) product runs at ~190 GFLOP/s through ``F.linear`` (MKL) and at
  ~450 GFLOP/s as a 1x1 oneDNN convolution; on CUDA tensors ``F.linear`` is used unchanged.

These are the same operations as the plain modules, up to float rounding; training, CUDA and
the exported graphs (ONNX MatMul / Conv, which onnxruntime runs at full speed) keep the plain
path.
"""

from typing import Optional

import torch
from torch import nn
import torch.nn.functional as F


def exporting() -> bool:
    """Return True while ``torch.onnx`` exports a graph."""
    is_exporting = getattr(torch.onnx, 'is_in_onnx_export', None)
    return bool(is_exporting()) if is_exporting is not None else False


def tracing_or_exporting() -> bool:
    """Return True while tracing (``torch.jit``) or exporting (``torch.onnx``) a graph."""
    return torch.jit.is_tracing() or exporting()


def fast_path(module: nn.Module) -> bool:
    """Return True when ``module`` may use the folded channels-last inference path."""
    return not module.training and not tracing_or_exporting()


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """Return the (B, C, H, W) ``x`` with channels-last strides, also for C = 1.

    A 1-channel image is NCHW and NHWC at once, and a convolution then writes NCHW output;
    with the channel stride set to 1 it writes channels-last output (measured on the stem of
    LoFTR at 480x640: half the time of the NCHW convolution plus the conversion).
    """
    if x.shape[1] != 1:
        return x.contiguous(memory_format=torch.channels_last)
    x = x.contiguous()
    height, width = x.shape[2:]
    return x.as_strided(x.shape, (height * width, 1, width, 1))


def folded_conv(x: torch.Tensor, conv: nn.Conv2d, bn: Optional[nn.BatchNorm2d] = None,
                padding: Optional[int] = None) -> torch.Tensor:
    """Apply ``conv`` (then eval-mode ``bn``) as one channels-last convolution.

    Args:
        x: (B, C, H, W) input, preferably channels-last.
        conv: the convolution (its parameters are read, not changed).
        bn: a BatchNorm2d following it, folded into the weights with its running statistics.
        padding: overrides ``conv.padding`` (e.g. 0 for a 'valid' convolution of a patch).

    Returns:
        The (B, C', H', W') output, channels-last; equal to ``bn(conv(x))`` up to rounding.
    """
    weight, bias = conv.weight, conv.bias
    if bn is not None:
        scale = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
        weight = weight * scale.reshape(-1, 1, 1, 1)
        shift = bn.bias - bn.running_mean * scale
        bias = shift if bias is None else bias * scale + shift
    weight = weight.contiguous(memory_format=torch.channels_last)
    padding = conv.padding if padding is None else padding
    return F.conv2d(x, weight, bias, conv.stride, padding, conv.dilation, conv.groups)


def pointwise_linear(x: torch.Tensor, weight: torch.Tensor,
                     bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``, on CPU as a 1x1 oneDNN convolution.

    Args:
        x: (..., C) features (e.g. (N, L, C) tokens).
        weight: (C', C) weight of the linear layer.
        bias: (C',) bias or None.

    Returns:
        (..., C') contiguous output, equal to ``F.linear`` up to float rounding.
    """
    if x.device.type != 'cpu' or x.dim() < 2:
        return F.linear(x, weight, bias)
    channels = x.shape[-1]
    # the tokens as the pixels of a (1, C, 1, M) channels-last image: no copy for contiguous x
    pixels = x.reshape(1, 1, -1, channels).permute(0, 3, 1, 2)
    out = F.conv2d(pixels, weight[:, :, None, None], bias)
    return out.permute(0, 2, 3, 1).reshape(*x.shape[:-1], weight.shape[0])


def apply_linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)``, through :func:`pointwise_linear` on the inference fast path."""
    if fast_path(layer):
        return pointwise_linear(x, layer.weight, layer.bias)
    return layer(x)
