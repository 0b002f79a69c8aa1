# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The Dockerfiles install what the package needs, learned models included.

No Docker engine runs on the development machines, so the images are not built here; this
checks their package lists against ``setup.py``, ``package.xml`` and ``requirements/``.
"""

import ast
import re
import xml.etree.ElementTree as ElementTree

from lint_targets import REPO_ROOT
import pytest

DOCKERFILES = ('docker/Dockerfile', 'docker/Dockerfile.jetson')
#: What the learned models and the deployment backends need besides install_requires.
LEARNED = ('torch', 'safetensors', 'onnx', 'onnxruntime')
#: pip name -> Ubuntu package of the same Python module.
APT_NAMES = {'numpy': 'python3-numpy', 'opencv-python-headless': 'python3-opencv',
             'scipy': 'python3-scipy', 'pyyaml': 'python3-yaml',
             'matplotlib': 'python3-matplotlib', 'tqdm': 'python3-tqdm'}
#: What the Jetson base image (jetson-containers ROS 2 on L4T) ships, as its comment says.
JETSON_BASE = ('setuptools', 'numpy', 'opencv-python-headless')
#: ROS 2 packages of ros-base (the Jetson image's ROS), package.xml names.
ROS_BASE = ('rclpy', 'sensor_msgs', 'std_msgs', 'geometry_msgs', 'nav_msgs', 'diagnostic_msgs',
            'std_srvs', 'tf2_ros_py', 'ros2launch', 'launch_ros')


def _name(requirement: str) -> str:
    return re.split(r'[<>=!~;\[ ]', requirement.strip(), maxsplit=1)[0].lower()


def _install_requires():
    tree = ast.parse((REPO_ROOT / 'setup.py').read_text(encoding='utf-8'))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == 'install_requires':
            return [_name(element.value) for element in node.value.elts]
    raise AssertionError('setup.py has no install_requires')


def _pip_installed(dockerfile: str) -> set:
    """Names a Dockerfile installs with pip: quoted arguments and its -r requirement files."""
    text = (REPO_ROOT / dockerfile).read_text(encoding='utf-8')
    names = set()
    for command in re.findall(r'pip3? install(?:[^\n]*\\\n)*[^\n]*', text):
        names |= {_name(q) for q in re.findall(r"'([^']+)'", command)}
        for path in re.findall(r'-r\s+(\S+)', command):
            lines = (REPO_ROOT / path).read_text(encoding='utf-8').splitlines()
            names |= {_name(line) for line in lines if line.strip() and
                      not line.lstrip().startswith('#')}
    return names


@pytest.mark.parametrize('dockerfile', DOCKERFILES)
def test_python_dependencies_and_learned_models_are_installed(dockerfile):
    text = (REPO_ROOT / dockerfile).read_text(encoding='utf-8')
    pip = _pip_installed(dockerfile)
    provided = set(JETSON_BASE) if dockerfile.endswith('jetson') else {'setuptools'}
    missing = [name for name in _install_requires() + list(LEARNED)
               if name not in pip and name not in provided and APT_NAMES.get(name, '@') not in
               text and not (name in APT_NAMES and 'rosdep install' in text)]
    assert not missing, f'{dockerfile} does not install {missing}'
    assert 'pip install --user' not in text and 'pip3 install --user' not in text


@pytest.mark.parametrize('dockerfile', DOCKERFILES)
def test_ros_dependencies_are_installed(dockerfile):
    text = (REPO_ROOT / dockerfile).read_text(encoding='utf-8')
    root = ElementTree.parse(REPO_ROOT / 'package.xml').getroot()
    ros = [e.text for e in root.iter('exec_depend') if not e.text.startswith('python3-')]
    if 'rosdep install' in text:
        return   # rosdep installs every key of package.xml
    missing = [name for name in ros if name not in ROS_BASE and
               f'ros-jazzy-{name.replace("_", "-")}' not in text]
    assert not missing, f'{dockerfile} does not install the ROS packages {missing}'


def test_the_parser_reads_continued_commands_and_requirement_files():
    assert {'torch', 'onnxruntime', 'safetensors', 'rosbags', 'gtsam'} <= \
        _pip_installed('docker/Dockerfile')
    assert {'torch', 'onnxruntime', 'scipy', 'evo'} <= _pip_installed('docker/Dockerfile.jetson')
    assert _name('torch>=2.1') == 'torch' and _name('gtsam>=4.3a1') == 'gtsam'
