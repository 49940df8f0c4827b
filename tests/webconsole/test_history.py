"""The console's in-memory history (pure): lag per group and topic over time, throughput
from offsets and sizes, pruning to the kept window; the console's client config; how the
message browser renders bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverlog.cli.web_console import client_config
from riverlog.webconsole.history import History, Sample
from riverlog.webconsole.pages_messages import render_bytes


def sample(at_ms: int, end: int, size: int, committed: int) -> Sample:
    tps = [("t", 0), ("t", 1)]
    return Sample(
        at_ms,
        end_offsets=dict.fromkeys(tps, end),
        start_offsets=dict.fromkeys(tps, 0),
        sizes=dict.fromkeys(tps, size),
        committed={"g": dict.fromkeys(tps, committed)},
    )


def test_lag_series_and_rates_follow_the_samples() -> None:
    history = History(keep_ms=60_000)
    history.add(sample(1_000, end=100, size=10_000, committed=40))
    history.add(sample(3_000, end=150, size=15_000, committed=100))
    times, series = history.lag_series("g")
    assert times == [1.0, 3.0]
    assert series == {"t": [120, 100]}  # 2 x (100 - 40), 2 x (150 - 100)
    rates = history.rates("t")
    assert rates.at_s == [3.0]
    assert rates.messages_in == [50.0]  # 2 x 50 records over 2 s
    assert rates.bytes_in == [5_000.0]  # 2 x 5,000 bytes over 2 s
    assert rates.messages_out == [60.0]  # 2 x 60 committed over 2 s
    assert rates.bytes_out == [6_000.0]  # at the mean record size of 100 bytes


def test_old_points_are_dropped_and_time_goes_forward() -> None:
    history = History(keep_ms=5_000)
    for at in range(0, 20_000, 1_000):
        history.add(sample(at, end=at, size=at, committed=0))
    times, _ = history.lag_series("g")
    assert times[0] == 14.0 and times[-1] == 19.0
    with pytest.raises(ValueError):
        history.add(sample(19_000, end=0, size=0, committed=0))


def test_client_config_fails_closed(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# console\nrequest.timeout.ms=5000\nsecurity.protocol=PLAINTEXT\n")
    assert client_config("h:9092", str(props))["request.timeout.ms"] == "5000"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n")
    with pytest.raises(ValueError, match=r"sasl\.username and sasl\.password"):
        client_config("h:9092", str(props))
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    with pytest.raises(ValueError, match="GSSAPI is not supported"):
        client_config("h:9092", str(props))
    props.write_text("no.such.key=1\n")
    with pytest.raises(ValueError, match=r"no\.such\.key"):
        client_config("h:9092", str(props))


def test_value_rendering() -> None:
    assert render_bytes(None, "auto") == ("null", "null")
    assert render_bytes(b'{"a":1}', "auto") == ("json", '{\n  "a": 1\n}')
    assert render_bytes(b"hello\tworld", "auto") == ("text", "hello\tworld")
    assert render_bytes(b"\x00\xff", "auto") == ("hex", "00 ff")
    assert render_bytes(b"\x00\xff", "json") == ("hex", "00 ff")
    assert render_bytes(b"\xff ok", "text") == ("text", "\ufffd ok")
    assert render_bytes(b"{}", "hex") == ("hex", "7b 7d")
