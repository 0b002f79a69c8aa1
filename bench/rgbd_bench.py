# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""RGB-D VO benchmark: keyframe tracking against frame-to-frame, exact and sensor-like depth.

One table, measured in one run, printed as ratios to the classical peer so that it does not
depend on how fast this machine is. Synthetic recordings (``relperception synth``'s renderer,
grey-level noise 2): 150 frames at constant speed (seed 0) and 300 frames whose speed changes 3x
(seed 2), each with

* ``exact`` depth: the renderer's;
* ``sensor`` depth: structured-light-like noise, seeded: a standard deviation of
  ``0.0012 + 0.0019 (z - 0.4)^2`` m (Nguyen et al., 3DIMPVT 2012, for the Kinect), millimetre
  quantisation, 5 % of the pixels missing and no depth across depth edges (> 5 cm per pixel).

Methods (``relperception eval --mode rgbd`` runs the same ``VisualOdometry``):

* ``ncc_keyframe``: ours with ``odometry.rgbd_keyframe_tracking: true`` (PnP on the keyframe's
  depth, a new keyframe when the flow or the tracked share asks for one);
* ``ncc_f2f``: the default, every moving frame a keyframe, the regression reference;
* ``ncc_rgbd_map``: ``odometry.rgbd_map: true`` (local map of depth points, windowed bundle
  adjustment with depth residuals), experimental;
* ``klt_f2f`` and ``klt_keyframe``: the same tracker on pyramidal KLT tracks, the classical peer.

SE(3)-aligned ATE (``x KLT`` = ATE over ``klt_f2f``'s), per-frame RPE, drift and the median ms
per frame (back to back).

Usage::

    .venv/bin/python bench/rgbd_bench.py [--output bench_output]
"""

import argparse
import json
from pathlib import Path
import sys
import time

import numpy as np

from relperception.config import load_config, section
from relperception.core_types import Frame
from relperception.data.synthetic import iter_sequence
from relperception.evaluation.trajectory import evaluate_trajectory
from relperception.matching import build_matcher
from relperception.odometry.vo import VisualOdometry

REPO_ROOT = Path(__file__).resolve().parents[1]
#: name: (frames, seed, speed ratio)
RECORDINGS = {'const_150': (150, 0, 1.0), 'speed3x_300': (300, 2, 3.0)}
DEPTHS = ('exact', 'sensor')
#: name: (matcher, odometry overrides)
METHODS = {
    'ncc_keyframe': ('ncc', {'rgbd_keyframe_tracking': True}),
    'ncc_f2f': ('ncc', {}),
    'ncc_rgbd_map': ('ncc', {'rgbd_map': True}),
    'klt_f2f': ('klt', {}),
    'klt_keyframe': ('klt', {'rgbd_keyframe_tracking': True}),
}
PEER = 'klt_f2f'


def sensor_depth(depth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Return ``depth`` (H, W) float32 metres with structured-light-like noise (see above)."""
    valid = np.nan_to_num(depth, nan=0.0)
    sigma = 0.0012 + 0.0019 * np.square(valid - 0.4)
    noisy = depth + rng.normal(size=depth.shape) * sigma
    noisy = np.round(noisy * 1000.0) / 1000.0
    noisy[rng.random(depth.shape) < 0.05] = np.nan
    gy, gx = np.gradient(valid)
    noisy[np.hypot(gx, gy) > 0.05] = np.nan
    return noisy.astype(np.float32)


def render(frames: int, seed: int, speed: float):
    """Return camera, RGB images, exact depths, stamps and ground-truth poses of a recording."""
    camera, sequence = iter_sequence(frames, seed=seed, image_noise_std=2.0, speed_ratio=speed)
    rendered = list(sequence)
    return (camera, [f.rgb for f in rendered], [f.depth for f in rendered],
            np.array([f.stamp_ns for f in rendered], dtype=np.int64),
            np.stack([f.T_world_cam for f in rendered]))


def run_method(method: str, camera, images, depths, stamps, poses) -> dict:
    """Run one method over a recording; return its scores and time per frame."""
    matcher_name, overrides = METHODS[method]
    config = load_config()
    odometry = {**section(config, 'odometry'), **overrides, 'mode': 'rgbd'}
    vo = VisualOdometry(build_matcher(matcher_name, section(config, matcher_name)), odometry)
    kept_stamps, kept_poses, times, keyframes, lost = [], [], [], 0, 0
    try:
        for image, depth, stamp in zip(images, depths, stamps):
            start = time.perf_counter()
            result = vo.step(Frame(image, int(stamp), camera, depth))
            times.append(1e3 * (time.perf_counter() - start))
            keyframes += int(result.is_keyframe)
            if result.status == 'lost':
                lost += 1
                continue
            kept_stamps.append(result.stamp_ns)
            kept_poses.append(result.T_world_cam)
    finally:
        vo.close()
    scores = evaluate_trajectory(np.array(kept_stamps), np.stack(kept_poses), stamps, poses,
                                 alignment='se3')
    return {'ate_rmse_m': scores['ate_rmse_m'], 'rpe_trans_rmse_m': scores['rpe_trans_rmse_m'],
            'drift_percent': scores['drift_percent'], 'ms_median': float(np.median(times[1:])),
            'keyframes': keyframes, 'lost': lost}


def run(output: Path) -> list:
    """Run every method on every recording and depth; return the rows (also written)."""
    rows = []
    for name, (frames, seed, speed) in RECORDINGS.items():
        camera, images, exact, stamps, poses = render(frames, seed, speed)
        for depth_kind in DEPTHS:
            rng = np.random.default_rng(seed)
            depths = exact if depth_kind == 'exact' else [sensor_depth(d, rng) for d in exact]
            results = {m: run_method(m, camera, images, depths, stamps, poses) for m in METHODS}
            peer = results[PEER]
            for method, r in results.items():
                rows.append({'recording': name, 'depth': depth_kind, 'method': method, **r,
                             'ate_ratio_to_klt': r['ate_rmse_m'] / peer['ate_rmse_m'],
                             'time_ratio_to_klt': r['ms_median'] / peer['ms_median']})
    output.mkdir(parents=True, exist_ok=True)
    with open(output / 'rgbd_results.json', 'w', encoding='utf-8') as stream:
        json.dump(rows, stream, indent=2)
    return rows


def format_rows(rows: list) -> str:
    """Return the rows as a plain-text table."""
    lines = ['RGB-D VO (SE(3) ATE; x KLT = ATE / ATE of klt_f2f in the same run)',
             f'{"recording":<12} {"depth":<7} {"method":<13} {"ATE mm":>7} {"x KLT":>6} '
             f'{"RPE mm":>7} {"drift %":>8} {"keyframes":>9} {"lost":>4} {"ms":>6} '
             f'{"x KLT":>6}']
    for r in rows:
        lines.append(f'{r["recording"]:<12} {r["depth"]:<7} {r["method"]:<13} '
                     f'{1e3 * r["ate_rmse_m"]:7.2f} {r["ate_ratio_to_klt"]:6.2f} '
                     f'{1e3 * r["rpe_trans_rmse_m"]:7.2f} {r["drift_percent"]:8.3f} '
                     f'{r["keyframes"]:9d} {r["lost"]:4d} {r["ms_median"]:6.1f} '
                     f'{r["time_ratio_to_klt"]:6.2f}')
    return '\n'.join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--output', type=Path, default=REPO_ROOT / 'bench_output')
    args = parser.parse_args(argv)
    rows = run(args.output)
    sys.stdout.write(format_rows(rows) + '\n')
    sys.stdout.write(f'results: {args.output / "rgbd_results.json"}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
