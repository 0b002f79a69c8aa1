# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""A study: every (bag, configuration) cell evaluated the way ``relperception eval`` does.

:func:`run_study` runs :func:`~relperception.pipeline.offline_eval.evaluate_bag` (the code path
of ``eval``, no second implementation of scoring) once per cell, in a pool of worker processes
(``spawn``; each cell's numeric libraries pinned to its share of the cores), and returns one
row per cell. Each cell writes what ``eval`` writes into ``<output>/cells/<bag>__<config>/``
plus ``cell.json`` (its row), whole or not at all.

**Resumable.** A cell is identified by its key: the configuration's hash (every parameter), the
bag's fingerprint (names, sizes and modification times of its files), the mode, the package
version and, where given, dense scoring and the ground-truth time offset. A rerun reuses a
finished cell whose key is unchanged and computes the rest; a cell that failed is recorded
with its error and computed again on the next run. A failing cell (or a worker that dies)
never stops the others.

**Executors.** The local pool above, or a Ray cluster (``ray_address``, see
:mod:`relperception.pipeline.study_ray`): each pending cell is then a Ray task that calls
:func:`run_cell_pinned`, the same :func:`run_cell`; planning, reuse of finished cells and the
rows are the same for both.

Aggregation and the report are :mod:`relperception.evaluation.study_report`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import multiprocessing
import os
from pathlib import Path
import re
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import relperception
from relperception.atomic_files import write_text_atomic
from relperception.config import load_config
from relperception.interruption import (exit_on_sigterm, INTERRUPTIONS, raise_on_sigterm,
                                        sigterm_received, Terminated)

logger = logging.getLogger(__name__)

#: Summary keys of ``eval`` copied into a study row (besides the identification columns).
ROW_METRICS = ('ate_rmse_m', 'ate_median_m', 'rpe_trans_rmse_m', 'rpe_rot_rmse_deg',
               'drift_percent', 'scale', 'path_length_m', 'num_poses_matched', 'alignment',
               'mode', 'matcher', 'frames_processed', 'frames_tracked', 'frames_lost',
               'reinitializations', 'keyframes', 'timing_median_ms', 'timing_p95_ms',
               'tracking_median_ms', 'complete', 'num_errors', 'gt_time_offset_estimate_s')
#: Dense-model figures of a cell run with ``dense`` (row key -> path in ``summary['dense']``).
DENSE_ROW_METRICS = {'dense_miou': ('segmentation', 'miou'),
                     'dense_pixel_accuracy': ('segmentation', 'pixel_accuracy'),
                     'dense_abs_rel': ('depth', 'abs_rel'),
                     'dense_delta1': ('depth', 'delta1'),
                     'dense_ms_median': ('timing_median_ms',)}
#: Name of a cell's row file inside its folder.
CELL_FILE = 'cell.json'
#: Name of the configuration that is the package defaults.
DEFAULT_CONFIG = 'default'
#: Keys of a study file (``compare --study``).
STUDY_KEYS = ('bags', 'configs', 'mode', 'dense', 'gt_time_offset')
#: ``error`` of a cell whose worker process died (both executors).
WORKER_DIED = 'the worker process died'
#: Lock file in a study folder while a study runs there (:func:`study_folder_lock`).
LOCK_FILE = '.compare.lock'


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """A candidate configuration: its name and its YAML file (None: the package defaults)."""

    name: str
    path: Path | None = None


@dataclasses.dataclass(frozen=True)
class Cell:
    """One (bag, configuration) pair of a study.

    Attributes:
        bag: the bag (rosbag2 directory or ``.mcap`` / ``.db3`` file).
        config: the configuration.
        folder: the cell's output folder.
        key: hash of everything the cell's result depends on (see the module docstring).
        config_hash: hash of the configuration's parameters.
        bag_fingerprint: hash of the bag's file names, sizes and modification times.
        dense: also score the dense model against the bag's depth / label topics.
        gt_time_offset_s: seconds added to the bag's ground-truth stamps (``eval
            --gt-time-offset``).
    """

    bag: Path
    config: StudyConfig
    folder: Path
    key: str
    config_hash: str
    bag_fingerprint: str
    dense: bool = False
    gt_time_offset_s: float = 0.0


def parse_config_spec(spec: str) -> StudyConfig:
    """Return the configuration of a ``--configs`` spec.

    ``NAME=PATH``, ``PATH`` (named by its stem), ``default``, or ``NAME=default`` (the package
    defaults under that name, as a study file's ``NAME: default``).

    Raises:
        ValueError: an empty name or file, or a file that does not exist.
    """
    spec = str(spec).strip()
    if spec == DEFAULT_CONFIG:
        return StudyConfig(DEFAULT_CONFIG)
    name, _, path = spec.partition('=') if '=' in spec else ('', '', spec)
    if name and path == DEFAULT_CONFIG:
        return StudyConfig(name)
    if not path:
        raise ValueError(f'configuration {spec!r} has no file: give NAME=YAML or '
                         f'NAME={DEFAULT_CONFIG}')
    path = Path(path)
    name = name or path.stem
    if not name:
        raise ValueError(f'configuration {spec!r} has no name')
    if not path.is_file():
        raise ValueError(f'configuration file {path} of {name!r} does not exist')
    return StudyConfig(name, path)


def load_study(path) -> tuple[list[Path], list[StudyConfig], dict]:
    """Read a study file: ``bags:`` (list), ``configs:`` ({name: YAML path, or ``default``}).

    Relative paths are taken from the study file's folder. Optional ``mode:`` (auto, rgbd,
    mono), ``dense:`` (true: score the dense model too) and ``gt_time_offset:`` (seconds added
    to the ground-truth stamps: a number for every bag, or a mapping ``{BAG: seconds}``, BAG
    as in ``bags:``) are returned in the options dict; ``gt_time_offset`` as the float or as
    ``{bag path: float}`` (paths taken from the study file's folder), for
    :func:`parse_gt_time_offsets`.

    Raises:
        ValueError: a missing file, no bags or configs, or entries of the wrong type.
    """
    from relperception.config import read_config_file, SPECS

    path = Path(path)
    if not path.is_file():
        raise ValueError(f'study file {path} does not exist')
    try:
        tree = read_config_file(path)
    except ValueError as error:
        raise ValueError(f'{error} (a study is a mapping with bags: and configs:)') from None
    unknown = sorted(map(str, set(tree) - set(STUDY_KEYS)))
    if unknown:
        raise ValueError(f'{path}: unknown key(s) {", ".join(unknown)}; a study file has '
                         f'{", ".join(STUDY_KEYS)}')
    modes = SPECS['odometry.mode'].choices
    if 'mode' in tree and tree['mode'] not in modes:
        raise ValueError(f'{path}: mode: must be one of {", ".join(modes)}, got '
                         f'{tree["mode"]!r}')
    bags, configs = tree.get('bags'), tree.get('configs')
    if not isinstance(bags, list) or not bags:
        raise ValueError(f'{path}: bags: must be a non-empty list of bag paths')
    if not isinstance(configs, dict) or not configs:
        raise ValueError(f'{path}: configs: must map names to YAML files (or "default")')
    base = path.parent
    bag_paths = [Path(b) if Path(b).is_absolute() else base / b for b in map(str, bags)]
    study_configs = []
    for name, file in configs.items():
        if str(file) == DEFAULT_CONFIG:
            study_configs.append(StudyConfig(str(name)))
            continue
        file = Path(str(file))
        file = file if file.is_absolute() else base / file
        study_configs.append(parse_config_spec(f'{name}={file}'))
    options = {k: tree[k] for k in ('mode', 'dense') if k in tree}
    if 'dense' in options and not isinstance(options['dense'], bool):
        raise ValueError(f'{path}: dense: must be true or false, got {options["dense"]!r}')
    if 'gt_time_offset' in tree:
        options['gt_time_offset'] = _study_gt_time_offset(path, tree['gt_time_offset'])
    return bag_paths, study_configs, options


def _study_gt_time_offset(path: Path, value) -> float | dict[Path, float]:
    """Check a study file's ``gt_time_offset:``; return seconds or ``{bag path: seconds}``."""
    from relperception.data.bag_frames import gt_time_offset_ns

    def seconds(entry, where: str) -> float:
        if isinstance(entry, bool) or not isinstance(entry, (int, float)):
            raise ValueError(f'{path}: {where} must be a number of seconds, got {entry!r}')
        try:
            gt_time_offset_ns(entry)
        except ValueError as error:
            raise ValueError(f'{path}: {where}: {error}') from None
        return float(entry)

    if not isinstance(value, dict):
        return seconds(value, 'gt_time_offset')
    if not value:
        raise ValueError(f'{path}: gt_time_offset: give seconds for every bag, or a mapping '
                         'BAG: seconds for some of them')
    offsets = {}
    for bag, entry in value.items():
        bag_path = Path(str(bag))
        offsets[bag_path if bag_path.is_absolute() else path.parent / bag_path] = seconds(
            entry, f'gt_time_offset: {bag}')
    return offsets


def parse_gt_time_offsets(specs: Sequence[str], bags: Sequence,
                          study: float | Mapping[Path, float] | None = None) -> list[float]:
    """Return the ground-truth time offset (seconds) of each of ``bags`` from ``specs``.

    Each spec is ``SECONDS`` (every bag not named otherwise) or ``BAG=SECONDS`` (that bag,
    given as in ``bags``: the same path, or the same file or folder by another path).

    Args:
        specs: the ``compare --gt-time-offset`` values.
        bags: the study's bags.
        study: the study file's ``gt_time_offset`` as :func:`load_study` returns it (seconds
            for every bag, or ``{bag path: seconds}``, checked there); the command line's
            offset for the same bag (or for every bag) replaces it. None: none.

    Returns:
        One offset per bag, in the order of ``bags`` (0.0 where none is given); an offset
        for one bag wins over the offset for every bag.

    Raises:
        ValueError: a value that is not a finite number, a BAG that is not among ``bags``, or
            one bag (or the default) given twice on the command line.
    """
    from relperception.data.bag_frames import gt_time_offset_ns

    resolved = [Path(bag).resolve() for bag in bags]

    def index_of(bag, where: str) -> int:
        """Return the index in ``bags`` of ``bag`` (any path to it)."""
        path = Path(bag).resolve()
        if path not in resolved:
            raise ValueError(f'{where}: {bag} is not one of the bags of the study '
                             f'({", ".join(map(str, bags))})')
        return resolved.index(path)

    default, per_bag = None, {}
    study_default, study_per_bag = None, {}
    # the study file's seconds were checked by load_study
    if isinstance(study, Mapping):
        for bag, seconds in study.items():
            study_per_bag[index_of(bag, 'study file gt_time_offset')] = float(seconds)
    elif study is not None:
        study_default = float(study)
    for spec in specs:
        name, _, value = str(spec).rpartition('=')
        try:
            gt_time_offset_ns(value)
            seconds = float(value)
        except ValueError:
            raise ValueError(f'--gt-time-offset {spec!r}: give SECONDS or BAG=SECONDS with a '
                             'finite number of seconds') from None
        if not name:
            if default is not None:
                raise ValueError(f'--gt-time-offset: two offsets for every bag ({default:g} '
                                 f'and {seconds:g}); name the bag of each (BAG=SECONDS)')
            default = seconds
            continue
        index = index_of(name, f'--gt-time-offset {spec!r}')
        if index in per_bag:
            raise ValueError(f'--gt-time-offset: bag {name} is given two offsets')
        per_bag[index] = seconds
    per_bag = {**study_per_bag, **per_bag}
    default = study_default if default is None else default
    return [per_bag.get(index, default or 0.0) for index in range(len(bags))]


def bag_fingerprint(bag) -> str:
    """Return a hash of the bag's file names, sizes and modification times (not contents)."""
    bag = Path(bag)
    files = sorted(p for p in bag.rglob('*') if p.is_file()) if bag.is_dir() else [bag]
    digest = hashlib.sha256()
    for file in files:
        stat = file.stat()
        digest.update(f'{file.relative_to(bag.parent)}:{stat.st_size}:{stat.st_mtime_ns};'
                      .encode())
    return digest.hexdigest()[:16]


def config_hash(config: Mapping[str, Any]) -> str:
    """Return a hash of every parameter of a flat configuration and of the files it names.

    A string value that names an existing file (weights, an ONNX model, an engine) adds that
    file's size and modification time, so a changed file is not taken for the same
    configuration (a rerun reused the cells of replaced weights).
    """
    values = {k: config[k] for k in sorted(config)}
    files = {}
    for key, value in values.items():
        if isinstance(value, str) and value:
            path = Path(value)
            if path.is_file():
                stat = path.stat()
                files[key] = f'{stat.st_size}:{stat.st_mtime_ns}'
    text = json.dumps({'values': values, 'files': files} if files else values,
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _slug(text: str) -> str:
    return re.sub(r'[^A-Za-z0-9_.-]+', '_', text).strip('_') or 'x'


def _bag_names(bags: Sequence[Path]) -> list[str]:
    """Return the cell-folder names of ``bags``: unique, see :func:`plan_cells`."""
    resolved = [bag.resolve() for bag in bags]
    for index, path in enumerate(resolved):
        if path in resolved[:index]:
            raise ValueError(f'bag {bags[index]} is given twice (as '
                             f'{bags[resolved.index(path)]} too)')
    # a storage file and the bag folder that holds it are one recording
    for index, path in enumerate(resolved):
        if path.is_file() and path.parent in resolved:
            raise ValueError(f'bag {bags[index]} is given twice (as its folder '
                             f'{bags[resolved.index(path.parent)]} too)')
    # named as given (a symlink by its own name), absolute for the parent folders
    absolute = [Path(os.path.abspath(bag)) for bag in bags]
    parts = [path.with_suffix('').parts if path.is_file() else path.parts for path in absolute]
    names = [_slug(p[-1]) for p in parts]
    for depth in range(2, max(map(len, parts)) + 1):
        clashing = {name for name in names if names.count(name) > 1}
        if not clashing:
            break
        names = [_slug('_'.join(p[-depth:])) if name in clashing else name
                 for name, p in zip(names, parts)]
    if len(set(names)) != len(names):   # 'a b' and 'a_b': one folder name
        raise ValueError(f'bag names must stay unique as folder names, got {names}')
    return names


def plan_cells(bags: Sequence, configs: Sequence[StudyConfig], output,
               mode: str | None = None, dense: bool = False,
               gt_time_offsets: Sequence[float] | None = None) -> list[Cell]:
    """Return every (bag, configuration) cell of a study, bags outer, configurations inner.

    ``dense``: every cell also scores the dense model (``eval --dense``); part of the key.
    ``gt_time_offsets``: seconds added to each bag's ground-truth stamps (one per bag, see
    :func:`parse_gt_time_offsets`; None: 0); part of the key.

    Bags are named by their folder (or file stem); bags of one name in different folders
    (``robot_a/run1``, ``robot_b/run1``) by as many of their parent folders as tell them apart
    (``robot_a_run1``).

    Raises:
        ValueError: no bags or configurations, a bag that does not exist or is given twice,
            two configurations with one name (or one folder name).
    """
    if not bags or not configs:
        raise ValueError('a study needs at least one bag and one configuration')
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ValueError(f'configuration names must be unique, got {names}')
    folders = [_slug(name) for name in names]
    if len(set(folders)) != len(folders):
        raise ValueError(f'configuration names must stay unique as folder names, got {names} '
                         f'-> {folders}')
    bags = [Path(b) for b in bags]
    for bag in bags:
        if not bag.exists():
            raise ValueError(f'bag {bag} does not exist')
    bag_names = _bag_names(bags)
    offsets = ([0.0] * len(bags) if gt_time_offsets is None
               else [float(value) for value in gt_time_offsets])
    if len(offsets) != len(bags):
        raise ValueError(f'{len(offsets)} ground-truth time offsets for {len(bags)} bags')
    hashes = {c.name: config_hash(load_config(c.path)) for c in configs}
    cells = []
    for bag, bag_name, offset in zip(bags, bag_names, offsets):
        fingerprint = bag_fingerprint(bag)
        for config in configs:
            identity = [hashes[config.name], fingerprint, mode, relperception.__version__]
            if dense:   # keys of studies without dense scoring stay as they were
                identity.append('dense')
            if offset:   # ... and so do those without a ground-truth time offset
                identity.append(['gt_time_offset_s', offset])
            key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]
            cells.append(Cell(bag, config, Path(output) / 'cells'
                              / f'{bag_name}__{_slug(config.name)}', key,
                              hashes[config.name], fingerprint, bool(dense), offset))
    return cells


@contextlib.contextmanager
def study_folder_lock(output) -> Iterator[Path]:
    """Hold the study folder ``output`` (created if missing) for this process while the block runs.

    Two studies in one folder computed the same cells into the same cell folders at once and
    the one that finished last replaced the other's tables. The lock is an advisory ``flock``
    on ``output/.compare.lock`` (the holder's pid inside), released when the block ends or
    the process dies.

    Yields:
        the lock file.

    Raises:
        ValueError: another process holds the folder.
    """
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    path = output / LOCK_FILE
    with open(path, 'a+', encoding='utf-8') as stream:
        try:
            fcntl.flock(stream, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            stream.seek(0)
            holder = stream.read().strip() or 'unknown'
            raise ValueError(f'study folder {output} is in use by another compare (pid '
                             f'{holder}); wait for it to end or give another -o') from None
        try:
            stream.seek(0)
            stream.truncate()
            stream.write(str(os.getpid()))
            stream.flush()
            yield path
        finally:
            fcntl.flock(stream, fcntl.LOCK_UN)


def pin_threads(threads: int) -> None:
    """Make the numeric libraries of this process use ``threads`` threads (>= 1).

    OpenMP / OpenBLAS / MKL through their environment variables (libraries loaded later),
    OpenCV and torch (when installed) directly.

    Raises:
        ValueError: ``threads`` is not an integer >= 1.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f'threads must be an integer >= 1, got {threads!r}')
    for variable in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS'):
        os.environ[variable] = str(threads)
    import cv2
    cv2.setNumThreads(threads)
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)


def run_cell(cell: Cell, mode: str | None, plots: bool) -> dict:
    """Evaluate one cell as ``eval`` does; return its row (also written to ``cell.json``).

    Never raises for a failing evaluation: the row then has ``status: 'failed'`` and the error.
    """
    started = time.perf_counter()
    row = _identity(cell)
    try:
        from relperception.evaluation.report import to_jsonable
        from relperception.pipeline.offline_eval import evaluate_bag

        summary = evaluate_bag(cell.bag, cell.folder, load_config(cell.config.path), mode=mode,
                               progress=False, plots=plots, dense=cell.dense,
                               gt_time_offset_s=cell.gt_time_offset_s)
        # NaN (drift on a path too short or standing still) becomes None, as in summary.json
        row.update(to_jsonable({k: summary.get(k) for k in ROW_METRICS}))
        if cell.dense:
            row.update(to_jsonable(dense_row_metrics(summary.get('dense') or {})))
        row['status'] = 'ok' if summary.get('frames_processed') else 'failed'
        row['error'] = '' if row['status'] == 'ok' else 'no frame was processed'
    except (ValueError, OSError, RuntimeError, KeyError) as error:
        logger.warning('cell %s failed: %s', cell.folder.name, error)
        row.update(dict.fromkeys(ROW_METRICS))
        if cell.dense:
            row.update(dict.fromkeys(DENSE_ROW_METRICS))
        row['status'], row['error'] = 'failed', f'{type(error).__name__}: {error}'
    row['elapsed_s'] = time.perf_counter() - started
    cell.folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(cell.folder / CELL_FILE,
                      json.dumps(row, indent=2, default=str, allow_nan=False))
    return row


def dense_row_metrics(dense: Mapping[str, Any]) -> dict:
    """Return the :data:`DENSE_ROW_METRICS` of a summary's ``dense`` part (None if absent)."""
    out = {}
    for key, path in DENSE_ROW_METRICS.items():
        value: Any = dense
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        out[key] = value if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else None
    return out


def run_cell_pinned(cell: Cell, mode: str | None, plots: bool, threads: int) -> dict:
    """Pin this process to ``threads`` threads (:func:`pin_threads`), then :func:`run_cell`.

    The function a Ray task runs (a Ray worker process serves many tasks, so the pinning is
    done per cell rather than once per process as in the local pool).
    """
    pin_threads(threads)
    return run_cell(cell, mode, plots)


def failed_row(cell: Cell, error: str) -> dict:
    """Return the row of a cell that produced none (its worker died): ``status: 'failed'``."""
    return {**_identity(cell), **dict.fromkeys(ROW_METRICS),
            **(dict.fromkeys(DENSE_ROW_METRICS) if cell.dense else {}), 'status': 'failed',
            'error': str(error), 'elapsed_s': None, 'reused': False}


def finished_row(cell: Cell) -> dict | None:
    """Return the row of a cell finished earlier with the same key, else None."""
    try:
        row = json.loads((cell.folder / CELL_FILE).read_text(encoding='utf-8'))
    except (OSError, ValueError):
        return None
    if row.get('key') != cell.key or row.get('status') != 'ok':
        return None
    return row


def run_study(cells: Sequence[Cell], workers: int = 1, mode: str | None = None,
              plots: bool = False,
              on_row: Callable[[dict], None] | None = None,
              ray_address: str | None = None, cpus_per_cell: int = 1) -> list[dict]:
    """Run every cell (reusing finished ones); return the rows in the order of ``cells``.

    Args:
        cells: from :func:`plan_cells`.
        workers: local worker processes (>= 1); each pins its numeric libraries to
            ``max(1, cpu_count // workers)`` threads. Not used with ``ray_address``.
        mode: odometry mode of every cell (None: each configuration's ``odometry.mode``).
        plots: write each cell's PNG plots.
        on_row: called with each row as it is known (progress).
        ray_address: run the pending cells as tasks on this Ray cluster (``'auto'`` or
            ``host:port``, see :func:`relperception.pipeline.study_ray.run_on_ray`) instead
            of the local pool; None: the local pool.
        cpus_per_cell: with ``ray_address``, the CPUs each cell's task reserves and the threads
            it is pinned to (>= 1).

    Returns:
        One dict per cell: identification columns, ``status`` ('ok' or 'failed'), ``error``,
        ``reused`` (finished in an earlier run), :data:`ROW_METRICS` and ``elapsed_s``.

    Raises:
        ValueError: ``workers`` or ``cpus_per_cell`` < 1, an empty ``ray_address``.
        RuntimeError: ``ray_address`` without Ray installed, or no cluster there.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f'workers must be an integer >= 1, got {workers!r}')
    if isinstance(cpus_per_cell, bool) or not isinstance(cpus_per_cell, int) \
            or cpus_per_cell < 1:
        raise ValueError(f'cpus_per_cell must be an integer >= 1, got {cpus_per_cell!r}')
    if ray_address is not None and (not isinstance(ray_address, str)
                                    or not ray_address.strip()):
        raise ValueError(f"ray_address must be 'auto' or host:port, got {ray_address!r}")
    rows: list = [None] * len(cells)
    pending = []
    for index, cell in enumerate(cells):
        row = finished_row(cell)
        if row is None:
            pending.append(index)
            continue
        # identification columns as planned now (a path may be spelled differently)
        rows[index] = {**row, **_identity(cell), 'reused': True}
        if on_row:
            on_row(rows[index])
    threads = max(1, (os.cpu_count() or 1) // workers)

    def record(index: int, row: dict) -> None:
        rows[index] = {**row, **_identity(cells[index])}
        if on_row:
            on_row(rows[index])

    if ray_address is not None:
        if pending:
            from relperception.pipeline.study_ray import run_on_ray

            run_on_ray(cells, pending, ray_address.strip(), cpus_per_cell, mode, plots, record)
        return rows
    broken = _run_pool(cells, pending, workers, threads, mode, plots, record)
    if broken:
        logger.warning('a worker process died: %d cells run again, one at a time', len(broken))
    for index in broken:   # each alone, so a cell that kills its worker fails by itself
        if _run_pool(cells, [index], 1, threads, mode, plots, record):
            record(index, failed_row(cells[index], WORKER_DIED))
    return rows


def _run_pool(cells, indices, workers, threads, mode, plots, record) -> list[int]:
    """Run ``indices`` of ``cells`` in one pool; return those lost with a dead worker."""
    context = multiprocessing.get_context('spawn')
    broken = []
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=context,
                                                  initializer=_start_cell_worker,
                                                  initargs=(threads,))
    # run_cell as this module holds it now (a test puts a stand-in there)
    futures = {pool.submit(_run_pool_cell, run_cell, cells[i], mode, plots): i
               for i in indices}
    try:
        for future in concurrent.futures.as_completed(futures):
            index = futures[future]
            try:
                record(index, {**future.result(), 'reused': False})
            except concurrent.futures.process.BrokenProcessPool:
                broken.append(index)
    except INTERRUPTIONS:
        # Queued cells never start; running ones stop (SIGTERM raises Terminated in the
        # worker: the cell keeps what it computed, and the worker runs no other cell) and idle
        # workers exit. The queue is cancelled here, not left to shutdown(cancel_futures=True):
        # the pool's manager thread cancels only while it can still reach the executor, which
        # is gone once this exception has unwound, and then it handed the whole queue to the
        # worker. Calls already in the pool's call queue cannot be cancelled; the worker ends
        # them at once (see _run_pool_cell). One shutdown only: a second one (a `with`
        # block's) would wait for the workers before they are told to stop.
        for future in futures:
            future.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        for child in multiprocessing.active_children():
            child.terminate()
        raise
    except BaseException:   # a bug: the running cells end, the queued ones never start
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return sorted(broken)


def _run_pool_cell(function: Callable, cell: Cell, mode: str | None, plots: bool) -> dict:
    """Run ``function(cell, mode, plots)`` in a pool worker, unless the study was interrupted.

    While the cell runs, SIGTERM raises :class:`~relperception.interruption.Terminated` (the
    cell keeps what it computed); SIGTERM between cells ends the worker. Both handlers
    (:func:`~relperception.interruption.raise_on_sigterm`,
    :func:`~relperception.interruption.exit_on_sigterm`) first record the signal
    (:func:`~relperception.interruption.sigterm_received`): the pool's worker loop takes any
    exception for the cell's result (also one raised between the cell's end and the next
    call) and goes on with its queue, so once SIGTERM arrived the worker runs no other cell
    (the ones queued to it end at once).

    Raises:
        Terminated: the cell, or an earlier one of this worker, was interrupted.
    """
    import signal

    if sigterm_received():
        raise Terminated()
    previous = raise_on_sigterm()   # nothing to clear: no SIGTERM came (checked above)
    try:
        return function(cell, mode, plots)
    finally:
        if previous is not None:   # exit_on_sigterm's (_start_cell_worker)
            signal.signal(signal.SIGTERM, previous)


def _start_cell_worker(threads: int) -> None:
    """Set up a cell worker: ``threads`` threads, Ctrl-C left to the parent, SIGTERM exits."""
    import signal

    pin_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_on_sigterm()


def _identity(cell: Cell) -> dict:
    """Return the identification columns of a cell's row (with its ground-truth time offset).

    Paths (``bag``, ``config_file``, ``cell_dir``) are relative to the study folder (the one
    that holds ``results.csv``), whatever the working directory of ``compare`` was; symbolic
    links are kept as given, not resolved.
    """
    study = os.path.abspath(cell.folder.parent.parent)   # <study>/cells/<cell>

    def relative(path) -> str:
        return Path(os.path.relpath(os.path.abspath(path), study)).as_posix()

    return {'bag': relative(cell.bag), 'config': cell.config.name,
            'config_file': relative(cell.config.path) if cell.config.path else '',
            'config_hash': cell.config_hash, 'bag_fingerprint': cell.bag_fingerprint,
            'key': cell.key, 'package_version': relperception.__version__,
            'cell_dir': relative(cell.folder), 'gt_time_offset_s': cell.gt_time_offset_s}
