# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The README's "use on your own data" examples, run as written on datasets in official layouts.

The two example blocks of the README are read from the README itself (so the test follows it),
and every command runs in a shell whose ``HOME`` holds generated miniatures of the layouts the
README names: a TUM RGB-D sequence folder (``rgb/``, ``depth/``, ``rgb.txt``, ``depth.txt``,
``groundtruth.txt``) under ``~/data``, the KITTI odometry download (``kitti/sequences/06`` with
``kitti/poses/06.txt``), a recording ``my.bag`` with depth and labels and a ``photos/`` folder.
The frames are rendered synthetic scenes, so the commands have something to track. Only the two
lines that need official third-party weights files are left out (no weights can be downloaded
here); the loaders of those files have their own parity tests.
"""

from pathlib import Path
import re
import subprocess
import sys

import cv2
import numpy as np
import pytest
from relperception.data.synthetic import iter_sequence
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.transforms import invert_transform, quaternion_xyzw_from_transform

README = Path(__file__).resolve().parents[1] / 'README.md'
#: Lines that need a third-party weights file (not downloadable here), by the file they name.
NEEDS_OFFICIAL_WEIGHTS = ('depth_anything_v2_vits.pth', 'loftr_outdoor.ckpt')
FRAMES = 10


def readme_blocks() -> list:
    """Return the command lines of the README's two "own data" example blocks."""
    text = README.read_text(encoding='utf-8')
    lines = []
    for heading in ('Use on your own data:', 'Choose what to see with, on your own recording:'):
        block = re.search(re.escape(heading) + r'\s*```bash\n(.*?)```', text, re.S)
        assert block, f'README block after {heading!r} not found'
        lines += [line for line in block.group(1).splitlines()
                  if line.strip() and not line.lstrip().startswith('#')]
    return lines


def _write_tum(folder: Path, frames) -> None:
    (folder / 'rgb').mkdir(parents=True)
    (folder / 'depth').mkdir()
    rgb_list, depth_list, truth = ['# color images'], ['# depth maps'], ['# ground truth']
    T_cam0_world = invert_transform(frames[0].T_world_cam)
    for frame in frames:
        stamp = f'{frame.stamp_ns / 1e9:.6f}'
        cv2.imwrite(str(folder / 'rgb' / f'{stamp}.png'),
                    cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2BGR))
        depth_stamp = f'{frame.stamp_ns / 1e9 + 0.004:.6f}'   # a few ms off, as recorded
        raw = np.nan_to_num(frame.depth * 5000.0).clip(0, 65535).astype(np.uint16)
        cv2.imwrite(str(folder / 'depth' / f'{depth_stamp}.png'), raw)
        rgb_list.append(f'{stamp} rgb/{stamp}.png')
        depth_list.append(f'{depth_stamp} depth/{depth_stamp}.png')
        T = T_cam0_world @ frame.T_world_cam
        q = quaternion_xyzw_from_transform(T)
        truth.append(f'{stamp} ' + ' '.join(f'{v:.6f}' for v in [*T[:3, 3], *q]))
    for name, lines in (('rgb.txt', rgb_list), ('depth.txt', depth_list),
                        ('groundtruth.txt', truth)):
        (folder / name).write_text('\n'.join(lines) + '\n')


def _write_kitti(root: Path, camera, frames) -> None:
    sequence = root / 'sequences' / '06'
    (sequence / 'image_0').mkdir(parents=True)
    (root / 'poses').mkdir()
    T_cam0_world = invert_transform(frames[0].T_world_cam)
    poses, times = [], []
    for i, frame in enumerate(frames):
        cv2.imwrite(str(sequence / 'image_0' / f'{i:06d}.png'),
                    cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2GRAY))
        poses.append(' '.join(f'{v:.9e}' for v in (T_cam0_world @ frame.T_world_cam)[:3]
                              .reshape(-1)))
        times.append(f'{(frame.stamp_ns - frames[0].stamp_ns) / 1e9:.6e}')
    P0 = np.hstack([camera.K, np.zeros((3, 1))])
    calib = [f'P{k}: ' + ' '.join(f'{v:.12e}' for v in P0.reshape(-1)) for k in range(4)]
    (sequence / 'calib.txt').write_text('\n'.join(calib) + '\n')
    (sequence / 'times.txt').write_text('\n'.join(times) + '\n')
    (root / 'poses' / '06.txt').write_text('\n'.join(poses) + '\n')


@pytest.fixture(scope='module')
def home(tmp_path_factory):
    """Return a HOME with the README's data in the official layouts (see the module doc)."""
    home = tmp_path_factory.mktemp('home')
    camera, frames = iter_sequence(FRAMES, seed=0, width=640, height=480)
    frames = list(frames)
    _write_tum(home / 'data' / 'rgbd_dataset_freiburg3_long_office_household', frames)
    _write_kitti(home / 'data' / 'kitti', camera, frames)
    work = home / 'work'
    write_synthetic_bag(work / 'my.bag', frames=FRAMES, width=320, height=240)
    (work / 'photos').mkdir()
    for i, frame in enumerate(frames[:2]):
        cv2.imwrite(str(work / 'photos' / f'photo{i}.png'),
                    cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2BGR))
    return home


def _cli() -> str:
    """Return how the README's ``.venv/bin/relperception`` is spelled in this environment."""
    script = Path(sys.executable).with_name('relperception')
    if script.is_file():
        return str(script)
    return f'{sys.executable} -m relperception.cli.main'


def test_readme_has_the_examples():
    lines = readme_blocks()
    assert len(lines) >= 14
    assert any('convert kitti' in line for line in lines)
    assert sum(name in line for line in lines for name in NEEDS_OFFICIAL_WEIGHTS) == 2


def test_readme_examples_run_as_written(home):
    """Every example command exits 0 in order, each writing what the next one reads."""
    environment = {'HOME': str(home), 'PATH': '/usr/bin:/bin', 'PYTHONUNBUFFERED': '1',
                   'OMP_NUM_THREADS': '1'}
    ran = []
    for line in readme_blocks():
        if any(name in line for name in NEEDS_OFFICIAL_WEIGHTS):
            continue
        command = line.replace('.venv/bin/relperception', _cli())
        result = subprocess.run(['bash', '-c', command], cwd=home / 'work', env=environment,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f'{line}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}'
        ran.append(line)
    work = home / 'work'
    for produced in ('results/fr3/report.html', 'results/kitti06/summary.json',
                     'results/kitti06_mono/summary.json', 'results/pairs/report.html',
                     'results/loftr/summary.json', 'results/vit/summary.json',
                     'results/dense_vo/summary.json', 'fast_seg.onnx',
                     'results/ort_eval/summary.json', 'loftr_lite.onnx',
                     'loftr_lite.fine.onnx'):
        assert (work / produced).is_file(), produced
    assert list((work / 'results' / 'ort').glob('*_depth.npy'))
    assert len(ran) == len(readme_blocks()) - 2
