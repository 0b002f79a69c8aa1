# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""TensorRT backend: runs a serialised TensorRT 10 engine on named numpy arrays.

Written against the TensorRT 10 Python API (named I/O tensors, ``set_input_shape``,
``set_tensor_address``, ``execute_async_v3``); device buffers are torch CUDA tensors, so no
pycuda / cuda-python is needed. **Untested in this repository's CI**: TensorRT cannot be
installed on the development machine; ``tensorrt`` is imported when the backend is created and
a clear ``RuntimeError`` is raised when it is missing. Build engines with
``relperception export --format tensorrt`` on the target (e.g. a Jetson with JetPack 6).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict

import numpy as np
from relperception.runtime.base import check_input_names
from relperception.runtime.engine_metadata import engine_metadata_path, read_engine_metadata

logger = logging.getLogger(__name__)


def import_tensorrt():
    """Return the ``tensorrt`` module.

    Returns:
        The imported module.

    Raises:
        RuntimeError: when TensorRT is not installed.
    """
    try:
        import tensorrt  # noqa: PLC0415
    except ImportError as exc:
        raise RuntimeError(
            'tensorrt is not installed: the tensorrt backend and engine export need the '
            'TensorRT 10 Python bindings (on Jetson: JetPack 6; on x86: `pip install '
            'tensorrt`); use backend onnxruntime or torch instead') from exc
    return tensorrt


class TensorRTBackend:
    """Run a serialised TensorRT engine as an ``InferenceBackend``.

    Args:
        engine_path: the engine file (``relperception export --format tensorrt``).
        device: CUDA device index.

    Attributes:
        input_names, output_names: tuple of I/O tensor names in engine order.

    Raises:
        RuntimeError: TensorRT or CUDA is unavailable, or the engine cannot be deserialised
            (e.g. built by another TensorRT version or for another GPU).
        FileNotFoundError: the engine file does not exist.
    """

    def __init__(self, engine_path, device: int = 0):
        """Deserialise the engine and create its execution context."""
        trt = import_tensorrt()
        import torch  # noqa: PLC0415

        self.path = Path(engine_path)
        if not self.path.is_file():
            raise FileNotFoundError(f'TensorRT engine {self.path} does not exist')
        if not torch.cuda.is_available():
            raise RuntimeError('the tensorrt backend needs a CUDA device')
        self._torch = torch
        self.device = torch.device('cuda', int(device))
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        with torch.cuda.device(self.device):
            self.engine = self._runtime.deserialize_cuda_engine(self.path.read_bytes())
            if self.engine is None:
                raise RuntimeError(f'cannot deserialise TensorRT engine {self.path} (built '
                                   f'by another TensorRT version or for another GPU?)')
            self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        is_input = {n: self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self.input_names = tuple(n for n in names if is_input[n])
        self.output_names = tuple(n for n in names if not is_input[n])
        self._dtypes = {n: _torch_dtype(trt, torch, self.engine.get_tensor_dtype(n))
                        for n in names}
        self._stream = torch.cuda.Stream(device=self.device)
        #: the engine's metadata file (preset, size bounds, precision), None without one.
        self.metadata = read_engine_metadata(self.path)
        if self.metadata is None:
            logger.warning('%s has no metadata file (%s): its preset and precision cannot be '
                           'checked (build it with relperception export --format tensorrt)',
                           self.path, engine_metadata_path(self.path).name)
        else:
            logger.info('%s: preset %s, %s', self.path, self.metadata.get('preset'),
                        self.metadata['precision'])

    def run(self, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run the engine.

        Args:
            inputs: one numpy array per input name (cast to the engine's dtype).

        Returns:
            One numpy array per output name.

        Raises:
            ValueError: wrong input names or a shape the engine's profile does not accept.
            RuntimeError: execution failed.
        """
        check_input_names(inputs, self.input_names)
        torch = self._torch
        keep = []
        with torch.cuda.device(self.device), torch.cuda.stream(self._stream):
            for name in self.input_names:
                tensor = torch.as_tensor(np.ascontiguousarray(inputs[name]))
                tensor = tensor.to(self.device, self._dtypes[name]).contiguous()
                if not self.context.set_input_shape(name, tuple(tensor.shape)):
                    raise ValueError(f'input {name!r} shape {tuple(tensor.shape)} is outside '
                                     f'the optimisation profile of {self.path.name}')
                self.context.set_tensor_address(name, tensor.data_ptr())
                keep.append(tensor)
            outputs = {}
            for name in self.output_names:
                shape = tuple(self.context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise RuntimeError(f'output {name!r} has an unresolved shape {shape}')
                tensor = torch.empty(shape, dtype=self._dtypes[name], device=self.device)
                self.context.set_tensor_address(name, tensor.data_ptr())
                outputs[name] = tensor
            if not self.context.execute_async_v3(self._stream.cuda_stream):
                raise RuntimeError(f'TensorRT execution of {self.path.name} failed')
            self._stream.synchronize()
        return {n: t.cpu().numpy() for n, t in outputs.items()}


def _torch_dtype(trt, torch, dtype):
    table = {trt.float32: torch.float32, trt.float16: torch.float16, trt.int32: torch.int32,
             trt.int8: torch.int8, trt.bool: torch.bool, trt.uint8: torch.uint8}
    if hasattr(trt, 'int64'):
        table[trt.int64] = torch.int64
    if hasattr(trt, 'bfloat16'):
        table[trt.bfloat16] = torch.bfloat16
    if dtype not in table:
        raise RuntimeError(f'unsupported TensorRT tensor dtype {dtype}')
    return table[dtype]
