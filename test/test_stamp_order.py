# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""The one stamp rule of the camera nodes (:class:`StampOrder`)."""

import pytest
from relperception.nodes.processing import SkipFrame
from relperception.nodes.stamp_order import StampOrder, TIME_JUMP_AHEAD_S, TIME_JUMP_BACK_S

S = 10**9   # ns per second
T0 = 1_700_000_000 * S


def accepted(order, stamp_ns):
    """Return the jump :meth:`StampOrder.accept` gives, or the reason it skipped the stamp."""
    try:
        return order.accept(stamp_ns)
    except SkipFrame as skip:
        return str(skip)


class TestStampOrder:

    def test_frames_in_order_are_accepted(self):
        order = StampOrder()
        assert [order.accept(T0 + i * S // 10) for i in range(5)] == [0.0] * 5
        assert order.last_ns == T0 + 4 * S // 10

    def test_zero_duplicate_and_out_of_order_stamps_are_skipped(self):
        order = StampOrder()
        order.accept(T0)
        assert 'zero stamp' in accepted(order, 0) and 'glitch' in accepted(order, 0)
        assert 'not after' in accepted(order, T0)
        assert 'not after' in accepted(order, T0 - S // 2)
        assert order.accept(T0 + S // 10) == 0.0    # the next frame is not disturbed
        assert order.last_ns == T0 + S // 10

    @pytest.mark.parametrize('jump_ns', [-60 * S, -int((TIME_JUMP_BACK_S + 0.1) * S),
                                         int((TIME_JUMP_AHEAD_S + 0.1) * S), 10**15])
    def test_a_single_glitch_is_skipped_and_time_goes_on(self, jump_ns):
        order = StampOrder()
        order.accept(T0)
        assert 'glitch' in accepted(order, T0 + jump_ns)
        assert order.accept(T0 + S // 10) == 0.0
        assert order.last_ns == T0 + S // 10

    @pytest.mark.parametrize('jump_ns', [-5 * S, 20 * S])
    def test_a_jump_the_next_frame_confirms_is_followed(self, jump_ns):
        order = StampOrder()
        order.accept(T0)
        assert 'glitch' in accepted(order, T0 + jump_ns)
        jump = order.accept(T0 + jump_ns + S // 10)
        assert jump == pytest.approx((jump_ns + S // 10) / S)
        assert order.last_ns == T0 + jump_ns + S // 10
        assert order.accept(T0 + jump_ns + 2 * S // 10) == 0.0

    def test_two_glitches_that_disagree_do_not_confirm_each_other(self):
        order = StampOrder()
        order.accept(T0)
        assert 'glitch' in accepted(order, T0 + 100 * S)
        assert 'glitch' in accepted(order, T0 - 100 * S)   # not after the first glitch
        assert order.accept(T0 + S // 10) == 0.0

    def test_a_zero_stamp_first_is_a_time_origin(self):
        # KITTI's times.txt starts at 0.0: a replayed converted sequence begins there
        order = StampOrder()
        assert order.accept(0) == 0.0
        assert order.accept(S // 10) == 0.0
        assert 'not after' in accepted(order, 0) and 'zero stamp' in accepted(order, 0)

    def test_reset_accepts_any_next_stamp(self):
        order = StampOrder()
        order.accept(T0)
        order.reset()
        assert order.last_ns is None
        assert order.accept(T0 - 3600 * S) == 0.0
