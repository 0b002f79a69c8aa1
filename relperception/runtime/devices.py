# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Checking a requested torch device before anything runs on it.

The caller names the device (a parameter or a CLI option); :func:`torch_device` only checks
that this installation has it, so that ``cuda:7`` on a CPU-only build fails with a sentence,
not with torch's ``AssertionError`` at the first tensor. It never picks a device.
"""

from __future__ import annotations


def torch_device(name, what: str = 'device'):
    """Return ``torch.device(name)`` once this torch installation is known to have it.

    Args:
        name: ``'cpu'``, ``'cuda'``, ``'cuda:N'`` (or a ``torch.device``).
        what: how the caller's user knows the setting (e.g. ``'loftr.device'``), for messages.

    Raises:
        ValueError: not a device name, no CUDA in this torch build or machine, an index past
            the CUDA devices present, or a device type this package does not run on.
    """
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f'{what} {name!r} is not a torch device ({error}); use cpu, cuda or '
                         'cuda:N') from None
    if device.type == 'cpu':
        return device
    if device.type != 'cuda':
        raise ValueError(f'{what} {name!r}: only cpu and cuda devices are supported')
    if not torch.cuda.is_available():
        raise ValueError(f'{what} is {name!r} but this torch (version {torch.__version__}) has '
                         'no usable CUDA device; use cpu')
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(f'{what} is {name!r} but this machine has {count} CUDA device(s) '
                         f'(cuda:0 to cuda:{count - 1})')
    return device
