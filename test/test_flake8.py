# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""ament_flake8 over the package sources (the ROS 2 linter configuration)."""

from lint_targets import lint_paths, run_in_repo_root
import pytest


@pytest.mark.flake8
@pytest.mark.linter
def test_flake8():
    main_with_errors = pytest.importorskip('ament_flake8.main').main_with_errors
    rc, errors = run_in_repo_root(main_with_errors, lint_paths())
    assert rc == 0, f'Found {len(errors)} code style errors / warnings:\n' + '\n'.join(errors)
