# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Install relperception as an ament_python package (colcon) or with pip."""

from glob import glob

from setuptools import find_packages, setup

package_name = 'relperception'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(include=['relperception', 'relperception.*']),
    # Shipped default weights (safetensors), their model cards and the checksum manifest.
    package_data={'relperception': ['weights/*.safetensors', 'weights/*.json', 'weights/*.md']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        ('share/' + package_name + '/config', glob('config/*')),
    ],
    python_requires='>=3.10',
    install_requires=[
        'setuptools',
        'numpy>=1.24',
        'opencv-python-headless>=4.8',
        'scipy>=1.10',
        'pyyaml>=6',
        'rosbags>=0.10',
        'evo>=1.28',
        'matplotlib>=3.7',
        'tqdm>=4.60',
        'safetensors>=0.4',
        # Bundle adjustment of monocular VO (odometry/bundle_adjustment.py). 4.3a1 is the
        # version with Jetson (aarch64, Python 3.10) wheels; VO runs without it if missing.
        'gtsam>=4.3a1',
    ],
    extras_require={
        'test': ['pytest'],
        # The learned models (dense perception, LoFTR). Install torch first from the index that
        # matches your machine (CPU, CUDA, or NVIDIA's Jetson wheels); pip would pick a CUDA build.
        'learned': ['torch>=2.1', 'onnx>=1.15', 'onnxruntime>=1.17'],
        'parity': ['kornia>=0.7'],
    },
    zip_safe=False,
    maintainer='relperception maintainers',
    maintainer_email='maintainers@relperception.invalid',
    description='Compare convolution vs attention and NCC vs learned matching for ROS 2 robots.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'relperception = relperception.cli.main:main',
            'matcher_node = relperception.nodes.matcher_node:main',
            'visual_odometry_node = relperception.nodes.vo_node:main',
            'dense_node = relperception.nodes.dense_node:main',
        ],
    },
)
