# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Declare ROS parameters from the configuration schema and validate changes at run time.

The schema (:data:`relperception.config.SPECS`) is the single source of names, defaults,
descriptions and ranges: :func:`declare_parameters` turns each :class:`ParameterSpec` into a
declared parameter with a ``ParameterDescriptor`` (so ``ros2 param describe`` shows it),
takes the node's overrides (``--ros-args -p``, YAML parameter files) as usual, and registers
a callback that rejects invalid values with the reason instead of raising, so a bad
``ros2 param set`` leaves the node running with its old value. Accepted changes are handed
to an ``on_change`` callback; nodes store them in a
:class:`relperception.pipeline.realtime.VersionedConfig` and apply them between frames.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter
from relperception.config import ParameterSpec, SPECS

#: The schema's parameters of the matcher choice and every matcher's section.
MATCHER_PARAMETERS: List[str] = ['matcher'] + [
    name for name in SPECS if name.split('.')[0] in SPECS['matcher'].choices]

_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
}
_ARRAY_TYPES = {
    int: ParameterType.PARAMETER_INTEGER_ARRAY,
    float: ParameterType.PARAMETER_DOUBLE_ARRAY,
}


def parameter_descriptor(spec: ParameterSpec) -> ParameterDescriptor:
    """Return the ``rcl_interfaces/ParameterDescriptor`` of one schema entry.

    Args:
        spec: the schema entry; its default's Python type (bool, int, float, str, or a list
            of int or float) gives the parameter type, ``min_value``/``max_value`` an integer
            or floating-point range, ``choices`` the ``additional_constraints`` and the end of
            the description.

    Returns:
        The descriptor (``dynamic_typing`` false: the type is fixed by the default).

    Raises:
        ValueError: for a default of another type.
    """
    kind = type(spec.default)
    if kind is list:
        element = type(spec.default[0])
        if element not in _ARRAY_TYPES:
            raise ValueError(f'{spec.name}: unsupported array of {element.__name__}')
        return ParameterDescriptor(name=spec.name, type=_ARRAY_TYPES[element],
                                   description=spec.description, read_only=bool(spec.read_only))
    if kind not in _TYPES:
        raise ValueError(f'{spec.name}: unsupported parameter type {kind.__name__}')
    description = spec.description
    constraints = ''
    if spec.choices is not None:
        constraints = 'one of: ' + ', '.join(str(choice) for choice in spec.choices)
        description = f'{description} ({constraints})'
    descriptor = ParameterDescriptor(
        name=spec.name, type=_TYPES[kind], description=description,
        additional_constraints=constraints, read_only=bool(spec.read_only))
    if spec.min_value is not None or spec.max_value is not None:
        if kind is int:
            low = int(spec.min_value) if spec.min_value is not None else -2**63
            high = int(spec.max_value) if spec.max_value is not None else 2**63 - 1
            descriptor.integer_range = [IntegerRange(from_value=low, to_value=high,
                                                     step=int(spec.step or 0))]
        elif kind is float:
            low = float(spec.min_value) if spec.min_value is not None else -float('inf')
            high = float(spec.max_value) if spec.max_value is not None else float('inf')
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=low, to_value=high, step=0.0)]
    return descriptor


def declare_parameters(node: Node, names: Iterable[str],
                       on_change: Optional[Callable[[Dict[str, Any]], None]] = None,
                       check: Optional[Callable[[Dict[str, Any]], None]] = None,
                       specs: Optional[Mapping[str, ParameterSpec]] = None) -> None:
    """Declare parameters from the schema on ``node`` and validate every later change.

    Initial values are the schema defaults unless the node has overrides (command line or
    parameter file). A change is rejected with ``SetParametersResult(successful=False,
    reason=...)`` when :meth:`ParameterSpec.validate` raises ``ValueError`` or ``check`` raises
    any exception (building a component can fail with ``OSError``, ``RuntimeError``, ...); the
    old value stays and the node keeps running. Call once per node and group of names.

    Args:
        node: the node to declare on.
        names: parameter names, each a key of ``specs``.
        on_change: called after a successful change with ``{name: value}`` of the changed
            parameters among ``names`` (on the thread that set them: keep it short, e.g.
            ``VersionedConfig.update``).
        check: optional whole-configuration check: called with the flat configuration of
            ``names`` as it would be after the change; raise ``ValueError`` (or anything else
            building the component raises) to reject it (e.g. try to build the component). At
            declaration, its exception propagates: the node does not start.
        specs: the schema (default :data:`relperception.config.SPECS`), e.g. to add node-local
            parameters.

    Raises:
        ValueError: for a name that is not in ``specs``.
        rclpy.exceptions.InvalidParameterValueException: when an override is invalid.
    """
    specs = SPECS if specs is None else specs
    names = list(names)
    unknown = [name for name in names if name not in specs]
    if unknown:
        raise ValueError(f'unknown parameters {unknown}; known: {", ".join(sorted(specs))}')
    own = set(names)

    def validate(parameters: List[Parameter]) -> SetParametersResult:
        changes = {}
        for parameter in parameters:
            if parameter.name not in own:
                continue
            try:
                changes[parameter.name] = specs[parameter.name].validate(parameter.value)
            except ValueError as error:
                return SetParametersResult(successful=False, reason=str(error))
        if changes and check is not None and all(node.has_parameter(n) for n in names):
            try:
                check({**current_config(node, names), **changes})
            except ValueError as error:
                return SetParametersResult(successful=False, reason=str(error))
            except Exception as error:  # noqa: B902 - raised here, it would stop the node
                # building the component failed otherwise (a missing or corrupt weights file)
                return SetParametersResult(successful=False,
                                           reason=f'{type(error).__name__}: {error}')
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(validate)
    node.declare_parameters('', [(name, specs[name].default, parameter_descriptor(specs[name]))
                                 for name in names])
    if check is not None:
        check(current_config(node, names))
    if on_change is not None:
        def changed(parameters: List[Parameter]) -> None:
            changes = {p.name: specs[p.name].validate(p.value) for p in parameters
                       if p.name in own}
            if changes:
                on_change(changes)
        node.add_post_set_parameters_callback(changed)


def current_config(node: Node, names: Iterable[str],
                   specs: Optional[Mapping[str, ParameterSpec]] = None) -> Dict[str, Any]:
    """Return the node's current values of ``names`` as a flat configuration dict.

    Args:
        node: a node on which ``names`` are declared.
        names: parameter names (dotted, as in the schema).
        specs: the schema used to convert values to the default's type (default
            :data:`relperception.config.SPECS`).

    Returns:
        ``{name: value}``, usable with :func:`relperception.config.section` and
        :func:`relperception.matching.build_matcher`.
    """
    specs = SPECS if specs is None else specs
    config = {}
    for name in names:
        value = node.get_parameter(name).value
        config[name] = specs[name].validate(value) if name in specs else value
    return config
