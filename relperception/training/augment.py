# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Paired augmentation of an RGB image with its label and/or depth map (NumPy + OpenCV).

Every function takes an explicit ``numpy.random.Generator`` (see
:func:`relperception.training.loop.item_rng`), so augmentation is reproducible per item and
epoch. Geometry is applied identically to the image (bilinear), the labels (nearest, padding
``ignore_index``) and the depth (nearest, padding NaN); colour jitter touches the image only.

Metric depth under zoom: scaling the image by ``s`` makes everything look ``s`` times closer to a
camera of fixed intrinsics, so :func:`random_scale_crop` divides the depth by ``s`` (set
``depth_follows_zoom=False`` to keep it).
"""

from __future__ import annotations

from typing import Optional, Tuple

import cv2
import numpy as np

IGNORE_INDEX = 255
#: Largest zoom factor of a scale range (``check_scale_range``): beyond it the zoomed images
#: grow without bound (``--scale-range 1000 1000`` asked OpenCV for hundreds of GB).
MAX_ZOOM = 8.0

Arrays = Tuple[np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]


def _check(image: np.ndarray, label: Optional[np.ndarray], depth: Optional[np.ndarray]) -> None:
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f'image must be (H, W, 3) uint8, got {image.dtype} {image.shape}')
    for name, array in (('label', label), ('depth', depth)):
        if array is not None and array.shape != image.shape[:2]:
            raise ValueError(f'{name} shape {array.shape} differs from the image '
                             f'{image.shape[:2]}')
    if label is not None and label.dtype != np.uint8:
        raise ValueError(f'label must be uint8 class ids, got {label.dtype}')
    if depth is not None and depth.dtype != np.float32:
        raise ValueError(f'depth must be float32 metres, got {depth.dtype}')


def hflip(rng: np.random.Generator, image: np.ndarray, label: Optional[np.ndarray] = None,
          depth: Optional[np.ndarray] = None, p: float = 0.5) -> Arrays:
    """Mirror all given maps left-right with probability ``p``.

    Args:
        rng: random generator.
        image: (H, W, 3) uint8 RGB.
        label: optional (H, W) uint8 class ids.
        depth: optional (H, W) float32 metres.
        p: flip probability in [0, 1].

    Returns:
        (image, label, depth), contiguous; None stays None.
    """
    _check(image, label, depth)
    if rng.random() >= p:
        return image, label, depth

    def flip(a):
        return None if a is None else np.ascontiguousarray(a[:, ::-1])
    return flip(image), flip(label), flip(depth)


def random_scale_crop(rng: np.random.Generator, image: np.ndarray,
                      label: Optional[np.ndarray] = None, depth: Optional[np.ndarray] = None,
                      size: Tuple[int, int] = (256, 256),
                      scale_range: Tuple[float, float] = (0.5, 2.0), base_scale: float = 1.0,
                      ignore_index: int = IGNORE_INDEX, depth_follows_zoom: bool = True) -> Arrays:
    """Resize by ``base_scale * s`` (``s`` log-uniform in ``scale_range``), pad, crop ``size``.

    Args:
        rng: random generator.
        image: (H, W, 3) uint8 RGB.
        label: optional (H, W) uint8 class ids (nearest resampling, padded ``ignore_index``).
        depth: optional (H, W) float32 metres (nearest resampling, padded NaN).
        size: output (height, width) pixels.
        scale_range: (min, max) zoom factor relative to ``base_scale``; (1, 1) for a plain crop.
        base_scale: fixed resize applied first (e.g. to bring 480x360 images to the training
            resolution).
        ignore_index: label of padded pixels.
        depth_follows_zoom: divide depth by the zoom ``s`` (not by ``base_scale``; see the
            module docstring).

    Returns:
        (image (h, w, 3) uint8, label (h, w) uint8 or None, depth (h, w) float32 or None).

    Raises:
        ValueError: bad shapes, sizes or scale range.
    """
    _check(image, label, depth)
    out_h, out_w = int(size[0]), int(size[1])
    lo, hi = check_scale_range(scale_range)
    if out_h < 1 or out_w < 1 or not base_scale > 0:
        raise ValueError(f'bad size {size} or base_scale {base_scale}')
    zoom = float(np.exp(rng.uniform(np.log(lo), np.log(hi)))) if hi > lo else lo
    scale = zoom * float(base_scale)
    h, w = image.shape[:2]
    new_h, new_w = max(1, round(h * scale)), max(1, round(w * scale))
    if (new_h, new_w) != (h, w):
        interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
        image = cv2.resize(image, (new_w, new_h), interpolation=interp)
        if label is not None:
            label = cv2.resize(label, (new_w, new_h), interpolation=cv2.INTER_NEAREST)
        if depth is not None:
            depth = cv2.resize(depth, (new_w, new_h), interpolation=cv2.INTER_NEAREST)
    if depth is not None and depth_follows_zoom and zoom != 1.0:
        depth = depth / np.float32(zoom)
    pad_h, pad_w = max(out_h - new_h, 0), max(out_w - new_w, 0)
    if pad_h or pad_w:
        image = cv2.copyMakeBorder(image, 0, pad_h, 0, pad_w, cv2.BORDER_CONSTANT, value=0)
        if label is not None:
            label = cv2.copyMakeBorder(label, 0, pad_h, 0, pad_w, cv2.BORDER_CONSTANT,
                                       value=int(ignore_index))
        if depth is not None:
            depth = cv2.copyMakeBorder(depth, 0, pad_h, 0, pad_w, cv2.BORDER_CONSTANT,
                                       value=float('nan'))
    y0 = int(rng.integers(0, image.shape[0] - out_h + 1))
    x0 = int(rng.integers(0, image.shape[1] - out_w + 1))

    def crop(a):
        return None if a is None else np.ascontiguousarray(a[y0:y0 + out_h, x0:x0 + out_w])
    return crop(image), crop(label), crop(depth)


def check_scale_range(scale_range: Tuple[float, float],
                      name: str = 'scale_range') -> Tuple[float, float]:
    """Check a (min, max) zoom range and return it as floats.

    Args:
        scale_range: (min, max) zoom factors, 0 < min <= max <= :data:`MAX_ZOOM`.
        name: what the message calls the range (a command-line option, a conf key).

    Raises:
        ValueError: not two numbers with 0 < min <= max <= :data:`MAX_ZOOM`.
    """
    if len(scale_range) != 2:
        raise ValueError(f'{name} needs two numbers MIN MAX, got {scale_range}')
    lo, hi = float(scale_range[0]), float(scale_range[1])
    if not 0 < lo <= hi < float('inf'):
        raise ValueError(f'{name} needs 0 < MIN <= MAX, got {lo:g} {hi:g}')
    if hi > MAX_ZOOM:
        raise ValueError(f'{name}: MAX {hi:g} is beyond the largest zoom {MAX_ZOOM:g} (the '
                         f'zoomed images would grow without bound), got {lo:g} {hi:g}')
    return lo, hi


#: ``DenseAugment`` conf keys of the colour jitter, in :func:`check_colour_jitter`'s order.
COLOUR_JITTER_KEYS = ('brightness', 'contrast', 'saturation', 'hue')


def check_colour_jitter(brightness: float, contrast: float, saturation: float,
                        hue: float) -> None:
    """Check colour-jitter ranges (see :func:`colour_jitter`).

    Raises:
        ValueError: brightness, contrast or saturation outside [0, 1] (a factor drawn from
            ``[1 - x, 1 + x]`` must not go below 0) or hue outside [0, 0.5] turns.
    """
    factors = (brightness, contrast, saturation)
    if not all(0 <= float(x) <= 1 for x in factors) or not 0 <= float(hue) <= 0.5:
        raise ValueError(f'colour jitter: brightness, contrast and saturation must be in '
                         f'[0, 1] and hue in [0, 0.5] turns, got {brightness}, {contrast}, '
                         f'{saturation}, {hue}')


def colour_jitter(rng: np.random.Generator, image: np.ndarray, brightness: float = 0.3,
                  contrast: float = 0.3, saturation: float = 0.3, hue: float = 0.03
                  ) -> np.ndarray:
    """Randomly change brightness, contrast, saturation and hue of an RGB image.

    Each factor is drawn uniformly from ``[1 - x, 1 + x]`` (hue: a shift in ``[-hue, hue]``
    turns), applied in random order as in torchvision's ``ColorJitter``.

    Args:
        rng: random generator.
        image: (H, W, 3) uint8 RGB.
        brightness: relative brightness range, [0, 1].
        contrast: relative contrast range around the mean grey level, [0, 1].
        saturation: relative saturation range, [0, 1].
        hue: hue shift range in turns, [0, 0.5].

    Returns:
        (H, W, 3) uint8 RGB.
    """
    _check(image, None, None)
    check_colour_jitter(brightness, contrast, saturation, hue)
    out = image.astype(np.float32)
    for op in rng.permutation(4):
        if op == 0 and brightness > 0:
            out *= rng.uniform(1 - brightness, 1 + brightness)
        elif op == 1 and contrast > 0:
            grey = out @ np.float32([0.299, 0.587, 0.114])
            mean = np.float32(grey.mean())
            out = (out - mean) * rng.uniform(1 - contrast, 1 + contrast) + mean
        elif op == 2 and saturation > 0:
            grey = (out @ np.float32([0.299, 0.587, 0.114]))[..., None]
            out = (out - grey) * rng.uniform(1 - saturation, 1 + saturation) + grey
        elif op == 3 and hue > 0:
            hsv = cv2.cvtColor(np.clip(out, 0, 255).astype(np.uint8), cv2.COLOR_RGB2HSV_FULL)
            shift = int(round(rng.uniform(-hue, hue) * 256))
            hsv[..., 0] = ((hsv[..., 0].astype(np.int32) + shift) % 256).astype(np.uint8)
            out = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB_FULL).astype(np.float32)
        np.clip(out, 0, 255, out=out)
    return (out + 0.5).astype(np.uint8)


class DenseAugment:
    """Scale-crop, flip and colour jitter in one call (LightGlue-style ``default_conf``).

    ``conf`` keys: ``size`` (h, w) crop, ``scale_range``, ``base_scale``, ``base_height``,
    ``hflip`` probability, ``brightness``, ``contrast``, ``saturation``, ``hue`` (0 disables),
    ``ignore_index``, ``depth_follows_zoom``. ``base_height`` (None: off) sets the fixed zoom of
    each image to ``base_height / its height`` instead of ``base_scale``, so that images of
    different sizes all come to the same scale (e.g. the model's input height).
    """

    default_conf = {
        'size': (256, 256),
        'scale_range': (0.5, 2.0),
        'base_scale': 1.0,
        'base_height': None,
        'hflip': 0.5,
        'brightness': 0.3,
        'contrast': 0.3,
        'saturation': 0.3,
        'hue': 0.03,
        'ignore_index': IGNORE_INDEX,
        'depth_follows_zoom': True,
    }

    def __init__(self, conf: Optional[dict] = None):
        """Merge ``conf`` into ``default_conf``; unknown keys, bad zoom, jitter: ``ValueError``."""
        conf = dict(conf or {})
        unknown = set(conf) - set(self.default_conf)
        if unknown:
            raise ValueError(f'unknown augmentation keys {sorted(unknown)}')
        self.conf = {**self.default_conf, **conf}
        check_scale_range(self.conf['scale_range'])
        check_colour_jitter(*(self.conf[k] for k in COLOUR_JITTER_KEYS))
        base_height = self.conf['base_height']
        if base_height is not None and not (isinstance(base_height, (int, np.integer))
                                            and base_height >= 1):
            raise ValueError(f'base_height must be None or an integer >= 1, got {base_height!r}')

    def base_scale(self, height: int) -> float:
        """Return the fixed zoom of an image ``height`` pixels high (see the class docstring)."""
        base_height = self.conf['base_height']
        return float(self.conf['base_scale']) if base_height is None else \
            float(base_height) / float(height)

    def __call__(self, rng: np.random.Generator, image: np.ndarray,
                 label: Optional[np.ndarray] = None, depth: Optional[np.ndarray] = None
                 ) -> Arrays:
        """Return the augmented (image, label, depth); see the module functions for shapes."""
        c = self.conf
        image, label, depth = random_scale_crop(
            rng, image, label, depth, size=c['size'], scale_range=c['scale_range'],
            base_scale=self.base_scale(image.shape[0]), ignore_index=c['ignore_index'],
            depth_follows_zoom=c['depth_follows_zoom'])
        image, label, depth = hflip(rng, image, label, depth, p=c['hflip'])
        if max(c['brightness'], c['contrast'], c['saturation'], c['hue']) > 0:
            image = colour_jitter(rng, image, c['brightness'], c['contrast'], c['saturation'],
                                  c['hue'])
        return image, label, depth
