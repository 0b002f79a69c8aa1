# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Device buffers through cuda-python and the TensorRT backend on top of them, without a GPU.

Neither a GPU nor TensorRT exists here, so the CUDA runtime API is replaced by a stand-in that
keeps "device" memory in host memory (``cudaMalloc`` returns a real address, ``cudaMemcpyAsync``
copies bytes), and TensorRT by a stand-in engine that doubles its input. What runs for real is
this package's code: buffer reuse and growth, copies, error checks, shape checks, address
binding. Where cuda-python is installed, its real bindings are checked to report a missing
driver as a clear error.
"""

import ctypes
import enum
import sys
import types

import numpy as np
import pytest
from relperception.runtime.cuda_buffers import device_name, DeviceBuffers, import_cudart


class HostCudart:
    """The cuda-python runtime calls :class:`DeviceBuffers` uses, on host memory."""

    class cudaError_t(enum.IntEnum):  # noqa: N801 (cuda-python's name)
        cudaSuccess = 0
        cudaErrorMemoryAllocation = 2
        cudaErrorNoDevice = 100

    class cudaMemcpyKind(enum.IntEnum):  # noqa: N801 (cuda-python's name)
        cudaMemcpyHostToDevice = 1
        cudaMemcpyDeviceToHost = 2

    class Stream:
        def __init__(self, handle):
            self.handle = handle

        def __int__(self):
            return self.handle

    def __init__(self, fail=None):
        self.fail = fail or set()
        self.memory = {}   # address -> ctypes buffer
        self.copies = []
        self.streams = set()
        self.device = None

    def _result(self, call, *values):
        error = self.cudaError_t.cudaErrorMemoryAllocation if call in self.fail \
            else self.cudaError_t.cudaSuccess
        return (error, *values) if error == self.cudaError_t.cudaSuccess else (error, None)

    def cudaSetDevice(self, device):  # noqa: N802
        self.device = device
        return self._result('cudaSetDevice')

    def cudaStreamCreate(self):  # noqa: N802
        stream = self.Stream(1000 + len(self.streams))
        self.streams.add(stream.handle)
        return self._result('cudaStreamCreate', stream)

    def cudaStreamDestroy(self, stream):  # noqa: N802
        self.streams.discard(int(stream))
        return self._result('cudaStreamDestroy')

    def cudaStreamSynchronize(self, stream):  # noqa: N802
        assert int(stream) in self.streams
        return self._result('cudaStreamSynchronize')

    def cudaMalloc(self, nbytes):  # noqa: N802
        if 'cudaMalloc' in self.fail:
            return self._result('cudaMalloc')
        buffer = ctypes.create_string_buffer(nbytes)
        self.memory[ctypes.addressof(buffer)] = buffer
        return self._result('cudaMalloc', ctypes.addressof(buffer))

    def cudaFree(self, pointer):  # noqa: N802
        del self.memory[pointer]
        return self._result('cudaFree')

    def cudaMemcpyAsync(self, dst, src, count, kind, stream):  # noqa: N802
        device = dst if kind == self.cudaMemcpyKind.cudaMemcpyHostToDevice else src
        start = max(p for p in self.memory if p <= device)
        assert device + count <= start + len(self.memory[start]), 'copy past the allocation'
        ctypes.memmove(dst, src, count)
        self.copies.append((kind.name, count))
        return self._result('cudaMemcpyAsync')

    def cudaGetErrorString(self, error):  # noqa: N802
        return self.cudaError_t.cudaSuccess, f'stand-in error {int(error)}'.encode()

    def cudaGetDeviceProperties(self, device):  # noqa: N802
        if device != 0:
            return self.cudaError_t.cudaErrorNoDevice, None
        return self.cudaError_t.cudaSuccess, types.SimpleNamespace(name=b'Orin\x00\x00')


class TestDeviceBuffers:
    def test_round_trip_reuse_and_growth(self):
        cudart = HostCudart()
        buffers = DeviceBuffers(0, cudart)
        small = np.arange(6, dtype=np.float32).reshape(2, 3)
        pointer = buffers.to_device('x', small)
        back = buffers.to_host('x', (2, 3), np.float32)
        buffers.synchronize()
        np.testing.assert_array_equal(back, small)
        assert buffers.to_device('x', small[:1]) == pointer   # smaller: the same buffer
        large = np.ones((4, 5), np.float32)
        assert buffers.to_device('x', large) != pointer        # larger: grown ...
        assert pointer not in cudart.memory                    # ... and the old one freed
        np.testing.assert_array_equal(buffers.to_host('x', (4, 5), np.float32), large)
        buffers.close()
        assert cudart.memory == {} and cudart.streams == set()

    def test_empty_tensors_get_an_address(self):
        buffers = DeviceBuffers(0, HostCudart())
        assert buffers.to_device('e', np.zeros((0, 3), np.float32)) != 0
        assert buffers.to_host('e', (0, 3), np.float32).shape == (0, 3)

    def test_failures_are_named(self):
        with pytest.raises(RuntimeError, match='cudaMalloc failed on device 0: stand-in error 2'):
            DeviceBuffers(0, HostCudart(fail={'cudaMalloc'})).buffer('x', 8)
        with pytest.raises(RuntimeError, match='cudaSetDevice failed'):
            DeviceBuffers(0, HostCudart(fail={'cudaSetDevice'}))
        buffers = DeviceBuffers(0, HostCudart())
        with pytest.raises(ValueError, match="no device buffer of 16 bytes for 'y'"):
            buffers.to_host('y', (4,), np.float32)
        buffers.buffer('y', 8)
        with pytest.raises(ValueError, match='16 bytes'):
            buffers.to_host('y', (4,), np.float32)
        for bad in (-1, 0.5):
            with pytest.raises(ValueError, match='device'):
                DeviceBuffers(bad, HostCudart())
        with pytest.raises(ValueError, match='nbytes'):
            buffers.buffer('z', -3)

    def test_device_name(self):
        assert device_name(0, HostCudart()) == 'Orin'
        with pytest.raises(RuntimeError, match='no CUDA device 1'):
            device_name(1, HostCudart())

    def test_missing_cuda_python_says_what_to_install(self, monkeypatch):
        monkeypatch.setitem(sys.modules, 'cuda', None)
        monkeypatch.setitem(sys.modules, 'cuda.bindings', None)
        with pytest.raises(RuntimeError, match='pip install "cuda-python'):
            import_cudart()

    def test_real_bindings_report_a_missing_driver(self):
        runtime = pytest.importorskip('cuda.bindings.runtime')
        error, count = runtime.cudaGetDeviceCount()
        if error == runtime.cudaError_t.cudaSuccess and count > 0:
            pytest.skip('a CUDA device is present')
        with pytest.raises(RuntimeError, match='CUDA cudaSetDevice failed on device 0'):
            DeviceBuffers(0)


def _stand_in_tensorrt(profile_max=(1, 3, 64, 64), engine_ok=True):
    """Return a ``tensorrt`` stand-in whose engines double ``image`` (float32) into ``out``."""
    trt = types.SimpleNamespace()
    trt.float32, trt.int8 = 'float32', 'int8'
    trt.TensorIOMode = types.SimpleNamespace(INPUT='in', OUTPUT='out')
    trt.nptype = lambda dtype: {'float32': np.float32, 'int8': np.int8}[dtype]
    trt.Logger = type('Logger', (), {'WARNING': 1, '__init__': lambda self, level: None})

    class Context:
        def __init__(self):
            self.shape, self.addresses = None, {}

        def set_input_shape(self, name, shape):
            if any(s > m for s, m in zip(shape, profile_max)):
                return False
            self.shape = tuple(shape)
            return True

        def get_tensor_shape(self, name):
            return self.shape

        def set_tensor_address(self, name, address):
            self.addresses[name] = address

        def execute_async_v3(self, stream_handle):
            count = int(np.prod(self.shape))
            source = (ctypes.c_float * count).from_address(self.addresses['image'])
            target = (ctypes.c_float * count).from_address(self.addresses['out'])
            for i in range(count):
                target[i] = 2.0 * source[i]
            return True

    class Engine:
        num_io_tensors = 2

        def get_tensor_name(self, index):
            return ('image', 'out')[index]

        def get_tensor_mode(self, name):
            return trt.TensorIOMode.INPUT if name == 'image' else trt.TensorIOMode.OUTPUT

        def get_tensor_dtype(self, name):
            return trt.float32

        def create_execution_context(self):
            return Context()

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, data):
            return Engine() if engine_ok else None

    trt.Runtime = Runtime
    return trt


class TestTensorRTBackend:
    def _backend(self, monkeypatch, tmp_path, cudart, **trt_options):
        monkeypatch.setitem(sys.modules, 'tensorrt', _stand_in_tensorrt(**trt_options))
        from relperception.runtime.tensorrt_backend import TensorRTBackend

        engine = tmp_path / 'model.engine'
        engine.write_bytes(b'engine')
        return TensorRTBackend(engine, device=0, cudart=cudart)

    def test_runs_on_device_buffers(self, monkeypatch, tmp_path):
        cudart = HostCudart()
        backend = self._backend(monkeypatch, tmp_path, cudart)
        assert backend.input_names == ('image',) and backend.output_names == ('out',)
        image = np.random.default_rng(0).random((1, 3, 8, 10))   # float64: cast to float32
        out = backend.run({'image': image})['out']
        assert out.dtype == np.float32 and out.shape == (1, 3, 8, 10)
        np.testing.assert_allclose(out, 2.0 * image.astype(np.float32))
        kinds = [kind for kind, _ in cudart.copies]
        assert kinds == ['cudaMemcpyHostToDevice', 'cudaMemcpyDeviceToHost']
        np.testing.assert_allclose(backend.run({'image': image[:, :, :4]})['out'],
                                   2.0 * image[:, :, :4].astype(np.float32))
        backend.close()
        assert cudart.memory == {} and cudart.streams == set()

    def test_bad_inputs(self, monkeypatch, tmp_path):
        backend = self._backend(monkeypatch, tmp_path, HostCudart())
        with pytest.raises(ValueError, match='outside the optimisation profile'):
            backend.run({'image': np.zeros((1, 3, 128, 64), np.float32)})
        with pytest.raises(ValueError):
            backend.run({'picture': np.zeros((1, 3, 8, 8), np.float32)})

    def test_an_engine_that_does_not_load_frees_its_buffers(self, monkeypatch, tmp_path):
        cudart = HostCudart()
        with pytest.raises(RuntimeError, match='cannot deserialise'):
            self._backend(monkeypatch, tmp_path, cudart, engine_ok=False)
        assert cudart.streams == set()
