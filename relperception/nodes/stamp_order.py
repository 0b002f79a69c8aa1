# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Tell a camera's next stamp from an unset one, a duplicate, a glitch or a restarted clock.

One rule for every node that takes camera frames (odometry, matcher, dense): a stamp not
after the last one but within :data:`TIME_JUMP_BACK_S` of it is skipped (a duplicate or a frame
out of order), and a stamp more than :data:`TIME_JUMP_BACK_S` back or :data:`TIME_JUMP_AHEAD_S`
ahead is skipped as a glitch unless the next frame follows it: two frames on a new time line
are a restarted bag or a changed clock, and the caller is told so (a node with state starts
over on a jump back). A zero stamp (a header stamp that was not set) is such a glitch after
other frames; as the first frame it is a time origin (KITTI's own times start at 0.0).
"""

from __future__ import annotations

from typing import Optional

from relperception.data.input_counters import FRAMES_BAD_STAMP
from relperception.nodes.processing import SkipFrame

#: A stamp this far (seconds) before the last one is a new time line (e.g. a replayed bag) once
#: the next frame confirms it; nearer, it is a duplicate or out-of-order frame.
TIME_JUMP_BACK_S = 1.0
#: A stamp this far (seconds) after the last one is processed only once the next frame
#: confirms it (a single glitched stamp must not move a node's time).
TIME_JUMP_AHEAD_S = 10.0

_UNSET = ' (a zero stamp: the header stamp was not set?)'


class StampOrder:
    """The last accepted stamp of one camera and a time jump waiting to be confirmed."""

    def __init__(self) -> None:
        #: The last accepted stamp (ns), None before the first frame or after :meth:`reset`.
        self.last_ns: Optional[int] = None
        self._candidate_ns: Optional[int] = None   # a jump waiting for the next frame

    def reset(self) -> None:
        """Forget the last stamp: the next frame is accepted whatever its stamp (but zero)."""
        self.last_ns = None
        self._candidate_ns = None

    def accept(self, stamp_ns: int) -> float:
        """Accept ``stamp_ns`` as the next frame's stamp or raise :class:`SkipFrame`.

        Args:
            stamp_ns: the frame's header stamp (integer nanoseconds).

        Returns:
            0.0 for a frame in order, else the confirmed time jump in seconds (negative: back;
            the caller starts over if it keeps state across frames).

        Raises:
            SkipFrame: with the reason (``frames_bad_stamp``), for a duplicate or out-of-order
                stamp, or the first frame of an unconfirmed jump (a zero stamp after other
                frames among them).
        """
        last, candidate = self.last_ns, self._candidate_ns
        self._candidate_ns = None
        if last is None:
            self.last_ns = stamp_ns
            return 0.0
        jump_s = (stamp_ns - last) * 1e-9
        if -TIME_JUMP_BACK_S <= jump_s <= TIME_JUMP_AHEAD_S:
            if jump_s <= 0:
                raise SkipFrame(f'stamp {stamp_ns} ns is not after the last one ({last} ns)'
                                f'{_UNSET if stamp_ns == 0 else ""}', FRAMES_BAD_STAMP)
            self.last_ns = stamp_ns
            return 0.0
        if candidate is not None and 0 < (stamp_ns - candidate) * 1e-9 <= TIME_JUMP_AHEAD_S:
            self.last_ns = stamp_ns
            return jump_s
        self._candidate_ns = stamp_ns
        raise SkipFrame(f'stamp jumped {"back" if jump_s < 0 else "ahead"} by '
                        f'{abs(jump_s):.3f} s{_UNSET if stamp_ns == 0 else ""}: skipped as a '
                        'glitch unless the next frame follows it', FRAMES_BAD_STAMP)
