# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Correspondence methods behind one ``Matcher`` protocol, all returning ``Matches``."""

from relperception.matching.base import build_matcher, check_gray_pair, Matcher
from relperception.matching.keypoints import detect_keypoints
from relperception.matching.ncc import NCCMatcher

__all__ = ['Matcher', 'NCCMatcher', 'build_matcher', 'check_gray_pair', 'detect_keypoints']
