# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Pictures of how matchers relate two images: correlation surfaces and attention maps.

Every drawing function returns an (H, W, 3) uint8 RGB array (publishable as an ``rgb8``
``sensor_msgs/Image`` debug topic, or written as PNG by ``relperception viz``).
"""

from relperception.visualization.relation import (
    attention_grid,
    attention_matrix_image,
    cell_grid_to_image,
    colour_bar,
    compose_panels,
    draw_markers,
    heatmap_image,
    heatmap_overlay,
    ncc_surface,
    pool_matrix,
    surface_peak,
    titled_panel,
)

__all__ = [
    'attention_grid',
    'attention_matrix_image',
    'cell_grid_to_image',
    'colour_bar',
    'compose_panels',
    'draw_markers',
    'heatmap_image',
    'heatmap_overlay',
    'ncc_surface',
    'pool_matrix',
    'surface_peak',
    'titled_panel',
]
