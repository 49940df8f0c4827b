"""Idempotent-producer state of one partition: per producer id, its epoch and last batches.

Kafka's rules (ProducerStateManager): a batch from a known producer must carry the current
epoch or a newer one (older → INVALID_PRODUCER_EPOCH); within an epoch its first sequence
must follow the last one (else OUT_OF_ORDER_SEQUENCE_NUMBER) unless it repeats one of the
last five batches, which is a duplicate: not appended again, answered with the original
offsets. A new epoch starts at sequence 0. Unknown producers (new, or whose state expired
with retention) are accepted at any sequence.

Transactions: a producer's first transactional batch after a marker opens a transaction at
its base offset (`ongoing`, producer id -> first offset); a control batch (commit or abort
marker) of that producer closes it and `update` returns the `CompletedTxn`, which the log
uses for its last stable offset and, when aborted, its `.txnindex`. A marker must carry the
producer's current epoch or a newer one (INVALID_PRODUCER_EPOCH otherwise).

Verification (KIP-890 part 1, Kafka's VerificationStateEntry): before the leader appends
a producer's first transactional batch while it has no open transaction here, it asks the
transaction coordinator whether this partition is in the producer's ongoing transaction.
`start_verification` hands out the producer's `VerificationGuard` (one per producer until
it is used up); `check_verified` at the append lets a transactional batch with no open
transaction through only with that same guard. Every transactional batch or marker of the
producer appended (`update`) drops the guard, so a marker (or a bumped epoch's batch)
between the coordinator's answer and the append voids it: the append then fails
INVALID_TXN_STATE rather than open a transaction the coordinator has finished (a hanging
transaction). While a guard stands, no batch of that producer with a higher sequence than the
lowest one seen verifying may be appended (OUT_OF_ORDER_SEQUENCE_NUMBER: the lower one is
still to come). Guards are in memory only; one unused for `VERIFICATION_EXPIRY_MS` is
dropped when a new one is made.

State is rebuilt on start from the latest snapshot (`<offset>.snapshot`, JSON, written when a
segment rolls and at clean shutdown) plus a replay of the batch headers after it.
Everything here reads headers only.

Invariants: `check` and `check_verified` never mutate; `update` is called only for batches
that were appended, in offset order.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.records.batch_header import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader
from riverlog.storage.checkpoint import write_atomically
from riverlog.storage.markers import Marker

SNAPSHOT_SUFFIX = ".snapshot"
KEPT_BATCHES = 5
VERIFICATION_EXPIRY_MS = 86_400_000
"""Kafka drops unused verification entries after `producer.id.expiration.ms` (one day by
default); riverlog has no producer expiry and uses that default."""


class VerificationGuard:
    """One verification's identity (Kafka's VerificationGuard): compared by identity."""

    __slots__ = ()


NO_GUARD = VerificationGuard()
"""Kafka's SENTINEL: nothing was verified (the producer had a transaction open here, or the
append is not a produce request's). Never matches a producer's guard."""


@dataclass(slots=True)
class VerificationState:
    guard: VerificationGuard
    started_ms: int
    lowest_seq: int
    epoch: int


@dataclass
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=KEPT_BATCHES))
    last_timestamp: int = -1
    txn_first_offset: int = -1  # the first offset of its ongoing transaction; -1: none
    coordinator_epoch: int = -1  # of its last marker

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


def _next_seq(seq: int) -> int:
    return 0 if seq == 2**31 - 1 else seq + 1


class ProducerStateManager:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.verifying: dict[int, VerificationState] = {}
        """Producer id -> its verification guard, until a transactional batch or marker of
        that producer is appended."""
        self.last_snapshot_offset = -1

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """The original batch if this one is a duplicate; raises on a sequence problem."""
        if header.producer_id < 0 or header.attributes & CONTROL_BIT:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is not None:
            if header.producer_epoch < entry.epoch:
                raise KafkaError(
                    error_codes.INVALID_PRODUCER_EPOCH,
                    f"Producer {header.producer_id}'s epoch {header.producer_epoch} is older "
                    f"than the current epoch {entry.epoch}.",
                )
            if header.base_sequence >= 0 and header.producer_epoch > entry.epoch:
                if header.base_sequence != 0:
                    raise KafkaError(
                        error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"Invalid sequence {header.base_sequence} for new epoch "
                        f"{header.producer_epoch} of producer {header.producer_id}; expected 0.",
                    )
            elif header.base_sequence >= 0:
                first_seq = header.base_sequence
                # `header.last_sequence` once (a property: a call per kept batch otherwise)
                last_seq = (first_seq + header.last_offset_delta) % (1 << 31)
                for batch in entry.batches:
                    if batch.first_seq == first_seq and batch.last_seq == last_seq:
                        return batch
                if entry.batches and first_seq != _next_seq(entry.batches[-1].last_seq):
                    raise KafkaError(
                        error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"Out of order sequence {header.base_sequence} of producer "
                        f"{header.producer_id}; expected {_next_seq(entry.last_seq)}.",
                    )
        if self.verifying:
            self._check_lowest_sequence(header)
        return None

    def _check_lowest_sequence(self, header: BatchHeader) -> None:
        state = self.verifying.get(header.producer_id)
        if state is not None and header.base_sequence > state.lowest_seq:
            raise KafkaError(
                error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence {header.base_sequence} of producer "
                f"{header.producer_id}: sequence {state.lowest_seq} is still being verified.",
            )

    # --- verification (KIP-890 part 1) -------------------------------------------------

    def has_ongoing(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.txn_first_offset >= 0

    def start_verification(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int
    ) -> VerificationGuard:
        """The guard a verification of this producer's transactional batch appends with;
        NO_GUARD when it has a transaction open here (nothing to verify)."""
        if self.has_ongoing(producer_id):
            return NO_GUARD
        state = self.verifying.get(producer_id)
        if state is None:
            expired = [
                pid
                for pid, s in self.verifying.items()
                if now_ms - s.started_ms >= VERIFICATION_EXPIRY_MS
            ]
            for pid in expired:
                del self.verifying[pid]
            state = VerificationState(VerificationGuard(), now_ms, sequence, epoch)
            self.verifying[producer_id] = state
        elif epoch > state.epoch:
            state.epoch, state.lowest_seq = epoch, sequence
        elif epoch == state.epoch and sequence < state.lowest_seq:
            state.lowest_seq = sequence
        return state.guard

    def check_verified(self, header: BatchHeader, guard: VerificationGuard) -> None:
        """A transactional data batch may open a transaction only with the producer's
        current guard (INVALID_TXN_STATE otherwise)."""
        if header.is_control or self.has_ongoing(header.producer_id):
            return
        state = self.verifying.get(header.producer_id)
        if guard is NO_GUARD or state is None or state.guard is not guard:
            raise KafkaError(
                error_codes.INVALID_TXN_STATE, "Record was not part of an ongoing transaction"
            )

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """A marker from a coordinator older than the last one's (a zombie coordinator) is
        TRANSACTION_COORDINATOR_FENCED; one with an older producer epoch
        INVALID_PRODUCER_EPOCH."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                error_codes.TRANSACTION_COORDINATOR_FENCED,
                f"Coordinator epoch {coordinator_epoch} of a marker for producer {producer_id} "
                f"is older than {entry.coordinator_epoch}.",
            )
        if epoch < entry.epoch:
            raise KafkaError(
                error_codes.INVALID_PRODUCER_EPOCH,
                f"Marker epoch {epoch} of producer {producer_id} is older than its current "
                f"epoch {entry.epoch}.",
            )

    def ongoing(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction."""
        return {
            pid: e.txn_first_offset for pid, e in self.producers.items() if e.txn_first_offset >= 0
        }

    def first_unstable_offset(self) -> int | None:
        firsts = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset >= 0]
        return min(firsts) if firsts else None

    def update(self, header: BatchHeader, marker: Marker | None = None) -> CompletedTxn | None:
        """Record an appended batch (offsets already assigned) — for a control batch, with
        its `marker`. Returns the transaction a marker ends, if any."""
        # The header's bits read here, not through its properties (each is a call).
        if header.producer_id < 0:
            return None
        attributes = header.attributes
        if self.verifying and attributes & TRANSACTIONAL_BIT:
            self.verifying.pop(header.producer_id, None)  # used up, or voided by a marker
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            first = entry.txn_first_offset if entry is not None else -1
            coordinator = entry.coordinator_epoch if entry is not None else -1
            entry = ProducerEntry(
                header.producer_epoch, txn_first_offset=first, coordinator_epoch=coordinator
            )
            self.producers[header.producer_id] = entry
        if header.max_timestamp > entry.last_timestamp:
            entry.last_timestamp = header.max_timestamp
        if attributes & CONTROL_BIT:
            first = entry.txn_first_offset
            entry.txn_first_offset = -1
            aborted = marker is not None and marker.aborted
            if marker is not None:
                entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
            if first < 0:
                return None
            return CompletedTxn(header.producer_id, first, header.base_offset, aborted)
        if attributes & TRANSACTIONAL_BIT and entry.txn_first_offset < 0:
            entry.txn_first_offset = header.base_offset
        if header.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(
                    header.base_sequence,
                    (header.base_sequence + header.last_offset_delta) % (1 << 31),
                    header.base_offset,
                    header.base_offset + header.last_offset_delta,
                    header.max_timestamp,
                )
            )
        return None

    # --- snapshots ---------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshots(self) -> list[int]:
        names = [p.name[:20] for p in self.directory.glob(f"*{SNAPSHOT_SUFFIX}")]
        return sorted(int(n) for n in names if n.isdigit())

    def take_snapshot(self, offset: int) -> None:
        """Persist the state as of `offset` (the log end offset when taken)."""
        state = {
            str(pid): {
                "epoch": e.epoch,
                "last_timestamp": e.last_timestamp,
                "txn_first_offset": e.txn_first_offset,
                "coordinator_epoch": e.coordinator_epoch,
                "batches": [
                    [b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                    for b in e.batches
                ],
            }
            for pid, e in self.producers.items()
        }
        write_atomically(self.snapshot_path(offset), json.dumps(state).encode())
        self.last_snapshot_offset = offset

    def load_latest_snapshot(self, max_offset: int) -> int:
        """Load the newest readable snapshot at or below `max_offset`; return its offset
        (or -1: start from the beginning). Newer snapshots are deleted (log truncated)."""
        self.producers = {}
        for offset in reversed(self.snapshots()):
            path = self.snapshot_path(offset)
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                state = json.loads(path.read_bytes())
                producers = {
                    int(pid): ProducerEntry(
                        s["epoch"],
                        deque((BatchMetadata(*b) for b in s["batches"]), maxlen=KEPT_BATCHES),
                        s["last_timestamp"],
                        s.get("txn_first_offset", -1),
                        s.get("coordinator_epoch", -1),
                    )
                    for pid, s in state.items()
                }
            except (ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)  # a damaged snapshot: fall back to an older one
                continue
            self.producers = producers
            self.last_snapshot_offset = offset
            return offset
        self.last_snapshot_offset = -1
        return -1

    def delete_snapshots_below(self, offset: int) -> None:
        """Keep the newest snapshot at or below `offset` and everything after it."""
        older = [o for o in self.snapshots() if o <= offset]
        for o in older[:-1]:
            self.snapshot_path(o).unlink(missing_ok=True)
