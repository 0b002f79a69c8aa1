# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Aggregate a study's rows (one per bag x configuration) into tables and a recommendation.

Pure functions over the rows :func:`relperception.pipeline.study.run_study` returns, plus the
writers of ``results.csv`` / ``results.json`` / ``aggregate.json`` (and ``results.parquet``
where pyarrow is installed).

* :func:`aggregate`: per configuration, the cells that succeeded and failed, the mean and median
  of each metric over its bags, and its mean rank per bag (1 = the lowest ATE on that bag among
  the configurations that succeeded there; tied configurations share the mean of their places).
* :func:`recommend`: one plain line with its criterion: the configuration with the lowest
  median ATE over the bags where every configuration succeeded, against the first (reference)
  configuration, with the ratio of the median time per frame.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from relperception.atomic_files import atomic_open, write_text_atomic
from scipy.stats import rankdata

logger = logging.getLogger(__name__)

#: Metrics aggregated per configuration (lower is better for each, except the dense mIoU,
#: pixel accuracy and delta1; the dense ones only in studies run with ``--dense``).
AGGREGATED = ('ate_rmse_m', 'drift_percent', 'rpe_trans_rmse_m', 'timing_median_ms',
              'tracking_median_ms', 'frames_lost', 'dense_miou', 'dense_pixel_accuracy',
              'dense_abs_rel', 'dense_delta1', 'dense_ms_median')
#: The metric that ranks configurations.
RANK_METRIC = 'ate_rmse_m'


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def aggregate(rows: Sequence[dict], config_names: Sequence[str]) -> list[dict]:
    """Return one dict per configuration (in ``config_names`` order), see the module docstring.

    Keys: ``config``, ``cells``, ``ok``, ``failed``, ``<metric>_mean`` / ``_median`` for each of
    :data:`AGGREGATED` (None when no cell has it) and ``mean_rank``.
    """
    ranks: dict[str, list[float]] = {name: [] for name in config_names}
    by_bag: dict[str, list[dict]] = {}
    for row in rows:
        if row['status'] == 'ok' and _finite(row.get(RANK_METRIC)):
            by_bag.setdefault(row['bag'], []).append(row)
    for bag_rows in by_bag.values():
        places = rankdata([row[RANK_METRIC] for row in bag_rows], method='average')
        for place, row in zip(places, bag_rows):
            ranks[row['config']].append(float(place))
    out = []
    for name in config_names:
        own = [r for r in rows if r['config'] == name]
        ok = [r for r in own if r['status'] == 'ok']
        entry: dict[str, Any] = {'config': name, 'cells': len(own), 'ok': len(ok),
                                 'failed': len(own) - len(ok)}
        for metric in AGGREGATED:
            values = [float(r[metric]) for r in ok if _finite(r.get(metric))]
            entry[f'{metric}_mean'] = float(np.mean(values)) if values else None
            entry[f'{metric}_median'] = float(np.median(values)) if values else None
        entry['mean_rank'] = float(np.mean(ranks[name])) if ranks[name] else None
        out.append(entry)
    return out


def recommend(rows: Sequence[dict], config_names: Sequence[str]) -> str:
    """Return the recommendation line (see the module docstring)."""
    if len(config_names) < 2:
        return 'one configuration: nothing to compare'
    bags = sorted({r['bag'] for r in rows})
    complete = [bag for bag in bags
                if all(any(r['bag'] == bag and r['config'] == name and r['status'] == 'ok'
                           and _finite(r.get(RANK_METRIC)) for r in rows)
                       for name in config_names)]
    if not complete:
        return 'no bag where every configuration succeeded: no recommendation'
    medians = {}
    for name in config_names:
        own = [r for r in rows if r['config'] == name and r['bag'] in complete]
        times = [r['timing_median_ms'] for r in own if _finite(r.get('timing_median_ms'))]
        medians[name] = (float(np.median([r[RANK_METRIC] for r in own])),
                         float(np.median(times)) if times else float('nan'))
    reference = config_names[0]
    best = min(config_names, key=lambda name: medians[name][0])
    ate_ref, time_ref = medians[reference]
    ate_best, time_best = medians[best]
    bags_text = f'{len(complete)} bag' + ('s' if len(complete) != 1 else '')
    criterion = (f'criterion: lowest median ATE over the {bags_text} where every '
                 'configuration succeeded')
    if best == reference or ate_best >= ate_ref:
        best, ate_best, time_best = reference, ate_ref, time_ref
        line = (f'on these {bags_text}, `{reference}` (the reference) has the lowest '
                f'median ATE ({ate_ref:.4g} m)')
    else:
        change = 100.0 * (ate_ref - ate_best) / ate_ref if ate_ref > 0 else float('nan')
        time_ratio = time_best / time_ref if time_ref > 0 else float('nan')
        line = (f'on these {bags_text}, `{best}` lowers median ATE by {change:.0f} % '
                f'against `{reference}` ({ate_best:.4g} m against {ate_ref:.4g} m) at '
                f'{time_ratio:.2g}x the time per frame')
    fastest = min(config_names, key=lambda name: medians[name][1])
    time_fast, ate_fast = medians[fastest][1], medians[fastest][0]
    if fastest != best and time_fast < time_best and time_best > 0 and ate_best > 0:
        line += (f'; the fastest, `{fastest}`, takes {time_fast / time_best:.2g}x its time '
                 f'per frame at {ate_fast / ate_best:.2g}x its median ATE')
    return f'{line}; {criterion}'


def write_results(rows: Sequence[dict], aggregates: Sequence[dict], recommendation: str,
                  output) -> dict:
    """Write ``results.csv``, ``results.json``, ``aggregate.json`` (and ``results.parquet``).

    NaN and infinite values (rows read back from an older ``cell.json``) are written as
    empty / null, never as ``NaN`` (which is not JSON).

    Returns {name: path} of the files written.
    """
    from relperception.evaluation.report import to_jsonable

    rows = [to_jsonable(dict(row)) for row in rows]
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    columns = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    written = {}
    with atomic_open(output / 'results.csv') as stream:
        writer = csv.DictWriter(stream, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ('' if row.get(k) is None else row.get(k)) for k in columns})
    written['results.csv'] = output / 'results.csv'
    written['results.json'] = write_text_atomic(
        output / 'results.json', json.dumps(rows, indent=2, default=str, allow_nan=False))
    written['aggregate.json'] = write_text_atomic(output / 'aggregate.json', json.dumps(
        to_jsonable({'configurations': list(aggregates), 'recommendation': recommendation}),
        indent=2, allow_nan=False))
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        logger.info('pyarrow is not installed: no results.parquet (pip install pyarrow)')
        return written
    table = pyarrow.Table.from_pylist([{k: row.get(k) for k in columns} for row in rows])
    with atomic_open(output / 'results.parquet', binary=True) as stream:
        pyarrow.parquet.write_table(table, stream)
    written['results.parquet'] = output / 'results.parquet'
    return written


def format_table(aggregates: Sequence[dict]) -> str:
    """Return the per-configuration table as plain text."""
    lines = [f'{"configuration":<20} {"ok":>4} {"failed":>6} {"median ATE m":>13} '
             f'{"median drift %":>14} {"median ms/frame":>15} {"mean rank":>9}']

    def cell(value, spec):
        return 'n/a' if value is None else format(value, spec)

    for a in aggregates:
        lines.append(f'{a["config"]:<20} {a["ok"]:4d} {a["failed"]:6d} '
                     f'{cell(a["ate_rmse_m_median"], "13.4f")} '
                     f'{cell(a["drift_percent_median"], "14.2f")} '
                     f'{cell(a["timing_median_ms_median"], "15.1f")} '
                     f'{cell(a["mean_rank"], "9.2f")}')
    return '\n'.join(lines)


def pareto_front(aggregates: Sequence[dict], accuracy: str = 'ate_rmse_m_median',
                 cost: str = 'timing_median_ms_median') -> list[str]:
    """Return the configurations no other beats on both ``accuracy`` and ``cost`` (lower).

    A configuration is on the front when no other one is at least as good on both and better
    on one. Configurations without both values are left out.
    """
    points = [(a['config'], a.get(accuracy), a.get(cost)) for a in aggregates]
    points = [(name, float(x), float(y)) for name, x, y in points if _finite(x) and _finite(y)]
    front = []
    for name, error, time in points:
        beaten = any(e <= error and t <= time and (e < error or t < time)
                     for other, e, t in points if other != name)
        if not beaten:
            front.append(name)
    return front


def plot_pareto(path_png, aggregates: Sequence[dict]) -> Path | None:
    """Plot median ATE against median time per frame per configuration; None without data."""
    from relperception.evaluation.report import plot_scatter_front

    points = {a['config']: (a.get('timing_median_ms_median'), a.get('ate_rmse_m_median'))
              for a in aggregates}
    points = {k: (float(x), float(y)) for k, (x, y) in points.items()
              if _finite(x) and _finite(y)}
    if not points:
        return None
    return plot_scatter_front(path_png, points, set(pareto_front(aggregates)),
                              'median time per frame [ms]', 'median ATE RMSE [m]',
                              'accuracy against time per frame (ringed: Pareto front, '
                              'lower left is better)')
