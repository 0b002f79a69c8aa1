# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Shared pytest fixtures and helpers."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / 'shared' / 'data'


def shared_dataset(name: str) -> Path:
    """Return ``../shared/data/<name>`` or skip the test when it is not on this machine."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f'development data {path} not present')
    return path
