# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Image messages <-> numpy (raw and compressed, rclpy and rosbags alike) and colour maps."""

from .colormap import (  # noqa: I101 (ruff's isort order)
    CAMVID_CLASS_NAMES,
    CAMVID_PALETTE,
    colorize_depth,
    colorize_labels,
    overlay,
)
from .compressed import (
    compress_depth_32fc1,
    compressed_to_numpy,
    numpy_to_compressed_fields,
)
from .depth_checks import check_depth, DEPTH_PROBLEMS, DepthCheck
from .image_encodings import (  # noqa: I101 (ruff's isort order)
    DEPTH_ENCODINGS,
    LOW_RANGE_16BIT_MAX,
    SUPPORTED_ENCODINGS,
    check_array,
    depth_to_metres,
    encoding_spec,
    image_to_numpy,
    low_range_16bit,
    numpy_to_image_fields,
    to_8bit,
    to_mono8,
    to_rgb8,
)
from .image_files import read_image_file, write_image

__all__ = [
    'CAMVID_CLASS_NAMES',
    'CAMVID_PALETTE',
    'DEPTH_ENCODINGS',
    'DEPTH_PROBLEMS',
    'DepthCheck',
    'LOW_RANGE_16BIT_MAX',
    'SUPPORTED_ENCODINGS',
    'check_array',
    'check_depth',
    'colorize_depth',
    'colorize_labels',
    'compress_depth_32fc1',
    'compressed_to_numpy',
    'depth_to_metres',
    'encoding_spec',
    'image_to_numpy',
    'low_range_16bit',
    'numpy_to_compressed_fields',
    'numpy_to_image_fields',
    'overlay',
    'read_image_file',
    'to_8bit',
    'to_mono8',
    'to_rgb8',
    'write_image',
]
