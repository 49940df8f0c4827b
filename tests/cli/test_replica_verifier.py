"""Replica comparison (pure): agreement moves the offset, different contents are checksum
mismatches, different shapes stop, and only what is below each replica's high watermark
counts."""

from __future__ import annotations

from riverlog.cli import replica_verifier as rv
from riverlog.protocol.records.batch_header import read_batch_header
from riverlog.protocol.records.v2 import Record, encode_batch


def batch(base: int, count: int, tag: bytes = b"v") -> bytes:
    return encode_batch(
        [Record(base + i, 1_700_000_000_000, None, tag + bytes([i])) for i in range(count)],
        base_offset=base,
        partition_leader_epoch=0,
    )


def replica(hw: int, *batches: bytes) -> rv.ReplicaData:
    return rv.ReplicaData(hw, rv.batch_headers(b"".join(batches)))


def test_agreeing_replicas_move_to_the_lowest_high_watermark() -> None:
    data = batch(0, 3) + batch(3, 2) + batch(5, 4)
    result = rv.verify_partition(0, {1: replica(9, data), 2: replica(5, data), 3: replica(9, data)})
    assert result.next_offset == 5  # replica 2's high watermark stops the walk at batch 5..8
    assert result.lag == 4
    assert result.checksum_mismatches == [] and result.offset_mismatch is None


def test_same_offsets_different_contents_are_checksum_mismatches_and_the_walk_goes_on() -> None:
    good, forged = batch(3, 2), batch(3, 2, b"forged")
    result = rv.verify_partition(
        3,
        {
            1: replica(7, good, batch(5, 2)),
            2: replica(7, forged, batch(5, 2)),
            3: replica(7, good, batch(5, 2)),
        },
    )
    assert result.next_offset == 7 and result.lag == 0
    [m] = result.checksum_mismatches
    assert (m.offset, m.first_replica, m.replica) == (4, 1, 2)
    assert m.first_checksum == read_batch_header(good).crc != m.checksum
    line = rv.checksum_mismatch_line(("t", 0), m, "NOW")
    assert line == (
        f"NOW: partition t-0 has unmatched checksum at offset 4; replica 1's "
        f"checksum {m.first_checksum}; replica 2's checksum {m.checksum}"
    )


def test_batches_ending_at_different_offsets_stop_the_walk() -> None:
    result = rv.verify_partition(
        0, {1: replica(5, batch(0, 5)), 2: replica(5, batch(0, 3), batch(3, 2))}
    )
    assert result.offset_mismatch == rv.OffsetMismatch(1, 4, 2, 2)
    assert result.next_offset == 0
    assert rv.offset_mismatch_line(("t", 1), result.offset_mismatch, "NOW") == (
        "NOW: partition t-1: replica 1's offset 4 doesn't match replica 2's offset 2"
    )


def test_a_replica_that_answered_nothing_holds_the_partition_and_shows_as_lag() -> None:
    result = rv.verify_partition(10, {1: replica(20, batch(10, 10)), 2: rv.ReplicaData()})
    assert (result.next_offset, result.lag) == (10, 10)


def test_partial_trailing_batch_is_left_out() -> None:
    whole = batch(0, 2) + batch(2, 2)
    assert [h.base_offset for h in rv.batch_headers(whole + batch(4, 3)[:30])] == [0, 2]


def test_include_list_is_kafkas() -> None:
    pattern = rv.include_pattern(" 'orders.*, audit' ")
    assert pattern.fullmatch("orders-eu") and pattern.fullmatch("audit")
    assert not pattern.fullmatch("audit-2") and not pattern.fullmatch("x-orders")


def test_report_lines() -> None:
    assert rv.lag_line(3, ("t", 2), 17, 6, "NOW") == (
        "NOW: max lag is 3 for partition t-2 at offset 17 among 6 partitions"
    )
    assert rv.now_text(0.5)[-4:] == ",500"
