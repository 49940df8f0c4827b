"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asked for last.

A fetcher opens a session with a full request (`session_id` 0, `epoch` 0); the broker answers
with a session id. After that, each request (epoch 1, 2, ...) carries only the partitions whose
fetch position changed and those to forget, and each response carries only the partitions
with something new: records, an error, or a changed high watermark / last stable offset /
log start offset. A sessionless full fetch uses epoch -1 (FINAL) and closes any session.

    (session_id, epoch)   meaning
    (0, 0)                open a new session with exactly these partitions
    (N, 0)                close session N, open a new one
    (N, k > 0)            incremental: N must exist and expect epoch k
    (0 or N, -1)          full fetch without a session (closes N)

Errors: an unknown session id is FETCH_SESSION_ID_NOT_FOUND (70), a wrong epoch
INVALID_FETCH_SESSION_EPOCH (71); the client then starts over with a full request.

Pure logic: time comes in as `now_ms`; the cache evicts the least recently used session when
full. Keys are whatever the handler uses to name a partition (topic id/name + index).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

from riverlog.protocol import error_codes

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


class FetchSessionError(Exception):
    """A request that names a session the broker cannot continue."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass
class PartitionFetch:
    """What the fetcher asks of one partition."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True)
class PartitionState:
    """What the fetcher was last told about one partition."""

    high_watermark: int
    last_stable_offset: int
    log_start_offset: int


@dataclass
class FetchSession:
    session_id: int
    next_epoch: int
    partitions: OrderedDict[Hashable, PartitionFetch]
    last_told: dict[Hashable, PartitionState] = field(default_factory=dict)
    last_used_ms: int = 0


@dataclass
class FetchContext:
    """The partitions one fetch request reads, and which of them its response carries."""

    session_id: int
    partitions: OrderedDict[Hashable, PartitionFetch]
    session: FetchSession | None = None

    def include(self, key: Hashable, state: PartitionState, has_records: bool, error: int) -> bool:
        """Whether the response lists this partition (always, outside an incremental fetch)."""
        session = self.session
        if session is None:
            return True
        changed = session.last_told.get(key) != state
        session.last_told[key] = state
        return has_records or error != 0 or changed


class FetchSessionCache:
    """Open fetch sessions by id; one per broker, used from the event loop thread."""

    def __init__(self, max_sessions: int = 1000, first_id: int = 1) -> None:
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._next_id = first_id

    def __len__(self) -> int:
        return len(self._sessions)

    def open(
        self,
        session_id: int,
        epoch: int,
        requested: OrderedDict[Hashable, PartitionFetch],
        forgotten: list[Hashable],
        now_ms: int,
    ) -> FetchContext:
        if epoch == FINAL_EPOCH:
            self._sessions.pop(session_id, None)
            return FetchContext(0, requested)
        if epoch == INITIAL_EPOCH:
            self._sessions.pop(session_id, None)
            if self.max_sessions <= 0:
                return FetchContext(0, requested)
            if len(self._sessions) >= self.max_sessions:
                self._sessions.popitem(last=False)  # evict the least recently used
            new_id = self._allocate_id()
            created = FetchSession(new_id, 1, OrderedDict(requested), last_used_ms=now_ms)
            self._sessions[new_id] = created
            # The first response of a session is a full one.
            return FetchContext(new_id, created.partitions, created)
        session = self._sessions.get(session_id)
        if session is None:
            raise FetchSessionError(
                error_codes.FETCH_SESSION_ID_NOT_FOUND.code,
                f"fetch session {session_id} not found",
            )
        if epoch != session.next_epoch:
            raise FetchSessionError(
                error_codes.INVALID_FETCH_SESSION_EPOCH.code,
                f"fetch session {session_id} expects epoch {session.next_epoch}, got {epoch}",
            )
        for key in forgotten:
            session.partitions.pop(key, None)
            session.last_told.pop(key, None)
        for key, fetch in requested.items():
            session.partitions[key] = fetch
            session.last_told.pop(key, None)  # an updated partition is always answered
        session.next_epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session_id)
        return FetchContext(session_id, session.partitions, session)

    def _allocate_id(self) -> int:
        while True:
            candidate = self._next_id
            self._next_id = self._next_id + 1 if self._next_id < 2**31 - 1 else 1
            if candidate not in self._sessions:
                return candidate
