# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""TensorRT engines built from the ONNX file when needed and cached next to it, as Isaac ROS does.

A TensorRT engine only runs with the TensorRT version and the GPU it was built for. Given the
ONNX file, :func:`ensure_engine` returns an engine that fits, building it only when

* there is no engine at the engine path,
* ``force_engine_update`` is set,
* the engine's metadata (``<engine>.json``, :mod:`relperception.runtime.engine_metadata`)
  names another TensorRT version, GPU, precision or DLA core, or another ONNX file content
  (its SHA-256), or is missing.

The default engine path is next to the ONNX file and keyed by everything an engine depends
on: ``<stem>.<precision>.<gpu>.trt<version>[.dla<N>].engine`` (:func:`default_engine_path`),
so engines for several GPUs or precisions live side by side; the builder's timing cache
(:func:`timing_cache_path`) is kept there too and makes rebuilds fast. ``engine_file_path``
names another file (:class:`EngineSettings`).

Everything here but the build itself (``build``, TensorRT) and :func:`tensorrt_identity` runs
without a GPU and is tested so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path
import re
from typing import Any, Callable, Mapping, Optional, Tuple

from relperception.runtime.engine_metadata import (PRECISIONS, read_engine_metadata,
                                                   write_engine_metadata)

logger = logging.getLogger(__name__)

#: DLA core value meaning "no DLA, the GPU".
NO_DLA = -1
#: The engine parameters of the ``dense.*`` and ``loftr.*`` sections (without prefix).
ENGINE_KEYS = ('engine_file_path', 'force_engine_update', 'engine_precision',
               'max_workspace_size_mib', 'dla_core')


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """How an engine is built and where it is kept (the ``*.engine_*`` parameters).

    Attributes:
        precision: ``fp32``, ``fp16`` or ``int8`` (an INT8 engine needs a QDQ ONNX file,
            ``relperception export --int8``).
        max_workspace_mib: builder workspace memory limit (MiB, >= 1).
        dla_core: DLA core to build for (Jetson), :data:`NO_DLA` for the GPU.
        force_engine_update: rebuild even when the cached engine fits.
        engine_file_path: the engine file; '' for :func:`default_engine_path`.
    """

    precision: str = 'fp16'
    max_workspace_mib: int = 1024
    dla_core: int = NO_DLA
    force_engine_update: bool = False
    engine_file_path: str = ''

    def __post_init__(self):
        """Check the values (``ValueError``)."""
        if self.precision not in PRECISIONS:
            raise ValueError(f'precision must be one of {PRECISIONS}, got {self.precision!r}')
        if isinstance(self.max_workspace_mib, bool) or int(self.max_workspace_mib) < 1:
            raise ValueError(f'max_workspace_mib must be >= 1, got {self.max_workspace_mib!r}')
        if isinstance(self.dla_core, bool) or int(self.dla_core) < NO_DLA:
            raise ValueError(f'dla_core must be >= 0, or {NO_DLA} for the GPU, got '
                             f'{self.dla_core!r}')


def settings_from_config(section: Mapping[str, Any]) -> EngineSettings:
    """Return the :class:`EngineSettings` of a ``dense.*`` / ``loftr.*`` section (no prefix).

    Raises:
        ValueError: bad values.
    """
    return EngineSettings(precision=str(section['engine_precision']),
                          max_workspace_mib=int(section['max_workspace_size_mib']),
                          dla_core=int(section['dla_core']),
                          force_engine_update=bool(section['force_engine_update']),
                          engine_file_path=str(section['engine_file_path']))


def _slug(text: str) -> str:
    return re.sub(r'[^A-Za-z0-9.]+', '-', str(text)).strip('-').lower() or 'unknown'


def default_engine_path(onnx_path, identity: Tuple[str, str], settings: EngineSettings) -> Path:
    """Return the cached engine's path next to ``onnx_path`` for a (TensorRT version, GPU)."""
    version, gpu = identity
    onnx_path = Path(onnx_path)
    dla = f'.dla{settings.dla_core}' if settings.dla_core != NO_DLA else ''
    return onnx_path.with_name(f'{onnx_path.stem}.{settings.precision}.{_slug(gpu)}'
                               f'.trt{_slug(version)}{dla}.engine')


def timing_cache_path(onnx_path, identity: Tuple[str, str]) -> Path:
    """Return the builder timing cache kept next to ``onnx_path`` for a (version, GPU)."""
    version, gpu = identity
    onnx_path = Path(onnx_path)
    return onnx_path.with_name(f'{onnx_path.stem}.{_slug(gpu)}.trt{_slug(version)}'
                               '.timing.cache')


def file_sha256(path) -> str:
    """Return the hex SHA-256 of a file (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, 'rb') as stream:
        for block in iter(lambda: stream.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def engine_key(onnx_sha256: str, identity: Tuple[str, str], settings: EngineSettings) -> dict:
    """Return what an engine depends on, as stored in its metadata."""
    version, gpu = identity
    return {'onnx_sha256': onnx_sha256, 'tensorrt_version': str(version), 'gpu': str(gpu),
            'precision': settings.precision, 'dla_core': int(settings.dla_core)}


def stale_reason(engine_path, key: Mapping[str, Any],
                 force: bool = False) -> Optional[str]:
    """Return why the engine at ``engine_path`` must be built, or None when it fits ``key``.

    Raises:
        ValueError: an unreadable metadata file (not JSON, unknown precision).
    """
    engine_path = Path(engine_path)
    if not engine_path.is_file():
        return f'no engine at {engine_path}'
    if force:
        return 'force_engine_update is set'
    metadata = read_engine_metadata(engine_path)
    if metadata is None:
        return 'the engine has no metadata (built elsewhere?)'
    for name, wanted in key.items():
        if metadata.get(name) != wanted:
            return f'its {name} is {metadata.get(name)!r}, here {wanted!r}'
    return None


#: ``build(onnx_path, engine_path, settings, timing_cache) -> Path`` writes an engine.
Builder = Callable[[Path, Path, EngineSettings, Path], Path]


def ensure_engine(onnx_path, settings: EngineSettings,
                  identity: Optional[Tuple[str, str]] = None,
                  build: Optional[Builder] = None) -> Path:
    """Return an engine for ``onnx_path`` that fits this TensorRT and GPU; build it if needed.

    Args:
        onnx_path: the ONNX file the engine is built from.
        settings: precision, workspace, DLA core, force flag and engine path.
        identity: (TensorRT version, GPU name); default :func:`tensorrt_identity`.
        build: the builder; default :func:`build_with_tensorrt`.

    Returns:
        The engine file (its metadata written next to it after a build).

    Raises:
        FileNotFoundError: the ONNX file does not exist.
        RuntimeError: TensorRT is not installed, or the build fails.
        ValueError: bad settings or an unreadable engine metadata file.
    """
    onnx_path = Path(onnx_path)
    if not onnx_path.is_file():
        raise FileNotFoundError(f'ONNX model {onnx_path} does not exist (the engine is built '
                                'from it)')
    identity = tensorrt_identity() if identity is None else identity
    engine_path = Path(settings.engine_file_path) if settings.engine_file_path else \
        default_engine_path(onnx_path, identity, settings)
    key = engine_key(file_sha256(onnx_path), identity, settings)
    reason = stale_reason(engine_path, key, settings.force_engine_update)
    if reason is None:
        logger.info('TensorRT engine %s is up to date', engine_path)
        return engine_path
    logger.warning('building the TensorRT engine %s (%s); this takes minutes the first time, '
                   'later builds use the timing cache', engine_path, reason)
    build = build_with_tensorrt if build is None else build
    built = Path(build(onnx_path, engine_path, settings, timing_cache_path(onnx_path,
                                                                           identity)))
    metadata = read_engine_metadata(built) or {}
    write_engine_metadata(built, {**metadata, **key})
    return built


def tensorrt_identity(device: int = 0) -> Tuple[str, str]:
    """Return (TensorRT version, GPU name) of this machine; needs TensorRT and a CUDA GPU.

    Raises:
        RuntimeError: TensorRT or a CUDA device is missing.
    """
    from relperception.runtime.cuda_buffers import device_name
    from relperception.runtime.tensorrt_backend import import_tensorrt

    trt = import_tensorrt()
    try:
        name = device_name(device)
    except RuntimeError as error:
        raise RuntimeError(f'no CUDA device {device} to build a TensorRT engine for '
                           f'({error})') from None
    return str(trt.__version__), name


def profile_from_onnx(onnx_path) -> dict:
    """Return the TensorRT optimisation profile of an exported ONNX file from its metadata.

    Every input with dynamic dimensions gets ``(min, opt, max)`` shapes: batch 1, its channel
    count, and the ``min_height``/``min_width``, ``export_size`` and ``max_height``/
    ``max_width`` the export stored (``relperception export``).

    Raises:
        ValueError: a dynamic input but no size bounds in the metadata.
    """
    import onnx

    from relperception.runtime.tensorrt_compat import stored_profile

    profile, missing = stored_profile(onnx.load(str(onnx_path), load_external_data=False))
    if missing:
        raise ValueError(f'{onnx_path}: ' + '; '.join(missing.values())
                         + ' (export it with relperception export)')
    return profile


def build_with_tensorrt(onnx_path: Path, engine_path: Path, settings: EngineSettings,
                        timing_cache: Path) -> Path:
    """Build with TensorRT (:func:`relperception.runtime.tensorrt_export.build_engine`)."""
    from relperception.runtime.tensorrt_export import build_engine

    return build_engine(onnx_path, engine_path, profile_from_onnx(onnx_path),
                        fp16=settings.precision == 'fp16', int8=settings.precision == 'int8',
                        workspace_mib=settings.max_workspace_mib,
                        dla_core=settings.dla_core, timing_cache=timing_cache)
