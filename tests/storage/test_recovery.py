"""Crash recovery of a partition log on real files: torn tails, garbage, broken indexes."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverlog.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from riverlog.protocol.records.batch_header import iter_batches
from riverlog.protocol.records.v2 import RecordBatch
from riverlog.storage.log import PartitionLog
from riverlog.storage.timestamp_search import MAX_TIMESTAMP
from tests.storage.logtools import (
    CODECS,
    Model,
    assert_matches,
    config,
    make_batch,
    random_recs,
    read_all,
    segment_files,
)

CFG = config(segment_bytes=3000, index_interval_bytes=200)


def build(directory: Path, seed: int, batches: int = 30) -> Model:
    """A log of `batches` batches (random codecs and sizes) over several segments, closed
    uncleanly (nothing fsynced, no producer snapshot at close)."""
    rng = random.Random(seed)
    model = Model()
    log = PartitionLog(directory, CFG)
    ts = 1_000_000
    for i in range(batches):
        recs = random_recs(rng, ts)
        ts += rng.randint(-2, 10)  # mostly increasing, sometimes not
        result = log.append(make_batch(recs, codec=rng.choice(CODECS)), leader_epoch=i // 10)
        assert result.first_offset == model.end
        model.add(result.first_offset, recs)
    assert len(log.segments) >= 3, "the test needs several segments"
    log.close(clean=False)
    return model


@cache
def template(seed: int) -> tuple[Path, Model]:
    directory = Path(tempfile.mkdtemp(prefix="riverlog-recovery-")) / "t-0"
    return directory, build(directory, seed)


def copy_template(seed: int, dest: Path) -> Model:
    src, model = template(seed)
    shutil.copytree(src, dest)
    return Model([type(b)(b.base_offset, list(b.recs)) for b in model.batches])


def batch_spans(path: Path) -> list[tuple[int, int, int]]:
    """(start position, end position, base offset) of every batch in a segment file."""
    data = path.read_bytes()
    return [(pos, pos + h.size, h.base_offset) for pos, h in iter_batches(data)]


def check_continues(directory: Path, log: PartitionLog, model: Model) -> None:
    """A new append goes at the model's end; and survives a clean restart."""
    recs = [(b"new", b"value", 2_000_000)]
    result = log.append(make_batch(recs), leader_epoch=9)
    assert result.first_offset == model.end
    model.add(result.first_offset, recs)
    assert_matches(log, model)
    end = log.log_end_offset
    log.close()
    again = PartitionLog(directory, CFG, recovery_point=end, clean_shutdown=True)
    try:
        assert again.log_end_offset == end
        assert_matches(again, model)
    finally:
        again.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2),
    cut=st.floats(0.0, 1.0),
    garbage=st.one_of(st.just(b""), st.binary(min_size=1, max_size=200), st.just(b"\0" * 100)),
)
def test_torn_tail_of_last_segment_is_cut_at_last_whole_batch(
    seed: int, cut: float, garbage: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        model = copy_template(seed, directory)
        last = segment_files(directory)[-1]
        spans = batch_spans(last)
        original = last.read_bytes()
        position = int(cut * len(original))
        with open(last, "r+b") as f:
            f.truncate(position)
            f.seek(position)
            f.write(garbage)
        damaged = last.read_bytes()
        # A batch survives if its bytes are intact (the garbage may happen to restore a cut
        # tail, e.g. zeros over zeros); everything from the first damaged batch on is lost.
        lost: set[int] = set()
        for start, end, base in spans:
            if lost or damaged[start:end] != original[start:end]:
                lost.add(base)
        model.batches = [b for b in model.batches if b.base_offset not in lost]

        log = PartitionLog(directory, CFG, recovery_point=0, clean_shutdown=False)
        assert log.log_end_offset == model.end
        assert_matches(log, model)
        assert log.recovery_point <= log.log_end_offset
        check_continues(directory, log, model)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("where", ["header", "records", "crc", "length"])
def test_corrupt_byte_in_older_segment_truncates_there_and_drops_later_segments(
    tmp_path: Path, seed: int, where: str
) -> None:
    directory = tmp_path / "t-0"
    model = copy_template(seed, directory)
    logs = segment_files(directory)
    victim = logs[1]
    spans = batch_spans(victim)
    start, end, base = spans[len(spans) // 2]
    offset_in_batch = {"header": 45, "records": (61 + end - start) // 2, "crc": 18, "length": 9}[
        where
    ]
    with open(victim, "r+b") as f:
        f.seek(start + offset_in_batch)
        byte = f.read(1)
        f.seek(start + offset_in_batch)
        f.write(bytes([byte[0] ^ 0x5A]))
    model.truncate_to(base)

    log = PartitionLog(directory, CFG, recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == base
    assert_matches(log, model)
    assert victim.stat().st_size == start
    for later in logs[2:]:
        assert not later.exists(), f"{later.name} should have been deleted"
        assert not later.with_suffix(".index").exists()
        assert not later.with_suffix(".timeindex").exists()
    assert [s.base_offset for s in log.segments] == [int(p.name[:20]) for p in logs[:2]]
    assert all(o < base for _, o in log.epochs.entries)
    check_continues(directory, log, model)


def test_recovery_point_inside_a_segment_recovers_from_that_segment(tmp_path: Path) -> None:
    """Segments wholly below the recovery point are trusted (not rescanned); the one holding
    it and later are verified."""
    directory = tmp_path / "t-0"
    model = copy_template(0, directory)
    logs = segment_files(directory)
    # Corrupt the last segment's first batch and set the recovery point in segment 1.
    with open(logs[-1], "r+b") as f:
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 1]))
    recovery_point = int(logs[1].name[:20]) + 1
    model.truncate_to(int(logs[-1].name[:20]))
    log = PartitionLog(directory, CFG, recovery_point=recovery_point, clean_shutdown=False)
    assert log.log_end_offset == model.end
    assert log.recovery_point == recovery_point
    assert_matches(log, model)
    check_continues(directory, log, model)


def _expected_offset_for_timestamp(model: Model, ts: int) -> tuple[int, int] | None:
    for b in model.batches:
        for i, (_, _, t) in enumerate(b.recs):
            if t >= ts:
                return b.base_offset + i, t
    return None


def _check_every_offset_and_timestamp(log: PartitionLog, model: Model) -> None:
    assert log.log_end_offset == model.end
    by_offset = {b.base_offset + i: b for b in model.batches for i in range(len(b.recs))}
    for offset, batch in by_offset.items():
        got = read_all_from(log, offset)
        assert got.header.base_offset == batch.base_offset
        assert got.header.base_offset <= offset <= got.header.last_offset
        assert [(r.key, r.value, r.timestamp) for r in got.records] == batch.recs
    timestamps = sorted({t for b in model.batches for _, _, t in b.recs})
    for ts in [timestamps[0] - 5, *timestamps, *(t + 1 for t in timestamps)]:
        assert log.offset_for_timestamp(ts) == _expected_offset_for_timestamp(model, ts), ts
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (model.end, -1)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
    top = max(timestamps)
    first_top = _expected_offset_for_timestamp(model, top)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == first_top


def read_all_from(log: PartitionLog, offset: int) -> RecordBatch:
    batches = read_all(log, offset)
    return batches[0]


INDEX_DAMAGE = ["delete", "empty", "truncate", "torn", "random", "zeros", "append_random"]


@pytest.mark.parametrize("damage", INDEX_DAMAGE)
@pytest.mark.parametrize("suffix", [".index", ".timeindex", "both"])
def test_damaged_indexes_after_clean_shutdown(tmp_path: Path, damage: str, suffix: str) -> None:
    # A lost .timeindex is noticed on load (the last indexed batch is newer than the time
    # index) and the segment's indexes are rebuilt.
    _damaged_indexes_after_clean_shutdown(tmp_path, damage, suffix)


def test_missing_time_index_keeps_offset_for_timestamp_right(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog(directory, config())
    for ts in (100, 500, 200):  # the segment's largest timestamp is not in its last batch
        log.append(make_batch([(b"k", b"v", ts)]), leader_epoch=0)
    assert log.offset_for_timestamp(300) == (1, 500)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (1, 500)
    log.close()
    (directory / f"{0:020d}.timeindex").unlink()
    log = PartitionLog(directory, config(), recovery_point=3, clean_shutdown=True)
    try:
        assert log.offset_for_timestamp(300) == (1, 500)  # actual: None
        assert log.offset_for_timestamp(MAX_TIMESTAMP) == (1, 500)  # actual: None
    finally:
        log.close()


def _damaged_indexes_after_clean_shutdown(tmp_path: Path, damage: str, suffix: str) -> None:
    directory = tmp_path / "t-0"
    model = copy_template(1, directory)
    # Make it a clean shutdown first (unclean template: recover once, then close cleanly).
    log = PartitionLog(directory, CFG, recovery_point=0, clean_shutdown=False)
    end = log.log_end_offset
    log.close()
    rng = random.Random(f"{damage}{suffix}")
    suffixes = [".index", ".timeindex"] if suffix == "both" else [suffix]
    for seg in segment_files(directory):
        for sfx in suffixes:
            path = seg.with_suffix(sfx)
            data = path.read_bytes() if path.exists() else b""
            entry = 8 if sfx == ".index" else 12
            if damage == "delete":
                path.unlink(missing_ok=True)
            elif damage == "empty":
                path.write_bytes(b"")
            elif damage == "truncate":
                path.write_bytes(data[: entry * rng.randint(0, len(data) // entry)])
            elif damage == "torn":
                path.write_bytes(data[: max(0, len(data) - rng.randint(1, entry - 1))])
            elif damage == "random":
                path.write_bytes(os.urandom(max(len(data), 2 * entry)))
            elif damage == "zeros":
                path.write_bytes(b"\0" * max(len(data), 2 * entry))
            elif damage == "append_random":
                path.write_bytes(data + os.urandom(entry * 3))
    _reopen_cleanly_and_check(directory, end, model)
    # And once more after the clean close that rewrote them.
    _reopen_cleanly_and_check(directory, end, model)


def _reopen_cleanly_and_check(directory: Path, end: int, model: Model) -> None:
    log = PartitionLog(directory, CFG, recovery_point=end, clean_shutdown=True)
    try:
        _check_every_offset_and_timestamp(log, model)
    finally:
        log.close()


def test_undamaged_clean_restart_reads_everything(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    model = copy_template(2, directory)
    log = PartitionLog(directory, CFG, recovery_point=0, clean_shutdown=False)
    _check_every_offset_and_timestamp(log, model)
    end = log.log_end_offset
    log.close()
    _reopen_cleanly_and_check(directory, end, model)


def test_empty_last_segment_file_after_crash(tmp_path: Path) -> None:
    """A crash right after a roll: the newest segment file exists but is empty."""
    directory = tmp_path / "t-0"
    model = copy_template(0, directory)
    empty = directory / f"{model.end:020d}.log"
    empty.write_bytes(b"")
    log = PartitionLog(directory, CFG, recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == model.end
    assert_matches(log, model)
    check_continues(directory, log, model)


def test_whole_log_garbage_restarts_empty_at_zero(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / f"{0:020d}.log").write_bytes(os.urandom(500))
    log = PartitionLog(directory, CFG, recovery_point=0, clean_shutdown=False)
    assert log.log_end_offset == 0
    assert read_all(log) == []
    check_continues(directory, log, Model())
