# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""CUDA device buffers and a stream through cuda-python, for the TensorRT backend (no torch).

:class:`DeviceBuffers` keeps one device allocation per tensor name, grown when a larger
tensor comes (never shrunk), copies numpy arrays to and from them on its own stream, and
frees everything on :meth:`DeviceBuffers.close`. Every CUDA call is checked: a failure raises
``RuntimeError`` with the call and CUDA's error string.

cuda-python (``pip install "cuda-python>=12.6,<13"`` for a CUDA 12 driver such as JetPack 6's;
13.x for a CUDA 13 driver) provides ``cuda.bindings.runtime``; releases before 12.6 named it
``cuda.cudart``, which is accepted too. **Untested on a GPU in this repository's CI** (no GPU
there): the tests run the buffer logic on a host-memory stand-in of the runtime API, and the
real bindings where they are installed (which then report the missing driver).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np


def import_cudart():
    """Return cuda-python's CUDA runtime module (``cuda.bindings.runtime`` or ``cuda.cudart``).

    Raises:
        RuntimeError: cuda-python is not installed (says what to install).
    """
    try:
        from cuda.bindings import runtime  # noqa: PLC0415
    except ImportError:
        try:
            from cuda import cudart as runtime  # noqa: PLC0415 (cuda-python < 12.6)
        except ImportError as error:
            raise RuntimeError(
                'the tensorrt backend keeps its device buffers with cuda-python: pip install '
                '"cuda-python>=12.6,<13" (CUDA 12 drivers, e.g. JetPack 6) or cuda-python 13 '
                '(CUDA 13)') from error
    return runtime


def device_name(device: int = 0, cudart=None) -> str:
    """Return the name of CUDA device ``device`` (e.g. ``Orin``, ``NVIDIA H200``).

    Raises:
        RuntimeError: cuda-python is missing, or CUDA has no such device (or no driver).
    """
    cudart = cudart if cudart is not None else import_cudart()
    error, properties = cudart.cudaGetDeviceProperties(int(device))
    if error != cudart.cudaError_t.cudaSuccess:
        _, text = cudart.cudaGetErrorString(error)
        text = text.decode() if isinstance(text, bytes) else text
        raise RuntimeError(f'no CUDA device {device}: {text} ({error})')
    name = properties.name
    name = name.decode() if isinstance(name, bytes) else str(name)
    return name.split('\x00', 1)[0].strip()


class DeviceBuffers:
    """Device memory per tensor name and one CUDA stream (see the module docstring).

    Args:
        device: CUDA device index.
        cudart: the CUDA runtime module (default: :func:`import_cudart`).

    Raises:
        RuntimeError: cuda-python is missing, or CUDA cannot select the device or create a
            stream (no driver, no such device).
        ValueError: a negative device index.
    """

    def __init__(self, device: int = 0, cudart=None):
        """Select the device and create the stream."""
        if int(device) != device or device < 0:
            raise ValueError(f'device must be a CUDA device index >= 0, got {device!r}')
        self._cudart = cudart if cudart is not None else import_cudart()
        self._buffers: Dict[str, Tuple[int, int]] = {}   # name -> (pointer, capacity bytes)
        self._pending: List[np.ndarray] = []   # host arrays in flight until synchronize()
        self.device = int(device)
        self._check('cudaSetDevice', self._cudart.cudaSetDevice(self.device))
        self._stream = self._check('cudaStreamCreate', self._cudart.cudaStreamCreate())

    @property
    def stream_handle(self) -> int:
        """The stream as an integer handle (for ``execute_async_v3``)."""
        return int(self._stream)

    def buffer(self, name: str, nbytes: int) -> int:
        """Return a device pointer of at least ``nbytes`` bytes for ``name`` (grown as needed)."""
        if int(nbytes) != nbytes or nbytes < 0:
            raise ValueError(f'nbytes must be an integer >= 0, got {nbytes!r}')
        nbytes = max(int(nbytes), 1)   # a valid address even for an empty tensor
        pointer, capacity = self._buffers.get(name, (0, 0))
        if capacity < nbytes:
            if pointer:
                self._check('cudaFree', self._cudart.cudaFree(pointer))
                del self._buffers[name]
            pointer = int(self._check('cudaMalloc', self._cudart.cudaMalloc(nbytes)))
            self._buffers[name] = (pointer, nbytes)
        return pointer

    def to_device(self, name: str, array: np.ndarray) -> int:
        """Copy ``array`` into ``name``'s buffer on the stream; return the device pointer.

        The copy is asynchronous: ``array`` is kept alive until :meth:`synchronize`.
        """
        array = np.ascontiguousarray(array)
        pointer = self.buffer(name, array.nbytes)
        if array.nbytes:
            self._check('cudaMemcpyAsync', self._cudart.cudaMemcpyAsync(
                pointer, array.ctypes.data, array.nbytes,
                self._cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, self._stream))
        self._pending.append(array)
        return pointer

    def to_host(self, name: str, shape, dtype) -> np.ndarray:
        """Return a new array of ``shape``/``dtype`` that ``name``'s buffer is copied into.

        The copy is asynchronous: read the array after :meth:`synchronize`.

        Raises:
            ValueError: ``name`` has no buffer, or a smaller one than the array.
        """
        array = np.empty(tuple(int(d) for d in shape), dtype=dtype)
        pointer, capacity = self._buffers.get(name, (0, 0))
        if not pointer or capacity < array.nbytes:
            raise ValueError(f'no device buffer of {array.nbytes} bytes for {name!r}')
        if array.nbytes:
            self._check('cudaMemcpyAsync', self._cudart.cudaMemcpyAsync(
                array.ctypes.data, pointer, array.nbytes,
                self._cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost, self._stream))
        self._pending.append(array)
        return array

    def synchronize(self) -> None:
        """Wait for everything queued on the stream."""
        self._check('cudaStreamSynchronize', self._cudart.cudaStreamSynchronize(self._stream))
        self._pending.clear()

    def close(self) -> None:
        """Free every buffer and the stream (the object is unusable afterwards)."""
        buffers, self._buffers = self._buffers, {}
        for pointer, _ in buffers.values():
            self._check('cudaFree', self._cudart.cudaFree(pointer))
        if self._stream is not None:
            stream, self._stream = self._stream, None
            self._check('cudaStreamDestroy', self._cudart.cudaStreamDestroy(stream))

    def _check(self, call: str, result):
        """Return the value of a cuda-python ``(error, value...)`` result; raise on an error."""
        error, *values = result if isinstance(result, tuple) else (result,)
        if error != self._cudart.cudaError_t.cudaSuccess:
            _, text = self._cudart.cudaGetErrorString(error)
            text = text.decode() if isinstance(text, bytes) else text
            raise RuntimeError(f'CUDA {call} failed on device {self.device}: {text} ({error})')
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)
