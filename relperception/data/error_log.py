# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Collect the problems met while reading or scoring a recording: log, count, keep the first."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

#: Error messages kept (all are counted).
MAX_ERRORS_KEPT = 200


class ErrorLog:
    """Collects error messages: logs each one, keeps the first few hundred, counts all."""

    def __init__(self):
        """Start with no error."""
        self.kept: list[str] = []
        self.count = 0

    def add(self, message: str, level: int = logging.WARNING) -> None:
        """Log ``message`` at ``level``, count it and keep it if fewer than the limit are kept."""
        self.count += 1
        logger.log(level, '%s', message)
        if len(self.kept) < MAX_ERRORS_KEPT:
            self.kept.append(message)

    def add_new(self, messages, already: set) -> None:
        """Add, as errors, the ``messages`` not in ``already`` (which receives them)."""
        for message in messages:
            if message not in already:
                already.add(message)
                self.add(message, logging.ERROR)
