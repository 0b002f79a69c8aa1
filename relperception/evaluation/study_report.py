# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Aggregate a study's rows (one per bag x configuration) into tables and a recommendation.

Pure functions over the rows :func:`relperception.pipeline.study.run_study` returns, plus the
writers of ``results.csv`` / ``results.json`` / ``aggregate.json`` (and ``results.parquet``
where pyarrow is installed).

* :func:`aggregate`: per configuration, the cells that succeeded and failed; the mean and median
  of each metric over the bags where *every* configuration has an ATE (the common bags, keys
  ``<metric>_mean_common`` / ``_median_common``: the figures the table compares; for the dense
  figures the bags where every configuration has that figure) and over the
  configuration's own bags (``<metric>_mean`` / ``_median``: a configuration that fails on the
  hard bags looks better there); and its mean rank over the bags where any configuration has
  an ATE (1 = the lowest ATE on that bag; a configuration without an ATE there shares the last
  places; tied configurations share the mean of their places).
* :func:`recommend`: one plain line with its criterion: the configuration with the lowest
  median ATE over the common bags (a tie goes to the lower median time per frame), against
  the first (reference) configuration, with the ratio of the median time per frame.
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


def finite_number(value) -> bool:
    """Return whether ``value`` is a finite int or float (not a bool, None or NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def common_bags(rows: Sequence[dict], config_names: Sequence[str],
                metric: str = RANK_METRIC) -> list[str]:
    """Return the bags (sorted) where every configuration has a finite ``metric``."""
    have: dict[str, set] = {}
    for row in rows:
        if row['status'] == 'ok' and finite_number(row.get(metric)):
            have.setdefault(row['bag'], set()).add(row['config'])
    return sorted(bag for bag, names in have.items() if set(config_names) <= names)


def aggregate(rows: Sequence[dict], config_names: Sequence[str]) -> list[dict]:
    """Return one dict per configuration (in ``config_names`` order), see the module docstring.

    Keys: ``config``, ``cells``, ``ok``, ``failed``, ``bags`` (in the study), ``common_bags``
    (how many), ``ranked_bags`` (bags where any configuration has an ATE), for each of
    :data:`AGGREGATED` ``<metric>_mean_common`` / ``_median_common`` and ``<metric>_mean`` /
    ``_median`` (None without values), and ``mean_rank`` (None without ranked bags).
    """
    common = set(common_bags(rows, config_names))
    # the dense figures: over the bags where every configuration has that figure (bags with
    # depth or labels need no ground-truth pose)
    common_of = {metric: (set(common_bags(rows, config_names, metric))
                          if metric.startswith('dense_') else common) for metric in AGGREGATED}
    scores: dict[str, dict[str, float]] = {}
    for row in rows:
        if row['status'] == 'ok' and finite_number(row.get(RANK_METRIC)):
            scores.setdefault(row['bag'], {})[row['config']] = float(row[RANK_METRIC])
    ranks: dict[str, list[float]] = {name: [] for name in config_names}
    for bag_scores in scores.values():
        # no ATE (failed, lost, ATE not computable): behind every configuration with one
        values = [bag_scores.get(name, math.inf) for name in config_names]
        for name, place in zip(config_names, rankdata(values, method='average')):
            ranks[name].append(float(place))
    out = []
    for name in config_names:
        own = [r for r in rows if r['config'] == name]
        ok = [r for r in own if r['status'] == 'ok']
        entry: dict[str, Any] = {'config': name, 'cells': len(own), 'ok': len(ok),
                                 'failed': len(own) - len(ok),
                                 'bags': len({r['bag'] for r in rows}),
                                 'common_bags': len(common), 'ranked_bags': len(scores)}
        for metric in AGGREGATED:
            for suffix, cells in (('_common', [r for r in ok if r['bag'] in common_of[metric]]),
                                  ('', ok)):
                values = [float(r[metric]) for r in cells if finite_number(r.get(metric))]
                entry[f'{metric}_mean{suffix}'] = float(np.mean(values)) if values else None
                entry[f'{metric}_median{suffix}'] = (float(np.median(values)) if values
                                                     else None)
        entry['mean_rank'] = float(np.mean(ranks[name])) if ranks[name] else None
        out.append(entry)
    return out


def _tied(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def _time(entry: dict) -> float:
    value = entry.get('timing_median_ms_median_common')
    return float(value) if finite_number(value) else math.inf


def best_configuration(aggregates: Sequence[dict]) -> str | None:
    """Return the configuration :func:`recommend` names (None without common bags).

    The lowest median ATE over the common bags; among equal ones the lowest median time per
    frame, then the first in the list.
    """
    scored = [a for a in aggregates if finite_number(a.get('ate_rmse_m_median_common'))]
    if not scored:
        return None
    lowest = min(a['ate_rmse_m_median_common'] for a in scored)
    return min((a for a in scored if _tied(a['ate_rmse_m_median_common'], lowest)),
               key=_time)['config']


def recommend(aggregates: Sequence[dict]) -> str:
    """Return the recommendation line of :func:`aggregate`'s result (see the module docstring).

    It reads only ``aggregates``, so it cannot disagree with the table made from them. Without
    a recommendation the line says why: every cell failed, no cell has an ATE (no ground
    truth), or which configurations have no ATE on any bag.
    """
    cells = sum(a['cells'] for a in aggregates)
    failed = sum(a['failed'] for a in aggregates)
    if cells and failed == cells:
        return (f'every cell failed ({failed} of {failed}; see the error column of '
                'results.csv): no recommendation')
    if len(aggregates) < 2:
        return 'one configuration: nothing to compare'
    best = best_configuration(aggregates)
    if best is None:
        return _why_no_recommendation(aggregates)
    config_names = [a['config'] for a in aggregates]
    count = aggregates[0]['common_bags']
    ate = {a['config']: a['ate_rmse_m_median_common'] for a in aggregates}
    time = {a['config']: _time(a) for a in aggregates}
    reference = config_names[0]
    tied = [name for name in config_names
            if name not in (best, reference) and _tied(ate[name], ate[best])]
    bags_text = f'{count} bag' + ('s' if count != 1 else '')
    criterion = (f'criterion: lowest median ATE over the {bags_text} where every '
                 'configuration has an ATE')
    if best == reference:
        line = (f'on these {bags_text}, `{reference}` (the reference) has the lowest '
                f'median ATE ({ate[reference]:.4g} m)')
    elif _tied(ate[best], ate[reference]):
        line = (f'on these {bags_text}, `{best}` has the same median ATE as `{reference}` '
                f'({ate[best]:.4g} m) at {_ratio(time[best], time[reference])} the time per '
                'frame')
    else:
        change = 100.0 * (ate[reference] - ate[best]) / ate[reference]
        line = (f'on these {bags_text}, `{best}` lowers median ATE by {change:.2g} % '
                f'against `{reference}` ({ate[best]:.4g} m against {ate[reference]:.4g} m) at '
                f'{_ratio(time[best], time[reference])} the time per frame')
    if tied:
        line += ('; ' + ', '.join(f'`{name}`' for name in tied)
                 + (' has' if len(tied) == 1 else ' have') + ' the same median ATE')
    fastest = min(config_names, key=lambda name: time[name])
    if fastest != best and time[fastest] < time[best]:
        line += (f'; the fastest, `{fastest}`, takes {_ratio(time[fastest], time[best])} its '
                 f'time per frame at {_ratio(ate[fastest], ate[best])} its median ATE')
    return f'{line}; {criterion}'


def _why_no_recommendation(aggregates: Sequence[dict]) -> str:
    """Return the line of a study without a bag where every configuration has an ATE."""
    # an ATE over its own bags: a cell of the configuration succeeded with an ATE
    with_ate = {a['config'] for a in aggregates
                if finite_number(a.get(f'{RANK_METRIC}_median'))}
    if not with_ate:
        return ('no cell has an ATE (no ground truth in the bags, or no frame tracked: see '
                "each cell's summary.json errors): no recommendation")
    without = [a['config'] for a in aggregates if a['config'] not in with_ate]
    line = 'no bag where every configuration has an ATE: no recommendation'
    if without:
        line += ('; ' + ', '.join(f'`{name}`' for name in without)
                 + (' has' if len(without) == 1 else ' have') + ' no ATE on any bag '
                 '(failed or not scored; see results.csv)')
    return line


def _ratio(value: float, reference: float) -> str:
    """Return ``value / reference`` as text ('1.3x'; 'an unknown multiple of' if undefined)."""
    if not (finite_number(value) and finite_number(reference)) or reference <= 0:
        return 'an unknown multiple of'
    return f'{value / reference:.2g}x'


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


def comparison_note(aggregates: Sequence[dict]) -> str:
    """Return the line that says over which bags the table's figures are taken."""
    if not aggregates:
        return 'no configuration'
    first = aggregates[0]
    if not first['common_bags']:
        return (f'no bag of {first["bags"]} where every configuration has an ATE: no medians '
                "to compare (aggregate.json has each configuration's own)")
    return (f'medians over the {first["common_bags"]} of {first["bags"]} bags where every '
            f'configuration has an ATE; mean rank over the {first["ranked_bags"]} bags with '
            'an ATE (no ATE: ranked last)')


def format_table(aggregates: Sequence[dict]) -> str:
    """Return the per-configuration table as plain text (medians over the common bags)."""
    lines = [comparison_note(aggregates),
             f'{"configuration":<20} {"ok":>4} {"failed":>6} {"median ATE m":>13} '
             f'{"median drift %":>14} {"median ms/frame":>15} {"mean rank":>9}']

    def cell(value, spec):
        width = spec.split('.')[0]
        return format('n/a', f'>{width}') if value is None else format(value, spec)

    for a in aggregates:
        lines.append(f'{a["config"]:<20} {a["ok"]:4d} {a["failed"]:6d} '
                     f'{cell(a["ate_rmse_m_median_common"], "13.4f")} '
                     f'{cell(a["drift_percent_median_common"], "14.2f")} '
                     f'{cell(a["timing_median_ms_median_common"], "15.1f")} '
                     f'{cell(a["mean_rank"], "9.2f")}')
    return '\n'.join(lines)


def pareto_front(aggregates: Sequence[dict], accuracy: str = 'ate_rmse_m_median_common',
                 cost: str = 'timing_median_ms_median_common') -> list[str]:
    """Return the configurations no other beats on both ``accuracy`` and ``cost`` (lower).

    A configuration is on the front when no other one is at least as good on both and better
    on one. Configurations without both values are left out. By default the medians over the
    common bags (see :func:`aggregate`).
    """
    points = [(a['config'], a.get(accuracy), a.get(cost)) for a in aggregates]
    points = [(name, float(x), float(y)) for name, x, y in points
              if finite_number(x) and finite_number(y)]
    front = []
    for name, error, time in points:
        beaten = any(e <= error and t <= time and (e < error or t < time)
                     for other, e, t in points if other != name)
        if not beaten:
            front.append(name)
    return front


def plot_pareto(path_png, aggregates: Sequence[dict]) -> Path | None:
    """Plot median ATE against median time per frame (common bags); None without data."""
    from relperception.evaluation.report import plot_scatter_front

    points = {a['config']: (a.get('timing_median_ms_median_common'),
                            a.get('ate_rmse_m_median_common')) for a in aggregates}
    points = {k: (float(x), float(y)) for k, (x, y) in points.items()
              if finite_number(x) and finite_number(y)}
    if not points:
        return None
    return plot_scatter_front(path_png, points, set(pareto_front(aggregates)),
                              'median time per frame [ms]', 'median ATE RMSE [m]',
                              'accuracy against time per frame (ringed: Pareto front, '
                              'lower left is better)')
