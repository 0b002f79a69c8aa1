# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Dense prediction heads fed by a backbone's list of feature maps."""

from relperception.models.heads.dpt import DPTHead, make_resize_layer
from relperception.models.heads.segmentation import SegmentationHead

__all__ = ['DPTHead', 'make_resize_layer', 'SegmentationHead']
