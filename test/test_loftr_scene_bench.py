# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``bench/loftr_scene_bench.py``: real-vs-real unrelated pairs and their table columns."""

from pathlib import Path

from conftest import bench_module
import cv2
import numpy as np
import pytest


@pytest.fixture(scope='module')
def bench():
    """Return the bench module."""
    with bench_module('loftr_scene_bench') as module:
        yield module


def write_recording(folder: Path, size, count: int, value: int):
    """Write ``count`` grey PNG frames of ``size`` (H, W) filled with ``value`` + index."""
    folder.mkdir(parents=True)
    for k in range(count):
        cv2.imwrite(str(folder / f'{k:06d}.png'), np.full(size, value + k, np.uint8))


def test_load_grey_4x3_crops_the_centre_before_resizing(bench, tmp_path):
    image = np.zeros((376, 1241), np.uint8)        # KITTI's size: wider than 4:3
    image[:, 620 - 250:620 + 251] = 200             # the 4:3 centre (376 x 501) is bright
    path = tmp_path / 'kitti.png'
    cv2.imwrite(str(path), image)
    grey = bench.load_grey_4x3(path)
    assert grey.shape == bench.SIZE and grey.dtype == np.uint8
    assert grey[:, 2:-2].min() == 200               # nothing of the dark sides is left
    with pytest.raises(ValueError, match='not a readable image'):
        (tmp_path / 'text.png').write_text('no image')
        bench.load_grey_4x3(tmp_path / 'text.png')


def test_real_pairs_take_two_different_recordings(bench, tmp_path):
    tum, camvid, kitti06, _ = bench.REAL_SOURCES
    write_recording(tmp_path / tum, (480, 640), 3, 10)
    write_recording(tmp_path / camvid, (360, 480), 3, 100)
    write_recording(tmp_path / kitti06, (376, 1241), 3, 200)
    pairs = bench.real_unrelated_pairs(tmp_path, 7, np.random.default_rng(0))
    assert len(pairs) == 7
    used = set()
    for name, image0, image1 in pairs:
        assert name.startswith('real:')
        assert image0.shape == image1.shape == bench.SIZE
        # the fill values tell the recordings apart: 10-12 TUM, 100-102 CamVid, 200-202 KITTI
        source0, source1 = int(image0[0, 0]) // 100, int(image1[0, 0]) // 100
        assert source0 != source1
        used.add((source0, source1))
    assert len(used) == 3                            # every combination of the three appears


def test_real_pairs_need_two_recordings(bench, tmp_path, caplog):
    write_recording(tmp_path / bench.REAL_SOURCES[0], (480, 640), 2, 10)
    assert bench.real_unrelated_pairs(tmp_path, 5, np.random.default_rng(0)) == []
    assert 'fewer than two real recordings' in caplog.text


def test_table_reports_real_pairs_apart(bench):
    counts = {'m': [{'name': 'synthetic1 vs synthetic2', 'matches': 3},
                    {'name': 'synthetic2 vs tum:x.png', 'matches': 5},
                    {'name': 'test_shipped_loftr_weights room vs texture', 'matches': 2},
                    {'name': 'real:tum:a vs camvid:b', 'matches': 30},
                    {'name': 'real:kitti:c vs camvid:d', 'matches': 10}]}
    header, row = bench.format_unrelated_table(counts).splitlines()
    assert header.split()[:5] == ['matcher', 'median', 'mean', 'max', 'pairs']
    # synthetic: median 4, mean 4.0, max 5, 2 pairs; real: median 20, mean 20.0, max 30, 2 pairs
    assert row.split() == ['m', '4', '4.0', '5', '2', '20', '20.0', '30', '2', '2']
    no_real = bench.format_unrelated_table({'m': counts['m'][:3]}).splitlines()[1].split()
    assert no_real[5:] == ['-', '-', '-', '0', '2']
