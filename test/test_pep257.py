# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""ament_pep257 over the package sources.

The house docstring style is Google's (as in kornia and LightGlue: ``Args:`` / ``Returns:``
sections, summary on the first line), so the check runs ament_pep257 with
``--convention google`` plus ament's own ignores for missing docstrings (D100-D107).
"""

from lint_targets import lint_paths, run_in_repo_root
import pytest

AMENT_IGNORES = ('D100', 'D101', 'D102', 'D103', 'D104', 'D105', 'D106', 'D107')


@pytest.mark.linter
@pytest.mark.pep257
def test_pep257():
    main = pytest.importorskip('ament_pep257.main').main
    rc = run_in_repo_root(main, [*lint_paths(), '--convention', 'google',
                                 '--add-ignore', ','.join(AMENT_IGNORES)])
    assert rc == 0, 'Found code style errors / warnings'
