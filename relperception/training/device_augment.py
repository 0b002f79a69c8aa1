# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Segmentation training data kept on the training device, augmented there in batches.

For fast GPU training on a small labelled set (CamVid: 367 images): the images and labels are
copied to the device once as uint8 tensors at their full resolution, and each batch is
augmented on the device in a few batched operations, so that no CPU decoding, resizing or
host-to-device copy of pixels limits the step rate.

:class:`DeviceSegmentationData` is the map-style dataset the :class:`~relperception.training
.loop.Trainer` iterates: an item is not pixels but the augmentation *draw* of one image,
``{'index': () int64, 'params': (NUM_PARAMS,) float32}``, drawn on the CPU from
:func:`~relperception.training.loop.item_rng` ``(seed, epoch, index)``, so runs and resumed
runs are reproducible. The loss function turns the collated draws into pixels with
:meth:`DeviceSegmentationData.make_batch`::

    {'image': (B, 3, h, w) float32 normalised with mean/std,
     'labels': (B, h, w) int64 class ids, ignore_index where unscored or padded}

The augmentation follows :class:`~relperception.training.augment.DenseAugment` (same ``conf``
keys): a zoom by ``base_scale * s`` (or ``base_height / height * s``) with ``s`` log-uniform
in ``scale_range``, a random ``size`` crop of the zoomed image (padded at the bottom / right
where it is smaller: black image, ``ignore_index`` labels), a horizontal flip with probability
``hflip`` and colour jitter (brightness, contrast, saturation factors uniform in
``[1 - x, 1 + x]``, applied in this fixed order, then a hue rotation uniform in
``[-hue, hue]`` turns done as a rotation of the YIQ chroma plane). Geometry is one
``grid_sample`` per batch: bilinear for the image, nearest for the labels. Images of different
sizes are stored padded to the largest one; each keeps its own size.
"""

from __future__ import annotations

import logging
import math
from typing import Dict, Optional, Sequence

import numpy as np
from relperception.training.augment import DenseAugment
from relperception.training.loop import item_rng
import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

#: Entries of a draw's ``params``: zoom, crop position (y, x in [0, 1)), flip (0/1),
#: brightness, contrast and saturation factors, hue shift (turns).
PARAM_NAMES = ('zoom', 'crop_y', 'crop_x', 'flip', 'brightness', 'contrast', 'saturation',
               'hue')
NUM_PARAMS = len(PARAM_NAMES)

#: RGB -> YIQ (NTSC) and its inverse, for the hue rotation.
_RGB_TO_YIQ = torch.tensor([[0.299, 0.587, 0.114],
                            [0.595716, -0.274453, -0.321263],
                            [0.211456, -0.522591, 0.311135]], dtype=torch.float64)
_GREY = (0.299, 0.587, 0.114)


class DeviceSegmentationData(torch.utils.data.Dataset):
    """Labelled images on a device; items are augmentation draws (see the module docstring).

    Args:
        images: list of (H_i, W_i, 3) uint8 RGB arrays.
        labels: list of (H_i, W_i) uint8 class ids (``ignore_index`` unscored), same sizes.
        device: torch device that holds the data and augments it.
        augment: ``DenseAugment`` conf (``size``, ``scale_range``, ``base_scale``, ``hflip``,
            ``brightness``, ``contrast``, ``saturation``, ``hue``, ``ignore_index``).
        mean: normalisation mean (RGB, [0, 1] scale).
        std: normalisation standard deviation.
        seed: augmentation seed.

    Raises:
        ValueError: empty or mismatched lists, wrong dtypes or shapes, bad augmentation conf.
    """

    def __init__(self, images: Sequence[np.ndarray], labels: Sequence[np.ndarray], device,
                 augment: Optional[dict] = None, mean: Sequence[float] = (0.485, 0.456, 0.406),
                 std: Sequence[float] = (0.229, 0.224, 0.225), seed: int = 0):
        """Check the arrays and copy them to ``device`` (padded to the largest size)."""
        if not images or len(images) != len(labels):
            raise ValueError(f'need equally many images and labels (>= 1), got {len(images)} '
                             f'and {len(labels)}')
        for i, (image, label) in enumerate(zip(images, labels)):
            if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
                raise ValueError(f'image {i} must be (H, W, 3) uint8, got {image.dtype} '
                                 f'{image.shape}')
            if label.dtype != np.uint8 or label.shape != image.shape[:2]:
                raise ValueError(f'label {i} must be uint8 of the image size {image.shape[:2]}, '
                                 f'got {label.dtype} {label.shape}')
        self.conf = DenseAugment(augment).conf
        c = self.conf
        if not float(c['base_scale']) > 0 or min(c['size']) < 1 or not 0 <= float(c['hflip']) <= 1:
            raise ValueError(f'bad augmentation conf {c}')   # DenseAugment checked zoom, jitter
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise ValueError('mean and std need 3 values, std > 0')
        self.device = torch.device(device)
        self.ignore_index = int(c['ignore_index'])
        height = max(int(a.shape[0]) for a in images)
        width = max(int(a.shape[1]) for a in images)
        n = len(images)
        pixels = torch.zeros((n, 3, height, width), dtype=torch.uint8)
        # stored as label + 1 so that grid_sample's zero padding reads as "ignore"
        codes = torch.zeros((n, 1, height, width), dtype=torch.uint8)
        for i, (image, label) in enumerate(zip(images, labels)):
            h, w = label.shape
            pixels[i, :, :h, :w] = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
            code = label.astype(np.int64) + 1
            code[label == self.ignore_index] = 0
            if code.max() > 255:
                raise ValueError(f'label {i}: class ids must be < 255 (besides ignore_index)')
            codes[i, 0, :h, :w] = torch.from_numpy(code.astype(np.uint8))
        self.images = pixels.to(self.device)
        self.codes = codes.to(self.device)
        self.sizes = torch.tensor([a.shape[:2] for a in labels], dtype=torch.float32,
                                  device=self.device)
        self.mean = torch.tensor(mean, dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        self.seed = int(seed)
        self.epoch = 0
        self.count = n
        logger.info('%d training images (%dx%d max) on %s, augmented there', n, height, width,
                    self.device)

    def set_epoch(self, epoch: int) -> None:
        """Select the augmentation draws of ``epoch``."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Return the number of images."""
        return self.count

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        """Return the draw of item ``index``: ``{'index': () int64, 'params': (8,) float32}``."""
        rng = item_rng(self.seed, self.epoch, index)
        c = self.conf
        lo, hi = (float(v) for v in c['scale_range'])
        zoom = float(np.exp(rng.uniform(np.log(lo), np.log(hi)))) if hi > lo else lo
        jitter = [rng.uniform(1 - float(c[k]), 1 + float(c[k]))
                  for k in ('brightness', 'contrast', 'saturation')]
        hue = rng.uniform(-float(c['hue']), float(c['hue'])) if c['hue'] > 0 else 0.0
        params = [zoom, rng.random(), rng.random(), float(rng.random() < float(c['hflip'])),
                  *jitter, hue]
        return {'index': torch.tensor(int(index), dtype=torch.int64),
                'params': torch.tensor(params, dtype=torch.float32)}

    def make_batch(self, draws: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Return the augmented pixels of collated draws (see the module docstring).

        Args:
            draws: ``{'index': (B,) int64, 'params': (B, NUM_PARAMS) float32}``, on any device.

        Returns:
            ``{'image': (B, 3, h, w) float32, 'labels': (B, h, w) int64}`` on the data's
            device, ``(h, w)`` the conf's ``size``.

        Raises:
            ValueError: malformed draws.
        """
        index, params = (draws.get('index'), draws.get('params')) if isinstance(draws, dict) \
            else (None, None)
        if index is None or params is None or index.ndim != 1 or params.ndim != 2 \
                or params.shape != (index.shape[0], NUM_PARAMS):
            raise ValueError(f"draws must be {{'index': (B,), 'params': (B, {NUM_PARAMS})}}, "
                             f'got {type(draws).__name__}')
        index = index.to(self.device)
        params = params.to(self.device, torch.float32)
        grid = self._grid(index, params)
        image = F.grid_sample(self.images[index].float(), grid, mode='bilinear',
                              padding_mode='zeros', align_corners=False)
        codes = F.grid_sample(self.codes[index].float(), grid, mode='nearest',
                              padding_mode='zeros', align_corners=False)[:, 0].round().long()
        labels = torch.where(codes > 0, codes - 1, torch.full_like(codes, self.ignore_index))
        image = self._jitter(image, params)
        return {'image': (image / 255.0 - self.mean) / self.std, 'labels': labels}

    def _grid(self, index: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        """Return the (B, h, w, 2) ``grid_sample`` grid of the zoom, crop and flip."""
        out_h, out_w = (int(v) for v in self.conf['size'])
        size = self.sizes[index]                                   # (B, 2) original h, w
        if self.conf['base_height'] is None:
            scale = params[:, 0] * float(self.conf['base_scale'])
        else:   # each image to the same height (DenseAugment.base_scale)
            scale = params[:, 0] * float(self.conf['base_height']) / size[:, 0]
        scaled = torch.floor(size * scale[:, None] + 0.5).clamp(min=1)
        room = (torch.maximum(scaled, scaled.new_tensor([out_h, out_w])) -
                scaled.new_tensor([out_h, out_w]) + 1)
        y0 = torch.floor(params[:, 1] * room[:, 0])
        x0 = torch.floor(params[:, 2] * room[:, 1])
        ys = torch.arange(out_h, device=self.device, dtype=torch.float32)
        xs = torch.arange(out_w, device=self.device, dtype=torch.float32)
        flip = params[:, 3:4] > 0.5
        xs = torch.where(flip, (out_w - 1) - xs[None], xs[None].expand(len(index), -1))
        # source pixel centre of output pixel p: (offset + p + 0.5) / zoom, in original pixels
        # (the zoomed size is rounded, so the zoom per axis is scaled / size)
        zoom_y, zoom_x = scaled[:, 0] / size[:, 0], scaled[:, 1] / size[:, 1]
        src_y = (y0[:, None] + ys[None] + 0.5) / zoom_y[:, None]
        src_x = (x0[:, None] + xs + 0.5) / zoom_x[:, None]
        store_h, store_w = self.images.shape[-2:]
        gy = src_y / store_h * 2 - 1                                # (B, h)
        gx = src_x / store_w * 2 - 1                                # (B, w)
        # pixels beyond an image's own size but inside the padded store read as padding
        gy = torch.where(src_y < size[:, :1], gy, gy.new_tensor(2.0))
        gx = torch.where(src_x < size[:, 1:], gx, gx.new_tensor(2.0))
        return torch.stack(torch.broadcast_tensors(gx[:, None, :], gy[:, :, None]), dim=-1)

    def _jitter(self, image: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        """Return the colour-jittered (B, 3, h, w) image in [0, 255] (module docstring)."""
        c = self.conf
        if max(c['brightness'], c['contrast'], c['saturation'], c['hue']) <= 0:
            return image
        grey = image.new_tensor(_GREY).view(1, 3, 1, 1)
        factor = params[:, 4:8].view(-1, 4, 1, 1, 1).unbind(1)
        image = (image * factor[0]).clamp(0, 255)
        mean = (image * grey).sum(1, keepdim=True).mean(dim=(2, 3), keepdim=True)
        image = ((image - mean) * factor[1] + mean).clamp(0, 255)
        luma = (image * grey).sum(1, keepdim=True)
        image = ((image - luma) * factor[2] + luma).clamp(0, 255)
        if c['hue'] > 0:
            image = _rotate_hue(image, params[:, 7])
        return image


def _rotate_hue(image: torch.Tensor, turns: torch.Tensor) -> torch.Tensor:
    """Rotate the chroma of (B, 3, h, w) RGB in [0, 255] by ``turns`` (B,); clamp to [0, 255]."""
    angle = turns * (2 * math.pi)
    cos, sin = torch.cos(angle), torch.sin(angle)
    zero, one = torch.zeros_like(cos), torch.ones_like(cos)
    rotation = torch.stack([one, zero, zero, zero, cos, -sin, zero, sin, cos], 1).view(-1, 3, 3)
    to_yiq = _RGB_TO_YIQ.to(image.device, torch.float32)
    to_rgb = torch.linalg.inv(_RGB_TO_YIQ).to(image.device, torch.float32)  # inverted on CPU
    matrix = to_rgb @ rotation @ to_yiq                             # (B, 3, 3)
    out = torch.einsum('bij,bjhw->bihw', matrix, image)
    return out.clamp(0, 255)
