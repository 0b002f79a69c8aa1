# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of relperception.nodes.parameters on real rclpy nodes."""

import uuid

import pytest

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('rcl_interfaces')

from rcl_interfaces.msg import ParameterType  # noqa: E402
from rclpy.exceptions import InvalidParameterValueException  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from relperception.config import ParameterSpec, section, SPECS  # noqa: E402
from relperception.matching import build_matcher  # noqa: E402
from relperception.nodes.parameters import (  # noqa: E402
    current_config,
    declare_parameters,
    parameter_descriptor,
)

NAMES = ['matcher', 'ncc.patch_size', 'ncc.min_score', 'odometry.mode',
         'odometry.use_motion_prior', 'topics.image']


@pytest.fixture
def make_node(context):
    nodes = []

    def make(**kwargs):
        node = rclpy.create_node(f'parameters_{uuid.uuid4().hex[:8]}', context=context,
                                 **kwargs)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.destroy_node()


def check_ncc(config):
    """Build the matcher like matcher_node does (rejects an even patch size)."""
    build_matcher('ncc', section(config, 'ncc'))


class TestDeclareParameters:

    def test_smoke_defaults(self, make_node):
        node = make_node()
        declare_parameters(node, NAMES)
        assert current_config(node, NAMES) == {name: SPECS[name].default for name in NAMES}

    def test_descriptors(self, make_node):
        node = make_node()
        declare_parameters(node, NAMES)
        described = dict(zip(NAMES, node.describe_parameters(NAMES)))
        patch = described['ncc.patch_size']
        assert patch.type == ParameterType.PARAMETER_INTEGER
        assert patch.description == SPECS['ncc.patch_size'].description
        assert (patch.integer_range[0].from_value, patch.integer_range[0].to_value) == (3, 31)
        assert not patch.floating_point_range and not patch.read_only
        score = described['ncc.min_score']
        assert score.type == ParameterType.PARAMETER_DOUBLE
        assert (score.floating_point_range[0].from_value,
                score.floating_point_range[0].to_value) == (-1.0, 1.0)
        matcher = described['matcher']
        assert matcher.type == ParameterType.PARAMETER_STRING
        assert matcher.description.startswith(SPECS['matcher'].description)
        for choice in SPECS['matcher'].choices:
            assert choice in matcher.additional_constraints and choice in matcher.description
        assert described['odometry.use_motion_prior'].type == ParameterType.PARAMETER_BOOL
        assert described['topics.image'].type == ParameterType.PARAMETER_STRING

    def test_overrides_are_taken(self, make_node):
        node = make_node(parameter_overrides=[Parameter('ncc.patch_size', value=11),
                                              Parameter('matcher', value='orb')])
        declare_parameters(node, NAMES)
        config = current_config(node, NAMES)
        assert config['ncc.patch_size'] == 11 and config['matcher'] == 'orb'

    def test_valid_change_applies_and_notifies(self, make_node):
        node = make_node()
        changes = []
        declare_parameters(node, NAMES, on_change=changes.append, check=check_ncc)
        results = node.set_parameters([Parameter('ncc.min_score', value=0.5),
                                       Parameter('odometry.mode', value='mono')])
        assert all(result.successful for result in results)
        config = current_config(node, NAMES)
        assert config['ncc.min_score'] == 0.5 and config['odometry.mode'] == 'mono'
        assert changes == [{'ncc.min_score': 0.5}, {'odometry.mode': 'mono'}]

    @pytest.mark.parametrize('name, value, reason', [
        ('ncc.patch_size', 99, 'out of range'),             # rejected by the range descriptor
        ('ncc.min_score', 1.5, 'out of range'),
        ('matcher', 'sift', 'must be one of'),              # rejected by ParameterSpec.validate
        ('ncc.patch_size', 8, 'step: 2'),                   # rejected by the range's step
        ('ncc.patch_size', 'nine', 'type'),                 # rejected by rclpy's type check
    ])
    def test_invalid_change_fails_with_reason(self, make_node, name, value, reason):
        node = make_node()
        changes = []
        declare_parameters(node, NAMES, on_change=changes.append, check=check_ncc)
        before = current_config(node, NAMES)
        result, = node.set_parameters([Parameter(name, value=value)])
        assert not result.successful
        assert reason in result.reason.lower()
        assert current_config(node, NAMES) == before
        assert changes == []
        ok, = node.set_parameters([Parameter('ncc.patch_size', value=7)])   # still usable
        assert ok.successful and current_config(node, NAMES)['ncc.patch_size'] == 7

    def test_read_only_and_local_specs(self, make_node):
        spec = ParameterSpec('local.fixed', 'a', 'a read-only node-local parameter',
                             choices=('a', 'b'), read_only=True)
        node = make_node()
        declare_parameters(node, ['local.fixed'], specs={'local.fixed': spec})
        assert node.describe_parameter('local.fixed').read_only
        result, = node.set_parameters([Parameter('local.fixed', value='b')])
        assert not result.successful
        assert current_config(node, ['local.fixed'], specs={'local.fixed': spec}) == {
            'local.fixed': 'a'}

    def test_degenerate(self, make_node):
        with pytest.raises(ValueError, match='unknown parameters'):
            declare_parameters(make_node(), ['ncc.no_such_thing'])
        node = make_node(parameter_overrides=[Parameter('ncc.patch_size', value=99)])
        with pytest.raises(InvalidParameterValueException):
            declare_parameters(node, NAMES)
        node = make_node(parameter_overrides=[Parameter('ncc.patch_size', value=8)])
        with pytest.raises(InvalidParameterValueException):   # even: the range's step
            declare_parameters(node, NAMES)

        def refuse_orb(config):
            if config['matcher'] == 'orb':
                raise ValueError('orb is refused by this check')

        node = make_node(parameter_overrides=[Parameter('matcher', value='orb')])
        with pytest.raises(ValueError, match='refused by this check'):
            declare_parameters(node, NAMES, check=refuse_orb)


class TestParameterDescriptor:

    def test_every_spec_converts(self):
        for spec in SPECS.values():
            descriptor = parameter_descriptor(spec)
            assert descriptor.name == spec.name
            assert descriptor.description.startswith(spec.description)
            if spec.min_value is not None and isinstance(spec.default, int):
                assert descriptor.integer_range[0].from_value == spec.min_value

    def test_degenerate(self):
        with pytest.raises(ValueError, match='unsupported parameter type'):
            parameter_descriptor(ParameterSpec('x.dict', {'a': 1}, 'a mapping'))
        with pytest.raises(ValueError, match='unsupported array of str'):
            parameter_descriptor(ParameterSpec('x.names', ['a'], 'names'))

    def test_arrays(self):
        from rcl_interfaces.msg import ParameterType

        assert parameter_descriptor(ParameterSpec('x.pixel', [-1, -1], 'pixel')).type == \
            ParameterType.PARAMETER_INTEGER_ARRAY
        mount = ParameterSpec('x.mount', [0.0] * 7, 'mount', read_only=True)
        descriptor = parameter_descriptor(mount)
        assert descriptor.type == ParameterType.PARAMETER_DOUBLE_ARRAY and descriptor.read_only
        assert mount.validate((1, 2, 3, 0, 0, 0, 1)) == [1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 1.0]
        for bad in ([0.0] * 6, [float('nan')] * 7, 'seven', [True] * 7):
            with pytest.raises(ValueError, match='x.mount'):
                mount.validate(bad)
        with pytest.raises(ValueError, match='integers'):
            ParameterSpec('x.pixel', [-1, -1], 'pixel').validate([1.5, 2])
