"""The embedded broker and the `riverlog_broker` pytest fixture users get."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from riverlog.embedded import EmbeddedBroker, broker


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
