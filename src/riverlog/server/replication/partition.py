"""One local replica of a partition: its log and its role — leader or follower.

As leader it tracks each follower's log end offset (from the offsets its fetches ask for)
and when it was last caught up, and from those
- advances the high watermark to the smallest log end offset in the ISR (never backwards;
  an ISR member whose position is not known yet holds it where it is);
- names followers to add to the ISR (caught up to the high watermark and into the current
  leader epoch) and to drop from it (not caught up for `replica.lag.time.max.ms`).
Kafka's rule for "caught up": a fetch at or past the leader's end offset, or one at or past
the end offset the leader had at the follower's previous fetch (it has what existed then).

As follower it only knows its leader; the replica fetcher appends to its log.
The ISR itself changes only when the store accepted the new state (`isr_written`).
Pure: the caller passes `now_ms` and does the writing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from riverlog.model import UNKNOWN_OFFSET, TopicPartition
from riverlog.storage.log import PartitionLog


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = UNKNOWN_OFFSET


@dataclass
class HostedPartition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: PartitionLog
    leader_id: int
    leader_epoch: int = 0
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
    def alone(self) -> bool:
        """Leader of a partition whose ISR is just itself: the HW follows every append."""
        return len(self.isr) == 1 and self.isr[0] == self.leader_id

    def make_leader(
        self,
        broker_id: int,
        epoch: int,
        isr: list[int],
        replicas: list[int],
        zk_version: int,
        now_ms: int,
    ) -> None:
        self.leader_id, self.leader_epoch = broker_id, epoch
        self.isr, self.replicas, self.zk_version = list(isr), list(replicas), zk_version
        self.pending_isr = None
        self.leader_epoch_start = self.log.log_end_offset
        if self.log.epochs.latest_epoch < epoch:
            self.log.epochs.assign(epoch, self.leader_epoch_start)
        self.followers = {
            r: FollowerState(last_caught_up_ms=now_ms if r in isr else 0)
            for r in replicas
            if r != broker_id
        }
        self.maybe_advance_high_watermark()

    def make_follower(
        self, leader: int, epoch: int, isr: list[int], replicas: list[int], zk_version: int
    ) -> None:
        self.leader_id, self.leader_epoch = leader, epoch
        self.isr, self.replicas, self.zk_version = list(isr), list(replicas), zk_version
        self.followers = {}
        self.pending_isr = None

    def follower_fetched(self, replica_id: int, offset: int, now_ms: int) -> bool:
        """A follower fetches from `offset`, so it has everything before. Whether the high
        watermark moved."""
        state = self.followers.get(replica_id)
        if state is None:
            return False
        leader_end = self.log.log_end_offset
        if offset >= leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif offset >= state.last_fetch_leader_end >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = offset
        state.last_fetch_leader_end = leader_end
        state.last_fetch_ms = now_ms
        return self.maybe_advance_high_watermark()

    def maybe_advance_high_watermark(self) -> bool:
        log = self.log
        new = log.log_end_offset
        for replica in self.isr:
            if replica != self.leader_id:
                state = self.followers.get(replica)
                if state is None or state.log_end_offset == UNKNOWN_OFFSET:
                    return False
                new = min(new, state.log_end_offset)
        if new > log.high_watermark:
            log.update_high_watermark(new)
            return True
        return False

    def follower_to_add(self, replica_id: int) -> bool:
        """Whether a follower outside the ISR has caught up enough to join it."""
        state = self.followers.get(replica_id)
        return (
            state is not None
            and replica_id not in self.isr
            and replica_id in self.replicas
            and state.log_end_offset >= self.log.high_watermark
            and state.log_end_offset >= self.leader_epoch_start
        )

    def lagging(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers that have not been caught up for longer than `max_lag_ms`."""
        out = []
        for replica in self.isr:
            state = self.followers.get(replica)
            if replica != self.leader_id and (
                state is None or now_ms - state.last_caught_up_ms > max_lag_ms
            ):
                out.append(replica)
        return out

    def isr_written(self, isr: list[int], zk_version: int) -> bool:
        """The store accepted a new ISR; whether the high watermark moved with it."""
        self.isr, self.zk_version, self.pending_isr = list(isr), zk_version, None
        return self.maybe_advance_high_watermark()
