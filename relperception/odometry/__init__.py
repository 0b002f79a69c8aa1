# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Visual odometry: two-view geometry and a frame-to-keyframe tracker (RGB-D and monocular)."""

from relperception.odometry.geometry import (
    backproject,
    project,
    relative_pose_essential,
    relative_pose_pnp,
    triangulate,
)
from relperception.odometry.vo import VisualOdometry, VOResult

__all__ = ['VOResult', 'VisualOdometry', 'backproject', 'project', 'relative_pose_essential',
           'relative_pose_pnp', 'triangulate']
