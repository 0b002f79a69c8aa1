# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Names of the refused-input counters the nodes report in ``/diagnostics``.

One place for the names, so that the nodes that count and the replay evaluation that reads
their reports back (:mod:`relperception.pipeline.live_eval`) agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from relperception.imaging.depth_checks import DEPTH_PROBLEMS

#: camera_info messages refused (malformed intrinsics or size).
CAMERA_INFO_REFUSED = 'camera_info_refused'
#: frames that ran without depth while depth arrives (none near, or refused).
FRAMES_WITHOUT_DEPTH = 'frames_without_depth'
#: frames of another size than the latest camera_info describes (binning and ROI applied).
FRAMES_NOT_MATCHING_CAMERA_INFO = 'frames_not_matching_camera_info'
#: frames that ran with a depth image (not a refused input: reported beside the counters).
DEPTH_HITS = 'depth_hits'
#: frames whose model output held NaN or infinite values.
FRAMES_WITH_NONFINITE_OUTPUT = 'frames_with_nonfinite_output'
#: model rebuilds (after a parameter change) that failed; the previous model kept serving.
MODEL_REBUILD_FAILURES = 'model_rebuild_failures'
#: frames that could not be decoded (unknown encoding, wrong step, corrupt JPEG, ...).
FRAMES_UNDECODABLE = 'frames_undecodable'
#: frames skipped for their stamp (zero, repeated, out of order, a glitched jump).
FRAMES_BAD_STAMP = 'frames_bad_stamp'
#: frames skipped because no valid camera_info had arrived yet.
FRAMES_WITHOUT_CAMERA_INFO = 'frames_without_camera_info'
#: frames skipped while tracking was paused (``~/pause``; not a refused input).
FRAMES_PAUSED = 'frames_paused'
#: frames replaced by a newer one before the node took them (it was busy; not a refused input).
FRAMES_REPLACED = 'frames_replaced'
#: 16-bit images whose values stay below :data:`relperception.imaging.LOW_RANGE_16BIT_MAX`
#: (10/12-bit data in the low bits), left with few grey levels by the scaling to 8 bits.
FRAMES_16BIT_LOW_RANGE = 'frames_16bit_low_range'
#: Why frames are dropped or fail, each reported by itself in ``/diagnostics`` beside
#: ``frames_dropped`` and ``errors``.
FRAME_SKIP_REASONS = (FRAMES_UNDECODABLE, FRAMES_BAD_STAMP, FRAMES_WITHOUT_CAMERA_INFO,
                      FRAMES_NOT_MATCHING_CAMERA_INFO, FRAMES_PAUSED, FRAMES_REPLACED)
#: prefix of the refused-depth counters, one per ``DEPTH_PROBLEMS`` entry.
DEPTH_PROBLEM_PREFIX = 'depth_'
#: suffix of the per-input counters of messages lost in transport (``image_lost_...``).
LOST_IN_TRANSPORT_SUFFIX = '_lost_in_transport'


def depth_problem_counter(problem: str) -> str:
    """Return the counter name of a refused-depth problem (``depth_<problem>``)."""
    if problem not in DEPTH_PROBLEMS:
        raise ValueError(f'unknown depth problem {problem!r}; expected one of {DEPTH_PROBLEMS}')
    return f'{DEPTH_PROBLEM_PREFIX}{problem}'


def input_counters(values: Mapping[str, object]) -> dict[str, int]:
    """Return the refused-input counters among a diagnostics status's ``{key: value}``.

    Args:
        values: one status's key/value pairs (values as numbers or numeric strings).

    Returns:
        ``{counter name: count}`` of the keys named by this module (other keys, such as
        rates and timings, are left out; so are :data:`FRAMES_PAUSED` and
        :data:`FRAMES_REPLACED`, which refuse no input).
    """
    names = {CAMERA_INFO_REFUSED, FRAMES_WITHOUT_DEPTH, FRAMES_WITH_NONFINITE_OUTPUT,
             MODEL_REBUILD_FAILURES, FRAMES_16BIT_LOW_RANGE,
             *(set(FRAME_SKIP_REASONS) - {FRAMES_PAUSED, FRAMES_REPLACED}),
             *(depth_problem_counter(problem) for problem in DEPTH_PROBLEMS)}
    counts = {}
    for key, value in values.items():
        if key in names or key.endswith(LOST_IN_TRANSPORT_SUFFIX):
            try:
                counts[key] = int(float(value))
            except (TypeError, ValueError):
                continue
    return counts
