"""`riverlog configs`' own parsing and printing, as kafka-configs.sh does them."""

from __future__ import annotations

import argparse

import pytest

from riverlog.cli import configs
from riverlog.protocol.messages import DescribeConfigsResponse as R


def test_add_config_lists_in_brackets() -> None:
    assert configs.parse_add_config("a=1,b=[x,y],c = 2,d=") == {
        "a": "1",
        "b": "x,y",
        "c": "2",
        "d": "",
    }
    with pytest.raises(configs.CommandError, match='format "key=val"'):
        configs.parse_add_config("a=1,b")
    assert configs.parse_delete_config(" a, b ,") == ["a", "b"]


def test_entry_line() -> None:
    entry = R.DescribeConfigsResourceResult(
        name="retention.ms",
        value="1000",
        synonyms=[R.DescribeConfigsSynonym(name="retention.ms", value="1000", source=1)],
    )
    assert configs.entry_line(entry) == (
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--describe"], "--entity-type must be specified"),
        (
            ["--entity-type", "topics", "--entity-default", "--describe"],
            "only valid for brokers, users and clients",
        ),
        (
            ["--entity-type", "brokers", "--entity-name", "x", "--describe"],
            "valid integer broker id",
        ),
        (["--topic", "t"], "exactly one action"),
        (["--topic", "t", "--alter"], "At least one of --add-config or --delete-config"),
        (["--entity-type", "topics", "--alter", "--add-config", "a=1"], "entity name"),
        (["--topic", "t", "--describe", "--add-config", "a=1"], "only valid with --alter"),
    ],
)
def test_flags_checked_before_connecting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    configs.add_arguments(parser)
    args = parser.parse_args(["--bootstrap-server", "127.0.0.1:1", *argv])
    assert configs.run(args) == 1
    assert message in capsys.readouterr().err
