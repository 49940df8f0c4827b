"""Broker configuration: Kafka's property names, overrides, validation, topic defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverlog.properties import parse_properties
from riverlog.server.config import BrokerConfig, ConfigError, parse_listener


def test_properties_file_and_overrides(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(
        "# a comment\nbroker.id=3\nlisteners=PLAINTEXT://127.0.0.1:19092\n"
        "log.dirs=/tmp/a,/tmp/b\nnum.partitions: 4\nlog.retention.hours=1\nmy.typo=1\n"
    )
    config = BrokerConfig.load(props, ["num.partitions=6", "log.segment.bytes=1048576"])
    assert config.broker_id == 3
    assert config["num.partitions"] == 6
    assert config.listeners[0].port == 19092
    assert config.data_dir == Path("/tmp/a")
    assert config.unknown == {"my.typo": "1"}
    defaults = config.topic_defaults()
    assert defaults["retention.ms"] == "3600000"
    assert defaults["segment.bytes"] == "1048576"
    assert defaults["cleanup.policy"] == "delete"


def test_retention_precedence() -> None:
    config = BrokerConfig.from_properties(
        {"log.retention.minutes": "2", "log.retention.hours": "5"}
    )
    assert config.topic_defaults()["retention.ms"] == "120000"
    config = BrokerConfig.from_properties({"log.retention.ms": "7", "log.retention.minutes": "2"})
    assert config.topic_defaults()["retention.ms"] == "7"


@pytest.mark.parametrize(
    "props, message",
    [
        ({"num.partitions": "zero"}, "num.partitions: expected an integer"),
        ({"num.partitions": "0"}, "below the minimum 1"),
        ({"auto.create.topics.enable": "yes"}, "expected true or false"),
        ({"replica.fetch.min.bytes": "0"}, "below the minimum 1"),
        ({"replica.fetch.wait.max.ms": "30000"}, "less than replica.lag.time.max.ms"),
    ],
)
def test_bad_values_are_named(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties(props)


def test_listener_forms() -> None:
    assert parse_listener("127.0.0.1:9092").name == "PLAINTEXT"
    assert parse_listener("PLAINTEXT://:9092").host == ""
    with pytest.raises(ConfigError):
        parse_listener("PLAINTEXT://localhost")
    # As java.util.Properties: whitespace ends a key too (the broker then warns of "no").
    assert parse_properties("no separator here") == {"no": "separator here"}


def test_server_properties_are_read_as_java_reads_them(tmp_path: Path) -> None:
    """A JAAS line continued with backslashes, as Kafka's security docs write it."""
    path = tmp_path / "server.properties"
    path.write_text(
        "listeners: SASL_PLAINTEXT://127.0.0.1:0\n"
        "sasl.enabled.mechanisms=PLAIN\n"
        "listener.name.sasl_plaintext.plain.sasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="admin" \\\n'
        '    password="admin-secret" \\\n'
        '    user_admin="admin-secret";\n'
    )
    props = parse_properties(path.read_text())
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:0"
    assert props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret";'
    )
    assert BrokerConfig.load(path, [])["listeners"] == ["SASL_PLAINTEXT://127.0.0.1:0"]


def test_a_replica_selector_riverlog_does_not_implement_is_refused() -> None:
    rack_aware = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    assert BrokerConfig.from_properties({})["replica.selector.class"] is None
    chosen = BrokerConfig.from_properties({"replica.selector.class": rack_aware})
    assert chosen["replica.selector.class"] == rack_aware
    with pytest.raises(ConfigError, match=r"replica\.selector\.class"):
        BrokerConfig.from_properties({"replica.selector.class": "com.example.MySelector"})
