# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The core is ROS-free: only relperception/nodes/ may import rclpy or message packages."""

import ast
import subprocess
import sys
import textwrap

from lint_targets import REPO_ROOT
import pytest

PACKAGE = REPO_ROOT / 'relperception'
ROS_MODULES = ('rclpy', 'rosidl_runtime_py', 'rosidl_parser', 'tf2_ros', 'tf2_py',
               'message_filters', 'cv_bridge', 'launch', 'launch_ros', 'launch_testing',
               'ament_index_python', 'rosbag2_py', 'image_transport')


def is_ros_module(name: str) -> bool:
    top = name.split('.')[0]
    return top in ROS_MODULES or top.endswith('_msgs') or top.endswith('_srvs')


def core_files():
    return [p for p in sorted(PACKAGE.rglob('*.py'))
            if 'nodes' not in p.relative_to(PACKAGE).parts]


def imported_modules(path):
    tree = ast.parse(path.read_text(encoding='utf-8'), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Call) and getattr(node.func, 'attr', None) == 'import_module':
            if node.args and isinstance(node.args[0], ast.Constant):
                yield str(node.args[0].value)


class TestRosFreeCore:

    def test_detector_recognises_ros_modules(self):
        assert is_ros_module('sensor_msgs.msg')
        assert is_ros_module('rclpy.node')
        assert not is_ros_module('rosbags.typesys')
        assert not is_ros_module('numpy')

    def test_no_core_file_imports_ros(self):
        files = core_files()
        assert len(files) > 5
        offenders = [f'{p.relative_to(REPO_ROOT)}: {m}'
                     for p in files for m in imported_modules(p) if is_ros_module(m)]
        assert not offenders, 'ROS imports outside relperception/nodes:\n' + '\n'.join(offenders)

    def test_core_imports_with_ros_unavailable(self):
        modules = sorted(
            '.'.join(p.relative_to(REPO_ROOT).with_suffix('').parts).removesuffix('.__init__')
            for p in core_files())
        script = textwrap.dedent(f"""
            import importlib, importlib.abc, sys
            ROS = {ROS_MODULES!r}
            class Block(importlib.abc.MetaPathFinder):
                def find_spec(self, name, path, target=None):
                    top = name.split('.')[0]
                    if top in ROS or top.endswith('_msgs') or top.endswith('_srvs'):
                        raise ImportError('ROS import blocked by test: ' + name)
            sys.meta_path.insert(0, Block())
            for module in {modules!r}:
                importlib.import_module(module)
            print('imported', len({modules!r}))
        """)
        result = subprocess.run([sys.executable, '-c', script], cwd=REPO_ROOT,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize('name', ['relperception', 'relperception.cli.main'])
def test_import_has_no_output(name):
    result = subprocess.run([sys.executable, '-c', f'import {name}'], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == '' and result.stderr == ''
