# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""package.xml: ament_xmllint where installed; a format-3 structure check everywhere."""

import xml.etree.ElementTree as ElementTree

from lint_targets import REPO_ROOT, run_in_repo_root
import pytest


@pytest.mark.linter
@pytest.mark.xmllint
def test_xmllint():
    main = pytest.importorskip(
        'ament_xmllint.main', reason='ament_xmllint is not installable from PyPI').main
    rc = run_in_repo_root(main, ['package.xml'])
    assert rc == 0, 'Found errors'


@pytest.mark.linter
def test_package_xml_is_format_3_ament_python():
    root = ElementTree.parse(REPO_ROOT / 'package.xml').getroot()
    assert root.tag == 'package' and root.get('format') == '3'
    assert root.findtext('name') == 'relperception'
    assert root.findtext('export/build_type') == 'ament_python'
    exec_deps = {e.text for e in root.findall('exec_depend')}
    assert {'rclpy', 'sensor_msgs', 'nav_msgs', 'geometry_msgs', 'std_msgs',
            'diagnostic_msgs', 'python3-numpy', 'python3-opencv'} <= exec_deps
    test_deps = {e.text for e in root.findall('test_depend')}
    assert {'launch_testing', 'ament_flake8', 'ament_pep257', 'ament_copyright',
            'python3-pytest'} <= test_deps
