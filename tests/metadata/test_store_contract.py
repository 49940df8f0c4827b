"""One contract, two stores: the embedded store and a real ZooKeeper behave the same for
everything the broker and controller use (versions, ephemerals, children, recursive delete,
atomic multi-ops, one-shot watches); plus what only ZooKeeper has (chroot, sessions)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    EmbeddedStore,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SetOp,
)
from riverlog.metadata.zookeeper import ZooKeeperStore, split_connect
from tests.zookeeper_server import ZooKeeperServer


@pytest.fixture(params=["embedded", "zookeeper"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetadataStore]:
    if request.param == "embedded":
        opened: MetadataStore = EmbeddedStore(tmp_path / "meta.json")
    else:
        server: ZooKeeperServer = request.getfixturevalue("zookeeper")
        opened = ZooKeeperStore(f"{server.connect}/t-{uuid.uuid4().hex[:8]}")
    try:
        yield opened
    finally:
        opened.close()


def test_versions_and_conditional_writes(store: MetadataStore) -> None:
    store.create("/brokers/topics/t", b"a")
    assert store.exists("/brokers/topics")
    node = store.get("/brokers/topics/t")
    assert (node.data, node.version, node.ephemeral) == (b"a", 0, False)
    assert store.set("/brokers/topics/t", b"b", expected_version=0) == 1
    with pytest.raises(BadVersionError):
        store.set("/brokers/topics/t", b"c", expected_version=0)
    with pytest.raises(NodeExistsError):
        store.create("/brokers/topics/t", b"")
    with pytest.raises(NoNodeError):
        store.get("/nope")
    with pytest.raises(NoNodeError):
        store.set("/nope", b"")
    assert store.children("/brokers/topics") == ["t"]
    with pytest.raises(NoNodeError):
        store.children("/nope")


def test_get_many_reads_the_nodes_that_exist(store: MetadataStore) -> None:
    paths = [f"/states/{i}" for i in range(1500)]  # more than one pipelined round
    for i, path in enumerate(paths[:1200]):
        store.create(path, str(i).encode())
    store.set(paths[7], b"seven")
    found = store.get_many([*paths, "/elsewhere"])
    assert sorted(found) == sorted(paths[:1200])
    assert (found[paths[7]].data, found[paths[7]].version) == (b"seven", 1)
    assert found[paths[1199]].data == b"1199"
    assert store.get_many([]) == {}


def test_ephemeral_nodes_and_deletes(store: MetadataStore) -> None:
    store.create("/brokers/ids/1", b"me", ephemeral=True)
    assert store.get("/brokers/ids/1").ephemeral
    store.create("/a/b/c", b"")
    with pytest.raises(NotEmptyError):
        store.delete("/a")
    with pytest.raises(BadVersionError):
        store.delete("/a/b/c", expected_version=5)
    store.delete("/a", recursive=True)
    assert not store.exists("/a/b/c") and not store.exists("/a")


def test_multi_applies_all_or_nothing(store: MetadataStore) -> None:
    store.create("/state/p0", b"v0")
    store.create("/state/p1", b"v0")
    store.multi(
        [
            SetOp("/state/p0", b"v1", expected_version=0),
            SetOp("/state/p1", b"v1", expected_version=0),
            CreateOp("/state/p2", b"new"),
            CheckOp("/state", 0),
        ]
    )
    assert [store.get(f"/state/p{i}").data for i in range(3)] == [b"v1", b"v1", b"new"]
    with pytest.raises(BadVersionError):
        store.multi(
            [
                SetOp("/state/p0", b"v2", expected_version=1),
                DeleteOp("/state/p2"),
                SetOp("/state/p1", b"v2", expected_version=0),  # stale: all roll back
            ]
        )
    assert store.get("/state/p0").data == b"v1" and store.exists("/state/p2")
    with pytest.raises(NodeExistsError):
        store.multi([CreateOp("/state/p3", b""), CreateOp("/state/p2", b"")])
    assert not store.exists("/state/p3")
    with pytest.raises(NoNodeError):
        store.multi([CreateOp("/missing/parent/x", b"")])


def test_watches_fire_once_for_data_children_and_creation(store: MetadataStore) -> None:
    fired = threading.Semaphore(0)
    seen: list[str] = []

    def record(path: str) -> None:
        seen.append(path)
        fired.release()

    store.create("/w", b"")
    store.watch("/w", record)
    store.set("/w", b"1")
    assert fired.acquire(timeout=5)
    store.set("/w", b"2")  # one-shot: no second call
    store.watch("/w", record)
    store.create("/w/child", b"")
    assert fired.acquire(timeout=5)
    store.watch("/later", record)
    store.create("/later", b"")
    assert fired.acquire(timeout=5)
    assert not fired.acquire(timeout=0.3)
    assert seen == ["/w", "/w", "/later"]


def test_chroot_and_ephemerals_of_a_closed_session(zookeeper: ZooKeeperServer) -> None:
    assert split_connect("a:1,b:2/kafka/prod") == ("a:1,b:2", "/kafka/prod")
    assert split_connect("a:1") == ("a:1", "")
    chroot = f"/c-{uuid.uuid4().hex[:8]}"
    inside = ZooKeeperStore(zookeeper.connect + chroot)
    root = ZooKeeperStore(zookeeper.connect)
    try:
        inside.create("/brokers/ids/7", b"x", ephemeral=True)
        assert root.exists(f"{chroot}/brokers/ids/7")
        sessions: list[str] = []
        watcher = ZooKeeperStore(zookeeper.connect, on_session=sessions.append)
        gone = threading.Event()
        watcher.watch(f"{chroot}/brokers/ids/7", lambda _path: gone.set())
        inside.close()  # a clean close ends the session: the ephemeral goes at once
        assert gone.wait(5)
        assert not root.exists(f"{chroot}/brokers/ids/7")
        assert root.exists(f"{chroot}/brokers/ids")
        watcher.close()
        assert "connected" in sessions
    finally:
        root.close()


def test_sequential_nodes_number_upwards(store: MetadataStore) -> None:
    first = store.create_sequential("/config/changes/config_change_", b"a")
    second = store.create_sequential("/config/changes/config_change_", b"b")
    assert first.startswith("/config/changes/config_change_") and len(first) == len(second)
    assert int(second[-10:]) > int(first[-10:])
    store.delete(second)
    third = store.create_sequential("/config/changes/config_change_", b"c")
    assert int(third[-10:]) > int(second[-10:])  # a number is never reused
    assert store.get(third).data == b"c"
    assert store.children("/config/changes") == [first.rsplit("/", 1)[1], third.rsplit("/", 1)[1]]
