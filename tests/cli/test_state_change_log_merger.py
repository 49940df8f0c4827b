"""The state-change log merger's pure parts: time order across files, the topic, partition
and time filters, and its arguments."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.cli import state_change_log_merger as merger

BROKER_1 = [
    "[2026-11-23 10:00:00,100] TRACE [Controller id=1 epoch=3] Changed partition t-0 from "
    "NewPartition to OnlinePartition with state LeaderAndIsr(leader=1, ...) (state.change.logger)",
    "[2026-11-23 10:00:00,300] TRACE [Controller id=1 epoch=3] Sending become-follower "
    "LeaderAndIsr request ... to broker 2 for partition t-1 (state.change.logger)",
    "java.lang.IllegalStateException: a continuation line without a date",
    "[2026-11-23 10:00:02,000] TRACE [Controller id=1 epoch=3] Changed partition t-10 from "
    "OnlinePartition to OfflinePartition with state ... (state.change.logger)",
]
BROKER_2 = [
    "[2026-11-23 10:00:00,200] TRACE [Broker id=2] Received LeaderAndIsr request ... for "
    "partition t-0 (state.change.logger)",
    "[2026-11-23 10:00:00,300] TRACE [Broker id=2] Handled LeaderAndIsr request ... for "
    "partition t-1: became follower (state.change.logger)",
    "[2026-11-23 10:00:01,000] TRACE [Broker id=2] Cached leader info ... for partition "
    "t-other-0 in response to ... (state.change.logger)",
    "[2026-11-23 10:00:01,500] TRACE [Broker id=2] Handling request for [t,1] (old format)",
]


def stamps(lines: Iterator[str]) -> list[str]:
    return [line[1:24] for line in lines]


def test_merges_every_dated_line_in_time_order_files_in_order_on_ties() -> None:
    merged = list(merger.merge([BROKER_1, BROKER_2]))
    assert stamps(iter(merged)) == sorted(stamps(iter(merged)))
    assert len(merged) == 7  # the undated continuation line is skipped, as Kafka's tool does
    ties = [line for line in merged if "10:00:00,300" in line]
    assert "Controller id=1" in ties[0] and "Broker id=2" in ties[1]


def test_topic_filter_does_not_take_other_topics_sharing_a_prefix() -> None:
    merged = list(merger.merge([BROKER_1, BROKER_2], topic="t"))
    assert not any("t-other-0" in line for line in merged)
    assert len(merged) == 6
    other = list(merger.merge([BROKER_1, BROKER_2], topic="t-other"))
    assert len(other) == 1 and "t-other-0" in other[0]


def test_partition_filter_takes_whole_numbers_and_kafkas_old_format() -> None:
    ones = list(merger.merge([BROKER_1, BROKER_2], topic="t", partitions=[1]))
    assert [line[:25] for line in ones] == [
        "[2026-11-23 10:00:00,300]",
        "[2026-11-23 10:00:00,300]",
        "[2026-11-23 10:00:01,500]",
    ]
    tens = list(merger.merge([BROKER_1, BROKER_2], topic="t", partitions=[10]))
    assert len(tens) == 1 and "t-10 from" in tens[0]


def test_time_range_is_inclusive() -> None:
    merged = list(
        merger.merge(
            [BROKER_1, BROKER_2], start="2026-11-23 10:00:00,300", end="2026-11-23 10:00:01,000"
        )
    )
    assert stamps(iter(merged)) == [
        "2026-11-23 10:00:00,300",
        "2026-11-23 10:00:00,300",
        "2026-11-23 10:00:01,000",
    ]


def test_partition_pattern_edges() -> None:
    pattern = merger.partition_pattern("a.b")
    assert merger.matches("partition a.b-3.", pattern, [3])  # a sentence's full stop
    assert not merger.matches("partition a.b-3.x-1", pattern, [3])
    assert not merger.matches("partition aXb-3", pattern, None)  # the dot is literal
    assert not merger.matches("partition xa.b-3", pattern, None)
    assert merger.matches("partition a.b-3", pattern, [])


def test_merge_streams_without_reading_whole_files() -> None:
    read = []

    def lazy(name: str, count: int) -> Iterator[str]:
        for i in range(count):
            read.append(name)
            yield f"[2026-11-23 10:00:{i:02d},000] TRACE {name} partition t-0"

    merged = merger.merge([lazy("a", 50), lazy("b", 50)])
    first = [next(merged) for _ in range(4)]
    assert [line.split()[3] for line in first] == ["a", "b", "a", "b"]
    assert len(read) <= 6


def test_arguments_checked_as_kafkas_tool_checks_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "state-change.log"
    log.write_text("\n".join(BROKER_1) + "\n")
    parser = argparse.ArgumentParser()
    merger.add_arguments(parser)

    def run(*argv: str) -> tuple[int, str, str]:
        code = merger.run(parser.parse_args(list(argv)))
        out, err = capsys.readouterr()
        return code, out, err

    code, _, err = run()
    assert code == 1 and "exactly one of" in err
    code, _, err = run("--logs", str(log), "--partitions", "0")
    assert code == 1 and '"--topic" needs to be provided' in err
    code, _, err = run("--logs", str(log), "--topic", "t", "--partitions", "0,1,0")
    assert code == 1 and "repeated entries: 0" in err
    code, _, err = run("--logs", str(log), "--start-time", "2026-11-23 10:00")
    assert code == 1 and "YYYY-MM-DD HH:MM:SS,mmm" in err
    code, _, err = run("--logs", str(tmp_path / "missing.log"))
    assert code == 1 and "no such file" in err
    code, out, _ = run(
        "--logs-regex",
        f"{tmp_path}/state-change\\.log$",
        "--topic",
        "t",
        "--partitions",
        "0",
        "--end-time",
        '"2026-11-23 10:00:01,000"',
    )
    assert code == 0 and out.splitlines() == [BROKER_1[0]]
