"""Fixtures shared across test packages: one real ZooKeeper per test session; hypothesis
without per-example deadlines (examples that touch the disk or the loop take what a loaded
machine gives them: a deadline there measures the machine, not the code)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.zookeeper_server import ZooKeeperServer

settings.register_profile("riverlog", deadline=None)
settings.load_profile("riverlog")


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper process on a free loopback port; tests isolate themselves by chroot."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()
