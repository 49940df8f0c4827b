"""The transaction coordinator's state machine for one transactional id: pure decisions.

A transactional id maps to `TxnMetadata` (producer id, epoch, timeout, state, partitions,
timestamps). Each request becomes a *decision* from the current metadata and `now_ms`:
an error, or a `Transition` — the metadata to write to `__transaction_state` and, once that
write is replicated, to make current — plus, for an end of transaction, the transaction
markers to send. Nothing here does I/O; the edge (`server/transaction_coordinator.py`)
appends the record, waits for the ISR, sends markers and applies the transition.

States and the states each may follow (Kafka's `validPreviousStates`) are `ALLOWED_FROM`.
PrepareEpochFence is never written: fencing an ongoing transaction (a new InitProducerId, or
the transaction timed out) bumps the epoch and goes on to PrepareAbort, which is.

While a transition's write is in flight the entry carries it as `pending`; every request
meeting a pending entry is answered CONCURRENT_TRANSACTIONS (the client retries), so at most
one write per transactional id is in flight.

Epochs (KIP-98, KIP-360): InitProducerId bumps the epoch, fencing older producers; an
ongoing transaction is first aborted under a bumped epoch. When the
epoch would reach `Short.MaxValue` a new producer id starts at epoch 0. A producer passing
its current id and epoch (KIP-360 recovery) gets the next epoch; a retry of an answered
InitProducerId (the previous epoch) is answered again; any other id/epoch is fenced.

Invariants: `apply` is the only way metadata changes; a transition is checked against
`ALLOWED_FROM` before it is proposed; Complete*/Empty metadata hold no partitions.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode

MAX_EPOCH = 32767
NO_PRODUCER_ID = -1
NO_EPOCH = -1

TopicPartition = tuple[str, int]


class TxnState(enum.IntEnum):
    """Values as stored in `__transaction_state` (TransactionStatus)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (DescribeTransactions, kafka-transactions.sh)."""
        return "".join(w.capitalize() for w in self.name.split("_"))


S = TxnState
ALLOWED_FROM: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
"""For each state, the states a transactional id may be in before entering it."""

COMPLETE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """What `__transaction_state` stores for one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int  # -1: no transaction
    last_update_ms: int
    last_producer_epoch: int = NO_EPOCH  # the epoch before the last bump (retries, KIP-360)


@dataclass(slots=True)
class TxnEntry:
    """The coordinator's in-memory view: current metadata and the write in flight."""

    metadata: TxnMetadata
    pending: Transition | None = None


@dataclass(frozen=True, slots=True)
class Markers:
    """Transaction markers to write to each partition's leader."""

    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class Transition:
    """Write `target` to the log; once replicated make it current (`apply`), then answer
    the request and send `markers` if any."""

    target: TxnMetadata
    markers: Markers | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    error: ErrorCode = error_codes.NONE
    transition: Transition | None = None
    answer: TxnMetadata | None = None  # the producer id/epoch to answer InitProducerId with

    @property
    def ok(self) -> bool:
        return self.error is error_codes.NONE


@dataclass(frozen=True, slots=True)
class Limits:
    max_timeout_ms: int  # transaction.max.timeout.ms
    id_expiration_ms: int  # transactional.id.expiration.ms


def _move(meta: TxnMetadata, state: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
    if meta.state not in ALLOWED_FROM[state]:
        raise ValueError(f"illegal transition {meta.state.kafka_name} -> {state.kafka_name}")
    return replace(meta, state=state, last_update_ms=now_ms, **changes)  # type: ignore[arg-type]


def apply(entry: TxnEntry, transition: Transition) -> None:
    """The transition's write is replicated: it becomes the current metadata."""
    entry.metadata = transition.target
    entry.pending = None


def _busy(entry: TxnEntry | None) -> bool:
    return entry is not None and entry.pending is not None


# --- InitProducerId ------------------------------------------------------------------------


def init_producer_id(
    entry: TxnEntry | None,
    transactional_id: str,
    timeout_ms: int,
    expected_producer_id: int,
    expected_epoch: int,
    new_producer_id: Callable[[], int],
    now_ms: int,
    limits: Limits,
) -> Decision:
    """InitProducerId with a transactional id. `new_producer_id` allocates a fresh id,
    called only when one is needed (a new transactional id or an exhausted epoch)."""
    if timeout_ms <= 0 or timeout_ms > limits.max_timeout_ms:
        return Decision(error_codes.INVALID_TRANSACTION_TIMEOUT)
    if entry is None:
        target = TxnMetadata(
            transactional_id, new_producer_id(), 0, timeout_ms, S.EMPTY, frozenset(), -1, now_ms
        )
        return Decision(transition=Transition(target), answer=target)
    if _busy(entry):
        return Decision(error_codes.CONCURRENT_TRANSACTIONS)
    meta = entry.metadata
    if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE, S.DEAD):
        return Decision(error_codes.CONCURRENT_TRANSACTIONS)
    if meta.state is S.ONGOING:
        # Abort the zombie's transaction under a bumped epoch; the client retries and then
        # meets CompleteAbort.
        return Decision(error_codes.CONCURRENT_TRANSACTIONS, _fence_and_abort(meta, now_ms))
    if expected_producer_id != NO_PRODUCER_ID:
        is_retry = (
            expected_producer_id == meta.producer_id
            and expected_epoch == meta.last_producer_epoch
            and meta.last_producer_epoch != NO_EPOCH
        )
        if is_retry:
            return Decision(answer=meta)
        if expected_producer_id != meta.producer_id or expected_epoch != meta.producer_epoch:
            return Decision(error_codes.PRODUCER_FENCED)
    if meta.producer_epoch >= MAX_EPOCH - 1:
        producer_id, epoch, last = new_producer_id(), 0, NO_EPOCH
    else:
        producer_id, epoch, last = meta.producer_id, meta.producer_epoch + 1, meta.producer_epoch
    target = _move(
        meta,
        S.EMPTY,
        now_ms,
        producer_id=producer_id,
        producer_epoch=epoch,
        last_producer_epoch=last,
        timeout_ms=timeout_ms,
        partitions=frozenset(),
        start_ms=-1,
    )
    return Decision(transition=Transition(target), answer=target)


def _fence_and_abort(meta: TxnMetadata, now_ms: int) -> Transition:
    """Ongoing -> PrepareEpochFence (in memory: the epoch is bumped, fencing the producer)
    -> PrepareAbort, written with the bumped epoch, as are its markers."""
    fenced = _move(
        meta,
        S.PREPARE_EPOCH_FENCE,
        now_ms,
        producer_epoch=min(meta.producer_epoch + 1, MAX_EPOCH),
        last_producer_epoch=meta.producer_epoch,
    )
    target = _move(fenced, S.PREPARE_ABORT, now_ms)
    return Transition(
        target, Markers(target.producer_id, target.producer_epoch, False, target.partitions)
    )


# --- partitions and offsets ----------------------------------------------------------------


def _check_producer(entry: TxnEntry | None, producer_id: int, epoch: int) -> ErrorCode | None:
    if entry is None or entry.metadata.producer_id != producer_id:
        return error_codes.INVALID_PRODUCER_ID_MAPPING
    if epoch != entry.metadata.producer_epoch:
        return error_codes.PRODUCER_FENCED
    if entry.pending is not None:
        return error_codes.CONCURRENT_TRANSACTIONS
    return None


def add_partitions(
    entry: TxnEntry | None,
    producer_id: int,
    epoch: int,
    partitions: frozenset[TopicPartition],
    now_ms: int,
) -> Decision:
    """AddPartitionsToTxn and AddOffsetsToTxn (the group's offsets partition)."""
    error = _check_producer(entry, producer_id, epoch)
    if error is not None:
        return Decision(error)
    assert entry is not None
    meta = entry.metadata
    if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return Decision(error_codes.CONCURRENT_TRANSACTIONS)
    if meta.state not in ALLOWED_FROM[S.ONGOING]:
        return Decision(error_codes.INVALID_TXN_STATE)
    if meta.state is S.ONGOING and partitions <= meta.partitions:
        return Decision()
    start = meta.start_ms if meta.state is S.ONGOING else now_ms
    target = _move(meta, S.ONGOING, now_ms, partitions=meta.partitions | partitions, start_ms=start)
    return Decision(transition=Transition(target))


def verify_partitions(
    entry: TxnEntry | None, producer_id: int, epoch: int, partitions: frozenset[TopicPartition]
) -> ErrorCode | dict[TopicPartition, ErrorCode]:
    """AddPartitionsToTxn with `verify_only` (KIP-890 part 1, a partition leader asking
    before a transaction's first write there): per partition NONE when it is in the
    transaction, TRANSACTION_ABORTABLE when not (Empty and Complete* hold none); or one
    error for all — INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS
    while the transaction is being ended. A write in flight is not waited for: the leader's
    guard checks again at the append."""
    if entry is None or entry.metadata.producer_id != producer_id:
        return error_codes.INVALID_PRODUCER_ID_MAPPING
    meta = entry.metadata
    if epoch != meta.producer_epoch:
        return error_codes.PRODUCER_FENCED
    if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return error_codes.CONCURRENT_TRANSACTIONS
    return {
        tp: error_codes.NONE if tp in meta.partitions else error_codes.TRANSACTION_ABORTABLE
        for tp in partitions
    }


# --- ending ------------------------------------------------------------------------------


def end_transaction(
    entry: TxnEntry | None,
    producer_id: int,
    epoch: int,
    commit: bool,
    now_ms: int,
) -> Decision:
    """EndTxn: Ongoing -> PrepareCommit/PrepareAbort with the markers to send; retries of a
    finished end are answered NONE, contradictions INVALID_TXN_STATE."""
    if entry is None or entry.metadata.producer_id != producer_id:
        return Decision(error_codes.INVALID_PRODUCER_ID_MAPPING)
    meta = entry.metadata
    if epoch != meta.producer_epoch:
        return Decision(error_codes.PRODUCER_FENCED)
    if entry.pending is not None:
        return Decision(error_codes.CONCURRENT_TRANSACTIONS)
    state = meta.state
    if state is S.ONGOING:
        prepare = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        target = _move(meta, prepare, now_ms)
        markers = Markers(meta.producer_id, meta.producer_epoch, commit, meta.partitions)
        return Decision(transition=Transition(target, markers))
    if state is S.COMPLETE_COMMIT:
        return Decision() if commit else Decision(error_codes.INVALID_TXN_STATE)
    if state is S.COMPLETE_ABORT:
        return Decision(error_codes.INVALID_TXN_STATE) if commit else Decision()
    if state is S.PREPARE_COMMIT:
        return Decision(
            error_codes.CONCURRENT_TRANSACTIONS if commit else error_codes.INVALID_TXN_STATE
        )
    if state is S.PREPARE_ABORT:
        return Decision(
            error_codes.INVALID_TXN_STATE if commit else error_codes.CONCURRENT_TRANSACTIONS
        )
    return Decision(error_codes.INVALID_TXN_STATE)


def complete(entry: TxnEntry, now_ms: int) -> Transition:
    """Every marker is written: PrepareCommit/PrepareAbort -> CompleteCommit/CompleteAbort."""
    meta = entry.metadata
    done = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    return Transition(_move(meta, done, now_ms, partitions=frozenset()))


# --- timers ------------------------------------------------------------------------------


def timed_out(entry: TxnEntry, now_ms: int) -> Transition | None:
    """An ongoing transaction past its timeout: the coordinator aborts it under a bumped
    epoch (the producer is fenced), as Kafka's `abortTimedOutTransactions`."""
    meta = entry.metadata
    if entry.pending is not None or meta.state is not S.ONGOING:
        return None
    if meta.start_ms + meta.timeout_ms > now_ms:
        return None
    return _fence_and_abort(meta, now_ms)


def expired(entry: TxnEntry, now_ms: int, limits: Limits) -> Transition | None:
    """A finished transactional id unused for `transactional.id.expiration.ms`: Dead (the
    edge writes a tombstone and forgets it)."""
    meta = entry.metadata
    if entry.pending is not None or meta.state not in COMPLETE:
        return None
    if meta.last_update_ms + limits.id_expiration_ms > now_ms:
        return None
    return Transition(_move(meta, S.DEAD, now_ms))


@dataclass(slots=True)
class Listing:
    """ListTransactions' filters; empty sets match everything."""

    states: set[str] = field(default_factory=set)
    producer_ids: set[int] = field(default_factory=set)
    duration_ms: int = -1  # KIP-994: only transactions running longer than this

    def matches(self, meta: TxnMetadata, now_ms: int) -> bool:
        if self.states and meta.state.kafka_name not in self.states:
            return False
        if self.producer_ids and meta.producer_id not in self.producer_ids:
            return False
        if self.duration_ms >= 0:
            return meta.state is S.ONGOING and now_ms - meta.start_ms > self.duration_ms
        return True
