# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""TensorRT engines built from ONNX when missing or stale and cached next to it (no GPU here).

The build itself needs TensorRT and a GPU; everything around it is checked with a stand-in
builder that writes a file: cache keys, staleness rules, parameters and the ONNX profile.
"""

import onnx
from onnx import helper, TensorProto
import pytest
from relperception.config import load_config, section
from relperception.runtime.base import build_backend
from relperception.runtime.engine_cache import (default_engine_path, engine_key, ENGINE_KEYS,
                                                EngineSettings, ensure_engine, file_sha256,
                                                profile_from_onnx, settings_from_config,
                                                stale_reason, timing_cache_path)
from relperception.runtime.engine_metadata import read_engine_metadata, write_engine_metadata

ORIN = ('10.3.0', 'Orin (nvgpu)')


def _onnx(path, dynamic=True, bounds=True, channels=3):
    """Write a one-node ONNX file with an (1, C, H, W) input and export size bounds."""
    dims = [1, channels, 'height', 'width'] if dynamic else [1, channels, 48, 64]
    graph = helper.make_graph(
        [helper.make_node('Identity', ['image'], ['depth'])], 'g',
        [helper.make_tensor_value_info('image', TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info('depth', TensorProto.FLOAT, dims)])
    model = helper.make_model(graph)
    if bounds:
        for key, value in (('export_size', '[240, 320]'), ('min_height', '64'),
                           ('min_width', '64'), ('max_height', '960'), ('max_width', '1280')):
            model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))
    return path


class Builder:
    """Stand-in for TensorRT's build: writes the engine file and counts the builds."""

    def __init__(self):
        self.calls = []

    def __call__(self, onnx_path, engine_path, settings, timing_cache):
        self.calls.append((engine_path, settings.precision, timing_cache))
        engine_path.write_bytes(b'engine of ' + onnx_path.read_bytes()[:16])
        write_engine_metadata(engine_path, {'precision': settings.precision})
        return engine_path


class TestEngineCache:
    def test_paths_are_keyed_by_everything_an_engine_depends_on(self, tmp_path):
        onnx_path = tmp_path / 'conv_small.onnx'
        fp16 = default_engine_path(onnx_path, ORIN, EngineSettings())
        assert fp16 == tmp_path / 'conv_small.fp16.orin-nvgpu.trt10.3.0.engine'
        int8_dla = default_engine_path(onnx_path, ORIN,
                                       EngineSettings(precision='int8', dla_core=1))
        assert int8_dla.name == 'conv_small.int8.orin-nvgpu.trt10.3.0.dla1.engine'
        assert timing_cache_path(onnx_path, ORIN).name == \
            'conv_small.orin-nvgpu.trt10.3.0.timing.cache'

    def test_built_once_then_reused_and_rebuilt_when_stale(self, tmp_path):
        onnx_path = _onnx(tmp_path / 'model.onnx')
        build = Builder()
        settings = EngineSettings()
        engine = ensure_engine(onnx_path, settings, ORIN, build)
        assert len(build.calls) == 1 and engine.is_file()
        assert build.calls[0][2] == timing_cache_path(onnx_path, ORIN)
        metadata = read_engine_metadata(engine)
        assert metadata['onnx_sha256'] == file_sha256(onnx_path)
        assert (metadata['tensorrt_version'], metadata['gpu']) == ORIN
        assert ensure_engine(onnx_path, settings, ORIN, build) == engine
        assert len(build.calls) == 1   # cached
        # another TensorRT at the same engine path (engine_file_path): stale, rebuilt
        fixed = EngineSettings(engine_file_path=str(engine))
        ensure_engine(onnx_path, fixed, ('10.4.0', ORIN[1]), build)
        assert len(build.calls) == 2
        # the ONNX file changed: rebuilt
        _onnx(onnx_path, channels=1)
        ensure_engine(onnx_path, fixed, ('10.4.0', ORIN[1]), build)
        assert len(build.calls) == 3
        # forced
        ensure_engine(onnx_path, EngineSettings(engine_file_path=str(engine),
                                                force_engine_update=True),
                      ('10.4.0', ORIN[1]), build)
        assert len(build.calls) == 4
        # another precision is another engine file
        ensure_engine(onnx_path, EngineSettings(precision='fp32'), ORIN, build)
        assert build.calls[-1][1] == 'fp32' and len(build.calls) == 5

    def test_stale_reasons(self, tmp_path):
        onnx_path = _onnx(tmp_path / 'model.onnx')
        engine = tmp_path / 'model.engine'
        key = engine_key(file_sha256(onnx_path), ORIN, EngineSettings())
        assert 'no engine' in stale_reason(engine, key)
        engine.write_bytes(b'x')
        assert 'no metadata' in stale_reason(engine, key)
        write_engine_metadata(engine, dict(key))
        assert stale_reason(engine, key) is None
        assert 'force' in stale_reason(engine, key, force=True)
        assert 'gpu' in stale_reason(engine, {**key, 'gpu': 'RTX 4090'})

    def test_profile_from_the_export_metadata(self, tmp_path):
        profile = profile_from_onnx(_onnx(tmp_path / 'dynamic.onnx'))
        assert profile == {'image': ((1, 3, 64, 64), (1, 3, 240, 320), (1, 3, 960, 1280))}
        assert profile_from_onnx(_onnx(tmp_path / 'fixed.onnx', dynamic=False)) == {}
        with pytest.raises(ValueError, match='size bounds'):
            profile_from_onnx(_onnx(tmp_path / 'bare.onnx', bounds=False))

    def test_parameters(self):
        for name in ('dense', 'loftr'):
            conf = section(load_config(), name)
            assert set(ENGINE_KEYS) <= set(conf)
            assert settings_from_config(conf) == EngineSettings()
        with pytest.raises(ValueError):
            load_config(overrides={'dense.engine_precision': 'int4'})
        for bad in ({'precision': 'fp8'}, {'max_workspace_mib': 0}, {'dla_core': -2}):
            with pytest.raises(ValueError):
                EngineSettings(**bad)

    def test_missing_onnx_and_missing_tensorrt(self, tmp_path):
        with pytest.raises(FileNotFoundError, match='does not exist'):
            ensure_engine(tmp_path / 'absent.onnx', EngineSettings(), ORIN, Builder())
        pytest.importorskip('relperception.runtime.tensorrt_backend')
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            with pytest.raises(RuntimeError, match='tensorrt'):
                build_backend('tensorrt', path=str(_onnx(tmp_path / 'm.onnx')))
        else:
            pytest.skip('TensorRT is installed: the build itself runs')
