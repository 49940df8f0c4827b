"""Configuration: unknown keys are named in Kafka's words (security settings are known: the
security tests cover what they refuse), and the connection limits parse."""

from __future__ import annotations

import pytest

from riverlog.server.config import BrokerConfig, ConfigError


def test_unknown_keys_are_reported_in_kafkas_words() -> None:
    config = BrokerConfig.from_properties(
        {
            "log.retention.hour": "1",
            "num.partitions": "3",
            # read by riverlog.security (which refuses what it cannot honour): known
            "ssl.keystore.location": "/k.pem",
            "listener.name.internal.ssl.keystore.location": "/k.pem",
            "listener.security.protocol.map": "INTERNAL:SSL",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        }
    )
    assert config.unknown_key_warnings() == [
        "The configuration 'log.retention.hour' was supplied but isn't a known config."
    ]


def test_connection_limits_parse() -> None:
    config = BrokerConfig.from_properties(
        {
            "max.connections.per.ip": "10",
            "max.connections.per.ip.overrides": "127.0.0.1:200, [::1]:0,hostA:5",
        }
    )
    assert config["max.connections.per.ip"] == 10
    assert config.connection_overrides() == {"127.0.0.1": 200, "::1": 0, "hostA": 5}
    assert config["queued.max.request.bytes"] == -1  # Kafka's default: unbounded
    for bad in ("127.0.0.1", "127.0.0.1:-1", ":3", "h:x"):
        with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
            BrokerConfig.from_properties({"max.connections.per.ip.overrides": bad})
