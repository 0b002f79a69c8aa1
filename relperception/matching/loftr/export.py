# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Export the LoFTR presets to ONNX: one graph, or a coarse and a fine graph (two-stage).

Graph contract (what ``loftr.backend`` = onnxruntime/tensorrt runs): inputs ``image0``,
``image1`` (1,1,H,W) float32 grey in [0,1]; outputs ``keypoints0``, ``keypoints1`` (1,M,2)
float32 pixels, ``confidence`` (1,M) float32 and ``mask`` (1,M) bool, M = H/8 * W/8; H and W
dynamic multiples of 8. The graph is exported with confidence threshold 0 (``mask`` = mutual
nearest neighbour and border test only): the matcher applies ``loftr.threshold`` to
``confidence`` at run time.

:func:`build_loftr_export` returns the export spec that
``relperception.runtime.model_export.export_spec`` writes; :func:`export_loftr_two_stage`
writes the two graphs that :mod:`relperception.matching.loftr.two_stage` runs.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
from relperception.matching.loftr.contract import ONNX_INPUT_NAMES, ONNX_OUTPUT_NAMES
from relperception.matching.loftr.two_stage import fine_graph_inputs, fine_graph_path
from relperception.runtime.model_export import export_spec
from relperception.runtime.onnx_export import export_onnx, OPSET
import torch

logger = logging.getLogger(__name__)

LOFTR_PRESETS = ('loftr', 'loftr_lite')
LOFTR_INPUTS = ONNX_INPUT_NAMES
LOFTR_OUTPUTS = ONNX_OUTPUT_NAMES
LOFTR_MULTIPLE = 8


def _weights_for(name: str, weights: Optional[str], random_weights: bool) -> Optional[Path]:
    """Return the weights file to load, or None for random weights."""
    from relperception.models.weights import shipped_weights

    if weights:
        return Path(weights)
    if random_weights:
        logger.warning('exporting %s with RANDOM weights (--random-weights, seed 0)', name)
        return None
    try:
        return shipped_weights(name)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f'{exc} (or pass --random-weights to export untrained '
                                f'weights for testing)') from None


def keypoints_shape(height: int, width: int) -> Tuple[str, Tuple[int, int, int]]:
    """Return ``('keypoints0', shape)`` of a LoFTR graph for an input of ``height`` x ``width``."""
    return 'keypoints0', (1, (height // 8) * (width // 8), 2)


def build_loftr_export(config: str, weights: Optional[str] = None,
                       random_weights: bool = False) -> Dict[str, Any]:
    """Build the export spec of a LoFTR preset, with its weights.

    Args:
        config: a LoFTR preset (``loftr``, ``loftr_lite``).
        weights: weights file; None = the shipped weights of the preset.
        random_weights: allow exporting without weights (random initialisation).

    Returns:
        The spec of ``relperception.runtime.model_export``: ``kind`` ``loftr``, ``module``
        (``LoFTROnnxWrapper``), ``input_names``, ``output_names``, ``channels``,
        ``size_multiple``, ``default_size`` (H, W), ``metadata`` (preset name,
        preprocessing) and ``output_shape``.

    Raises:
        FileNotFoundError: no weights and ``random_weights`` is false.
        ValueError: unknown preset or weights that do not fit.
    """
    from relperception.matching.loftr.model import LoFTR, LoFTROnnxWrapper
    from relperception.models.weights import load_state_dict_file

    path = _weights_for(config, weights, random_weights)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # reproducible random initialisation
        model = LoFTR(preset=config).eval()
    if path is not None:
        model.load_weights(load_state_dict_file(path))
    # The confidence threshold is applied by the matcher at run time (loftr.threshold), so
    # the graph's mask only holds mutual-nearest-neighbour and border tests.
    model.threshold = 0.0
    return {'kind': 'loftr', 'module': LoFTROnnxWrapper(model),
            'input_names': LOFTR_INPUTS, 'output_names': LOFTR_OUTPUTS, 'channels': 1,
            'size_multiple': LOFTR_MULTIPLE, 'default_size': model.input_size,
            'metadata': {'kind': 'loftr', 'preset': config, 'threshold_in_graph': 0.0,
                         'input_range': 'grey [0,1]', 'coarse_stride': 8,
                         'keypoint_offset': model.conf['keypoint_offset'],
                         'weights': str(path) if path else 'random'},
            'output_shape': keypoints_shape}


def export_loftr_two_stage(spec: Dict[str, Any], output,
                           size: Optional[Tuple[int, int]] = None,
                           min_size: Optional[Tuple[int, int]] = None,
                           max_size: Optional[Tuple[int, int]] = None,
                           opset: int = OPSET) -> Path:
    """Export LoFTR as two ONNX graphs: coarse (fixed shapes) and fine (K matches, dynamic).

    The single graph of ``export_spec`` refines a constant K = ``fine_topk`` cells, however
    few match, because TensorRT needs shapes that do not depend on the data. Here the coarse
    graph (``output``; inputs ``image0``/``image1``, outputs ``COARSE_OUTPUT_NAMES``, size
    checks as in ``export_spec``) ends before the fine level, the caller chooses the matches
    to refine outside the graph, and the fine graph (``fine_graph_path(output)``, inputs
    ``FINE_INPUT_NAMES``) refines exactly those: its K axis (``matches``) is an input
    dimension, not computed from data, so the fine work follows the number of matches (the
    fine head runs on the K windows when ``fine_topk`` windows cover fewer pixels than the map
    at the export size, else on the map: the single graph's choice).
    ``relperception.matching.loftr.two_stage.TwoStageLoFTRBackend`` runs the pair; its
    outputs are those of the single graph.

    Args:
        spec: a result of :func:`build_loftr_export`.
        output: the coarse graph's file.
        size: (H, W) of the example input (default: the preset's input size).
        min_size: smallest (H, W) accepted.
        max_size: largest (H, W) accepted.
        opset: ONNX opset.

    Returns:
        The coarse graph's path; its metadata names the fine graph (``fine_graph``, relative)
        and the most matches refined per pair (``fine_topk``).

    Raises:
        ValueError: not a LoFTR spec, bad sizes, or the fine graph does not follow K.
    """
    from relperception.matching.loftr.model import (
        COARSE_OUTPUT_NAMES, FINE_INPUT_NAMES, FINE_OUTPUT_NAMES, LoFTRCoarseOnnxWrapper,
        LoFTRFineOnnxWrapper)

    if spec['kind'] != 'loftr':
        raise ValueError(f'a two-stage export needs a LoFTR preset, got {spec["kind"]}')
    model = spec['module'].model
    output = Path(output)
    fine_path = fine_graph_path(output)
    coarse_spec = dict(spec, module=LoFTRCoarseOnnxWrapper(model),
                       output_names=COARSE_OUTPUT_NAMES)
    # both graphs carry the fingerprint of the weights: a coarse file of one export beside the
    # fine file of another (e.g. an interrupted re-export) is refused when they are opened
    fingerprint = weights_fingerprint(model)
    coarse_spec['metadata'] = dict(spec['metadata'], kind='loftr_coarse',
                                   fine_graph=fine_path.name, fine_topk=int(model.fine_topk),
                                   weights_sha256=fingerprint)
    coarse_path = export_spec(coarse_spec, output, 'onnx', size, min_size, max_size,
                              opset=opset)
    size = tuple(size or spec['default_size'])
    generator = torch.Generator().manual_seed(0)
    images = [torch.rand(1, 1, *size, generator=generator) for _ in range(2)]
    with torch.no_grad():
        coarse = dict(zip(COARSE_OUTPUT_NAMES, coarse_spec['module'](*images)))
    cells = coarse['keypoints0'].shape[1]
    count = min(int(model.fine_topk) or cells, cells)
    example = fine_graph_inputs(coarse, torch.arange(count))
    axes = {n: {2: 'fine_height', 3: 'fine_width'} for n in FINE_INPUT_NAMES[:2]}
    axes.update({n: {1: 'matches'} for n in FINE_INPUT_NAMES[2:]})
    axes[FINE_OUTPUT_NAMES[0]] = {1: 'matches'}
    fine_module = LoFTRFineOnnxWrapper(model)
    export_onnx(fine_module, tuple(example[n] for n in FINE_INPUT_NAMES), fine_path,
                FINE_INPUT_NAMES, FINE_OUTPUT_NAMES, dynamic_axes=axes, opset=opset,
                metadata={'kind': 'loftr_fine', 'preset': spec['metadata'].get('preset'),
                          'opset': opset, 'fine_topk': int(model.fine_topk),
                          'weights_sha256': fingerprint})
    _check_fine_graph(fine_module, fine_path, coarse, cells)
    return coarse_path


def weights_fingerprint(model: torch.nn.Module) -> str:
    """Return the SHA-256 (hex) of a model's state: names, shapes, dtypes and values."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        value = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f'{name}:{tuple(tensor.shape)}:{tensor.dtype};'.encode())
        digest.update(value.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _check_fine_graph(module: torch.nn.Module, path: Path, coarse: Dict[str, Any],
                      cells: int) -> None:
    """Run the fine graph with another match count; raise ValueError if it differs from torch."""
    from relperception.matching.loftr.model import FINE_OUTPUT_NAMES
    from relperception.runtime.onnxruntime_backend import OnnxRuntimeBackend

    count = max(1, min(cells, 7))  # a K other than the export's
    inputs = fine_graph_inputs(coarse, torch.arange(cells - count, cells))
    with torch.no_grad():
        expected = module(*inputs.values())[0].numpy()
    backend = OnnxRuntimeBackend(path, num_threads=1)
    got = backend.run({n: v.numpy() for n, v in inputs.items()})[FINE_OUTPUT_NAMES[0]]
    if got.shape != expected.shape or not np.allclose(got, expected, atol=1e-3):
        raise ValueError(f'the exported fine graph {path} does not follow the match count: '
                         f'shape {got.shape} for {expected.shape}')
