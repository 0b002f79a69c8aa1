# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Entry point of ``relperception <verb> ...``.

Each verb lives in its own module of ``relperception.cli`` and provides::

    HELP: str                                   # one line for ``relperception --help``
    def add_arguments(parser: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace) -> int    # exit code

Verb modules are discovered, and imported only when their verb runs, so start-up stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from typing import List, Optional

import relperception
import relperception.cli as cli_package

_NOT_VERBS = {'main', 'common'}


def available_verbs() -> List[str]:
    """Return the verb names, i.e. the modules of ``relperception.cli`` (``_`` for ``-``)."""
    names = [m.name for m in pkgutil.iter_modules(cli_package.__path__)]
    return sorted(n.replace('_', '-') for n in names if n not in _NOT_VERBS)


def _load(verb: str):
    return importlib.import_module(f'relperception.cli.{verb.replace("-", "_")}')


def build_parser(verb: Optional[str] = None) -> argparse.ArgumentParser:
    """Return the argument parser; only ``verb``'s module is imported (all when None)."""
    parser = argparse.ArgumentParser(
        prog='relperception',
        description='Compare -> score -> aggregate: NCC vs learned matching, conv vs ViT, '
                    'visual odometry and rosbag evaluation for ROS 2.')
    parser.add_argument('--version', action='version', version=relperception.__version__)
    parser.add_argument('-v', '--verbose', action='store_true', help='debug logging')
    sub = parser.add_subparsers(dest='verb', metavar='VERB')
    for name in available_verbs():
        if verb is not None and name != verb:
            sub.add_parser(name, add_help=False)
            continue
        module = _load(name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``relperception`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbs = available_verbs()
    chosen = next((a for a in argv if not a.startswith('-')), None)
    parser = build_parser(chosen if chosen in verbs else None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format='%(levelname)s %(name)s: %(message)s')
    if not args.verb:
        parser.print_help()
        return 2
    try:
        return int(_load(args.verb).run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, RuntimeError) as exc:
        logging.getLogger('relperception').error('%s', exc)
        return 1


if __name__ == '__main__':
    sys.exit(main())
