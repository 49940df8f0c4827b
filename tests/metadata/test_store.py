"""The embedded metadata store's own behaviour (persistence to its file) and the layout's
JSON; what both stores share is in test_store_contract.py."""

from __future__ import annotations

import uuid
from pathlib import Path

from riverlog.metadata import layout
from riverlog.metadata.store import EmbeddedStore


def test_persistence_keeps_persistent_nodes_only(tmp_path: Path) -> None:
    file = tmp_path / "meta.json"
    store = EmbeddedStore(file)
    store.create("/config/topics/t", b"{}")
    store.set("/config/topics/t", b'{"x":1}')
    store.create("/brokers/ids/1", b"me", ephemeral=True)
    reopened = EmbeddedStore(file)
    assert reopened.get("/config/topics/t") == store.get("/config/topics/t")
    assert not reopened.exists("/brokers/ids/1")


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
