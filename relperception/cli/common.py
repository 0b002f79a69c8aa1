# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Option handling shared by several verbs (not a verb itself: ``main`` skips this module)."""

from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path
import shlex
from typing import Any, Dict, Optional


def loftr_weight_overrides(weights: Optional[str], threshold: Optional[float]
                           ) -> Dict[str, Any]:
    """Return the ``loftr.weights`` and ``loftr.threshold`` overrides of the two options.

    Args:
        weights: path of a weights file, or None to keep the configured one.
        threshold: coarse confidence threshold in [0, 1], or None to keep the configured one.

    Raises:
        FileNotFoundError: ``weights`` is not a file.
        ValueError: ``threshold`` outside [0, 1].
    """
    overrides: Dict[str, Any] = {}
    if weights is not None:
        if not Path(weights).is_file():
            raise FileNotFoundError(f'weights file not found: {weights}')
        overrides['loftr.weights'] = str(weights)
    if threshold is not None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f'--threshold must be in [0, 1], got {threshold}')
        overrides['loftr.threshold'] = float(threshold)
    return overrides


#: What ``--gt-time-offset`` does (eval, replay and compare share it).
GT_TIME_OFFSET_HELP = ('seconds added to the ground-truth stamps before they are associated '
                       'with the images (ground truth stamped 0.1 s late: -0.1); summary.json '
                       'reports the offset estimated from the motion '
                       '(gt_time_offset_estimate_s)')


def add_gt_time_offset_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--gt-time-offset SECONDS`` (``eval`` and ``replay``; checked by the library)."""
    parser.add_argument('--gt-time-offset', type=float, default=0.0, metavar='SECONDS',
                        help=GT_TIME_OFFSET_HELP)


def command_line(args: argparse.Namespace) -> str:
    """Return the command line that produced ``args`` (recorded by ``main``), for reports."""
    argv = getattr(args, 'argv', None)
    return 'relperception ' + shlex.join(argv) if argv is not None else '(not recorded)'


def int_at_least(minimum: int):
    """Return an argparse ``type`` that parses an integer ``>= minimum``.

    A count such as ``--batch-size 0`` is refused where it is parsed, with the option's name,
    instead of failing later inside training (a division by zero, an empty list).
    """
    return _bounded(_integer, lambda value: value >= minimum, f'>= {minimum}',
                    f'integer >= {minimum}')


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected an integer, got {text!r}') from None


def _bounded(convert, accept, bounds: str, name: str):
    """Return an argparse ``type``: ``convert(text)``, refused unless ``accept`` takes it."""
    def parse(text: str):
        value = convert(text)
        if not accept(value):
            raise argparse.ArgumentTypeError(f'must be {bounds}, got {text}')
        return value

    parse.__name__ = name
    return parse


def positive_float(text: str) -> float:
    """Parse a finite number ``> 0`` (an argparse ``type``)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f'must be > 0, got {text}')
    return value


def float_in_range(low: float, high: float):
    """Return an argparse ``type`` parsing a finite number in [``low``, ``high``]."""
    return _bounded(finite_float, lambda value: low <= value <= high,
                    f'in [{low:g}, {high:g}]', f'number in [{low:g}, {high:g}]')


def nonnegative_float(text: str) -> float:
    """Parse a finite number ``>= 0`` (an argparse ``type``)."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f'must be >= 0, got {text}')
    return value


def finite_float(text: str) -> float:
    """Parse a finite number (an argparse ``type``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected a number, got {text!r}') from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f'must be a finite number, got {text}')
    return value


#: Smallest image side (pixels) the image commands (infer, match) accept: below it a model or
#: matcher has no image to work on (LoFTR's coarse grid has 8 px cells) and its output would
#: mean nothing.
MIN_IMAGE_SIDE_PX = 16


def check_image_size(image, path) -> None:
    """Raise ValueError, naming ``path``, for an image with a side below MIN_IMAGE_SIDE_PX."""
    height, width = image.shape[:2]
    if min(height, width) < MIN_IMAGE_SIDE_PX:
        raise ValueError(f'{path}: the image is {width}x{height}; give at least '
                         f'{MIN_IMAGE_SIDE_PX}x{MIN_IMAGE_SIDE_PX} pixels')


def _check_not_empty(path) -> None:
    """Raise ValueError for an empty ``-o`` (``Path('')`` is the current folder)."""
    if path is None or not str(path):
        raise ValueError('-o is empty (an unset shell variable?); give the output path, '
                         'e.g. -o . for the current folder')


def check_output_folder(path) -> None:
    """Raise ValueError when the output folder ``path`` is empty or cannot be made where named.

    Checked by ``cli.main`` before a command that writes a folder (``WRITES_FOLDER``) starts,
    so that a long run does not fail only when it writes: ``path`` must not exist as something
    else than a folder, and the folders on its way must be writable (see
    :func:`check_output_file`).
    """
    _check_not_empty(path)
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f'-o {path} exists and is not a folder; give a folder (it is created '
                         'if missing)')
    check_output_file(path)


def check_output_file(path) -> None:
    """Raise ValueError when ``path`` (a file or a folder) cannot be written where named.

    Checked by ``cli.main`` before a command that writes a file (``WRITES_FILE``: an export, a
    quantisation) or a folder starts its work, so that it does not fail only at the end with a
    bare OS error. Missing folders on the way are not created here (the command creates them
    as it writes): the nearest existing one must be a folder that can be written into; the
    message names the problem and the fix.

    Args:
        path: the file or folder a command is to write (its ``-o``).
    """
    import tempfile

    _check_not_empty(path)
    path = Path(path)
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f'-o {path}: {existing} is a file, not a folder; give a path in a '
                         f'folder (e.g. -o {path.name})')
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=f'.{path.name}.',
                                         suffix='.probe'):
            pass
    except OSError as exc:
        raise ValueError(f'-o {path}: cannot write into the folder {existing} '
                         f'({exc.strerror or exc}); give a path in a folder you can write to '
                         f'(e.g. -o {path.name} in the current folder)') from exc


def write_report_of_interrupted_run(output, command: str, config) -> None:
    """Write ``report.html`` from the ``summary.json`` an interrupted eval or replay left.

    Those runs write what they scored before they re-raise the interruption; the report a user
    opens first must say the same (nothing is written when no summary was left).

    Args:
        output: the run's output folder.
        command: the command line, for the report.
        config: the flat configuration the run used.
    """
    import json

    from relperception.config import defaults
    from relperception.evaluation.html_report import eval_report, write_report

    summary_path = Path(output) / 'summary.json'
    if not summary_path.is_file():
        return
    try:
        summary = json.loads(summary_path.read_text(encoding='utf-8'))
        write_report(output, eval_report(summary, output, command, config, defaults()))
    except (OSError, ValueError, KeyError, TypeError) as error:   # never hide the interruption
        logging.getLogger(__name__).warning('no report.html for the interrupted run: %s', error)


#: The options of the verbs that name a configuration file (``--config``, ``--params``); a
#: ``--config`` that names a preset is no file and is left alone.
CONFIG_FILE_OPTIONS = ('config', 'params')


def warn_of_empty_config_files(args: argparse.Namespace) -> None:
    """Log one warning per configuration file of ``args`` that sets nothing.

    A file that is empty, holds only comments or an empty mapping runs with the defaults, as
    if no file had been given, which is seldom what was meant (a file not saved, the wrong
    one). A file that cannot be read is left to the verb, which says why.
    """
    from relperception.config import read_config_file

    for option in CONFIG_FILE_OPTIONS:
        value = getattr(args, option, None)
        if not isinstance(value, str) or not Path(value).is_file():
            continue
        try:
            tree = read_config_file(value)
        except (OSError, ValueError):
            continue
        if not tree:
            logging.getLogger('relperception').warning(
                '%s sets nothing (it is empty, or holds only comments): running with the '
                'defaults', value)
