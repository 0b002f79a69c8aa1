# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Run a two-stage LoFTR export (coarse graph + fine graph) as one ``InferenceBackend``.

``relperception export --config loftr --two-stage`` writes a coarse graph and a fine graph
whose match count K is an input dimension (``export.export_loftr_two_stage``). This
backend runs the coarse graph, chooses the cells to refine on the host (mask and confidence
above ``threshold``, at most ``fine_topk`` by confidence: the cells the single graph refines
and the matcher keeps) and runs the fine graph on exactly those. Inputs and outputs are the
single graph's (``image0``, ``image1`` -> ``keypoints0``, ``keypoints1``, ``confidence``,
``mask``), so ``LoFTRMatcher`` uses either file the same way; here ``mask`` already holds the
threshold and only masked cells have refined ``keypoints1``.

The host logic between the graphs (choosing the cells, gathering the fine graph's inputs,
scattering its outputs) is numpy: this module never imports torch.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import numpy as np
from relperception.matching.loftr.contract import ONNX_INPUT_NAMES, ONNX_OUTPUT_NAMES
from relperception.runtime.base import build_backend

logger = logging.getLogger(__name__)

COARSE_KIND = 'loftr_coarse'
#: Names of the coarse outputs the fine graph takes for the chosen cells only (the others,
#: ``fine_input0`` / ``fine_input1``, it takes whole).
PER_CELL_NAMES = ('keypoints0', 'keypoints1', 'tokens0', 'tokens1')


def fine_graph_path(coarse_path) -> Path:
    """Return the fine graph's file of a two-stage export: ``X.onnx`` -> ``X.fine.onnx``."""
    coarse_path = Path(coarse_path)
    return coarse_path.with_name(coarse_path.stem + '.fine.onnx')


def fine_graph_inputs(coarse: Dict[str, Any], cells) -> Dict[str, Any]:
    """Return the fine graph's inputs for the chosen ``cells`` of coarse outputs.

    Args:
        coarse: the coarse graph's outputs by name (numpy arrays or torch tensors), batch 1:
            ``fine_input0`` / ``fine_input1`` (1, Cm, H/2, W/2) and ``keypoints0``,
            ``keypoints1`` (1, M, 2), ``tokens0``, ``tokens1`` (1, M, Cc).
        cells: (K,) integer indices in [0, M) of the cells of image 0 to refine (an index
            array of the same kind as ``coarse``'s values).

    Returns:
        One array per name of ``FINE_INPUT_NAMES``: the fine inputs whole, the keypoints and
        tokens of the chosen cells ((1, K, 2) and (1, K, Cc)).

    Raises:
        ValueError: a missing coarse output.
    """
    missing = [n for n in ('fine_input0', 'fine_input1') + PER_CELL_NAMES if n not in coarse]
    if missing:
        raise ValueError(f'coarse outputs lack {missing}; got {sorted(coarse)}')
    picked = {n: coarse[n][:, cells] for n in PER_CELL_NAMES}
    return {'fine_input0': coarse['fine_input0'], 'fine_input1': coarse['fine_input1'],
            **picked}


class TwoStageLoFTRBackend:
    """Coarse + fine LoFTR graphs on onnxruntime, with the single graph's inputs and outputs.

    Args:
        coarse: an ``OnnxRuntimeBackend`` of the coarse graph (metadata ``kind``
            ``loftr_coarse``); the fine graph is opened from the file its metadata names.
        threshold: confidence threshold of the cells to refine (``loftr.threshold``; may be
            changed between calls).
        device: as ``build_backend``'s, for the fine graph.
        providers: onnxruntime execution providers of the fine graph.
        num_threads: onnxruntime intra-op threads of the fine graph.

    Raises:
        ValueError: ``coarse`` is not a coarse LoFTR graph, or ``threshold`` is outside [0, 1].
        FileNotFoundError: the fine graph is missing.
    """

    input_names = ONNX_INPUT_NAMES
    output_names = ONNX_OUTPUT_NAMES

    def __init__(self, coarse: Any, threshold: float = 0.2, device: str = 'cpu',
                 providers: Optional[Sequence[Any]] = None, num_threads: Optional[int] = None):
        """Open the fine graph named by ``coarse``'s metadata."""
        meta = getattr(coarse, 'metadata', {})
        if meta.get('kind') != COARSE_KIND:
            raise ValueError(f'{getattr(coarse, "path", coarse)} is not the coarse graph of a '
                             f'two-stage LoFTR export (metadata kind {meta.get("kind")!r})')
        self.coarse = coarse
        self.metadata = meta
        fine = Path(coarse.path).with_name(str(meta.get('fine_graph') or
                                               fine_graph_path(coarse.path).name))
        if not fine.is_file():
            raise FileNotFoundError(f'the fine graph {fine} of the two-stage LoFTR export '
                                    f'{coarse.path} is missing; export both again with '
                                    f'`relperception export --two-stage`')
        self.fine = build_backend('onnxruntime', path=fine, device=device, providers=providers,
                                  num_threads=num_threads, allow_spinning=False)
        pair = (meta.get('weights_sha256'), self.fine.metadata.get('weights_sha256'))
        if pair == (None, None):
            logger.warning('%s and %s were exported before their weights were fingerprinted: '
                           'whether they come from one export cannot be checked; export both '
                           'again with `relperception export --two-stage`', coarse.path, fine)
        elif pair[0] != pair[1]:
            raise ValueError(f'the coarse graph {coarse.path} and the fine graph {fine} come '
                             'from different exports (their weights fingerprints differ); '
                             'export both again with `relperception export --two-stage`')
        self.fine_topk = int(meta.get('fine_topk', 0))
        self.threshold = threshold

    @property
    def threshold(self) -> float:
        """Confidence threshold of the refined (and masked) cells."""
        return self._threshold

    @threshold.setter
    def threshold(self, value: float) -> None:
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f'threshold must be in [0, 1], got {value}')
        self._threshold = float(value)

    def choose(self, confidence: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Return the cells to refine of one pair: (K,) int64, by decreasing confidence.

        Args:
            confidence: (M,) float confidence per cell of image 0.
            mask: (M,) bool mask of the coarse graph (mutual nearest neighbour, border).
        """
        cells = np.flatnonzero(mask.astype(bool) & (confidence > self._threshold))
        order = np.argsort(-confidence[cells], kind='stable')
        if self.fine_topk > 0:
            order = order[:self.fine_topk]
        return cells[order]

    def run(self, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Match (B, 1, H, W) image batches; returns the single graph's outputs (see above).

        Raises:
            ValueError: inputs that do not fit the coarse graph.
        """
        coarse = self.coarse.run(inputs)
        keypoints1 = np.array(coarse['keypoints1'], copy=True)
        mask = np.zeros_like(coarse['mask'], dtype=bool)
        for b in range(keypoints1.shape[0]):
            cells = self.choose(coarse['confidence'][b], coarse['mask'][b])
            if not len(cells):
                continue
            item = {name: value[b:b + 1] for name, value in coarse.items()}
            refined = self.fine.run(fine_graph_inputs(item, cells))
            keypoints1[b, cells] = refined['refined_keypoints1'][0]
            mask[b, cells] = True
        return {'keypoints0': coarse['keypoints0'], 'keypoints1': keypoints1,
                'confidence': coarse['confidence'], 'mask': mask}


def open_loftr_backend(name: str, path, threshold: float, device: str = 'cpu',
                       num_threads: Optional[int] = None, preset: Optional[str] = None,
                       engine=None):
    """Return the backend of an exported LoFTR file: single graph, or two-stage pair.

    Args:
        name: ``onnxruntime`` or ``tensorrt`` (the ``loftr.backend`` value).
        path: the ``.onnx`` (single or coarse graph) or TensorRT engine file.
        threshold: the matcher's confidence threshold (two-stage files refine only cells
            above it).
        device: as ``build_backend``'s.
        num_threads: onnxruntime intra-op threads.
        preset: the LoFTR preset asked for; a file exported from another one is refused.
        engine: tensorrt with an ``.onnx`` path: the engine settings (``build_backend``).

    Raises:
        ValueError: the file lacks the inputs / outputs of a LoFTR export, or is another
            preset's.
        FileNotFoundError: missing files.
    """
    # no spin-waiting threads: the two graphs of a two-stage export take turns (measured: the
    # single graph runs as fast without)
    backend = build_backend(name, path=path, input_names=ONNX_INPUT_NAMES,
                            output_names=ONNX_OUTPUT_NAMES, device=device,
                            num_threads=num_threads,
                            allow_spinning=False, preset=preset, engine=engine)
    if getattr(backend, 'metadata', {}).get('kind') == COARSE_KIND:
        return TwoStageLoFTRBackend(backend, threshold, device=device, num_threads=num_threads)
    return backend
