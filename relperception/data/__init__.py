# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Data access: rosbag2 read/write, message conversions, dataset converters, synthetic scenes.

Submodules are imported explicitly (``from relperception.data.bag import BagReader``) so that
importing this package stays cheap and free of side effects.
"""
