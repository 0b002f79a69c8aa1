# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Build a TensorRT engine from an exported ONNX model (TensorRT 10 builder API).

**Untested in this repository's CI**: TensorRT cannot be installed on the development machine;
the code follows the TensorRT 10 Python API (JetPack 6 ships TensorRT 10.3: explicit-batch
networks, ``OnnxParser``, optimisation profiles, ``build_serialized_network``) and raises a
clear ``RuntimeError`` when ``tensorrt`` is missing. Build the engine on the machine that will
run it: engines are specific to the GPU and the TensorRT version.

FP16 halves memory traffic on Jetson/desktop GPUs; softmax and LayerNorm are kept in FP32 by
TensorRT's mixed-precision heuristics, but check the parity of an FP16 engine against the ONNX
model on real images before deploying it (``fp16=False`` builds an FP32 engine).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Sequence, Tuple

from relperception.atomic_files import atomic_open
from relperception.runtime.engine_metadata import write_engine_metadata
from relperception.runtime.onnx_metadata import read_metadata
from relperception.runtime.tensorrt_backend import import_tensorrt

logger = logging.getLogger(__name__)

Shape = Sequence[int]


def build_engine(onnx_path, engine_path, profile: Mapping[str, Tuple[Shape, Shape, Shape]],
                 fp16: bool = True, workspace_mib: int = 1024, int8: bool = False,
                 dla_core: int = -1, timing_cache=None) -> Path:
    """Parse ``onnx_path``, build an engine with one optimisation profile and write it.

    Args:
        onnx_path: the ``.onnx`` file.
        engine_path: the engine file to write.
        profile: ``{input name: (min shape, opt shape, max shape)}`` for every input with
            dynamic dimensions, e.g. ``{'image': ((1,3,224,224), (1,3,480,640),
            (1,3,960,1280))}``.
        fp16: enable FP16 kernels when the GPU has fast FP16.
        workspace_mib: builder workspace memory limit, MiB.
        int8: enable INT8 kernels for a QDQ (explicitly quantised) ONNX file.
        dla_core: build for this DLA core (Jetson), layers DLA cannot run fall back to the
            GPU; -1 for the GPU only.
        timing_cache: a file the builder's timing cache is read from (when present) and
            written back to, so later builds are fast; None for none.

    Returns:
        The path written.

    Raises:
        RuntimeError: TensorRT is not installed, the ONNX file cannot be parsed, or the build
            fails.
        ValueError: a profile entry is malformed or names an unknown input.
        FileNotFoundError: the ONNX file does not exist.
    """
    trt = import_tensorrt()
    onnx_path, engine_path = Path(onnx_path), Path(engine_path)
    if not onnx_path.is_file():
        raise FileNotFoundError(f'ONNX model {onnx_path} does not exist')
    expected = compatibility_problems(onnx_path, str(trt.__version__))
    if expected:
        logger.warning('%s may not build with TensorRT %s: %s', onnx_path, trt.__version__,
                       '; '.join(expected))
    trt_logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(trt_logger)
    network = builder.create_network(0)  # TensorRT 10: networks are always explicit-batch
    parser = trt.OnnxParser(network, trt_logger)
    if not parser.parse(onnx_path.read_bytes(), str(onnx_path.parent)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        found = f' (the compatibility check found: {"; ".join(expected)})' if expected else ''
        raise RuntimeError(f'TensorRT cannot parse {onnx_path}: ' + '; '.join(errors) + found)
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_mib) << 20)
    precision = 'fp32'
    if fp16:
        flag = getattr(trt.BuilderFlag, 'FP16', None)
        if flag is None:
            raise RuntimeError('this TensorRT (11 or newer) has no BuilderFlag.FP16 (weakly '
                               'typed FP16); build with fp16=False (--no-fp16)')
        # platform_has_fast_fp16 is deprecated since TensorRT 10.5 (still present in 10.x)
        if getattr(builder, 'platform_has_fast_fp16', True):
            config.set_flag(flag)
            precision = 'fp16'
        else:
            logger.warning('this GPU has no fast FP16: building an FP32 engine')
    inputs = {network.get_input(i).name: network.get_input(i)
              for i in range(network.num_inputs)}
    optimisation = builder.create_optimization_profile()
    for name, shapes in profile.items():
        if name not in inputs:
            raise ValueError(f'profile names unknown input {name!r}; inputs: {sorted(inputs)}')
        if len(shapes) != 3 or any(len(s) != len(inputs[name].shape) for s in shapes):
            raise ValueError(f'profile of {name!r} must be (min, opt, max) shapes of rank '
                             f'{len(inputs[name].shape)}, got {shapes}')
        optimisation.set_shape(name, *[tuple(int(d) for d in s) for s in shapes])
    dynamic = [n for n, t in inputs.items() if any(d < 0 for d in t.shape) and n not in profile]
    if dynamic:
        raise ValueError(f'inputs {dynamic} have dynamic dimensions but no profile')
    config.add_optimization_profile(optimisation)
    if int8:
        config.set_flag(trt.BuilderFlag.INT8)
        precision = 'int8'
    if dla_core >= 0:
        config.default_device_type = trt.DeviceType.DLA
        config.DLA_core = int(dla_core)
        config.set_flag(trt.BuilderFlag.GPU_FALLBACK)
    cache = None
    if timing_cache is not None:
        timing_cache = Path(timing_cache)
        cache = config.create_timing_cache(
            timing_cache.read_bytes() if timing_cache.is_file() else b'')
        config.set_timing_cache(cache, ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError(f'TensorRT failed to build an engine from {onnx_path} '
                           f'(see the TensorRT log above)')
    engine_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(engine_path, binary=True) as stream:
        stream.write(bytes(serialized))
    if cache is not None:
        with atomic_open(timing_cache, binary=True) as stream:
            stream.write(bytes(memoryview(config.get_timing_cache().serialize())))
    write_engine_metadata(engine_path, {**read_metadata(onnx_path), 'precision': precision,
                                        'tensorrt_version': str(trt.__version__),
                                        'onnx_source': onnx_path.name})
    logger.info('wrote TensorRT engine %s (%s) and its metadata', engine_path, precision)
    return engine_path


def compatibility_problems(onnx_path, tensorrt_version: str) -> list:
    """Return what the TensorRT compatibility check finds in ``onnx_path`` (empty: none).

    The check (:func:`relperception.runtime.tensorrt_compat.check_tensorrt_compat`) runs
    before every build, so that a graph TensorRT's parser will refuse is named in plain words
    first. A TensorRT version without stored operator lists is not checked (empty list, logged
    at debug level).

    Args:
        onnx_path: the ``.onnx`` file.
        tensorrt_version: the TensorRT version building the engine, e.g. ``10.3.0.26``.
    """
    from relperception.runtime.tensorrt_compat import check_tensorrt_compat

    try:
        report = check_tensorrt_compat(onnx_path, tensorrt_version)
    except ValueError as error:   # no operator lists for that version
        logger.debug('no TensorRT compatibility check of %s: %s', onnx_path, error)
        return []
    return list(report.problems)
