# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception infer``: run a dense model on image files and write depth and labels.

For every input image ``<stem>.<ext>`` the output folder receives:

==========================  ====================================================================
``<stem>_depth.npy``         (H, W) float32 at the INPUT image's resolution: the model's raw
                             depth output resized bilinearly, i.e. metres for a metric preset
                             (``fast_seg``, ``vit_hybrid``) and RELATIVE INVERSE depth (larger
                             = nearer, no unit) for a relative preset (``depth_anything_v2_vits``)
``<stem>_depth.png``         that map coloured with turbo, near blue and far red (a relative map
                             is coloured as 1 / value), invalid pixels black
``<stem>_labels.png``        (H, W) mono8 class ids (only for models with a segmentation head)
``<stem>_labels_color.png``  the label colours blended over the image (same condition)
==========================  ====================================================================

Preprocessing (resize rule, input size, mean/std) is the model preset's, e.g. exactly the
Depth Anything V2 reference preprocessing for ``depth_anything_v2_vits``.

Untrained heads: weights written by ``relperception train`` record which heads were trained
(``trained_heads`` metadata; ``DensePipeline.untrained_heads``). The output of a head that was
never trained is not written: weights of ``train seg`` alone give labels but no ``_depth``
files (their "metric depth" would be the random head's constant tens of metres), and a warning
says so once. Weights with no trained head among the model's outputs are refused with an
error. Files without the record (the shipped weights, foreign files, ONNX exports) count as
fully trained.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import List, Sequence

from relperception.cli.common import int_at_least
from relperception.models.presets import preset_for_backbone

HELP = 'run a dense depth / segmentation model on images and write depth (.npy, .png) and labels'
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

IMAGE_SUFFIXES = ('.png', '.jpg', '.jpeg', '.bmp', '.tif', '.tiff', '.ppm', '.pgm', '.webp')

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``infer``.

    Args:
        parser: the verb's parser.
    """
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        'outputs per image <stem>: <stem>_depth.npy = float32 (H, W) at the INPUT resolution, '
        'the raw model output: metres for metric presets (fast_seg, vit_hybrid), relative '
        'INVERSE depth for relative presets (depth_anything_v2_vits); <stem>_depth.png = that '
        'map coloured (near blue, far red); with a segmentation head <stem>_labels.png = mono8 '
        'class ids and <stem>_labels_color.png = colour overlay. The outputs of a head the '
        'weights record as untrained (trained_heads metadata of `relperception train`, e.g. '
        'the depth of `train seg` weights) are not written (warning).')
    parser.add_argument('inputs', nargs='+', metavar='IMAGE|DIR',
                        help='image files, or folders whose images are all processed '
                             f'({", ".join(IMAGE_SUFFIXES)})')
    default = preset_for_backbone('conv')
    parser.add_argument('--config', default=default, metavar='PRESET_OR_YAML',
                        help='model preset name (fast_seg, vit_hybrid, conv_small, '
                             'depth_anything_v2_vits, ...), model YAML file, or a parameter file '
                             'with a dense: section (e.g. dense: {backend: onnxruntime, '
                             'onnx_path: m.onnx}; the options below override it) (default '
                             f'{default}, the dense.backbone: conv default)')
    parser.add_argument('--weights', default='', metavar='FILE',
                        help='weights file (safetensors or a plain state dict); default the '
                             'weights shipped for the preset (depth_anything_v2_vits has none: '
                             'required there)')
    parser.add_argument('-o', '--output', required=True, metavar='DIR', help='output folder')
    parser.add_argument('--backend', choices=('torch', 'onnxruntime'), default=None,
                        help="inference backend (default: the parameter file's, else torch)")
    parser.add_argument('--onnx', default='', metavar='FILE',
                        help='exported ONNX model for --backend onnxruntime')
    parser.add_argument('--device', default=None,
                        help='torch device for --backend torch (cpu, cuda, cuda:N; default '
                             "the parameter file's, else cpu)")
    parser.add_argument('--input-size', type=int_at_least(1), nargs=2, default=None,
                        metavar=('WIDTH', 'HEIGHT'),
                        help="network input size (default: the preset's)")


def collect_images(inputs: List[str]) -> List[Path]:
    """Return the image files named by ``inputs`` (files, or folders scanned non-recursively).

    Args:
        inputs: file or folder paths.

    Returns:
        The image paths in order (folders sorted by name), without duplicates.

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: no image found.
    """
    images: List[Path] = []
    for name in inputs:
        path = Path(name)
        if path.is_dir():
            images += sorted(p for p in path.iterdir()
                             if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        elif path.is_file():
            images.append(path)
        else:
            raise FileNotFoundError(f'no such image or folder: {path}')
    unique = list(dict.fromkeys(images))
    if not unique:
        raise ValueError(f'no images found in {", ".join(inputs)}')
    return unique


def run(args: argparse.Namespace) -> int:
    """Run the model on every image and write the outputs.

    Args:
        args: parsed options of ``infer``.

    Returns:
        0 when every image was processed, 1 when some could not be read.

    Raises:
        ValueError: bad configuration, weights or ONNX file, or weights whose every output
            head is untrained (see the module docstring).
    """
    import cv2
    from relperception.cli.common import check_image_size
    from relperception.imaging import read_image_file
    from relperception.interruption import INTERRUPTIONS, interruption_reason
    from relperception.pipeline.dense_pipeline import DensePipeline

    images = collect_images(args.inputs)
    overrides = _dense_parameters(args.config)
    for key, value in (('dense.weights', args.weights), ('dense.backend', args.backend),
                       ('dense.onnx_path', args.onnx), ('dense.device', args.device)):
        if value:
            overrides[key] = value
    if args.input_size is not None:
        overrides['dense.input_width'], overrides['dense.input_height'] = args.input_size
    backend = overrides.get('dense.backend', 'torch')
    if overrides.get('dense.onnx_path') and backend == 'torch':
        raise ValueError('--onnx (dense.onnx_path) is read by --backend onnxruntime only; add '
                         '--backend onnxruntime (the torch backend runs the weights)')
    if args.weights and backend != 'torch':
        raise ValueError(f'--weights is read by the torch backend only; the {backend} backend '
                         'runs the weights exported into --onnx')
    if overrides.get('dense.backend') == 'onnxruntime' and not overrides.get('dense.onnx_path'):
        raise ValueError('--backend onnxruntime needs --onnx FILE (or dense.onnx_path in the '
                         'parameter file)')
    pipeline = DensePipeline(overrides)
    write_depth = 'depth' not in pipeline.untrained_heads
    write_labels = pipeline.has_segmentation and 'segmentation' not in pipeline.untrained_heads
    if not write_depth and not write_labels:
        raise ValueError(f'the weights record every output head as untrained '
                         f'({", ".join(pipeline.untrained_heads)}): nothing meaningful to '
                         'write; train them with `relperception train` first')
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    failed = done = 0
    try:
        for path, stem in zip(images, output_stems(images)):
            try:
                bgr = read_image_file(path, cv2.IMREAD_COLOR)
                check_image_size(bgr, path)
                rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
                result = pipeline.run(rgb, colors=True)
            except ValueError as error:   # unreadable, or a size the model cannot take
                named = str(error) if str(path) in str(error) else f'{path}: {error}'
                logger.error('%s; skipped', named)
                failed += 1
                continue
            if stem != path.stem:
                logger.info('%s: outputs named %s_* (another input has the name %s)', path,
                            stem, path.stem)
            _write_outputs(output, stem, result, pipeline.relative, write_depth, write_labels)
            done += 1
            logger.info('%s: %dx%d, %.1f ms (inference %.1f ms)', path.name, rgb.shape[1],
                        rgb.shape[0], result.timing_ms['total'], result.timing_ms['inference'])
    except INTERRUPTIONS as exc:
        logger.error('%s after %d of %d images: the outputs of those %d are complete in %s; '
                     'the rest were not processed', interruption_reason(exc), done + failed,
                     len(images), done, output)
        raise
    written = ([f'{"relative inverse" if pipeline.relative else "metric"} depth']
               if write_depth else []) + (['labels'] if write_labels else [])
    skipped = ', '.join(f'no {h} output: untrained {h} head' for h in pipeline.untrained_heads)
    logger.info('wrote %d of %d images to %s (%s%s)', done, len(images), output,
                ', '.join(written), f'; {skipped}' if skipped else '')
    return 1 if failed else 0


def output_stems(paths: Sequence[Path]) -> List[str]:
    """Return one output stem per input path, all different.

    An image keeps its file's stem unless an earlier input took it (same name in two folders,
    or ``a.jpg`` and ``a.png``); it then gets ``<stem>_<k>`` with the smallest ``k`` that is no
    other input's stem either.
    """
    originals = {Path(path).stem for path in paths}
    taken: set = set()
    stems = []
    for path in paths:
        stem = Path(path).stem
        if stem in taken:
            k = 1
            while f'{stem}_{k}' in taken or f'{stem}_{k}' in originals:
                k += 1
            stem = f'{stem}_{k}'
        taken.add(stem)
        stems.append(stem)
    return stems


def _write_outputs(output: Path, stem: str, result, relative: bool, depth: bool = True,
                   labels: bool = True) -> None:
    """Write one image's depth (.npy, .png) and labels; each file whole or not at all.

    ``depth`` / ``labels`` False leave those files out (untrained heads).
    """
    import numpy as np
    from relperception.atomic_files import atomic_path
    from relperception.imaging import write_image
    from relperception.pipeline.dense_pipeline import colorize_raw_depth

    if depth:
        with atomic_path(output / f'{stem}_depth.npy') as temporary:
            np.save(temporary, result.raw_depth.astype(np.float32))
        write_image(output / f'{stem}_depth.png', colorize_raw_depth(result.raw_depth, relative))
    if labels and result.labels is not None:
        write_image(output / f'{stem}_labels.png', result.labels)
        write_image(output / f'{stem}_labels_color.png', result.labels_color)


def _dense_parameters(config: str) -> dict:
    """Return the ``dense.*`` overrides ``--config`` stands for.

    A preset name or a model YAML names the model; a parameter file (one with a ``dense:``
    section, ``dense.*`` keys or ``ros__parameters`` blocks) gives its ``dense.*`` values.
    """
    from relperception.config import flatten, read_config_file, read_parameter_file

    path = Path(config)
    if path.suffix.lower() in ('.yaml', '.yml') and path.is_file():
        tree = read_config_file(path)   # read once: a parameter file or a model YAML
        keys = flatten(tree)
        if any(k.startswith('dense.') or '.ros__parameters.' in f'.{k}' for k in keys):
            try:
                values = read_parameter_file(tree).config
            except ValueError as error:
                raise ValueError(f'{path}: {error}') from None
            return {k: v for k, v in values.items() if k.startswith('dense.')}
    return {'dense.model': config}
