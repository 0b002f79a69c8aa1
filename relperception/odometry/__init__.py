# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Visual odometry: two-view geometry, the local map, bundle adjustment and the tracker."""

from relperception.odometry.geometry import (
    backproject,
    project,
    relative_pose_essential,
    relative_pose_pnp,
    triangulate,
)
from relperception.odometry.vo import estimate_pose_from_matches, VisualOdometry, VOResult

__all__ = ['VOResult', 'VisualOdometry', 'backproject',
           'estimate_pose_from_matches', 'project', 'relative_pose_essential',
           'relative_pose_pnp', 'triangulate']
