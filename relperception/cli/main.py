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
import signal
import sys
from typing import List, Optional

import relperception
import relperception.cli as cli_package
from relperception.cli.common import (check_output_file, check_output_folder,
                                      warn_of_empty_config_files)
from relperception.interruption import raise_on_sigterm, sigterm_received, Terminated

_NOT_VERBS = {'main', 'common', 'seg_adjust'}   # seg_adjust: the `train seg-adjust` task

#: Exit codes: success, a bad input or setting (one line names it), an internal error (a bug:
#: the message asks for ``--debug``), interrupted by SIGINT (Ctrl-C) or SIGTERM.
EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_USAGE = 2   # argparse's own code for a malformed command line
EXIT_INTERNAL_ERROR = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

_LEARNED = ('the learned models: pip install torch (from the index that fits the machine, e.g. '
            'https://download.pytorch.org/whl/cpu) and -r requirements/learned.txt')
#: Packages a verb may need that a plain ``pip install -e .`` leaves out, and how to get them.
OPTIONAL_PACKAGES = {
    'torch': _LEARNED, 'safetensors': _LEARNED, 'onnx': _LEARNED, 'onnxruntime': _LEARNED,
    'onnxconverter_common': 'pip install onnxconverter-common (FP16/INT8 exports)',
    'kornia': 'pip install kornia (the LoFTR parity check)',
    'ray': 'pip install "ray[default]" (compare --ray)',
    'tensorrt': "NVIDIA's TensorRT wheels for the machine's CUDA (the TensorRT backend)",
}

_EPILOG = (f'exit codes: {EXIT_OK} done; {EXIT_BAD_INPUT} bad input or setting (one line names '
           f'it); {EXIT_USAGE} malformed command line; {EXIT_INTERNAL_ERROR} internal error '
           f'(run again with --debug for the traceback and report it); {EXIT_INTERRUPTED} '
           f'interrupted (Ctrl-C); {EXIT_TERMINATED} terminated (SIGTERM)')


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
                    'visual odometry and rosbag evaluation for ROS 2.',
        epilog=_EPILOG)
    parser.add_argument('--version', action='version', version=relperception.__version__)
    parser.add_argument('-v', '--verbose', action='store_true', help='debug logging')
    parser.add_argument('--debug', action='store_true',
                        help='show the traceback of an error (for bug reports)')
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
    args.argv = argv   # for the reports' "how this was produced"
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format='%(levelname)s %(name)s: %(message)s')
    if not args.verb:
        parser.print_help()
        return 2
    log = logging.getLogger('relperception')
    previous = raise_on_sigterm()
    try:
        module = _load(args.verb)
        if getattr(module, 'WRITES_FOLDER', False):
            check_output_folder(args.output)
        elif getattr(module, 'WRITES_FILE', False):
            check_output_file(args.output)
        warn_of_empty_config_files(args)
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        log.error('interrupted')
        return EXIT_INTERRUPTED
    except Terminated:
        log.error('terminated (SIGTERM)')
        return EXIT_TERMINATED
    except Exception as exc:  # noqa: BLE001 (sorted below)
        if sigterm_received():   # e.g. SIGTERM inside an import surfaces as an ImportError
            log.error('terminated (SIGTERM)')
            return EXIT_TERMINATED
        if isinstance(exc, (ValueError, OSError, RuntimeError)):
            log.error('%s', exc, exc_info=args.debug)
            return EXIT_BAD_INPUT
        missing = exc.name.partition('.')[0] if isinstance(exc, ModuleNotFoundError) \
            and exc.name else None
        if missing in OPTIONAL_PACKAGES:
            log.error('this needs %s, which is not installed: %s (README, "Installing")',
                      missing, OPTIONAL_PACKAGES[missing], exc_info=args.debug)
            return EXIT_BAD_INPUT
        log.error('internal error: %s: %s (run again with --debug for the traceback, and '
                  'please report it)', type(exc).__name__, exc, exc_info=args.debug)
        return EXIT_INTERNAL_ERROR
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == '__main__':
    sys.exit(main())
