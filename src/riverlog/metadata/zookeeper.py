"""The metadata store on a real ZooKeeper, through kazoo — the only module importing kazoo.

`ZooKeeperStore("host:port[,host:port][/chroot]")` implements `MetadataStore`: kazoo's
errors become the store's (`NoNodeError`, `NodeExistsError`, `BadVersionError`,
`NotEmptyError`); a missing chroot is created first, as Kafka does. Calls block the calling
thread for one round trip (about a millisecond on loopback); callers on an event loop keep
them off hot paths. Watches are one-shot, like the embedded store's: the callback runs once,
on kazoo's thread, at the next change of the node's data, existence or children — bridge it
into an event loop with `loop.call_soon_threadsafe`.

Errors. kazoo's errors become the store's; a call made while there is no connection fails
at once with `StoreUnavailableError` (kazoo would queue it and block the caller until it
reconnects) — unless the caller set `patience_s` (a broker starting: Kafka's start-up waits
up to `zookeeper.connection.timeout.ms` for the connection): then a call that finds no
connection, or loses it on the way, waits for the connection and is made again, until it has
failed for `patience_s` (a create that reached ZooKeeper before its answer was lost then
finds its own node: callers of non-idempotent writes check for that).

Sessions (field notes): kazoo's default reconnect backoff grows to an hour, so the client
retries every ≤1 s forever. `on_session(state)` hears "suspended" (the connection dropped:
the session may be gone — a controller must stop acting), "connected" and "lost" (the session
expired: its ephemeral nodes, such as `/brokers/ids/N` and `/controller`, are gone).
`close()` ends the session at once, so this process's ephemeral nodes vanish in
milliseconds rather than after the session timeout.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError as KazooBadVersion
from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.exceptions import NodeExistsError as KazooNodeExists
from kazoo.exceptions import NoNodeError as KazooNoNode
from kazoo.exceptions import NotEmptyError as KazooNotEmpty
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import RetryFailedError

from riverlog.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    Node,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SetOp,
    StoreUnavailableError,
    Watcher,
)

T = TypeVar("T")
SessionListener = Callable[[str], None]
READ_PIPELINE = 1000  # reads in flight at once in `get_many`
RETRY_PAUSE_S = 0.05  # between attempts of a patient call (the state may lag a lost connection)
_STATES = {
    KazooState.SUSPENDED: "suspended",
    KazooState.CONNECTED: "connected",
    KazooState.LOST: "lost",
}


@contextmanager
def _translated(path: str, zk: KazooClient | None = None) -> Iterator[None]:
    """kazoo's exceptions as the store's; with `zk`, fail at once while it has no
    connection (kazoo would queue the call and block this thread until it reconnects)."""
    if zk is not None and not zk.connected:
        raise StoreUnavailableError(f"{path}: no connection to ZooKeeper")
    try:
        yield
    except KazooNoNode:
        raise NoNodeError(path) from None
    except KazooNodeExists:
        raise NodeExistsError(path) from None
    except KazooBadVersion:
        raise BadVersionError(path) from None
    except KazooNotEmpty:
        raise NotEmptyError(path) from None
    except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, RetryFailedError) as e:
        raise StoreUnavailableError(f"{path}: {type(e).__name__}") from None


def _node(data: bytes | None, stat: ZnodeStat) -> Node:
    return Node(bytes(data or b""), stat.version, stat.ephemeralOwner != 0, stat.czxid, stat.mzxid)


def split_connect(connect: str) -> tuple[str, str]:
    """`zookeeper.connect` as (hosts, chroot): "a:1,b:2/kafka" → ("a:1,b:2", "/kafka")."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""


class ZooKeeperStore:
    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = 18_000,
        connect_timeout_s: float = 15.0,
        on_session: SessionListener | None = None,
    ) -> None:
        hosts, chroot = split_connect(connect)
        retry = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0}
        if chroot:
            with self._client(hosts, session_timeout_ms, retry) as root:
                try:
                    root.start(timeout=connect_timeout_s)
                except KazooTimeoutError:
                    raise StoreUnavailableError(
                        f"cannot connect to ZooKeeper at {hosts} within {connect_timeout_s:g} s"
                    ) from None
                root.ensure_path(chroot)
        self._zk = KazooClient(
            hosts=hosts + chroot,
            timeout=session_timeout_ms / 1000,
            connection_retry=retry,
            command_retry={"max_tries": 3, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
        )
        self.patience_s = 0.0
        """How long a call keeps retrying while ZooKeeper is unreachable (0: fail at once)."""
        self._connected = threading.Event()
        self._zk.add_listener(self._track)
        if on_session is not None:
            self._zk.add_listener(lambda state: on_session(_STATES[state]))
        try:
            self._zk.start(timeout=connect_timeout_s)
        except KazooTimeoutError:
            self._zk.stop()
            self._zk.close()
            raise StoreUnavailableError(
                f"cannot connect to ZooKeeper at {connect} within {connect_timeout_s:g} s"
            ) from None

    def _track(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()

    def _call(self, path: str, call: Callable[[], T]) -> T:
        """`call()` with kazoo's errors as the store's; retried while ZooKeeper is
        unreachable, for up to `patience_s` of failures."""
        deadline: float | None = None
        while True:
            try:
                with _translated(path, self._zk):
                    return call()
            except StoreUnavailableError:
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + self.patience_s
                if now >= deadline:
                    raise
                time.sleep(RETRY_PAUSE_S)
                self._connected.wait(max(0.0, deadline - time.monotonic()))

    @staticmethod
    @contextmanager
    def _client(
        hosts: str, session_timeout_ms: int, retry: dict[str, float]
    ) -> Iterator[KazooClient]:
        client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000, connection_retry=retry)
        try:
            yield client
        finally:
            client.stop()
            client.close()

    @property
    def session_id(self) -> int:
        """The ZooKeeper session's id (0 before a session exists)."""
        session = self._zk.client_id
        return int(session[0]) if session else 0

    # --- reads -----------------------------------------------------------------------

    def get(self, path: str) -> Node:
        def call() -> Node:
            data, stat = self._zk.get(path)
            return _node(data, stat)

        return self._call(path, call)

    def get_many(self, paths: list[str]) -> dict[str, Node]:
        """The nodes of `paths` that exist: all requests sent before the first answer is
        awaited (one round trip's latency for thousands of partition states)."""
        out: dict[str, Node] = {}
        for start in range(0, len(paths), READ_PIPELINE):
            chunk = paths[start : start + READ_PIPELINE]
            out.update(self._call(chunk[0], functools.partial(self._get_chunk, chunk)))
        return out

    def _get_chunk(self, chunk: list[str]) -> dict[str, Node]:
        out: dict[str, Node] = {}
        pending = [(p, self._zk.get_async(p)) for p in chunk]
        for path, result in pending:
            try:
                data, stat = result.get()
            except KazooNoNode:
                continue
            out[path] = _node(data, stat)
        return out

    def exists(self, path: str) -> bool:
        return self._call(path, lambda: self._zk.exists(path) is not None)

    def children(self, path: str) -> list[str]:
        return self._call(path, lambda: sorted(self._zk.get_children(path)))

    # --- writes ----------------------------------------------------------------------

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> None:
        """Create `path`; missing parents are created as persistent empty nodes."""
        self._call(
            path, lambda: self._zk.create(path, bytes(data), ephemeral=ephemeral, makepath=True)
        )

    def create_sequential(self, prefix: str, data: bytes) -> str:
        """Create a persistent sequential node; its path (ZooKeeper appends the number)."""
        return self._call(
            prefix,
            lambda: str(self._zk.create(prefix, bytes(data), sequence=True, makepath=True)),
        )

    def set(self, path: str, data: bytes, *, expected_version: int = -1) -> int:
        return self._call(
            path, lambda: int(self._zk.set(path, bytes(data), version=expected_version).version)
        )

    def delete(self, path: str, *, expected_version: int = -1, recursive: bool = False) -> None:
        self._call(
            path, lambda: self._zk.delete(path, version=expected_version, recursive=recursive)
        )

    def multi(self, ops: list[Op]) -> None:
        """All or nothing; the error of the first operation that failed is raised."""

        def commit() -> list[object]:
            transaction = self._zk.transaction()
            for op in ops:
                if isinstance(op, CreateOp):
                    transaction.create(op.path, bytes(op.data), ephemeral=op.ephemeral)
                elif isinstance(op, SetOp):
                    transaction.set_data(op.path, bytes(op.data), version=op.expected_version)
                elif isinstance(op, DeleteOp):
                    transaction.delete(op.path, version=op.expected_version)
                elif isinstance(op, CheckOp):
                    transaction.check(op.path, op.expected_version)
            return list(transaction.commit())

        results = self._call(ops[0].path if ops else "/", commit)
        for op, result in zip(ops, results, strict=True):
            if isinstance(result, KazooException) and not isinstance(result, RolledBackError):
                with _translated(op.path):
                    raise result

    def watch(self, path: str, callback: Watcher) -> None:
        """`callback(path)` once, at the next change of the node or its children."""
        fired = threading.Event()

        def once(_event: object) -> None:
            if not fired.is_set():
                fired.set()
                callback(path)

        def arm() -> None:
            stat = self._zk.exists(path, watch=once)
            if stat is not None:
                try:
                    self._zk.get_children(path, watch=once)
                except KazooNoNode:
                    once(None)  # deleted between the two calls: that is the change

        self._call(path, arm)

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()
