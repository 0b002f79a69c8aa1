# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""report.html: self-contained, written by eval / eval-pairs, and rendered by a real browser."""

import json
from pathlib import Path
import re
import shutil
import subprocess

import cv2
import numpy as np
import pytest
from relperception.cli.main import main
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.evaluation.html_report import pairs_verdicts

CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')


@pytest.fixture(scope='module')
def eval_run(tmp_path_factory):
    """``relperception eval`` of a short synthetic bag, with plots."""
    root = tmp_path_factory.mktemp('report')
    bag = root / 'bag'
    write_synthetic_bag(bag, frames=20, width=320, height=240)
    output = root / 'eval'
    assert main(['eval', str(bag), '--mode', 'mono', '-o', str(output), '--no-progress']) == 0
    return output


def _embedded_images(text: str) -> list:
    return re.findall(r'src="data:image/(png|jpeg);base64,', text)


def test_eval_report_is_self_contained(eval_run):
    text = (eval_run / 'report.html').read_text()
    summary = json.loads((eval_run / 'summary.json').read_text())
    pngs = [v for v in summary['outputs'].values() if v.endswith('.png')]
    assert len(pngs) >= 2 and len(_embedded_images(text)) == len(pngs)
    # nothing fetched from elsewhere: every src is inline data, no stylesheet or script links
    assert re.findall(r'src="(?!data:)', text) == []
    assert '<link' not in text and '<script' not in text
    assert f'{summary["ate_rmse_m"]:.4g}' in text
    # how many poses the ATE, RPE and drift were taken over
    assert re.search(r'poses the metrics are taken over \(with ground truth\)</td><td>'
                     f'{summary["num_poses_matched"]}<', text)
    assert 'relperception eval ' in text and '--mode mono' in text
    assert 'Configuration: the defaults.' in text


def test_the_key_figures_say_what_was_scored(tmp_path):
    from relperception.evaluation.html_report import eval_report, write_report

    summary = {'bag': 'labelled_images', 'mode': 'mono', 'matcher': 'ncc', 'ate_rmse_m': None,
               'frames_tracked': 38, 'frames_initialized': 1, 'reinitializations': 0,
               'frames_lost': 1, 'frames_processed': 40, 'timing_median_ms': 70.0,
               'outputs': {}, 'dense': {
                   'model': 'fast_seg', 'frames_evaluated': 40, 'depth': None,
                   'segmentation': {'miou': 0.677, 'pixel_accuracy': 0.927}}}
    text = write_report(tmp_path, eval_report(summary, tmp_path, 'relperception eval x', {},
                                              {})).read_text()
    verdicts = re.findall(r'class="verdict">([^<]*)<', text)
    assert verdicts == ['dense model fast_seg on 40 frames: segmentation mIoU 67.7 %, pixel '
                        'accuracy 92.7 %',
                        'mono visual odometry with ncc: no trajectory scored (no ground-truth '
                        'poses matched), 39 of 40 frames with a pose, 70 ms per frame (median)']
    assert 'ATE None' not in text


def test_pairs_report_and_verdict(tmp_path):
    output = tmp_path / 'pairs'
    assert main(['eval-pairs', '--synthetic', '2', '--synthetic-size', '320', '240',
                 '--matchers', 'ncc', 'orb', '-o', str(output), '--no-progress']) == 0
    text = (output / 'report.html').read_text()
    results = json.loads((output / 'pairs_results.json').read_text())
    assert len(_embedded_images(text)) == 1 + 2 * 2   # AUC plot + 2 drawings per matcher
    for sentence in pairs_verdicts(results['summaries']):
        assert sentence in text


def test_pairs_verdict_ranks_by_auc_then_time():
    summaries = {'a | g': {'matcher': 'a', 'pairs': 'g', 'auc@10': 0.5, 'match_ms_median': 9},
                 'b | g': {'matcher': 'b', 'pairs': 'g', 'auc@10': 0.5, 'match_ms_median': 3},
                 'c | g': {'matcher': 'c', 'pairs': 'g', 'auc@10': 0.2, 'match_ms_median': 1},
                 'c | h': {'matcher': 'c', 'pairs': 'h', 'auc@10': 0.9, 'match_ms_median': 1}}
    g, h = pairs_verdicts(summaries)
    assert g.startswith('g: b has the highest pose AUC@10 (50.0 %, 3.0 ms per pair), '
                        'ahead of a')
    assert h == 'h: c has the highest pose AUC@10 (90.0 %, 1.0 ms per pair).'


def _coloured_fraction(screenshot: Path) -> float:
    image = cv2.imread(str(screenshot))
    assert image is not None
    hsv = cv2.cvtColor(image, cv2.COLOR_BGR2HSV)
    return float(np.mean((hsv[..., 1] > 80) & (hsv[..., 2] > 60)))


@pytest.mark.skipif(CHROMIUM is None, reason='no Chromium (Debian: apt install chromium)')
def test_a_real_browser_shows_the_plots(eval_run, tmp_path):
    """Headless Chromium renders the page offline; the plots show (broken images would not)."""
    broken = tmp_path / 'broken.html'
    broken.write_text(re.sub(r'base64,[A-Za-z0-9+/=]+', 'base64,AAAA',
                             (eval_run / 'report.html').read_text()))
    fractions = []
    for page in (eval_run / 'report.html', broken):
        shot = tmp_path / f'{page.stem}.png'
        subprocess.run([CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu',
                        '--disable-features=NetworkService', '--proxy-server=127.0.0.1:9',
                        f'--screenshot={shot}', '--window-size=1300,2600',
                        page.resolve().as_uri()],
                       check=True, timeout=120, capture_output=True)
        fractions.append(_coloured_fraction(shot))
    assert fractions[0] > 0.002 and fractions[0] > 5 * fractions[1], fractions


def test_a_figure_that_was_not_computed_reads_n_a_not_none():
    # a compare report of a fleet with broken bags had 86 cells reading 'None'
    from relperception.evaluation.html_report import table

    rows = [('failed', None, False), ('ok', float('nan'), True)]
    text = table(('configuration', 'ATE m', 'converged'), rows)
    assert 'None' not in text
    assert '<td>failed</td><td>n/a</td><td>False</td>' in text
    assert '<td>ok</td><td>n/a</td><td>True</td>' in text
