# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Input checks shared by the public functions of the core (clear ``ValueError`` messages)."""

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
