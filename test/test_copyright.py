# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Copyright headers: ament_copyright where installed, and the project's own header check."""

from lint_targets import lint_paths, python_files, REPO_ROOT, run_in_repo_root
import pytest

HEADER = ('# Copyright 2026 The relperception Authors',
          '# Licensed under the Apache License, Version 2.0 (see LICENSE).')


@pytest.mark.copyright
@pytest.mark.linter
def test_copyright():
    main = pytest.importorskip(
        'ament_copyright.main', reason='ament_copyright is not installable from PyPI').main
    rc = run_in_repo_root(main, lint_paths())
    assert rc == 0, 'Found errors'


@pytest.mark.linter
def test_every_python_file_has_the_license_header():
    missing = []
    for path in python_files():
        lines = path.read_text(encoding='utf-8').splitlines()
        start = 1 if lines and lines[0].startswith('#!') else 0
        if tuple(lines[start:start + 2]) != HEADER:
            missing.append(str(path.relative_to(REPO_ROOT)))
    assert not missing, 'files without the license header:\n' + '\n'.join(missing)
