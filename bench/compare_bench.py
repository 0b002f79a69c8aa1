# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Study benchmark: cells per minute of ``relperception compare`` per executor, and Ray's cost.

The same small study (``--bags`` short synthetic 640x480 bags x two configurations: the
defaults and ``ncc.max_keypoints: 300``) is run from scratch by each executor, every cell
computed (a fresh output folder each time, nothing reused), ``--repeats`` times interleaved,
the fastest run of each kept:

* ``pool x1`` and ``pool x2``: the local process pool with ``--workers 1`` and ``2`` (spawned
  workers, each pinned to ``cpu_count / workers`` threads); their ratio is the pool's scaling
  on this machine;
* ``ray x2`` (when Ray is installed): the same cells as Ray tasks of one CPU each on a local
  head of 2 CPUs that the benchmark starts (``ray start --head --block`` on 127.0.0.1, killed
  at the end), against ``pool x2``, the same two cells at a time.

Per executor: wall time (including the workers' start and, for Ray, the driver's connection),
cells per minute, the mean time inside a cell (``elapsed_s`` of the rows: ``evaluate_bag``) and
the overhead per cell, ``(wall x slots - sum of in-cell times) / cells``: the time a slot
(worker process or CPU) spends on anything but a cell: starting, importing, scheduling, the
results' return and the tail where fewer cells than slots are left. A cell's own time
differs little between executors (``pool x1`` gives it ``cpu_count`` threads, the others one),
so the overhead is the figure to compare.

Usage::

    .venv/bin/python bench/compare_bench.py [--bags 4] [--frames 30] [--repeats 3]
        [--output bench_output] [--no-ray]
"""

import argparse
import datetime
import importlib.util
import logging
import os
from pathlib import Path
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.evaluation.report import write_json
from relperception.pipeline.study import plan_cells, run_study, StudyConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Seconds the local Ray head may take to start.
HEAD_START_TIMEOUT_S = 120.0


def make_study(work: Path, bags: int, frames: int) -> tuple:
    """Write ``bags`` synthetic bags (640x480, 10 Hz) and the small configuration; return both."""
    paths = []
    for seed in range(bags):
        path = work / f'bag{seed}'
        write_synthetic_bag(path, frames=frames, seed=seed)
        paths.append(path)
    small = work / 'small.yaml'
    small.write_text('ncc:\n  max_keypoints: 300\n', encoding='utf-8')
    return paths, [StudyConfig('default'), StudyConfig('small', small)]


def measure(name: str, bags, configs, output: Path, slots: int, **executor) -> dict:
    """Run the study from scratch into ``output``; return its timing figures."""
    cells = plan_cells(bags, configs, output)
    started = time.perf_counter()
    rows = run_study(cells, **executor)
    wall = time.perf_counter() - started
    failed = [r for r in rows if r['status'] != 'ok']
    if failed or any(r['reused'] for r in rows):
        raise RuntimeError(f'{name}: {len(failed)} cells failed, e.g. {failed[:1]}')
    inside = sum(r['elapsed_s'] for r in rows)
    frames = sum(r['frames_processed'] for r in rows)
    return {'executor': name, 'cells': len(rows), 'slots': slots, 'wall_s': wall,
            'cells_per_min': 60.0 * len(rows) / wall, 'cell_mean_s': inside / len(rows),
            'cell_ms_per_frame': 1e3 * inside / frames,
            'overhead_per_cell_s': (wall * slots - inside) / len(rows)}


def run_all(bags, configs, work: Path, repeats: int, ray_address: str) -> list:
    """Run every executor ``repeats`` times, interleaved; return each one's fastest run.

    Interleaved (x1, x2, ray, x1, ...) so that the load of a shared machine falls on all of
    them alike; ``walls_s`` keeps every run's wall time.
    """
    executors = {'pool x1': (1, {'workers': 1}), 'pool x2': (2, {'workers': 2})}
    if ray_address:
        executors['ray x2'] = (2, {'ray_address': ray_address, 'cpus_per_cell': 1})
    best: dict = {}
    for repeat in range(repeats):
        for name, (slots, executor) in executors.items():
            run = measure(name, bags, configs, work / f'{name.replace(" ", "")}_{repeat}',
                          slots, **executor)
            walls = best.get(name, {}).get('walls_s', []) + [run['wall_s']]
            if name not in best or run['wall_s'] < best[name]['wall_s']:
                best[name] = run
            best[name]['walls_s'] = walls
    return list(best.values())


class LocalRayHead:
    """A Ray head of ``cpus`` CPUs on 127.0.0.1 in a process group of its own (a context)."""

    def __init__(self, cpus: int):
        self.cpus = cpus
        self.process = None
        self.temp_dir = tempfile.mkdtemp(prefix='rp_ray_', dir='/tmp')   # short socket paths
        self.address = ''

    def __enter__(self) -> 'LocalRayHead':
        """Start the head; return self once it accepts drivers."""
        # Head and this driver on the loopback address only.
        os.environ.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER='0', RAY_USAGE_STATS_ENABLED='0')
        with socket.socket() as probe:
            probe.bind(('127.0.0.1', 0))
            port = probe.getsockname()[1]
        log_path = Path(self.temp_dir) / 'head.log'
        with open(log_path, 'wb') as log:
            self.process = subprocess.Popen(
                [str(Path(sys.executable).with_name('ray')), 'start', '--head', '--block',
                 f'--port={port}', '--node-ip-address=127.0.0.1', f'--num-cpus={self.cpus}',
                 '--include-dashboard=false', '--disable-usage-stats',
                 f'--temp-dir={self.temp_dir}'],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        deadline = time.monotonic() + HEAD_START_TIMEOUT_S
        while 'Ray runtime started' not in log_path.read_text(errors='replace'):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError('the local Ray head did not start')
            time.sleep(0.1)
        self.address = f'127.0.0.1:{port}'
        return self

    def __exit__(self, *exc) -> None:
        """Kill the head's process group and remove its folder."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=30)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def format_results(results: list) -> str:
    """Return the table of the measured executors, ratios against ``pool x1`` / ``pool x2``."""
    base = {r['executor']: r for r in results}
    lines = [f'{"executor":<10} {"cells":>5} {"wall s":>7} {"cells/min":>9} '
             f'{"x pool x1":>9} {"in-cell s":>9} {"ms/frame":>8} {"overhead s/cell":>15}']
    for r in results:
        lines.append(f'{r["executor"]:<10} {r["cells"]:5d} {r["wall_s"]:7.1f} '
                     f'{r["cells_per_min"]:9.1f} '
                     f'{r["cells_per_min"] / base["pool x1"]["cells_per_min"]:9.2f} '
                     f'{r["cell_mean_s"]:9.2f} {r["cell_ms_per_frame"]:8.1f} '
                     f'{r["overhead_per_cell_s"]:15.2f}')
    if 'ray x2' in base:
        ray, pool = base['ray x2'], base['pool x2']
        extra = ray['overhead_per_cell_s'] - pool['overhead_per_cell_s']
        lines.append(f'Ray against pool x2: {extra:+.2f} s overhead per cell, '
                     f'{ray["wall_s"] / pool["wall_s"]:.2f}x the wall time')
    return '\n'.join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output')
    parser.add_argument('--bags', type=int, default=4, help='synthetic bags (2 cells each)')
    parser.add_argument('--frames', type=int, default=30, help='frames per bag (10 Hz)')
    parser.add_argument('--repeats', type=int, default=3,
                        help='runs per executor, interleaved, the fastest kept (a shared '
                             'machine)')
    parser.add_argument('--no-ray', action='store_true', help='the local pool only')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix='compare_bench_') as tmp:
        work = Path(tmp)
        bags, configs = make_study(work, args.bags, args.frames)
        # Not imported here: the head's loopback setting must be in place first.
        have_ray = importlib.util.find_spec('ray') is not None
        if not have_ray:
            logging.warning("Ray is not installed: no Ray figures (pip install 'ray[default]')")
        if have_ray and not args.no_ray:
            with LocalRayHead(cpus=2) as head:
                results = run_all(bags, configs, work, args.repeats, head.address)
        else:
            results = run_all(bags, configs, work, args.repeats, '')
    table = format_results(results)
    sys.stdout.write(table + '\n')
    path = write_json(args.output / 'compare_bench.json', {
        'date_utc': datetime.datetime.now(datetime.timezone.utc).isoformat(),
        'machine': {'platform': platform.platform(), 'cpus': os.cpu_count()},
        'bags': args.bags, 'frames': args.frames, 'repeats': args.repeats,
        'load_average': os.getloadavg(), 'results': results, 'table': table,
        'elapsed_s': time.perf_counter() - started,
    })
    sys.stdout.write(f'results: {path}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
