# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Input checks shared by the public functions of the core (clear ``ValueError`` messages)."""

from pathlib import Path

import numpy as np


def as_rows(name: str, value, columns: int, dtype=np.float64) -> np.ndarray:
    """Return ``value`` as an (N, ``columns``) array of ``dtype``.

    Args:
        name: the argument's name, used in the error message.
        value: array-like, e.g. (N, 2) pixel coordinates or (N, 3) points.
        columns: the required number of columns.
        dtype: the dtype of the returned array.

    Raises:
        ValueError: when ``value`` does not have shape (N, ``columns``).
    """
    value = np.asarray(value, dtype=dtype)
    if value.ndim != 2 or value.shape[1] != columns:
        raise ValueError(f'{name} must have shape (N, {columns}), got {value.shape}')
    return value


def check_not_folder(path, what: str) -> None:
    """Raise ValueError when ``path``, where a file is expected, is a folder.

    A folder there was reported as a file that does not exist, which sends the user looking
    for a missing file rather than at the path they gave.

    Args:
        path: the path given for a file.
        what: what the file is, for the message (e.g. ``'weights file'``).
    """
    if Path(path).is_dir():
        raise ValueError(f'{what} {path} is a folder; give the file itself')


#: A problem that repeats (e.g. non-finite model outputs) is logged the first time and then
#: once every this many occurrences; the count itself is always kept.
REPORT_EVERY = 100


def is_report_due(count: int) -> bool:
    """Return whether the ``count``-th occurrence of a repeating problem should be logged."""
    return count == 1 or count % REPORT_EVERY == 0


def count_nonfinite(arrays) -> tuple[int, int]:
    """Return ``(non-finite values, all values)`` over an iterable of numeric arrays."""
    bad = total = 0
    for array in arrays:
        array = np.asarray(array)
        total += array.size
        bad += array.size - int(np.count_nonzero(np.isfinite(array)))
    return bad, total


#: Highest frame rate (Hz) of a sequence whose stamps are generated: at 1 MHz frames are still
#: 1,000 ns apart, so they keep distinct, ordered integer-nanosecond stamps.
MAX_FRAME_RATE_HZ = 1e6


def check_frame_rate(fps, name: str = 'fps') -> float:
    """Return ``fps`` as a float in (0, :data:`MAX_FRAME_RATE_HZ`] Hz; ValueError otherwise."""
    if isinstance(fps, bool) or not isinstance(fps, (int, float, np.number)) \
            or not 0 < float(fps) <= MAX_FRAME_RATE_HZ:
        raise ValueError(f'{name} must be a number in (0, {MAX_FRAME_RATE_HZ:g}] Hz, got '
                         f'{fps!r}')
    return float(fps)
