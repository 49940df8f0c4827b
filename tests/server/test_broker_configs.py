"""Dynamic broker configs (over the embedded store) and config sources and synonyms (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from riverlog.metadata import layout
from riverlog.metadata.store import EmbeddedStore
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.server import broker_configs as bc
from riverlog.server.config import BrokerConfig


def test_precedence_per_broker_then_cluster_default_then_static(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path / "meta.json")
    static = BrokerConfig.from_properties(
        {"broker.id": "2", "log.retention.hours": "5", "min.insync.replicas": "2"}
    )
    dynamic = bc.DynamicBrokerConfigs(static, store)
    assert dynamic.reload().topic_defaults()["retention.ms"] == str(5 * 3_600_000)
    dynamic.write(bc.DEFAULT_ENTITY, {"log.retention.ms": "1000", "min.insync.replicas": "3"})
    dynamic.write("2", {"min.insync.replicas": "1"})
    dynamic.write("3", {"log.retention.ms": "9"})  # another broker's: not ours
    config = dynamic.reload()
    assert config.topic_defaults()["retention.ms"] == "1000"
    assert config["min.insync.replicas"] == 1 and config["log.retention.hours"] == 5
    assert json.loads(store.get(layout.broker_config_path("2")).data) == {
        "version": 1,
        "config": {"min.insync.replicas": "1"},
    }
    assert bc.broker_synonyms("min.insync.replicas", dynamic.layers) == [
        bc.Synonym(bc.DYNAMIC_BROKER_CONFIG, "min.insync.replicas", "1"),
        bc.Synonym(bc.DYNAMIC_DEFAULT_BROKER_CONFIG, "min.insync.replicas", "3"),
        bc.Synonym(bc.STATIC_BROKER_CONFIG, "min.insync.replicas", "2"),
        bc.Synonym(bc.DEFAULT_CONFIG, "min.insync.replicas", "1"),
    ]


def test_only_dynamic_keys_with_good_values(tmp_path: Path) -> None:
    dynamic = bc.DynamicBrokerConfigs(
        BrokerConfig.from_properties({"broker.id": "1"}), EmbeddedStore(None)
    )
    for bad, message in (
        ({"log.retention.hours": "1"}, "Cannot update these configs dynamically"),
        ({"log.segment.bytes": "x"}, "Invalid value x"),
        ({"log.segment.bytes": "10"}, "Invalid value 10"),
        ({"log.cleanup.policy": "sometimes"}, "Invalid config value"),
    ):
        with pytest.raises(KafkaError, match=message) as e:
            dynamic.validate("1", bad)
        assert e.value.error is error_codes.INVALID_REQUEST
    dynamic.validate(bc.DEFAULT_ENTITY, {"log.retention.ms": "1000"})


def test_unusable_stored_values_are_left_out(tmp_path: Path) -> None:
    store = EmbeddedStore(None)
    store.create(
        layout.broker_config_path("1"),
        layout.topic_config_json(
            {"log.segment.bytes": "lots", "log.dirs": "/x", "log.retention.bytes": "10"}
        ),
    )
    dynamic = bc.DynamicBrokerConfigs(BrokerConfig.from_properties({"broker.id": "1"}), store)
    config = dynamic.reload()
    assert dynamic.per_broker == {"log.retention.bytes": "10"}
    assert config["log.retention.bytes"] == 10 and config["log.segment.bytes"] == 1024**3


def test_synonyms_start_at_the_key_itself_as_kafka_lists_them() -> None:
    layers = bc.Layers(
        per_broker={"log.retention.ms": "7"},
        cluster_default={},
        static={"log.retention.hours": "5"},
    )
    assert [str(s) for s in bc.broker_synonyms("log.retention.ms", layers)] == [
        "DYNAMIC_BROKER_CONFIG:log.retention.ms=7",
        "STATIC_BROKER_CONFIG:log.retention.hours=5",
        "DEFAULT_CONFIG:log.retention.hours=168",
    ]
    hours = bc.broker_synonyms("log.retention.hours", layers)
    assert [str(s) for s in hours] == [
        "STATIC_BROKER_CONFIG:log.retention.hours=5",
        "DEFAULT_CONFIG:log.retention.hours=168",
    ]
    assert bc.source_of(hours) == bc.STATIC_BROKER_CONFIG
    empty = bc.Layers({}, {}, {})
    topic = bc.topic_synonyms("retention.ms", {"retention.ms": "1"}, empty)
    assert [str(s) for s in topic] == ["DYNAMIC_TOPIC_CONFIG:retention.ms=1"]
    policy = bc.topic_synonyms("cleanup.policy", {}, empty)
    assert [str(s) for s in policy] == ["DEFAULT_CONFIG:log.cleanup.policy=delete"]
    assert bc.source_of(bc.topic_synonyms("file.delete.delay.ms", {}, empty)) == bc.DEFAULT_CONFIG
