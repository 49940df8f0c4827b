"""The embedded broker and the `riverlog_broker` pytest fixture users get."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from riverlog.embedded import EmbeddedBroker, broker
from riverlog.metadata import layout
from riverlog.metadata.store import EmbeddedStore
from riverlog.server.broker import METADATA_FILE
from riverlog.server.controller.controller_election import controller_id


def test_fixture_serves_a_real_client(riverlog_broker: EmbeddedBroker) -> None:
    bootstrap = riverlog_broker.bootstrap_servers
    assert bootstrap.startswith("127.0.0.1:")
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("auto-created", key=b"k", value=b"hello")  # auto.create.topics.enable
    assert producer.flush(15) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
        }
    )
    consumer.assign([TopicPartition("auto-created", 0, 0)])
    msg = None
    for _ in range(20):
        msg = consumer.poll(0.5)
        if msg is not None:
            break
    consumer.close()
    assert msg is not None and (msg.key(), msg.value()) == (b"k", b"hello")


def test_topics_survive_a_restart_of_the_same_data_dir(tmp_path: Path) -> None:
    with broker(tmp_path) as first:
        assert first.broker is not None
        first.call(lambda: first.broker.create_topic("kept", 2, 1, {}))  # type: ignore[union-attr]
    with broker(tmp_path) as second:
        assert second.broker is not None
        kept = second.broker.topics.get("kept")
        assert kept is not None and len(kept.partitions) == 2
    assert (tmp_path / "kept-1").is_dir()


def test_temporary_data_dir_is_removed() -> None:
    with broker() as running:
        assert running.broker is not None
        data_dir = running.broker.data_dir
        assert data_dir.is_dir()
    assert not data_dir.exists()


def test_a_single_node_is_a_cluster_of_one_on_the_controller_path(tmp_path: Path) -> None:
    """The embedded broker registers, wins `/controller` and is told by its own controller
    (LeaderAndIsr) to lead; the state survives in the data dir, and a restart is a
    controller failover with a new epoch that keeps the leader epochs."""
    store_file = tmp_path / METADATA_FILE

    def controller_epoch() -> int:
        return int(EmbeddedStore(store_file).get(layout.CONTROLLER_EPOCH).data)

    def state() -> layout.PartitionState:
        node = EmbeddedStore(store_file).get(layout.partition_state_path("solo", 1))
        return layout.PartitionState.from_json(node.data)

    with broker(tmp_path) as first:
        node = first.broker
        assert node is not None
        first.call(lambda: node.create_topic("solo", 2, 1, {}))
        deadline = time.monotonic() + 10
        while not node.replicas.leads_all([("solo", 1)]):
            assert time.monotonic() < deadline, "the controller never made the broker lead"
            time.sleep(0.01)
        assert node.store.exists(layout.broker_path(0))
        assert controller_id(node.store) == 0
        assert (state().leader, state().isr) == (0, [0])
        epoch_before = controller_epoch()
    with broker(tmp_path) as second:
        node = second.broker
        assert node is not None
        hosted = node.replicas.leader("solo", 1)  # led as soon as start returned
        assert (hosted.leader_id, hosted.leader_epoch) == (0, state().leader_epoch)
        assert controller_epoch() == epoch_before + 1
