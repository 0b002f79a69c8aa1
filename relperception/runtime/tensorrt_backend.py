# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""TensorRT backend: runs a serialised TensorRT 10 engine on named numpy arrays.

Written against the TensorRT 10 Python API (named I/O tensors, ``set_input_shape``,
``set_tensor_address``, ``execute_async_v3``); device buffers and the stream come from
cuda-python (:mod:`relperception.runtime.cuda_buffers`), so torch is not needed. **Untested on a
GPU in this repository's CI**: TensorRT cannot be installed on the development machine; the
tests run this class on stand-ins of TensorRT and of the CUDA runtime. ``tensorrt`` and
cuda-python are imported when the backend is created, with a clear ``RuntimeError`` when one
is missing. Build engines with ``relperception export --format tensorrt`` on the target (e.g. a
Jetson with JetPack 6), or let the node build and cache them
(:mod:`relperception.runtime.engine_cache`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict

import numpy as np
from relperception.runtime.base import check_input_names
from relperception.runtime.cuda_buffers import DeviceBuffers
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
        cudart: the CUDA runtime module (default: cuda-python's).

    Attributes:
        input_names, output_names: tuple of I/O tensor names in engine order.

    Raises:
        RuntimeError: TensorRT or CUDA is unavailable, or the engine cannot be deserialised
            (e.g. built by another TensorRT version or for another GPU).
        FileNotFoundError: the engine file does not exist.
    """

    def __init__(self, engine_path, device: int = 0, cudart=None):
        """Deserialise the engine and create its execution context.

        ``cudart``: the CUDA runtime module (default: cuda-python's, see
        :func:`relperception.runtime.cuda_buffers.import_cudart`).
        """
        trt = import_tensorrt()
        self.path = Path(engine_path)
        if not self.path.is_file():
            raise FileNotFoundError(f'TensorRT engine {self.path} does not exist')
        self.buffers = DeviceBuffers(device, cudart)
        self.device = self.buffers.device
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self.engine = self._runtime.deserialize_cuda_engine(self.path.read_bytes())
        if self.engine is None:
            self.buffers.close()
            raise RuntimeError(f'cannot deserialise TensorRT engine {self.path} (built by '
                               f'another TensorRT version or for another GPU?)')
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        is_input = {n: self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self.input_names = tuple(n for n in names if is_input[n])
        self.output_names = tuple(n for n in names if not is_input[n])
        self._dtypes = {n: _numpy_dtype(trt, self.engine.get_tensor_dtype(n)) for n in names}
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
            RuntimeError: execution or a CUDA call failed.
        """
        check_input_names(inputs, self.input_names)
        for name in self.input_names:
            array = np.ascontiguousarray(inputs[name], dtype=self._dtypes[name])
            if not self.context.set_input_shape(name, array.shape):
                raise ValueError(f'input {name!r} shape {array.shape} is outside the '
                                 f'optimisation profile of {self.path.name}')
            self.context.set_tensor_address(name, self.buffers.to_device(name, array))
        shapes = {}
        for name in self.output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise RuntimeError(f'output {name!r} has an unresolved shape {shape}')
            nbytes = int(np.prod(shape, dtype=np.int64)) * self._dtypes[name].itemsize
            self.context.set_tensor_address(name, self.buffers.buffer(name, nbytes))
            shapes[name] = shape
        if not self.context.execute_async_v3(self.buffers.stream_handle):
            raise RuntimeError(f'TensorRT execution of {self.path.name} failed')
        outputs = {n: self.buffers.to_host(n, shapes[n], self._dtypes[n]) for n in shapes}
        self.buffers.synchronize()
        return outputs

    def close(self) -> None:
        """Free the device buffers and the stream."""
        self.buffers.close()


def _numpy_dtype(trt, dtype) -> np.dtype:
    """Return the numpy dtype of a TensorRT tensor dtype (``trt.nptype``)."""
    try:
        return np.dtype(trt.nptype(dtype))
    except TypeError:
        raise RuntimeError(f'unsupported TensorRT tensor dtype {dtype} (no numpy '
                           'equivalent)') from None
