"""The transaction state machine, table-driven: every request in every state."""

from __future__ import annotations

import itertools

import pytest

from riverlog.coordinator import transaction as t
from riverlog.coordinator.records import partition_for
from riverlog.coordinator.transaction import S, TxnEntry, TxnMetadata
from riverlog.coordinator.transaction_records import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    replay,
)
from riverlog.protocol import error_codes as ec

LIMITS = t.Limits(max_timeout_ms=60_000, id_expiration_ms=1_000_000)
NOW = 10_000
TP = ("topic", 0)


def meta(
    state: S, epoch: int = 5, partitions: frozenset[tuple[str, int]] = frozenset()
) -> TxnMetadata:
    if state not in t.COMPLETE and not partitions:
        partitions = frozenset({TP})
    start = 1_000 if state not in t.COMPLETE else -1
    return TxnMetadata("tx", 42, epoch, 30_000, state, partitions, start, 1_000)


def entry(state: S, **kw: object) -> TxnEntry:
    return TxnEntry(meta(state, **kw))  # type: ignore[arg-type]


def new_id() -> int:
    return 99


def test_allowed_from_is_kafkas_table() -> None:
    assert t.ALLOWED_FROM[S.PREPARE_COMMIT] == {S.ONGOING}
    assert t.ALLOWED_FROM[S.PREPARE_ABORT] == {S.ONGOING, S.PREPARE_EPOCH_FENCE}
    assert t.ALLOWED_FROM[S.COMPLETE_COMMIT] == {S.PREPARE_COMMIT}
    assert t.ALLOWED_FROM[S.DEAD] == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert set(t.ALLOWED_FROM) == set(S)
    with pytest.raises(ValueError):
        t._move(meta(S.EMPTY), S.PREPARE_COMMIT, NOW)


# state -> (error, resulting state or None when nothing is written)
INIT_CASES = {
    S.EMPTY: (ec.NONE, S.EMPTY),
    S.COMPLETE_COMMIT: (ec.NONE, S.EMPTY),
    S.COMPLETE_ABORT: (ec.NONE, S.EMPTY),
    S.ONGOING: (ec.CONCURRENT_TRANSACTIONS, S.PREPARE_ABORT),
    S.PREPARE_COMMIT: (ec.CONCURRENT_TRANSACTIONS, None),
    S.PREPARE_ABORT: (ec.CONCURRENT_TRANSACTIONS, None),
}


@pytest.mark.parametrize("state", list(INIT_CASES))
def test_init_producer_id_bumps_the_epoch_or_fences_first(state: S) -> None:
    error, written = INIT_CASES[state]
    d = t.init_producer_id(entry(state), "tx", 20_000, -1, -1, new_id, NOW, LIMITS)
    assert d.error is error
    if written is None:
        assert d.transition is None
        return
    assert d.transition is not None
    target = d.transition.target
    assert target.state is written and target.producer_epoch == 6 and target.producer_id == 42
    if state is S.ONGOING:  # the zombie's transaction is aborted with the new epoch
        assert d.transition.markers == t.Markers(42, 6, False, frozenset({TP}))
    else:
        assert d.answer == target and target.timeout_ms == 20_000


def test_init_new_id_timeout_and_exhausted_epoch() -> None:
    d = t.init_producer_id(None, "tx", 20_000, -1, -1, new_id, NOW, LIMITS)
    assert d.answer is not None and (d.answer.producer_id, d.answer.producer_epoch) == (99, 0)
    assert d.answer.state is S.EMPTY
    for bad in (0, 60_001):
        d = t.init_producer_id(None, "tx", bad, -1, -1, new_id, NOW, LIMITS)
        assert d.error is ec.INVALID_TRANSACTION_TIMEOUT
    d = t.init_producer_id(
        entry(S.EMPTY, epoch=t.MAX_EPOCH - 1), "tx", 1, -1, -1, new_id, NOW, LIMITS
    )
    assert d.answer is not None and (d.answer.producer_id, d.answer.producer_epoch) == (99, 0)


def test_init_kip360_recovery_retry_and_fencing() -> None:
    e = entry(S.COMPLETE_ABORT)
    d = t.init_producer_id(e, "tx", 1_000, 42, 5, new_id, NOW, LIMITS)  # current id/epoch
    assert d.ok and d.answer is not None and d.answer.producer_epoch == 6
    assert d.transition is not None
    t.apply(e, d.transition)
    again = t.init_producer_id(e, "tx", 1_000, 42, 5, new_id, NOW, LIMITS)  # a retry
    assert again.ok and again.transition is None and again.answer == e.metadata
    stale = t.init_producer_id(e, "tx", 1_000, 42, 3, new_id, NOW, LIMITS)
    assert stale.error is ec.PRODUCER_FENCED
    other = t.init_producer_id(e, "tx", 1_000, 7, 6, new_id, NOW, LIMITS)
    assert other.error is ec.PRODUCER_FENCED


ADD_CASES = {
    S.EMPTY: ec.NONE,
    S.ONGOING: ec.NONE,
    S.COMPLETE_COMMIT: ec.NONE,
    S.COMPLETE_ABORT: ec.NONE,
    S.PREPARE_COMMIT: ec.CONCURRENT_TRANSACTIONS,
    S.PREPARE_ABORT: ec.CONCURRENT_TRANSACTIONS,
    S.DEAD: ec.INVALID_TXN_STATE,
}


@pytest.mark.parametrize("state", list(ADD_CASES))
def test_add_partitions(state: S) -> None:
    new = frozenset({("other", 3)})
    d = t.add_partitions(entry(state), 42, 5, new, NOW)
    assert d.error is ADD_CASES[state]
    if d.ok:
        assert d.transition is not None
        target = d.transition.target
        assert target.state is S.ONGOING and new <= target.partitions
        assert target.start_ms == (1_000 if state is S.ONGOING else NOW)


# state -> answer to a leader's verify_only for TP (in the transaction in Ongoing/Prepare*)
VERIFY_CASES = {
    S.EMPTY: ec.TRANSACTION_ABORTABLE,
    S.ONGOING: ec.NONE,
    S.COMPLETE_COMMIT: ec.TRANSACTION_ABORTABLE,
    S.COMPLETE_ABORT: ec.TRANSACTION_ABORTABLE,
    S.PREPARE_COMMIT: ec.CONCURRENT_TRANSACTIONS,
    S.PREPARE_ABORT: ec.CONCURRENT_TRANSACTIONS,
}


@pytest.mark.parametrize("state", list(VERIFY_CASES))
def test_verify_partitions(state: S) -> None:
    """KIP-890 part 1: a leader asks before a transaction's first write to a partition."""
    other = ("other", 3)
    answer = t.verify_partitions(entry(state), 42, 5, frozenset({TP, other}))
    expected = VERIFY_CASES[state]
    if isinstance(answer, dict):
        assert answer == {TP: expected, other: ec.TRANSACTION_ABORTABLE}
    else:
        assert answer is expected


def test_verify_partitions_checks_the_producer_not_pending_writes() -> None:
    parts = frozenset({TP})
    assert t.verify_partitions(None, 42, 5, parts) is ec.INVALID_PRODUCER_ID_MAPPING
    assert t.verify_partitions(entry(S.ONGOING), 7, 5, parts) is ec.INVALID_PRODUCER_ID_MAPPING
    assert t.verify_partitions(entry(S.ONGOING), 42, 4, parts) is ec.PRODUCER_FENCED
    busy = entry(S.ONGOING)
    d = t.end_transaction(busy, 42, 5, True, NOW)
    busy.pending = d.transition  # PrepareCommit being written: still Ongoing until it is
    assert t.verify_partitions(busy, 42, 5, parts) == {TP: ec.NONE}


def test_add_partitions_checks_producer_and_pending_and_repeats() -> None:
    e = entry(S.ONGOING)
    assert t.add_partitions(e, 41, 5, frozenset({TP}), NOW).error is ec.INVALID_PRODUCER_ID_MAPPING
    assert t.add_partitions(e, 42, 4, frozenset({TP}), NOW).error is ec.PRODUCER_FENCED
    assert (
        t.add_partitions(None, 42, 5, frozenset({TP}), NOW).error is ec.INVALID_PRODUCER_ID_MAPPING
    )
    same = t.add_partitions(e, 42, 5, frozenset({TP}), NOW)
    assert same.ok and same.transition is None  # already in: nothing to write
    d = t.add_partitions(e, 42, 5, frozenset({("x", 1)}), NOW)
    assert d.transition is not None
    e.pending = d.transition
    assert (
        t.add_partitions(e, 42, 5, frozenset({("y", 1)}), NOW).error is ec.CONCURRENT_TRANSACTIONS
    )


# (state, commit) -> (error, prepared state or None)
END_CASES = {
    (S.ONGOING, True): (ec.NONE, S.PREPARE_COMMIT),
    (S.ONGOING, False): (ec.NONE, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, True): (ec.NONE, None),
    (S.COMPLETE_COMMIT, False): (ec.INVALID_TXN_STATE, None),
    (S.COMPLETE_ABORT, False): (ec.NONE, None),
    (S.COMPLETE_ABORT, True): (ec.INVALID_TXN_STATE, None),
    (S.PREPARE_COMMIT, True): (ec.CONCURRENT_TRANSACTIONS, None),
    (S.PREPARE_COMMIT, False): (ec.INVALID_TXN_STATE, None),
    (S.PREPARE_ABORT, False): (ec.CONCURRENT_TRANSACTIONS, None),
    (S.PREPARE_ABORT, True): (ec.INVALID_TXN_STATE, None),
    (S.EMPTY, True): (ec.INVALID_TXN_STATE, None),
    (S.EMPTY, False): (ec.INVALID_TXN_STATE, None),
}


@pytest.mark.parametrize(("state", "commit"), list(END_CASES))
def test_end_transaction(state: S, commit: bool) -> None:
    error, prepared = END_CASES[(state, commit)]
    e = entry(state)
    d = t.end_transaction(e, 42, 5, commit, NOW)
    assert d.error is error
    if prepared is None:
        assert d.transition is None
        return
    assert d.transition is not None and d.transition.target.state is prepared
    assert d.transition.markers == t.Markers(42, 5, commit, frozenset({TP}))
    t.apply(e, d.transition)
    done = t.complete(e, NOW + 1)
    assert done.target.state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
    assert done.target.partitions == frozenset()


def test_end_transaction_fences_old_epochs() -> None:
    assert t.end_transaction(entry(S.ONGOING), 42, 4, True, NOW).error is ec.PRODUCER_FENCED
    assert (
        t.end_transaction(entry(S.ONGOING), 1, 5, True, NOW).error is ec.INVALID_PRODUCER_ID_MAPPING
    )


def test_timeouts_abort_with_a_bumped_epoch_and_ids_expire() -> None:
    e = entry(S.ONGOING)
    assert t.timed_out(e, 1_000 + 29_999) is None
    tr = t.timed_out(e, 1_000 + 30_000)
    assert tr is not None and tr.target.state is S.PREPARE_ABORT
    assert tr.target.producer_epoch == 6 and tr.markers == t.Markers(42, 6, False, frozenset({TP}))
    assert t.timed_out(entry(S.EMPTY), 10**9) is None
    done = entry(S.COMPLETE_COMMIT)
    assert t.expired(done, 1_000 + 999_999, LIMITS) is None
    dead = t.expired(done, 1_000 + 1_000_000, LIMITS)
    assert dead is not None and dead.target.state is S.DEAD
    assert t.expired(entry(S.ONGOING), 10**12, LIMITS) is None


def test_listing_filters() -> None:
    listing = t.Listing(states={"Ongoing"}, producer_ids={42}, duration_ms=-1)
    assert listing.matches(meta(S.ONGOING), NOW)
    assert not listing.matches(meta(S.EMPTY), NOW)
    assert t.Listing(duration_ms=8_000).matches(meta(S.ONGOING), NOW)
    assert not t.Listing(duration_ms=9_000).matches(meta(S.ONGOING), NOW)
    assert S.PREPARE_EPOCH_FENCE.kafka_name == "PrepareEpochFence"


@pytest.mark.parametrize(("state", "parts"), list(itertools.product(list(S), [0, 1, 3])))
def test_records_round_trip(state: S, parts: int) -> None:
    m = TxnMetadata(
        "tx-é", 42, 7, 60_000, state, frozenset((f"t{i % 2}", i) for i in range(parts)), 5, 6
    )
    key = encode_key("tx-é")
    assert key[:2] == b"\x00\x00" and decode_key(key) == "tx-é"
    value = encode_value(m)
    assert value[:2] == b"\x00\x00"
    assert decode_value("tx-é", value) == m
    into: dict[str, TxnMetadata] = {}
    replay([(key, value), (encode_key("b"), encode_value(m)), (encode_key("b"), None)], into)
    assert into == {"tx-é": m}


def test_partition_for_is_kafkas() -> None:
    # Utils.abs("my-txn".hashCode()) % 50; "my-txn".hashCode() == -1061187895 in Java
    assert partition_for("my-txn", 50) == 1061187895 % 50 == 45
    # Groups too: "my-group".hashCode() == -1906497762 (jshell), so Kafka's partition is 12
    # of 50, where masking the sign bit (as riverlog once did) gives 36.
    assert partition_for("my-group", 50) == 12


def test_offsets_replay_holds_transactional_commits_until_their_marker() -> None:
    from riverlog.coordinator.txn_replay import TxnReplay
    from riverlog.protocol.records.v2 import Record, decode_batch, encode_batch

    def batch(pid: int, key: bytes, *, txn: bool = True, control: int | None = None) -> object:
        if control is not None:
            rec = Record(0, 1, b"\x00\x00\x00" + bytes([control]), b"\x00\x00\x00\x00\x00\x00")
            raw = encode_batch(
                [rec], producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True
            )
        else:
            raw = encode_batch(
                [Record(0, 1, key, b"v")], producer_id=pid, producer_epoch=0, is_transactional=txn
            )
        return decode_batch(raw)[0]

    replay_ = TxnReplay()
    fed = [
        replay_.feed(b)  # type: ignore[arg-type]
        for b in (
            batch(1, b"a"),
            batch(2, b"b"),
            batch(-1, b"plain", txn=False),
            batch(1, b"", control=1),
            batch(2, b"", control=0),
            batch(3, b"c"),
        )
    ]
    assert fed == [[], [], [(b"plain", b"v")], [(b"a", b"v")], [], []]
    assert replay_.open == {3: [(b"c", b"v")]}
