# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Visual odometry: two-view geometry, a frame-to-keyframe tracker and match-driven odometry."""

from relperception.odometry.geometry import (
    backproject,
    project,
    relative_pose_essential,
    relative_pose_pnp,
    triangulate,
)
from relperception.odometry.motion import MatchOdometry
from relperception.odometry.vo import estimate_pose_from_matches, VisualOdometry, VOResult

__all__ = ['MatchOdometry', 'VOResult', 'VisualOdometry', 'backproject',
           'estimate_pose_from_matches', 'project', 'relative_pose_essential',
           'relative_pose_pnp', 'triangulate']
