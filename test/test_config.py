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

    @pytest.mark.parametrize('overrides, words', [
        # eval read the colour images as depth and reported 'no usable depth image'
        ({'topics.depth': '/camera/image_raw'},
         "topics.depth and topics.image are both '/camera/image_raw'"),
        ({'topics.ground_truth_labels': '/l', 'topics.ground_truth_depth': '/l'},
         "topics.ground_truth_depth and topics.ground_truth_labels are both '/l'"),
    ])
    def test_two_inputs_on_one_topic_are_refused(self, overrides, words):
        with pytest.raises(ValueError, match=words):
            config.load_config(overrides=overrides)

    def test_depth_may_be_its_own_ground_truth_and_empty_topics_are_off(self):
        cfg = config.load_config(overrides={
            'topics.ground_truth_depth': '/camera/depth/image_raw',
            'topics.ground_truth_labels': '', 'topics.wheel_odometry': ''})
        assert cfg['topics.ground_truth_depth'] == cfg['topics.depth']
        # ground-truth poses may be the translation hints (test_offline_eval's exact scale)
        cfg = config.load_config(overrides={'topics.wheel_odometry': '/ground_truth/pose',
                                            'topics.ground_truth_labels': ''})
        assert cfg['topics.wheel_odometry'] == cfg['topics.ground_truth_pose']

    def test_missing_file(self, tmp_path):
        with pytest.raises(FileNotFoundError):
            config.load_config(tmp_path / 'nope.yaml')


#: A robot-wide parameter file, as ros2 launch takes it.
ROBOT_FILE = {
    '/**': {'ros__parameters': {
        'use_sim_time': True,
        'qos_overrides': {'/camera/image_raw': {'subscription': {'reliability': 'reliable'}}},
        'ncc': {'patch_size': 9},
        'image_transport': 'raw'}},
    'visual_odometry_node': {'ros__parameters': {
        'publish_tf': False, 'odom_frame_id': 'odom_vo', 'depth_max_dt_s': 0.03,
        'camera_mount_xyz_qxyzw': [0.1, 0.0, 0.2, -0.5, 0.5, -0.5, 0.5],
        'odometry': {'min_matches': 12}}},
    'robot_state_publisher': {'ros__parameters': {'robot_description': '<robot/>'}},
}


class TestParameterFile:
    """One parameter file for ros2 launch, run, eval and replay (schema, node-local, ROS)."""

    def test_every_kind_of_key_is_sorted_out(self, tmp_path):
        path = tmp_path / 'robot.yaml'
        path.write_text(yaml.safe_dump(ROBOT_FILE))
        cfg = config.load_config(path)   # eval: the schema, the rest accepted and left out
        assert cfg['ncc.patch_size'] == 9 and cfg['odometry.min_matches'] == 12
        parameters = config.load_parameter_file(path)
        assert parameters.config == cfg
        odometry = parameters.for_node('visual_odometry_node')
        assert odometry['publish_tf'] is False and odometry['odom_frame_id'] == 'odom_vo'
        assert odometry['depth_max_dt_s'] == 0.03 and odometry['use_sim_time'] is True
        assert odometry['camera_mount_xyz_qxyzw'] == [0.1, 0.0, 0.2, -0.5, 0.5, -0.5, 0.5]
        assert odometry['qos_overrides./camera/image_raw.subscription.reliability'] == \
            'reliable'
        matcher = parameters.for_node('matcher_node')
        assert 'publish_tf' not in matcher and matcher['image_transport'] == 'raw'
        assert matcher['use_sim_time'] is True

    @pytest.mark.parametrize('block, values, words', [
        ('visual_odometry_node', {'publish_tf': 'yes'}, ['publish_tf', 'true or false']),
        ('visual_odometry_node', {'publsh_tf': False}, ['publsh_tf', 'visual_odometry_node',
                                                        'publish_tf', 'use_sim_time']),
        ('matcher_node', {'publish_tf': False}, ['publish_tf', 'matcher_node']),
        ('/**', {'no_such_key': 1}, ['no_such_key', 'any node']),
        ('/**', {'use_sim_time': 'true'}, ['use_sim_time', 'true or false']),
        ('visual_odometry_node', {'camera_mount_xyz_qxyzw': [0.0, 0.0, 0.0]}, ['7 numbers']),
        # rcl refuses mixed sequences: ros2 launch would not start with this file
        ('visual_odometry_node', {'camera_mount_xyz_qxyzw': [0.1, 0, 0.2, -0.5, 0.5, -0.5, 0.5]},
         ['camera_mount_xyz_qxyzw', 'one type', '0.0, not 0']),
    ])
    def test_a_wrong_key_or_value_is_named(self, tmp_path, block, values, words):
        path = tmp_path / 'bad.yaml'
        path.write_text(yaml.safe_dump({block: {'ros__parameters': values}}))
        for load in (config.load_config, config.load_parameter_file):
            with pytest.raises(ValueError) as error:
                load(path)
            for word in words:
                assert word in str(error.value)

    def test_flat_file_may_hold_node_local_keys(self, tmp_path):
        path = tmp_path / 'flat.yaml'
        path.write_text('publish_tf: false\nmatcher: klt\n')
        parameters = config.load_parameter_file(path)
        assert parameters.config['matcher'] == 'klt'
        assert parameters.for_node('visual_odometry_node')['publish_tf'] is False
        assert 'publish_tf' not in parameters.for_node('dense_node')


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
