"""KIP-890 part 1 at the log: a transactional batch opens a transaction only with the guard
its verification started with, and a marker (or a bumped epoch's batch) appended between the
coordinator's answer and the append voids that guard — the write that would have hung the
partition is refused and the last stable offset moves on."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverlog.protocol.error_codes import KafkaError
from riverlog.storage.producer_state import NO_GUARD, VERIFICATION_EXPIRY_MS
from tests.storage.test_transactions import open_log, txn_batch

PID = 7


def test_a_transactional_batch_needs_its_guard(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    with pytest.raises(KafkaError) as refused:
        plog.append(txn_batch(PID, 0, 0), 0, verification=NO_GUARD)
    assert refused.value.error.name == "INVALID_TXN_STATE"
    other = plog.start_verification(8, 0, 0)
    with pytest.raises(KafkaError):  # another producer's guard is no guard
        plog.append(txn_batch(PID, 0, 0), 0, verification=other)
    guard = plog.start_verification(PID, 0, 0)
    assert plog.start_verification(PID, 0, 0) is guard  # one per producer until used
    plog.append(txn_batch(PID, 0, 0), 0, verification=guard)
    # The transaction is open now: nothing more to verify, later batches need no guard.
    assert plog.start_verification(PID, 2, 0) is NO_GUARD
    plog.append(txn_batch(PID, 0, 2), 0, verification=NO_GUARD)
    assert plog.log_end_offset == 4
    # Verification off (None): the old behaviour, any transactional batch is appended.
    plog.append(txn_batch(9, 0, 0), 0)
    assert plog.producers.ongoing() == {PID: 0, 9: 4}
    plog.close()


def test_a_marker_between_verification_and_append_voids_the_guard(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    guard = plog.start_verification(PID, 0, 0)
    plog.append(txn_batch(PID, 0, 0), 0, verification=guard)
    plog.update_high_watermark(plog.log_end_offset)
    # Second transaction: verified, but its abort marker lands before the append (a late
    # write of an aborted transaction).
    late = plog.start_verification(PID, 2, 0)
    assert late is NO_GUARD  # the first transaction is still open: nothing to verify yet
    plog.append_marker(PID, 0, True, 0, 0)  # commits the first
    guard = plog.start_verification(PID, 2, 0)
    plog.append_marker(PID, 0, False, 0, 0)  # the producer aborted meanwhile
    with pytest.raises(KafkaError) as refused:
        plog.append(txn_batch(PID, 0, 2), 0, verification=guard)
    assert refused.value.error.name == "INVALID_TXN_STATE"
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.last_stable_offset == plog.high_watermark == plog.log_end_offset == 4
    assert plog.producers.ongoing() == {}
    plog.close()


def test_a_higher_sequence_waits_for_the_lowest_being_verified(tmp_path: Path) -> None:
    """Kafka's lowest-sequence rule: while sequence 0 is being verified (e.g. retried after
    NOT_COORDINATOR), sequence 2 cannot be appended first."""
    plog = open_log(tmp_path / "t-0")
    first = plog.start_verification(PID, 2, 0)
    assert plog.start_verification(PID, 0, 0) is first  # a lower sequence lowers the bar
    with pytest.raises(KafkaError) as refused:
        plog.append(txn_batch(PID, 0, 2), 0, verification=first)
    assert refused.value.error.name == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    plog.append(txn_batch(PID, 0, 0), 0, verification=first)
    plog.append(txn_batch(PID, 0, 2), 0, verification=NO_GUARD)
    assert plog.log_end_offset == 4
    # A bumped epoch starts over at its own sequence.
    plog.append_marker(PID, 0, False, 0, 0)
    bumped = plog.start_verification(PID, 5, 0)
    assert plog.start_verification(PID, 0, 1) is bumped
    assert plog.producers.verifying[PID].lowest_seq == 0
    plog.close()


def test_unused_guards_expire(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0")
    producers = plog.producers
    old = producers.start_verification(PID, 0, 0, now_ms=0)
    producers.start_verification(8, 0, 0, now_ms=VERIFICATION_EXPIRY_MS - 1)
    producers.start_verification(9, 0, 0, now_ms=VERIFICATION_EXPIRY_MS)  # drops PID's
    assert set(producers.verifying) == {8, 9}
    assert producers.start_verification(PID, 0, 0, now_ms=VERIFICATION_EXPIRY_MS) is not old
    plog.close()
