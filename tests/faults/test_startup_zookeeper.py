"""Finding 3 of docs/fault-suite.md, deterministically: a broker whose ZooKeeper connection
drops while it starts waits for the connection again, as Kafka's start-up does (up to
`zookeeper.connection.timeout.ms` without one), instead of exiting with
`StoreUnavailableError` — and still gives up, with that error, after that timeout.

The connection is dropped by killing the (real) ZooKeeper at the chosen moment: before the
broker registers, and between its registration and the config-change watch (where the
flaky `test_the_same_scenario_without_unclean_election_loses_nothing` saw a broker exit);
ZooKeeper comes back on the same port and data from another thread while `start` runs."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.devcluster import ZooKeeperServer
from riverlog.metadata import layout
from riverlog.metadata.store import StoreUnavailableError
from riverlog.metadata.zookeeper import ZooKeeperStore
from riverlog.server.broker import Broker
from riverlog.server.config import BrokerConfig

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test alone: it gets killed."""
    server = ZooKeeperServer(tmp_path / "zookeeper").start()
    try:
        yield server
    finally:
        server.stop()


def broker_config(tmp_path: Path, zookeeper: ZooKeeperServer, connection_ms: int) -> BrokerConfig:
    return BrokerConfig.load(
        None,
        [
            "broker.id=1",
            "listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp_path / 'data'}",
            f"zookeeper.connect={zookeeper.connect}/riverlog",
            "zookeeper.session.timeout.ms=6000",
            f"zookeeper.connection.timeout.ms={connection_ms}",
            "controlled.shutdown.enable=false",
        ],
    )


def kill(zookeeper: ZooKeeperServer) -> None:
    assert zookeeper.proc is not None
    zookeeper.proc.kill()
    zookeeper.proc.wait(10)
    zookeeper.proc = None


def restart_soon(zookeeper: ZooKeeperServer) -> threading.Thread:
    """ZooKeeper started again from another thread (`start` blocks the broker's loop)."""
    thread = threading.Thread(target=zookeeper.start, daemon=True)
    thread.start()
    return thread


def registered_and_controller(zookeeper: ZooKeeperServer) -> tuple[bool, int]:
    store = ZooKeeperStore(f"{zookeeper.connect}/riverlog", session_timeout_ms=6000)
    try:
        deadline = time.monotonic() + 30
        while not store.exists(layout.CONTROLLER) and time.monotonic() < deadline:
            time.sleep(0.05)
        controller = json.loads(store.get(layout.CONTROLLER).data)["brokerid"]
        return store.exists(layout.broker_path(1)), int(controller)
    finally:
        store.close()


def test_zookeeper_lost_before_registration(tmp_path: Path, zookeeper: ZooKeeperServer) -> None:
    async def run() -> None:
        broker = Broker(broker_config(tmp_path, zookeeper, 60_000))
        kill(zookeeper)  # the store had its session: now no connection at all
        restarting = restart_soon(zookeeper)
        try:
            await broker.start()
            assert await asyncio.to_thread(registered_and_controller, zookeeper) == (True, 1)
        finally:
            restarting.join(60)  # before the fixture stops it
            await broker.stop()

    asyncio.run(run())


def test_zookeeper_lost_between_registration_and_the_config_change_watch(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    restarting: list[threading.Thread] = []

    async def run() -> None:
        broker = Broker(broker_config(tmp_path, zookeeper, 60_000))
        register = broker.cluster_membership.start

        async def register_then_drop() -> None:
            await register()
            kill(zookeeper)  # next: config_changes.start → watch(/config/changes)
            restarting.append(restart_soon(zookeeper))

        broker.cluster_membership.start = register_then_drop  # type: ignore[method-assign]
        try:
            await broker.start()
            assert restarting, "the drop happened"
            assert await asyncio.to_thread(registered_and_controller, zookeeper) == (True, 1)
        finally:
            for thread in restarting:
                thread.join(60)  # before the fixture stops it
            await broker.stop()

    asyncio.run(run())


def test_start_up_gives_up_after_the_connection_timeout(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    async def run() -> float:
        broker = Broker(broker_config(tmp_path, zookeeper, 1500))
        kill(zookeeper)
        began = time.monotonic()
        try:
            with pytest.raises(StoreUnavailableError):
                await broker.start()
            return time.monotonic() - began
        finally:
            broker.store.close()
            broker.dir_lock.release()

    took = asyncio.run(run())
    assert 1.4 <= took < 10, took
