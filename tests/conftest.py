"""Fixtures shared across test packages: one real ZooKeeper per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.zookeeper_server import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper process on a free loopback port; tests isolate themselves by chroot."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()
