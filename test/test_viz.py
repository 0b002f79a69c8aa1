# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tests of ``relperception.visualization.relation`` and the ``relperception viz`` verb."""

import importlib.util

import cv2
import numpy as np
import pytest

from relperception.cli.main import main
from relperception.visualization import (
    attention_grid,
    attention_matrix_image,
    cell_grid_to_image,
    compose_panels,
    draw_markers,
    heatmap_image,
    heatmap_overlay,
    ncc_surface,
    pool_matrix,
    surface_peak,
    titled_panel,
)

HAVE_LOFTR = importlib.util.find_spec('relperception.matching.loftr.model') is not None
LOFTR_ARGS = ['--config', 'loftr_lite']


def textured(height=96, width=128, seed=0, sigma=1.5):
    """Return a (H, W) uint8 blurred random texture stretched to 0..255."""
    rng = np.random.default_rng(seed)
    noise = cv2.GaussianBlur(rng.random((height, width)).astype(np.float32), (0, 0), sigma)
    return np.uint8(np.rint(255 * (noise - noise.min()) / np.ptp(noise)))


def reference_ncc(a, b):
    """Zero-mean NCC of two equally sized patches, plain NumPy."""
    a = a.astype(np.float64) - a.mean()
    b = b.astype(np.float64) - b.mean()
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


class TestNCCSurface:

    def test_shape_and_range(self):
        image = textured()
        surface = ncc_surface(image, image, (60, 40), patch_size=11)
        assert surface.shape == image.shape and surface.dtype == np.float32
        finite = np.isfinite(surface)
        assert finite[5:-5, 5:-5].all() and not finite[:5].any() and not finite[:, -5:].any()
        assert surface[finite].min() >= -1.0 and surface[finite].max() <= 1.0

    def test_reference_peak_at_true_displacement(self):
        big = textured(140, 180, seed=1)
        image0 = big[20:116, 20:148]
        image1 = big[27:123, 15:143]
        # a point (x, y) of image 0 shows up at (x + 5, y - 7) in image 1
        for x, y in ((40, 40), (70, 30), (90, 60)):
            surface = ncc_surface(image0, image1, (x, y), patch_size=15)
            px, py, score = surface_peak(surface)
            assert (px, py) == (x + 5, y - 7)
            assert score == pytest.approx(1.0, abs=1e-4)

    def test_reference_values(self):
        image0, image1 = textured(seed=2), textured(seed=3)
        surface = ncc_surface(image0, image1, (50, 50), patch_size=9)
        template = image0[46:55, 46:55]
        for x, y in ((10, 10), (64, 40), (100, 80)):
            expected = reference_ncc(template, image1[y - 4:y + 5, x - 4:x + 5])
            assert surface[y, x] == pytest.approx(expected, abs=1e-4)

    def test_degenerate(self):
        image = textured()
        with pytest.raises(ValueError, match='outside image 0'):
            ncc_surface(image, image, (500, 10))
        with pytest.raises(ValueError, match='leaves image 0'):
            ncc_surface(image, image, (2, 50))
        with pytest.raises(ValueError, match='flat'):
            ncc_surface(np.full((64, 64), 7, np.uint8), image, (30, 30))
        with pytest.raises(ValueError, match='odd'):
            ncc_surface(image, image, (30, 30), patch_size=8)
        with pytest.raises(ValueError, match='uint8'):
            ncc_surface(image.astype(np.float32), image, (30, 30))


class TestAttentionGrid:

    def test_mean_of_heads_is_distribution(self):
        rng = np.random.default_rng(0)
        weights = rng.random((4, 12)).astype(np.float32)
        weights /= weights.sum(axis=1, keepdims=True)
        grid = attention_grid(weights, (3, 4))
        assert grid.shape == (3, 4)
        assert grid.sum() == pytest.approx(1.0, abs=1e-5)
        np.testing.assert_allclose(grid.reshape(-1), weights.mean(0), rtol=1e-6)

    def test_degenerate(self):
        with pytest.raises(ValueError, match='L = 3'):
            attention_grid(np.ones((2, 10)), (3, 4))
        with pytest.raises(ValueError, match='non-negative'):
            attention_grid(-np.ones(12), (3, 4))


class TestCellGridToImage:

    def test_reference_nearest_cell_centre(self):
        grid = np.arange(12, dtype=np.float32).reshape(3, 4)  # 32x24 input, stride 8
        image = cell_grid_to_image(grid, (24, 32), (24, 32), stride=8)
        assert image.shape == (24, 32)
        # cell (cx, cy) is centred on pixel (8 cx, 8 cy): pixels 0..3 -> cell 0, 4..11 -> 1
        assert image[0, 3] == 0 and image[0, 4] == 1 and image[0, 12] == 2
        assert image[4, 0] == 4 and image[23, 31] == 11
        # an image twice the input size: pixel X sits at input pixel (X + 0.5) / 2 - 0.5
        big = cell_grid_to_image(grid, (48, 64), (24, 32), stride=8)
        assert big[0, 8] == 0 and big[0, 9] == 1 and big[8, 0] == 0 and big[9, 0] == 4


class TestHeatmaps:

    def test_heatmap_image(self):
        values = np.array([[0.0, 0.5], [1.0, np.nan]])
        rgb = heatmap_image(values)
        assert rgb.shape == (2, 2, 3) and rgb.dtype == np.uint8
        assert (rgb[1, 1] == 0).all()
        assert rgb[0, 0, 2] > rgb[0, 0, 0] and rgb[1, 0, 0] > rgb[1, 0, 2]  # blue low, red high

    def test_overlay_resizes(self):
        out = heatmap_overlay(textured(), np.arange(12, dtype=np.float32).reshape(3, 4))
        assert out.shape == (96, 128, 3) and out.dtype == np.uint8

    def test_pool_matrix_keeps_mass(self):
        matrix = np.random.default_rng(0).random((600, 400)).astype(np.float32)
        pooled = pool_matrix(matrix, 100)
        assert pooled.shape == (100, 100)
        assert pooled.mean() == pytest.approx(matrix.mean(), rel=1e-4)
        assert pool_matrix(matrix[:50, :60], 100).shape == (50, 60)

    def test_attention_matrix_image(self):
        matrix = np.random.default_rng(0).random((300, 200)).astype(np.float32)
        matrix /= matrix.sum(axis=1, keepdims=True)
        image, (vmin, vmax) = attention_matrix_image(matrix, 100, highlight_row=17)
        assert image.dtype == np.uint8 and image.ndim == 3 and vmax > vmin
        with pytest.raises(ValueError, match='highlight_row'):
            attention_matrix_image(matrix, 100, highlight_row=300)

    def test_panels(self):
        rgb = draw_markers(np.zeros((50, 60, 3), np.uint8), [(10, 10), (np.nan, 1)],
                           labels=['a', 'b'])
        assert rgb[10, 10].any()
        panel = titled_panel(rgb, 'title', 'a caption that is long enough to be wrapped twice '
                             'at least on a narrow panel', min_width=100)
        assert panel.shape[1] == 100 and panel.shape[0] > 50
        figure = compose_panels([panel, rgb], 'caption', gap=4)
        assert figure.shape[1] == 100 + 4 + 60

    def test_labels_of_markers_at_one_point_do_not_overlap(self):
        red, green = (255, 0, 0), (0, 255, 0)
        rgb = draw_markers(np.zeros((60, 120, 3), np.uint8), [(60, 30), (60, 30)],
                           [red, green], ['NCC', 'LoFTR'], size=5)
        text_rows = slice(20, 45)
        reddish = (rgb[text_rows, :, 0] > 150) & (rgb[text_rows, :, 1] < 100)
        greenish = (rgb[text_rows, :, 1] > 150) & (rgb[text_rows, :, 0] < 100)
        # the first label right of the marker, the second left of it
        assert reddish[:, 67:].any() and not reddish[:, :53].any()
        assert greenish[:, :53].any() and not greenish[:, 67:].any()


@pytest.fixture(scope='module')
def image_files(tmp_path_factory):
    """Two translated texture images written as PNG (grey and colour)."""
    folder = tmp_path_factory.mktemp('viz')
    big = textured(140, 180, seed=4)
    paths = (folder / 'a.png', folder / 'b.png')
    cv2.imwrite(str(paths[0]), big[20:116, 20:148])
    cv2.imwrite(str(paths[1]), cv2.cvtColor(big[23:119, 16:144], cv2.COLOR_GRAY2BGR))
    return [str(p) for p in paths]


class TestVizCLI:

    def test_match_ncc_only(self, image_files, tmp_path):
        code = main(['viz', 'match', '--image0', image_files[0], '--image1', image_files[1],
                     '--pixel', '60', '50', '--ncc-only', '-o', str(tmp_path)])
        assert code == 0
        figure = cv2.imread(str(tmp_path / 'match_x60_y50.png'))
        assert figure is not None
        assert figure.shape[1] == 2 * 320 + 8 and figure.shape[0] > 96

    def test_degenerate_pixel_outside(self, image_files, tmp_path, caplog):
        code = main(['viz', 'match', '--image0', image_files[0], '--image1', image_files[1],
                     '--pixel', '500', '50', '--ncc-only', '-o', str(tmp_path)])
        assert code == 1
        assert 'outside image 0' in caplog.text

    def test_negative_panel_width_is_refused(self, image_files, tmp_path, capsys):
        # it was taken as 0 (full size) without a word
        with pytest.raises(SystemExit) as exit_info:
            main(['viz', 'match', '--image0', image_files[0], '--image1', image_files[1],
                  '--pixel', '60', '50', '--ncc-only', '--panel-width', '-5', '-o',
                  str(tmp_path)])
        assert exit_info.value.code == 2
        assert 'argument --panel-width: must be >= 0, got -5' in capsys.readouterr().err

    def test_degenerate_missing_file(self, image_files, tmp_path, caplog):
        code = main(['viz', 'match', '--image0', image_files[0], '--image1',
                     str(tmp_path / 'missing.png'), '--pixel', '60', '50', '--ncc-only',
                     '-o', str(tmp_path)])
        assert code == 1
        assert 'image file not found' in caplog.text


@pytest.fixture(scope='module')
def loftr_files(tmp_path_factory):
    """Random loftr_lite weights and a parameter file with a small network input."""
    import torch

    from relperception.matching.loftr.model import LoFTR
    from relperception.models.weights import save_weights

    folder = tmp_path_factory.mktemp('loftr')
    torch.manual_seed(0)
    save_weights(LoFTR(preset='loftr_lite'), folder / 'random.safetensors')
    (folder / 'small.yaml').write_text('loftr.input_width: 128\nloftr.input_height: 96\n')
    return ['--weights', str(folder / 'random.safetensors'), '--params',
            str(folder / 'small.yaml')]


@pytest.mark.skipif(not HAVE_LOFTR, reason='relperception.matching.loftr not installed')
class TestVizLoFTR:

    def test_attention_is_distribution(self, image_files, loftr_files):
        from relperception.cli.main import build_parser
        from relperception.cli.viz import _load_loftr

        args = build_parser('viz').parse_args(
            ['viz', 'attention', '--image0', image_files[0], '--image1', image_files[1],
             '--layer', '0', *LOFTR_ARGS, *loftr_files, '-o', 'unused'])
        probe = _load_loftr(args)
        assert probe.input_hw == (96, 128) and probe.grid_hw == (12, 16)
        image0, image1 = cv2.imread(image_files[0], 0), cv2.imread(image_files[1], 0)
        result = probe.cross_attention_for_pixel(image0, image1, (60, 50))
        np.testing.assert_allclose(result['head_sums'], 1.0, atol=1e-4)
        assert result['map'].shape == (12, 16) and result['map'].min() >= 0
        assert result['map'].sum() == pytest.approx(1.0, abs=1e-4)
        assert result['layer_name'] == 'cross' and result['layer'] == 3
        assert result['cell'] == 6 * 16 + 8  # pixel (60, 50): cell centre (64, 48)
        # the reported match comes from the cell's row of the confidence matrix
        confidence = result['confidence_map']
        assert confidence.shape == (12, 16) and confidence.min() >= 0
        assert confidence.sum() <= 1.0 + 1e-5  # dual softmax: row of a product of softmaxes
        assert result['confidence'] == pytest.approx(float(confidence.max()), abs=1e-5)
        matrices = {}
        for layer in (0, 3):
            matrices[layer] = probe.attention_matrix(image0, image1, layer, chunk=50)['matrix']
            assert matrices[layer].shape == (12 * 16, 12 * 16)
            np.testing.assert_allclose(matrices[layer].sum(axis=1), 1.0, atol=1e-4)
        # both code paths agree: the single-cell map is that row of the last cross layer
        np.testing.assert_allclose(matrices[3][result['cell']], result['map'].reshape(-1),
                                   rtol=1e-3, atol=1e-7)
        # reference for the first (self) layer: phi(q) . phi(k) normalised per head, then the
        # mean of the heads, computed here from the layer's projections
        import torch

        model, layer = probe.model, probe.model.loftr_coarse.layers[0]
        with torch.inference_mode():
            tokens = model.pos_encoding(model.backbone(probe.tensor(image0))[0])
            tokens = tokens.flatten(2).transpose(1, 2)[0]
            q = torch.nn.functional.elu(layer.q_proj(tokens)) + 1
            k = torch.nn.functional.elu(layer.k_proj(tokens)) + 1
        q = q.reshape(len(tokens), layer.nhead, -1).numpy().astype(np.float64)
        k = k.reshape(len(tokens), layer.nhead, -1).numpy().astype(np.float64)
        scores = np.einsum('lhd,shd->hls', q, k)
        expected = (scores / scores.sum(axis=2, keepdims=True)).mean(axis=0)
        np.testing.assert_allclose(matrices[0], expected, rtol=1e-3, atol=1e-7)

    def test_viz_match_png(self, image_files, loftr_files, tmp_path):
        code = main(['viz', 'match', '--image0', image_files[0], '--image1', image_files[1],
                     '--pixel', '60', '50', *LOFTR_ARGS, *loftr_files, '-o', str(tmp_path)])
        assert code == 0
        figure = cv2.imread(str(tmp_path / 'match_x60_y50.png'))
        # image 0 | NCC surface | cross-attention | match confidence, 320 px each, 8 px gaps
        assert figure is not None and figure.shape[1] == 4 * 320 + 3 * 8

    def test_viz_attention_png(self, image_files, loftr_files, tmp_path):
        code = main(['viz', 'attention', '--image0', image_files[0], '--image1', image_files[1],
                     '--layer', '1', '--query-cell', '40', *LOFTR_ARGS, *loftr_files,
                     '-o', str(tmp_path)])
        assert code == 0
        figure = cv2.imread(str(tmp_path / 'attention_layer1.png'))
        assert figure is not None and figure.ndim == 3
        # image 0 (320) | 192 x 192 matrix at 2 px a cell + 2 x 10 px row ticks | row map (320)
        assert figure.shape[1] == 320 + 8 + (2 * 192 + 20) + 8 + 320
        assert figure.shape[0] > 2 * 192

    def test_degenerate_bad_layer_and_cell(self, image_files, loftr_files, tmp_path, caplog):
        base = ['viz', 'attention', '--image0', image_files[0], '--image1', image_files[1],
                *LOFTR_ARGS, *loftr_files, '-o', str(tmp_path)]
        assert main([*base, '--layer', '9']) == 1
        assert '--layer must be in [0, 4)' in caplog.text
        assert main([*base, '--layer', '0', '--query-cell', '192']) == 1
        assert '--query-cell must be in [0, 192)' in caplog.text
