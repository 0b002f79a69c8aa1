# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Bad option values of the CLI verbs: refused in one line, never a crash or a wrong number.

Each test is one finding of the systematic sweep that replaces one argument of a verb at a
time by 0, a negative, NaN, inf, a huge number or an empty string.
"""

import math

from bad_input_support import one_clear_line, run_cli
import numpy as np
import pytest
from relperception.cli.main import EXIT_BAD_INPUT, EXIT_USAGE
from relperception.data.synthetic_bag import write_synthetic_bag
from relperception.evaluation.pairs import estimate_relative_pose


@pytest.fixture(scope='module')
def tiny_bag(tmp_path_factory):
    bag = tmp_path_factory.mktemp('bad_values') / 'bag'
    write_synthetic_bag(bag, frames=6, seed=1, width=96, height=72)
    return bag


def test_infinite_ransac_threshold_is_refused(caplog):
    """threshold_px inf made every match an inlier: eval-pairs wrote AUC 0 and exited 0."""
    K = np.array([[400.0, 0, 160], [0, 400.0, 120], [0, 0, 1]])
    rng = np.random.default_rng(0)
    k0 = rng.uniform(0, 300, (50, 2))
    for bad in (math.inf, math.nan, 0.0):
        with pytest.raises(ValueError, match='threshold_px'):
            estimate_relative_pose(k0, k0 + 3.0, K, K, threshold_px=bad)
    with pytest.raises(SystemExit) as exit_:
        run_cli(['eval-pairs', '--synthetic', '1', '--matchers', 'ncc', '-o', 'unused',
                 '--threshold-px', 'inf'], caplog)
    assert exit_.value.code == EXIT_USAGE


def test_empty_output_is_refused_not_the_current_folder(tiny_bag, tmp_path, monkeypatch,
                                                        caplog):
    """-o "" (an unset variable) wrote eval's and infer's results into the current folder."""
    monkeypatch.chdir(tmp_path)
    image = tmp_path / 'image.png'
    import cv2
    cv2.imwrite(str(image), np.full((32, 32, 3), 128, np.uint8))
    for argv in (['eval', str(tiny_bag), '--no-plots', '--no-progress'],
                 ['infer', str(image)]):
        code, errors = run_cli(argv + ['-o', ''], caplog)
        assert code == EXIT_BAD_INPUT, argv
        one_clear_line(errors, '-o is empty')
    assert sorted(p.name for p in tmp_path.iterdir()) == ['image.png']


def test_convert_source_that_is_a_file_is_named_as_such(tmp_path, caplog):
    """A file as the dataset folder was reported as a folder that 'does not exist'."""
    image = tmp_path / 'frame.png'
    image.write_bytes(b'not read')
    code, errors = run_cli(['convert', 'images', str(image), '-o', str(tmp_path / 'bag')],
                           caplog)
    assert code == EXIT_BAD_INPUT
    one_clear_line(errors, 'is a file; give the dataset folder')
    assert not (tmp_path / 'bag').exists()


def test_a_folder_given_for_a_file_is_named_as_a_folder(tmp_path, caplog):
    """A folder as weights, ONNX model or image was reported as a file that does not exist."""
    import cv2
    image = tmp_path / 'image.png'
    cv2.imwrite(str(image), np.full((32, 32, 3), 128, np.uint8))
    folder = tmp_path / 'folder'
    folder.mkdir()
    for argv in (['infer', str(image), '--weights', str(folder)],
                 ['infer', str(image), '--backend', 'onnxruntime', '--onnx', str(folder)],
                 ['match', str(image), str(folder), '--config', 'ncc'],
                 ['export', '--config', 'fast_seg', '--weights', str(folder)]):
        code, errors = run_cli(argv + ['-o', str(tmp_path / 'out' / 'm.onnx')], caplog)
        assert code == EXIT_BAD_INPUT, argv
        one_clear_line(errors, f'{folder} is a folder; give the file itself')


def test_convert_images_refuses_the_image_folder_as_labels(tmp_path, caplog):
    """--labels SRC for SRC/labels wrote the grey images themselves as class ids, exit 0."""
    import cv2
    images = tmp_path / 'images'
    images.mkdir()
    cv2.imwrite(str(images / 'a.png'), np.full((32, 32), 7, np.uint8))
    code, errors = run_cli(['convert', 'images', str(images), '--labels', str(images), '-o',
                            str(tmp_path / 'bag')], caplog)
    assert code == EXIT_BAD_INPUT
    one_clear_line(errors, 'is the image folder')
    assert not (tmp_path / 'bag').exists()


def test_a_ros_parameter_file_given_as_a_model_file_is_named(tmp_path, caplog):
    """A ROS-form params.yaml given to export --config got only "unknown keys ['/**']"."""
    params = tmp_path / 'params.yaml'
    params.write_text('/**:\n  ros__parameters:\n    dense:\n      model: vit_hybrid\n')
    code, errors = run_cli(['export', '--config', str(params), '-o', str(tmp_path / 'm.onnx')],
                           caplog)
    assert code == EXIT_BAD_INPUT
    one_clear_line(errors, 'is a ROS 2 parameter file, not a model file', 'vit_hybrid')
