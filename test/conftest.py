# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Shared pytest fixtures and helpers."""

import contextlib
import importlib
from pathlib import Path
import sys
import time

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / 'shared' / 'data'


def shared_dataset(name: str) -> Path:
    """Return ``../shared/data/<name>`` or skip the test when it is not on this machine."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f'development data {path} not present')
    return path


@contextlib.contextmanager
def bench_module(name: str):
    """Import ``bench/<name>.py`` for the block (the bench folder is not a package)."""
    bench_dir = str(REPO_ROOT / 'bench')
    sys.path.insert(0, bench_dir)
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(bench_dir)


def wait_for(predicate, timeout=10.0):
    """Poll ``predicate`` every 5 ms until it is true or ``timeout`` seconds pass; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


@pytest.fixture(scope='module')
def one_torch_thread():
    """Run a module's torch work on one thread, restored afterwards.

    Small models and tests on a shared 2-core CI machine: a multi-threaded torch pool mostly
    waits at barriers. Modules opt in with ``pytestmark = pytest.mark.usefixtures(...)``.
    """
    torch = pytest.importorskip('torch')
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def harnesses():
    """Return a list that collects test harnesses and closes each one after the test."""
    made = []
    yield made
    for each in made:
        each.close()


@pytest.fixture
def context():
    """Return a fresh initialised ``rclpy.Context`` (skips without rclpy), shut down after."""
    rclpy = pytest.importorskip('rclpy')
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    yield ctx
    ctx.try_shutdown()
