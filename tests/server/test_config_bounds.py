"""Fail-closed configuration: settings riverlog cannot honour stop start-up, unknown keys are
named in Kafka's words, and the connection limits parse."""

from __future__ import annotations

import re

import pytest

from riverlog.server.config import (
    UNSUPPORTED_SECURITY_PROTOCOLS,
    BrokerConfig,
    ConfigError,
    UnsupportedConfigError,
)


@pytest.mark.parametrize("protocol", sorted(UNSUPPORTED_SECURITY_PROTOCOLS))
def test_security_listeners_are_refused(protocol: str) -> None:
    with pytest.raises(UnsupportedConfigError, match="not supported yet; refusing to start"):
        BrokerConfig.from_properties({"listeners": f"{protocol}://127.0.0.1:9093"})
    with pytest.raises(UnsupportedConfigError):
        BrokerConfig.from_properties({"advertised.listeners": f"{protocol}://h:9093"})


@pytest.mark.parametrize(
    "key",
    ["ssl.keystore.location", "sasl.enabled.mechanisms", "authorizer.class.name",
     "listener.name.internal.ssl.keystore.location", "security.inter.broker.protocol"],
)  # fmt: skip
def test_security_settings_are_refused(key: str) -> None:
    with pytest.raises(UnsupportedConfigError, match=re.escape(key)):
        BrokerConfig.from_properties({key: "x"})


def test_a_named_listener_without_a_protocol_map_is_refused() -> None:
    with pytest.raises(UnsupportedConfigError, match="only PLAINTEXT listeners"):
        BrokerConfig.from_properties({"listeners": "INTERNAL://127.0.0.1:9093"})


def test_unknown_keys_are_reported_in_kafkas_words() -> None:
    config = BrokerConfig.from_properties({"log.retention.hour": "1", "num.partitions": "3"})
    assert config.unknown_key_warnings() == [
        "The configuration 'log.retention.hour' was supplied but isn't a known config."
    ]


def test_connection_limits_parse() -> None:
    config = BrokerConfig.from_properties(
        {"max.connections.per.ip": "10",
         "max.connections.per.ip.overrides": "127.0.0.1:200, [::1]:0,hostA:5"}
    )  # fmt: skip
    assert config["max.connections.per.ip"] == 10
    assert config.connection_overrides() == {"127.0.0.1": 200, "::1": 0, "hostA": 5}
    assert config["queued.max.request.bytes"] == -1  # Kafka's default: unbounded
    for bad in ("127.0.0.1", "127.0.0.1:-1", ":3", "h:x"):
        with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
            BrokerConfig.from_properties({"max.connections.per.ip.overrides": bad})
