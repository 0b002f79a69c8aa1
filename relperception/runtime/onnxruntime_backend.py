# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""onnxruntime backend: runs an exported ``.onnx`` model with clear input checks.

Inputs are checked before onnxruntime sees them, so that a wrong call fails with a message
naming the input: missing or unexpected names, wrong rank, wrong dtype, a fixed dimension that
differs, and (for 4-D image inputs) a height/width outside the bounds recorded at export time
in the model metadata (``min_height``, ``max_height``, ``min_width``, ``max_width``,
``size_multiple``; see ``relperception.runtime.onnx_export``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np
import onnxruntime as ort
from relperception.runtime.base import check_input_names

logger = logging.getLogger(__name__)

_ORT_DTYPES = {
    'tensor(float)': np.float32, 'tensor(float16)': np.float16, 'tensor(double)': np.float64,
    'tensor(int64)': np.int64, 'tensor(int32)': np.int32, 'tensor(int16)': np.int16,
    'tensor(int8)': np.int8, 'tensor(uint8)': np.uint8, 'tensor(bool)': np.bool_,
}
SIZE_KEYS = ('min_height', 'max_height', 'min_width', 'max_width', 'size_multiple')


def _ort_errors() -> tuple:
    """Return onnxruntime's own exception classes (they derive from Exception only)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state
    return tuple(value for value in vars(state).values()
                 if isinstance(value, type) and issubclass(value, Exception))


#: Exceptions onnxruntime raises for a bad model or a failed run.
ORT_ERRORS = _ort_errors()


class OnnxRuntimeBackend:
    """Run an ONNX model with onnxruntime as an ``InferenceBackend``.

    Args:
        path: the ``.onnx`` file.
        providers: execution providers, e.g. ``['CUDAExecutionProvider',
            'CPUExecutionProvider']`` (default: ``['CPUExecutionProvider']``; the device is
            chosen by the caller, never here).
        num_threads: intra-op threads (default: onnxruntime's choice, one per core).
        allow_spinning: let idle intra-op threads spin-wait for work (onnxruntime's default).
            Turn it off where several sessions take turns in one process: measured with the
            two graphs of a two-stage LoFTR export at 240x320 on 2 cores, the spinning threads
            of one session slowed the other, 240 ms per pair instead of 164 ms.

    Attributes:
        input_names, output_names: tuple of names in the model's order.
        metadata: the model's ``metadata_props`` (values JSON-decoded when possible).
        session: the ``onnxruntime.InferenceSession``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: ``num_threads`` < 1, or a file onnxruntime cannot load (not ONNX, empty,
            an invalid graph), with onnxruntime's reason.
    """

    def __init__(self, path, providers: Optional[Sequence[Any]] = None,
                 num_threads: Optional[int] = None, allow_spinning: bool = True):
        """Open an onnxruntime session on ``path`` and read its inputs and metadata."""
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f'ONNX model {self.path} does not exist '
                                    f'(export one with `relperception export`)')
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if not allow_spinning:
            options.add_session_config_entry('session.intra_op.allow_spinning', '0')
        if num_threads is not None:
            if int(num_threads) < 1:
                raise ValueError(f'num_threads must be >= 1, got {num_threads}')
            options.intra_op_num_threads = int(num_threads)
            options.inter_op_num_threads = 1
        providers = list(providers) if providers else ['CPUExecutionProvider']
        try:
            self.session = ort.InferenceSession(str(self.path), sess_options=options,
                                                providers=providers)
        except ORT_ERRORS as error:
            raise ValueError(f'{self.path}: not a usable ONNX model: '
                             f'{_ort_message(error)}') from None
        wanted = [p if isinstance(p, str) else p[0] for p in providers]
        missing = [p for p in wanted if p not in self.session.get_providers()]
        if missing:
            logger.warning('onnxruntime providers %s are not available here (installed: %s); '
                           '%s runs with %s', missing, ort.get_available_providers(),
                           self.path.name, self.session.get_providers())
        self._inputs = {i.name: i for i in self.session.get_inputs()}
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_names = tuple(o.name for o in self.session.get_outputs())
        self.metadata = {}
        for key, value in self.session.get_modelmeta().custom_metadata_map.items():
            try:
                self.metadata[key] = json.loads(value)
            except ValueError:
                self.metadata[key] = value
        logger.debug('loaded %s with providers %s', self.path, self.session.get_providers())

    def check_inputs(self, inputs: Dict[str, np.ndarray]) -> None:
        """Raise a ValueError when ``inputs`` does not fit the model.

        Args:
            inputs: one array per input name.

        Raises:
            ValueError: missing/unexpected names, wrong rank, dtype, fixed dimension, or an
                image size outside the exported bounds.
        """
        check_input_names(inputs, self.input_names)
        for name in self.input_names:
            spec, array = self._inputs[name], inputs[name]
            if not isinstance(array, np.ndarray):
                raise ValueError(f'input {name!r} must be a numpy array, '
                                 f'got {type(array).__name__}')
            if array.ndim != len(spec.shape):
                raise ValueError(f'input {name!r} must have {len(spec.shape)} dimensions '
                                 f'{_shape_str(spec.shape)}, got shape {array.shape}')
            want = _ORT_DTYPES.get(spec.type)
            if want is not None and array.dtype != want:
                raise ValueError(f'input {name!r} must be {np.dtype(want).name}, '
                                 f'got {array.dtype.name}')
            if array.ndim == 4:  # image: the exported size bounds give the clearest message
                self._check_size(name, array.shape[2], array.shape[3])
            for axis, (dim, size) in enumerate(zip(spec.shape, array.shape)):
                if isinstance(dim, int) and dim != size:
                    raise ValueError(f'input {name!r} dimension {axis} must be {dim} '
                                     f'{_shape_str(spec.shape)}, got shape {array.shape}')

    def _check_size(self, name: str, height: int, width: int) -> None:
        meta = self.metadata
        for label, size in (('height', height), ('width', width)):
            low, high = meta.get(f'min_{label}'), meta.get(f'max_{label}')
            if low is not None and size < int(low) or high is not None and size > int(high):
                raise ValueError(f'input {name!r} {label} {size} is outside the exported '
                                 f'bounds [{low}, {high}] of {self.path.name}')
        multiple = meta.get('size_multiple')
        if multiple and (height % int(multiple) or width % int(multiple)):
            raise ValueError(f'input {name!r} size {height}x{width} must be a multiple of '
                             f'{multiple} for {self.path.name}')

    def run(self, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Run the model.

        Args:
            inputs: one numpy array per input name (dtype and rank as exported).

        Returns:
            One numpy array per output name.

        Raises:
            ValueError: inputs that do not fit the model (see ``check_inputs``).
            RuntimeError: onnxruntime failed to run the model, with its reason.
        """
        self.check_inputs(inputs)
        feed = {n: np.ascontiguousarray(inputs[n]) for n in self.input_names}
        try:
            outputs = self.session.run(list(self.output_names), feed)
        except ORT_ERRORS as error:
            raise RuntimeError(f'{self.path.name}: onnxruntime failed: '
                               f'{_ort_message(error)}') from None
        return dict(zip(self.output_names, outputs))


def _shape_str(shape) -> str:
    return '(' + ','.join(str(d) if d is not None else '?' for d in shape) + ')'


def _ort_message(error: Exception) -> str:
    """Return onnxruntime's reason without its ``[ONNXRuntimeError] : N : CODE :`` prefix."""
    text = str(error).strip()
    if text.startswith('[ONNXRuntimeError]'):
        text = text.split(':', 3)[-1].strip()
    return text[:300]
