# Copyright 2026 The relperception Authors
# Licensed under the Apache License, Version 2.0 (see LICENSE).
"""Count the input messages DDS lost before they reached a subscription.

A message can be lost in transport without the node ever seeing it: a best-effort sample one
of whose fragments was dropped (an image far larger than the transport's buffers, a congested
network), or one overwritten in the reader's history. The middleware reports such losses as
``message_lost`` events; :class:`LostMessages` counts them per input, logs them (throttled)
and hands the counts to the node's ``/diagnostics`` counters, so nothing is lost silently.
"""

from __future__ import annotations

import collections
from typing import Dict

from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.node import Node
from relperception.data.input_counters import LOST_IN_TRANSPORT_SUFFIX


class LostMessages:
    """Per-input counts of messages lost in transport, from ``message_lost`` events.

    Args:
        node: the node whose logger reports the losses.
    """

    def __init__(self, node: Node) -> None:
        """Start with no loss counted."""
        self._logger = node.get_logger()
        self._counts: collections.Counter = collections.Counter()

    def callbacks(self, input_name: str) -> SubscriptionEventCallbacks:
        """Return the event callbacks of the subscription of ``input_name`` (e.g. 'image')."""
        def on_message_lost(status) -> None:
            self._counts[input_name] += int(status.total_count_change)
            self._logger.warning(
                f'{input_name}: {status.total_count_change} message(s) lost in transport '
                'before reaching this node (e.g. a message far larger than the DDS transport '
                f'buffers, or dropped fragments); {self._counts[input_name]} so far',
                throttle_duration_sec=5.0)

        return SubscriptionEventCallbacks(message_lost=on_message_lost)

    def counts(self) -> Dict[str, int]:
        """Return ``{'<input>_lost_in_transport': count}`` for every input that lost some."""
        return {f'{name}{LOST_IN_TRANSPORT_SUFFIX}': count
                for name, count in self._counts.items()}
