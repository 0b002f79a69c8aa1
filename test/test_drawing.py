# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Report drawings: side-by-side matches, captions, depth colour bars, class legends."""

import numpy as np
import pytest
from relperception.core_types import Matches
from relperception.evaluation.dense_plots import sample_strip
from relperception.imaging.colormap import CAMVID_CLASS_NAMES, CAMVID_PALETTE
from relperception.imaging.drawing import (add_caption, depth_colour_bar, draw_match_pair,
                                           label_legend, RIGHT_RGB, WRONG_RGB)


def _matches(k0, k1):
    k0, k1 = np.asarray(k0, np.float32), np.asarray(k1, np.float32)
    return Matches(k0, k1, np.ones(len(k0), np.float32))


class TestDrawMatchPair:
    def test_side_by_side_with_coloured_lines(self):
        image0 = np.full((60, 80), 100, np.uint8)
        image1 = np.full((50, 90), 100, np.uint8)
        matches = _matches([[10, 10], [10, 40]], [[20, 10], [20, 40]])
        drawing = draw_match_pair(image0, image1, matches, np.array([True, False]), 'pair')
        bar = drawing.shape[0] - 60
        assert bar > 0 and drawing.shape[1] == 80 + 8 + 90
        # the horizontal line of match 0 crosses the gap between the images in green
        np.testing.assert_allclose(drawing[bar + 10, 84], RIGHT_RGB, atol=25)
        np.testing.assert_allclose(drawing[bar + 40, 84], WRONG_RGB, atol=25)
        # image 1 is placed right of image 0 and the gap; below image 1 stays white
        np.testing.assert_array_equal(drawing[bar + 55, 80 + 8 + 45], [255, 255, 255])
        assert (drawing[:bar] < 128).any()   # title text drawn

    def test_confidence_colours_and_bad_input(self):
        image = np.zeros((40, 40), np.uint8)
        drawing = draw_match_pair(image, image, _matches([[5, 5]], [[6, 5]]))
        assert drawing.shape[1] == 88
        with pytest.raises(ValueError, match='entries'):
            draw_match_pair(image, image, _matches([[5, 5]], [[6, 5]]), np.ones(2, bool))
        with pytest.raises(ValueError, match='image0'):
            draw_match_pair(np.zeros((4, 4), np.float32), image, Matches.empty())
        empty = draw_match_pair(image, image, Matches.empty(), title='none')
        assert empty.shape[1] == 88


class TestCaptionsAndKeys:
    def test_caption_grows_the_image(self):
        image = np.zeros((30, 200, 3), np.uint8)
        one, two = add_caption(image, ['a']), add_caption(image, ['a', 'b'])
        assert one.shape[1] == 200 and two.shape[0] > one.shape[0] > 30
        np.testing.assert_array_equal(two[-30:], image)

    def test_depth_colour_bar_is_turbo_near_blue_far_red(self):
        bar = depth_colour_bar(200, 1.0, 5.0)
        top, bottom = bar[12, 8].astype(int), bar[187, 8].astype(int)
        assert top[0] > top[2] and bottom[2] > bottom[0]    # far red on top, near blue below
        with pytest.raises(ValueError):
            depth_colour_bar(200, 5.0, 1.0)

    def test_legend_shows_the_palette_colours(self):
        legend = label_legend(CAMVID_CLASS_NAMES, CAMVID_PALETTE, 400, present=[3, 8])
        np.testing.assert_array_equal(legend[11, 11], CAMVID_PALETTE[3])
        np.testing.assert_array_equal(legend[11, 130 + 11], CAMVID_PALETTE[8])
        assert legend.shape[0] == 26     # two classes fit in one row
        with pytest.raises(ValueError):
            label_legend([], CAMVID_PALETTE, 400)

    def test_captioned_sample_strips(self):
        rgb = np.zeros((60, 80, 3), np.uint8)
        labels = np.full((60, 80), 3, np.uint8)
        plain = sample_strip(rgb, labels, labels)
        captioned = sample_strip(rgb, labels, labels, caption='model - frame 7')
        assert captioned.shape[0] > plain.shape[0] and captioned.shape[1] == plain.shape[1]
        depth = np.tile(np.linspace(1, 4, 80, dtype=np.float32), (60, 1))
        strip = sample_strip(rgb, depth, depth, kind='depth', caption='depth')
        assert strip.shape[1] == plain.shape[1] + 90     # the colour bar on the right
