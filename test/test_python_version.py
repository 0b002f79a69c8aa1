# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The code runs on Python 3.10 (JetPack 6's Python), the lowest that setup.py accepts.

Development and CI use 3.11, so a 3.11-only name (``typing.Self`` was one) would pass every
other test and break ``import relperception`` on a Jetson. ``vermin`` reads the sources and
names each construct that needs a newer Python than ``python_requires``.
"""

import re
import subprocess
import sys

from lint_targets import REPO_ROOT
import pytest

pytest.importorskip('vermin', reason='vermin is not installed (requirements/dev.txt)')

#: Folders whose Python runs on the robot or is run by users there.
CHECKED = ('relperception', 'bench', 'scripts', 'launch', 'test')


def _python_requires() -> str:
    text = (REPO_ROOT / 'setup.py').read_text(encoding='utf-8')
    match = re.search(r"python_requires='>=(\d+\.\d+)'", text)
    assert match, 'setup.py states no python_requires'
    return match.group(1)


def test_sources_need_no_newer_python_than_setup_py_accepts():
    lowest = _python_requires()
    assert lowest == '3.10'   # a Jetson's; raise it only together with the Jetson image
    done = subprocess.run(
        [sys.executable, '-c', 'import sys; from vermin.main import main; sys.exit(main())',
         f'-t={lowest}-', '--no-tips', '--eval-annotations', '--violations', '-q',
         *[str(REPO_ROOT / folder) for folder in CHECKED]],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f'needs a Python newer than {lowest}:\n{done.stdout}' \
        f'{done.stderr}'
