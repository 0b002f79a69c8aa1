# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Output files written whole or not at all.

Every file a run writes (reports, trajectories, CSV tables, plots, weights, exported models)
goes to a temporary name next to its target and is renamed over it only when complete, so an
interruption (Ctrl-C, SIGTERM, a full disk) never leaves a truncated file behind, and a file
of an earlier run is replaced in one step. The temporary name keeps the suffix, so writers
that pick the format from it (OpenCV, matplotlib, numpy) write the same format.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import os
from pathlib import Path
from typing import IO

#: Marker in the temporary names (``.<stem>.partial<suffix>``).
PARTIAL_MARKER = '.partial'


def partial_name(path: str | Path) -> Path:
    """Return the temporary name :func:`atomic_path` writes ``path`` under (same folder)."""
    path = Path(path)
    return path.with_name(f'.{path.stem}{PARTIAL_MARKER}{path.suffix}')


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write; it replaces ``path`` when the block ends normally.

    The parent folders are created. When the block raises (an error or an interruption), the
    temporary file is removed and ``path`` is left as it was.

    Args:
        path: the output file.

    Yields:
        the temporary path (same folder and suffix as ``path``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = partial_name(path)
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


@contextlib.contextmanager
def atomic_open(path: str | Path, binary: bool = False,
                newline: str | None = None) -> Iterator[IO]:
    """Open a temporary file for writing; it replaces ``path`` when the block ends normally.

    Args:
        path: the output file (parent folders are created).
        binary: open in binary mode instead of UTF-8 text.
        newline: the text mode's ``newline`` (``''`` for the csv module).

    Yields:
        the open stream.
    """
    with atomic_path(path) as temporary:
        if binary:
            with open(temporary, 'wb') as stream:
                yield stream
        else:
            with open(temporary, 'w', encoding='utf-8', newline=newline) as stream:
                yield stream


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file; return the path."""
    with atomic_open(path) as stream:
        stream.write(text)
    return Path(path)
