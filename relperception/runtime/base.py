# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Inference backend protocol, input checks and the backend factory.

A backend runs one network on named numpy arrays and returns named numpy arrays, whatever
executes it (torch eager, onnxruntime, TensorRT). The pipelines only see this interface, so the
``dense.backend`` / ``loftr.backend`` ROS parameters switch the executor without code changes::

    backend = build_backend('onnxruntime', path='loftr_lite.onnx',
                            input_names=('image0', 'image1'),
                            output_names=('keypoints0', 'keypoints1', 'confidence', 'mask'))
    outputs = backend.run({'image0': im0, 'image1': im1})   # (1,1,H,W) float32 each
    outputs['keypoints0']                                   # numpy array
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional, Protocol, runtime_checkable, Sequence, Tuple

import numpy as np

logger = logging.getLogger(__name__)

BACKENDS = ('torch', 'onnxruntime', 'tensorrt')


@runtime_checkable
class InferenceBackend(Protocol):
    """Runs a network on named arrays.

    Attributes:
        input_names: names of the inputs ``run`` expects, in the network's order.
        output_names: names of the outputs ``run`` returns.
    """

    input_names: Tuple[str, ...]
    output_names: Tuple[str, ...]

    def run(self, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run the network.

        Args:
            inputs: one array per name of ``input_names`` (shapes and dtypes as exported).

        Returns:
            One numpy array per name of ``output_names``.
        """
        ...


def check_input_names(inputs: Mapping[str, Any], expected: Sequence[str]) -> None:
    """Raise a ValueError naming missing and unexpected inputs.

    Args:
        inputs: the inputs given to ``run``.
        expected: the input names of the network.

    Raises:
        ValueError: when ``inputs`` is not a mapping or its keys differ from ``expected``.
    """
    if not isinstance(inputs, Mapping):
        raise ValueError(f'inputs must be a dict name -> array, got {type(inputs).__name__}')
    missing = [n for n in expected if n not in inputs]
    extra = sorted(set(inputs) - set(expected))
    if missing or extra:
        raise ValueError(f'wrong input names: missing {missing}, unexpected {extra}; '
                         f'the network takes {list(expected)}')


def build_backend(name: str, *, module: Optional[Any] = None, path: Optional[Any] = None,
                  input_names: Sequence[str] = (), output_names: Sequence[str] = (),
                  device: str = 'cpu', providers: Optional[Sequence[Any]] = None,
                  num_threads: Optional[int] = None,
                  allow_spinning: bool = True,
                  preset: Optional[str] = None,
                  engine: Optional[Any] = None) -> InferenceBackend:
    """Return the backend called ``name`` (the ``dense.backend`` / ``loftr.backend`` value).

    Args:
        name: ``torch`` (needs ``module``), ``onnxruntime`` (needs ``path`` to an ``.onnx``
            file) or ``tensorrt`` (needs ``path`` to a serialised engine, or to the ``.onnx``
            file it is built from and cached next to: ``engine``).
        module: the ``torch.nn.Module`` for the torch backend.
        path: the ONNX model or TensorRT engine file.
        input_names: input names (torch backend: the module's positional arguments in order;
            other backends: checked against the file when given).
        output_names: output names (torch backend: names of the returned tuple items or the
            keys to pick from the returned dict; other backends: checked when given).
        device: torch device for the torch backend (``cpu``, ``cuda``, ``cuda:N``); for
            onnxruntime ``cuda*`` selects the CUDA execution provider unless ``providers`` is
            given; for tensorrt the CUDA device.
        providers: onnxruntime execution providers (default: from ``device``).
        num_threads: onnxruntime intra-op threads (default: onnxruntime's choice).
        allow_spinning: onnxruntime: idle threads spin-wait (see ``OnnxRuntimeBackend``).
        preset: the model preset the caller asked for; an exported file whose metadata names
            another preset is refused (see :func:`check_export_preset`).
        engine: tensorrt with an ``.onnx`` path: the
            :class:`~relperception.runtime.engine_cache.EngineSettings` of the engine built
            from it (default settings when None).

    Returns:
        An object following ``InferenceBackend``.

    Raises:
        ValueError: unknown name, missing module/path, names that differ from the file's, or
            a file exported from another preset.
        RuntimeError: the backend's library is not installed (TensorRT).
    """
    if name not in BACKENDS:
        raise ValueError(f'unknown inference backend {name!r}; choose one of {BACKENDS}')
    if name == 'torch':
        if module is None:
            raise ValueError('backend torch needs the torch module')
        from relperception.runtime.torch_backend import TorchBackend
        return TorchBackend(module, input_names, output_names, device=device)
    if path is None or str(path) == '':
        raise ValueError(f'backend {name} needs the path of the exported model '
                         f'(the *.onnx_path parameter)')
    if name == 'onnxruntime':
        from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend
        if providers is None and str(device).startswith('cuda'):
            index = int(str(device).partition(':')[2] or 0)
            providers = [('CUDAExecutionProvider', {'device_id': index}),
                         'CPUExecutionProvider']
        backend = OnnxRuntimeBackend(path, providers=providers, num_threads=num_threads,
                                     allow_spinning=allow_spinning)
    else:
        from relperception.runtime.tensorrt_backend import TensorRTBackend
        index = int(str(device).partition(':')[2] or 0) if str(device).startswith('cuda') else 0
        if str(path).endswith('.onnx'):   # built when missing or stale, cached next to it
            from relperception.runtime.engine_cache import (EngineSettings, ensure_engine,
                                                            tensorrt_identity)
            path = ensure_engine(path, engine if engine is not None else EngineSettings(),
                                 identity=tensorrt_identity(index))
        backend = TensorRTBackend(path, device=index)
    _check_names(backend, 'input', input_names, backend.input_names)
    _check_names(backend, 'output', output_names, backend.output_names)
    if preset is not None:
        check_export_preset(getattr(backend, 'metadata', None), preset, path)
    return backend


def check_export_preset(metadata: Optional[Mapping[str, Any]], preset: str, path: Any) -> None:
    """Refuse an exported model whose metadata names another preset than the one asked for.

    Args:
        metadata: the file's metadata (``relperception export`` stores ``preset``), or None
            for a format without metadata (TensorRT engines): nothing to check then.
        preset: the preset the configuration asks for.
        path: the file (for the messages).

    Raises:
        ValueError: the file was exported from another preset.
    """
    if metadata is None:
        return
    found = metadata.get('preset')
    if found is None:
        logger.warning('%s carries no preset in its metadata (not written by relperception '
                       'export?): cannot check that it is %s', path, preset)
        return
    if str(found) != str(preset):
        raise ValueError(f'{path} is an export of the preset {found!r}, but the configuration '
                         f'asks for {preset!r}: export {preset!r} (relperception export) or ask '
                         f'for {found!r}')


def _check_names(backend, kind: str, wanted: Sequence[str], actual: Sequence[str]) -> None:
    missing = [n for n in wanted if n not in actual]
    if missing:
        raise ValueError(f'{type(backend).__name__} model lacks the {kind}s {missing}; '
                         f'it has {list(actual)}')
