# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Export the dense models (presets or model YAML files) to ONNX or TensorRT.

Graph contract (what ``dense.backend`` = onnxruntime/tensorrt runs): input ``image``
(1,3,H,W) float32, normalised with the preset's mean/std; outputs ``depth`` (1,1,H,W) float32
(metric metres or relative inverse depth, see the ``depth_mode`` metadata), and when the model
has a segmentation head ``logits`` (1,C,H,W) float32 and ``labels`` (1,H,W) uint8 (argmax of
the logits). H and W are dynamic (multiples of ``size_multiple``).

:func:`build_dense_export` returns the export spec that
``relperception.runtime.model_export.export_spec`` writes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from relperception.models.preprocess import INPUT_NAME
from relperception.models.trained_heads import TRAINED_HEADS_KEY
from relperception.runtime.model_export import round_to_multiple
import torch

logger = logging.getLogger(__name__)

DENSE_INPUTS = (INPUT_NAME,)


class DenseExportWrapper(torch.nn.Module):
    """Dense model -> ``(depth, logits, labels)`` tuple (or ``(depth,)`` without a seg head).

    Args:
        model: a ``DenseModel``; forward(image) -> dict with ``depth`` and maybe ``logits``.
        with_logits: whether the model returns ``logits``.
    """

    def __init__(self, model: torch.nn.Module, with_logits: bool):
        """Wrap ``model``."""
        super().__init__()
        self.model = model
        self.with_logits = with_logits

    def forward(self, image: torch.Tensor):
        """Return ``(depth, logits, labels)`` or ``(depth,)`` for (1,3,H,W) ``image``."""
        out = self.model(image)
        if not self.with_logits:
            return (out['depth'],)
        logits = out['logits']
        return out['depth'], logits, logits.argmax(dim=1).to(torch.uint8)


def dense_output_names(with_logits: bool) -> Tuple[str, ...]:
    """Return the ONNX output names of a dense model export.

    Args:
        with_logits: whether the model has a segmentation head.

    Returns:
        ``('depth', 'logits', 'labels')`` or ``('depth',)``.
    """
    return ('depth', 'logits', 'labels') if with_logits else ('depth',)


def depth_shape(height: int, width: int) -> Tuple[str, Tuple[int, int, int, int]]:
    """Return ``('depth', shape)`` of a dense graph for an input of ``height`` x ``width``."""
    return 'depth', (1, 1, height, width)


def build_dense_export(config: str, weights: Optional[str] = None,
                       random_weights: bool = False) -> Dict[str, Any]:
    """Build the export spec of a dense model preset or model YAML, with its weights.

    Args:
        config: a dense model preset name or a dense model YAML file.
        weights: weights file; None = the shipped weights of the preset.
        random_weights: allow exporting without weights (random initialisation).

    Returns:
        The spec of ``relperception.runtime.model_export``: ``kind`` ``dense``, ``module``
        (:class:`DenseExportWrapper`), ``input_names``, ``output_names``, ``channels``,
        ``size_multiple``, ``default_size`` (H, W), ``metadata`` (preset name,
        preprocessing) and ``output_shape``.

    Raises:
        FileNotFoundError: no weights and ``random_weights`` is false.
        ValueError: unknown preset or weights that do not fit.
    """
    from relperception.models.dense import build_dense_model
    from relperception.models.presets import load_model_config

    conf = load_model_config(config)
    name = conf.get('name') or Path(config).stem
    source = weights or (None if random_weights else 'shipped')
    if source is None:
        logger.warning('exporting %s with RANDOM weights (--random-weights, seed 0)', name)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # reproducible random initialisation
            model = build_dense_model(conf, weights=source).eval()
    except FileNotFoundError as exc:
        if source != 'shipped':
            raise
        raise FileNotFoundError(f'{exc} (or pass --random-weights to export untrained '
                                f'weights for testing)') from None
    inp = conf.get('input', {})
    trained_heads = _trained_heads_record(conf, source)
    multiple = max(int(getattr(model, 'size_multiple', 1)), int(inp.get('multiple', 1)), 1)
    with_logits = getattr(model, 'segmentation_head', None) is not None
    metadata = {'kind': 'dense', 'preset': name, 'weights': str(source or 'random'),
                'depth_mode': conf.get('depth_mode'), 'input': inp,
                'class_names': conf.get('class_names', []),
                'model': json.loads(json.dumps(conf.get('model', {}), default=str))}
    if trained_heads is not None:   # the backends leave untrained heads' outputs out, as torch
        metadata[TRAINED_HEADS_KEY] = list(trained_heads)
    size = (round_to_multiple(int(inp.get('height', 480)), multiple),
            round_to_multiple(int(inp.get('width', 640)), multiple))
    return {'kind': 'dense', 'module': DenseExportWrapper(model, with_logits),
            'input_names': DENSE_INPUTS, 'output_names': dense_output_names(with_logits),
            'channels': 3, 'size_multiple': multiple, 'default_size': size,
            'metadata': metadata, 'output_shape': depth_shape}


def _trained_heads_record(conf: Dict[str, Any],
                          source: Optional[str]) -> Optional[Tuple[str, ...]]:
    """Return the heads the exported weights file records as trained (None: no record)."""
    from relperception.models.weights import read_trained_heads, shipped_weights

    if source is None:
        return None
    if source == 'shipped':
        source = shipped_weights(conf.get('weights') or conf.get('name'))
    return read_trained_heads(source)
