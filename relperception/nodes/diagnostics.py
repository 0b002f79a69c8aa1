# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Publish a node's processing statistics as ``diagnostic_msgs/DiagnosticArray``.

One ``DiagnosticStatus`` per watched stage, named ``<node name>: <what>``, once per period on
the relative topic ``diagnostics`` (remap it to ``/diagnostics`` in launch, where the
diagnostic aggregator and ``rqt_runtime_monitor`` listen). The level is WARN when no input
arrived for ``stale_after_s`` or when frames were dropped or failed since the last report;
the values are those of :func:`relperception.pipeline.realtime.diagnostic_report`, plus the
node's own input counters (``counters``: e.g. refused depth images by problem, refused
``camera_info``), added to the first stage; any counter that grew since the last report makes it
WARN and is named in its message, and the node's state (``state``: e.g. the tracking state of
the odometry, with its own level). Reports follow steady (wall) time, also under
``use_sim_time``; a last one goes out when the publisher is destroyed (the node stops).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Optional, Tuple

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from relperception.pipeline.realtime import (diagnostic_report, LEVEL_OK, LEVEL_WARN,
                                             RunningStats, StatsSnapshot)


class DiagnosticsPublisher:
    """Publish the statistics of one or more processing stages of a node at a fixed rate.

    Args:
        node: the publishing node.
        stages: ``(what, stats)`` pairs, e.g. ``[('matching', worker.stats)]``.
        period_s: publishing period in seconds (1 Hz by default, as diagnostic_updater).
        hardware_id: ``DiagnosticStatus.hardware_id``; nodes set :attr:`hardware_id` later,
            e.g. to the camera's ``frame_id`` once images arrive.
        stale_after_s: seconds without input after which a stage is reported WARN.
        topic: relative topic name.
        counters: optional function returning ``{name: count}`` of the node's refused inputs
            (monotonic counts), reported with the first stage.
        state: optional function returning ``(level, message, {name: value})`` of the node's
            state, added to the first stage: its values are appended, a level above the
            stage's raises it and its message is put first.
    """

    def __init__(self, node: Node, stages: List[Tuple[str, RunningStats]],
                 period_s: float = 1.0, hardware_id: str = '', stale_after_s: float = 2.0,
                 topic: str = 'diagnostics',
                 counters: Optional[Callable[[], Mapping[str, int]]] = None,
                 state: Optional[Callable[[], Tuple[int, str, Mapping[str, str]]]] = None
                 ) -> None:
        if not period_s > 0:
            raise ValueError(f'period_s must be > 0, got {period_s}')
        if not stages:
            raise ValueError('stages must name at least one (what, RunningStats) pair')
        self.hardware_id = hardware_id
        self._node = node
        self._stages = list(stages)
        self._stale_after_s = float(stale_after_s)
        self._previous: List[Optional[StatsSnapshot]] = [None] * len(self._stages)
        self._counters = counters
        self._state = state
        self._previous_counts: Dict[str, int] = {}
        self._publisher = node.create_publisher(DiagnosticArray, topic, 10)
        # Steady time: with use_sim_time the node clock stops when /clock does (a bag ends),
        # and the last reports would never be published.
        self._timer = node.create_timer(float(period_s), self.publish,
                                        clock=Clock(clock_type=ClockType.STEADY_TIME))

    def statuses(self) -> List[DiagnosticStatus]:
        """Return one ``DiagnosticStatus`` per stage, comparing with the previous report."""
        statuses = []
        for index, (what, stats) in enumerate(self._stages):
            snapshot = stats.snapshot()
            level, message, values = diagnostic_report(snapshot, self._previous[index],
                                                       self._stale_after_s)
            self._previous[index] = snapshot
            if index == 0 and self._counters is not None:
                level, message, values = self._add_counters(level, message, values)
            if index == 0 and self._state is not None:
                state_level, state_message, state_values = self._state()
                values = [*values, *((str(k), str(v)) for k, v in state_values.items())]
                if state_level > LEVEL_OK:
                    message = f'{state_message}; {message}' if level > LEVEL_OK else \
                        state_message
                level = max(level, state_level)
            statuses.append(DiagnosticStatus(
                level=bytes([level]), name=f'{self._node.get_name()}: {what}',
                message=message, hardware_id=self.hardware_id,
                values=[KeyValue(key=key, value=value) for key, value in values]))
        return statuses

    def _add_counters(self, level: int, message: str, values: list):
        counts = {str(k): int(v) for k, v in self._counters().items()}
        grown = {k: v - self._previous_counts.get(k, 0) for k, v in counts.items()
                 if v > self._previous_counts.get(k, 0)}
        self._previous_counts = counts
        values = [*values, *((key, str(count)) for key, count in sorted(counts.items()))]
        if grown:
            note = ', '.join(f'{n} {k}' for k, n in sorted(grown.items()))
            message = f'{message}; {note}' if level >= LEVEL_WARN else note
            level = max(level, LEVEL_WARN)
        return level, message, values

    def publish(self) -> None:
        """Publish the current statuses (called by the timer)."""
        array = DiagnosticArray()
        array.header.stamp = self._node.get_clock().now().to_msg()
        array.status = self.statuses()
        self._publisher.publish(array)

    def destroy(self) -> None:
        """Publish a last report, then destroy the timer and the publisher.

        The last report counts what happened since the previous one (e.g. frames dropped while
        the node stopped); it is skipped when the node's context is already shut down.
        """
        self._node.destroy_timer(self._timer)
        if self._node.context.ok():
            try:
                self.publish()
            except RuntimeError:  # rclpy's RCLError: the context went down meanwhile
                pass
        self._node.destroy_publisher(self._publisher)
