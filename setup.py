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
    ],
    extras_require={
        'test': ['pytest'],
    },
    zip_safe=True,
    maintainer='relperception maintainers',
    maintainer_email='maintainers@relperception.invalid',
    description='Compare convolution vs attention and NCC vs learned matching for ROS 2 robots.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'relperception = relperception.cli.main:main',
            'matcher_node = relperception.nodes.matcher_node:main',
            'odometry_node = relperception.nodes.odometry_node:main',
        ],
    },
)
