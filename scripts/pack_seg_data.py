# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Copy a CamVid-layout folder with its images as JPEG, small enough to travel to a GPU machine.

A device machine gets the repository's working tree and the paths named in ``carry``, 64 MiB
in all, and not ``../shared``: the CamVid PNG training images alone are larger. This script
writes ``OUTPUT/images/<name>.jpg`` (RGB, JPEG quality ``--quality``) and copies
``OUTPUT/labels/<name>.png`` unchanged (label ids stay lossless), for every pair of
``SOURCE`` (``images/`` + ``labels/``, as ``relperception train seg --data`` reads it). The
JPEG images differ from the PNGs by compression noise only; colour jitter during training is
far larger, and the validation figures of a model card are measured on the original PNGs.

Usage (from the repository root; ``device_data/`` is git-ignored)::

    .venv/bin/python scripts/pack_seg_data.py ../shared/data/camvid_segnet_train_367 TRAIN
    .venv/bin/python scripts/pack_seg_data.py ../shared/data/camvid_segnet_val_101 VAL

with ``TRAIN`` = ``device_data/camvid_train`` and ``VAL`` = ``device_data/camvid_val``.
"""

import argparse
from pathlib import Path
import shutil
import sys

import cv2
from relperception.training.dense_data import find_label_pairs


def pack(source: Path, output: Path, quality: int) -> int:
    """Write the JPEG images and copied labels of ``source`` into ``output``; return bytes."""
    if not 1 <= quality <= 100:
        raise ValueError(f'--quality must be in 1..100, got {quality}')
    pairs = find_label_pairs(source)
    (output / 'images').mkdir(parents=True, exist_ok=True)
    (output / 'labels').mkdir(parents=True, exist_ok=True)
    total = 0
    for image_path, label_path in pairs:
        image = cv2.imread(str(image_path), cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError(f'cannot read image {image_path}')
        target = output / 'images' / f'{image_path.stem}.jpg'
        if not cv2.imwrite(str(target), image, [cv2.IMWRITE_JPEG_QUALITY, quality]):
            raise ValueError(f'cannot write {target}')
        label_target = output / 'labels' / f'{image_path.stem}.png'
        shutil.copyfile(label_path, label_target)
        total += target.stat().st_size + label_target.stat().st_size
    return total


def main(argv=None) -> int:
    """Pack one folder from the command line; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('source', type=Path, help='CamVid-layout folder (images/ + labels/)')
    parser.add_argument('output', type=Path, help='folder to write')
    parser.add_argument('--quality', type=int, default=95, help='JPEG quality (95)')
    args = parser.parse_args(argv)
    total = pack(args.source, args.output, args.quality)
    sys.stdout.write(f'{args.output}: {total / 2 ** 20:.1f} MiB\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
