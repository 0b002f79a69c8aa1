# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Training data of the dense heads: labelled image folders, RGB-D bags, synthetic scenes.

Sources
-------
* **Segmentation**: an image folder in the CamVid / SegNet layout (``images/*.png`` +
  ``labels/*.png`` with the same names, 8-bit class ids, grey or as the indices of a palette
  PNG; JPEG labels are refused; see
  :mod:`relperception.data.converters.images`). Label ids ``>= num_classes`` (CamVid's 11
  'Unlabelled') become ``ignore_index`` (255).
* **Depth**: a rosbag2 bag with ``topics.IMAGE`` and ``topics.DEPTH`` (what the TUM converter
  and ``relperception synth`` write; depth paired to the nearest image stamp within
  ``tolerance_s``), or synthetic scenes rendered on the fly by
  :mod:`relperception.data.synthetic` (spec ``synth:SEEDS[:FRAMES[:WxH]]``, see
  :func:`parse_synthetic_spec`).

Frames are decoded once and kept in memory as uint8 RGB (+ uint8 labels / float32 depth); the
datasets return, per item, augmented crops as tensors::

    {'image': (3, h, w) float32 normalised with the model's mean/std,
     'labels': (h, w) int64 (segmentation), 'depth': (1, h, w) float32 metres, NaN invalid}

Augmentation is seeded per ``(seed, epoch, index)`` (``set_epoch`` is called by the trainer).
"""

from __future__ import annotations

from collections import Counter
import logging
from pathlib import Path
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from relperception.training.augment import DenseAugment, IGNORE_INDEX
from relperception.training.loop import item_rng
import torch

logger = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
SYNTH_PREFIX = 'synth:'


def normalise(image: np.ndarray, mean: Sequence[float] = IMAGENET_MEAN,
              std: Sequence[float] = IMAGENET_STD) -> torch.Tensor:
    """Return a (H, W, 3) uint8 RGB image as a (3, H, W) float32 tensor ``(x / 255 - m) / s``."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f'image must be (H, W, 3) uint8 RGB, got {image.dtype} {image.shape}')
    x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float().div_(255.0)
    m = torch.tensor(mean, dtype=torch.float32).view(3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(3, 1, 1)
    return (x - m) / s


# -- segmentation folders ---------------------------------------------------------------------
def find_label_pairs(root) -> List[Tuple[Path, Path]]:
    """Return (image, label) file pairs of a CamVid-layout folder ``root/images`` + ``labels``.

    Images are listed with the converters' :func:`~relperception.data.converters.list_images`;
    the label of ``images/x.jpg`` is ``labels/x.jpg`` or ``labels/x.png`` (the converter's rule).

    Raises:
        FileNotFoundError: missing folders or a missing label file.
        ValueError: no images.
    """
    from relperception.data.converters import list_images, require_dir

    root = Path(root)
    images = list_images(root / 'images')
    labels_dir = require_dir(root / 'labels', 'label folder')
    pairs = []
    for image_path in images:
        candidates = (labels_dir / image_path.name, labels_dir / f'{image_path.stem}.png')
        label = next((c for c in candidates if c.is_file()), None)
        if label is None:
            raise FileNotFoundError(f'no label image for {image_path.name} in {labels_dir}')
        pairs.append((image_path, label))
    return pairs


def frame_sequence(name: str) -> str:
    """Return the recording sequence of a frame named ``<sequence>_<frame>`` (CamVid's naming).

    ``'0006R0_f02370'`` -> ``'0006R0'``, ``'0001TP_006690'`` -> ``'0001TP'``; a name without
    ``_`` is its own sequence.
    """
    return str(name).split('_', 1)[0]


def select_sequences(pairs: Sequence[Tuple[Path, Path]], root,
                     sequences: Optional[Sequence[str]] = None,
                     exclude_sequences: Optional[Sequence[str]] = None
                     ) -> List[Tuple[Path, Path]]:
    """Keep the (image, label) pairs of ``sequences`` and drop those of ``exclude_sequences``.

    The sequence of a pair is :func:`frame_sequence` of its image's file stem. ``None``
    selects / drops nothing.

    Raises:
        ValueError: a named sequence has no frame in ``root`` (the message lists the folder's
            sequences), or no pair is left.
    """
    present = sorted({frame_sequence(image.stem) for image, _ in pairs})
    for name in list(sequences or ()) + list(exclude_sequences or ()):
        if str(name) not in present:
            raise ValueError(f'no frame of sequence {name!r} in {root} (frames are named '
                             f'<sequence>_<frame>; its sequences: {", ".join(present)})')
    keep = set(present) if sequences is None else {str(s) for s in sequences}
    keep -= {str(s) for s in exclude_sequences or ()}
    selected = [pair for pair in pairs if frame_sequence(pair[0].stem) in keep]
    if not selected:
        raise ValueError(f'no frame of {root} is left once sequences '
                         f'{sorted(set(map(str, exclude_sequences)))} are left out'
                         if exclude_sequences else f'no frame selected in {root}')
    return selected


def read_label_pair(image_path: Path, label_path: Path, num_classes: int,
                    ignore_index: int = IGNORE_INDEX, void_counts: Optional[Counter] = None
                    ) -> Tuple[np.ndarray, np.ndarray]:
    """Read one image (RGB uint8; grey is replicated) and its labels (ids >= C -> ignore).

    Args:
        void_counts: if given, receives the number of pixels of each id >= ``num_classes``
            (the ids turned into ``ignore_index``).

    A palette PNG label is read as its indices (the class ids; the palette only colours them,
    ``imaging.image_files.read_palette_indices``).

    Raises:
        ValueError: unreadable files, a JPEG label file (lossy compression changes class ids),
            labels that are no 8-bit single-channel or palette image, or a size mismatch.
    """
    from relperception.data.converters import read_colour_image, read_raw_image
    from relperception.imaging.image_files import read_palette_indices

    image, encoding = read_colour_image(image_path)
    if encoding == 'mono8':
        image = np.repeat(image[..., None], 3, axis=2)
    with open(label_path, 'rb') as handle:
        jpeg = handle.read(2) == b'\xff\xd8'
    if jpeg or Path(label_path).suffix.lower() in ('.jpg', '.jpeg'):
        raise ValueError(f'{label_path}: a JPEG label file: its lossy compression changes the '
                         'class ids (at every edge); store the labels as PNG (grey or palette)')
    label = read_palette_indices(label_path)
    if label is None:
        label = read_raw_image(label_path)
    if label.dtype != np.uint8 or label.ndim != 2:
        colour = ' (a colour image: colour-coded labels must become class ids first)' \
            if label.ndim == 3 and label.dtype == np.uint8 else ''
        raise ValueError(f'{label_path}: labels must be single-channel 8-bit class ids (a grey '
                         f'or palette PNG), got {label.dtype} with shape {label.shape}{colour}')
    if label.shape != image.shape[:2]:
        raise ValueError(f'{label_path}: label size {label.shape[::-1]} differs from its image '
                         f'{image.shape[1::-1]}')
    label = label.copy()
    void = label >= num_classes
    if void_counts is not None and void.any():
        ids, counts = np.unique(label[void], return_counts=True)
        void_counts.update(dict(zip(ids.tolist(), counts.tolist())))
    label[void] = ignore_index
    return image, label


#: Share of labelled pixels with ids >= the number of classes above which loading warns: more
#: than a void class usually holds (CamVid's: a few per cent), so likely another label scheme.
#: It also warns when there is more than one such id (a dataset has one void id).
VOID_SHARE_WARNING = 0.1


def _report_void_labels(root, void_counts: Counter, pixels: int, num_classes: int) -> None:
    if not void_counts or not pixels:
        return
    share = sum(void_counts.values()) / pixels
    ids = ', '.join(f'{label_id}: {count}' for label_id, count in sorted(void_counts.items()))
    suspicious = share > VOID_SHARE_WARNING or len(void_counts) > 1
    level = logging.WARNING if suspicious else logging.INFO
    logger.log(level, '%s: %.1f %% of the label pixels have ids >= %d (pixels per id: %s) and '
               'are not scored (void)%s', root, 100.0 * share, num_classes, ids,
               '; are these labels of another class scheme?' if level == logging.WARNING
               else '')


class SegmentationFolderDataset(torch.utils.data.Dataset):
    """Augmented crops of a CamVid-layout folder (see the module docstring).

    Args:
        root: folder with ``images/`` and ``labels/``.
        num_classes: number of classes; larger ids become ``ignore_index``.
        augment: a :class:`DenseAugment` (None: the full image, unchanged).
        mean: normalisation mean (RGB, [0, 1] scale).
        std: normalisation standard deviation.
        seed: augmentation seed.
        ignore_index: label of unscored pixels.
        max_images: use only the first ``max_images`` pairs (None: all).
        sequences: use only the frames of these recording sequences (:func:`frame_sequence`
            of the file names; None: all).
        exclude_sequences: leave the frames of these sequences out (e.g. a sequence held out
            of training to measure generalisation to it).

    Raises:
        FileNotFoundError, ValueError: see :func:`find_label_pairs`, :func:`select_sequences`
            and :func:`read_label_pair`; ValueError also when no pixel is labelled.
    """

    def __init__(self, root, num_classes: int, augment: Optional[DenseAugment] = None,
                 mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 seed: int = 0, ignore_index: int = IGNORE_INDEX,
                 max_images: Optional[int] = None, sequences: Optional[Sequence[str]] = None,
                 exclude_sequences: Optional[Sequence[str]] = None):
        """Read every selected pair into memory."""
        pairs = select_sequences(find_label_pairs(root), root, sequences,
                                 exclude_sequences)[:max_images]
        self.names = [p[0].stem for p in pairs]
        self.images, self.labels = [], []
        void_counts: Counter = Counter()
        for image_path, label_path in pairs:
            image, label = read_label_pair(image_path, label_path, num_classes, ignore_index,
                                           void_counts)
            self.images.append(image)
            self.labels.append(label)
        _report_void_labels(root, void_counts, sum(label.size for label in self.labels),
                            num_classes)
        if not any(np.any(label < num_classes) for label in self.labels):
            raise ValueError(f'{root}: no labelled pixel: every label id is >= {num_classes} '
                             f'or {ignore_index} (not scored), so there is nothing to train on '
                             'or score (labels of another class scheme?)')
        self.num_classes = int(num_classes)
        self.augment = augment
        self.mean, self.std = tuple(mean), tuple(std)
        self.seed = int(seed)
        self.ignore_index = int(ignore_index)
        self.epoch = 0
        selection = ''.join(f' ({what} {", ".join(map(str, names))})' for what, names in
                            (('sequences', sequences), ('without', exclude_sequences)) if names)
        logger.info('segmentation data %s%s: %d labelled images', root, selection,
                    len(self.images))

    def set_epoch(self, epoch: int) -> None:
        """Select the augmentation draws of ``epoch``."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Return the number of images."""
        return len(self.images)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        """Return ``{'image': (3, h, w) float32, 'labels': (h, w) int64}``."""
        image, label = self.images[index], self.labels[index]
        if self.augment is not None:
            image, label, _ = self.augment(item_rng(self.seed, self.epoch, index), image, label)
        return {'image': normalise(image, self.mean, self.std),
                'labels': torch.from_numpy(label.astype(np.int64))}

    def class_pixel_counts(self) -> np.ndarray:
        """Return (num_classes,) int64 pixel counts of every class over all images."""
        counts = np.zeros(self.num_classes, np.int64)
        for label in self.labels:
            counts += np.bincount(label.ravel(), minlength=256)[:self.num_classes]
        return counts


# -- depth frames -----------------------------------------------------------------------------
def parse_synthetic_spec(spec: str) -> dict:
    """Parse ``synth:SEEDS[:FRAMES[:WxH]]`` into keyword arguments of ``synthetic_frames``.

    ``SEEDS`` is a seed (``3``), a range (``0-7``, inclusive) or a list (``1,4,9``); ``FRAMES``
    the frames per seed (default 40); ``WxH`` the render size (default 320x240).

    Raises:
        ValueError: for a malformed spec.
    """
    if not spec.startswith(SYNTH_PREFIX):
        raise ValueError(f'synthetic spec must start with {SYNTH_PREFIX!r}, got {spec!r}')
    parts = spec[len(SYNTH_PREFIX):].split(':')
    if not 1 <= len(parts) <= 3 or not parts[0]:
        raise ValueError(f'bad synthetic spec {spec!r}: use synth:SEEDS[:FRAMES[:WxH]]')
    seeds: List[int] = []
    for item in parts[0].split(','):
        m = re.fullmatch(r'(\d+)(?:-(\d+))?', item.strip())
        if m is None:
            raise ValueError(f'bad seeds {parts[0]!r} in {spec!r}')
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise ValueError(f'empty seed range {item!r} in {spec!r}')
        seeds.extend(range(lo, hi + 1))
    frames = int(parts[1]) if len(parts) > 1 and parts[1] else 40
    width, height = 320, 240
    if len(parts) > 2:
        m = re.fullmatch(r'(\d+)x(\d+)', parts[2])
        if m is None:
            raise ValueError(f'bad size {parts[2]!r} in {spec!r}: use WxH')
        width, height = int(m.group(1)), int(m.group(2))
    if frames < 1:
        raise ValueError(f'frames per seed must be >= 1 in {spec!r}')
    return {'seeds': seeds, 'frames_per_seed': frames, 'width': width, 'height': height}


def synthetic_frames(seeds: Sequence[int], frames_per_seed: int = 40, width: int = 320,
                     height: int = 240, fps: float = 1.0, with_labels: bool = False):
    """Render synthetic frames: lists of RGB uint8 (H, W, 3) and depth float32 (H, W) metres.

    Each seed is a different room; ``fps`` 1 spreads the frames over the camera loop (about
    0.4-1 m apart). With ``with_labels`` a third list of uint8 label images is returned.
    """
    from relperception.data.synthetic import iter_sequence

    images, depths, labels = [], [], []
    for seed in seeds:
        _, frames = iter_sequence(frames_per_seed, seed=int(seed), width=width, height=height,
                                  fps=fps)
        for frame in frames:
            images.append(frame.rgb)
            depths.append(frame.depth.astype(np.float32))
            labels.append(frame.labels)
    logger.info('rendered %d synthetic frames (%dx%d) of seeds %s', len(images), width, height,
                list(seeds))
    return (images, depths, labels) if with_labels else (images, depths)


def bag_depth_frames(path, image_topic: Optional[str] = None,
                     depth_topic: Optional[str] = None, tolerance_s: float = 0.02,
                     stride: int = 1, max_frames: Optional[int] = None):
    """Read RGB images and their nearest depth images (within ``tolerance_s``) from a bag.

    Every depth image passes ``imaging.depth_checks.check_depth`` (what ``eval`` and the
    nodes use): one of another size than its image, byte-swapped, without a valid pixel or of
    implausible range (millimetres labelled ``32FC1``) is left out, and the problems are
    counted and logged; so is an undecodable image (the first of each kind named by topic and
    stamp).

    Args:
        path: rosbag2 directory or file.
        image_topic: default ``topics.IMAGE``.
        depth_topic: default ``topics.DEPTH`` (32FC1 metres or 16UC1 millimetres).
        tolerance_s: maximum stamp difference of a pair, seconds.
        stride: keep every ``stride``-th image.
        max_frames: keep at most this many pairs.

    Returns:
        (images, depths): lists of (H, W, 3) uint8 RGB and (H, W) float32 metres (NaN invalid).

    Raises:
        ValueError: when no usable image/depth pair is found (the message says why: no depth
            near the image stamps, or the depth problems).
    """
    from relperception.data import topics
    from relperception.data.bag import BagReader
    from relperception.data.bag_frames import check_depth_message
    from relperception.data.messages import decode_image_message, stamp_to_ns
    from relperception.imaging.image_encodings import to_rgb8

    image_topic = image_topic or topics.IMAGE
    depth_topic = depth_topic or topics.DEPTH
    stamped_images, stamped_depths = [], []
    with BagReader(path) as reader:
        for message in reader.messages([image_topic, depth_topic]):
            stamp = stamp_to_ns(message.msg.header.stamp)
            if message.topic == depth_topic:
                stamped_depths.append((stamp, message))
            else:
                stamped_images.append((stamp, message))
    if not stamped_depths or not stamped_images:
        raise ValueError(f'{path}: needs both {image_topic} and {depth_topic} messages')
    depth_stamps = np.array([s for s, _ in stamped_depths], np.int64)
    images, depths = [], []
    problems: Counter = Counter()
    reasons: Dict[str, str] = {}
    for stamp, message in stamped_images[::max(int(stride), 1)]:
        k = int(np.argmin(np.abs(depth_stamps - stamp)))
        if abs(int(depth_stamps[k]) - stamp) > tolerance_s * 1e9:
            continue
        try:
            array, encoding = decode_image_message(message.msg, message.msgtype)
            rgb = to_rgb8(array, encoding)
        except (ValueError, TypeError) as exc:   # one bad image costs its frame, as in eval
            problems['undecodable_image'] += 1
            reasons.setdefault('undecodable_image',
                               f'{image_topic} at {stamp} ns: undecodable image ({exc})')
            continue
        check = check_depth_message(stamped_depths[k][1], rgb.shape[:2])
        if check.depth is None:
            problems[check.problem] += 1
            reasons.setdefault(check.problem, check.message)
            continue
        images.append(rgb)
        depths.append(check.depth.astype(np.float32))
        if max_frames is not None and len(images) >= max_frames:
            break
    refused = '; '.join(f'{count} {problem}: {reasons[problem]}'
                        for problem, count in problems.items())
    if not images:
        if problems:
            raise ValueError(f'{path}: no usable depth image on {depth_topic} ({refused})')
        raise ValueError(f'{path}: no image/depth pair within {tolerance_s} s (no message of '
                         f'{depth_topic} is that close to an image of {image_topic})')
    if problems:
        logger.warning('%s: %d frames left out (%s)', path, sum(problems.values()), refused)
    logger.info('bag %s: %d image/depth pairs', path, len(images))
    return images, depths


def model_max_depth(model_conf: dict) -> float:
    """Return the ``max_depth`` (metres) of a model config: its depth head's output bound."""
    from relperception.evaluation.depth import DEFAULT_MAX_DEPTH

    return float(model_conf['model'].get('max_depth', DEFAULT_MAX_DEPTH))


def check_depth_range(depths: Sequence[np.ndarray], max_depth: float, source) -> None:
    """Raise ``ValueError`` (naming ``source``) for depth a head of ``max_depth`` cannot learn.

    Refused: no valid pixel at all (NaN or <= 0 everywhere), or a median valid depth beyond
    the model's ``max_depth`` metres (wrong units, or a model of shorter range): the depth
    head's output is bounded by ``max_depth``, and validation scores only depth within it.
    """
    medians = [float(np.median(d[np.isfinite(d) & (d > 0)])) for d in depths
               if np.any(np.isfinite(d) & (d > 0))]
    if not medians:
        raise ValueError(f'{source}: no valid depth pixel in any frame (all NaN, zero or '
                         'negative): nothing to train on or score')
    median = float(np.median(medians))
    if median > float(max_depth):
        raise ValueError(f'{source}: median depth {median:.4g} m is beyond the max_depth '
                         f'{float(max_depth):g} m of the model (wrong depth units, or a preset '
                         'for a longer range)')


def load_depth_source(source: str, **kwargs):
    """Return (images, depths) of a bag path or a ``synth:`` spec (see the module docstring)."""
    if str(source).startswith(SYNTH_PREFIX):
        return synthetic_frames(**parse_synthetic_spec(str(source)))
    return bag_depth_frames(source, **kwargs)


class DepthFramesDataset(torch.utils.data.Dataset):
    """Augmented crops of in-memory RGB + metric depth frames.

    Args:
        images: list of (H, W, 3) uint8 RGB.
        depths: list of (H, W) float32 metres (NaN / <= 0 invalid), same sizes.
        augment: a :class:`DenseAugment` (None: the full frames, unchanged).
        mean: normalisation mean.
        std: normalisation standard deviation.
        seed: augmentation seed.
    """

    def __init__(self, images: List[np.ndarray], depths: List[np.ndarray],
                 augment: Optional[DenseAugment] = None,
                 mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 seed: int = 0):
        """Check and keep the frames."""
        if len(images) != len(depths) or not images:
            raise ValueError(f'need equally many images and depths (>= 1), got {len(images)} '
                             f'and {len(depths)}')
        for image, depth in zip(images, depths):
            if image.shape[:2] != depth.shape:
                raise ValueError(f'image {image.shape} and depth {depth.shape} differ in size')
        self.images = images
        self.depths = [np.where(d > 0, d, np.nan).astype(np.float32) for d in depths]
        self.augment = augment
        self.mean, self.std = tuple(mean), tuple(std)
        self.seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the augmentation draws of ``epoch``."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Return the number of frames."""
        return len(self.images)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        """Return ``{'image': (3, h, w) float32, 'depth': (1, h, w) float32 metres}``."""
        image, depth = self.images[index], self.depths[index]
        if self.augment is not None:
            image, _, depth = self.augment(item_rng(self.seed, self.epoch, index), image, None,
                                           depth)
        return {'image': normalise(image, self.mean, self.std),
                'depth': torch.from_numpy(np.ascontiguousarray(depth))[None]}


# -- evaluation -------------------------------------------------------------------------------
def predict_dense(model: torch.nn.Module, rgb: np.ndarray, model_conf: dict,
                  device='cpu', logits: bool = False) -> Dict[str, np.ndarray]:
    """Run ``model`` on one image as the inference pipeline does; outputs at the image size.

    Preprocessing and output resizing are :mod:`relperception.models.preprocess`'s.

    Args:
        model: a ``DenseModel`` (switched to eval mode).
        rgb: (H, W, 3) uint8 RGB.
        model_conf: its model config (``load_model_config``).
        device: torch device of ``model``.
        logits: also return the class scores.

    Returns:
        ``depth`` (H, W) float32 (if a depth head exists) and ``labels`` (H, W) uint8 (if a
        segmentation head exists); with ``logits``, also ``logits`` (C, H, W) float32.
    """
    from relperception.models.preprocess import prepare_image, resize_output

    model.eval()
    size = rgb.shape[:2]
    with torch.no_grad():
        out = model(prepare_image(rgb, model_conf).to(device))
    result = {}
    if 'depth' in out:
        result['depth'] = resize_output(out['depth'].float(), size, 'depth')[0, 0].cpu().numpy()
    if 'logits' in out:
        scores = resize_output(out['logits'].float(), size, 'logits')
        result['labels'] = scores.argmax(1)[0].cpu().numpy().astype(np.uint8)
        if logits:
            result['logits'] = scores[0].cpu().numpy()
    return result


def evaluate_segmentation(model: torch.nn.Module, images: Sequence[np.ndarray],
                          labels: Sequence[np.ndarray], model_conf: dict,
                          device='cpu') -> Dict[str, float]:
    """Return mIoU, pixel accuracy, mean class accuracy and per-class IoU over whole images.

    Scored at the label resolution with ``relperception.evaluation.segmentation``
    (``ignore_index`` of the config unscored); keys ``miou``, ``pixel_accuracy``,
    ``mean_class_accuracy`` and ``iou/<class name>`` (NaN for classes absent from both).
    """
    from relperception.evaluation.segmentation import ConfusionMatrix

    names = model_conf.get('class_names') or None
    matrix = ConfusionMatrix(model.num_classes, model_conf.get('ignore_index', IGNORE_INDEX),
                             names)
    for image, label in zip(images, labels):
        matrix.update(predict_dense(model, image, model_conf, device)['labels'], label)
    return segmentation_summary(matrix)


def segmentation_summary(matrix) -> Dict[str, float]:
    """Return the metrics of a filled ``evaluation.segmentation.ConfusionMatrix``.

    Keys ``miou``, ``pixel_accuracy``, ``mean_class_accuracy`` and ``iou/<class name>``.
    """
    summary = matrix.summary()
    out = {'miou': summary['miou'], 'pixel_accuracy': summary['pixel_accuracy'],
           'mean_class_accuracy': summary['mean_class_accuracy']}
    out.update({f'iou/{k}': v for k, v in summary['per_class_iou'].items()})
    return out


def evaluate_depth(model: torch.nn.Module, images: Sequence[np.ndarray],
                   depths: Sequence[np.ndarray], model_conf: dict, device='cpu',
                   min_depth: float = 1e-3, max_depth: Optional[float] = None
                   ) -> Dict[str, float]:
    """Return the Eigen depth metrics averaged over images (``evaluation.depth``).

    ``max_depth`` defaults to the model's ``max_depth``. Keys: ``abs_rel``, ``sq_rel``,
    ``rmse``, ``rmse_log``, ``delta1``, ``delta2``, ``delta3``.
    """
    from relperception.evaluation.depth import DEPTH_METRIC_KEYS, depth_metrics

    if max_depth is None:
        max_depth = model_max_depth(model_conf)
    sums = dict.fromkeys(DEPTH_METRIC_KEYS, 0.0)
    count = 0
    for image, depth in zip(images, depths):
        pred = predict_dense(model, image, model_conf, device)['depth']
        metrics = depth_metrics(pred, depth, min_depth=min_depth, max_depth=max_depth)
        if metrics['num_valid'] == 0:
            continue
        count += 1
        for key in DEPTH_METRIC_KEYS:
            sums[key] += metrics[key]
    if count == 0:
        raise ValueError('no frame with valid ground-truth depth')
    return {key: value / count for key, value in sums.items()}
