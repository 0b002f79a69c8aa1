# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Dense perception job: preprocessing -> inference backend -> depth, labels and colour images.

:class:`DensePipeline` is built from the ``dense.*`` ROS parameters (the same flat
configuration as :mod:`relperception.config`), so ``dense_node``, ``relperception infer`` and the
offline evaluation run the same code:

1. the model configuration: ``dense.model`` (a preset name or a model YAML file), or the shipped
   default of ``dense.backbone`` (``models.presets.preset_for_backbone``); ``dense.input_width`` /
   ``dense.input_height`` override the preset's network input size;
2. the backend (:func:`relperception.runtime.build_backend`): ``torch`` builds
   :class:`relperception.models.dense.DenseModel` and loads ``dense.weights`` (default: the
   weights shipped for the preset, :func:`relperception.models.weights.shipped_weights`);
   ``onnxruntime`` / ``tensorrt`` load ``dense.onnx_path``;
3. per frame: :func:`relperception.models.preprocess.prepare_image_array` (the model's resize
   rule and normalisation), the backend, then the outputs are resized back to the input
   resolution (numpy / OpenCV).

Only the ``torch`` backend imports torch (when it is built; ``tensorrt`` too, whose device
buffers are torch CUDA tensors): with ``onnxruntime`` the pipeline runs on an installation
without torch.

Depth units: a ``metric`` model predicts metres; a ``relative`` model (e.g. the Depth Anything
V2 preset) predicts a relative inverse depth ``d``, turned into metres as
``dense.depth_scale / d`` (so the scale is only as good as ``dense.depth_scale``;
:attr:`DenseResult.relative` says so). Depth outside [``dense.min_depth_m``,
``dense.max_depth_m``], non-finite or from a non-positive inverse depth is NaN (REP 118).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
import logging
from pathlib import Path
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
from relperception.config import load_config, section, SPECS
from relperception.imaging.colormap import colorize_depth, colorize_labels, overlay
from relperception.models.preprocess import INPUT_NAME
from relperception.models.presets import preset_for_backbone
from relperception.validation import check_not_folder, count_nonfinite, is_report_due

logger = logging.getLogger(__name__)

#: Alpha of the label colours over the camera image in :attr:`DenseResult.labels_color`.
OVERLAY_ALPHA = 0.5


@dataclass
class DenseResult:
    """The dense outputs of one image, all at the input image's resolution (H, W).

    Attributes:
        depth: (H, W) float32 metres, NaN where invalid (outside the configured range,
            non-finite, or a non-positive relative inverse depth).
        raw_depth: (H, W) float32 what the model predicts, resized to (H, W) (bilinear,
            align_corners=True, as the Depth Anything V2 reference): metres for a metric
            model, relative inverse depth (larger = nearer) for a relative one.
        relative: True when ``depth`` comes from a relative model through
            ``dense.depth_scale`` (its scale is only as good as that parameter).
        labels: (H, W) uint8 class ids (argmax of the bilinearly resized logits), or None when
            the model has no segmentation head.
        logits: (C, h, w) float32 class scores at the NETWORK resolution, or None.
        depth_color: (H, W, 3) uint8 RGB turbo colouring of ``depth`` (NaN black), or None
            when colours were not asked for.
        labels_color: (H, W, 3) uint8 RGB label colours blended over the image, or None.
        timing_ms: ``preprocess``, ``inference``, ``postprocess`` and ``total`` in ms.
        nonfinite_fraction: share of NaN / infinite values in the network's outputs (depth
            and logits); > 0 marks a frame whose outputs are partly meaningless (such depth is
            NaN, such pixels get the label :data:`NONFINITE_LABEL`).
    """

    depth: np.ndarray
    raw_depth: np.ndarray
    relative: bool
    labels: Optional[np.ndarray] = None
    logits: Optional[np.ndarray] = None
    depth_color: Optional[np.ndarray] = None
    labels_color: Optional[np.ndarray] = None
    timing_ms: Dict[str, float] = field(default_factory=dict)
    nonfinite_fraction: float = 0.0


#: Label of pixels whose class scores are not finite (the usual "void / ignore" id).
NONFINITE_LABEL = 255


def model_name(dense_conf: Mapping[str, Any]) -> str:
    """Return the model preset name or YAML path a ``dense`` section selects.

    Args:
        dense_conf: the ``dense`` section (``section(config, 'dense')``).

    Returns:
        ``dense_conf['model']`` when set, else the default preset of ``dense_conf['backbone']``.

    Raises:
        ValueError: for an unknown backbone.
    """
    name = str(dense_conf.get('model', '') or '').strip()
    if name:
        return name
    return preset_for_backbone(dense_conf.get('backbone', 'conv'))


def _weights_name(name: str) -> str:
    """Return the shipped-weights name of a preset name or model YAML path (its stem)."""
    return Path(name).stem if name.endswith(('.yaml', '.yml')) else name


def resolve_model_config(dense_conf: Mapping[str, Any]) -> Dict[str, Any]:
    """Return the model configuration the ``dense`` section selects, input size applied.

    Args:
        dense_conf: the ``dense`` section; ``input_width`` / ``input_height`` > 0 replace the
            preset's network input size (both or neither).

    Returns:
        The model configuration of :func:`relperception.models.presets.load_model_config`.

    Raises:
        ValueError: unknown preset, missing or bad YAML, only one of the input sizes set, or
            sizes that are not multiples of the model's ``input.multiple``.
    """
    from relperception.models.presets import load_model_config

    try:
        model_conf = dict(load_model_config(model_name(dense_conf)))
    except FileNotFoundError as exc:  # parameter checks reject with ValueError
        raise ValueError(str(exc)) from exc
    width = int(dense_conf.get('input_width', 0) or 0)
    height = int(dense_conf.get('input_height', 0) or 0)
    if (width > 0) != (height > 0):
        raise ValueError('dense.input_width and dense.input_height must be set together '
                         f'(got {width} x {height}; 0 = the preset default)')
    if width > 0:
        model_conf = _with_input_size(model_conf, width, height)
    return model_conf


def _with_input_size(model_conf: Dict[str, Any], width: int, height: int) -> Dict[str, Any]:
    """Return ``model_conf`` with the network input size set to ``width`` x ``height``."""
    inp = dict(model_conf['input'])
    multiple = int(inp.get('multiple', 1))
    if inp.get('resize', 'fixed') == 'fixed' and (width % multiple or height % multiple):
        raise ValueError(f'dense.input_width x dense.input_height ({width} x {height}) must be '
                         f'multiples of {multiple} for model {model_conf.get("name")}')
    inp['width'], inp['height'] = int(width), int(height)
    return {**model_conf, 'input': inp}


def is_relative(model_conf: Mapping[str, Any]) -> bool:
    """Return whether a model configuration predicts relative inverse depth."""
    return model_conf.get('depth_mode', 'metric') != 'metric'


def check_dense_config(config: Mapping[str, Any]) -> Dict[str, Any]:
    """Check a flat configuration's ``dense.*`` values without loading a model.

    Args:
        config: flat configuration (``dense.*`` keys; missing ones take the defaults).

    Returns:
        The ``dense`` section of the validated configuration.

    Raises:
        ValueError: invalid values, an unknown model, a missing weights or ONNX file, a
            ``device`` this torch does not have (backend torch), or
            ``min_depth_m >= max_depth_m``.
    """
    conf = section(load_config(overrides=dict(config)), 'dense')
    resolve_model_config(conf)
    if conf['min_depth_m'] >= conf['max_depth_m']:
        raise ValueError(f'dense.min_depth_m ({conf["min_depth_m"]}) must be below '
                         f'dense.max_depth_m ({conf["max_depth_m"]})')
    if conf['weights']:
        check_not_folder(conf['weights'], 'dense.weights:')
    if conf['weights'] and not Path(conf['weights']).is_file():
        raise ValueError(f'dense.weights: file not found: {conf["weights"]}')
    if conf['backend'] != 'torch':
        if not conf['onnx_path']:
            raise ValueError(f'dense.backend {conf["backend"]} needs dense.onnx_path')
        check_not_folder(conf['onnx_path'], 'dense.onnx_path:')
        if not Path(conf['onnx_path']).is_file():
            raise ValueError(f'dense.onnx_path: file not found: {conf["onnx_path"]}')
    else:
        from relperception.runtime.devices import torch_device

        torch_device(conf['device'], 'dense.device')
    return conf


def resolve_weights(dense_conf: Mapping[str, Any],
                    model_conf: Optional[Mapping[str, Any]] = None) -> Path:
    """Return the weights file for the torch backend: ``dense.weights`` or the shipped file.

    Args:
        dense_conf: the ``dense`` section.
        model_conf: the model configuration; its ``name`` names the shipped weights (default:
            the preset name, or the YAML file's stem).

    Returns:
        Path of an existing weights file.

    Raises:
        ValueError: no ``dense.weights`` and no weights shipped for the preset.
    """
    if dense_conf.get('weights'):
        path = Path(dense_conf['weights'])
        check_not_folder(path, 'dense.weights:')
        if not path.is_file():
            raise ValueError(f'dense.weights: file not found: {path}')
        return path
    from relperception.models.weights import shipped_weights

    model_conf = model_conf or {}
    name = model_conf.get('weights') if 'weights' in model_conf \
        else _weights_name(model_name(dense_conf))
    if not name:
        raise ValueError(f'model {model_conf.get("name", model_name(dense_conf))!r} has no '
                         'shipped weights: set dense.weights (relperception infer: --weights) '
                         'to a weights file')
    try:
        return Path(shipped_weights(name, advice=(
            'Train them with `relperception train ...` (which registers them with '
            'add_to_manifest), or set dense.weights (relperception infer: --weights FILE) to '
            'a weights file.')))
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from exc


def build_dense_backend(dense_conf: Mapping[str, Any], model_conf: Mapping[str, Any]):
    """Build the inference backend a ``dense`` section selects.

    Args:
        dense_conf: the ``dense`` section (``backend``, ``weights``, ``onnx_path``, ``device``).
        model_conf: the model configuration (:func:`resolve_model_config`).

    Returns:
        ``(backend, output_names)``: a :class:`relperception.runtime.base.InferenceBackend`
        taking ``{'image': (1, 3, h, w) float32}`` and returning ``depth`` (1, 1, h, w) and,
        with a segmentation head, ``logits`` (1, C, h, w).

    Raises:
        ValueError: missing files, weights that do not fit the model, unknown backend.
    """
    from relperception.runtime import build_backend

    backend_name = dense_conf.get('backend', 'torch')
    if backend_name == 'torch':
        from relperception.models.dense import build_dense_model
        from relperception.runtime.devices import torch_device

        device = str(torch_device(str(dense_conf.get('device', 'cpu')), 'dense.device'))
        # build_dense_model applies the preset's key_map (e.g. Depth Anything V2 files).
        module = build_dense_model(model_conf, weights=str(resolve_weights(dense_conf,
                                                                           model_conf)))
        module.eval()
        outputs = ['depth'] + (['logits'] if int(getattr(module, 'num_classes', 0)) else [])
        backend = build_backend('torch', module=module, input_names=[INPUT_NAME],
                                output_names=outputs, device=device)
        return backend, outputs
    path = dense_conf.get('onnx_path', '')
    if not path or not Path(path).is_file():
        raise ValueError(f'dense.backend {backend_name} needs dense.onnx_path to name an '
                         f'existing file, got {path!r}')
    preset = model_conf.get('name') or _weights_name(model_name(dense_conf))
    engine = None
    if backend_name == 'tensorrt':
        from relperception.runtime.engine_cache import ENGINE_KEYS, settings_from_config
        engine = settings_from_config({k: dense_conf.get(k, SPECS[f'dense.{k}'].default)
                                       for k in ENGINE_KEYS})
    # No spinning thread pools: an idle session's spinning threads would take the cores of
    # the other sessions of the process (LoFTR, a second dense model).
    threads = int(dense_conf.get('onnxruntime_threads',
                                 SPECS['dense.onnxruntime_threads'].default))
    backend = build_backend(backend_name, path=str(path), device=dense_conf.get('device', 'cpu'),
                            num_threads=threads or None, allow_spinning=False,
                            preset=preset, engine=engine)
    if 'depth' not in backend.output_names:
        raise ValueError(f'{path}: the model has no output named "depth" (outputs: '
                         f'{list(backend.output_names)})')
    # An export may also carry 'labels' (argmax at network size); labels are recomputed from
    # the logits at the image size here.
    return backend, [n for n in ('depth', 'logits') if n in backend.output_names]


def _resize_bilinear(array: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize (h, w) or (h, w, C) float32 bilinearly to (height, width) (pixel-centre aligned)."""
    if array.shape[:2] == (height, width):
        return np.ascontiguousarray(array, dtype=np.float32)
    return cv2.resize(np.ascontiguousarray(array, dtype=np.float32), (width, height),
                      interpolation=cv2.INTER_LINEAR)


def resize_depth(depth: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize a (h, w) network depth map to (height, width) as the model's reference does.

    Bilinear with ``align_corners=True`` (the Depth Anything V2 ``infer_image`` rule), computed
    without torch by :func:`relperception.models.preprocess.resize_output_array`: what
    :func:`relperception.models.preprocess.resize_output` gives, within 3 float32 ulp.

    Args:
        depth: (h, w) float depth or inverse depth.
        height: output height in pixels (>= 1).
        width: output width in pixels (>= 1).

    Returns:
        (height, width) float32.

    Raises:
        ValueError: ``depth`` is not a non-empty 2-D array, or a size is below 1.
    """
    from relperception.models.preprocess import resize_output_array

    depth = np.asarray(depth, dtype=np.float32)
    if depth.ndim != 2:
        raise ValueError(f'depth must be (h, w), got {depth.shape}')
    if depth.shape == (height, width):
        return np.ascontiguousarray(depth)
    return resize_output_array(depth[None, None], (height, width), 'depth')[0, 0]


def labels_from_logits(logits: np.ndarray, height: int, width: int) -> np.ndarray:
    """Return (height, width) uint8 class ids of (C, h, w) logits resized bilinearly.

    Args:
        logits: (C, h, w) float class scores, 1 <= C <= 256.
        height: output height in pixels.
        width: output width in pixels.

    Returns:
        (height, width) uint8 argmax over the classes; :data:`NONFINITE_LABEL` where a
        resized score is NaN or infinite.

    Raises:
        ValueError: wrong shape or more than 256 classes.
    """
    logits = np.asarray(logits)
    if logits.ndim != 3 or not 1 <= logits.shape[0] <= 256:
        raise ValueError(f'logits must be (C, h, w) with 1 <= C <= 256, got {logits.shape}')
    # Checked at the (smaller) input resolution: bilinear resizing keeps finite scores finite.
    all_finite = bool(np.isfinite(logits).all())
    if logits.shape[1:] != (height, width):
        # cv2.resize takes up to 512 channels as (h, w, C); the argmax of the upsampled
        # scores gives smooth class borders instead of network-resolution blocks.
        hwc = _resize_bilinear(np.moveaxis(logits.astype(np.float32, copy=False), 0, -1),
                               height, width)
        logits = hwc[None] if hwc.ndim == 2 else np.moveaxis(hwc, -1, 0)
    if all_finite:
        return np.argmax(logits, axis=0).astype(np.uint8)
    finite = np.isfinite(logits)
    labels = np.argmax(np.where(finite, logits, -np.inf), axis=0).astype(np.uint8)
    labels[~finite.all(axis=0)] = NONFINITE_LABEL
    return labels


def depth_to_metres(raw: np.ndarray, relative: bool, depth_scale: float, min_depth_m: float,
                    max_depth_m: float) -> np.ndarray:
    """Turn a model's depth output into metres with NaN where invalid.

    Args:
        raw: (H, W) float model output: metres (metric) or relative inverse depth (relative).
        relative: whether ``raw`` is a relative inverse depth (metres = depth_scale / raw).
        depth_scale: scale of the relative inverse depth (> 0).
        min_depth_m: depths below this are NaN.
        max_depth_m: depths above this are NaN.

    Returns:
        (H, W) float32 metres; non-finite, non-positive and out-of-range values are NaN.

    Raises:
        ValueError: ``raw`` not 2-D, ``depth_scale <= 0`` or ``min_depth_m >= max_depth_m``.
    """
    raw = np.asarray(raw, dtype=np.float32)
    if raw.ndim != 2:
        raise ValueError(f'raw depth must be (H, W), got {raw.shape}')
    if not depth_scale > 0:
        raise ValueError(f'depth_scale must be > 0, got {depth_scale}')
    if not min_depth_m < max_depth_m:
        raise ValueError(f'min_depth_m ({min_depth_m}) must be below max_depth_m '
                         f'({max_depth_m})')
    with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
        if relative:
            depth = np.where(raw > 0, np.float32(depth_scale) / raw, np.float32(np.nan))
        else:
            depth = raw.copy()
        depth = depth.astype(np.float32, copy=False)
        invalid = ~np.isfinite(depth) | (depth < min_depth_m) | (depth > max_depth_m) \
            | (depth <= 0)
    depth[invalid] = np.nan
    return depth


class DensePipeline:
    """Dense depth (and segmentation) for RGB images, built from the ``dense.*`` parameters.

    Args:
        config: flat configuration (``dense.*`` keys, see :mod:`relperception.config`);
            missing keys take their defaults, unknown keys raise ``ValueError``.
        backend: optional ready backend to use instead of building one from ``config``
            (``run({'image': ...})`` -> ``depth`` [, ``logits``]); ``model_conf`` is still
            resolved from ``config``.

    Attributes:
        conf: the validated ``dense`` section.
        model_conf: the model configuration (preprocessing, depth mode, classes).
        relative: whether the model predicts relative inverse depth.
        backend: the inference backend.
        output_names: the backend outputs used (``depth`` and possibly ``logits``).
        class_names: the model's class names (empty without segmentation head).
        untrained_heads: the heads (``depth``, ``segmentation``) whose weights were never
            trained according to the weights file's ``trained_heads`` metadata
            (:func:`relperception.models.weights.read_trained_heads`, e.g. ``('depth',)`` for
            the weights of ``relperception train seg`` from scratch; an exported ONNX file or
            engine carries the record of the weights it was exported from): their outputs are
            meaningless and a warning says so at construction; ``run`` still returns them
            (callers such as ``relperception infer`` leave them out). Empty for files without
            that record (e.g. official Depth Anything V2 files) and for injected backends.

    Raises:
        ValueError: invalid configuration, missing weights / ONNX file, weights that do not fit.
    """

    def __init__(self, config: Optional[Mapping[str, Any]] = None, backend=None) -> None:
        if config is not None and not isinstance(config, Mapping):
            raise ValueError(f'config must be a mapping, got {type(config).__name__}')
        self.conf = check_dense_config(dict(config or {}))
        self.model_conf = resolve_model_config(self.conf)
        self.relative = is_relative(self.model_conf)
        if backend is None:
            self.backend, self.output_names = build_dense_backend(self.conf, self.model_conf)
        else:
            self.backend = backend
            self.output_names = [n for n in backend.output_names if n in ('depth', 'logits')]
        #: Frames whose network outputs held NaN or infinite values (see ``DenseResult``).
        self.frames_with_nonfinite_output = 0
        self.class_names: List[str] = list(self.model_conf.get('class_names', []) or []) \
            if 'logits' in self.output_names else []
        self.untrained_heads: Tuple[str, ...] = ()
        if backend is None:
            self.untrained_heads = self._untrained_heads()
        logger.info('dense pipeline: model %s (%s depth%s), backend %s',
                    model_name(self.conf), 'relative' if self.relative else 'metric',
                    f', {len(self.class_names)} classes' if self.class_names else '',
                    self.conf['backend'])

    def _untrained_heads(self) -> Tuple[str, ...]:
        """Return the output heads the weights record as untrained; warn about them.

        The torch backend reads the weights file's record; an exported file (ONNX metadata,
        a TensorRT engine's metadata file) carries the record of the weights it was exported
        from.
        """
        from relperception.models.trained_heads import parse_trained_heads, TRAINED_HEADS_KEY

        if self.conf['backend'] == 'torch':
            from relperception.models.weights import read_trained_heads

            path = resolve_weights(self.conf, self.model_conf)
            trained = read_trained_heads(path)
        else:   # torch-free: the record the export copied into the file's metadata
            path = self.conf['onnx_path']
            metadata = getattr(self.backend, 'metadata', None) or {}
            trained = parse_trained_heads(metadata.get(TRAINED_HEADS_KEY), path)
        if trained is None:
            return ()
        heads = ('depth',) + (('segmentation',) if self.has_segmentation else ())
        untrained = tuple(h for h in heads if h not in trained)
        if untrained:
            logger.warning('the %s head of the weights %s %s never trained (trained_heads: '
                           '%s): %s output is meaningless; train it with `relperception train '
                           '%s --init %s`', ' and '.join(untrained), path,
                           'were' if len(untrained) > 1 else 'was',
                           ', '.join(trained) or 'none',
                           'their' if len(untrained) > 1 else 'its',
                           'depth' if 'depth' in untrained else 'seg', path)
        return untrained

    @property
    def has_segmentation(self) -> bool:
        """Whether the model outputs class logits."""
        return 'logits' in self.output_names

    def infer_raw(self, rgb: np.ndarray) -> Dict[str, np.ndarray]:
        """Preprocess ``rgb`` and run the backend; outputs at the NETWORK resolution.

        Args:
            rgb: (H, W, 3) uint8 RGB image.

        Returns:
            ``{'depth': (h, w) float32, 'logits': (C, h, w) float32 (with a seg head)}``.

        Raises:
            ValueError: not an (H, W, 3) uint8 image, or backend outputs of a wrong shape.
        """
        outputs, _ = self._forward(rgb)
        return outputs

    def _forward(self, rgb: np.ndarray):
        check_rgb(rgb)
        from relperception.models.preprocess import prepare_image_array

        start = time.perf_counter()
        image = prepare_image_array(rgb, self.model_conf)
        prepared = time.perf_counter()
        outputs = self.backend.run({INPUT_NAME: image})
        inferred = time.perf_counter()
        depth = np.asarray(outputs['depth'], dtype=np.float32)
        if depth.ndim != 4 or depth.shape[:2] != (1, 1):
            raise ValueError(f'backend depth must be (1, 1, h, w), got {depth.shape}')
        result = {'depth': depth[0, 0]}
        if self.has_segmentation:
            logits = np.asarray(outputs['logits'], dtype=np.float32)
            if logits.ndim != 4 or logits.shape[0] != 1:
                raise ValueError(f'backend logits must be (1, C, h, w), got {logits.shape}')
            result['logits'] = logits[0]
        return result, (start, prepared, inferred)

    def run(self, rgb: np.ndarray, colors: bool = True) -> DenseResult:
        """Run the model on one image and return depth, labels and colour images.

        Args:
            rgb: (H, W, 3) uint8 RGB image.
            colors: also compute ``depth_color`` and ``labels_color``.

        Returns:
            The :class:`DenseResult` at the resolution of ``rgb``.

        Raises:
            ValueError: not an (H, W, 3) uint8 image, or bad backend outputs.
        """
        outputs, (start, prepared, inferred) = self._forward(rgb)
        nonfinite_fraction = self._count_nonfinite(outputs)
        height, width = rgb.shape[:2]
        raw = resize_depth(outputs['depth'], height, width)
        depth = depth_to_metres(raw, self.relative, self.conf['depth_scale'],
                                self.conf['min_depth_m'], self.conf['max_depth_m'])
        logits = outputs.get('logits')
        labels = None if logits is None else labels_from_logits(logits, height, width)
        depth_color = labels_color = None
        if colors:
            depth_color = colorize_depth(depth)
            if labels is not None:
                labels_color = overlay(rgb, colorize_labels(labels), OVERLAY_ALPHA)
        done = time.perf_counter()
        timing = {'preprocess': 1e3 * (prepared - start),
                  'inference': 1e3 * (inferred - prepared),
                  'postprocess': 1e3 * (done - inferred), 'total': 1e3 * (done - start)}
        return DenseResult(depth=depth, raw_depth=raw, relative=self.relative, labels=labels,
                           logits=logits, depth_color=depth_color, labels_color=labels_color,
                           timing_ms=timing, nonfinite_fraction=nonfinite_fraction)

    def _count_nonfinite(self, outputs: Mapping[str, np.ndarray]) -> float:
        """Return the share of non-finite network outputs; count and warn when > 0."""
        bad, total = count_nonfinite(outputs.values())
        if not bad:
            return 0.0
        self.frames_with_nonfinite_output += 1
        count = self.frames_with_nonfinite_output
        if is_report_due(count):
            logger.warning('the dense model output %d NaN/infinite values (%.1f %% of the '
                           'outputs of the frame; %d such frames so far): broken weights or an '
                           'export problem; that depth is invalid and those pixels are '
                           'labelled %d', bad, 100.0 * bad / total, count, NONFINITE_LABEL)
        return bad / total


def check_rgb(rgb: Any) -> np.ndarray:
    """Return ``rgb`` if it is an (H, W, 3) uint8 image with H, W >= 1, else raise ValueError."""
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 \
            or rgb.shape[2] != 3 or rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise ValueError('image must be an (H, W, 3) uint8 RGB array, got '
                         f'{getattr(rgb, "dtype", type(rgb))} of shape '
                         f'{getattr(rgb, "shape", ())}')
    return rgb


def colorize_raw_depth(raw: np.ndarray, relative: bool) -> np.ndarray:
    """Colour a model's raw depth output (near blue, far red), independent of any scale.

    Args:
        raw: (H, W) float metres (metric) or relative inverse depth (relative).
        relative: whether ``raw`` is an inverse depth (coloured as ``1 / raw``).

    Returns:
        (H, W, 3) uint8 RGB; invalid pixels black.
    """
    raw = np.asarray(raw, dtype=np.float32)
    if relative:
        with np.errstate(divide='ignore', invalid='ignore'):
            raw = np.where(raw > 0, 1.0 / raw, np.nan).astype(np.float32)
    return colorize_depth(raw)


def dense_section(config: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Return the validated ``dense`` section of a flat configuration (defaults filled in)."""
    return section(load_config(overrides=dict(config or {})), 'dense')


__all__: Sequence[str] = (
    'DenseResult', 'DensePipeline', 'NONFINITE_LABEL', 'build_dense_backend',
    'check_dense_config', 'check_rgb', 'colorize_raw_depth', 'dense_section', 'depth_to_metres',
    'is_relative', 'labels_from_logits', 'model_name', 'resolve_model_config', 'resolve_weights')
