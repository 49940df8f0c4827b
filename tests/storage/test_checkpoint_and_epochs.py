"""Checkpoint files (Kafka's text format) and the leader epoch cache (KIP-101)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverlog.model import UNDEFINED_EPOCH
from riverlog.storage import checkpoint
from riverlog.storage.checkpoint import CorruptCheckpointError
from riverlog.storage.epoch_cache import UNDEFINED_OFFSET, LeaderEpochCache


def test_offsets_checkpoint_text_format(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.RECOVERY_POINT_FILE
    checkpoint.write_offsets(path, {("b", 1): 7, ("a", 0): 100, ("a-b.c_d", 12): 0})
    assert path.read_text() == "0\n3\na 0 100\na-b.c_d 12 0\nb 1 7\n"
    assert checkpoint.read_offsets(path) == {("a", 0): 100, ("a-b.c_d", 12): 0, ("b", 1): 7}
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_epochs_checkpoint_text_format(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.LEADER_EPOCH_FILE
    checkpoint.write_epochs(path, [(0, 0), (3, 150)])
    assert path.read_text() == "0\n2\n0 0\n3 150\n"
    assert checkpoint.read_epochs(path) == [(0, 0), (3, 150)]
    checkpoint.write_epochs(path, [])
    assert path.read_text() == "0\n0\n"
    assert checkpoint.read_epochs(path) == []


def test_missing_checkpoint_is_empty(tmp_path: Path) -> None:
    assert checkpoint.read_offsets(tmp_path / "nope") == {}
    assert checkpoint.read_epochs(tmp_path / "nope") == []


topics = st.text("abcxyz-._0123456789", min_size=1, max_size=20)


@given(st.dictionaries(st.tuples(topics, st.integers(0, 10_000)), st.integers(0, 2**63 - 1)))
def test_offsets_round_trip(offsets: dict[tuple[str, int], int]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cp"
        checkpoint.write_offsets(path, offsets)
        assert checkpoint.read_offsets(path) == offsets
        lines = path.read_text().split("\n")
        assert lines[0] == "0" and lines[1] == str(len(offsets))
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["cp"]


def test_atomic_write_replaces_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    checkpoint.write_offsets(path, {("t", 0): 1})
    checkpoint.write_offsets(path, {("t", 0): 2})
    assert checkpoint.read_offsets(path) == {("t", 0): 2}
    assert not list(tmp_path.glob("*.tmp"))
    # A stale .tmp from an earlier crash does not confuse the next write or read.
    (tmp_path / "cp.tmp").write_text("junk")
    assert checkpoint.read_offsets(path) == {("t", 0): 2}
    checkpoint.write_offsets(path, {("t", 0): 3})
    assert checkpoint.read_offsets(path) == {("t", 0): 3}
    assert not (tmp_path / "cp.tmp").exists()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0\n",
        "1\n1\nt 0 5\n",  # unknown version
        "0\nx\n",
        "0\n2\nt 0 5\n",  # count says 2, holds 1
        "0\n1\nt 0 5\nt 1 6\n",
        "0\n1\nt 0\n",
        "0\n1\nt 0 5 9\n",
        "0\n1\nt zero 5\n",
        "0\n1\nt 0 five\n",
    ],
)
def test_corrupt_offsets_checkpoint(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        checkpoint.read_offsets(path)


@pytest.mark.parametrize(
    "data", [b"0\n1\n1 x\n", b"0\n1\n1\n", b"0\n2\n1 5\n", b"\xff\xfe\x00garbage", b"2\n0\n"]
)
def test_corrupt_epochs_checkpoint(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / checkpoint.LEADER_EPOCH_FILE
    path.write_bytes(data)
    with pytest.raises(CorruptCheckpointError):
        checkpoint.read_epochs(path)
    assert LeaderEpochCache(tmp_path).entries == []  # the cache falls back to a rebuild


# --- LeaderEpochCache --------------------------------------------------------------------


def _cache(tmp_path: Path, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    assert cache.entries == entries
    return cache


def test_assign_persists_and_ignores_known_or_older_epochs(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.latest_epoch == UNDEFINED_EPOCH
    cache.assign(0, 0)
    cache.assign(0, 10)  # known epoch: its start does not move
    cache.assign(2, 20)
    cache.assign(1, 30)  # older epoch
    cache.assign(-1, 40)
    assert cache.entries == [(0, 0), (2, 20)]
    assert cache.latest_epoch == 2
    assert LeaderEpochCache(tmp_path).entries == [(0, 0), (2, 20)]
    assert checkpoint.read_epochs(tmp_path / checkpoint.LEADER_EPOCH_FILE) == [(0, 0), (2, 20)]


def test_assign_drops_entries_not_below_new_start(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(0, 0), (2, 20), (3, 30)])
    cache.assign(5, 20)
    assert cache.entries == [(0, 0), (5, 20)]
    assert LeaderEpochCache(tmp_path).entries == [(0, 0), (5, 20)]


def test_end_offset_for(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(1, 0), (3, 100), (6, 250)])
    leo = 400
    assert cache.end_offset_for(0, leo) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache.end_offset_for(1, leo) == (1, 100)
    assert cache.end_offset_for(2, leo) == (1, 100)  # unknown epoch: the largest below it
    assert cache.end_offset_for(3, leo) == (3, 250)
    assert cache.end_offset_for(5, leo) == (3, 250)
    assert cache.end_offset_for(6, leo) == (6, leo)
    assert cache.end_offset_for(9, leo) == (6, leo)
    (tmp_path / "x").mkdir()
    empty = LeaderEpochCache(tmp_path / "x")
    assert empty.end_offset_for(0, 5) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_truncate_from_end(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(1, 0), (3, 100), (6, 250)])
    cache.truncate_from_end(300)
    assert cache.entries == [(1, 0), (3, 100), (6, 250)]
    cache.truncate_from_end(250)  # epoch 6 started at 250: nothing of it remains
    assert cache.entries == [(1, 0), (3, 100)]
    cache.truncate_from_end(101)
    assert cache.entries == [(1, 0), (3, 100)]
    cache.truncate_from_end(0)
    assert cache.entries == []
    assert LeaderEpochCache(tmp_path).entries == []


def test_truncate_from_start(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(1, 0), (3, 100), (6, 250)])
    cache.truncate_from_start(0)
    assert cache.entries == [(1, 0), (3, 100), (6, 250)]
    cache.truncate_from_start(50)
    assert cache.entries == [(1, 50), (3, 100), (6, 250)]
    cache.truncate_from_start(100)
    assert cache.entries == [(3, 100), (6, 250)]
    cache.truncate_from_start(400)
    assert cache.entries == [(6, 400)]
    assert LeaderEpochCache(tmp_path).entries == [(6, 400)]
    # Below the first entry: nothing changes.
    (tmp_path / "y").mkdir()
    cache2 = _cache(tmp_path / "y", [(2, 10)])
    cache2.truncate_from_start(5)
    assert cache2.entries == [(2, 10)]


@given(
    st.lists(st.tuples(st.integers(-1, 20), st.integers(0, 1000)), max_size=30),
    st.integers(0, 1100),
)
def test_cache_invariants(ops: list[tuple[int, int]], cut: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cache = LeaderEpochCache(Path(tmp))
        for epoch, offset in ops:
            cache.assign(epoch, offset)
            epochs = [e for e, _ in cache.entries]
            offsets = [o for _, o in cache.entries]
            assert epochs == sorted(set(epochs)) and offsets == sorted(set(offsets))
        saved = list(cache.entries)
        assert LeaderEpochCache(Path(tmp)).entries == saved
        cache.truncate_from_end(cut)
        assert cache.entries == [(e, o) for e, o in saved if o < cut]
        cache.entries = list(saved)
        cache.truncate_from_start(cut)
        assert all(o >= cut for _, o in cache.entries)
        assert [e for e, _ in cache.entries] == [e for e, o in saved if o > cut] or (
            cache.entries[0][1] == cut
            and [e for e, _ in cache.entries[1:]] == [e for e, o in saved if o > cut]
        )
