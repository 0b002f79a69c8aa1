# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The source paths every linter test checks (never the venv or colcon's build folders)."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LINT_DIRS = ('relperception', 'test', 'bench', 'launch')


def lint_paths():
    """Return the existing package paths to lint, as strings relative to the repository root."""
    paths = [d for d in LINT_DIRS if (REPO_ROOT / d).is_dir()]
    return paths + ['setup.py']


def python_files():
    """Return every Python file of the package (absolute paths)."""
    files = [REPO_ROOT / 'setup.py']
    for d in LINT_DIRS:
        files += sorted((REPO_ROOT / d).rglob('*.py'))
    return files


def run_in_repo_root(linter_main, argv):
    """Return ``linter_main(argv=argv)`` run with the repository root as working directory."""
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        return linter_main(argv=argv)
    finally:
        os.chdir(cwd)
