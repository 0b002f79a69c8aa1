# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``LoFTRMatcher``: the ``Matcher`` protocol on top of the fixed-shape LoFTR network.

Configuration (the ``loftr.*`` ROS parameters without prefix, see ``relperception.config``):
``preset`` (``loftr`` / ``loftr_lite``), ``weights`` (file; empty = shipped weights of the
preset), ``backend`` (``torch``, ``onnxruntime``, ``tensorrt``), ``onnx_path`` (exported model
or engine for the latter two), ``device`` (torch device), ``threshold`` (coarse confidence) and
``input_width`` / ``input_height`` (multiples of 8, the coarse stride; 0 = the preset default),
``max_matches`` (cells refined per pair) and ``compute_dtype`` (``float32`` / ``bfloat16``
backbone and coarse transformer, backend ``torch`` only; see ``LoFTR``).

Both images are resized to the input size, matched, and the per-cell outputs compacted here:
a cell is kept when the network's ``mask`` holds (mutual nearest neighbour and border test;
exported graphs run with an in-graph threshold of 0) AND ``confidence > threshold``, so one
exported file serves every threshold. The torch model runs with the in-graph threshold set to
``threshold`` (same matches), which lets it refine only the kept cells; so does a two-stage
export (``relperception export --two-stage``, ``two_stage``). Keypoints are mapped
back to the original pixels with the pixel-centre convention of ``cv2.resize`` (centres at
integers: ``x_orig = (x_in + 0.5) * W_orig / W_in - 0.5``).

Only backend ``torch`` imports torch (when the matcher is built; ``tensorrt`` too, whose device
buffers are torch CUDA tensors): preprocessing (OpenCV resize, scaling to [0, 1]) and the
compaction here are numpy, so backend ``onnxruntime`` runs on an installation without torch.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Mapping, Optional, TYPE_CHECKING

import cv2
import numpy as np
from relperception.config import SPECS
from relperception.core_types import Matches
from relperception.matching.base import check_gray_image, check_gray_pair, Predictor
from relperception.matching.loftr.contract import (check_compute_dtype, ONNX_INPUT_NAMES,
                                                   ONNX_OUTPUT_NAMES)
from relperception.matching.loftr.presets import available_presets, PRESETS
from relperception.runtime.devices import torch_device
from relperception.runtime.engine_cache import ENGINE_KEYS, settings_from_config
from relperception.validation import count_nonfinite, is_report_due

if TYPE_CHECKING:  # the torch backend's types; imported when that backend is built
    from relperception.matching.loftr.model import LoFTR
    import torch

logger = logging.getLogger(__name__)

BACKENDS = ('torch', 'onnxruntime', 'tensorrt')
SIZE_MULTIPLE = 8  # the coarse stride: the model needs H, W divisible by 8


def resize_scale(size_from: int, size_to: int) -> float:
    """Return the factor s with ``x_from = (x_to + 0.5) * s - 0.5`` for a resize along one axis."""
    return float(size_from) / float(size_to)


def to_original(xy: np.ndarray, shape_orig, shape_in) -> np.ndarray:
    """Map (N, 2) pixel coordinates of a resized image back to the original image.

    Args:
        xy: (N, 2) x, y in the resized image (pixel centres at integers).
        shape_orig: (H, W) of the original image.
        shape_in: (H, W) of the resized image.

    Returns:
        (N, 2) float32 coordinates in the original image.
    """
    sx = resize_scale(shape_orig[1], shape_in[1])
    sy = resize_scale(shape_orig[0], shape_in[0])
    out = (np.asarray(xy, np.float64) + 0.5) * np.array([sx, sy]) - 0.5
    return out.astype(np.float32)


def _to_gray(image: np.ndarray, name: str) -> np.ndarray:
    if isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[2] in (3, 4):
        code = cv2.COLOR_BGR2GRAY if image.shape[2] == 3 else cv2.COLOR_BGRA2GRAY
        image = cv2.cvtColor(np.ascontiguousarray(image), code)
    check_gray_image(image, name)
    return image


class LoFTRMatcher:
    """Learned detector-free matcher (LoFTR-style) implementing the ``Matcher`` protocol."""

    #: Matches start on a coarse grid of image 0 and are refined in image 1 only, so a point
    #: found in image 1 is not a keypoint of that image when it becomes image 0: no tracks
    #: from pair to pair (see ``relperception.matching.base``).
    repeatable_keypoints = False

    default_conf: Dict[str, Any] = {
        'preset': 'loftr_lite',
        'weights': '',
        'backend': 'torch',
        'onnx_path': '',
        'onnxruntime_threads': SPECS['loftr.onnxruntime_threads'].default,
        'device': 'cpu',
        'threshold': 0.2,
        'input_width': 0,
        'input_height': 0,
        'max_matches': 0,
        'compute_dtype': 'float32',
        # TensorRT engine building (backend tensorrt): defaults in the schema
        **{key: SPECS[f'loftr.{key}'].default for key in ENGINE_KEYS},
    }

    def __init__(self, conf: Optional[Mapping[str, Any]] = None,
                 model: Optional[LoFTR] = None):
        """Build the matcher.

        Args:
            conf: ``loftr.*`` parameters without prefix (missing keys take ``default_conf``).
            model: an already built ``LoFTR`` to use instead of loading weights (backend
                ``torch`` only; e.g. a model being trained, or random weights in tests). Its
                in-graph threshold follows ``threshold`` and it is moved to ``device`` in eval
                mode.

        Raises:
            ValueError: unknown keys, preset or backend, or an input size that is not a
                multiple of 8; weights that do not fit the preset.
            FileNotFoundError: no weights file given and none shipped for the preset.
        """
        unknown = sorted(set(conf or {}) - set(self.default_conf))
        if unknown:
            raise ValueError(f'unknown loftr parameters {unknown}; known: '
                             f'{sorted(self.default_conf)}')
        self.conf = {**self.default_conf, **dict(conf or {})}
        c = self.conf
        if c['preset'] not in PRESETS:
            raise ValueError(f'unknown loftr preset {c["preset"]!r}; choose one of '
                             f'{available_presets()}')
        if c['backend'] not in BACKENDS:
            raise ValueError(f'unknown loftr backend {c["backend"]!r}; choose one of {BACKENDS}')
        if check_compute_dtype(c['compute_dtype']) != 'float32' and c['backend'] != 'torch':
            raise ValueError(f'loftr compute_dtype {c["compute_dtype"]} applies to backend '
                             f'torch only (exported models run in float32), not '
                             f'{c["backend"]}')
        #: Image pairs whose network outputs held NaN or infinite values.
        self.calls_with_nonfinite_output = 0
        threads = SPECS['loftr.onnxruntime_threads'].validate(c['onnxruntime_threads'])
        self.threshold = float(c['threshold'])
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f'threshold must be in [0, 1], got {self.threshold}')
        default_h, default_w = PRESETS[c['preset']]['input_size']
        height = int(c['input_height']) or int(default_h)
        width = int(c['input_width']) or int(default_w)
        if height % SIZE_MULTIPLE or width % SIZE_MULTIPLE or height <= 0 or width <= 0:
            raise ValueError(f'input size {width}x{height} must be positive multiples of '
                             f'{SIZE_MULTIPLE}')
        self.input_size = (height, width)
        self.model: Optional[LoFTR] = None
        self.backend = None
        if c['backend'] == 'torch':
            from relperception.matching.loftr.model import LoFTR

            self.device = torch_device(c['device'], 'loftr.device')
            if model is None:
                model_conf = {'compute_dtype': c['compute_dtype']}
                if c['max_matches']:
                    model_conf['fine_topk'] = int(c['max_matches'])
                model = LoFTR(model_conf, preset=c['preset'])
                model.load_weights(self._load_state(c['weights'], c['preset']))
            self.model = model.to(self.device).eval()
        else:
            if model is not None:
                raise ValueError('a torch model can only be passed with backend torch')
            from relperception.matching.loftr.two_stage import open_loftr_backend
            engine = settings_from_config(c) if c['backend'] == 'tensorrt' else None
            self.backend = open_loftr_backend(c['backend'], c['onnx_path'], self.threshold,
                                              device=c['device'], preset=c['preset'],
                                              num_threads=threads or None,
                                              engine=engine)

    @staticmethod
    def _load_state(weights: str, preset: str) -> Dict[str, torch.Tensor]:
        from relperception.models.weights import load_state_dict_file, shipped_weights
        if weights:
            try:
                return load_state_dict_file(weights)
            except FileNotFoundError as exc:
                raise FileNotFoundError(f'loftr.weights: {exc}') from None
        try:
            path = shipped_weights(preset, advice=(
                f'Train them with `relperception train matcher --config {preset}`, or set '
                'loftr.weights to a weights file (for preset loftr a kornia / official LoFTR '
                'checkpoint works).'))
        except FileNotFoundError as exc:
            raise FileNotFoundError(f'LoFTR preset {preset!r}: {exc}') from None
        return load_state_dict_file(path)

    def _prepare(self, image: np.ndarray) -> np.ndarray:
        height, width = self.input_size
        if image.shape != (height, width):
            shrink = image.shape[0] > height and image.shape[1] > width
            image = cv2.resize(image, (width, height),
                               interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
        return (image.astype(np.float32) / 255.0)[None, None]

    def infer(self, image0: np.ndarray, image1: np.ndarray) -> Dict[str, np.ndarray]:
        """Run the network on two (H, W) uint8 grey images resized to the input size.

        Returns:
            dict of numpy arrays with batch 1 removed: ``keypoints0``, ``keypoints1`` (M, 2)
            in input-size pixels, ``confidence`` (M,), ``mask`` (M,) bool. With backend torch
            ``mask`` already includes ``confidence > threshold`` and only masked cells have a
            refined ``keypoints1`` (the others: the centre of the best coarse cell).

        Raises:
            ValueError: images that are not 2-D uint8 grey arrays (see ``check_gray_pair``).
        """
        check_gray_pair(image0, image1, same_size=False)
        inputs = {'image0': self._prepare(image0), 'image1': self._prepare(image1)}
        if self.model is not None:
            # eager mode refines only masked cells: mask with the threshold (same matches)
            self.model.threshold = self.threshold
            import torch

            with torch.inference_mode():
                out = self.model(*(torch.from_numpy(inputs[n]).to(self.device)
                                   for n in ONNX_INPUT_NAMES))
            out = {k: out[k][0].float().cpu().numpy() if k != 'mask' else out[k][0].cpu().numpy()
                   for k in ONNX_OUTPUT_NAMES}
        else:
            if hasattr(self.backend, 'threshold'):  # two-stage export: refines cells above it
                self.backend.threshold = self.threshold
            raw = self.backend.run(inputs)
            out = {k: np.asarray(raw[k])[0] for k in ONNX_OUTPUT_NAMES}
        return out

    def match(self, image0: np.ndarray, image1: np.ndarray,
              predict: Optional[Predictor] = None) -> Matches:
        """Return correspondences from ``image0`` to ``image1`` (``predict`` is ignored).

        Args:
            image0: (H0, W0) uint8 grey image.
            image1: (H1, W1) uint8 grey image (may differ in size; both are resized).
            predict: unused (LoFTR searches globally).

        Returns:
            ``Matches`` in original pixel coordinates, confidence in [0, 1], sorted by cell.

        Raises:
            ValueError: for images that are not non-empty (H, W) uint8 arrays.
        """
        out = self.infer(image0, image1)   # checks the images
        self._check_finite(out)
        keep = out['mask'].astype(bool) & (out['confidence'] > self.threshold)
        limit = int(self.conf['max_matches'])
        if self.model is None and limit and keep.sum() > limit:
            # an exported graph refines its own number of cells: keep the most confident
            # ``max_matches`` (the cells the torch model refines with fine_topk)
            ranked = np.flatnonzero(keep)[np.argsort(-out['confidence'][keep], kind='stable')]
            keep = np.zeros_like(keep)
            keep[ranked[:limit]] = True
        kp0 = to_original(out['keypoints0'][keep], image0.shape, self.input_size)
        kp1 = to_original(out['keypoints1'][keep], image1.shape, self.input_size)
        conf = np.clip(out['confidence'][keep], 0.0, 1.0)
        h1, w1 = image1.shape
        inside = ((kp1[:, 0] >= -0.5) & (kp1[:, 0] <= w1 - 0.5)
                  & (kp1[:, 1] >= -0.5) & (kp1[:, 1] <= h1 - 0.5))
        return Matches(kp0[inside], kp1[inside], conf[inside])

    def _check_finite(self, out: Mapping[str, np.ndarray]) -> None:
        """Count and warn about NaN / infinite network outputs (such cells are never matches)."""
        bad, _ = count_nonfinite(out[name] for name in ('confidence', 'keypoints0',
                                                        'keypoints1'))
        if not bad:
            return
        self.calls_with_nonfinite_output += 1
        count = self.calls_with_nonfinite_output
        if is_report_due(count):
            logger.warning('LoFTR output %d NaN/infinite values (%d such image pairs so far): '
                           'broken weights or export; those cells give no match', bad, count)

    def match_images(self, image0: np.ndarray, image1: np.ndarray) -> Matches:
        """Match two images given as grey (H, W) or BGR/BGRA (H, W, 3|4) uint8 arrays.

        Raises:
            ValueError: for arrays that are not uint8 images.
        """
        return self.match(_to_gray(image0, 'image0'), _to_gray(image1, 'image1'))
