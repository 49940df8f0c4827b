"""`riverlog cluster describe`'s report from a cluster view: brokers, controller,
under-replicated and offline partitions, leader balance with dead brokers marked."""

from __future__ import annotations

import uuid

from riverlog.cli.cluster_view import describe_lines
from riverlog.client.admin_requests import BrokerInfo, ClusterView, PartitionInfo, TopicInfo


def test_report() -> None:
    topic = TopicInfo(
        "t",
        uuid.uuid4(),
        False,
        [
            PartitionInfo(0, 1, [1, 2, 3], [1, 2, 3]),
            PartitionInfo(1, 3, [2, 3, 1], [3, 1]),  # 2 is down: led by 3, under-replicated
            PartitionInfo(2, 3, [3, 1, 2], [3, 1]),
            PartitionInfo(3, -1, [2], [2]),  # offline
        ],
    )
    brokers = [BrokerInfo(1, "127.0.0.1", 9092, "r1"), BrokerInfo(3, "127.0.0.1", 9094, None)]
    assert describe_lines(ClusterView("abc", 3, brokers, [topic])) == [
        "Cluster: abc",
        "Controller: 3",
        "Brokers: 2",
        "\tBroker: 1\tHost: 127.0.0.1:9092\tRack: r1",
        "\tBroker: 3\tHost: 127.0.0.1:9094\tRack: none",
        "Under-replicated partitions: 2",
        "\tTopic: t\tPartition: 1\tLeader: 3\tReplicas: 2,3,1\tIsr: 3,1",
        "\tTopic: t\tPartition: 2\tLeader: 3\tReplicas: 3,1,2\tIsr: 3,1",
        "Offline partitions: 1",
        "\tTopic: t\tPartition: 3\tLeader: none\tReplicas: 2\tIsr: 2",
        "Leader balance (leaders / preferred leaderships):",
        "\tBroker: 1\tLeaders: 1\tPreferred: 1\tImbalance: 0%",
        "\tBroker: 2\tLeaders: 0\tPreferred: 2\tImbalance: 100%\t(not alive)",
        "\tBroker: 3\tLeaders: 2\tPreferred: 1\tImbalance: 0%",
    ]


def test_an_empty_cluster_without_controller() -> None:
    assert describe_lines(ClusterView(None, -1, [], [])) == [
        "Cluster: unknown",
        "Controller: none",
        "Brokers: 0",
        "Under-replicated partitions: 0",
        "Offline partitions: 0",
        "Leader balance (leaders / preferred leaderships):",
    ]
