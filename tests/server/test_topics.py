"""The topic registry over the embedded metadata store: names, errors, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverlog.metadata.store import EmbeddedStore
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.server.topics import TopicRegistry, validate_topic_name


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "with space", "ü", "a/b"])
def test_illegal_names_are_invalid_topic_exception(name: str) -> None:
    with pytest.raises(KafkaError) as e:
        validate_topic_name(name)
    assert e.value.error is error_codes.INVALID_TOPIC_EXCEPTION


def test_legal_names() -> None:
    for name in ("a", "A.b_c-9", "a" * 249, "__consumer_offsets"):
        validate_topic_name(name)


def test_create_persist_reload_delete(tmp_path: Path) -> None:
    file = tmp_path / "meta.json"
    reg = TopicRegistry(EmbeddedStore(file))
    reg.load()
    topic = reg.create("events", {0: [1], 1: [1]}, {"cleanup.policy": "compact"})
    with pytest.raises(KafkaError) as dup:
        reg.create("events", {0: [1]}, {})
    assert dup.value.error is error_codes.TOPIC_ALREADY_EXISTS

    again = TopicRegistry(EmbeddedStore(file))
    again.load()
    loaded = again.get("events")
    assert loaded == topic and again.by_id(topic.topic_id) == topic

    grown = again.add_partitions("events", {2: [1]})
    assert sorted(grown.partitions) == [0, 1, 2]
    with pytest.raises(KafkaError) as shrink:
        again.add_partitions("events", {1: [1]})
    assert shrink.value.error is error_codes.INVALID_PARTITIONS


def test_validate_only_writes_nothing(tmp_path: Path) -> None:
    reg = TopicRegistry(EmbeddedStore(tmp_path / "m.json"))
    reg.create("dry", {0: [1]}, {}, validate_only=True)
    assert reg.get("dry") is None
    with pytest.raises(KafkaError) as holes:
        reg.create("holes", {0: [1], 2: [1]}, {})
    assert holes.value.error is error_codes.INVALID_REPLICA_ASSIGNMENT
