"""The idempotent producer's per-partition bookkeeping, and what an answer to a batch means.

A producer with idempotence numbers each partition's batches with sequences under its
producer id; the leader drops a duplicate (answering with the original offset) and refuses a
gap. `PartitionState` is what the producer remembers of one partition: the batches in flight
and those waiting for a retry (both in `serial` order of first sending), the next sequence,
and whether — and up to which batch — the leader has acknowledged this producer id. `judge`
turns one partition's answer to one batch into a `Verdict`:

- acknowledged or a duplicate: done (a duplicate with an unknown offset);
- refused as out of order after a later batch of the partition was acknowledged under the
  same id: the batch is in the log (the leader took the later one in sequence), just older
  than the five batches a leader remembers — done, offset unknown;
- refused as out of order while an earlier batch under its id was unanswered or waiting for
  a retry when it was sent, or still is: the leader had not seen that one yet (it was in
  flight to a broker that no longer leads, or its answer came on another connection), so it
  is retried behind it under the same id — a new id would re-send, under new sequences,
  batches a leader may have written already;
- any other out-of-order refusal, and UNKNOWN_PRODUCER_ID: a gap nothing here explains —
  take a new producer id (sequences start again at 0) and retry;
- retriable (by the error, or one of those two) with retries left: retry after
  `retry.backoff.ms`, with a metadata refresh unless the refusal was about sequences;
- otherwise it fails for good, and with idempotence a new producer id follows (later
  sequences of the partition would have a gap).

Invariants: pure — no I/O, no clock reads (the caller sets `retry_at`); `judge` removes the
batch from `sending` and updates the acknowledgement marks, and nothing else of the state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from riverlog.client.accumulator import ProducerBatch
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError, for_code

_OUT_OF_ORDER = error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER.code
_UNKNOWN_PRODUCER = error_codes.UNKNOWN_PRODUCER_ID.code
_DUPLICATE = error_codes.DUPLICATE_SEQUENCE_NUMBER.code


@dataclass
class PartitionState:
    sending: list[ProducerBatch] = field(default_factory=list)
    """Batches sent and not answered yet."""
    failed: list[ProducerBatch] = field(default_factory=list)
    next_sequence: int = 0
    retry_at: float = 0.0
    """When the failed batches may be retried (time.monotonic)."""
    acked: bool = False
    """A batch was acknowledged under the current producer id: the leader knows the producer
    and refuses a sequence gap from now on."""
    acked_serial: int = -1
    """The newest batch (by `serial`) acknowledged under the current producer id."""

    @property
    def in_flight(self) -> int:
        return len(self.sending)

    def earlier_unsettled(self, batch: ProducerBatch) -> bool:
        """Whether a batch sent before `batch` under its producer id is still unanswered or
        waiting for a retry: a leader that misses it refuses `batch` as out of order."""
        return any(
            b.serial < batch.serial and b.producer_id == batch.producer_id
            for b in (*self.sending, *self.failed)
        )


class Verdict(enum.Enum):
    DONE = "done"
    RETRY = "retry"
    FAIL = "fail"


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    error: KafkaError | None = None
    """Why the batch was refused (None when done)."""
    offset_known: bool = True
    """DONE: whether the answer's base offset is the batch's (not for a duplicate or a
    batch older than the leader remembers)."""
    answered: bool = True
    """DONE: whether the leader answered with success (its append time applies), not with a
    refusal that nonetheless shows the batch is in the log."""
    renew_because: str | None = None
    """Take a new producer id once nothing is in flight, for this reason."""
    refresh_metadata: bool = False


def judge(
    state: PartitionState,
    batch: ProducerBatch,
    code: int,
    message: str | None,
    *,
    producer_id: int,
    idempotent: bool,
    retries: int,
) -> Judgement:
    """What the answer `code` (and `message`) to `batch` means, `producer_id` being the
    producer's current one; see the module docstring."""
    state.sending = [b for b in state.sending if b is not batch]
    ours = batch.producer_id == producer_id
    if code == 0 or code == _DUPLICATE:
        state.acked = ours
        if ours:
            state.acked_serial = max(state.acked_serial, batch.serial)
        return Judgement(Verdict.DONE, offset_known=code == 0)
    error = KafkaError(for_code(code), message)
    where = f"{(batch.topic, batch.partition)}: {error}"
    if code == _OUT_OF_ORDER and ours and batch.serial < state.acked_serial:
        return Judgement(Verdict.DONE, offset_known=False, answered=False)
    renew = None
    if (
        code == _OUT_OF_ORDER
        and ours
        and not batch.sent_behind
        and not state.earlier_unsettled(batch)
    ):
        renew = where
    if code == _UNKNOWN_PRODUCER:
        renew = renew or where
    if (error.retriable or code in (_OUT_OF_ORDER, _UNKNOWN_PRODUCER)) and (
        batch.attempts <= retries
    ):
        return Judgement(
            Verdict.RETRY, error, renew_because=renew, refresh_metadata=code != _OUT_OF_ORDER
        )
    if idempotent:
        renew = renew or f"{(batch.topic, batch.partition)}: a batch failed for good: {error}"
    return Judgement(Verdict.FAIL, error, renew_because=renew)
