"""Leader elections on demand and the automatic leader rebalance, as pure decisions.

An operator asks for elections through the ElectLeaders API or `/admin/preferred_replica_election`;
the controller asks for preferred elections itself when leadership drifts from the preferred
replicas (`auto.leader.rebalance.enable`). Each asked-for partition gets an `Outcome` with
Kafka's error code:

- UNKNOWN_TOPIC_OR_PARTITION: the controller knows no state for it;
- INVALID_TOPIC_EXCEPTION: its topic is being deleted;
- ELECTION_NOT_NEEDED: preferred — the preferred replica (first assigned) already leads;
  unclean — a usable broker already leads;
- otherwise an election (`plan` says which, `decide` returns the states to write) whose
  result is read back from the context after the write (`outcomes`): NONE with the new
  leader, or PREFERRED_LEADER_NOT_AVAILABLE (preferred replica down, shutting down or out of
  the ISR) / ELIGIBLE_LEADERS_NOT_AVAILABLE (unclean with no live replica).

A preferred election never picks a replica outside the ISR; an unclean one first tries the
live ISR and only then any live replica (`controller/partition_leader_election.py`).

Leader imbalance, as Kafka measures it: for each broker, of the partitions whose preferred
replica it is, the share it does not lead. Above `leader.imbalance.per.broker.percentage`,
those partitions get a preferred election — only where the preferred replica is usable and
in the ISR, so a rebalance never waits on, or elects, a replica that is behind.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from riverlog.controller.context import ControllerContext
from riverlog.controller.partition_leader_election import (
    next_state,
    offline_election,
    preferred_election,
)
from riverlog.metadata.layout import PartitionState
from riverlog.model import NO_LEADER, TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode

PREFERRED, UNCLEAN = 0, 1
ELECTION_TYPES = {PREFERRED: "PREFERRED", UNCLEAN: "UNCLEAN"}
_STRATEGIES = {
    PREFERRED: "PreferredReplicaPartitionLeaderElectionStrategy",
    UNCLEAN: "OfflinePartitionLeaderElectionStrategy(true)",
}


@dataclass(frozen=True, slots=True)
class Outcome:
    error: ErrorCode
    message: str | None = None
    leader: int = NO_LEADER
    """The leader elected (with error NONE)."""


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _led_as_wanted(ctx: ControllerContext, tp: TopicPartition, election_type: int) -> bool:
    state = ctx.state(tp)
    assert state is not None
    if election_type == PREFERRED:
        replicas = ctx.replicas(tp)
        return bool(replicas) and state.leader == replicas[0]
    return state.leader in ctx.usable()


def plan(
    ctx: ControllerContext, partitions: Iterable[TopicPartition] | None, election_type: int
) -> tuple[list[TopicPartition], dict[TopicPartition, Outcome]]:
    """(partitions to hold an election for, outcomes of those that need none); `None` asks
    for every partition the controller knows."""
    wanted = ctx.partitions() if partitions is None else list(dict.fromkeys(partitions))
    electable: list[TopicPartition] = []
    answered: dict[TopicPartition, Outcome] = {}
    for tp in wanted:
        if ctx.state(tp) is None or not ctx.replicas(tp):
            answered[tp] = Outcome(
                error_codes.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
            )
        elif tp[0] in ctx.deleting:
            answered[tp] = Outcome(
                error_codes.INVALID_TOPIC_EXCEPTION, "The topic is being deleted"
            )
        elif _led_as_wanted(ctx, tp, election_type):
            answered[tp] = Outcome(error_codes.ELECTION_NOT_NEEDED)
        else:
            electable.append(tp)
    return electable, answered


def decide(
    ctx: ControllerContext, partitions: Iterable[TopicPartition], election_type: int
) -> dict[TopicPartition, PartitionState]:
    """The new states of `partitions` where the election finds a leader."""
    out = {}
    usable = ctx.usable()
    for tp in partitions:
        current = ctx.state(tp)
        if current is None or tp[0] in ctx.deleting or _led_as_wanted(ctx, tp, election_type):
            continue
        if election_type == PREFERRED:
            elected = preferred_election(ctx.replicas(tp), current.isr, usable)
        else:
            elected = offline_election(ctx.replicas(tp), current.isr, usable, unclean_allowed=True)
        if elected is not None:
            out[tp] = next_state(current, elected, ctx.epoch)
    return out


def outcomes(
    ctx: ControllerContext, partitions: Iterable[TopicPartition], election_type: int
) -> dict[TopicPartition, Outcome]:
    """After the elections were written: who leads each partition now, or why nobody new."""
    failed = (
        error_codes.PREFERRED_LEADER_NOT_AVAILABLE
        if election_type == PREFERRED
        else error_codes.ELIGIBLE_LEADERS_NOT_AVAILABLE
    )
    out = {}
    for tp in partitions:
        state = ctx.state(tp)
        if state is not None and _led_as_wanted(ctx, tp, election_type):
            out[tp] = Outcome(error_codes.NONE, None, state.leader)
        else:
            out[tp] = Outcome(
                failed,
                f"Failed to elect leader for partition {_name(tp)} "
                f"under strategy {_STRATEGIES[election_type]}",
            )
    return out


def preferred_partitions(ctx: ControllerContext) -> dict[int, list[TopicPartition]]:
    """Broker → the partitions whose preferred replica it is (topics being deleted left out)."""
    preferred: dict[int, list[TopicPartition]] = {}
    for tp in ctx.partitions():
        replicas = ctx.replicas(tp)
        if replicas and tp[0] not in ctx.deleting:
            preferred.setdefault(replicas[0], []).append(tp)
    return preferred


def rebalance_candidates(ctx: ControllerContext, percentage: int) -> list[TopicPartition]:
    """Partitions to give back to their preferred replica: those of each broker whose
    imbalance ratio is above `percentage`, where that replica is usable and in the ISR, and
    the partition is not being reassigned (the move picks its leader, as in Kafka)."""
    usable = ctx.usable()
    moving = {(t, p) for t, info in ctx.topics.items() for p in (*info.adding, *info.removing)}
    out = []
    for broker, preferred in sorted(preferred_partitions(ctx).items()):
        drifted = [
            (tp, state)
            for tp in preferred
            if (state := ctx.state(tp)) is not None and state.leader != broker
        ]
        if len(drifted) / len(preferred) <= percentage / 100:
            continue
        out += [
            tp
            for tp, state in drifted
            if tp not in moving
            and preferred_election(ctx.replicas(tp), state.isr, usable) is not None
        ]
    return out
