# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""ament_flake8 over the package sources (the ROS 2 linter configuration)."""

import os

from lint_targets import lint_paths, REPO_ROOT
import pytest


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8():
    main_with_errors = pytest.importorskip('ament_flake8.main').main_with_errors
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)
    try:
        rc, errors = main_with_errors(argv=lint_paths())
    finally:
        os.chdir(cwd)
    assert rc == 0, f'Found {len(errors)} code style errors / warnings:\n' + '\n'.join(errors)
