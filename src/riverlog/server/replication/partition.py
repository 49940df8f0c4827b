"""One local replica of a partition: its log and its role — leader or follower — and the
replication rules that follow from them. Pure: the caller passes `now_ms` and does the I/O
(store writes, waking waiting requests, starting fetchers).

As leader it tracks each follower's log end offset (from the offsets its fetches ask for)
and when it was last caught up, and from those
- advances the high watermark to the smallest log end offset in the ISR (never backwards;
  an ISR member whose position is not known yet holds it where it is);
- names followers to add to the ISR (caught up to the high watermark and into the current
  leader epoch) and to drop from it (not caught up for `replica.lag.time.max.ms`);
- says whether enough replicas reached an offset (acks=all, offset commits).
Kafka's rule for "caught up": a fetch at or past the leader's end offset, or one at or past
the end offset the leader had at the follower's previous fetch (it has what existed then).

As follower it knows its leader; fetched batches are appended as they are and the high
watermark follows the leader's, capped at the local end. Where a follower's log diverged
from its leader's, `truncation_target` says where they agree again (by leader epoch).

Invariants: the high watermark of a hosted partition is written only here (leaders in
`_advance_high_watermark`, followers in `append_as_follower`/`truncate_*`); the ISR changes
only when the store accepted the new state (`isr_written`), one write at a time
(`pending_isr`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from riverlog.model import UNDEFINED_EPOCH, UNKNOWN_OFFSET, TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.records.batch_header import read_batch_header
from riverlog.storage.epoch_cache import LeaderEpochCache
from riverlog.storage.log import AppendResult, PartitionLog
from riverlog.storage.producer_state import NO_GUARD, VerificationGuard


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = UNKNOWN_OFFSET


class FollowerFetchOutcome(NamedTuple):
    """What a follower's fetch changed on its leader."""

    high_watermark_moved: bool
    isr_expansion: list[int] | None
    """The ISR to write with the follower added, or None."""


def truncation_target(
    epochs: LeaderEpochCache,
    log_end_offset: int,
    high_watermark: int,
    leader_epoch: int,
    leader_end_offset: int,
) -> tuple[int, bool]:
    """Where a follower's log agrees with its leader's, from the leader's answer to
    OffsetForLeaderEpoch(`epochs.latest_epoch`): (offset to truncate to, settled). Not
    settled means the leader named an older epoch than the follower's: ask again for it.
    A leader or follower that knows no epochs at all: the follower's high watermark."""
    if leader_epoch == UNDEFINED_EPOCH or epochs.latest_epoch == UNDEFINED_EPOCH:
        if epochs.latest_epoch >= 0:
            return min(high_watermark, log_end_offset), True
        return log_end_offset, True
    local_epoch, local_end = epochs.end_offset_for(leader_epoch, log_end_offset)
    return min(leader_end_offset, local_end, log_end_offset), local_epoch == leader_epoch


@dataclass
class HostedPartition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: PartitionLog
    local_id: int
    """The broker hosting this replica."""
    leader_id: int = -1
    leader_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    zk_version: int = 0
    """Version of the partition's state znode: ISR writes are conditioned on it."""
    followers: dict[int, FollowerState] = field(default_factory=dict)
    leader_epoch_start: int = 0
    pending_isr: list[int] | None = None
    """An ISR write in flight (no second one starts meanwhile)."""

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def alone(self) -> bool:
        """Leader of a partition whose ISR is just itself: the HW follows every append."""
        return len(self.isr) == 1 and self.isr[0] == self.leader_id

    # --- becoming leader or follower ---------------------------------------------------

    def make_leader(
        self, epoch: int, isr: list[int], replicas: list[int], zk_version: int, now_ms: int
    ) -> None:
        self.leader_id, self.leader_epoch = self.local_id, epoch
        self.isr, self.replicas, self.zk_version = list(isr), list(replicas), zk_version
        self.pending_isr = None
        self.leader_epoch_start = self.log.log_end_offset
        if self.log.epochs.latest_epoch < epoch:
            self.log.epochs.assign(epoch, self.leader_epoch_start)
        self.followers = {
            r: FollowerState(last_caught_up_ms=now_ms if r in isr else 0)
            for r in replicas
            if r != self.local_id
        }
        self._advance_high_watermark()

    def make_follower(
        self, leader: int, epoch: int, isr: list[int], replicas: list[int], zk_version: int
    ) -> None:
        self.leader_id, self.leader_epoch = leader, epoch
        self.isr, self.replicas, self.zk_version = list(isr), list(replicas), zk_version
        self.followers = {}
        self.pending_isr = None

    # --- checks for requests -----------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """A request's view of the leader epoch (KIP-320): NONE when it matches or is not
        given, FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH when newer."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return error_codes.NONE
        if current_leader_epoch < self.leader_epoch:
            return error_codes.FENCED_LEADER_EPOCH
        return error_codes.UNKNOWN_LEADER_EPOCH

    def check_min_isr(self) -> None:
        """acks=all: refuse a write the ISR is too small to hold (NOT_ENOUGH_REPLICAS)."""
        min_isr = self.log.config.min_insync_replicas
        if len(self.isr) < min_isr:
            raise KafkaError(
                error_codes.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {self.isr} is insufficient to satisfy the "
                f"min.isr requirement of {min_isr}.",
            )

    def replication_status(self, required_offset: int) -> ErrorCode | None:
        """Whether enough replicas reached `required_offset` (an acks=all write ending just
        before it): None while waiting; NONE once the high watermark passed it; then
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below `min.insync.replicas`;
        NOT_LEADER_OR_FOLLOWER once this broker no longer leads (Kafka's
        `checkEnoughReplicasReachOffset`). A leader epoch change alone changes nothing: the
        write is in this leader's log and the ISR it reaches is what counts."""
        if not self.is_leader:
            return error_codes.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark < required_offset:
            return None
        if len(self.isr) < self.log.config.min_insync_replicas:
            return error_codes.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return error_codes.NONE

    # --- leaders: appends, followers' progress, the ISR --------------------------------

    def append_as_leader(
        self,
        records: memoryview,
        *,
        from_client: bool = True,
        verification: VerificationGuard | None = None,
    ) -> AppendResult:
        result = self.log.append(
            records, self.leader_epoch, from_client=from_client, verification=verification
        )
        if not result.duplicate:
            self._advance_high_watermark()
        return result

    def start_transaction_verification(self, records: memoryview) -> VerificationGuard:
        """KIP-890 part 1 (Kafka's `maybeStartTransactionVerification`): for a record set
        opening its producer's transaction here (a transactional data batch, no transaction
        of that producer open), the guard to append it with once the coordinator confirmed
        this partition is in the transaction; NO_GUARD when there is nothing to confirm."""
        try:
            header = read_batch_header(records, 0, whole=False)
        except ProtocolError:
            return NO_GUARD  # not a batch: the append refuses it
        if not header.is_transactional or header.is_control or not header.has_producer_id:
            return NO_GUARD
        return self.log.start_verification(
            header.producer_id, header.base_sequence, header.producer_epoch
        )

    def append_marker_as_leader(
        self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int
    ) -> int:
        """A transaction marker (control batch) in this leader's epoch; the offset after it."""
        result = self.log.append_marker(
            producer_id, producer_epoch, committed, coordinator_epoch, self.leader_epoch
        )
        self._advance_high_watermark()
        return result.last_offset + 1

    def follower_fetched(self, replica_id: int, offset: int, now_ms: int) -> FollowerFetchOutcome:
        """A follower fetches from `offset`, so it has everything before."""
        state = self.followers.get(replica_id)
        if state is None:
            return FollowerFetchOutcome(False, None)
        leader_end = self.log.log_end_offset
        if offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif offset >= state.last_fetch_leader_end >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = offset
        state.last_fetch_leader_end = leader_end
        state.last_fetch_ms = now_ms
        moved = self._advance_high_watermark()
        joins = self.pending_isr is None and self._may_join_isr(replica_id)
        return FollowerFetchOutcome(moved, [*self.isr, replica_id] if joins else None)

    def _may_join_isr(self, replica_id: int) -> bool:
        """A follower outside the ISR caught up to the high watermark, in this epoch."""
        state = self.followers.get(replica_id)
        return (
            state is not None
            and replica_id not in self.isr
            and replica_id in self.replicas
            and state.log_end_offset >= self.log.high_watermark
            and state.log_end_offset >= self.leader_epoch_start
        )

    def read_replicas(self, fetch_offset: int, now_ms: int) -> list[tuple[int, int, int]]:
        """Followers known to hold `fetch_offset`, as (broker id, log end offset, ms since
        caught up): where a consumer may read it (KIP-392)."""
        return [
            (replica, state.log_end_offset, now_ms - state.last_caught_up_ms)
            for replica, state in self.followers.items()
            if state.log_end_offset >= fetch_offset and state.log_end_offset != UNKNOWN_OFFSET
        ]

    def isr_to_shrink(self, now_ms: int, max_lag_ms: int) -> list[int] | None:
        """The ISR without the followers not caught up for longer than `max_lag_ms`, or
        None when none lags (or a write is in flight, or this replica does not lead)."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        lagging = [r for r in self.isr if r != self.leader_id and self._lags(r, now_ms, max_lag_ms)]
        return [r for r in self.isr if r not in lagging] if lagging else None

    def _lags(self, replica_id: int, now_ms: int, max_lag_ms: int) -> bool:
        state = self.followers.get(replica_id)
        return state is None or now_ms - state.last_caught_up_ms > max_lag_ms

    def isr_written(self, isr: list[int], zk_version: int) -> bool:
        """The store accepted a new ISR; whether the high watermark moved with it."""
        self.isr, self.zk_version, self.pending_isr = list(isr), zk_version, None
        return self._advance_high_watermark()

    def _advance_high_watermark(self) -> bool:
        """The leader's high watermark: the smallest log end offset in the ISR."""
        if not self.is_leader:
            return False
        log = self.log
        new = log.log_end_offset
        for replica in self.isr:
            if replica != self.leader_id:
                state = self.followers.get(replica)
                if state is None or state.log_end_offset == UNKNOWN_OFFSET:
                    return False
                if state.log_end_offset < new:  # `min` without the builtin (every fetch)
                    new = state.log_end_offset
        if new > log.high_watermark:
            log.update_high_watermark(new)
            return True
        return False

    # --- followers ---------------------------------------------------------------------

    def append_as_follower(self, batches: memoryview, leader_high_watermark: int) -> None:
        """Fetched whole batches (possibly none), as the leader wrote them; the high
        watermark follows the leader's, capped at the local end."""
        if len(batches) > 0:
            self.log.append_as_follower(batches)
        self.log.update_high_watermark(leader_high_watermark)

    def truncate_to_leader(self, leader_epoch: int, leader_end_offset: int) -> bool:
        """Truncate to where this log agrees with the leader's answer to
        OffsetForLeaderEpoch; whether that is settled (`truncation_target`)."""
        log = self.log
        target, settled = truncation_target(
            log.epochs, log.log_end_offset, log.high_watermark, leader_epoch, leader_end_offset
        )
        log.truncate_to(target)
        return settled

    def truncate_to_high_watermark(self) -> None:
        """No agreement with the leader found: keep only what was committed."""
        self.log.truncate_to(self.log.high_watermark)
