# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""ROS 2 nodes: the only part of relperception that imports rclpy or message packages.

Nodes convert messages to core types at the edge and own QoS, threads, parameters and
diagnostics. Submodules are imported on use (``from relperception.nodes.matcher_node import
MatcherNode``) so that importing this package needs no ROS installation.
"""
