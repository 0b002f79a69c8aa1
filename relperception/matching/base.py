# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The ``Matcher`` protocol every correspondence method follows, input checks and a factory.

A matcher takes two (H, W) uint8 grey images and returns ``relperception.core_types.Matches``:
pixel coordinates (x right, y down, pixel centre at integer) of corresponding points in
image 0 and image 1 plus a confidence in [0, 1].

A matcher may say ``repeatable_keypoints = False`` (class attribute; True when absent): its
``keypoints0`` are not keypoints detected in image 0 that the same image would give again as
image 0 of another pair, so points cannot be followed from pair to pair (LoFTR: coarse grid
cells refined in image 1 only). Visual odometry's monocular local map needs repeatable
keypoints; with other matchers it uses two-view steps.

A matcher may say ``selects_keypoints = True`` (class attribute; False when absent): its
``match`` then takes ``select``, a callable (N, 2) keypoints of image 0 -> (N,) bool, and matches
only the keypoints it keeps. Each keypoint is matched on its own, so the kept keypoints get the
matches they would get among all of them; visual odometry's map tracking matches only the
keyframe's keypoints that carry map points.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, runtime_checkable

import numpy as np

from relperception.config import section, SPECS
from relperception.core_types import Matches

#: ``matcher_weights`` of :func:`describe_matcher` for LoFTR on the weights shipped for its preset.
SHIPPED_WEIGHTS = 'shipped'

#: Signature of a motion prior: (N, 2) float32 keypoints of image 0 (pixels) ->
#: (N, 2) float32 predicted positions in image 1 (pixels), NaN where there is no prediction.
Predictor = Callable[[np.ndarray], np.ndarray]

#: Signature of a keypoint selection: (N, 2) float32 keypoints of image 0 (pixels) -> (N,) bool,
#: True for the keypoints to match (matchers with ``selects_keypoints = True``).
Selector = Callable[[np.ndarray], np.ndarray]


@runtime_checkable
class Matcher(Protocol):
    """Anything that finds correspondences between two grey images."""

    def match(self, image0: np.ndarray, image1: np.ndarray,
              predict: Optional[Predictor] = None) -> Matches:
        """Return correspondences from ``image0`` to ``image1``.

        Args:
            image0: (H, W) uint8 grey image.
            image1: (H, W) uint8 grey image.
            predict: optional motion prior (e.g. from visual odometry) mapping (N, 2) float32
                keypoints of image 0 to (N, 2) float32 predicted positions in image 1, in
                pixels, NaN where there is no prediction. Matchers that search locally centre
                their search there; others may ignore it.

        Returns:
            ``Matches`` with (N, 2) float32 pixel coordinates in both images and (N,) float32
            confidence in [0, 1].
        """
        ...


def check_gray_image(image: np.ndarray, name: str = 'image') -> None:
    """Raise ``ValueError`` unless ``image`` is a non-empty (H, W) uint8 numpy array."""
    if not isinstance(image, np.ndarray):
        raise ValueError(f'{name} must be a numpy array, got {type(image).__name__}')
    if image.dtype != np.uint8:
        raise ValueError(f'{name} must be uint8 grey, got dtype {image.dtype}')
    if image.ndim != 2:
        raise ValueError(f'{name} must be (H, W) grey, got shape {image.shape}'
                         + (' (convert colour images to grey first)' if image.ndim == 3 else ''))
    if image.size == 0:
        raise ValueError(f'{name} is empty, shape {image.shape}')


def check_gray_pair(image0: np.ndarray, image1: np.ndarray, same_size: bool = True) -> None:
    """Raise ``ValueError`` unless both images are non-empty (H, W) uint8 arrays.

    Args:
        image0: (H, W) uint8 grey image.
        image1: (H, W) uint8 grey image.
        same_size: also require both images to have the same shape (default).
    """
    check_gray_image(image0, 'image0')
    check_gray_image(image1, 'image1')
    if same_size and image0.shape != image1.shape:
        raise ValueError(f'image0 {image0.shape} and image1 {image1.shape} differ in size')


def _build_ncc(conf: Optional[Mapping]) -> Matcher:
    from relperception.matching.ncc import NCCMatcher
    return NCCMatcher(None if conf is None else dict(conf))


def _build_klt(conf: Optional[Mapping]) -> Matcher:
    from relperception.matching.baselines import KLTMatcher
    return KLTMatcher(None if conf is None else dict(conf))


def _build_orb(conf: Optional[Mapping]) -> Matcher:
    from relperception.matching.baselines import ORBMatcher
    return ORBMatcher(None if conf is None else dict(conf))


def _build_loftr(conf: Optional[Mapping]) -> Matcher:
    from relperception.matching.loftr.matcher import LoFTRMatcher
    return LoFTRMatcher(None if conf is None else dict(conf))


_FACTORIES: Dict[str, Callable[[Optional[Mapping]], Matcher]] = {
    'ncc': _build_ncc,
    'klt': _build_klt,
    'orb': _build_orb,
    'loftr': _build_loftr,
}


def available_matchers() -> List[str]:
    """Return the names ``build_matcher`` accepts."""
    return sorted(_FACTORIES)


def build_matcher(name: str, conf: Optional[Mapping] = None) -> Matcher:
    """Build a matcher by name.

    Args:
        name: matcher name; one of ``available_matchers()``: ``'ncc'``, the learned
            ``'loftr'`` (``relperception.matching.loftr.LoFTRMatcher``) and the classical
            baselines ``'klt'`` and ``'orb'``.
        conf: the matcher's configuration section (the ROS parameters under ``<name>.``
            with that prefix removed), or None for its defaults.

    Raises:
        ValueError: for an unknown name (listing the choices) or an invalid ``conf``.
    """
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f'unknown matcher {name!r}; choose one of {available_matchers()}')
    if conf is not None and not isinstance(conf, Mapping):
        raise ValueError(f'the {name} configuration must be a mapping, got '
                         f'{type(conf).__name__}')
    return factory(conf)


def describe_matcher(config: Mapping[str, Any]) -> Dict[str, Optional[str]]:
    """Name the matcher a flat configuration runs, the way results should state it.

    ``config['matcher']`` names the method. For ``'loftr'`` what runs is the model of
    ``loftr.preset`` (``loftr`` or ``loftr_lite``) with the weights of ``loftr.weights`` (empty:
    the weights shipped for the preset) or, with a backend other than torch, the exported model
    ``loftr.onnx_path``; so the LoFTR preset is named instead of ``'loftr'``.

    Args:
        config: flat configuration (:func:`relperception.config.load_config`); ``loftr.*`` keys
            it lacks take their defaults.

    Returns:
        ``{'matcher': name, 'matcher_weights': file}``: ``name`` is the method, or the LoFTR
        preset; ``file`` is the LoFTR weights file, its exported model file or
        :data:`SHIPPED_WEIGHTS`, and None for the other matchers.

    Raises:
        ValueError: when ``config`` is not a mapping or names no known matcher.
    """
    name = config.get('matcher') if isinstance(config, Mapping) else None
    if name not in _FACTORIES:
        raise ValueError(f'config must name a matcher, one of {available_matchers()}; got '
                         f'{name!r}')
    if name != 'loftr':
        return {'matcher': name, 'matcher_weights': None}
    conf = {key: SPECS[f'loftr.{key}'].default
            for key in ('preset', 'weights', 'backend', 'onnx_path')}
    conf.update(section(config, 'loftr'))
    if conf['backend'] != 'torch':
        weights = str(conf['onnx_path'])
    else:
        weights = str(conf['weights']) or SHIPPED_WEIGHTS
    return {'matcher': str(conf['preset']), 'matcher_weights': weights}
