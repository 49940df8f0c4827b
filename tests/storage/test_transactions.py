"""Partition side of transactions: markers, the last stable offset, the `.txnindex`,
producer state across snapshots and recovery, followers copying markers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.records.v2 import Record, encode_batch, iter_record_batches
from riverlog.storage.log import PartitionLog
from riverlog.storage.txn_index import ENTRY_SIZE, AbortedTxn
from tests.storage.logtools import config


def txn_batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    now = int(time.time() * 1000)
    records = [Record(i, now, b"k%d" % i, b"v") for i in range(n)]
    return encode_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )


def open_log(path: Path, **kw: object) -> PartitionLog:
    return PartitionLog(path, config(), **kw)  # type: ignore[arg-type]


def test_lso_stops_at_open_transactions_until_their_markers(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(txn_batch(7, 0, 0), 0)  # offsets 0-1
    plog.append(txn_batch(8, 0, 0), 0)  # offsets 2-3
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == 0
    plog.append_marker(7, 0, True, 0, 0)  # offset 4: commits producer 7
    assert plog.last_stable_offset == 0  # marker above the high watermark
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == 2  # producer 8 still open
    plog.append_marker(8, 0, False, 0, 0)  # offset 5: aborts producer 8
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == plog.log_end_offset == 6
    assert plog.aborted_transactions(0, 6) == [AbortedTxn(8, 2, 5, 6)]
    assert plog.aborted_transactions(6, 10) == []
    assert plog.aborted_transactions(0, 2) == []
    index = tmp_path / "t-0" / "00000000000000000000.txnindex"
    assert index.stat().st_size == ENTRY_SIZE
    plog.close()


def test_markers_are_control_batches_with_kafkas_records(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(txn_batch(7, 3, 0, n=1), 0)
    plog.append_marker(7, 3, False, 5, 9)
    plog.update_high_watermark(plog.log_end_offset)
    region = plog.read(1, 1 << 20).records
    assert region is not None
    import os

    batch = next(iter_record_batches(os.pread(region.fileno, region.length, region.offset)))
    header = batch.header
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    assert header.partition_leader_epoch == 9
    assert batch.records[0].key == b"\x00\x00\x00\x00"  # version 0, abort
    assert batch.records[0].value == b"\x00\x00\x00\x00\x00\x05"  # version 0, epoch 5
    with pytest.raises(KafkaError) as old_epoch:
        plog.append_marker(7, 2, True, 5, 9)
    assert old_epoch.value.error.name == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(KafkaError) as zombie_coordinator:
        plog.append_marker(7, 3, True, 4, 9)
    assert zombie_coordinator.value.error.name == "TRANSACTION_COORDINATOR_FENCED"
    assert plog.producers.producers[7].coordinator_epoch == 5
    plog.close()


def test_open_transactions_and_aborts_survive_restart(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    plog.append(txn_batch(7, 0, 0), 0)
    plog.append_marker(7, 0, False, 0, 0)
    plog.roll()  # snapshot holds no open transaction
    plog.append(txn_batch(9, 0, 0), 0)  # open at offset 3
    plog.close(clean=False)
    again = open_log(tmp_path / "t-0")  # unclean: replays from the snapshot
    again.update_high_watermark(again.log_end_offset)
    assert again.last_stable_offset == 3
    assert again.aborted_transactions(0, 10) == [AbortedTxn(7, 0, 2, 3)]
    again.close()  # clean: snapshot at the end holds the open transaction
    third = open_log(tmp_path / "t-0", clean_shutdown=True, recovery_point=5)
    third.update_high_watermark(third.log_end_offset)
    assert third.last_stable_offset == 3
    assert third.aborted_transactions(0, 10) == [AbortedTxn(7, 0, 2, 3)]
    third.close()


def test_follower_copies_markers_and_truncation_drops_index_entries(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l-0")
    leader.append(txn_batch(7, 0, 0), 0)
    leader.append_marker(7, 0, False, 0, 0)
    leader.update_high_watermark(leader.log_end_offset)
    region = leader.read(0, 1 << 20).records
    assert region is not None
    import os

    follower = open_log(tmp_path / "f-0")
    follower.append_as_follower(os.pread(region.fileno, region.length, region.offset))
    assert follower.aborted_transactions(0, 3) == [AbortedTxn(7, 0, 2, 3)]
    follower.truncate_to(2)
    assert follower.aborted_transactions(0, 3) == []
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == 0  # the transaction is open again
    leader.close()
    follower.close()
