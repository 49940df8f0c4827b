"""Completed rebalances and groups by state on the Prometheus endpoint, against a real broker
and confluent-kafka members: every rebalance a member saw (an assignment) is one completed
rebalance on the coordinator. (ISR shrinks and expands are shown in `test_metrics.py`, on
the 2-broker cluster that shows under-replicated partitions.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.embedded import EmbeddedBroker, broker
from tests.cluster_harness import wait_until
from tests.server.test_metrics import one, scrape

REBALANCES = "kafka_server_group_coordinator_metrics_group_completed_rebalance_count"
BY_STATE = "kafka_server_group_coordinator_metrics_classic_group_count"
OLD_STABLE = "kafka_coordinator_group_groupmetadatamanager_numgroupsstable"
OLD_EMPTY = "kafka_coordinator_group_groupmetadatamanager_numgroupsempty"


@pytest.fixture
def running(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with broker(tmp_path / "data", overrides={"metrics.listener": "http://127.0.0.1:0"}) as b:
        yield b


class Member:
    """A confluent-kafka group member that counts the assignments it was given."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.assigned = 0
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 200,
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign)

    def _on_assign(self, _consumer: object, _partitions: object) -> None:
        self.assigned += 1

    def poll_until(self, assigned: int, *others: Member) -> None:
        """Poll this member (and `others`) until it was assigned `assigned` times."""
        wait_until(
            lambda: [m.consumer.poll(0.1) for m in (self, *others)] and self.assigned >= assigned,
            30,
            f"assignment {assigned}",
        )


def test_rebalances_and_groups_by_state_are_counted(running: EmbeddedBroker) -> None:
    assert running.broker is not None and running.broker.metrics is not None
    port, bootstrap = running.broker.metrics.port, running.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("orders", 4, 1)])["orders"].result(30)
    assert one(scrape(port), REBALANCES) == 0

    first = Member(bootstrap, "billing", "orders")
    first.poll_until(1)  # a group of one: the first rebalance
    s = scrape(port)
    assert one(s, REBALANCES) == 1
    assert one(s, BY_STATE, state="Stable") == one(s, OLD_STABLE) == 1
    second = Member(bootstrap, "billing", "orders")
    second.poll_until(1, first)  # both rejoin: one rebalance, seen by both members
    first.poll_until(2, second)
    assert one(scrape(port), REBALANCES) == 2
    second.consumer.close()  # LeaveGroup: the first member is the whole group again
    first.poll_until(3)
    s = scrape(port)
    assert one(s, REBALANCES) == first.assigned == 3
    assert one(s, BY_STATE, state="Stable") == 1
    first.consumer.close()  # the group is left Empty: no rebalance to complete
    wait_until(lambda: one(scrape(port), OLD_EMPTY) == 1, 10, "the group Empty")
    s = scrape(port)
    assert one(s, BY_STATE, state="Empty") == 1
    for state in ("Stable", "PreparingRebalance", "CompletingRebalance", "Dead"):
        assert one(s, BY_STATE, state=state) == 0
    assert one(s, REBALANCES) == 3
