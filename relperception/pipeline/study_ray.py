# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Run a study's cells as tasks on a Ray cluster (``relperception compare --ray``).

This module only connects to a cluster that is already running (``ray up``, KubeRay, or
``ray start --head`` on one machine); it starts none. Ray is optional: it is imported when
:func:`run_on_ray` is called, never at import of this module.

Each pending cell is one Ray task, ``ray.remote(run_cell_pinned)`` with ``num_cpus`` =
``cpus_per_cell`` (the threads the cell is pinned to) and ``num_gpus`` =
:func:`gpus_for_config` of its configuration. The task runs
:func:`relperception.pipeline.study.run_cell`, the code of the local pool: it writes the cell's
folder (so ``--output`` and the bags must be on a filesystem every node sees, at the same
paths) and returns its row to the driver, which records it as the pool path does.

**A worker that dies** (killed, out of memory, its node lost): Ray runs the task again once
(:data:`CELL_RETRIES`, Ray's ``max_retries`` for system failures); if it is lost again, the cell
is recorded as failed (``error`` names the Ray exception) and, like every failed cell, computed
again by the next run. An exception raised by the cell's own code (a bug: ``run_cell`` turns
the expected failures into failed rows) stops the study as it does in the pool path; the
cells still queued are cancelled, the finished ones are kept for the next run.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from typing import Any, Callable, Mapping, Sequence

from relperception.config import load_config
from relperception.pipeline import study

logger = logging.getLogger(__name__)

#: Automatic reruns of a cell whose Ray worker or node died (Ray's ``max_retries``).
CELL_RETRIES = 1
#: Seconds to wait for the head's port to answer before ``ray.init``.
CONNECT_TIMEOUT_S = 10.0
#: What to install when Ray is missing.
RAY_INSTALL_HINT = "pip install 'ray[default]'"


def import_ray():
    """Return the ``ray`` module.

    Raises:
        RuntimeError: Ray is not installed, with the command that installs it.
    """
    try:
        import ray
    except ImportError as error:
        raise RuntimeError('the Ray executor (--ray) needs Ray on this machine, the version '
                           f'of the cluster: {RAY_INSTALL_HINT}') from error
    return ray


def gpus_for_config(config: Mapping[str, Any], dense: bool = False) -> int:
    """Return the GPUs a cell of ``config`` (a flat configuration) reserves: 0 or 1.

    1 when its matcher is LoFTR on CUDA (``loftr.backend: torch`` with a ``cuda`` device, or
    ``tensorrt``), or, for a study that scores the dense model (``dense``), when that model
    runs there (``dense.backend`` the same way). ONNX Runtime picks its execution provider
    itself: such a configuration reserves no GPU (put it on GPU nodes with a cluster of GPU
    nodes only).
    """
    def on_gpu(section: str) -> bool:
        backend = config.get(f'{section}.backend')
        return backend == 'tensorrt' or (
            backend == 'torch' and str(config.get(f'{section}.device', '')).startswith('cuda'))

    return int((config.get('matcher') == 'loftr' and on_gpu('loftr'))
               or (dense and on_gpu('dense')))


def run_on_ray(cells: Sequence[study.Cell], indices: Sequence[int], address: str,
               cpus_per_cell: int, mode: str | None, plots: bool,
               record: Callable[[int, dict], None]) -> None:
    """Run ``cells[i]`` for each ``i`` of ``indices`` as Ray tasks; ``record(i, row)`` each row.

    Connects with ``ray.init(address=address)`` and disconnects at the end, unless this process
    is connected already (that connection is then used and kept). Rows are recorded in the
    order they finish.

    Args:
        cells: from :func:`relperception.pipeline.study.plan_cells`.
        indices: the cells to run (the pending ones).
        address: ``'auto'`` (``RAY_ADDRESS``, else the head started last on this machine) or
            the head's ``host:port``.
        cpus_per_cell: CPUs each task reserves and threads it is pinned to (>= 1).
        mode: odometry mode of every cell (None: each configuration's).
        plots: write each cell's PNG plots.
        record: called with (index, row) for each cell: its ``run_cell`` row with
            ``reused: False``, or a failed row when its task was lost twice.

    Raises:
        ValueError: an index out of range, ``cpus_per_cell`` < 1, an empty address.
        RuntimeError: Ray is not installed, no cluster answers at ``address``, or
            ``relperception`` cannot be imported on a worker.
    """
    if isinstance(cpus_per_cell, bool) or not isinstance(cpus_per_cell, int) \
            or cpus_per_cell < 1:
        raise ValueError(f'cpus_per_cell must be an integer >= 1, got {cpus_per_cell!r}')
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"address must be 'auto' or host:port, got {address!r}")
    if any(not 0 <= i < len(cells) for i in indices):
        raise ValueError(f'indices must be in [0, {len(cells)}), got {list(indices)}')
    if not indices:
        return
    ray = import_ray()
    gpus = {cells[i].config.name: gpus_for_config(load_config(cells[i].config.path),
                                                  cells[i].dense)
            for i in indices}
    connected_here = not ray.is_initialized()
    if connected_here:
        _check_reachable(address)
        try:
            ray.init(address=address, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise RuntimeError(f'no Ray cluster at {address!r} ({error}); start one with '
                               '`ray start --head` or `ray up`, or check RAY_ADDRESS') from error
    pending: list = []
    try:
        _warn_if_unschedulable(ray.cluster_resources(), cpus_per_cell, max(gpus.values()))
        task = ray.remote(study.run_cell_pinned)
        refs = {}
        for i in indices:
            options = {'num_cpus': cpus_per_cell, 'num_gpus': gpus[cells[i].config.name],
                       'max_retries': CELL_RETRIES, 'retry_exceptions': False}
            ref = task.options(**options).remote(_absolute(cells[i]), mode, plots,
                                                 cpus_per_cell)
            refs[ref] = i
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            more = []
            if pending:   # everything else finished meanwhile, without waiting
                more, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
            for ref in done + more:
                record(refs[ref], _collect(ray, ref, cells[refs[ref]]))
    finally:
        for ref in pending:   # a study stopped by an error or Ctrl-C leaves nothing queued
            ray.cancel(ref, force=True)
        if connected_here:
            ray.shutdown()


def _collect(ray, ref, cell: study.Cell) -> dict:
    """Return the row of a finished task, or the failed row of a lost one."""
    try:
        return {**ray.get(ref), 'reused': False}
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, ImportError):
            raise RuntimeError('a Ray worker cannot import relperception: install the same '
                               f'version on every node ({error.cause})') from error
        raise
    except ray.exceptions.RayError as error:
        reason = (study.WORKER_DIED if isinstance(error, ray.exceptions.WorkerCrashedError)
                  else f'lost on the Ray cluster: {type(error).__name__}')
        logger.warning('cell %s: %s (after %d retry)', cell.folder.name, reason, CELL_RETRIES)
        return study.failed_row(cell, reason)


def _check_reachable(address: str) -> None:
    """Raise RuntimeError when nothing listens at a ``host:port`` address (ray.init would wait).

    ``auto`` and URLs (``ray://``) are left to Ray.
    """
    host, _, port = address.rpartition(':')
    if address == 'auto' or '://' in address or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip('[]'), int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise RuntimeError(f'no Ray cluster at {address!r}: {error} (is its head running, and '
                           'is this the port of `ray start --head --port`?)') from error


def _absolute(cell: study.Cell) -> study.Cell:
    """Return ``cell`` with absolute paths (a worker's working directory is not the driver's)."""
    config = cell.config
    if config.path is not None:
        config = dataclasses.replace(config, path=config.path.absolute())
    return dataclasses.replace(cell, bag=cell.bag.absolute(), folder=cell.folder.absolute(),
                               config=config)


def _warn_if_unschedulable(resources: Mapping[str, float], cpus: int, gpus: int) -> None:
    """Log when the cluster has fewer CPUs / GPUs than one cell asks (tasks would wait)."""
    for name, wanted in (('CPU', cpus), ('GPU', gpus)):
        if wanted and resources.get(name, 0) < wanted:
            logger.warning('each cell asks %d %s and the cluster has %g now: cells wait until '
                           'such a node joins (autoscaling), else stop with Ctrl-C', wanted,
                           name, resources.get(name, 0))
