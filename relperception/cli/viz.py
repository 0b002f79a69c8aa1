# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""``relperception viz``: pictures of how NCC and LoFTR relate two images (PNG files).

Sub-commands::

    relperception viz match --image0 A --image1 B --pixel X Y [--config loftr_lite]
        [--weights F] [--patch-size 15] [--ncc-only] --output DIR
    relperception viz attention --image0 A --image1 B --layer L [--query-cell I]
        [--config loftr_lite] [--weights F] --output DIR

``viz match`` writes ``match_x<X>_y<Y>.png`` with four panels: image 0 with the chosen pixel,
its NCC patch and its LoFTR coarse cell; the NCC correlation surface of that patch over image 1
(compare raw pixels in a fixed window, score zero-mean NCC, aggregate by arg-max); the
cross-attention of the last coarse cross layer of LoFTR for that cell, averaged over the heads
and upsampled to image 1 (compare learned, context-aware features with every cell of image 1,
score normalised kernel / softmax weights, aggregate by a weighted sum); and the cell's row of
LoFTR's coarse match-confidence matrix (dual softmax of the final coarse features), from
which the match is chosen. The final matches of both methods are marked in every map.
``--ncc-only`` draws the first two panels without any model.

``viz attention`` writes ``attention_layer<L>.png``: the (image-0 query cell i x key cell j)
attention matrix of coarse layer L (self: keys in image 0, cross: keys in image 1), averaged
over the heads and average-pooled to a viewable size, log-coloured; with ``--query-cell`` also
that row as a map over the key image.

All pictures come from :mod:`relperception.visualization.relation` as RGB arrays, so a node
could publish the same images as debug topics. Images are read as grey; LoFTR sees each image
resized to its configured input size (attention maps are shown on the original images).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
import time

from relperception.cli.common import finite_float, int_at_least

HELP = 'visualise NCC correlation surfaces and LoFTR attention maps (PNG)'
#: -o names a folder (checked before the command runs).
WRITES_FOLDER = True

logger = logging.getLogger(__name__)

_COLOURS = {'pixel': (255, 255, 255), 'ncc': (255, 0, 255), 'loftr': (0, 255, 0)}


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--image0', required=True, help='first image file')
    parser.add_argument('--image1', required=True, help='second image file')
    parser.add_argument('--config', choices=('loftr', 'loftr_lite'), default='loftr_lite',
                        help='LoFTR preset (default loftr_lite)')
    parser.add_argument('--weights', metavar='FILE',
                        help='LoFTR weights: safetensors, or a kornia/official state dict or '
                             'checkpoint (default: the shipped weights of the preset)')
    parser.add_argument('--threshold', type=float, metavar='T',
                        help='LoFTR coarse confidence threshold (default: loftr.threshold)')
    parser.add_argument('--device', default='cpu', help='torch device (default cpu)')
    parser.add_argument('--params', metavar='YAML',
                        help='parameter file with further loftr.* settings (input size, ...)')
    parser.add_argument('--panel-width', type=int_at_least(0), default=640, metavar='PX',
                        help='wider images are scaled down to this width for display only '
                             '(0: full size; default 640)')
    parser.add_argument('-o', '--output', required=True, help='output folder')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sub-commands ``match`` and ``attention`` of ``viz``.

    Args:
        parser: the verb's parser.
    """
    sub = parser.add_subparsers(dest='viz_kind', metavar='KIND', required=True)
    match = sub.add_parser('match', help='NCC surface beside LoFTR cross-attention for a pixel')
    _common(match)
    match.add_argument('--pixel', nargs=2, type=finite_float, required=True, metavar=('X', 'Y'),
                       help='pixel of image 0 (x right, y down)')
    match.add_argument('--patch-size', type=int, default=15,
                       help='NCC patch side in pixels, odd (default 15)')
    match.add_argument('--ncc-only', action='store_true',
                       help='only the NCC surface (no LoFTR model needed)')
    attention = sub.add_parser('attention', help='attention matrix of one coarse layer')
    _common(attention)
    attention.add_argument('--layer', type=int, required=True, metavar='L',
                           help='coarse transformer layer index (0-based; see the log for '
                                'the self/cross names)')
    attention.add_argument('--query-cell', type=int, metavar='I',
                           help='also show the row of this image-0 coarse cell (row-major)')
    attention.add_argument('--max-size', type=int, default=256,
                           help='pool the matrix to at most this many rows/columns')


class _LoFTRProbe:
    """A ``LoFTRMatcher`` (torch backend) plus access to its coarse attention, for pictures.

    The matcher loads the weights (``conf['weights']``, else the shipped ones of the preset),
    chooses the input size and gives the final match; the probe resizes images the same way
    for the attention pass (shrinking: ``INTER_AREA``, else ``INTER_LINEAR``).
    """

    def __init__(self, conf: dict):
        import torch

        from relperception.matching.loftr.matcher import LoFTRMatcher

        self.torch = torch
        conf = dict(conf, backend='torch')
        self.matcher = LoFTRMatcher(conf)
        self.model = self.matcher.model
        self.preset = self.matcher.conf['preset']
        self.weights = self.matcher.conf['weights'] or f'shipped {self.preset}'
        self.device = next(self.model.parameters()).device
        self.input_hw = tuple(int(v) for v in self.matcher.input_size)
        self.stride = int(self.model.stride_c)
        self.grid_hw = (self.input_hw[0] // self.stride, self.input_hw[1] // self.stride)
        names = self.model.loftr_coarse.layer_names
        self.layer_names = list(names)
        self.last_cross = max(i for i, name in enumerate(names) if name == 'cross')
        self.heads = int(self.model.loftr_coarse.layers[0].nhead)

    def tensor(self, image):
        """(H, W) uint8 -> (1, 1, h, w) float [0, 1] at the input size, as the matcher does."""
        import cv2

        height, width = self.input_hw
        if image.shape != (height, width):
            shrink = image.shape[0] > height and image.shape[1] > width
            image = cv2.resize(image, (width, height),
                               interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
        return self.torch.from_numpy(image).float().div(255.0)[None, None].to(self.device)

    def to_input(self, xy, image_hw):
        """Original pixel (x, y) -> network pixel (pixel centres at integers)."""
        return ((xy[0] + 0.5) * self.input_hw[1] / image_hw[1] - 0.5,
                (xy[1] + 0.5) * self.input_hw[0] / image_hw[0] - 0.5)

    def to_image(self, xy, image_hw):
        """Network pixel (x, y) -> original pixel (the matcher's ``to_original``)."""
        return ((float(xy[0]) + 0.5) * image_hw[1] / self.input_hw[1] - 0.5,
                (float(xy[1]) + 0.5) * image_hw[0] / self.input_hw[0] - 0.5)

    def cross_attention_for_pixel(self, image0, image1, pixel) -> dict:
        """Attention of the last coarse cross layer and the final match for one pixel's cell.

        Returns:
            dict: ``cell`` (row-major index), ``cell_box0`` (x0, y0, x1, y1) in image 0,
            ``map`` (h, w) float32 cross-attention over image 1's cells (mean of the heads),
            ``head_sums`` (heads,) sums of each head's weights (1 up to rounding),
            ``confidence_map`` (h, w) the cell's row of the coarse confidence matrix (dual
            softmax of the final coarse features: what the match is chosen from),
            ``match1`` (x, y) in image 1, ``confidence``, ``matched`` (mask), ``layer``,
            ``layer_name``, ``heads``.
        """
        from relperception.visualization.relation import loftr_cell_attention

        torch = self.torch
        attention = loftr_cell_attention(self.matcher, image0, image1, pixel)
        cell, (cx, cy) = attention['cell'], attention['cell_xy']
        weights = attention['weights']  # (heads, L1)
        t0, t1 = self.tensor(image0), self.tensor(image1)
        with torch.inference_mode():
            feats = self.model.extract_features(t0, t1)
            confidence_row = self.model.coarse_confidence(feats['feat_c0'], feats['feat_c1'])
        confidence_row = confidence_row[0, cell].float().cpu().numpy()  # (L1,)
        out = self.matcher.infer(image0, image1)  # the matcher's own pass, input-size pixels
        confidence = float(out['confidence'][cell])
        half = self.stride / 2.0
        corner0 = self.to_image((cx * self.stride - half, cy * self.stride - half), image0.shape)
        corner1 = self.to_image((cx * self.stride + half, cy * self.stride + half), image0.shape)
        return {'cell': cell, 'cell_box0': (*corner0, *corner1),
                'map': attention['map'], 'head_sums': weights.sum(axis=1),
                'confidence_map': confidence_row.reshape(self.grid_hw),
                'match1': self.to_image(out['keypoints1'][cell], image1.shape),
                'confidence': confidence,
                'matched': bool(out['mask'][cell]) and confidence > self.matcher.threshold,
                'layer': attention['layer'], 'layer_name': 'cross',
                'heads': int(weights.shape[0])}

    def attention_matrix(self, image0, image1, layer: int, chunk: int = 256) -> dict:
        """(L0, Lk) attention of every image-0 cell in coarse layer ``layer``, mean of heads.

        Returns:
            dict: ``matrix`` float32 (rows sum to 1), ``layer_name``, ``heads``, ``grid0``,
            ``grid1`` (h, w) coarse grids.
        """
        import numpy as np

        torch = self.torch
        if not 0 <= layer < len(self.layer_names):
            raise ValueError(f'--layer must be in [0, {len(self.layer_names)}) for preset '
                             f'{self.preset!r} (layers: {self.layer_names}), got {layer}')
        model = self.model
        t0, t1 = self.tensor(image0), self.tensor(image1)
        with torch.inference_mode():
            map0 = model.pos_encoding(model.backbone(t0)[0])
            map1 = model.pos_encoding(model.backbone(t1)[0])
            tok0 = map0.flatten(2).transpose(1, 2)
            tok1 = map1.flatten(2).transpose(1, 2)
            tok0, tok1 = model.loftr_coarse(tok0, tok1, num_layers=layer)
            name = self.layer_names[layer]
            source = tok0 if name == 'self' else tok1
            rows = []
            for start in range(0, tok0.shape[1], chunk):
                index = torch.arange(start, min(start + chunk, tok0.shape[1]),
                                     device=tok0.device)
                weights = model.loftr_coarse.attention_weights(layer, tok0, source, index)
                rows.append(weights.float().mean(dim=1).cpu().numpy())
        return {'matrix': np.concatenate(rows, axis=0), 'layer_name': name,
                'heads': self.heads, 'grid0': tuple(map0.shape[2:]),
                'grid1': tuple(map1.shape[2:])}


def _load_loftr(args: argparse.Namespace) -> _LoFTRProbe:
    """Return the LoFTR probe for ``args`` (RuntimeError when LoFTR is not installed)."""
    import importlib.util

    from relperception.cli.common import loftr_weight_overrides
    from relperception.config import load_config, section

    if importlib.util.find_spec('relperception.matching.loftr.matcher') is None:
        raise RuntimeError('the LoFTR model (relperception.matching.loftr) is not installed; '
                           'use --ncc-only')
    overrides = {'loftr.preset': args.config, 'loftr.device': args.device}
    overrides.update(loftr_weight_overrides(args.weights, args.threshold))
    probe = _LoFTRProbe(section(load_config(args.params, overrides), 'loftr'))
    logger.info('LoFTR %s, weights %s, input %dx%d, coarse layers %s', probe.preset,
                probe.weights, probe.input_hw[1], probe.input_hw[0], probe.layer_names)
    return probe


def run_match(args: argparse.Namespace) -> Path:
    """Write the NCC-vs-attention figure for one pixel; return its path.

    Args:
        args: parsed options of ``viz match``.

    Returns:
        path of the PNG written.
    """
    import cv2
    import numpy as np

    from relperception.cli.match import read_gray
    from relperception.imaging import write_image
    from relperception.visualization import relation as rel

    image0, image1 = read_gray(args.image0), read_gray(args.image1)
    x, y = (float(v) for v in args.pixel)
    height0, width0 = image0.shape
    if not (0 <= round(x) < width0 and 0 <= round(y) < height0):
        raise ValueError(f'--pixel ({x:g}, {y:g}) lies outside image 0 ({width0}x{height0}; '
                         f'x in [0, {width0 - 1}], y in [0, {height0 - 1}])')
    start = time.perf_counter()
    surface = rel.ncc_surface(image0, image1, (x, y), args.patch_size)
    ncc_x, ncc_y, ncc_score = rel.surface_peak(surface)
    logger.info('NCC surface over image 1 in %.1f ms: peak %.3f at (%g, %g)',
                1000 * (time.perf_counter() - start), ncc_score, ncc_x, ncc_y)

    attention = probe = None
    if not args.ncc_only:
        probe = _load_loftr(args)
        start = time.perf_counter()
        attention = probe.cross_attention_for_pixel(image0, image1, (x, y))
        logger.info('LoFTR %s: attention of layer %d (%s) for cell %d in %.1f ms; match '
                    '(%.1f, %.1f), confidence %.3f', args.config, attention['layer'],
                    attention['layer_name'], attention['cell'],
                    1000 * (time.perf_counter() - start), *attention['match1'],
                    attention['confidence'])

    # Everything is computed at full resolution; panels are only scaled for display.
    scale0 = _display_scale(image0.shape, args.panel_width)
    scale1 = _display_scale(image1.shape, args.panel_width)
    half = args.patch_size // 2
    left = _resize(cv2.cvtColor(image0, cv2.COLOR_GRAY2RGB), scale0)
    boxes = [((x - half, y - half, x + half, y + half), _COLOURS['ncc'])]
    if attention is not None:
        boxes.append((attention['cell_box0'], _COLOURS['loftr']))
    for box, colour in boxes:
        corners = np.rint(np.asarray(box, np.float64) * scale0).astype(int)
        cv2.rectangle(left, tuple(int(v) for v in corners[:2]),
                      tuple(int(v) for v in corners[2:]), colour, 1)
    left = rel.draw_markers(left, [(x * scale0, y * scale0)], [_COLOURS['pixel']], ['query'])
    markers, colours, labels = [(ncc_x, ncc_y)], [_COLOURS['ncc']], ['NCC']
    if attention is not None:
        markers.append(attention['match1'])
        colours.append(_COLOURS['loftr'])
        labels.append('LoFTR' if attention['matched'] else 'LoFTR (rejected)')
    markers = [(mx * scale1, my * scale1) for mx, my in markers]
    bar_width = max(int(round(image1.shape[1] * scale1)), 320)

    panels = [rel.titled_panel(
        left, 'image 0: query pixel', f'magenta box: NCC patch ({args.patch_size} px)'
        + ('; green box: LoFTR coarse cell' if attention is not None else ''),
        min_width=320)]
    # From the median score up: most of an image correlates somewhat, the peaks are what counts.
    finite = surface[np.isfinite(surface)]
    ncc_low = float(np.median(finite)) if finite.size else -1.0
    ncc_low = min(ncc_low, ncc_score - 0.05) if np.isfinite(ncc_score) else ncc_low
    ncc_panel = rel.heatmap_overlay(image1, np.where(surface >= ncc_low, surface, np.nan),
                                    alpha=0.65, vmin=ncc_low, vmax=1.0,
                                    interpolation=cv2.INTER_LINEAR)
    panels.append(rel.titled_panel(
        rel.draw_markers(_resize(ncc_panel, scale1), markers, colours, labels),
        'NCC: raw pixels, fixed window',
        f'Compare: raw grey values in a fixed {args.patch_size}x{args.patch_size} window. '
        f'Score: zero-mean NCC at every position of image 1 (the NCC matcher itself only '
        f'searches a local window, coarse to fine). Aggregate: arg-max = '
        f'({ncc_x:.0f}, {ncc_y:.0f}), NCC {ncc_score:.3f}. Coloured from the median score '
        f'({ncc_low:.2f}) up.',
        footer=rel.colour_bar(bar_width, ncc_low, 1.0, 'NCC'), min_width=320))
    if attention is not None:
        grid = attention['map']  # (h1, w1) on image 1's coarse grid, sums to 1
        shown = rel.cell_grid_to_image(np.log10(np.maximum(grid, 1e-8)), image1.shape,
                                       probe.input_hw, probe.stride)
        vmin, vmax = float(shown.min()), float(shown.max())
        overlay = rel.heatmap_overlay(image1, shown, alpha=0.65, vmin=vmin, vmax=vmax)
        match1 = attention['match1']
        verdict = 'kept' if attention['matched'] else 'rejected (mask or threshold)'
        panels.append(rel.titled_panel(
            rel.draw_markers(_resize(overlay, scale1), markers, colours, labels),
            f'LoFTR {args.config} cross-attention: learned, global',
            f'Compare: learned features after {attention["layer"]} coarse layers, each '
            f'already mixing context from both images. Score: cross-attention weights of '
            f'layer {attention["layer"]} over ALL {grid.size} cells of image 1, mean of '
            f'{attention["heads"]} heads, sum 1; max {float(grid.max()):.3g} (uniform: '
            f'{1.0 / grid.size:.3g}). Aggregate: weighted sum of values, which updates the '
            f'feature of the cell.',
            footer=rel.colour_bar(bar_width, vmin, vmax, 'log10 weight'), min_width=320))
        # Dual-softmax confidence spans many decades: log10 colours from its 5th percentile.
        log_confidence = np.log10(np.maximum(attention['confidence_map'], 1e-30))
        confidence = rel.cell_grid_to_image(log_confidence, image1.shape, probe.input_hw,
                                            probe.stride)
        top = float(log_confidence.max())
        low = min(float(np.percentile(log_confidence, 5)), top - 1.0)
        overlay = rel.heatmap_overlay(image1, confidence, alpha=0.65, vmin=low, vmax=top)
        panels.append(rel.titled_panel(
            rel.draw_markers(_resize(overlay, scale1), markers, colours, labels),
            f'LoFTR {args.config} match confidence',
            f'Compare: the final coarse features (after all {len(probe.layer_names)} '
            f'layers). Score: dual softmax of their inner products, the row of this cell. '
            f'Aggregate: arg-max, mutual nearest neighbour, threshold '
            f'{probe.matcher.threshold:g}, then fine refinement: ({match1[0]:.0f}, '
            f'{match1[1]:.0f}), confidence {attention["confidence"]:.3g}, {verdict}.',
            footer=rel.colour_bar(bar_width, low, top, 'log10 confidence'),
            min_width=320))
    figure = rel.compose_panels(
        panels, 'Both methods compare -> score -> aggregate. NCC scores raw pixels of a fixed '
                'window; LoFTR scores learned, context-aware features against the whole image.')
    path = Path(args.output) / f'match_x{x:g}_y{y:g}.png'
    write_image(path, figure)
    return path


def _display_scale(shape, panel_width: int) -> float:
    """Scale that fits an image of ``shape`` into ``panel_width`` pixels (0: no scaling)."""
    if panel_width <= 0 or shape[1] <= panel_width:
        return 1.0
    return panel_width / float(shape[1])


def _resize(rgb, scale: float):
    import cv2

    if scale == 1.0:
        return rgb
    size = (max(1, int(round(rgb.shape[1] * scale))), max(1, int(round(rgb.shape[0] * scale))))
    return cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)


def run_attention(args: argparse.Namespace) -> Path:
    """Write the attention-matrix figure of one layer; return its path.

    Args:
        args: parsed options of ``viz attention``.

    Returns:
        path of the PNG written.
    """
    import cv2
    import numpy as np

    from relperception.cli.match import read_gray
    from relperception.imaging import write_image
    from relperception.visualization import relation as rel

    image0, image1 = read_gray(args.image0), read_gray(args.image1)
    if args.max_size < 8:
        raise ValueError(f'--max-size must be >= 8, got {args.max_size}')
    probe = _load_loftr(args)
    cells = probe.grid_hw[0] * probe.grid_hw[1]
    if args.query_cell is not None and not 0 <= args.query_cell < cells:
        raise ValueError(f'--query-cell must be in [0, {cells}) (image-0 coarse grid '
                         f'{probe.grid_hw[1]}x{probe.grid_hw[0]}), got {args.query_cell}')
    start = time.perf_counter()
    result = probe.attention_matrix(image0, image1, args.layer)
    matrix = result['matrix']  # (L0, Lk), mean over heads, rows sum to 1
    name = result['layer_name']
    logger.info('attention matrix of layer %d (%s): %dx%d in %.1f ms', args.layer, name,
                *matrix.shape, 1000 * (time.perf_counter() - start))
    image, (vmin, vmax) = rel.attention_matrix_image(matrix, args.max_size,
                                                     highlight_row=args.query_cell)
    keys = 'image 0 (self)' if name == 'self' else 'image 1 (cross)'
    panels = [rel.titled_panel(
        image, f'layer {args.layer} ({name}): query cell i of image 0 x key cell j of {keys}',
        f'{matrix.shape[0]} x {matrix.shape[1]} weights (mean of {result["heads"]} heads), '
        f'average-pooled to {min(matrix.shape[0], args.max_size)} x '
        f'{min(matrix.shape[1], args.max_size)}, log10 colours. Rows: queries, row-major over '
        f'the coarse grid; each row sums to 1.',
        footer=rel.colour_bar(max(image.shape[1], 320), vmin, vmax, 'log10 weight'),
        min_width=320)]
    if args.query_cell is not None:
        key_image = image0 if name == 'self' else image1
        grid = matrix[args.query_cell].reshape(result['grid0' if name == 'self' else 'grid1'])
        shown = rel.cell_grid_to_image(np.log10(np.maximum(grid, 1e-8)), key_image.shape,
                                       probe.input_hw, probe.stride)
        scale_key = _display_scale(key_image.shape, args.panel_width)
        overlay = _resize(rel.heatmap_overlay(key_image, shown, alpha=0.65), scale_key)
        peak_y, peak_x = np.unravel_index(int(np.argmax(grid)), grid.shape)
        peak = probe.to_image((peak_x * probe.stride, peak_y * probe.stride), key_image.shape)
        overlay = rel.draw_markers(overlay, [(peak[0] * scale_key, peak[1] * scale_key)],
                                   [_COLOURS['loftr']], ['max'])
        w0 = result['grid0'][1]
        qx, qy = args.query_cell % w0, args.query_cell // w0
        panels.append(rel.titled_panel(
            overlay, f'row {args.query_cell} (cell x={qx}, y={qy} of image 0) over {keys}',
            f'max weight {float(grid.max()):.3g} (uniform: {1.0 / grid.size:.3g}); global: '
            f'every key cell gets a weight.',
            footer=rel.colour_bar(max(overlay.shape[1], 320), float(shown.min()),
                                  float(shown.max()), 'log10 weight'), min_width=320))
        scale0 = _display_scale(image0.shape, args.panel_width)
        query = probe.to_image((qx * probe.stride, qy * probe.stride), image0.shape)
        left = rel.draw_markers(_resize(cv2.cvtColor(image0, cv2.COLOR_GRAY2RGB), scale0),
                                [(query[0] * scale0, query[1] * scale0)],
                                [_COLOURS['pixel']], ['query'])
        panels.insert(0, rel.titled_panel(left, 'image 0: query cell', min_width=320))
    figure = rel.compose_panels(
        panels, 'Attention = compare (query . key of learned features) -> score (normalised '
                'weights over all keys) -> aggregate (weighted sum of values).')
    path = Path(args.output) / f'attention_layer{args.layer}.png'
    write_image(path, figure)
    return path


def run(args: argparse.Namespace) -> int:
    """Run ``viz match`` or ``viz attention``.

    Args:
        args: parsed options of ``viz``.

    Returns:
        0 on success.
    """
    path = run_match(args) if args.viz_kind == 'match' else run_attention(args)
    logger.info('wrote %s', path)
    return 0
