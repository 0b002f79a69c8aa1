# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Configuration: one schema, keys = ROS parameter names, shipped YAML presets valid."""

import importlib

from lint_targets import REPO_ROOT
import pytest
from relperception import config
import yaml


class TestLoadConfig:

    def test_defaults(self):
        cfg = config.load_config()
        assert cfg == config.defaults()
        assert cfg['matcher'] == 'ncc'

    def test_ros_parameter_file_and_nesting(self, tmp_path):
        path = tmp_path / 'p.yaml'
        path.write_text(yaml.safe_dump(
            {'/**': {'ros__parameters': {'ncc': {'patch_size': 11}, 'odometry.mode': 'mono'}}}))
        cfg = config.load_config(path)
        assert cfg['ncc.patch_size'] == 11 and cfg['odometry.mode'] == 'mono'
        assert config.section(cfg, 'ncc')['patch_size'] == 11

    def test_flat_file_and_overrides(self, tmp_path):
        path = tmp_path / 'flat.yaml'
        path.write_text('ncc.min_score: 0.5\n')
        cfg = config.load_config(path, overrides={'ncc.min_score': 0.6})
        assert cfg['ncc.min_score'] == 0.6

    @pytest.mark.parametrize('overrides, word', [
        ({'ncc.patch_sise': 9}, 'unknown parameter'),
        ({'ncc.patch_size': 'nine'}, 'integer'),
        ({'ncc.patch_size': 999}, '<='),
        ({'odometry.mode': 'stereo'}, 'one of'),
        ({'odometry.use_motion_prior': 1}, 'true or false'),
    ])
    def test_invalid_values_are_rejected_with_reason(self, overrides, word):
        with pytest.raises(ValueError, match=word):
            config.load_config(overrides=overrides)

    def test_missing_file(self, tmp_path):
        with pytest.raises(FileNotFoundError):
            config.load_config(tmp_path / 'nope.yaml')


@pytest.mark.parametrize('section, component', [
    ('ncc', 'relperception.matching.ncc:NCCMatcher'),
    ('klt', 'relperception.matching.baselines:KLTMatcher'),
    ('orb', 'relperception.matching.baselines:ORBMatcher'),
    ('odometry', 'relperception.odometry.vo:VisualOdometry'),
])
def test_schema_matches_component_defaults(section, component):
    module_name, class_name = component.split(':')
    cls = getattr(importlib.import_module(module_name), class_name)
    assert config.section(config.defaults(), section) == cls.default_conf


def test_default_yaml_lists_every_parameter_with_its_default():
    tree = yaml.safe_load((REPO_ROOT / 'config' / 'default.yaml').read_text())
    assert config.flatten(tree['/**']['ros__parameters']) == config.defaults()


@pytest.mark.parametrize('path', sorted((REPO_ROOT / 'config').glob('*.yaml')),
                         ids=lambda p: p.name)
def test_shipped_presets_load(path):
    if path.name.startswith('fastdds'):
        pytest.skip('not a parameter file')
    cfg = config.load_config(path)
    assert set(cfg) == set(config.SPECS)
