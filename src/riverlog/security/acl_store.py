"""ACLs in the metadata store as Kafka keeps them in ZooKeeper, and the broker's cache.

    /kafka-acl/<ResourceType>/<name>                    literal patterns (and `*`)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>  prefixed patterns
      {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                            "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_NNNNNNNNNN           "Topic:foo" (a literal changed)
    /kafka-acl-extended-changes/acl_changes_NNNNNNNNNN  {"version":1,"resourceType":"Topic",
                                                         "name":"foo","patternType":"PREFIXED"}

`AclCache` holds every pattern's entries. The broker that writes a change updates its cache
at once and announces it; every broker watches both change directories and re-reads each
pattern named by a notification numbered above the last it handled, so all brokers apply a
change within a watch round-trip. After a lost store session it re-reads everything
(`resync`). The writer keeps the newest `KEEP_NOTIFICATIONS` notifications. Store watch
callbacks only schedule work onto the event loop, where the cache is read and changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterable

from riverlog.metadata.store import (
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    StoreUnavailableError,
)
from riverlog.security.acl import LITERAL, PREFIXED, Entry, Filter, Pattern, select

log = logging.getLogger(__name__)

ACLS = "/kafka-acl"
EXTENDED = "/kafka-acl-extended/prefixed"
CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_NAME = "acl_changes_"
KEEP_NOTIFICATIONS = 1000


def pattern_path(pattern: Pattern) -> str:
    root = ACLS if pattern.pattern_type == LITERAL else EXTENDED
    return f"{root}/{pattern.resource_type}/{pattern.name}"


def encode_entries(entries: Iterable[Entry]) -> bytes:
    acls = [
        {
            "principal": e.principal,
            "permissionType": e.permission,
            "operation": e.operation,
            "host": e.host,
        }
        for e in sorted(entries, key=lambda e: (e.principal, e.operation, e.host, e.permission))
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(data: bytes) -> frozenset[Entry]:
    raw = json.loads(data or b"{}")
    return frozenset(
        Entry(str(a["principal"]), str(a["host"]), str(a["operation"]), str(a["permissionType"]))
        for a in raw.get("acls", [])
    )


def _read(store: MetadataStore, pattern: Pattern) -> frozenset[Entry]:
    try:
        return decode_entries(store.get(pattern_path(pattern)).data)
    except NoNodeError:
        return frozenset()
    except (ValueError, KeyError, TypeError):
        log.warning("ACL node %s unreadable; treated as empty", pattern_path(pattern))
        return frozenset()


def _children(store: MetadataStore, path: str) -> list[str]:
    try:
        return store.children(path)
    except NoNodeError:
        return []


def load_all(store: MetadataStore) -> dict[Pattern, frozenset[Entry]]:
    found: dict[Pattern, frozenset[Entry]] = {}
    for root, kind in ((ACLS, LITERAL), (EXTENDED, PREFIXED)):
        for resource_type in _children(store, root):
            for name in _children(store, f"{root}/{resource_type}"):
                pattern = Pattern(resource_type, name, kind)
                entries = _read(store, pattern)
                if entries:
                    found[pattern] = entries
    return found


def _notification(pattern: Pattern) -> tuple[str, bytes]:
    if pattern.pattern_type == LITERAL:
        return CHANGES, f"{pattern.resource_type}:{pattern.name}".encode()
    body = {
        "version": 1,
        "resourceType": pattern.resource_type,
        "name": pattern.name,
        "patternType": pattern.pattern_type,
    }
    return EXTENDED_CHANGES, json.dumps(body, separators=(",", ":")).encode()


def _pattern_of(directory: str, data: bytes) -> Pattern | None:
    try:
        if directory == CHANGES:
            resource_type, _, name = data.decode().partition(":")
            return Pattern(resource_type, name, LITERAL) if name else None
        raw = json.loads(data)
        return Pattern(str(raw["resourceType"]), str(raw["name"]), str(raw["patternType"]))
    except (ValueError, KeyError, TypeError):
        return None


class AclCache:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.acls: dict[Pattern, frozenset[Entry]] = {}
        self.prefixed: list[Pattern] = []
        """The PREFIXED patterns, for the authorizer's prefix scan."""
        self.version = 0
        """Bumped at every change, so that decisions cached on an older version are dropped."""
        self._last = {CHANGES: -1, EXTENDED_CHANGES: -1}
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- reading and watching ----------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for directory in (CHANGES, EXTENDED_CHANGES):
            with contextlib.suppress(NodeExistsError):
                if not self.store.exists(directory):
                    self.store.create(directory, b"")
            numbers = [int(c[-10:]) for c in _children(self.store, directory)]
            self._last[directory] = max(numbers, default=-1)
            self._arm(directory)
        self.resync()

    def resync(self) -> None:
        self.acls = load_all(self.store)
        self._index()

    def _index(self) -> None:
        self.prefixed = [p for p in self.acls if p.pattern_type == PREFIXED]
        self.version += 1

    def _arm(self, directory: str) -> None:
        loop = self._loop
        if loop is None:
            return

        def fired(_path: str) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._changed, directory)

        try:
            self.store.watch(directory, fired)
        except StoreUnavailableError as e:
            log.warning("ACL change watch on %s not armed: %s", directory, e)

    def _changed(self, directory: str) -> None:
        self._arm(directory)  # before reading, so a change made meanwhile fires again
        try:
            children = sorted(_children(self.store, directory))
        except StoreUnavailableError as e:
            log.warning("ACL changes not read: %s", e)
            return
        for child in children:
            number = int(child[-10:])
            if number <= self._last[directory]:
                continue
            self._last[directory] = number
            try:
                data = self.store.get(f"{directory}/{child}").data
            except NoNodeError:
                continue
            pattern = _pattern_of(directory, data)
            if pattern is None:
                log.warning("ACL change %s/%s unreadable", directory, child)
                continue
            self._refresh(pattern)

    def _refresh(self, pattern: Pattern) -> None:
        entries = _read(self.store, pattern)
        if entries:
            self.acls[pattern] = entries
        else:
            self.acls.pop(pattern, None)
        self._index()

    # --- writing ---------------------------------------------------------------------

    def _write(self, pattern: Pattern, entries: frozenset[Entry]) -> None:
        path = pattern_path(pattern)
        if entries:
            data = encode_entries(entries)
            try:
                self.store.set(path, data)
            except NoNodeError:
                self.store.create(path, data)
        else:
            with contextlib.suppress(NoNodeError):
                self.store.delete(path)
        if entries:
            self.acls[pattern] = entries
        else:
            self.acls.pop(pattern, None)
        self._index()
        self._announce(pattern)

    def _announce(self, pattern: Pattern) -> None:
        directory, data = _notification(pattern)
        path = self.store.create_sequential(f"{directory}/{CHANGE_NAME}", data)
        newest = int(path[-10:])
        for child in _children(self.store, directory):
            if int(child[-10:]) <= newest - KEEP_NOTIFICATIONS:
                with contextlib.suppress(NoNodeError):
                    self.store.delete(f"{directory}/{child}")

    def add(self, pattern: Pattern, entries: Iterable[Entry]) -> None:
        current = _read(self.store, pattern)  # the store's, not the cache's: other writers
        new = current | frozenset(entries)
        if new != current:
            self._write(pattern, new)

    def remove(self, flt: Filter) -> list[tuple[Pattern, Entry]]:
        """Delete the ACLs matching `flt`; those deleted."""
        removed = select(self.acls, flt)
        by_pattern: dict[Pattern, set[Entry]] = {}
        for pattern, entry in removed:
            by_pattern.setdefault(pattern, set()).add(entry)
        for pattern, gone in by_pattern.items():
            self._write(pattern, _read(self.store, pattern) - gone)
        return removed
