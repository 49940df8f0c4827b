"""Changes of membership, counted where they are decided and read at scrape time: replicas
leaving and joining ISRs (`ReplicaManager.isr_shrinks` / `isr_expands`, bumped when this
broker, as leader, has written a new ISR) and consumer groups completing rebalances
(`GroupManager.completed_rebalances`, bumped when a leader's SyncGroup ends one), plus the
groups by state under Kafka 4's labelled name. Names as the JMX exporter gives the MBeans:

- `kafka_server_replicamanager_isrshrinks_total`, `..._isrexpands_total` (kafka.server:
  type=ReplicaManager,name=IsrShrinksPerSec / IsrExpandsPerSec): one per partition whose
  ISR changed;
- `kafka_server_group_coordinator_metrics_group_completed_rebalance_count` (kafka.server:
  type=group-coordinator-metrics, attribute group-completed-rebalance-count; untyped, as the
  exporter's default rule exports it): rebalances completed by groups this broker
  coordinates;
- `kafka_server_group_coordinator_metrics_classic_group_count{state}` (attribute
  classic-group-count, tag state=Empty|PreparingRebalance|CompletingRebalance|Stable|Dead):
  the same counts as `kafka_coordinator_group_groupmetadatamanager_numgroups<state>`.

Invariant: the counters only grow; both are plain ints written and read on the event loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)

from riverlog.coordinator.group import GroupState

if TYPE_CHECKING:
    from riverlog.server.broker import Broker


class MembershipMetrics:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Metric]:
        replicas = self.broker.replicas
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "Partitions whose ISR this broker shrank as leader",
            value=replicas.isr_shrinks,
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "Partitions whose ISR this broker expanded as leader",
            value=replicas.isr_expands,
        )
        manager = self.broker.groups.manager
        prefix = "kafka_server_group_coordinator_metrics_"
        yield UnknownMetricFamily(
            prefix + "group_completed_rebalance_count",
            "Rebalances completed by the groups this broker coordinates",
            value=manager.completed_rebalances,
        )
        by_state = GaugeMetricFamily(
            prefix + "classic_group_count",
            "Groups this broker coordinates, per state",
            labels=["state"],
        )
        counts = dict.fromkeys(GroupState, 0)
        for group in manager:
            counts[group.state] += 1
        for state, count in counts.items():
            by_state.add_metric([state.value], count)
        yield by_state
