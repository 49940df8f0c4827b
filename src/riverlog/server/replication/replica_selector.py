"""Which replica a consumer should fetch from (KIP-392, fetch from the closest replica): the
leader's choice, answered as `preferred_read_replica` in Fetch v11+. Pure.

`replica.selector.class` names the selector, as in Kafka: unset, consumers read from the
leader only; `org.apache.kafka.common.replica.RackAwareReplicaSelector` picks, for a consumer
that says its `client.rack`, the leader if it is in that rack, else the most caught-up
replica in that rack that has the fetch offset (largest log end offset, then the most
recently caught up), else the leader. Candidates are the replicas that hold the fetch offset;
the leader always is one.
"""

from __future__ import annotations

from typing import NamedTuple

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTORS = frozenset({RACK_AWARE})
"""The `replica.selector.class` values riverlog honours (besides none)."""


class ReplicaView(NamedTuple):
    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


def rack_aware(client_rack: str, leader: ReplicaView, candidates: list[ReplicaView]) -> int:
    """Kafka's RackAwareReplicaSelector: the broker id to read from."""
    if not client_rack:
        return leader.broker_id
    if leader.rack == client_rack:
        return leader.broker_id
    same_rack = [r for r in candidates if r.rack == client_rack]
    if not same_rack:
        return leader.broker_id
    best = max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms))
    return best.broker_id
