"""`riverlog server`'s state-change log file: rolled hourly under Kafka's names, old rolled
files deleted past `HOURS_KEPT`, and the merger reads the rolled files with the live one."""

from __future__ import annotations

import argparse
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.cli import state_change_log_merger as merger
from riverlog.cli.server import _log_state_changes
from riverlog.server import state_change_log

ROLLED = re.compile(r"^state-change\.log\.\d{4}-\d{2}-\d{2}-\d{2}$")


@pytest.fixture
def handler(tmp_path: Path) -> Iterator[logging.handlers.TimedRotatingFileHandler]:
    made = _log_state_changes(tmp_path)
    assert isinstance(made, logging.handlers.TimedRotatingFileHandler)
    try:
        yield made
    finally:  # the logger is the process's: leave it as the other tests expect it
        logger = state_change_log.logger
        logger.removeHandler(made)
        made.close()
        logger.setLevel(logging.NOTSET)
        logger.propagate = True


def test_rolled_hourly_to_kafkas_names_and_merged_with_the_live_file(
    tmp_path: Path,
    handler: logging.handlers.TimedRotatingFileHandler,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state_change_log.logger.log(state_change_log.TRACE, "[Broker id=1] first for partition t-0")
    handler.rolloverAt = int(time.time())  # the hour is over
    time.sleep(0.002)  # the lines' times differ (the merger orders by them)
    state_change_log.logger.log(state_change_log.TRACE, "[Broker id=1] second for partition t-0")
    rolled = [p.name for p in tmp_path.iterdir() if ROLLED.match(p.name)]
    assert len(rolled) == 1
    assert "first" in (tmp_path / rolled[0]).read_text()
    assert "first" not in (tmp_path / state_change_log.FILE_NAME).read_text()

    parser = argparse.ArgumentParser()
    merger.add_arguments(parser)
    args = ["--logs-regex", f"{tmp_path}/state-change\\.log", "--topic", "t", "--partitions", "0"]
    assert merger.run(parser.parse_args(args)) == 0
    merged = capsys.readouterr().out.splitlines()
    assert [line.split()[5] for line in merged] == ["first", "second"]


def test_rolled_files_past_the_hours_kept_are_deleted(
    tmp_path: Path, handler: logging.handlers.TimedRotatingFileHandler
) -> None:
    old = [
        tmp_path / f"state-change.log.2025-01-{1 + h // 24:02d}-{h % 24:02d}"
        for h in range(state_change_log.HOURS_KEPT + 2)
    ]
    for path in old:
        path.write_text("")
    (tmp_path / "state-change.log.keep-me").write_text("")  # not a rolled file's name
    handler.rolloverAt = int(time.time())
    state_change_log.logger.log(state_change_log.TRACE, "[Broker id=1] roll for partition t-0")
    left = sorted(p.name for p in tmp_path.iterdir() if ROLLED.match(p.name))
    assert len(left) == state_change_log.HOURS_KEPT
    assert not old[0].exists() and not old[1].exists() and not old[2].exists()
    assert old[3].exists()
    assert (tmp_path / "state-change.log.keep-me").exists()
