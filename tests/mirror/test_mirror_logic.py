"""Pure parts of the mirror: Kafka's offset-sync and checkpoint layouts, offset translation,
replication policies and loop prevention, topic filters, and the MM2 properties file."""

from __future__ import annotations

import pytest

from riverlog.mirror import mm2_config
from riverlog.mirror.policy import ReplicationPolicy, include_pattern, regex_list
from riverlog.mirror.records import (
    Checkpoint,
    OffsetSync,
    OffsetSyncStore,
    decode_source_offset,
    source_offset_key,
    source_offset_value,
)


def test_offset_sync_and_checkpoint_bytes_are_kafkas() -> None:
    sync = OffsetSync("orders", 3, 100, 250)
    assert sync.key() == b"\x00\x06orders\x00\x00\x00\x03"
    assert sync.value() == (100).to_bytes(8, "big") + (250).to_bytes(8, "big")
    assert OffsetSync.decode(sync.key(), sync.value()) == sync
    point = Checkpoint("billing", "a.orders", 1, 30, 31, "")
    assert point.key() == b"\x00\x07billing\x00\x08a.orders\x00\x00\x00\x01"
    assert point.value() == (
        b"\x00\x00" + (30).to_bytes(8, "big") + (31).to_bytes(8, "big") + b"\x00\x00"
    )
    assert Checkpoint.decode(point.key(), point.value()) == point
    with pytest.raises(ValueError):
        Checkpoint.decode(point.key(), b"\x00\x01" + point.value()[2:])  # unknown version
    with pytest.raises(ValueError):
        OffsetSync.decode(b"\x00\x09short", b"")


def test_translation_never_skips_an_unread_record() -> None:
    store = OffsetSyncStore()
    assert store.translate("t", 0, 5) is None  # nothing known yet
    store.add(OffsetSync("t", 0, 0, 0))
    store.add(OffsetSync("t", 0, 10, 10))
    assert store.translate("t", 0, 10) == 10  # exactly a sync
    assert store.translate("t", 0, 15) == 11  # past a sync: just after it (re-reads 11..14)
    # A mirror restart re-sent 5.. (duplicates on the target): the later syncs count.
    store.add(OffsetSync("t", 0, 5, 20))
    assert store.translate("t", 0, 7) == 21
    assert store.translate("t", 0, 3) == 1
    store.add(OffsetSync("t", 0, 6, 20))  # not forward of the last one downstream: ignored
    assert store.translate("t", 0, 6) == 21


def test_policies_name_remote_topics_and_prevent_loops() -> None:
    default = ReplicationPolicy.named("org.apache.kafka.connect.mirror.DefaultReplicationPolicy")
    assert default.remote_topic("a", "orders") == "a.orders"
    assert default.topic_source("b.orders") == "b"
    assert default.is_cycle("b.orders", "b")  # came from b: never back to b
    assert default.is_cycle("c.b.orders", "b")  # b -> c -> a: still b's
    assert not default.is_cycle("c.orders", "b")
    assert not default.is_cycle("orders", "b")
    identity = ReplicationPolicy.named("IdentityReplicationPolicy")
    assert identity.remote_topic("a", "orders") == "orders"
    assert not identity.is_cycle("b.orders", "b")
    with pytest.raises(ValueError, match="not supported"):
        ReplicationPolicy.named("com.example.MyPolicy")


def test_topic_filters() -> None:
    listed = regex_list("orders.*, payments")
    assert listed.fullmatch("orders-eu") and listed.fullmatch("payments")
    assert not listed.fullmatch("payments-old")
    assert not regex_list("").fullmatch("anything")
    include = include_pattern("orders.*, payments")  # MM1: commas are alternatives too
    assert include.fullmatch("orders-x") and include.fullmatch("payments")


def props(**extra: str) -> dict[str, str]:
    return {
        "clusters": "a, b",
        "a.bootstrap.servers": "h:1",
        "b.bootstrap.servers": "h:2",
        "a->b.enabled": "true",
        **extra,
    }


def test_mm2_properties_resolve_flow_then_top_level_then_defaults() -> None:
    flows = mm2_config.parse(
        props(
            **{
                "topics": "x.*",
                "a->b.topics": "orders",
                "emit.checkpoints.interval.seconds": "5",
                "a.consumer.max.poll.records": "100",
                "b.client.id": "mirror",
                "offset.storage.replication.factor": "1",
                "topics.blacklist": "secret.*",
            }
        )
    )
    (flow,) = flows
    assert flow.name == "a->b"
    assert flow.settings["topics"] == "orders"
    assert flow.seconds("emit.checkpoints.interval.seconds") == 5
    assert flow.number("refresh.topics.interval.seconds") == 600
    assert flow.topics("orders") and not flow.topics("x1")
    assert flow.source.consumer_config() == {"bootstrap.servers": "h:1", "max.poll.records": "100"}
    assert flow.target.producer_config() == {"bootstrap.servers": "h:2", "client.id": "mirror"}
    assert flow.settings["topics.exclude"] == "secret.*"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"no.such.setting": "1"}, "no.such.setting"),
        ({"a->c.enabled": "true"}, "a->c"),
        ({"exactly.once.support": "enabled"}, "expected requested or required"),
        ({"exactly.once.support": "required"}, "b.exactly.once.source.support is not enabled"),
        ({"b.exactly.once.source.support": "preparing"}, "expected enabled or disabled"),
        ({"transaction.boundary": "connector"}, "poll or interval"),
        ({"metrics.listener": "127.0.0.1:9404"}, "expected http://HOST:PORT"),
        ({"emit.heartbeats.enabled": "true"}, "emit.heartbeats.enabled"),
        ({"a->b.enabled": "false"}, "no flow is enabled"),
        ({"a->b.emit.checkpoints.interval.seconds": "soon"}, "expected a number"),
        ({"replication.policy.class": "x.Custom"}, "not supported"),
        ({"a.ssl.endpoint.identification.algorithm.x": "y", "a.tls.thing": "1"}, "a.tls.thing"),
        ({"a.bootstrap.servers": ""}, ""),
    ],
)
def test_mm2_properties_fail_closed(extra: dict[str, str], message: str) -> None:
    given = props(**extra)
    if extra.get("a.bootstrap.servers") == "":
        del given["a.bootstrap.servers"]
        message = "a.bootstrap.servers is required"
    with pytest.raises(ValueError, match=message):
        mm2_config.parse(given)


def test_source_offsets_are_connects_json_records() -> None:
    key = source_offset_key("MirrorSourceConnector", {"cluster": "a", "topic": "t", "partition": 2})
    assert key == b'["MirrorSourceConnector",{"cluster":"a","partition":2,"topic":"t"}]'
    assert source_offset_value(41) == b'{"offset":41}'
    assert decode_source_offset(source_offset_value(41)) == 41
    for bad in (b"", b"[]", b'{"offset":"x"}', b'{"offset":-2}'):
        with pytest.raises(ValueError):
            decode_source_offset(bad)


def test_mm2_exactly_once_security_and_metrics_settings() -> None:
    given = props(
        **{
            "b.exactly.once.source.support": "enabled",
            "exactly.once.support": "required",
            "b.security.protocol": "SASL_SSL",
            "b.sasl.mechanism": "SCRAM-SHA-512",
            "b.ssl.truststore.location": "/ca.pem",
            "metrics.listener": "http://127.0.0.1:0",
        }
    )
    (flow,) = mm2_config.parse(given)
    assert flow.exactly_once
    assert flow.offsets_topic == "mm2-offsets.a.internal"
    assert flow.number("offset.storage.partitions") == 25
    assert flow.target.producer_config()["security.protocol"] == "SASL_SSL"
    assert flow.target.admin_config()["ssl.truststore.location"] == "/ca.pem"
    assert "security.protocol" not in flow.source.consumer_config()
    assert mm2_config.metrics_listener(given) == "http://127.0.0.1:0"
    assert flow.transaction_interval_ms == 0  # Kafka Connect's transaction.boundary=poll
    (plain,) = mm2_config.parse(props())
    assert not plain.exactly_once
    interval = {"transaction.boundary": "interval", "offset.flush.interval.ms": "700"}
    assert mm2_config.parse(props(**interval))[0].transaction_interval_ms == 700
    interval["a->b.transaction.boundary.interval.ms"] = "50"
    assert mm2_config.parse(props(**interval))[0].transaction_interval_ms == 50
