"""Dynamic log levels on a real broker: kafka-python's admin client describes and alters
BROKER_LOGGER resources (DescribeConfigs / IncrementalAlterConfigs), `riverlog configs
--entity-type broker-loggers` does the same, and the broker's Python loggers follow. The
embedded broker runs in this process, so its loggers are this process's."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
from collections.abc import Iterator

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from riverlog.cli import configs
from riverlog.client import admin_requests as admin
from riverlog.client.connection import connect_any
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.server import broker_loggers

NETWORK = "riverlog.server.network"


@pytest.fixture
def running() -> Iterator[EmbeddedBroker]:
    saved = {n: logging.getLogger(n).level for n in ("", NETWORK, "riverlog")}
    with broker() as b:
        yield b
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def _describe(admin: KafkaAdminClient, name: str = "0") -> dict[str, str]:
    resource = ConfigResource(ConfigResourceType.BROKER_LOGGER, name)
    found = admin.describe_configs([resource], config_filter="all")["broker_logger"][name]
    assert {e["config_source"] for e in found.values()} == {"DYNAMIC_BROKER_LOGGER_CONFIG"}
    return {logger: e["value"] for logger, e in found.items()}


def _alter(admin: KafkaAdminClient, changes: dict[str, object], name: str = "0") -> int:
    resource = ConfigResource(ConfigResourceType.BROKER_LOGGER, name, changes)
    result = admin.alter_configs([resource], raise_on_unknown=False, incremental=True)
    outcome = str(result["broker_logger"][name])  # "OK" or "[Error N] Name: message"
    code = re.match(r"\[Error (\d+)\]", outcome)
    assert outcome == "OK" or code is not None, outcome
    return int(code.group(1)) if code else 0


def test_levels_are_described_and_changed_through_the_protocol(running: EmbeddedBroker) -> None:
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger(NETWORK).setLevel(logging.NOTSET)
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers)
    try:
        levels = _describe(admin)
        assert levels["root"] == "INFO"
        assert levels[NETWORK] == "INFO"  # inherited: the effective level, as log4j reports
        assert set(levels) >= {"root", "riverlog", NETWORK, "state.change.logger"}

        assert _alter(admin, {NETWORK: "DEBUG"}) == 0
        assert logging.getLogger(NETWORK).getEffectiveLevel() == logging.DEBUG
        assert _describe(admin)[NETWORK] == "DEBUG"
        assert _alter(admin, {"root": "WARN"}) == 0
        assert logging.getLogger().level == logging.WARNING
        assert _describe(admin)["riverlog"] == "WARN"

        assert _alter(admin, {NETWORK: ("DELETE", None)}) == 0  # inherits the root's again
        assert logging.getLogger(NETWORK).level == logging.NOTSET
        assert _describe(admin)[NETWORK] == "WARN"

        invalid_config, invalid_request = error_codes.INVALID_CONFIG.code, 42
        assert _alter(admin, {NETWORK: "LOUD"}) == invalid_config
        assert _alter(admin, {"no.such.logger": "DEBUG"}) == invalid_config
        assert _alter(admin, {"root": ("DELETE", None)}) == invalid_request
        assert _alter(admin, {NETWORK: ("APPEND", "DEBUG")}) == invalid_request
        # a refused request changed nothing
        assert _describe(admin)[NETWORK] == "WARN"
    finally:
        admin.close()
    with pytest.raises(KafkaError, match="Unexpected broker id") as raised:
        asyncio.run(_other_broker(running.bootstrap_servers))
    assert raised.value.error is error_codes.INVALID_REQUEST


async def _other_broker(bootstrap: str) -> None:
    """Another broker's loggers, asked of this one (kafka-python would route to broker 7)."""
    conn = await connect_any(bootstrap)
    try:
        await admin.describe_configs(conn, admin.BROKER_LOGGER_RESOURCE, "7")
    finally:
        await conn.close()


def _configs(bootstrap: str, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    configs.add_arguments(parser)
    return configs.run(parser.parse_args(["--bootstrap-server", bootstrap, *argv]))


def test_configs_tool_for_broker_loggers(
    running: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    logging.getLogger().setLevel(logging.INFO)
    entity = ["--entity-type", "broker-loggers", "--entity-name", "0"]
    assert (
        _configs(running.bootstrap_servers, *entity, "--alter", "--add-config", f"{NETWORK}=TRACE")
        == 0
    )
    assert capsys.readouterr().out == "Completed updating config for broker-logger 0.\n"
    assert logging.getLogger(NETWORK).level == broker_loggers.LEVELS["TRACE"]

    assert _configs(running.bootstrap_servers, *entity, "--describe") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Dynamic configs for broker-logger 0 are:"
    assert "  root=INFO sensitive=false synonyms={}" in out
    assert f"  {NETWORK}=TRACE sensitive=false synonyms={{}}" in out

    assert (
        _configs(
            running.bootstrap_servers, *entity, "--alter", "--add-config", "kafka.nothing=DEBUG"
        )
        == 1
    )
    assert "Invalid broker logger(s): kafka.nothing" in capsys.readouterr().err
    assert _configs(running.bootstrap_servers, *entity, "--alter", "--delete-config", NETWORK) == 0
    assert logging.getLogger(NETWORK).level == logging.NOTSET


@pytest.mark.parametrize(
    ("level", "name"),
    [
        (5, "TRACE"),
        (10, "DEBUG"),
        (25, "INFO"),
        (30, "WARN"),
        (50, "FATAL"),
        (60, "OFF"),
        (1, "ALL"),
    ],
)
def test_level_names(level: int, name: str) -> None:
    assert broker_loggers.level_name(level) == name
    assert broker_loggers.parse_level("warning") == logging.WARNING
