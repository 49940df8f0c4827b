"""A pytest fixture for users' test suites: `riverlog_broker`, an embedded broker per test.

Enabled automatically when riverlog is installed (a `pytest11` entry point):

    def test_my_pipeline(riverlog_broker):
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": riverlog_broker.bootstrap_servers})

The broker listens on a free 127.0.0.1 port, keeps its data in the test's `tmp_path`, and is
stopped when the test ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from riverlog.embedded import EmbeddedBroker


@pytest.fixture
def riverlog_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    # imported here, not at module level: the fault suite's helper processes
    # (`python -m riverlog.testing.crashfs`) import this package and need no broker
    from riverlog.embedded import broker

    with broker(tmp_path / "riverlog-data") as running:
        yield running
