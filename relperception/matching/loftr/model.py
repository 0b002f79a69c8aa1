# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""LoFTR-style detector-free matcher with fixed-shape outputs, weight-compatible with kornia.

``LoFTR(conf, preset=...)`` builds the ResNet-FPN (1/8, 1/2) backbone, the sinusoidal position
encoding, the coarse self/cross transformer, dual-softmax (or Sinkhorn) coarse matching and the
fine window refinement of LoFTR (Sun et al., CVPR 2021). Module and parameter names equal those
of ``kornia.feature.LoFTR``, so ``kornia.feature.LoFTR(...).state_dict()`` and the official
checkpoints (``{'state_dict': {'matcher.<name>': ...}}``) load with :meth:`LoFTR.load_weights`.

Unlike kornia the forward pass has no data-dependent shapes (no ``nonzero`` or boolean
indexing), so it exports to ONNX/TensorRT with dynamic height and width: for every coarse cell
of image 0 it returns the best cell of image 1, the confidence, refined coordinates and a
boolean mask. Compaction to ``Matches`` happens outside
(``relperception.matching.loftr.matcher``).

The fine stage refines at most ``fine_topk`` (1024 for ``loftr``, 512 for ``loftr_lite``)
cells per image pair, the masked cells with the highest confidence. So a pair yields at most
``fine_topk`` matches (cells beyond it leave ``mask``); kornia refines every match, so results
equal kornia's whenever it finds at most ``fine_topk`` matches. Eager mode refines the masked
cells only. The exported graph refines a FIXED number K = ``fine_topk`` (masked cells first,
then the others by confidence) with one ONNX ``TopK`` (TensorRT accepts K <= 3840); images
with fewer cells than K still work (the ranking is padded); there ``fine_topk`` 0 or None
refines all cells. The fine features are computed only on the refined windows when these
cover fewer pixels than the whole stride-2 map (``ResNetFPN82.fine_head_windows``, equal up
to float rounding): at 480x640 with 1024 windows that saves ~80 of ~745 GFLOP per pair.

Coordinates: pixels, x right, y down. Coarse cell (x, y) of a stride-8 map is centred on pixel
(8x, 8y) (its receptive field centre with pixel centres at integers); ``keypoints0`` are those
centres and ``keypoints1`` the centres of the best cells plus the fine offset (at most
``window // 2 * 2 = 4`` px per axis). These are kornia's numbers exactly. Kornia documents that
the official pretrained checkpoints were trained in a frame where pixel (x, y) has its centre
at (x + 0.5, y + 0.5); with those weights subtract 0.5 for integer pixel centres (config key
``keypoint_offset``). Weights trained by relperception use integer centres (offset 0).
"""

from typing import Any, Dict, Mapping, Optional, Tuple

from relperception.matching.loftr.backbone import ResNetFPN82
from relperception.matching.loftr.coarse_matching import CoarseMatching
from relperception.matching.loftr.contract import (check_compute_dtype, COARSE_OUTPUT_NAMES,
                                                   COMPUTE_DTYPE_NAMES, FINE_INPUT_NAMES,
                                                   FINE_OUTPUT_NAMES, ONNX_INPUT_NAMES,
                                                   ONNX_OUTPUT_NAMES)
from relperception.matching.loftr.fast_path import tracing_or_exporting
from relperception.matching.loftr.fine_matching import (
    cell_xy, crop_windows, FinePreprocess, spatial_expectation)
from relperception.matching.loftr.position_encoding import PositionEncodingSine
from relperception.matching.loftr.presets import merge_conf, preset_conf, PRESETS
from relperception.matching.loftr.transformer import LocalFeatureTransformer
from relperception.models.weights import check_state_dict
import torch
from torch import nn

#: Values of the ``compute_dtype`` key and the torch dtypes they stand for.
COMPUTE_DTYPES = {name: getattr(torch, name) for name in COMPUTE_DTYPE_NAMES}


#: Default number of coarse cells per image pair that get the fine refinement (``fine_topk``)
#: per preset: about a fifth (``loftr``, 4800 cells at 480x640) and two fifths (``loftr_lite``,
#: 1200 cells at 240x320) of the cells at the preset's input size, more than the matches a
#: trained model keeps there. Other presets: 1024.
DEFAULT_FINE_TOPK = {'loftr': 1024, 'loftr_lite': 512}

#: Keys of official / older checkpoints that hold no parameters of this model.
_IGNORED_KEYS = ('pos_encoding.pe',)


def kornia_key_map(key: str) -> str:
    """Map a kornia / official LoFTR state-dict key to this model's key (strips ``matcher.``)."""
    return key[len('matcher.'):] if key.startswith('matcher.') else key


def unwrap_state_dict(state: Mapping[str, Any]) -> Dict[str, torch.Tensor]:
    """Return the tensors of a state dict, or of a checkpoint with one under 'state_dict'.

    Raises:
        ValueError: if the mapping holds no tensors.
    """
    for wrapper in ('state_dict', 'model'):
        inner = state.get(wrapper) if isinstance(state, Mapping) else None
        if isinstance(inner, Mapping):
            state = inner
            break
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise ValueError('no tensors found in the LoFTR state dict / checkpoint')
    return tensors


class LoFTR(nn.Module):
    """LoFTR matcher (kornia-compatible parameters, fixed-shape outputs).

    Inputs of :meth:`forward`: ``image0`` and ``image1``, (B, 1, H, W) float grey in [0, 1];
    H and W multiples of 8 (32 recommended); both images of the same size for export.

    Outputs (dict, M = (H/8) * (W/8) coarse cells of image 0, row-major):
        ``keypoints0`` (B, M, 2) float32 px: centre of each coarse cell of image 0.
        ``keypoints1`` (B, M, 2) float32 px: refined position of its best match in image 1.
        ``confidence`` (B, M): coarse confidence of that match (dual softmax in [0, 1]).
        ``mask`` (B, M) bool: confidence > threshold, mutual nearest neighbour, neither cell
        within ``border_rm`` cells of its border, and among the ``fine_topk`` refined cells.
        ``match_index`` (B, M) int64: index of the best coarse cell of image 1.
        ``expec_f`` (B, M, 3): fine expectation (dx, dy in window units [-1, 1], std); zeros
        (the coarse position) for cells that were not refined (eager mode: every unmasked
        cell; exported graphs: the cells outside the ``fine_topk`` refined ones).

    Configuration: a preset of ``presets.PRESETS`` (``loftr`` by default) with ``conf`` merged
    in recursively; ``conf`` may name the preset under ``'preset'``. Extra keys:
    ``keypoint_offset`` (px, default 0.0) is added to both keypoint outputs; ``fine_topk``
    (default ``DEFAULT_FINE_TOPK[preset]``; 0 or None: all cells) is the number of cells
    refined per pair; ``compute_dtype`` (``'float32'``, default, or ``'bfloat16'``) is the
    precision of the backbone and the coarse transformer in eager inference.

    ``compute_dtype: 'bfloat16'`` runs those two stages under ``torch.autocast`` (convolutions
    and matrix products in bfloat16 with float32 accumulation); the coarse matching and the
    fine level stay in float32 and the outputs are float32. On CPUs with AVX512-BF16 or AMX it
    is faster (``loftr`` at 480x640 on 2 cores: 1.8x, ``bench/loftr_bench.py``); on others
    bfloat16 is emulated and slower. It changes results at the level of bfloat16 rounding
    (``bench/loftr_bench.py`` prints how many float32 matches it reproduces). Training, tracing
    and ONNX export always use float32.
    """

    default_conf: Dict[str, Any] = dict(PRESETS['loftr'], keypoint_offset=0.0,
                                        fine_topk=DEFAULT_FINE_TOPK['loftr'],
                                        compute_dtype='float32')

    def __init__(self, conf: Optional[Mapping[str, Any]] = None, preset: Optional[str] = None):
        """Build the model with freshly initialised weights (in training mode, as nn.Module).

        Args:
            conf: configuration overrides (see ``presets.PRESETS`` for the keys).
            preset: preset name, ``'loftr'`` or ``'loftr_lite'`` (overrides ``conf['preset']``).

        Raises:
            ValueError: for an unknown preset or key or an unsupported configuration.
        """
        super().__init__()
        conf = dict(conf or {})
        name = preset or conf.pop('preset', None) or 'loftr'
        conf.pop('preset', None)
        offset = float(conf.pop('keypoint_offset', 0.0))
        topk = conf.pop('fine_topk', DEFAULT_FINE_TOPK.get(name, 1024))
        if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int)
                                 or topk < 0):
            raise ValueError(f'fine_topk must be an int >= 0 or None, got {topk!r}')
        self.fine_topk = int(topk or 0)
        compute_dtype = check_compute_dtype(conf.pop('compute_dtype', 'float32'))
        self.compute_dtype = compute_dtype
        self.preset = name
        self.conf = preset_conf(name, conf)
        self.conf['keypoint_offset'] = offset
        self.conf['fine_topk'] = self.fine_topk
        self.conf['compute_dtype'] = compute_dtype
        c = self.conf
        self.stride_c, self.stride_f = (int(s) for s in c['resolution'])
        if (self.stride_c, self.stride_f) != (8, 2):
            raise ValueError(f'only resolution (8, 2) is supported, got {c["resolution"]}')
        self.window = int(c['fine_window_size'])
        if self.window < 3 or self.window % 2 == 0:
            raise ValueError(f'fine_window_size must be odd and >= 3, got {self.window}')
        coarse, fine, match = c['coarse'], c['fine'], c['match_coarse']
        if int(c['resnetfpn']['block_dims'][2]) != int(coarse['d_model']):
            raise ValueError('resnetfpn block_dims[2] must equal coarse d_model')
        if int(c['resnetfpn']['block_dims'][0]) != int(fine['d_model']):
            raise ValueError('resnetfpn block_dims[0] must equal fine d_model')
        self.backbone = ResNetFPN82(int(c['resnetfpn']['initial_dim']),
                                    c['resnetfpn']['block_dims'])
        self.pos_encoding = PositionEncodingSine(int(coarse['d_model']),
                                                 bool(coarse['temp_bug_fix']))
        self.loftr_coarse = LocalFeatureTransformer(int(coarse['d_model']), int(coarse['nhead']),
                                                    coarse['layer_names'], coarse['attention'])
        self.coarse_matching = CoarseMatching(
            match['match_type'], match['dsmax_temperature'], match['thr'], match['border_rm'],
            match['skh_iters'], match['skh_init_bin_score'], match['skh_prefilter'])
        self.fine_preprocess = FinePreprocess(int(coarse['d_model']), int(fine['d_model']),
                                              bool(c['fine_concat_coarse_feat']))
        self.loftr_fine = LocalFeatureTransformer(int(fine['d_model']), int(fine['nhead']),
                                                  fine['layer_names'], fine['attention'])

    # ------------------------------------------------------------------ configuration
    @property
    def threshold(self) -> float:
        """Coarse confidence threshold used by the mask."""
        return self.coarse_matching.threshold

    @threshold.setter
    def threshold(self, value: float) -> None:
        self.coarse_matching.threshold = float(value)

    @property
    def input_size(self) -> Tuple[int, int]:
        """Default (height, width) of the preset."""
        h, w = self.conf['input_size']
        return int(h), int(w)

    # ------------------------------------------------------------------ weights
    def load_weights(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Load a state dict of this model, of ``kornia.feature.LoFTR`` or an official checkpoint.

        Keys may carry a ``matcher.`` prefix and may be wrapped in ``{'state_dict': ...}``;
        ``num_batches_tracked`` counters may be absent.

        Args:
            state: the state dict or checkpoint (tensors; load files with
                ``relperception.models.weights.load_state_dict_file``).
            strict: raise on missing or unexpected keys (shape mismatches always raise).

        Raises:
            ValueError: naming missing keys, unexpected keys and shape mismatches.
        """
        tensors = {kornia_key_map(k): v for k, v in unwrap_state_dict(state).items()}
        for key in _IGNORED_KEYS:
            tensors.pop(key, None)
        own = self.state_dict()
        for key in own:  # BatchNorm counters are not in kornia's files
            if key not in tensors and key.endswith('num_batches_tracked'):
                tensors[key] = own[key]
        problems = check_state_dict(own, tensors, strict)
        if problems:
            raise ValueError(f'weights do not fit LoFTR preset {self.preset!r}: '
                             + '; '.join(problems))
        known = {k: v for k, v in tensors.items() if k in own}
        self.load_state_dict(known, strict=strict)

    # ------------------------------------------------------------------ training hooks
    def _check_images(self, image0: torch.Tensor, image1: torch.Tensor) -> None:
        if torch.jit.is_tracing() or torch.compiler.is_compiling():
            return
        for name, image in (('image0', image0), ('image1', image1)):
            if not isinstance(image, torch.Tensor) or image.dim() != 4 or image.shape[1] != 1:
                shape = tuple(image.shape) if isinstance(image, torch.Tensor) else type(image)
                raise ValueError(f'{name} must be a (B, 1, H, W) tensor, got {shape}')
            if not image.is_floating_point():
                raise ValueError(f'{name} must be float in [0, 1], got {image.dtype}')
            if image.shape[2] % 8 or image.shape[3] % 8 or min(image.shape[2:]) < 8:
                raise ValueError(f'{name} height and width must be positive multiples of 8, '
                                 f'got {tuple(image.shape[2:])}')
        if image0.shape[0] != image1.shape[0]:
            raise ValueError(f'batch sizes differ: {image0.shape[0]} and {image1.shape[0]}')

    def _backbone_pair(self, image0: torch.Tensor, image1: torch.Tensor, fine: bool = True):
        backbone = self.backbone if fine else self.backbone.forward_coarse
        if torch.jit.is_tracing() or image0.shape == image1.shape:
            coarse, fine_maps = backbone(torch.cat([image0, image1], 0))
            c0, c1 = coarse.chunk(2, 0)
            f0, f1 = fine_maps.chunk(2, 0)
            return c0, c1, f0, f1
        c0, f0 = backbone(image0)
        c1, f1 = backbone(image1)
        return c0, c1, f0, f1

    def _coarse_tokens(self, image0: torch.Tensor, image1: torch.Tensor,
                       num_layers: Optional[int] = None, fine: bool = True) -> Dict[str, Any]:
        """Run the backbone and the coarse transformer.

        Returns the tokens and the fine maps (``feat_f0/1``) or, with ``fine=False``, the fine
        head's inputs (``fine_in0/1``, see ``ResNetFPN82.forward_coarse``).
        """
        self._check_images(image0, image1)
        map0, map1, f0, f1 = self._backbone_pair(image0, image1, fine)
        map0, map1 = self.pos_encoding(map0), self.pos_encoding(map1)
        tok0 = map0.flatten(2).transpose(1, 2)
        tok1 = map1.flatten(2).transpose(1, 2)
        tok0, tok1 = self.loftr_coarse(tok0, tok1, num_layers)
        names = ('feat_f0', 'feat_f1') if fine else ('fine_in0', 'fine_in1')
        return {'feat_c0': tok0, 'feat_c1': tok1, names[0]: f0, names[1]: f1,
                'map_c0': map0, 'map_c1': map1}

    def extract_features(self, image0: torch.Tensor, image1: torch.Tensor) -> Dict[str, Any]:
        """Backbone, position encoding and coarse transformer (training hook).

        Args:
            image0: (B, 1, H0, W0) float grey in [0, 1].
            image1: (B, 1, H1, W1) float grey in [0, 1].

        Returns:
            dict with ``feat_c0`` (B, L0, Cc) and ``feat_c1`` (B, L1, Cc) transformed coarse
            tokens (row-major cells), ``feat_f0`` / ``feat_f1`` (B, Cf, Hf, Wf) fine maps,
            ``hw0_c``, ``hw1_c``, ``hw0_f``, ``hw1_f`` (height, width) int tuples, and
            ``map_c0`` / ``map_c1`` the (B, Cc, Hc, Wc) position-encoded coarse maps entering
            the transformer.

        Raises:
            ValueError: for images of the wrong shape or dtype.
        """
        feats = self._coarse_tokens(image0, image1)
        feats.update({
            'hw0_c': tuple(int(s) for s in feats['map_c0'].shape[2:]),
            'hw1_c': tuple(int(s) for s in feats['map_c1'].shape[2:]),
            'hw0_f': tuple(int(s) for s in feats['feat_f0'].shape[2:]),
            'hw1_f': tuple(int(s) for s in feats['feat_f1'].shape[2:]),
        })
        return feats

    def coarse_confidence(self, feat_c0: torch.Tensor, feat_c1: torch.Tensor) -> torch.Tensor:
        """Return the (B, L0, L1) coarse confidence matrix of (B, L0, C), (B, L1, C) tokens.

        The same matrix :meth:`forward` selects matches from (dual softmax, or Sinkhorn without
        the dustbin row/column); the coarse loss of LoFTR is computed on it.
        """
        return self.coarse_matching.confidence(feat_c0, feat_c1)

    def _refine(self, win0: torch.Tensor, win1: torch.Tensor, tok0: torch.Tensor,
                tok1: torch.Tensor) -> torch.Tensor:
        win0, win1 = self.fine_preprocess(win0, win1, tok0, tok1)
        win0, win1 = self.loftr_fine(win0, win1)
        return spatial_expectation(win0, win1, self.window)

    def fine_refine(self, features: Mapping[str, Any], b_ids: torch.Tensor, i_ids: torch.Tensor,
                    j_ids: torch.Tensor) -> torch.Tensor:
        """Fine expectation for given coarse matches (training hook, as LoFTR's fine loss needs).

        Args:
            features: output of :meth:`extract_features`.
            b_ids: (K,) int64 batch index of each match.
            i_ids: (K,) int64 coarse cell index in image 0 (row-major, < L0).
            j_ids: (K,) int64 coarse cell index in image 1 (< L1).

        Returns:
            (K, 3) ``expec_f``: expected (dx, dy) of the match in the window of image 1 in
            normalised units [-1, 1] (1 = ``window // 2`` fine cells = 4 px for LoFTR), and the
            heat-map standard deviation (std_x + std_y, same units).
        """
        w0 = features['hw0_c'][1]
        w1 = features['hw1_c'][1]
        xy0 = torch.stack([i_ids % w0, torch.div(i_ids, w0, rounding_mode='floor')], -1)
        xy1 = torch.stack([j_ids % w1, torch.div(j_ids, w1, rounding_mode='floor')], -1)
        stride = self.stride_c // self.stride_f
        win0 = crop_windows(features['feat_f0'], xy0, self.window, stride, b_ids)
        win1 = crop_windows(features['feat_f1'], xy1, self.window, stride, b_ids)
        tok0 = features['feat_c0'][b_ids, i_ids]
        tok1 = features['feat_c1'][b_ids, j_ids]
        return self._refine(win0, win1, tok0, tok1)

    # ------------------------------------------------------------------ inference
    def forward(self, image0: torch.Tensor, image1: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Match two image batches; see the class docstring for the fixed-shape outputs.

        Raises:
            ValueError: for images of the wrong shape or dtype.
        """
        stage = self.coarse_stage(image0, image1)
        xy0, xy1, tok0, tok1 = stage['xy0'], stage['xy1'], stage['tokens0'], stage['tokens1']
        score, mask = stage['confidence'], stage['mask']
        batch = xy0.shape[0]
        cells, selected = self._fine_cells(score, mask)
        if cells is None:  # refine every cell
            expec = self._refine_cells(stage, xy0, xy1, tok0, tok1)
        elif cells.shape[1] == 0:  # nothing matched (eager mode): nothing to refine
            expec = torch.zeros_like(xy0[..., :1]).expand(-1, -1, 3)
        else:
            src = torch.where(selected, cells, torch.zeros_like(cells))  # padding -> cell 0
            pick = src.unsqueeze(-1)
            expec_sel = self._refine_cells(
                stage, torch.gather(xy0, 1, pick.expand(-1, -1, 2)),
                torch.gather(xy1, 1, pick.expand(-1, -1, 2)),
                torch.gather(tok0, 1, pick.expand(-1, -1, tok0.shape[2])),
                torch.gather(tok1, 1, pick.expand(-1, -1, tok1.shape[2])))
            # scatter back; padding entries (index >= L0, traced graphs only) land in the
            # extra rows that are cut off, so every written index is unique
            extra = cells.shape[1] if self._padded_topk() else 0
            rows = score.new_zeros(batch, 1, 3)
            full = torch.cat([torch.zeros_like(xy0[..., :1]).expand(-1, -1, 3),
                              rows.expand(-1, extra, -1)], 1)
            full = full.scatter(1, cells.unsqueeze(-1).expand(-1, -1, 3), expec_sel)
            hit = torch.zeros_like(full[..., 0]).scatter(
                1, cells, torch.ones_like(cells, dtype=full.dtype))
            if extra:
                full, hit = full[:, :-extra], hit[:, :-extra]
            expec, mask = full, mask & (hit > 0.5)

        kp0, kp1 = self.cell_keypoints(xy0, xy1)
        kp1 = kp1 + self.fine_offset(expec)
        return {'keypoints0': kp0, 'keypoints1': kp1, 'confidence': score, 'mask': mask,
                'match_index': stage['match_index'], 'expec_f': expec}

    def coarse_stage(self, image0: torch.Tensor, image1: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Backbone, coarse transformer and coarse matching: everything before the fine level.

        Args:
            image0: (B, 1, H, W) float grey in [0, 1].
            image1: (B, 1, H, W) float grey in [0, 1].

        Returns:
            dict with, per coarse cell of image 0 (L0 = H/8 * W/8): ``xy0`` and ``xy1`` (B, L0, 2)
            float coarse cell coordinates of the cell and of its best cell in image 1,
            ``tokens0`` / ``tokens1`` (B, L0, Cc) their transformed coarse tokens,
            ``confidence`` (B, L0), ``mask`` (B, L0) bool (threshold, mutual nearest neighbour,
            border), ``match_index`` (B, L0) int64 index of the best cell; and the fine head's
            inputs ``fine_in0`` / ``fine_in1`` (B, Cm, H/2, W/2) (see :meth:`refine`).

        Raises:
            ValueError: for images of the wrong shape or dtype.
        """
        feats = self._inference_tokens(image0, image1)
        tok0, tok1 = feats['feat_c0'], feats['feat_c1']
        conf = self.coarse_confidence(tok0, tok1)
        valid0 = self.coarse_matching.valid_cells(feats['map_c0'])
        valid1 = self.coarse_matching.valid_cells(feats['map_c1'])
        best, score, mask = self.coarse_matching.select(conf, valid0, valid1)
        del conf
        batch = tok0.shape[0]
        xy0 = cell_xy(feats['map_c0']).expand(batch, -1, -1)  # (B, L0, 2)
        xy1 = torch.gather(cell_xy(feats['map_c1']).expand(batch, -1, -1), 1,
                           best.unsqueeze(-1).expand(-1, -1, 2))
        tok1_best = torch.gather(tok1, 1, best.unsqueeze(-1).expand(-1, -1, tok1.shape[2]))
        return {'xy0': xy0, 'xy1': xy1, 'tokens0': tok0, 'tokens1': tok1_best,
                'confidence': score, 'mask': mask, 'match_index': best,
                'fine_in0': feats['fine_in0'], 'fine_in1': feats['fine_in1']}

    def refine(self, fine_in0: torch.Tensor, fine_in1: torch.Tensor, keypoints0: torch.Tensor,
               keypoints1: torch.Tensor, tokens0: torch.Tensor,
               tokens1: torch.Tensor) -> torch.Tensor:
        """Fine level for K chosen coarse matches: their refined keypoints in image 1.

        Args:
            fine_in0: (B, Cm, H/2, W/2) fine head input of image 0 (:meth:`coarse_stage`).
            fine_in1: the same for image 1.
            keypoints0: (B, K, 2) coarse keypoints (cell centres, pixels) in image 0.
            keypoints1: (B, K, 2) coarse keypoints of their best cells in image 1.
            tokens0: (B, K, Cc) coarse tokens of the cells of image 0.
            tokens1: (B, K, Cc) coarse tokens of the cells of image 1.

        Returns:
            (B, K, 2) refined keypoints in image 1 (pixels): ``keypoints1`` plus the fine
            offset. The fine head runs on the K windows when they cover fewer pixels than the
            map, else on the map (in a traced graph: chosen for the example's K, as for
            :meth:`forward`).
        """
        stride = float(self.stride_c)
        offset = self.conf['keypoint_offset']
        xy0 = torch.round((keypoints0 - offset) / stride)
        xy1 = torch.round((keypoints1 - offset) / stride)
        expec = self._refine_cells({'fine_in0': fine_in0, 'fine_in1': fine_in1}, xy0, xy1,
                                   tokens0, tokens1)
        return keypoints1 + self.fine_offset(expec)

    def cell_keypoints(self, xy0: torch.Tensor,
                       xy1: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Pixel centres (B, N, 2) of coarse cells given as (B, N, 2) cell coordinates."""
        offset = self.conf['keypoint_offset']
        return xy0 * float(self.stride_c) + offset, xy1 * float(self.stride_c) + offset

    def fine_offset(self, expec: torch.Tensor) -> torch.Tensor:
        """Pixel offset (..., 2) of a fine expectation (..., 3) in window units."""
        return expec[..., :2] * float(self.window // 2 * self.stride_f)

    def _inference_tokens(self, image0: torch.Tensor, image1: torch.Tensor) -> Dict[str, Any]:
        """``_coarse_tokens`` in ``compute_dtype`` (eager inference only), float32 out."""
        dtype = COMPUTE_DTYPES[self.compute_dtype]
        if dtype == torch.float32 or self.training or self._padded_topk():
            return self._coarse_tokens(image0, image1, fine=False)
        with torch.autocast(device_type=image0.device.type, dtype=dtype):
            feats = self._coarse_tokens(image0, image1, fine=False)
        return {k: v.float() if torch.is_tensor(v) else v for k, v in feats.items()}

    def _padded_topk(self) -> bool:
        """Whether the top-K selection pads to a constant K (traced graphs)."""
        return tracing_or_exporting()

    def _fine_cells(self, score: torch.Tensor, mask: torch.Tensor):
        """Choose the cells of image 0 that get the fine refinement.

        Masked cells rank first, by confidence, then the other cells by confidence; the
        first ``fine_topk`` are refined. Eager mode refines only masked cells: K is the
        largest masked count of the batch, at most ``fine_topk`` (0: no limit), so unmasked
        cells keep the coarse position. Traced graphs refine a constant K = ``fine_topk``
        (padding the ranking with ``fine_topk`` dummy entries so that ONNX ``TopK`` has a
        constant K whatever the input size; dummy picks are flagged in ``selected``), or every
        cell with ``fine_topk`` 0.

        Returns:
            ``(cells, selected)``, (B, K) int64 indices into L0 (or, when traced, into
            L0 + K) and (B, K) bool, not a dummy; ``(None, None)`` to refine every cell.
        """
        k = self.fine_topk
        padded = self._padded_topk()
        if padded and k <= 0:
            return None, None
        rank = score.float() + 2.0 * mask.float()  # masked cells first; score in [0, 1]
        if padded:
            rank = torch.cat([rank, torch.full_like(rank[:, :1], -1.0).expand(-1, k)], 1)
        else:
            masked = int(mask.sum(1).max()) if mask.numel() else 0
            k = min(k, masked) if k > 0 else masked
        values, index = torch.topk(rank, k, dim=1)
        return index, values > -0.5

    def _fine_windows(self, fine_input: torch.Tensor, xy: torch.Tensor) -> torch.Tensor:
        """(B, K, W*W, Cf) fine windows around the coarse cells ``xy`` (B, K, 2).

        The fine head runs on the windows only (``fine_head_windows``) when that is fewer
        pixels than the whole map, else on the map, which is then
        cropped; the results agree up to float rounding. In traced graphs the choice is made at
        the export size.
        """
        stride = self.stride_c // self.stride_f
        map_pixels = int(fine_input.shape[2]) * int(fine_input.shape[3])
        if int(xy.shape[1]) * (self.window + 2) ** 2 < map_pixels:
            return self.backbone.fine_head_windows(fine_input, xy, self.window, stride)
        return crop_windows(self.backbone.fine_head(fine_input), xy, self.window, stride)

    def _refine_cells(self, feats: Mapping[str, Any], xy0: torch.Tensor, xy1: torch.Tensor,
                      tok0: torch.Tensor, tok1: torch.Tensor) -> torch.Tensor:
        """Return the (B, K, 3) fine expectation of K cells (xy (B, K, 2), tokens (B, K, C))."""
        batch = xy0.shape[0]
        win0 = self._fine_windows(feats['fine_in0'], xy0).flatten(0, 1)
        win1 = self._fine_windows(feats['fine_in1'], xy1).flatten(0, 1)
        expec = self._refine(win0, win1, tok0.flatten(0, 1), tok1.flatten(0, 1))
        return expec.reshape(batch, -1, 3).float()

    # ------------------------------------------------------------------ visualisation
    def coarse_attention(self, image0: torch.Tensor, image1: torch.Tensor, layer_index: int,
                         query_index, side: int = 0) -> torch.Tensor:
        """Attention weights of a coarse transformer layer for chosen query cells.

        Args:
            image0: (1, 1, H, W) float grey in [0, 1].
            image1: (1, 1, H, W) float grey in [0, 1].
            layer_index: index into the coarse ``layer_names``.
            query_index: int or (Q,) row-major coarse cell indices of image ``side``.
            side: 0 or 1, the image whose cells query.

        Returns:
            (heads, L) (int ``query_index``) or (Q, heads, L): weights over the cells of the
            attended image (the same image for a self layer, the other one for a cross layer).

        Raises:
            ValueError: for a bad ``side`` or ``layer_index``.
        """
        names = self.loftr_coarse.layer_names
        if side not in (0, 1) or not 0 <= layer_index < len(names):
            raise ValueError(f'side must be 0/1 and layer_index in [0, {len(names)})')
        feats = self._coarse_tokens(image0, image1, num_layers=layer_index, fine=False)
        tok = (feats['feat_c0'], feats['feat_c1'])
        x = tok[side]
        if names[layer_index] == 'self':
            source = x
        elif side == 0:
            source = tok[1]
        else:  # image 1 attends to image 0 after image 0 was updated by this layer
            source = self.loftr_coarse.layers[layer_index](tok[0], tok[1])
        return self.loftr_coarse.attention_weights(layer_index, x, source, query_index)


class LoFTROnnxWrapper(nn.Module):
    """Tuple-output view of :class:`LoFTR` for export: (image0, image1) -> ONNX_OUTPUT_NAMES."""

    def __init__(self, model: LoFTR):
        """Wrap ``model`` (its threshold is baked into ``mask``; export with threshold 0)."""
        super().__init__()
        self.model = model

    def forward(self, image0: torch.Tensor, image1: torch.Tensor):
        """Return (keypoints0, keypoints1, confidence, mask) of :meth:`LoFTR.forward`."""
        out = self.model(image0, image1)
        return tuple(out[name] for name in ONNX_OUTPUT_NAMES)


class LoFTRCoarseOnnxWrapper(nn.Module):
    """Coarse stage of :class:`LoFTR` for a two-stage export: (image0, image1) -> COARSE outputs.

    Outputs (:data:`COARSE_OUTPUT_NAMES`), per coarse cell of image 0 (M = H/8 * W/8):
    ``keypoints0``, ``keypoints1`` (1, M, 2) cell centres (pixels) of the cell and of its best
    cell, ``confidence`` (1, M), ``mask`` (1, M) bool, ``tokens0`` / ``tokens1`` (1, M, Cc)
    their coarse tokens, and ``fine_input0`` / ``fine_input1`` (1, Cm, H/2, W/2) for
    :class:`LoFTRFineOnnxWrapper`.
    """

    def __init__(self, model: LoFTR):
        """Wrap ``model`` (its threshold is baked into ``mask``; export with threshold 0)."""
        super().__init__()
        self.model = model

    def forward(self, image0: torch.Tensor, image1: torch.Tensor):
        """Return the outputs named in :data:`COARSE_OUTPUT_NAMES`, in that order."""
        stage = self.model.coarse_stage(image0, image1)
        kp0, kp1 = self.model.cell_keypoints(stage['xy0'], stage['xy1'])
        return (kp0, kp1, stage['confidence'], stage['mask'], stage['tokens0'],
                stage['tokens1'], stage['fine_in0'], stage['fine_in1'])


class LoFTRFineOnnxWrapper(nn.Module):
    """Fine stage of :class:`LoFTR` for K chosen matches (K is a dynamic graph dimension).

    Inputs (:data:`FINE_INPUT_NAMES`): ``fine_input0`` / ``fine_input1`` from the coarse stage,
    ``keypoints0``, ``keypoints1`` (1, K, 2) and ``tokens0``, ``tokens1`` (1, K, Cc) of the K
    chosen cells. Output ``refined_keypoints1`` (1, K, 2): the refined keypoints in image 1.
    """

    def __init__(self, model: LoFTR):
        """Wrap ``model``."""
        super().__init__()
        self.model = model

    def forward(self, fine_input0: torch.Tensor, fine_input1: torch.Tensor,
                keypoints0: torch.Tensor, keypoints1: torch.Tensor, tokens0: torch.Tensor,
                tokens1: torch.Tensor):
        """Return ``(refined_keypoints1,)``, see :meth:`LoFTR.refine`."""
        return (self.model.refine(fine_input0, fine_input1, keypoints0, keypoints1, tokens0,
                                  tokens1),)


def build_loftr(preset: str = 'loftr', conf: Optional[Mapping[str, Any]] = None) -> LoFTR:
    """Return ``LoFTR(conf, preset=preset)`` (random weights, training mode)."""
    return LoFTR(conf, preset=preset)


__all__ = ['COARSE_OUTPUT_NAMES', 'COMPUTE_DTYPES', 'FINE_INPUT_NAMES', 'FINE_OUTPUT_NAMES',
           'LoFTR', 'LoFTRCoarseOnnxWrapper', 'LoFTRFineOnnxWrapper', 'LoFTROnnxWrapper',
           'ONNX_INPUT_NAMES', 'ONNX_OUTPUT_NAMES', 'build_loftr', 'check_compute_dtype',
           'kornia_key_map', 'merge_conf', 'unwrap_state_dict']
