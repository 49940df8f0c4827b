"""The controller's picture of the cluster, and the decisions it takes from it (pure).

`ControllerContext` holds what the controller read from the store: live brokers, each topic's
assignment and id, each partition's leader/ISR state with the znode version it was read at,
and its own epoch. The decision functions look at it and return the partition states to
write; the controller's edge (`server/controller/service.py`) writes them version-checked,
records them here with `written`, and tells the brokers. Nothing here does I/O.

Decisions, as ZooKeeper-era Kafka's controller takes them:
- new partitions: the leader is the first live assigned replica, the ISR all live assigned
  replicas (a partition with none stays offline, leader -1);
- brokers gone: partitions they led get an offline election (from the live ISR; unclean only
  where the topic allows it); partitions where they were only ISR members drop them;
- brokers back, or nothing led: partitions without a live leader get an offline election;
- controlled shutdown: leadership leaves the brokers shutting down, and they leave the ISR;
- replicas offline in a failed log directory (KIP-112, `on_replicas_offline`): as a gone
  broker, but for those partitions only; they stay offline (no election picks them) until
  their broker registers again;
- brokers that restarted unseen (`on_bounced`): an ISR member whose live registration was
  created after the partition's state was last written (its broker epoch, the czxid of
  `/brokers/ids/N`, above the state znode's mzxid) came back since that state was written
  and nobody who wrote it knew: after a machine crash its log may be shorter than what the
  ISR acknowledged (docs/fault-suite.md, finding 8). It leaves that ISR, and where it led,
  another ISR member is elected — or, with none alive, the partition waits offline for one
  (with unclean election allowed it keeps leading instead). Where the bounced brokers are
  all the ISR has, nothing changes: no cleaner replica exists.
Every new state bumps the leader epoch and carries the controller's epoch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from riverlog.controller.partition_leader_election import (
    Elected,
    controlled_shutdown_election,
    next_state,
    offline_election,
    offline_state,
)
from riverlog.metadata.layout import BrokerRegistration, PartitionState
from riverlog.model import NO_LEADER, TopicPartition


@dataclass
class TopicInfo:
    topic_id: uuid.UUID
    assignment: dict[int, list[int]]
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)
    """Replicas a running reassignment adds and removes (`controller/reassignment.py`)."""


@dataclass
class ControllerContext:
    epoch: int
    live: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    states: dict[TopicPartition, tuple[PartitionState, int]] = field(default_factory=dict)
    """Partition → (state, znode version) as last read or written."""
    deleting: set[str] = field(default_factory=set)
    shutting_down: set[int] = field(default_factory=set)
    offline_on: dict[int, set[TopicPartition]] = field(default_factory=dict)
    """Broker → its replicas in failed log directories (KAFKA_STORAGE_ERROR answers)."""
    written_at: dict[TopicPartition, int] = field(default_factory=dict)
    """Partition → the zxid of its state's last write (the znode's mzxid), for states as
    read from the store. A state this controller wrote has no entry: it was written after
    every registration the controller had read when it decided it."""

    def replicas(self, tp: TopicPartition) -> list[int]:
        topic = self.topics.get(tp[0])
        return [] if topic is None else topic.assignment.get(tp[1], [])

    def partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, info in sorted(self.topics.items()) for p in sorted(info.assignment)]

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        info = self.topics.get(topic)
        return [] if info is None else [(topic, p) for p in sorted(info.assignment)]

    def partitions_on(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.partitions() if broker_id in self.replicas(tp)]

    def state(self, tp: TopicPartition) -> PartitionState | None:
        found = self.states.get(tp)
        return None if found is None else found[0]

    def version(self, tp: TopicPartition) -> int:
        """The state znode's version, -1 when it does not exist yet."""
        found = self.states.get(tp)
        return -1 if found is None else found[1]

    def written(self, tp: TopicPartition, state: PartitionState) -> None:
        """Record a state the store accepted (a create makes version 0, a set adds one)."""
        self.states[tp] = (state, self.version(tp) + 1)
        self.written_at.pop(tp, None)

    def bounced(self, tp: TopicPartition) -> list[int]:
        """The ISR members of `tp` (its leader among them) registered now under a broker
        epoch newer than the last write of `tp`'s state: they restarted, or their session
        expired, after it was written."""
        state = self.state(tp)
        written = self.written_at.get(tp, 0)
        if state is None or written <= 0:
            return []
        members = dict.fromkeys([*state.isr, state.leader])
        return [b for b in members if b in self.live and self.live[b].broker_epoch > written]

    def offline_replicas(self, tp: TopicPartition) -> list[int]:
        return [
            r for r in self.replicas(tp) if r not in self.live or tp in self.offline_on.get(r, ())
        ]

    def usable_for(self, tp: TopicPartition) -> set[int]:
        """Brokers that may lead `tp`: usable, and its replica there not offline."""
        return {b for b in self.usable() if tp not in self.offline_on.get(b, ())}

    def usable(self) -> set[int]:
        """Brokers that may lead: alive and not shutting down."""
        return set(self.live) - self.shutting_down


def initial_states(ctx: ControllerContext, topic: str) -> dict[TopicPartition, PartitionState]:
    """Leader and ISR of a new topic's partitions that have no state yet."""
    out = {}
    usable = ctx.usable()
    for tp in ctx.partitions_of(topic):
        if ctx.state(tp) is not None:
            continue
        alive = [r for r in ctx.replicas(tp) if r in usable]
        leader = alive[0] if alive else NO_LEADER
        out[tp] = PartitionState(leader, 0, alive, ctx.epoch)
    return out


def elect_offline(
    ctx: ControllerContext,
    partitions: Collection[TopicPartition],
    unclean_allowed: Callable[[str], bool],
) -> dict[TopicPartition, PartitionState]:
    """Offline elections for those of `partitions` whose leader is not alive. A leader that
    is shutting down is alive: it keeps leading until its controlled shutdown moves the
    leadership (`move_leadership_off`, which leaves it where no other ISR member can take
    it, as Kafka does) or it dies — an offline election here would take a partition whose
    only ISR member it is offline while that broker still serves it (finding 6 of
    docs/fault-suite.md). A leader whose replica's log directory failed (KIP-112) is not
    serving it. Candidates are the usable brokers: alive, not shutting down, the replica's
    directory online."""
    out = {}
    for tp in partitions:
        current = ctx.state(tp)
        if current is None or tp[0] in ctx.deleting:
            continue
        if current.leader in ctx.live and tp not in ctx.offline_on.get(current.leader, ()):
            continue  # its leader serves it
        usable = ctx.usable_for(tp)
        elected = offline_election(
            ctx.replicas(tp), current.isr, usable, unclean_allowed=unclean_allowed(tp[0])
        )
        if elected is not None:
            out[tp] = next_state(current, elected, ctx.epoch)
        elif current.leader != NO_LEADER:
            out[tp] = offline_state(current, ctx.epoch)
    return out


def on_brokers_failed(
    ctx: ControllerContext, dead: Collection[int], unclean_allowed: Callable[[str], bool]
) -> dict[TopicPartition, PartitionState]:
    """New leaders where the dead led, and the dead out of every other ISR."""
    affected = [tp for tp in ctx.partitions() if any(b in ctx.replicas(tp) for b in dead)]
    out = elect_offline(ctx, affected, unclean_allowed)
    for tp in affected:
        current = ctx.state(tp)
        if tp in out or current is None or tp[0] in ctx.deleting:
            continue
        isr = [r for r in current.isr if r not in dead]
        if isr != current.isr and isr:
            out[tp] = next_state(current, Elected(current.leader, isr), ctx.epoch)
    return out


def on_bounced(
    ctx: ControllerContext,
    partitions: Collection[TopicPartition],
    unclean_allowed: Callable[[str], bool],
) -> dict[TopicPartition, PartitionState]:
    """Those of `partitions` with ISR members that restarted since their state was written
    (`ControllerContext.bounced`): they leave the ISR; where one led, the first other live
    ISR member leads, or none (offline, the ISR the others: the partition waits for a replica
    that holds what was acknowledged; with unclean election allowed the bounced leader keeps
    leading instead, availability first). Nothing changes where they are the whole ISR."""
    out = {}
    for tp in partitions:
        current = ctx.state(tp)
        gone = ctx.bounced(tp)
        if current is None or not gone or tp[0] in ctx.deleting:
            continue
        rest = [r for r in current.isr if r not in gone]
        if not rest:
            continue
        if current.leader not in gone:
            out[tp] = next_state(current, Elected(current.leader, rest), ctx.epoch)
            continue
        elected = offline_election(ctx.replicas(tp), rest, ctx.usable_for(tp) - set(gone))
        if elected is not None:
            out[tp] = next_state(current, elected, ctx.epoch)
        elif not unclean_allowed(tp[0]):
            out[tp] = PartitionState(NO_LEADER, current.leader_epoch + 1, rest, ctx.epoch)
    return out


def move_leadership_off(
    ctx: ControllerContext, broker_id: int
) -> dict[TopicPartition, PartitionState]:
    """Controlled shutdown of `broker_id`: elect elsewhere where it leads (if any other ISR
    member can), and take it out of the other ISRs."""
    out = {}
    for tp in ctx.partitions_on(broker_id):
        current = ctx.state(tp)
        if current is None or tp[0] in ctx.deleting or len(ctx.replicas(tp)) < 2:
            continue
        if current.leader == broker_id:
            elected = controlled_shutdown_election(
                ctx.replicas(tp), current.isr, ctx.shutting_down | {broker_id}
            )
            if elected is not None:
                out[tp] = next_state(current, elected, ctx.epoch)
        elif broker_id in current.isr:
            isr = [r for r in current.isr if r != broker_id]
            out[tp] = next_state(current, Elected(current.leader, isr), ctx.epoch)
    return out


def on_replicas_offline(
    ctx: ControllerContext,
    broker_id: int,
    partitions: Collection[TopicPartition],
    unclean_allowed: Callable[[str], bool],
) -> dict[TopicPartition, PartitionState]:
    """KIP-112: `broker_id`'s replicas of `partitions` are offline (recorded in
    `ctx.offline_on` first): new leaders where it led, and it leaves the other ISRs."""
    out = elect_offline(ctx, partitions, unclean_allowed)
    for tp in partitions:
        current = ctx.state(tp)
        if tp in out or current is None or tp[0] in ctx.deleting:
            continue
        isr = [r for r in current.isr if r != broker_id]
        if isr != current.isr and isr:
            out[tp] = next_state(current, Elected(current.leader, isr), ctx.epoch)
    return out
