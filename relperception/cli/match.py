# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception match``: match two image files with NCC or a LoFTR-style learned matcher.

Usage::

    relperception match --config ncc IMAGE0 IMAGE1 --output DIR
    relperception match --config loftr --weights loftr_outdoor.ckpt IMAGE0 IMAGE1
        --output DIR [--threshold 0.2] [--backend torch|onnxruntime] [--onnx model.onnx]
        [--device cpu]

Writes into DIR:

* ``matches.npz``: ``keypoints0`` (N, 2) float32, ``keypoints1`` (N, 2) float32 (x, y in pixels
  of the ORIGINAL image files, pixel centre at integer) and ``confidence`` (N,) float32;
* ``matches.png``: both images side by side (``relperception.imaging.drawing``), a line per
  match, green where it fits the fundamental matrix found by MAGSAC++ (1 px), red where it does
  not (the geometry check needs no intrinsics; with 8 matches or fewer lines are coloured by
  confidence), with the matcher, the file names and the counts in the title.

Colour images are converted to grey (``cv2.IMREAD_GRAYSCALE``). ``--config loftr`` /
``loftr_lite`` choose the LoFTR preset; the matcher resizes EACH image to the configured input
size (``loftr.input_width`` x ``loftr.input_height``, 0 = the preset's) and scales the matches
back to each image's original pixels, so images of different sizes are accepted (a different
aspect ratio is stretched). ``--config ncc`` is a local tracker that needs two images of the
same size (it cannot follow a change of scale); other sizes are refused.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
import time

HELP = 'match two image files (ncc, loftr, loftr_lite); write matches.npz and matches.png'
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)

CONFIGS = ('loftr', 'loftr_lite', 'ncc')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``match``.

    Args:
        parser: the verb's parser.
    """
    parser.add_argument('image0', help='first image file (any format OpenCV reads)')
    parser.add_argument('image1', help='second image file')
    parser.add_argument('--config', choices=CONFIGS,
                        help='method: the LoFTR presets loftr / loftr_lite, or ncc (default: '
                             'loftr.preset of --params, else loftr_lite)')
    parser.add_argument('-o', '--output', required=True, help='output folder')
    parser.add_argument('--weights', metavar='FILE',
                        help='LoFTR weights: safetensors, or a kornia/official LoFTR state '
                             'dict or checkpoint (default: the shipped weights of the preset)')
    parser.add_argument('--threshold', type=float, metavar='T',
                        help='LoFTR coarse confidence threshold (default: loftr.threshold, 0.2)')
    parser.add_argument('--backend', choices=('torch', 'onnxruntime'),
                        help='LoFTR inference backend (default: loftr.backend, torch)')
    parser.add_argument('--onnx', metavar='FILE', help='exported LoFTR ONNX model '
                        '(with --backend onnxruntime)')
    parser.add_argument('--device', help='torch device for backend torch (default cpu)')
    parser.add_argument('--params', metavar='YAML',
                        help='parameter file with further ncc.* / loftr.* settings')
    parser.add_argument('--runs', type=int, default=1, metavar='N',
                        help='match N times and also report the median time of runs 2..N '
                             '(the first run includes one-off warm-up; default 1)')


def read_gray(path) -> 'np.ndarray':  # noqa: F821 (numpy is imported lazily)
    """Read an image file as (H, W) uint8 grey (colour images are converted).

    Args:
        path: image file.

    Returns:
        (H, W) uint8 array.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: OpenCV cannot decode it, or a side is below ``MIN_IMAGE_SIDE_PX``.
    """
    import cv2

    from relperception.cli.common import check_image_size
    from relperception.imaging import read_image_file

    image = read_image_file(path, cv2.IMREAD_GRAYSCALE)
    check_image_size(image, path)
    return image


def matcher_conf(args: argparse.Namespace) -> tuple:
    """Return (matcher name, conf) for ``args``: the configuration section with the overrides.

    Args:
        args: parsed options (``config``, ``params``, ``weights``, ``threshold``, ``backend``,
            ``onnx``, ``device``).

    Returns:
        ('ncc', ncc conf) or ('loftr', loftr conf with ``preset`` set).

    Raises:
        ValueError: LoFTR-only options with ``--config ncc``, or invalid values.
    """
    from relperception.cli.common import loftr_weight_overrides
    from relperception.config import load_config, section, SPECS

    overrides = {}
    if args.config == 'ncc':
        given = [name for name in ('weights', 'threshold', 'backend', 'onnx', 'device')
                 if getattr(args, name) is not None]
        if given:
            raise ValueError(f'--{", --".join(given)} only apply to the LoFTR configurations, '
                             'not to --config ncc')
        return 'ncc', section(load_config(args.params), 'ncc')
    from_file = load_config(args.params)['loftr.preset']
    if args.config is not None and from_file != SPECS['loftr.preset'].default \
            and from_file != args.config:
        raise ValueError(f'--config {args.config} and loftr.preset {from_file} of --params '
                         f'{args.params} disagree: give one')
    overrides['loftr.preset'] = args.config or from_file
    overrides.update(loftr_weight_overrides(args.weights, args.threshold))
    if args.backend is not None:
        overrides['loftr.backend'] = args.backend
    if args.onnx is not None:
        if not Path(args.onnx).is_file():
            raise FileNotFoundError(f'ONNX file not found: {args.onnx}')
        overrides['loftr.onnx_path'] = str(args.onnx)
    if args.device is not None:
        overrides['loftr.device'] = args.device
    config = load_config(args.params, overrides)
    conf = section(config, 'loftr')
    if conf.get('backend') == 'onnxruntime' and not conf.get('onnx_path'):
        raise ValueError('--backend onnxruntime needs --onnx FILE (or loftr.onnx_path)')
    if conf.get('backend') == 'torch' and conf.get('onnx_path'):
        raise ValueError('--onnx (loftr.onnx_path) is read by --backend onnxruntime only; add '
                         '--backend onnxruntime (the torch backend runs the weights)')
    if conf.get('backend') != 'torch' and args.weights is not None:
        raise ValueError(f'--weights is read by the torch backend only; the {conf["backend"]} '
                         'backend runs the weights exported into --onnx')
    return 'loftr', conf


def build(name: str, conf: dict):
    """Build the matcher ``name`` with ``conf`` (clear error when LoFTR is not installed).

    Args:
        name: 'ncc' or 'loftr'.
        conf: its configuration section.

    Returns:
        an object with ``match(image0, image1) -> Matches``.

    Raises:
        RuntimeError: the LoFTR package is not available.
    """
    from relperception.matching.base import available_matchers, build_matcher

    if name not in available_matchers():
        raise RuntimeError(f'matcher {name!r} is not available in this installation '
                           f'(available: {available_matchers()})')
    return build_matcher(name, conf)


def run(args: argparse.Namespace) -> int:
    """Match the two images and write ``matches.npz`` and ``matches.png``.

    Args:
        args: parsed options of ``match``.

    Returns:
        0 on success.
    """
    import numpy as np

    from relperception.atomic_files import atomic_path
    from relperception.imaging import write_image
    from relperception.evaluation.pairs import fundamental_inliers
    from relperception.imaging.drawing import draw_match_pair

    if args.runs < 1:
        raise ValueError(f'--runs must be >= 1, got {args.runs}')
    image0, image1 = read_gray(args.image0), read_gray(args.image1)
    name, conf = matcher_conf(args)
    if name == 'ncc' and image0.shape != image1.shape:
        # a phone photo's EXIF orientation is applied when it is read (OpenCV's default)
        rotated = image0.shape == image1.shape[::-1]
        raise ValueError(f'--config ncc needs two images of the same size, got '
                         f'{image0.shape[1]}x{image0.shape[0]} and '
                         f'{image1.shape[1]}x{image1.shape[0]} '
                         + ('(one is rotated: an EXIF orientation tag is applied when an image '
                            'is read; save both upright, or ' if rotated else '(')
                         + 'use a LoFTR configuration, which resizes each image to its input '
                         'size)')
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    matcher = build(name, conf)
    load_s = time.perf_counter() - start
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        matches = matcher.match(image0, image1)
        times.append(time.perf_counter() - start)

    with atomic_path(output / 'matches.npz') as temporary:
        np.savez(temporary,
                 keypoints0=np.asarray(matches.keypoints0, np.float32).reshape(-1, 2),
                 keypoints1=np.asarray(matches.keypoints1, np.float32).reshape(-1, 2),
                 confidence=np.asarray(matches.confidence, np.float32).reshape(-1))
    label = conf['preset'] if name == 'loftr' else 'ncc'
    inliers = fundamental_inliers(matches.keypoints0, matches.keypoints1) if len(matches) \
        else None
    title = f'{label}: {Path(args.image0).name} (left) -> {Path(args.image1).name} (right)'
    write_image(output / 'matches.png',
                draw_match_pair(image0, image1, matches, inliers, title,
                                names=('fit the fundamental matrix', 'do not')))
    steady = (f', median of runs 2..{len(times)}: {1000.0 * np.median(times[1:]):.1f} ms'
              if len(times) > 1 else '')
    print(f'{label}: {len(matches)} matches in {1000.0 * times[0]:.1f} ms{steady} '
          f'(model set-up {1000.0 * load_s:.1f} ms); wrote {output / "matches.npz"} and '
          f'{output / "matches.png"}')
    return 0
