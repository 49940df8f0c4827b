"""The embedded metadata store: versions, ephemerals, watches, children, persistence."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from riverlog.metadata import layout
from riverlog.metadata.store import (
    BadVersionError,
    EmbeddedStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)


def test_create_get_set_with_versions(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "meta.json")
    store.create("/brokers/topics/t", b"a")
    assert store.exists("/brokers") and store.exists("/brokers/topics")
    assert store.get("/brokers/topics/t").version == 0
    assert store.set("/brokers/topics/t", b"b", expected_version=0) == 1
    with pytest.raises(BadVersionError):
        store.set("/brokers/topics/t", b"c", expected_version=0)
    with pytest.raises(NodeExistsError):
        store.create("/brokers/topics/t", b"")
    with pytest.raises(NoNodeError):
        store.get("/nope")
    assert store.children("/brokers/topics") == ["t"]


def test_delete_recursive_and_not_empty(tmp_path: Path) -> None:
    store = EmbeddedStore(None)
    store.create("/a/b/c", b"")
    with pytest.raises(NotEmptyError):
        store.delete("/a")
    store.delete("/a", recursive=True)
    assert not store.exists("/a/b/c") and not store.exists("/a")


def test_persistence_keeps_persistent_nodes_only(tmp_path: Path) -> None:
    file = tmp_path / "meta.json"
    store = EmbeddedStore(file)
    store.create("/config/topics/t", b"{}")
    store.set("/config/topics/t", b'{"x":1}')
    store.create("/brokers/ids/1", b"me", ephemeral=True)
    reopened = EmbeddedStore(file)
    assert reopened.get("/config/topics/t") == store.get("/config/topics/t")
    assert not reopened.exists("/brokers/ids/1")


def test_watch_fires_once_on_change() -> None:
    store = EmbeddedStore(None)
    store.create("/x", b"")
    seen: list[str] = []
    store.watch("/x", seen.append)
    store.set("/x", b"1")
    store.set("/x", b"2")
    assert seen == ["/x"]
    store.watch("/x", seen.append)
    store.create("/x/child", b"")  # a child change fires the parent's watch
    assert seen == ["/x", "/x"]


def test_layout_json_round_trips() -> None:
    topic_id = uuid.uuid4()
    assignment = layout.TopicAssignment(topic_id, {0: [1, 2], 1: [2, 1]})
    assert layout.TopicAssignment.from_json(assignment.to_json()) == assignment
    assert len(layout.encode_uuid(topic_id)) == 22
    state = layout.PartitionState(leader=1, leader_epoch=3, isr=[1, 2], controller_epoch=7)
    assert layout.PartitionState.from_json(state.to_json()) == state
    reg = layout.BrokerRegistration(1, (layout.Endpoint("PLAINTEXT", "127.0.0.1", 9092),), "r1")
    assert layout.BrokerRegistration.from_json(1, reg.to_json()) == reg
    assert layout.topic_config_from_json(layout.topic_config_json({"a": "1"})) == {"a": "1"}
