# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Evaluation: trajectory metrics with evo (ATE, RPE, drift), reports and plots."""

from relperception.evaluation.report import plot_errors, plot_trajectories, write_json
from relperception.evaluation.trajectory import (evaluate_trajectory, interpolate_poses,
                                                 read_tum, summary_metrics, write_tum)

__all__ = ['evaluate_trajectory', 'interpolate_poses', 'plot_errors', 'plot_trajectories',
           'read_tum', 'summary_metrics', 'write_json', 'write_tum']
