# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""relperception: compare -> score -> aggregate, for robot perception on ROS 2.

The core packages (``types``, ``imaging``, ``matching``, ``odometry``, ``data``,
``evaluation``, ``pipeline``) are ROS-free; only ``relperception.nodes`` imports
``rclpy`` or message packages.
"""

__version__ = '0.1.0'
