"""Several log directories on real files: placement, per-directory checkpoints, moving a log
(same filesystem and across filesystems), leftovers of an interrupted move, and a directory
that fails (KIP-112) while the others carry on."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.storage import checkpoint
from riverlog.storage.log_dirs import FUTURE_SUFFIX
from riverlog.storage.manager import LogManager

SMALL = {"segment.bytes": "4096", "index.interval.bytes": "256"}


def _batch(i: int) -> bytes:
    return encode_batch([Record(0, 1_000, b"k%d" % i, b"v" * 100)])


def _fill(mgr: LogManager, topic: str, partition: int, count: int) -> None:
    lg = mgr.get_or_create(topic, partition)
    for i in range(count):
        lg.append(_batch(i), leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)


def _values(mgr: LogManager, topic: str, partition: int) -> int:
    lg = mgr.get(topic, partition)
    assert lg is not None
    return lg.log_end_offset


@pytest.fixture
def other_fs() -> Iterator[Path]:
    """A directory on another filesystem than the tests' (tmpfs /dev/shm)."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    path = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="riverlog-jbod-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_new_logs_go_to_the_directory_with_the_fewest(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    mgr = LogManager(dirs, SMALL)
    for p in range(7):
        mgr.get_or_create("t", p)
    placed = [mgr.dir_of[("t", p)].name for p in range(7)]
    assert placed == ["a", "b", "c", "a", "b", "c", "a"]
    mgr.preferred_dir[("u", 0)] = dirs[2]  # named by AlterReplicaLogDirs first
    mgr.get_or_create("u", 0)
    assert mgr.dir_of[("u", 0)] == dirs[2]
    mgr.shutdown()
    for d in dirs:  # each directory checkpoints its own logs
        names = {t for t, _ in checkpoint.read_offsets(d / checkpoint.RECOVERY_POINT_FILE)}
        assert names <= {"t", "u"}
    assert checkpoint.read_offsets(dirs[2] / checkpoint.RECOVERY_POINT_FILE).keys() == {
        ("t", 2),
        ("t", 5),
        ("u", 0),
    }
    again = LogManager(dirs, SMALL)
    assert {tp: d.name for tp, d in again.dir_of.items()} == {
        tp: d.name for tp, d in mgr.dir_of.items()
    }
    again.shutdown()


@pytest.mark.parametrize("across", [False, True], ids=["same-filesystem", "across-filesystems"])
def test_move_keeps_every_record(tmp_path: Path, other_fs: Path, across: bool) -> None:
    dirs = [tmp_path / "a", other_fs if across else tmp_path / "b"]
    mgr = LogManager(dirs, SMALL)
    _fill(mgr, "t", 0, 120)  # several segments
    old = mgr.get("t", 0)
    assert old is not None and len(old.segments) > 1
    moved = mgr.move(("t", 0), dirs[1])
    assert moved.directory == dirs[1] / "t-0"
    assert not (dirs[0] / "t-0").exists()
    assert (moved.log_end_offset, moved.high_watermark) == (120, 120)
    assert [e.name for e in dirs[1].iterdir() if e.name.endswith(FUTURE_SUFFIX)] == []
    assert [(s.base_offset, s.size) for s in moved.segments] == [
        (s.base_offset, s.size) for s in old.segments
    ]
    read = moved.read(0, 1 << 20, max_offset=120)
    assert read.records is not None and read.records.length == old.segments[0].size
    moved.append(_batch(999), leader_epoch=0)
    mgr.shutdown()
    again = LogManager(dirs, SMALL)
    assert again.dir_of[("t", 0)] == dirs[1]
    assert _values(again, "t", 0) == 121
    again.shutdown()


def test_leftovers_of_an_interrupted_move_are_removed(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    mgr = LogManager(dirs, SMALL)
    _fill(mgr, "t", 0, 10)
    mgr.shutdown()
    half_copied = dirs[1] / f"t-0.0123abcd{FUTURE_SUFFIX}"
    shutil.copytree(dirs[0] / "t-0", half_copied)
    again = LogManager(dirs, SMALL)
    assert not half_copied.exists()
    assert again.dir_of[("t", 0)] == dirs[0] and _values(again, "t", 0) == 10
    again.shutdown()


def test_a_failed_directory_takes_only_its_logs_offline(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    told: list[Path] = []
    mgr = LogManager(dirs, SMALL, checkpoint_interval_ms=0, on_dir_failure=told.append)
    _fill(mgr, "t", 0, 5)  # in a
    _fill(mgr, "t", 1, 5)  # in b
    dirs[1].rename(tmp_path / "b.gone")  # Kafka's LogDirFailureTest: a file in its place
    dirs[1].write_bytes(b"")
    mgr.tick(now_ms=10**12)  # writing b's checkpoints fails: ENOTDIR
    assert told == [dirs[1]] and mgr.offline_dirs == {dirs[1]}
    assert mgr.get("t", 1) is None and mgr.offline_partitions == {("t", 1): dirs[1]}
    with pytest.raises(KafkaError) as raised:  # not re-created elsewhere while offline
        mgr.get_or_create("t", 1)
    assert raised.value.error is error_codes.KAFKA_STORAGE_ERROR
    _fill(mgr, "t", 0, 5)  # a carries on
    mgr.get_or_create("t", 2)
    assert mgr.dir_of[("t", 2)] == dirs[0]
    assert mgr.fail_dir(dirs[1]) == [("t", 1)] and told == [dirs[1]]  # once
    mgr.shutdown()
    again = LogManager(dirs, SMALL)  # restarted: b is still unusable, a loads
    assert again.offline_dirs == {dirs[1]} and _values(again, "t", 0) == 10
    with pytest.raises(KafkaError) as raised:  # t-1 may be in b: not created anew (Kafka's)
        again.get_or_create("t", 1, is_new=False)
    assert str(raised.value.message).startswith("Can not create log for t-1 because log dir")
    again.get_or_create("t", 3, is_new=True)  # a partition the controller says is new
    assert again.dir_of[("t", 3)] == dirs[0]
    again.shutdown()
