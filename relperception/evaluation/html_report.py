# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""One self-contained ``report.html`` per run: the page a user opens first.

``eval``, ``replay``, ``eval-pairs`` and ``compare`` write it next to their other files. The
page needs no network and no other file: CSS is inline and every plot is embedded as a base64
PNG. It shows the verdict or key figures first, then the metrics, the plots, the problems met
and, last, the exact command and the configuration values that differ from the defaults.

Builders return the HTML text (pure functions of the run's JSON and image files);
:func:`write_report` writes it atomically.
"""

from __future__ import annotations

import base64
import datetime
import html
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import cv2
import numpy as np
from relperception.atomic_files import write_text_atomic
from relperception.evaluation.report import REPORT_NAME
from relperception.evaluation.study_report import (best_configuration, comparison_note,
                                                   finite_number)

#: Embedded PNGs larger than this are re-encoded as JPEG (quality 85) when that is smaller.
_JPEG_ABOVE_BYTES = 300_000

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1280px;
color:#222;padding:0 16px}
h1{font-size:1.6em;margin-bottom:0}h2{border-bottom:1px solid #ccc;padding-bottom:4px;
margin-top:32px}
.sub{color:#666;margin-top:4px}.verdict{background:#eef6ee;border-left:4px solid #3a3;
padding:10px 14px;font-size:1.1em}.warn{background:#fff4e5;border-left:4px solid #e90;
padding:8px 14px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 10px;
text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
tr.best td{font-weight:bold;background:#f3fbf3}
figure{margin:12px 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{color:#555;font-size:.9em}pre{background:#f6f6f6;padding:8px;overflow-x:auto}
.missing{color:#a00}
"""


def dense_key_figures(dense: Optional[Mapping[str, Any]]) -> str:
    """Return the dense model's key figures of a run summary in one line ('' without any).

    Args:
        dense: the summary's ``dense`` entry (``relperception.pipeline.dense_eval``), or None.
    """
    if not dense:
        return ''
    parts = []
    segmentation, depth = dense.get('segmentation'), dense.get('depth')
    if segmentation and finite_number(segmentation.get('miou')):
        parts.append(f'segmentation mIoU {100.0 * segmentation["miou"]:.1f} %, pixel accuracy '
                     f'{100.0 * segmentation["pixel_accuracy"]:.1f} %')
    elif segmentation:
        parts.append('segmentation: no label pixel scored (see the errors)')
    if depth:
        parts.append(f'depth AbsRel {depth["abs_rel"]:.3f}, delta1 '
                     f'{100.0 * depth["delta1"]:.1f} %')
    return (f'dense model {dense.get("model", "?")} on {dense.get("frames_evaluated", 0)} '
            f'frames: ' + ('; '.join(parts) or 'no ground-truth depth or labels to score'))


def _frames_with_pose(summary: Mapping[str, Any]) -> Any:
    """Return processed - lost frames (tracked, initialised or re-initialised), '?' if unknown."""
    processed, lost = summary.get('frames_processed'), summary.get('frames_lost')
    return processed - lost if isinstance(processed, int) and isinstance(lost, int) else '?'


def _text(value: Any) -> str:
    """Return ``value`` as escaped HTML text, numbers in 4 significant digits, None as n/a."""
    if value is None:   # a figure that was not computed (or NaN in the JSON)
        return 'n/a'
    if isinstance(value, bool):
        return html.escape(str(value))
    if isinstance(value, float):
        if math.isnan(value):
            return 'n/a'
        if math.isinf(value):
            return 'inf'
        return f'{value:.4g}'
    return html.escape(str(value))


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]],
          best_row: Optional[int] = None) -> str:
    """Return an HTML table; ``best_row`` (index) is highlighted."""
    head = ''.join(f'<th>{html.escape(str(c))}</th>' for c in columns)
    body = []
    for index, row in enumerate(rows):
        marker = ' class="best"' if index == best_row else ''
        body.append(f'<tr{marker}>' + ''.join(f'<td>{_text(v)}</td>' for v in row) + '</tr>')
    return f'<table><tr>{head}</tr>{"".join(body)}</table>'


def figure(path: Path, caption: str = '') -> str:
    """Return an ``<figure>`` with the PNG at ``path`` embedded (or a note if it is missing)."""
    path = Path(path)
    caption_html = f'<figcaption>{html.escape(caption or path.name)}</figcaption>'
    try:
        data = path.read_bytes()
    except OSError:
        return f'<p class="missing">missing figure: {html.escape(str(path))}</p>'
    kind = 'png'
    if len(data) > _JPEG_ABOVE_BYTES:   # photographs: JPEG keeps the page small
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        ok, encoded = (cv2.imencode('.jpg', image, [cv2.IMWRITE_JPEG_QUALITY, 85])
                       if image is not None else (False, None))
        if ok and len(encoded) < len(data):
            data, kind = encoded.tobytes(), 'jpeg'
    text = base64.b64encode(data).decode('ascii')
    return (f'<figure><img alt="{html.escape(path.name)}" src="data:image/{kind};base64,{text}">'
            f'{caption_html}</figure>')


def page(title: str, subtitle: str, blocks: Sequence[str]) -> str:
    """Return a complete HTML document with ``blocks`` (HTML fragments) in order."""
    stamp = datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>'
            f'<h1>{html.escape(title)}</h1><p class="sub">{html.escape(subtitle)} '
            f'&middot; written {html.escape(stamp)}</p>' + '\n'.join(blocks) + '</body></html>')


def heading(text: str) -> str:
    """Return a section heading."""
    return f'<h2>{html.escape(text)}</h2>'


def paragraph(text: str, kind: str = '') -> str:
    """Return a paragraph; ``kind`` is '' , 'verdict' or 'warn'."""
    marker = f' class="{kind}"' if kind else ''
    return f'<p{marker}>{html.escape(text)}</p>'


def provenance(command: Optional[str], config: Optional[Mapping[str, Any]],
               defaults: Optional[Mapping[str, Any]] = None) -> list:
    """Return the blocks naming the exact command and the configuration that produced a run.

    Args:
        command: the command line (None: not known).
        config: the flat configuration used (None: not known).
        defaults: the flat defaults; keys whose value differs are listed first.
    """
    blocks = [heading('How this was produced')]
    blocks.append(f'<pre>{html.escape(command or "(command not recorded)")}</pre>')
    if config:
        defaults = defaults or {}
        changed = [(k, v, defaults.get(k)) for k, v in sorted(config.items())
                   if k in defaults and defaults[k] != v]
        if changed:
            blocks.append('<p>Configuration values that differ from the defaults:</p>')
            blocks.append(table(('key', 'value', 'default'),
                                [(k, _short(v), _short(d)) for k, v, d in changed]))
        else:
            blocks.append('<p>Configuration: the defaults.</p>')
        every = table(('key', 'value'), [(k, _short(v)) for k, v in sorted(config.items())])
        blocks.append(f'<details><summary>every configuration value</summary>{every}</details>')
    return blocks


def _percent(fraction: Any) -> Optional[float]:
    """Return ``100 * fraction``, None for None (NaN written to JSON) or non-numbers."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        return None
    return 100.0 * fraction


def _short(value: Any, limit: int = 80) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _figures(output_dir: Path, outputs: Mapping[str, str]) -> list:
    """Return the figures of a run's ``outputs`` (name -> relative file) that are PNGs."""
    return [figure(output_dir / relative, name.replace('_', ' '))
            for name, relative in outputs.items() if str(relative).endswith('.png')]


def _problems(summary: Mapping[str, Any]) -> list:
    errors = summary.get('errors') or []
    if not errors:
        return []
    items = ''.join(f'<li>{html.escape(str(e))}</li>' for e in errors[:50])
    more = f'<p>... and {len(errors) - 50} more (summary.json)</p>' if len(errors) > 50 else ''
    return [heading(f'Problems met ({summary.get("num_errors", len(errors))})'),
            f'<ul>{items}</ul>{more}']


def eval_report(summary: Mapping[str, Any], output_dir: Path, command: Optional[str] = None,
                config: Optional[Mapping[str, Any]] = None,
                defaults: Optional[Mapping[str, Any]] = None) -> str:
    """Return the report of an ``eval`` or ``replay`` run from its ``summary.json`` dict.

    Args:
        summary: the run's summary (``relperception.pipeline.offline_eval.evaluate_bag``'s
            result, or ``replay``'s, which adds ``output_topics``).
        output_dir: the run's folder; the PNGs its ``outputs`` name are embedded.
        command: the command line that produced it.
        config: the flat configuration used.
        defaults: the flat defaults (values that differ are listed first).
    """
    output_dir = Path(output_dir)
    live = 'output_topics' in summary
    title = f'{"replay" if live else "eval"}: {Path(str(summary.get("bag", "?"))).name}'
    ate = summary.get('ate_rmse_m')
    tracked = (f'{_frames_with_pose(summary)} of {summary.get("frames_processed", "?")} frames '
               f'with a pose, {_text(summary.get("timing_median_ms"))} ms per frame (median)')
    odometry = f'{summary.get("mode", "?")} visual odometry with {summary.get("matcher", "?")}'
    key = (f'{odometry}: ATE {_text(ate)} m ({summary.get("alignment", "?")}), drift '
           f'{_text(summary.get("drift_percent"))} %, {tracked}' if ate is not None else
           f'{odometry}: no trajectory scored (no ground-truth poses matched), {tracked}')
    dense = dense_key_figures(summary.get('dense'))
    blocks = ([paragraph(dense, 'verdict')] if dense else []) + [paragraph(key, 'verdict')]
    if not summary.get('complete', True):
        blocks.append(paragraph('The bag was damaged or processing stopped early: the '
                                'results are partial.', 'warn'))
    metric_rows = [
        ('ATE RMSE', summary.get('ate_rmse_m'), 'm'),
        ('ATE median', summary.get('ate_median_m'), 'm'),
        ('RPE translation RMSE', summary.get('rpe_trans_rmse_m'), 'm'),
        ('RPE rotation RMSE', summary.get('rpe_rot_rmse_deg'), 'deg'),
        ('drift', summary.get('drift_percent'), '%'),
        ('alignment', summary.get('alignment'), ''),
        ('scale (alignment)', summary.get('scale'), ''),
        ('path length', summary.get('path_length_m'), 'm'),
        ('frames processed / with a pose / lost', f'{summary.get("frames_processed")} / '
         f'{_frames_with_pose(summary)} / {summary.get("frames_lost")}', ''),
        ('poses the metrics are taken over (with ground truth)',
         summary.get('num_poses_matched'), ''),
        ('frames with a pose: tracked / initialised / re-initialised',
         f'{summary.get("frames_tracked")} / {summary.get("frames_initialized", "?")} / '
         f'{summary.get("reinitializations")}', ''),
        ('keyframes', summary.get('keyframes'), ''),
        ('time per frame median / p95', f'{_text(summary.get("timing_median_ms"))} / '
         f'{_text(summary.get("timing_p95_ms"))}', 'ms'),
        ('tracking median (without keyframe wait)', summary.get('tracking_median_ms'), 'ms'),
    ]
    blocks += [heading('Trajectory metrics'),
               table(('metric', 'value', 'unit'),
                     [r for r in metric_rows if r[1] is not None])]
    sources = summary.get('frames_by_scale_source') or {}
    if sources:
        blocks += ['<p>Frames by scale source:</p>',
                   table(('scale source', 'frames'), sorted(sources.items()))]
    local_map = summary.get('local_map') or {}
    if local_map:
        blocks += ['<details><summary>local map and bundle adjustment</summary>'
                   + table(('counter', 'value'), sorted(local_map.items())) + '</details>']
    if live:
        fields = ('frames_in', 'frames_out', 'dropped_frames', 'latency_ms_median',
                  'latency_ms_p95')
        blocks += [heading('Live replay: frames, drops, end-to-end latency (ms)'),
                   table(('topic',) + fields,
                         [(topic,) + tuple(stats.get(f) for f in fields)
                          for topic, stats in sorted(summary['output_topics'].items())])]
    outputs = summary.get('outputs') or {}
    dense_outputs = {k: v for k, v in outputs.items()
                     if k.startswith('dense_') or k == 'confusion_matrix'}
    blocks += [heading('Plots')] + _figures(
        output_dir, {k: v for k, v in outputs.items() if k not in dense_outputs})
    blocks += _dense_blocks(summary.get('dense') or {})
    blocks += _figures(output_dir, dense_outputs)
    blocks += _problems(summary)
    blocks += provenance(command, config, defaults)
    return page(title, f'bag {summary.get("bag", "?")}', blocks)


def _dense_blocks(dense: Mapping[str, Any]) -> list:
    if not dense:
        return []
    blocks = [heading(f'Dense model: {dense.get("model", "?")}')]
    if dense.get('skipped'):
        return blocks + [paragraph(str(dense['skipped']), 'warn')]
    depth = dense.get('depth') or {}
    if depth:
        blocks += ['<p>Depth (alignment: '
                   f'{html.escape(str(dense.get("depth_alignment", "?")))}):</p>',
                   table(('metric', 'value'),
                         [(k, v) for k, v in depth.items() if isinstance(v, (int, float))])]
    segmentation = dense.get('segmentation') or {}
    if segmentation:
        blocks.append(paragraph(f'mIoU {_text(_percent(segmentation.get("miou")))} %, '
                                'pixel accuracy '
                                f'{_text(_percent(segmentation.get("pixel_accuracy")))} %'))
        iou = segmentation.get('per_class_iou') or {}
        accuracy = segmentation.get('per_class_accuracy') or {}
        blocks.append(table(('class', 'IoU %', 'accuracy %'),
                            [(name, _percent(value), _percent(accuracy.get(name)))
                             for name, value in iou.items()]))
    return blocks


def demo_report(summaries: Mapping[str, Mapping[str, Any]],
                dense: Optional[Mapping[str, Any]], output_dir: Path,
                command: Optional[str] = None) -> str:
    """Return the HTML report of ``relperception demo``: every run side by side.

    Args:
        summaries: run folder name (``rgbd``, ``mono``, ``mono_loftr``) -> its ``eval``
            summary; each folder holds that run's own ``report.html``.
        dense: the dense evaluation's summary (its ``outputs`` relative to ``output_dir /
            'dense'``), or None.
        output_dir: the demo folder (``trajectory.png`` is embedded).
        command: the command line that produced it.
    """
    output_dir = Path(output_dir)
    rows, verdicts = [], []
    for name, summary in summaries.items():
        rows.append((name, summary.get('mode'), summary.get('matcher'), summary.get('alignment'),
                     summary.get('ate_rmse_m'), summary.get('drift_percent'),
                     f'{_frames_with_pose(summary)} / {summary.get("frames_processed", "?")}',
                     summary.get('timing_median_ms')))
        verdicts.append(f'{name}: {summary.get("mode")} visual odometry with '
                        f'{summary.get("matcher")}, ATE {_text(summary.get("ate_rmse_m"))} m '
                        f'({summary.get("alignment")})')
    blocks = [paragraph('; '.join(verdicts), 'verdict')]
    if dense:
        blocks.append(paragraph(dense_key_figures(dense), 'verdict'))
    blocks += [heading('Visual odometry on the synthetic recording'),
               table(('run (folder, with its own report.html)', 'mode', 'matcher', 'alignment',
                      'ATE RMSE m', 'drift %', 'frames with a pose', 'ms per frame'), rows),
               figure(output_dir / 'trajectory.png',
                      'every run against the exact ground truth (monocular runs aligned with '
                      'Sim(3): they have no metric scale)')]
    if dense:
        blocks.append(heading(f'Dense model {dense.get("model", "?")}: predicted depth'))
        samples = [value for key, value in sorted((dense.get('outputs') or {}).items())
                   if key.startswith('dense_sample_depth')]
        blocks += [figure(output_dir / 'dense' / sample, 'input | predicted depth | ground '
                          'truth') for sample in samples[:3]]
    blocks += provenance(command, None)
    return page('demo: synthetic recording', 'relperception demo', blocks)


def write_report(output_dir: Path, text: str) -> Path:
    """Write ``text`` to ``output_dir / report.html`` atomically and return the path."""
    path = Path(output_dir) / REPORT_NAME
    write_text_atomic(path, text)
    return path


def pairs_verdicts(summaries: Mapping[str, Mapping[str, Any]],
                   criterion: str = 'auc@10') -> list:
    """Return one sentence per pair group naming the matcher with the highest ``criterion``.

    Args:
        summaries: ``eval-pairs`` summaries keyed ``'<matcher> | <group>'`` (each with
            ``matcher``, ``pairs``, the AUCs and ``match_ms_median``).
        criterion: the summary key ranked (higher is better); ties go to the faster matcher.
    """
    groups: dict = {}
    for summary in summaries.values():
        groups.setdefault(summary.get('pairs', '?'), []).append(summary)
    sentences = []
    for group, runs in groups.items():
        runs = sorted(runs, key=lambda s: (-float(s.get(criterion, 0.0)),
                                           float(s.get('match_ms_median', math.inf))))
        best = runs[0]
        text = (f'{group}: {best.get("matcher")} has the highest pose {criterion.upper()} '
                f'({100 * float(best.get(criterion, 0.0)):.1f} %, '
                f'{float(best.get("match_ms_median", math.nan)):.1f} ms per pair)')
        if len(runs) > 1:
            second = runs[1]
            text += (f', ahead of {second.get("matcher")} '
                     f'({100 * float(second.get(criterion, 0.0)):.1f} %, '
                     f'{float(second.get("match_ms_median", math.nan)):.1f} ms)')
        sentences.append(text + '.')
    return sentences


def pairs_report(results: Mapping[str, Any], output_dir: Path,
                 command: Optional[str] = None) -> str:
    """Return the report of an ``eval-pairs`` run from its ``pairs_results.json`` dict."""
    output_dir = Path(output_dir)
    summaries = results.get('summaries') or {}
    blocks = [paragraph(s, 'verdict') for s in pairs_verdicts(summaries)]
    failed = results.get('failed_matchers') or {}
    for name, why in failed.items():
        blocks.append(paragraph(f'{name} was not evaluated: {why}', 'warn'))
    columns = ('matcher | pairs', 'AUC@5 %', 'AUC@10 %', 'AUC@20 %', 'epipolar precision %',
               'matches (mean)', 'pose failures', 'of them degenerate', 'ms per pair', 'pairs')
    rows = [(key, _percent(s.get('auc@5')), _percent(s.get('auc@10')),
             _percent(s.get('auc@20')), _percent(s.get('epi_precision')),
             s.get('matches_mean'), s.get('pose_failures'), s.get('pose_degenerate', 0),
             s.get('match_ms_median'), s.get('num_pairs')) for key, s in summaries.items()]
    blocks += [heading('Pose AUC and matches'), table(columns, rows),
               figure(output_dir / 'pairs_auc.png', 'pose AUC per matcher and pair group')]
    drawings = [(key, row) for key, rows_ in (results.get('rows') or {}).items()
                for row in rows_ if row.get('drawing')]
    if drawings:
        blocks.append(heading('Matches drawn (green: right by the ground-truth epipolar '
                              'distance, red: wrong)'))
        blocks += [figure(output_dir / 'match_drawings' / row['drawing'],
                          f'{key}: {row.get("name", "")}') for key, row in drawings]
    protocol = results.get('protocol') or {}
    if protocol:
        blocks += [heading('Protocol'), table(('setting', 'value'), sorted(protocol.items()))]
    blocks += provenance(command, None)
    groups = results.get('groups') or {}
    return page('eval-pairs', f'{len(groups)} pair groups, '
                f'{sum(groups.values())} pairs, matchers {", ".join(results.get("matchers", []))}',
                blocks)


def study_report(rows: Sequence[Mapping[str, Any]], aggregates: Sequence[Mapping[str, Any]],
                 recommendation: str, front: Sequence[str], output_dir: Path,
                 command: Optional[str] = None, pareto_png: Optional[Path] = None) -> str:
    """Return the report of a ``compare`` study.

    Args:
        rows: one per cell (``relperception.pipeline.study.run_study``).
        aggregates: per configuration (``relperception.evaluation.study_report.aggregate``).
        recommendation: the recommendation line with its criterion.
        front: the configurations on the accuracy / time Pareto front.
        output_dir: the study folder (cell folders are linked relative to it).
        command: the command line.
        pareto_png: the accuracy-against-time plot to embed, if written.
    """
    blocks = [paragraph(recommendation, 'verdict')]
    if front:
        blocks.append(paragraph('Pareto front (no other configuration is both more accurate '
                                'and faster): ' + ', '.join(front) + '.'))
    names = [a['config'] for a in aggregates]
    best = best_configuration(aggregates)
    blocks += [heading('Configurations'), paragraph(comparison_note(aggregates)),
               table(('configuration', 'cells ok', 'failed', 'ATE m', 'drift %', 'RPE m',
                      'ms per frame', 'tracking ms', 'frames lost', 'mean rank'),
                     [(a['config'], a['ok'], a['failed'], a.get('ate_rmse_m_median_common'),
                       a.get('drift_percent_median_common'),
                       a.get('rpe_trans_rmse_m_median_common'),
                       a.get('timing_median_ms_median_common'),
                       a.get('tracking_median_ms_median_common'),
                       a.get('frames_lost_median_common'), a.get('mean_rank'))
                      for a in aggregates],
                     best_row=names.index(best) if best is not None else None)]
    if any(a.get(f'{m}_median') is not None for a in aggregates
           for m in ('dense_miou', 'dense_abs_rel')):
        blocks += [heading('Dense model (--dense; medians over the bags where every '
                           'configuration has the figure)'),
                   table(('configuration', 'mIoU %', 'pixel accuracy %', 'AbsRel', 'delta1',
                          'ms per image'),
                         [(a['config'], _percent(a.get('dense_miou_median_common')),
                           _percent(a.get('dense_pixel_accuracy_median_common')),
                           a.get('dense_abs_rel_median_common'),
                           a.get('dense_delta1_median_common'),
                           a.get('dense_ms_median_median_common')) for a in aggregates])]
    if pareto_png is not None:
        blocks.append(figure(pareto_png, 'median ATE against median time per frame'))
    cell_rows = []
    for row in rows:
        folder = str(row.get('cell_dir', ''))
        try:
            folder = Path(folder).relative_to(Path(output_dir)).as_posix() if folder else ''
        except ValueError:
            pass   # a cell folder outside the study folder: linked as it is
        target = 'summary.json' if (Path(output_dir) / folder / 'summary.json').is_file() \
            else 'cell.json'   # a cell that failed before eval wrote anything
        link = (f'<a href="{html.escape(folder)}/{target}">{html.escape(folder)}</a>'
                if folder else '')
        cell_rows.append('<tr>' + ''.join(f'<td>{_text(v)}</td>' for v in (
            row.get('bag'), row.get('config'), row.get('status'), row.get('ate_rmse_m'),
            row.get('drift_percent'), row.get('timing_median_ms'),
            _short(row.get('error') or '', 120))) + f'<td>{link}</td></tr>')
    names = ('bag', 'configuration', 'status', 'ATE m', 'drift %', 'ms per frame', 'error',
             'cell')
    head = ''.join(f'<th>{c}</th>' for c in names)
    blocks += [heading(f'Cells ({len(rows)})'),
               f'<table><tr>{head}</tr>{"".join(cell_rows)}</table>']
    blocks += provenance(command, None)
    bags = len({r.get('bag') for r in rows})
    return page('compare', f'{bags} bags x {len(aggregates)} configurations', blocks)
