# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Helpers of the bad-input tests (one module per surface: configs, models, bags, outputs).

Each test crafts the input of one defect found by the bad-input campaign and runs the real
command or function on it; a user mistake must end in one clear line and an exit code, never
a traceback or a hang.
"""

import logging

from relperception.cli.main import main as cli_main
from relperception.data.synthetic_bag import write_synthetic_bag


def run_cli(argv, caplog):
    """Run the CLI in this process; return (exit code, the error lines it logged)."""
    caplog.clear()
    with caplog.at_level(logging.INFO):
        code = cli_main(argv)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    return code, errors


def one_clear_line(errors, *words):
    """Assert that exactly one error line was logged, without traceback, holding ``words``."""
    assert len(errors) == 1, [e.getMessage() for e in errors]
    record = errors[0]
    assert not record.exc_info, 'a traceback was logged'
    text = record.getMessage()
    assert '\n' not in text and 'Traceback' not in text
    for word in words:
        assert word in text, text


def write_bag(tmp_path_factory, frames=12):
    """Write a 320x240 synthetic RGB-D bag of ``frames`` frames; return its path."""
    bag = tmp_path_factory.mktemp(f'bad_input_{frames}') / 'bag'
    write_synthetic_bag(bag, frames=frames, seed=3, width=320, height=240)
    return bag
