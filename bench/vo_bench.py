# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""VO benchmark: monocular VO without scale against classical peers, and the step-length table.

Two tables, each measured in one run, printed as ratios so that they do not depend on how fast
this machine is.

**Monocular, no ground-truth scale** (the principal comparison): on the demo recording
(``make demo``'s 100 synthetic frames), a long synthetic recording (600 frames at 10 Hz, the
cruise speed changing ~3x, 1.6 loops of turns), and KITTI 06 / 01 when ``../shared/data`` is
present:

* ``ncc_map``: ours, ``relperception eval --mode mono`` (local map, PnP, bundle adjustment);
* ``ncc_constant_speed``: the previous tracker (``odometry.mono_map: false``: two-view steps
  whose length is the constant-speed extrapolation of the first), the regression reference;
* ``klt_f2f`` and ``orb_f2f``: frame-to-frame VO with KLT tracks or ORB matches whose relative
  scale comes from triangulating the points shared with the previous pair
  (``bench/classical_vo.py``), the classical peers.

Sim(3)-aligned ATE, KITTI-style drift (% of distance) and ms per frame; ``x best peer`` is the
ATE over the better of the two classical peers. ``scale %`` is how far the scale wanders: a
Sim(3) is fitted on each window of ``SCALE_WINDOW`` frames (windows whose ground-truth path is
shorter than ``SCALE_WINDOW_MIN_PATH_M`` are skipped) and the column gives the largest
``|s_window / s_first - 1|`` in percent (a global Sim(3) hides a scale that drifts and comes
back).

``--long FRAMES`` adds long synthetic recordings of FRAMES frames to that table, one per motion
regime (``LONG_REGIMES``: steady cruise, cruise speed changing 4x, cruise with stops of the
camera (image noise, so that a stopped camera does not see identical images) and slow motion at
30 Hz, little parallax per frame); every recording also turns (the path is a loop).

Ours gives two times: all of a frame's processing back to back (a frame after a keyframe waits
for that keyframe's background work), and the tracking path alone (what a frame costs when
frames arrive no faster than keyframes are completed, as from a live camera), with its ratio
to KLT frame-to-frame.

**Frame-to-frame with the ground-truth step length** (``--gt-scale``): NCC against pyramidal KLT
and ORB through the same pose step, on the synthetic 640x480 sequence, KITTI 06/01 and TUM fr3;
ratios against KLT.

Usage::

    .venv/bin/python bench/vo_bench.py [--data ../shared/data] [--output bench_output] \
        [--long 1500]
"""

import argparse
import json
import logging
from pathlib import Path
import sys
import tempfile
import time

import cv2
from evo.core.geometry import GeometryException, umeyama_alignment
import numpy as np

from relperception.config import load_config, section
from relperception.core_types import Frame
from relperception.data.bag import BagReader
from relperception.data.converters import convert_kitti, convert_tum
from relperception.data.messages import (camera_from_camera_info, decode_image_message,
                                         stamp_to_ns, transform_from_pose_msg)
from relperception.data.synthetic import iter_sequence, SyntheticScene
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.evaluation.trajectory import evaluate_trajectory, read_tum
from relperception.imaging.image_encodings import to_rgb8
from relperception.matching import build_matcher
from relperception.pipeline.offline_eval import evaluate_bag

sys.path.insert(0, str(Path(__file__).resolve().parent))
from classical_vo import FrameToFrameVO  # noqa: E402, I100

METHODS = ('ncc', 'klt', 'orb')
BASELINE = 'klt'
MONO_METHODS = ('ncc_map', 'ncc_constant_speed', 'klt_f2f', 'orb_f2f')
PEERS = ('klt_f2f', 'orb_f2f')
#: (frames, seed, speed ratio) of the synthetic recordings of the monocular table.
MONO_SYNTHETIC = {'demo_100': (100, 0, 1.0), 'long_600_speed3x': (600, 1, 4.0)}
#: ``--long`` regimes: name -> (seed, speed ratio, frame rate Hz, image noise grey levels, stops).
LONG_REGIMES = {
    'cruise': (10, 1.0, 10.0, 0.0, False),
    'speed4x': (11, 4.0, 10.0, 0.0, False),
    'stops': (12, 1.0, 10.0, 2.0, True),
    'slow30hz': (13, 1.0, 30.0, 0.0, False),
}
#: Stops of the ``stops`` regime: the camera moves this long (s), then holds still STOP_S.
MOVE_S, STOP_S = 20.0, 3.0
#: Frames per window of the windowed Sim(3) scale.
SCALE_WINDOW = 100
#: Windows whose ground-truth path is shorter than this (metres) have no scale.
SCALE_WINDOW_MIN_PATH_M = 0.5
REPO_ROOT = Path(__file__).resolve().parents[1]
DATASETS = {
    'kitti06': ('kitti', 'kitti_odometry_06_f0000-0050'),
    'kitti01': ('kitti', 'kitti_odometry_01_f0000-0050'),
    'tum_fr3_1hz': ('tum', 'tum_rgbd_fr3_long_office_household_1hz_17f'),
}


def make_bags(data_dir: Path, work: Path, synthetic_frames: int) -> dict:
    """Return {name: bag path} for the synthetic sequence and every dataset present."""
    bags = {}
    synthetic = work / 'synthetic_640x480'
    write_synthetic_bag(synthetic, frames=synthetic_frames, seed=0)
    bags['synthetic_640x480'] = synthetic
    for name, (kind, folder) in DATASETS.items():
        source = data_dir / folder
        if not source.is_dir():
            logging.warning('%s not found: skipping %s', source, name)
            continue
        convert = convert_kitti if kind == 'kitti' else convert_tum
        convert(source, work / name)
        bags[name] = work / name
    return bags


def motion_times(frames: int, fps: float) -> np.ndarray:
    """Return (frames,) seconds along the path of a camera that holds still STOP_S every MOVE_S.

    Frame ``i`` is recorded at ``i / fps``; the camera moves during the first MOVE_S of every
    ``MOVE_S + STOP_S`` and stands still (its path time does not advance) in the rest.
    """
    moving = (np.arange(frames) / fps) % (MOVE_S + STOP_S) < MOVE_S
    return np.concatenate([[0.0], np.cumsum(moving[1:]) / fps])


def long_poses(scene: SyntheticScene, frames: int, regime: str) -> np.ndarray:
    """Return the (frames, 4, 4) ``T_world_cam`` of one of ``LONG_REGIMES`` in ``scene``."""
    _, speed_ratio, fps, _, stops = LONG_REGIMES[regime]
    if not stops:
        return scene.trajectory(frames, fps, speed_ratio)
    motion_s = motion_times(frames, fps)   # poses from the path sampled at 100 Hz
    dense = scene.trajectory(int(round(motion_s[-1] * 100)) + 2, 100.0, speed_ratio)
    return dense[np.round(motion_s * 100).astype(int)]


def write_long_bag(output: Path, frames: int, regime: str) -> None:
    """Write a long synthetic recording of one of ``LONG_REGIMES`` (``write_synthetic_bag``)."""
    seed, _, fps, noise, _ = LONG_REGIMES[regime]
    poses = long_poses(SyntheticScene(seed=seed), frames, regime)
    write_synthetic_bag(output, seed=seed, fps=fps, noise=noise, poses=poses)


def _sim3_scale(source: np.ndarray, target: np.ndarray) -> float:
    """Return the scale of the Umeyama Sim(3) that maps points ``source`` (N, 3) onto ``target``.

    NaN where the fit is degenerate (e.g. every ``source`` point the same).
    """
    try:
        return float(umeyama_alignment(source.T, target.T, with_scale=True)[2])
    except GeometryException:
        return float('nan')


def window_scales(stamps_est, T_world_cam_est, stamps_gt, T_world_cam_gt,
                  window: int = SCALE_WINDOW,
                  min_path_m: float = SCALE_WINDOW_MIN_PATH_M) -> list:
    """Return the Sim(3) scale (ground truth / estimate) of each window of ``window`` frames.

    Args:
        stamps_est: (N,) int nanoseconds of the estimate.
        T_world_cam_est: (N, 4, 4) estimated poses (any unit).
        stamps_gt: (M,) int nanoseconds of the ground truth.
        T_world_cam_gt: (M, 4, 4) ground-truth poses (metres).
        window: consecutive estimated frames with ground truth per window.
        min_path_m: a window whose ground-truth path is shorter has scale None.

    Returns:
        One scale per whole window (None where not defined).
    """
    gt_index = {int(s): i for i, s in enumerate(stamps_gt)}
    pairs = [(i, gt_index[int(s)]) for i, s in enumerate(stamps_est) if int(s) in gt_index]
    est = np.asarray(T_world_cam_est)[[i for i, _ in pairs], :3, 3]
    gt = np.asarray(T_world_cam_gt)[[j for _, j in pairs], :3, 3]
    scales = []
    for start in range(0, len(pairs) - window + 1, window):
        e, g = est[start:start + window], gt[start:start + window]
        path = float(np.sum(np.linalg.norm(np.diff(g, axis=0), axis=1)))
        scale = _sim3_scale(e, g) if path >= min_path_m else float('nan')
        scales.append(scale if np.isfinite(scale) and scale > 0 else None)
    return scales


def scale_wander_percent(scales: list) -> float | None:
    """Return the largest ``|s / s_first - 1|`` (percent) over the defined window scales."""
    valid = np.array([s for s in scales if s is not None])
    if len(valid) < 2:
        return None
    return float(100.0 * np.max(np.abs(valid / valid[0] - 1.0)))


def read_bag(bag: Path):
    """Return frames (list of Frame), ground-truth stamps (N,) and poses (N, 4, 4) of a bag."""
    config = load_config()
    images, cameras, gt = {}, {}, {}
    with BagReader(bag) as reader:
        wanted = [config['topics.image'], config['topics.camera_info'],
                  config['topics.ground_truth_pose']]
        for message in reader.messages(wanted):
            stamp = stamp_to_ns(message.msg.header.stamp)
            if message.topic == config['topics.image']:
                array, encoding = decode_image_message(message.msg, message.msgtype)
                images[stamp] = np.ascontiguousarray(to_rgb8(array, encoding))
            elif message.topic == config['topics.camera_info']:
                cameras[stamp] = camera_from_camera_info(message.msg)
            else:
                gt[stamp] = transform_from_pose_msg(message.msg.pose)
    frames = [Frame(images[s], s, cameras[s]) for s in sorted(images) if s in cameras]
    stamps = np.array(sorted(gt), dtype=np.int64)
    return frames, stamps, np.stack([gt[s] for s in stamps])


def run_peer(name: str, bag: Path) -> dict:
    """Run a classical frame-to-frame peer over a bag; return ATE, drift and ms per frame."""
    matcher_name = name.split('_')[0]
    config = load_config()
    vo = FrameToFrameVO(build_matcher(matcher_name, section(config, matcher_name)),
                        config['odometry.ransac_threshold_px'])
    frames, gt_stamps, gt_poses = read_bag(bag)
    poses, times = [], []
    for frame in frames:
        start = time.perf_counter()
        poses.append(vo.step(frame))
        times.append((time.perf_counter() - start) * 1e3)
    stamps = np.array([f.stamp_ns for f in frames])
    result = evaluate_trajectory(stamps, np.stack(poses), gt_stamps, gt_poses, alignment='sim3')
    scales = window_scales(stamps, np.stack(poses), gt_stamps, gt_poses)
    return {'ate_rmse_m': result['ate_rmse_m'], 'drift_percent': result['drift_percent'],
            'scale_wander_percent': scale_wander_percent(scales),
            'ms_median': float(np.median(times[1:])),
            'tracking_ms_median': float(np.median(times[1:])), 'lost': 0}


def run_mono(data_dir: Path, work: Path, output: Path, long_frames: int = 0) -> list:
    """Return the rows of the monocular no-scale table (see the module docstring)."""
    bags = {}
    for name, (frames, seed, speed_ratio) in MONO_SYNTHETIC.items():
        bags[name] = work / name
        write_synthetic_bag(bags[name], frames=frames, seed=seed, speed_ratio=speed_ratio)
    if long_frames:
        for regime in LONG_REGIMES:
            name = f'long_{long_frames}_{regime}'
            bags[name] = work / name
            write_long_bag(bags[name], long_frames, regime)
    for name in ('kitti06', 'kitti01'):
        source = data_dir / DATASETS[name][1]
        if source.is_dir():
            bags[name] = work / f'mono_{name}'
            convert_kitti(source, bags[name])
    rows = []
    for dataset, bag in bags.items():
        per_method = {}
        for method in MONO_METHODS:
            logging.info('mono %s %s', dataset, method)
            if method in PEERS:
                per_method[method] = run_peer(method, bag)
                continue
            overrides = {'matcher': 'ncc',
                         'odometry.mono_map': method == 'ncc_map'}
            folder = output / 'mono' / dataset / method
            summary = evaluate_bag(bag, folder, load_config(overrides=overrides), mode='mono',
                                   progress=False, plots=True)
            scales = window_scales(*read_tum(folder / 'trajectory.tum'),
                                   *read_tum(folder / 'groundtruth.tum'))
            per_method[method] = {
                'ate_rmse_m': summary['ate_rmse_m'], 'drift_percent': summary['drift_percent'],
                'scale_wander_percent': scale_wander_percent(scales),
                'ms_median': summary['timing_median_ms'],
                'tracking_ms_median': summary['tracking_median_ms'],
                'lost': summary['frames_lost'], 'local_map': summary.get('local_map')}
        best_peer = min((per_method[p]['ate_rmse_m'] for p in PEERS
                         if per_method[p]['ate_rmse_m'] is not None), default=None)
        klt_ms = per_method['klt_f2f']['ms_median']
        for method, r in per_method.items():
            rows.append({'dataset': dataset, 'method': method, **r,
                         'ate_ratio_to_best_peer': _ratio(r['ate_rmse_m'], best_peer),
                         'tracking_ratio_to_klt': _ratio(r['tracking_ms_median'], klt_ms)})
    return rows


def matcher_timing(data_dir: Path, repeats: int) -> list:
    """Return rows of median matching time per pair at KITTI size and 640x480 (ms)."""
    pairs = {}
    kitti = data_dir / DATASETS['kitti06'][1] / 'image_l'
    if kitti.is_dir():
        pairs['kitti06 1226x370'] = [cv2.imread(str(kitti / f'{i:06d}.png'), cv2.IMREAD_GRAYSCALE)
                                     for i in (0, 1)]
    _, frames = iter_sequence(num_frames=2, seed=0)
    pairs['synthetic 640x480'] = [cv2.cvtColor(f.rgb, cv2.COLOR_RGB2GRAY) for f in frames]
    config = load_config()
    rows = []
    for pair_name, (image0, image1) in pairs.items():
        times = {}
        for method in METHODS:
            matcher = build_matcher(method, section(config, method))
            matcher.match(image0, image1)  # warm-up
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                matches = matcher.match(image0, image1)
                samples.append((time.perf_counter() - start) * 1e3)
            times[method] = (float(np.median(samples)), len(matches))
        for method in METHODS:
            ms, count = times[method]
            rows.append({'pair': pair_name, 'method': method, 'match_ms': ms,
                         'ratio_to_klt': ms / times[BASELINE][0], 'matches': count})
    return rows


def run(data_dir: Path, output: Path, synthetic_frames: int, repeats: int,
        long_frames: int = 0) -> dict:
    """Run every method on every bag; return the results (also written to output)."""
    output.mkdir(parents=True, exist_ok=True)
    results = {'vo': [], 'matching': matcher_timing(data_dir, repeats)}
    with tempfile.TemporaryDirectory() as tmp:
        results['mono'] = run_mono(data_dir, Path(tmp), output, long_frames)
        bags = make_bags(data_dir, Path(tmp), synthetic_frames)
        for name, bag in bags.items():
            per_method = {}
            for method in METHODS:
                config = load_config(overrides={'matcher': method})
                summary = evaluate_bag(bag, output / name / method, config, mode='mono',
                                       gt_scale=True, progress=False, plots=True)
                per_method[method] = summary
            base = per_method[BASELINE]
            for method, s in per_method.items():
                results['vo'].append({
                    'dataset': name, 'method': method,
                    'frames': s['frames_processed'], 'lost': s['frames_lost'],
                    'ms_median': s['timing_median_ms'],
                    'time_ratio_to_klt': s['timing_median_ms'] / base['timing_median_ms'],
                    'ate_rmse_m': s['ate_rmse_m'],
                    'ate_ratio_to_klt': _ratio(s['ate_rmse_m'], base['ate_rmse_m']),
                    'drift_percent': s['drift_percent'],
                    'rpe_rot_rmse_deg': s['rpe_rot_rmse_deg'],
                })
    with open(output / 'results.json', 'w', encoding='utf-8') as stream:
        json.dump(results, stream, indent=2)
    return results


def _ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def _fmt(value, spec):
    return 'n/a' if value is None else format(value, spec)


def format_results(results: dict) -> str:
    """Return the results as plain-text tables."""
    lines = ['Monocular VO, no ground-truth scale (Sim(3) ATE; x best peer = ATE / ATE of the '
             'better classical peer; scale %: largest change of the scale of a Sim(3) fitted '
             f'on each {SCALE_WINDOW} frames from the first window)',
             f'{"dataset":<18} {"method":<19} {"ms/frame":>9} {"track ms":>9} {"x KLT":>6} '
             f'{"lost":>4} {"ATE m":>8} {"x best peer":>11} {"drift %":>8} {"scale %":>8}',
             "(ms/frame: back to back, including the wait for the previous keyframe's "
             'background work; track ms: without it, the per-frame path when frames come no '
             'faster than keyframes are completed)']
    for r in results.get('mono', []):
        lines.append(f'{r["dataset"]:<18} {r["method"]:<19} {r["ms_median"]:9.2f} '
                     f'{r["tracking_ms_median"]:9.2f} '
                     f'{_fmt(r["tracking_ratio_to_klt"], "6.2f")} '
                     f'{r["lost"]:4d} {_fmt(r["ate_rmse_m"], "8.4f")} '
                     f'{_fmt(r["ate_ratio_to_best_peer"], "11.2f")} '
                     f'{_fmt(r["drift_percent"], "8.2f")} '
                     f'{_fmt(r.get("scale_wander_percent"), "8.1f")}')
    lines += ['', 'Matching only (median over repeats; ratio = time / KLT time in this run)',
              f'{"pair":<20} {"method":<6} {"ms":>8} {"x KLT":>7} {"matches":>8}']
    for r in results['matching']:
        lines.append(f'{r["pair"]:<20} {r["method"]:<6} {r["match_ms"]:8.2f} '
                     f'{r["ratio_to_klt"]:7.2f} {r["matches"]:8d}')
    lines += ['', 'Frame-to-frame monocular VO with ground-truth step length (same pose step)',
              f'{"dataset":<18} {"method":<6} {"frames":>6} {"lost":>4} {"ms/frame":>9} '
              f'{"x KLT":>6} {"ATE m":>8} {"x KLT":>6} {"drift %":>8} {"RPE deg":>8}']
    for r in results['vo']:
        lines.append(
            f'{r["dataset"]:<18} {r["method"]:<6} {r["frames"]:6d} {r["lost"]:4d} '
            f'{r["ms_median"]:9.2f} {r["time_ratio_to_klt"]:6.2f} '
            f'{_fmt(r["ate_rmse_m"], "8.4f")} {_fmt(r["ate_ratio_to_klt"], "6.2f")} '
            f'{_fmt(r["drift_percent"], "8.2f")} {_fmt(r["rpe_rot_rmse_deg"], "8.3f")}')
    return '\n'.join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data', type=Path, default=REPO_ROOT.parent / 'shared' / 'data',
                        help='folder with the development datasets (optional)')
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output')
    parser.add_argument('--synthetic-frames', type=int, default=60)
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--long', type=int, default=0, metavar='FRAMES',
                        help='add long synthetic recordings of FRAMES frames, one per motion '
                        'regime, to the monocular table (e.g. 1500; 0: none)')
    args = parser.parse_args(argv)
    if args.long and args.long < 2 * SCALE_WINDOW:
        parser.error(f'--long needs at least {2 * SCALE_WINDOW} frames, got {args.long}')
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
    results = run(args.data, args.output, args.synthetic_frames, args.repeats, args.long)
    sys.stdout.write(format_results(results) + '\n')
    sys.stdout.write(f'results: {args.output / "results.json"}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
