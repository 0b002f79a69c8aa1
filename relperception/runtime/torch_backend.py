# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Torch eager backend: runs an ``nn.Module`` on named numpy arrays under inference mode."""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np
from relperception.runtime.base import check_input_names
from relperception.runtime.devices import torch_device
import torch


class TorchBackend:
    """Run a torch module as an ``InferenceBackend``.

    The module is called with the inputs as positional arguments in ``input_names`` order and
    may return a tensor (one output), a tuple/list (one item per output name, in order) or a
    dict (the ``output_names`` keys are picked). The module is put in eval mode and moved to
    ``device``; the device is never chosen here.

    Args:
        module: the network.
        input_names: names of the positional arguments, in order.
        output_names: names of the outputs.
        device: torch device (``cpu``, ``cuda``, ``cuda:N``).

    Raises:
        ValueError: no input or output names, or a module that is not an ``nn.Module``.
    """

    def __init__(self, module: torch.nn.Module, input_names: Sequence[str],
                 output_names: Sequence[str], device: str = 'cpu'):
        """Move ``module`` to ``device`` in eval mode and store the names."""
        if not isinstance(module, torch.nn.Module):
            raise ValueError(f'module must be a torch.nn.Module, got {type(module).__name__}')
        if not input_names or not output_names:
            raise ValueError('TorchBackend needs input_names and output_names')
        self.input_names = tuple(input_names)
        self.output_names = tuple(output_names)
        self.device = torch_device(device)
        self.module = module.to(self.device).eval()

    def run(self, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run the module.

        Args:
            inputs: one numpy array (or tensor) per input name.

        Returns:
            One numpy array per output name (copied to the CPU).

        Raises:
            ValueError: wrong input names, an input that is not float32, or outputs that do
                not match ``output_names``.
        """
        check_input_names(inputs, self.input_names)
        for name in self.input_names:   # as the exported backends check theirs
            dtype = getattr(inputs[name], 'dtype', None)
            if dtype not in (np.float32, torch.float32):
                raise ValueError(f'input {name!r} must be a float32 array, got '
                                 f'{dtype or type(inputs[name]).__name__}')
        args = [torch.as_tensor(np.ascontiguousarray(inputs[n])
                                if isinstance(inputs[n], np.ndarray) else inputs[n],
                                device=self.device)
                for n in self.input_names]
        with torch.inference_mode():
            result = self.module(*args)
        if isinstance(result, torch.Tensor):
            result = (result,)
        if isinstance(result, dict):
            missing = [n for n in self.output_names if n not in result]
            if missing:
                raise ValueError(f'module outputs lack {missing}; it returned {sorted(result)}')
            picked = [result[n] for n in self.output_names]
        else:
            picked = list(result)
            if len(picked) != len(self.output_names):
                raise ValueError(f'module returned {len(picked)} outputs, expected '
                                 f'{len(self.output_names)} ({list(self.output_names)})')
        return {n: t.detach().cpu().numpy() for n, t in zip(self.output_names, picked)}
