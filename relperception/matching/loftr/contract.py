# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The graph contract of the LoFTR network and its exports, without torch.

Input / output names of the single graph (:class:`relperception.matching.loftr.model.LoFTR`
exported through ``LoFTROnnxWrapper``) and of the two graphs of a two-stage export, and the
``compute_dtype`` names. The torch model (``model``), the exporter (``export``) and the
torch-free runtime path (``matcher`` with an onnxruntime / TensorRT backend, ``two_stage``) all
import them from here, so that running an exported file never imports torch.
"""

from typing import Any

#: ONNX input / output names of the single graph (the runtime backend contract).
ONNX_INPUT_NAMES = ('image0', 'image1')
ONNX_OUTPUT_NAMES = ('keypoints0', 'keypoints1', 'confidence', 'mask')
#: Outputs of the coarse graph of a two-stage export (``LoFTRCoarseOnnxWrapper``).
COARSE_OUTPUT_NAMES = ONNX_OUTPUT_NAMES + ('tokens0', 'tokens1', 'fine_input0', 'fine_input1')
#: Inputs / outputs of the fine graph of a two-stage export (``LoFTRFineOnnxWrapper``).
FINE_INPUT_NAMES = ('fine_input0', 'fine_input1', 'keypoints0', 'keypoints1', 'tokens0',
                    'tokens1')
FINE_OUTPUT_NAMES = ('refined_keypoints1',)

#: Values of the ``compute_dtype`` key (each the name of a torch dtype, see ``model``).
COMPUTE_DTYPE_NAMES = ('float32', 'bfloat16')


def check_compute_dtype(value: Any) -> str:
    """Return ``value`` if it is one of :data:`COMPUTE_DTYPE_NAMES`, else raise ValueError."""
    if value not in COMPUTE_DTYPE_NAMES:
        raise ValueError(f'compute_dtype must be one of {sorted(COMPUTE_DTYPE_NAMES)}, '
                         f'got {value!r}')
    return value


__all__ = ['COARSE_OUTPUT_NAMES', 'COMPUTE_DTYPE_NAMES', 'FINE_INPUT_NAMES',
           'FINE_OUTPUT_NAMES', 'ONNX_INPUT_NAMES', 'ONNX_OUTPUT_NAMES', 'check_compute_dtype']
