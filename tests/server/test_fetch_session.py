"""KIP-227 fetch sessions: full first answer, incremental answers list only what changed."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from riverlog.protocol import error_codes
from riverlog.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionCache,
    FetchSessionError,
    PartitionFetch,
    PartitionState,
)

A, B = ("t", 0), ("t", 1)
STATE = PartitionState(high_watermark=10, last_stable_offset=10, log_start_offset=0)


def _req(*keys: tuple[str, int]) -> OrderedDict[object, PartitionFetch]:
    return OrderedDict((k, PartitionFetch(fetch_offset=0, max_bytes=1024)) for k in keys)


def test_sessionless_fetch_answers_everything() -> None:
    cache = FetchSessionCache()
    ctx = cache.open(0, FINAL_EPOCH, _req(A, B), [], now_ms=0)
    assert ctx.session_id == 0 and list(ctx.partitions) == [A, B]
    assert ctx.include(A, STATE, has_records=False, error=0)
    assert len(cache) == 0


def test_incremental_fetch_lists_only_changed_partitions() -> None:
    cache = FetchSessionCache()
    first = cache.open(0, INITIAL_EPOCH, _req(A, B), [], now_ms=0)
    assert first.session_id != 0
    assert all(first.include(k, STATE, False, 0) for k in (A, B))
    second = cache.open(first.session_id, 1, OrderedDict(), [], now_ms=1)
    assert list(second.partitions) == [A, B]  # the session remembers what to read
    assert not second.include(A, STATE, has_records=False, error=0)
    assert second.include(B, STATE, has_records=True, error=0)
    moved = PartitionState(high_watermark=11, last_stable_offset=11, log_start_offset=0)
    third = cache.open(first.session_id, 2, OrderedDict(), [B], now_ms=2)
    assert list(third.partitions) == [A]
    assert third.include(A, moved, has_records=False, error=0)
    assert not third.include(A, moved, has_records=False, error=0)


def test_wrong_epoch_and_unknown_session_have_their_error_codes() -> None:
    cache = FetchSessionCache()
    sid = cache.open(0, INITIAL_EPOCH, _req(A), [], now_ms=0).session_id
    with pytest.raises(FetchSessionError) as wrong:
        cache.open(sid, 5, OrderedDict(), [], now_ms=1)
    assert wrong.value.error_code == error_codes.INVALID_FETCH_SESSION_EPOCH.code
    with pytest.raises(FetchSessionError) as unknown:
        cache.open(sid + 100, 1, OrderedDict(), [], now_ms=1)
    assert unknown.value.error_code == error_codes.FETCH_SESSION_ID_NOT_FOUND.code
    cache.open(sid, FINAL_EPOCH, _req(A), [], now_ms=2)
    assert len(cache) == 0


def test_cache_evicts_least_recently_used_session() -> None:
    cache = FetchSessionCache(max_sessions=2)
    s1 = cache.open(0, INITIAL_EPOCH, _req(A), [], now_ms=0).session_id
    s2 = cache.open(0, INITIAL_EPOCH, _req(A), [], now_ms=0).session_id
    cache.open(s1, 1, OrderedDict(), [], now_ms=1)  # s1 is now the most recent
    cache.open(0, INITIAL_EPOCH, _req(A), [], now_ms=2)
    with pytest.raises(FetchSessionError):
        cache.open(s2, 1, OrderedDict(), [], now_ms=3)
    cache.open(s1, 2, OrderedDict(), [], now_ms=3)
