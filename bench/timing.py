# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Interleaved timing shared by the bench scripts (ratios against a peer timed in the same run)."""

from __future__ import annotations

import time
from typing import Callable, Dict, Mapping

import numpy as np


def interleaved_times(fns: Mapping[str, Callable[[], object]], repeats: int
                      ) -> Dict[str, Dict[str, float]]:
    """Time every ``fns[name]()`` ``repeats`` times, one call of each per round.

    Every function is called once first (warm-up, not timed). The calls are interleaved so that
    a slow spell of a shared machine hits all of them alike instead of one.

    onnxruntime sessions timed here together must be opened with ``allow_spinning=False``
    (``OnnxRuntimeBackend``): by default the intra-op threads of a session spin-wait after its
    call, so they take cores from the next session's call, and each model would be timed
    against the spinning of the others instead of alone.

    Returns ``{name: {'wall_s', 'cpu_s', 'best_wall_s'}}``: the median wall-clock and process
    CPU seconds per call, and the fastest wall-clock call (the least disturbed by other
    processes).
    """
    if repeats < 1:
        raise ValueError(f'repeats must be >= 1, got {repeats}')
    samples = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            samples[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    times = {}
    for name, rows in samples.items():
        rows = np.array(rows)
        wall_s, cpu_s = np.median(rows, axis=0)
        times[name] = {'wall_s': float(wall_s), 'cpu_s': float(cpu_s),
                       'best_wall_s': float(rows[:, 0].min())}
    return times
