# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Export the package's models by name: a LoFTR preset, a dense model preset or YAML file.

The job behind ``relperception export``: :func:`build_export_model` hands the name to the
model's own exporter (:mod:`relperception.matching.loftr.export` for ``loftr`` and
``loftr_lite``, :mod:`relperception.models.export` for everything else), :func:`export_model`
writes its export spec with ``relperception.runtime.model_export.export_spec`` (ONNX, or a
TensorRT engine) or writes a two-stage LoFTR export; :func:`calibration_reader_from_bag`
prepares a bag's images for the INT8 quantisation of an export
(``relperception.runtime.quantize``) as the model's runtime does. The graph contracts are in
the exporters' docstrings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from relperception.data.calibration import DEFAULT_CALIBRATION_FRAMES
from relperception.data.topics import IMAGE
from relperception.runtime.onnx_export import OPSET


def build_export_model(config: str, weights: Optional[str] = None,
                       random_weights: bool = False) -> Dict[str, Any]:
    """Build the export spec for a preset name or model YAML, with its weights.

    Args:
        config: a LoFTR preset (``loftr``, ``loftr_lite``), a dense model preset name or a
            dense model YAML file.
        weights: weights file; None = the shipped weights of the preset.
        random_weights: allow exporting without weights (random initialisation).

    Returns:
        The export spec (see ``relperception.runtime.model_export``): ``kind`` (``dense`` or
        ``loftr``), ``module`` (tuple-returning), ``input_names``, ``output_names``,
        ``channels``, ``size_multiple``, ``default_size`` (H, W), ``metadata`` (preset name,
        preprocessing) and ``output_shape``.

    Raises:
        FileNotFoundError: no weights and ``random_weights`` is false.
        ValueError: unknown preset or weights that do not fit.
    """
    from relperception.matching.loftr.export import build_loftr_export, LOFTR_PRESETS

    if config in LOFTR_PRESETS:
        return build_loftr_export(config, weights, random_weights)
    from relperception.models.export import build_dense_export

    return build_dense_export(config, weights, random_weights)


def export_model(config: str, output, fmt: str = 'onnx', weights: Optional[str] = None,
                 random_weights: bool = False, size: Optional[Tuple[int, int]] = None,
                 min_size: Optional[Tuple[int, int]] = None,
                 max_size: Optional[Tuple[int, int]] = None, fp16: bool = True,
                 opset: int = OPSET, two_stage: bool = False) -> Path:
    """Export a preset to ONNX (``fmt='onnx'``) or a TensorRT engine (``fmt='tensorrt'``).

    Args:
        config: preset name or dense model YAML (see ``build_export_model``).
        output: file to write (``.onnx`` or ``.engine``; for TensorRT the intermediate ONNX
            is written next to it with the suffix ``.onnx``).
        fmt: ``onnx`` or ``tensorrt``.
        weights: weights file; None = the shipped weights of the preset.
        random_weights: allow exporting untrained weights.
        size: (H, W) of the example input and of the TensorRT optimisation profile's optimum
            (default: the preset's input size).
        min_size: smallest (H, W) accepted (default 64x64).
        max_size: largest (H, W) accepted (default 1536x2048).
        fp16: TensorRT only: enable FP16.
        opset: ONNX opset.
        two_stage: LoFTR presets, ONNX only: write a coarse graph to ``output`` and a fine
            graph with a dynamic match count next to it (see ``export_loftr_two_stage``).

    Returns:
        The path written (the coarse graph for ``two_stage``).

    Raises:
        ValueError: bad sizes or format, or an export check failed.
        FileNotFoundError: missing weights.
        RuntimeError: TensorRT requested but not installed.
    """
    from relperception.matching.loftr.export import export_loftr_two_stage, LOFTR_PRESETS
    from relperception.runtime.model_export import export_spec

    if fmt not in ('onnx', 'tensorrt'):
        raise ValueError(f'unknown export format {fmt!r}; choose onnx or tensorrt')
    if two_stage and (fmt != 'onnx' or config not in LOFTR_PRESETS):
        raise ValueError(f'a two-stage export is for the LoFTR presets {LOFTR_PRESETS} in '
                         f'ONNX format (onnxruntime), not {config} / {fmt}')
    if two_stage:
        spec = build_export_model(config, weights, random_weights)
        return export_loftr_two_stage(spec, output, size, min_size, max_size, opset)
    if fmt == 'tensorrt':
        from relperception.runtime.tensorrt_backend import import_tensorrt
        import_tensorrt()  # fail before the (slow) ONNX export
    spec = build_export_model(config, weights, random_weights)
    return export_spec(spec, output, fmt, size, min_size, max_size, fp16, opset)


def read_calibration(bag, loftr: bool, topic: str = IMAGE,
                     frames: int = DEFAULT_CALIBRATION_FRAMES) -> list:
    """Read calibration images from ``bag`` for a dense model or for LoFTR.

    Args:
        bag: the rosbag2 bag.
        loftr: LoFTR (grey image pairs ``LOFTR_CALIBRATION_GAP`` frames apart) or a dense model
            (RGB images).
        topic: the image topic.
        frames: calibration images (dense) or pairs (LoFTR), at most.

    Returns:
        The samples of ``relperception.data.calibration.read_calibration_images``.

    Raises:
        FileNotFoundError, ValueError: see ``read_calibration_images``.
    """
    from relperception.data.calibration import read_calibration_images

    if loftr:
        from relperception.matching.loftr.calibration import LOFTR_CALIBRATION_GAP

        return read_calibration_images(bag, topic, frames, grey=True,
                                       gap=LOFTR_CALIBRATION_GAP)
    return read_calibration_images(bag, topic, frames)


def calibration_reader(samples: list, float_path):
    """Return a ``CalibrationReader`` that prepares ``samples`` for the export ``float_path``.

    The export's metadata says dense or LoFTR and how to preprocess; ``samples`` come from
    :func:`read_calibration` of the same kind.

    Raises:
        ValueError: a file that is neither a dense nor a single-graph LoFTR export.
    """
    from relperception.runtime.onnx_metadata import read_metadata
    from relperception.runtime.quantize import CalibrationReader

    if read_metadata(float_path).get('kind') == 'loftr':
        from relperception.matching.loftr.calibration import loftr_preprocessor

        prepare = loftr_preprocessor(float_path)
    else:
        from relperception.models.calibration import dense_preprocessor

        prepare = dense_preprocessor(float_path)
    return CalibrationReader(samples, prepare)


def calibration_reader_from_bag(bag, float_path, topic: str = IMAGE,
                                frames: int = DEFAULT_CALIBRATION_FRAMES):
    """Return a ``CalibrationReader`` of samples for the model of ``float_path`` from ``bag``.

    :func:`read_calibration` then :func:`calibration_reader`; see them for the arguments.
    """
    from relperception.runtime.onnx_metadata import read_metadata

    loftr = read_metadata(float_path).get('kind') == 'loftr'
    return calibration_reader(read_calibration(bag, loftr, topic, frames), float_path)
