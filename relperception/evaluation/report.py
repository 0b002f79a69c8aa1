# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Evaluation reports: trajectory and error plots (matplotlib, Agg) and numpy-safe JSON.

matplotlib is imported, and its Agg backend selected, only inside the plotting functions, so
importing this module has no side effects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import itertools
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
from relperception.atomic_files import atomic_path, write_text_atomic
from relperception.validation import as_rows

logger = logging.getLogger(__name__)

_AXES = ('x', 'y', 'z')
_COLOURS = ('tab:blue', 'tab:orange', 'tab:green', 'tab:purple', 'tab:brown', 'tab:pink')


def pyplot():
    """Return ``matplotlib.pyplot`` with the Agg backend selected (imported on first use)."""
    import matplotlib
    matplotlib.use('Agg', force=True)
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, title: str, path_png) -> Path:
    """Title, lay out and write ``fig`` to ``path_png`` (parent folders created)."""
    fig.suptitle(title)
    fig.tight_layout()
    path_png = Path(path_png)
    with atomic_path(path_png) as temporary:
        fig.savefig(temporary, dpi=100)
    return path_png


def plot_trajectories(path_png: str | Path, gt_xyz, est_xyz, title: str = 'trajectory',
                      est_label: str = 'estimate',
                      others: Mapping[str, Any] | None = None) -> Path:
    """Plot ground truth and estimate in a top view and a side view, save as PNG.

    The world frame of the recording is not known here, so the views are chosen from the
    ground truth: the top view shows the two axes along which it extends most, the side view
    the most extended axis against the least extended one.

    Args:
        path_png: output file (parent folders are created).
        gt_xyz: (N, 3) float ground-truth positions in metres (may be empty, (0, 3)).
        est_xyz: (M, 3) float estimated positions in metres, in the same frame.
        title: figure title.
        est_label: legend label of the estimate.
        others: optional label -> (K, 3) positions of further estimates to overlay.

    Returns:
        the written path.
    """
    gt_xyz, est_xyz = as_rows('gt_xyz', gt_xyz, 3), as_rows('est_xyz', est_xyz, 3)
    series = [(est_label, est_xyz)] + [(str(label), as_rows(f'others[{label!r}]', xyz, 3))
                                       for label, xyz in (others or {}).items()]
    if len(gt_xyz) == 0 and len(est_xyz) == 0:
        raise ValueError('plot_trajectories needs at least one position')
    reference = gt_xyz if len(gt_xyz) else est_xyz
    order = np.argsort(-np.ptp(reference, axis=0), kind='stable')
    views = (('top view', order[0], order[1]), ('side view', order[0], order[2]))
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    try:
        for ax, (name, a, b) in zip(axes, views):
            if len(gt_xyz):
                ax.plot(gt_xyz[:, a], gt_xyz[:, b], '-', color='0.3', lw=2, label='ground truth')
                ax.plot(gt_xyz[0, a], gt_xyz[0, b], 'o', color='0.3')
            for (label, xyz), colour in zip(series, itertools.cycle(_COLOURS)):
                if len(xyz):
                    ax.plot(xyz[:, a], xyz[:, b], '-', color=colour, lw=1.2, label=label)
                    ax.plot(xyz[0, a], xyz[0, b], 'o', color=colour)
            ax.set_xlabel(f'{_AXES[a]} [m]')
            ax.set_ylabel(f'{_AXES[b]} [m]')
            ax.set_title(name)
            ax.set_aspect('equal', adjustable='datalim')
            ax.grid(True, alpha=0.3)
            ax.legend(loc='best')
        return save_figure(fig, title, path_png)
    finally:
        plt.close(fig)


def plot_errors(path_png: str | Path, stamps_s, ape_m, title: str = 'absolute error',
                rpe_m: Sequence[float] | None = None,
                events: Mapping[str, Sequence[float]] | None = None) -> Path:
    """Plot the absolute position error over time (and its histogram), save as PNG.

    Args:
        path_png: output file (parent folders are created).
        stamps_s: (N,) float seconds (e.g. since the first pose).
        ape_m: (N,) float absolute position error in metres.
        title: figure title.
        rpe_m: optional (N,) float relative translation error per pose in metres (NaN for none).
        events: optional name -> stamps in seconds drawn as vertical lines (e.g. ``'lost'``).

    Returns:
        the written path.
    """
    stamps_s = np.asarray(stamps_s, dtype=np.float64).reshape(-1)
    ape_m = np.asarray(ape_m, dtype=np.float64).reshape(-1)
    if len(stamps_s) != len(ape_m):
        raise ValueError(f'stamps_s ({len(stamps_s)}) and ape_m ({len(ape_m)}) must have the '
                         f'same length')
    plt = pyplot()
    fig, (ax, hist) = plt.subplots(1, 2, figsize=(12, 4.5),
                                   gridspec_kw={'width_ratios': [3, 1]})
    try:
        ax.plot(stamps_s, ape_m, '-', color='tab:red', lw=1.2, label='APE (translation)')
        if len(ape_m):
            rmse = float(np.sqrt(np.mean(ape_m ** 2)))
            ax.axhline(rmse, color='tab:red', ls='--', lw=0.8, label=f'RMSE {rmse:.4f} m')
        if rpe_m is not None:
            rpe_m = np.asarray(rpe_m, dtype=np.float64).reshape(-1)
            if len(rpe_m) != len(stamps_s):
                raise ValueError(f'rpe_m ({len(rpe_m)}) must match stamps_s ({len(stamps_s)})')
            ax.plot(stamps_s, rpe_m, '-', color='tab:green', lw=1.0, label='RPE (translation)')
        colours = iter(('tab:orange', 'tab:purple', 'tab:brown', 'tab:pink'))
        for name, times in (events or {}).items():
            colour = next(colours, 'k')
            for index, t in enumerate(times):
                ax.axvline(t, color=colour, lw=0.8, ls=':', label=name if index == 0 else None)
        ax.set_xlabel('time [s]')
        ax.set_ylabel('error [m]')
        ax.grid(True, alpha=0.3)
        ax.legend(loc='best')
        hist.hist(ape_m[np.isfinite(ape_m)], bins=30, color='tab:red', alpha=0.7,
                  orientation='horizontal')
        hist.set_xlabel('poses')
        hist.set_ylabel('APE [m]')
        hist.grid(True, alpha=0.3)
        return save_figure(fig, title, path_png)
    finally:
        plt.close(fig)


def plot_scatter_front(path_png: str | Path, points: Mapping[str, tuple],
                       front: set, x_label: str, y_label: str, title: str) -> Path:
    """Scatter named points (x, y), ringing those in ``front``, and save the figure.

    Args:
        path_png: output PNG (parent folders are created).
        points: {name: (x, y)} finite values.
        front: names drawn with a ring (e.g. the Pareto front).
        x_label: x axis label with its unit.
        y_label: y axis label with its unit.
        title: figure title.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 5.0))
    try:
        for name, (x, y) in points.items():
            ax.scatter([x], [y], s=40, color='tab:blue', zorder=3)
            if name in front:
                ax.scatter([x], [y], s=220, facecolors='none', edgecolors='tab:green',
                           linewidths=2, zorder=2)
            ax.annotate(name, (x, y), textcoords='offset points', xytext=(6, 6), fontsize=9)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(True, alpha=0.3)
        ax.margins(0.2)
        return save_figure(fig, title, path_png)
    finally:
        plt.close(fig)


def to_jsonable(value: Any) -> Any:
    """Return ``value`` with numpy types, paths and tuples converted; NaN/inf become None."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, (list, tuple, set)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: str | Path, data: Mapping[str, Any]) -> Path:
    """Write ``data`` as indented JSON (numpy values converted, NaN and inf as null).

    The text goes to a temporary file next to ``path`` that then replaces it, so an interrupted
    write never leaves a truncated file.

    Args:
        path: output file (parent folders are created).
        data: mapping of JSON-able values, numpy scalars and arrays.

    Returns:
        the written path.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f'write_json expects a mapping, got {type(data).__name__}')
    text = json.dumps(to_jsonable(data), indent=2, sort_keys=False, allow_nan=False)
    return write_text_atomic(path, text + '\n')


def format_metrics_table(rows: Mapping[str, Mapping[str, Any]],
                         columns: Sequence[str] = ('ate_rmse_m', 'rpe_trans_rmse_m',
                                                   'rpe_rot_rmse_deg', 'drift_percent',
                                                   'scale', 'frames_processed', 'frames_lost',
                                                   'timing_median_ms')) -> str:
    """Return a fixed-width text table: one row per run name, one column per metric key."""
    header = ['run'] + list(columns)
    lines = [header]
    for name, metrics in rows.items():
        cells = [str(name)]
        for key in columns:
            value = metrics.get(key)
            if isinstance(value, (float, np.floating)):
                cells.append('nan' if not math.isfinite(value) else f'{value:.4g}')
            elif value is None:
                cells.append('-')
            else:
                cells.append(str(value))
        lines.append(cells)
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return '\n'.join('  '.join(cell.rjust(w) for cell, w in zip(row, widths)) for row in lines)


#: File name of the report in a run's output folder.
REPORT_NAME = 'report.html'
#: Files every run summary lists besides its ``outputs`` (and its report).
_RUN_FILES = ('summary.json', 'timing.csv', REPORT_NAME)


def remove_earlier_outputs(output_dir: str | Path) -> list[str]:
    """Remove the files an earlier run wrote into ``output_dir``, so none is left stale.

    The earlier run is known by its ``summary.json``: its ``outputs`` (file names relative to
    the folder) and the summary and timing files go; nothing else in the folder is touched.

    Returns:
        the removed names (empty when the folder holds no earlier run).
    """
    output_dir = Path(output_dir)
    summary_path = output_dir / 'summary.json'
    if not summary_path.is_file():
        return []
    try:
        earlier = json.loads(summary_path.read_text(encoding='utf-8'))
        outputs = earlier.get('outputs') or {}
        names = [str(v) for v in outputs.values() if isinstance(v, str)]
    except (ValueError, OSError, AttributeError):
        names = []
    removed = []
    root = output_dir.resolve()
    for name in [*names, *_RUN_FILES]:
        path = (output_dir / name).resolve()
        if root not in path.parents or not path.is_file():
            continue   # outside the folder, or already gone
        path.unlink()
        removed.append(name)
    if removed:
        logger.info('%s: replaced the %d files of an earlier run', output_dir, len(removed))
    return removed
