# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The visual-odometry job: matcher + :class:`VisualOdometry` built from one configuration.

The same object serves the offline bag evaluation, the CLI and the ROS node: it takes
:class:`~relperception.core_types.Frame` objects and returns
:class:`~relperception.odometry.vo.VOResult` objects, and records the processing time of every
frame.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
import logging
import time
from typing import Any

import numpy as np
from relperception.config import load_config, section
from relperception.core_types import Frame

logger = logging.getLogger(__name__)


class VOPipeline:
    """Matcher + visual odometry built from a flat configuration dict.

    Args:
        config: flat configuration (keys are ROS parameter names, see
            :mod:`relperception.config`); missing keys take their defaults, unknown keys raise
            ``ValueError``. ``config['matcher']`` names the matcher, whose section
            (e.g. ``ncc.*``) is its ``conf``; the ``odometry.*`` section configures
            :class:`~relperception.odometry.vo.VisualOdometry`.
        max_history: number of per-frame timings kept in :attr:`timings_ms` (bounded, so a
            long-running node does not grow without limit).

    Attributes:
        config: the complete, validated flat configuration.
        matcher: the matcher object.
        odometry: the :class:`VisualOdometry` object.
        timings_ms: deque of the processing times of the last ``max_history`` frames (ms).
        last_timing_ms: processing time of the last frame (ms), NaN before the first.
        frames_processed: number of :meth:`process` calls since construction or :meth:`reset`.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, max_history: int = 100_000):
        from relperception.matching import build_matcher
        from relperception.odometry.vo import VisualOdometry

        if config is not None and not isinstance(config, Mapping):
            raise ValueError(f'config must be a mapping, got {type(config).__name__}')
        if int(max_history) < 1:
            raise ValueError(f'max_history must be >= 1, got {max_history}')
        self.config = load_config(overrides=dict(config or {}))
        matcher_name = self.config['matcher']
        self.matcher = build_matcher(matcher_name, section(self.config, matcher_name))
        self.odometry = VisualOdometry(self.matcher, section(self.config, 'odometry'))
        self.timings_ms: deque = deque(maxlen=int(max_history))
        self.last_timing_ms = float('nan')
        self.frames_processed = 0
        logger.debug('VO pipeline: matcher %s, odometry mode %s', matcher_name,
                     self.config['odometry.mode'])

    @property
    def mode(self) -> str:
        """Return the configured odometry mode: ``'auto'``, ``'rgbd'`` or ``'mono'``."""
        return str(self.config['odometry.mode'])

    def process(self, frame: Frame, translation_norm_m: float | None = None):
        """Track one frame and return its :class:`~relperception.odometry.vo.VOResult`.

        Args:
            frame: image (uint8 grey or RGB), ``stamp_ns`` (int ns), camera, optional
                ``depth`` (H, W) float32 metres with NaN where invalid.
            translation_norm_m: optional distance (metres) travelled since the previous call,
                for the monocular scale only (wheel odometry, or ground truth in benchmarks).

        Returns:
            the VOResult, with ``T_world_cam`` (4, 4) float64 in the frame of the first camera.
        """
        if not isinstance(frame, Frame):
            raise ValueError(  # noqa: TRY004 - the house rule: ValueError at the boundary
                f'frame must be a relperception.core_types.Frame, got {type(frame)}')
        start = time.perf_counter()
        result = self.odometry.step(frame, translation_norm_m=translation_norm_m)
        elapsed_ms = 1e3 * (time.perf_counter() - start)
        self.timings_ms.append(elapsed_ms)
        self.last_timing_ms = elapsed_ms
        self.frames_processed += 1
        return result

    def timing_stats(self) -> dict:
        """Return median, 95th percentile, mean and max of :attr:`timings_ms` (ms; NaN if none)."""
        values = np.asarray(self.timings_ms, dtype=np.float64)
        if len(values) == 0:
            nan = float('nan')
            return {'median_ms': nan, 'p95_ms': nan, 'mean_ms': nan, 'max_ms': nan}
        return {'median_ms': float(np.median(values)),
                'p95_ms': float(np.percentile(values, 95)),
                'mean_ms': float(np.mean(values)), 'max_ms': float(np.max(values))}

    def reconfigure(self, config: Mapping[str, Any]) -> None:
        """Apply a new configuration between frames; the trajectory and map are kept.

        Args:
            config: flat configuration as for the constructor (a different ``matcher`` or
                matcher section builds a new matcher; ``odometry.*`` apply from the next frame).

        Raises:
            ValueError: for an invalid configuration (nothing is changed then).
        """
        from relperception.matching import build_matcher

        if not isinstance(config, Mapping):
            raise ValueError(f'config must be a mapping, got {type(config).__name__}')
        config = load_config(overrides=dict(config))
        matcher_name = config['matcher']
        matcher = build_matcher(matcher_name, section(config, matcher_name))
        self.odometry.reconfigure(matcher, section(config, 'odometry'))
        self.config, self.matcher = config, matcher

    def reset(self) -> None:
        """Restart odometry (the next frame defines a new world frame) and clear the timings."""
        self.odometry.reset()
        self.timings_ms.clear()
        self.last_timing_ms = float('nan')
        self.frames_processed = 0
