"""The cluster metadata store: a small ZooKeeper-shaped interface, and its embedded version.

Cluster metadata lives in a tree of nodes with the layout of the design docs
(`/brokers/ids/N`, `/brokers/topics/T`, `/brokers/topics/T/partitions/P/state`,
`/config/topics/T`, `/controller`, ...). Each node holds bytes (JSON by convention) and a
version that every `set` increments; writes can be conditioned on the version, which is how
stale controllers and concurrent admins are fenced. Ephemeral nodes vanish with the session
that created them. Watches call back once per change, from the store's thread.

`EmbeddedStore` is the single-node implementation: the tree lives in memory and is persisted
(persistent nodes only) to one JSON file in the broker's data dir after every change, written
atomically (temp file, fsync, rename), so topics survive restarts. `metadata/zookeeper.py`
implements the same interface on a real ZooKeeper (the only module importing kazoo); the
broker and controller talk to this interface only. `multi` applies several writes
atomically, all or none, as the controller's batched state changes need.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class NoNodeError(KeyError):
    """The node does not exist."""


class NodeExistsError(ValueError):
    """The node already exists."""


class BadVersionError(ValueError):
    """The node's version is not the expected one: someone else wrote it first."""


class NotEmptyError(ValueError):
    """The node has children (delete it recursively)."""


class StoreUnavailableError(ConnectionError):
    """The store cannot be reached right now (ZooKeeper down or the session being
    re-established): nothing was done; try again later."""


@dataclass(frozen=True, slots=True)
class Node:
    data: bytes
    version: int
    ephemeral: bool = False
    czxid: int = 0
    """The id of the transaction that created the node (ZooKeeper's czxid): a broker's
    `/brokers/ids/N` czxid is its broker epoch (KIP-380). Rises with every creation."""
    mzxid: int = 0
    """The id of the transaction that last wrote the node (ZooKeeper's mzxid; its czxid
    until it is set). czxid and mzxid come from one sequence: a node written after a
    registration was created has an mzxid above that registration's czxid. 0: unknown."""


Watcher = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class CreateOp:
    path: str
    data: bytes
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class SetOp:
    path: str
    data: bytes
    expected_version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    expected_version: int = -1


@dataclass(frozen=True, slots=True)
class CheckOp:
    """Only a condition: the node has this version (ZooKeeper's `check`)."""

    path: str
    expected_version: int


Op = CreateOp | SetOp | DeleteOp | CheckOp


class MetadataStore(Protocol):
    """What the broker and controller need from ZooKeeper (or its embedded stand-in)."""

    def get(self, path: str) -> Node: ...
    def get_many(self, paths: list[str]) -> dict[str, Node]: ...
    def exists(self, path: str) -> bool: ...
    def children(self, path: str) -> list[str]: ...
    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> None: ...
    def create_sequential(self, prefix: str, data: bytes) -> str: ...
    def set(self, path: str, data: bytes, *, expected_version: int = -1) -> int: ...
    def delete(self, path: str, *, expected_version: int = -1, recursive: bool = False) -> None: ...
    def multi(self, ops: list[Op]) -> None: ...
    def watch(self, path: str, callback: Watcher) -> None: ...
    def close(self) -> None: ...


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _check_version(path: str, node: Node, expected_version: int) -> None:
    if expected_version != -1 and node.version != expected_version:
        raise BadVersionError(f"{path}: version {node.version}, expected {expected_version}")


def _check_path(path: str) -> None:
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise ValueError(f"invalid node path {path!r}")


class EmbeddedStore:
    """In-process metadata tree persisted to `<file>`; thread-safe (one lock)."""

    def __init__(self, file: Path | None) -> None:
        self._file = file
        self._lock = threading.RLock()
        self._nodes: dict[str, Node] = {"/": Node(b"", 0)}
        self._watches: dict[str, list[Watcher]] = {}
        self._sequences: dict[str, int] = {}  # parent → next sequence number
        self._zxid = time.time_ns() // 1000
        """Creation ids: from the clock, so they rise across restarts of the process."""
        if file is not None and file.exists():
            self._load(file)

    # --- reads -----------------------------------------------------------------------

    def get(self, path: str) -> Node:
        with self._lock:
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            return node

    def get_many(self, paths: list[str]) -> dict[str, Node]:
        """The nodes of `paths` that exist."""
        with self._lock:
            return {p: self._nodes[p] for p in paths if p in self._nodes}

    def exists(self, path: str) -> bool:
        with self._lock:
            return path in self._nodes

    def children(self, path: str) -> list[str]:
        with self._lock:
            if path not in self._nodes:
                raise NoNodeError(path)
            prefix = path.rstrip("/") + "/"
            return sorted(
                p[len(prefix) :]
                for p in self._nodes
                if p.startswith(prefix) and "/" not in p[len(prefix) :] and p != "/"
            )

    # --- writes ----------------------------------------------------------------------

    def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> None:
        """Create `path` (and missing parents, as persistent empty nodes)."""
        _check_path(path)
        with self._lock:
            if path in self._nodes:
                raise NodeExistsError(path)
            missing = []
            parent = _parent(path)
            while parent not in self._nodes:
                missing.append(parent)
                parent = _parent(parent)
            for p in reversed(missing):
                self._nodes[p] = Node(b"", 0)
            zxid = self._next_zxid()
            self._nodes[path] = Node(bytes(data), 0, ephemeral, zxid, zxid)
            self._changed([path, _parent(path)], persist=not ephemeral or bool(missing))

    def create_sequential(self, prefix: str, data: bytes) -> str:
        """Create `prefix` + a 10-digit sequence number above those of the parent's children
        and of any this store created (ZooKeeper's sequential nodes: numbers rise but need
        not be contiguous); its path."""
        with self._lock:
            parent = _parent(prefix)
            number = self._sequences.get(parent)
            if number is None:
                below = self.children(parent) if parent in self._nodes else []
                number = 1 + max((int(c[-10:]) for c in below if c[-10:].isdigit()), default=-1)
            self._sequences[parent] = number + 1
            path = f"{prefix}{number:010d}"
            self.create(path, data)
            return path

    def set(self, path: str, data: bytes, *, expected_version: int = -1) -> int:
        with self._lock:
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            _check_version(path, node, expected_version)
            self._nodes[path] = Node(
                bytes(data), node.version + 1, node.ephemeral, node.czxid, self._next_zxid()
            )
            self._changed([path], persist=not node.ephemeral)
            return node.version + 1

    def delete(self, path: str, *, expected_version: int = -1, recursive: bool = False) -> None:
        with self._lock:
            node = self._nodes.get(path)
            if node is None:
                raise NoNodeError(path)
            _check_version(path, node, expected_version)
            prefix = path + "/"
            below = [p for p in self._nodes if p.startswith(prefix)]
            if below and not recursive:
                raise NotEmptyError(path)
            for p in [*below, path]:
                del self._nodes[p]
            self._changed([path, _parent(path), *below], persist=True)

    def multi(self, ops: list[Op]) -> None:
        """Apply all operations or none (ZooKeeper's multi): the first that cannot be
        applied raises its error and nothing changes. Unlike `create`, a multi's create
        needs its parent to exist already (or to be created earlier in the same multi)."""
        with self._lock:
            before = dict(self._nodes)
            try:
                touched = [path for op in ops for path in self._apply(op)]
            except BaseException:
                self._nodes = before
                raise
            persist = any(not isinstance(op, CheckOp) for op in ops)
            self._changed(touched, persist=persist)

    def _apply(self, op: Op) -> list[str]:
        """One operation of a multi, without persisting or firing watches."""
        node = self._nodes.get(op.path)
        if isinstance(op, CreateOp):
            _check_path(op.path)
            if node is not None:
                raise NodeExistsError(op.path)
            if _parent(op.path) not in self._nodes:
                raise NoNodeError(_parent(op.path))
            zxid = self._next_zxid()
            self._nodes[op.path] = Node(bytes(op.data), 0, op.ephemeral, zxid, zxid)
            return [op.path, _parent(op.path)]
        if node is None:
            raise NoNodeError(op.path)
        _check_version(op.path, node, op.expected_version)
        if isinstance(op, SetOp):
            self._nodes[op.path] = Node(
                bytes(op.data), node.version + 1, node.ephemeral, node.czxid, self._next_zxid()
            )
            return [op.path]
        if isinstance(op, DeleteOp):
            if any(p.startswith(op.path + "/") for p in self._nodes):
                raise NotEmptyError(op.path)
            del self._nodes[op.path]
            return [op.path, _parent(op.path)]
        return []

    def watch(self, path: str, callback: Watcher) -> None:
        """Call `callback(path)` once, at the next change of `path` or of its children."""
        with self._lock:
            self._watches.setdefault(path, []).append(callback)

    def close(self) -> None:
        with self._lock:
            for path in [p for p, n in self._nodes.items() if n.ephemeral]:
                del self._nodes[path]

    # --- internals -------------------------------------------------------------------

    def _next_zxid(self) -> int:
        self._zxid += 1
        return self._zxid

    def _changed(self, paths: list[str], persist: bool) -> None:
        if persist and self._file is not None:
            self._save(self._file)
        fired: list[tuple[Watcher, str]] = []
        for path in dict.fromkeys(paths):
            fired += [(cb, path) for cb in self._watches.pop(path, [])]
        for callback, path in fired:
            callback(path)

    def _save(self, file: Path) -> None:
        snapshot = {
            path: {
                "data": base64.b64encode(node.data).decode(),
                "version": node.version,
                "czxid": node.czxid,
                "mzxid": node.mzxid,
            }
            for path, node in self._nodes.items()
            if not node.ephemeral
        }
        tmp = file.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(snapshot, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, file)
        dir_fd = os.open(file.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _load(self, file: Path) -> None:
        raw = json.loads(file.read_text())
        for path, entry in raw.items():
            czxid = int(entry.get("czxid", 0))
            mzxid = int(entry.get("mzxid", czxid))
            self._nodes[path] = Node(
                base64.b64decode(entry["data"]), int(entry["version"]), czxid=czxid, mzxid=mzxid
            )
            self._zxid = max(self._zxid, czxid, mzxid)
