"""Partition reassignment, as design doc 000 describes it: pure decisions, one step at a time.

Terms: AR, the assigned replicas (the topic znode's list); OAR, the original replicas before
the move; RAR, the reassigned (target) replicas. The target of each pending move is kept in
`/admin/reassign_partitions`; while it runs, the topic znode holds AR = OAR + RAR with Kafka's
`adding_replicas` (RAR - OAR) and `removing_replicas` (OAR - RAR), so OAR and RAR can always
be read back (`Assignment.origin`, `Assignment.target`) — a new target replaces the old
one against the same OAR, and cancelling is a move back to OAR.

`next_step` looks at one partition — its assignment, its target, its leader/ISR state, the
live brokers — and returns the single step that moves it forward; the controller applies it
and asks again until the answer is `Wait` or `Done`. Because each answer depends only on
what is persisted (plus whether the move was started in this controller's term), a
controller that crashes anywhere resumes on the next one:

1. `Start`: AR = OAR + RAR (with adding/removing) and a leader epoch bump written together,
   then LeaderAndIsr to all of AR, so the new replicas start fetching and the leader learns
   of them. Replicas that an earlier target added but this one drops are stopped and deleted
   (and leave the ISR; if one leads, leadership moves within the new AR first). Also run
   once per controller term for a move already started, as the leader may have missed it.
2. `Wait` until every RAR replica is in the ISR (the leader adds them as they catch up).
3. `Elect`: if the leader is not in RAR (or not alive), a leader from RAR, epoch bumped.
4. `Complete`: OAR - RAR leave the ISR (epoch bumped, LeaderAndIsr naming AR = RAR), are
   stopped and deleted; then AR = RAR is written — last, the only place AR is persisted —
   and the partition's entry leaves `/admin/reassign_partitions`.
A step never chooses a leader outside the ISR, and the ISR never loses a RAR replica.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from riverlog.controller.partition_leader_election import Elected, next_state, reassignment_election
from riverlog.metadata.layout import PartitionState


@dataclass(frozen=True)
class Assignment:
    """A partition's replicas as the topic znode holds them (KIP-455 fields)."""

    replicas: list[int]
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)

    @property
    def origin(self) -> list[int]:
        """OAR: what the partition had before the move (AR itself when none runs)."""
        return [r for r in self.replicas if r not in self.adding]

    @property
    def target(self) -> list[int]:
        """RAR: what it will have after the move."""
        return [r for r in self.replicas if r not in self.removing]

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)


def moving_to(current: Assignment, target: Sequence[int]) -> Assignment:
    """The assignment while moving from `current`'s origin to `target`: AR = RAR + OAR
    (target order first), adding = RAR - OAR, removing = OAR - RAR."""
    origin = current.origin
    return Assignment(
        list(dict.fromkeys([*target, *origin])),
        [r for r in target if r not in origin],
        [r for r in origin if r not in target],
    )


def invalid_target(target: Sequence[int], brokers: Collection[int]) -> str | None:
    """Why `target` cannot be a partition's replica list (None: it can)."""
    if not target:
        return "The replica list is empty."
    if len(set(target)) != len(target):
        return f"The replica list {list(target)} has duplicate brokers."
    unknown = sorted(set(target) - set(brokers))
    if unknown:
        return f"The replica list {list(target)} has brokers {unknown} that are not registered."
    return None


@dataclass(frozen=True)
class Start:
    assignment: Assignment
    state: PartitionState
    dropped: list[int]
    """Replicas of an earlier target that this one no longer wants: stop and delete."""


@dataclass(frozen=True)
class Wait:
    reason: str


@dataclass(frozen=True)
class Elect:
    state: PartitionState


@dataclass(frozen=True)
class Complete:
    state: PartitionState | None
    """The ISR without the removed replicas (None: nothing to remove)."""
    removed: list[int]
    assignment: Assignment


@dataclass(frozen=True)
class Done:
    """Nothing (more) to do: the entry leaves `/admin/reassign_partitions`."""


Step = Start | Wait | Elect | Complete | Done


def next_step(
    current: Assignment,
    target: Sequence[int],
    state: PartitionState | None,
    live: Collection[int],
    controller_epoch: int,
    *,
    started: bool,
) -> Step:
    """The next step moving a partition with assignment `current` and leader/ISR `state` to
    `target`; `started`: Start was applied in this controller's term for this target."""
    target = list(target)
    if not current.moving and current.replicas == target:
        return Done()
    if state is None:
        return Wait("the partition has no leader and ISR yet")
    wanted = moving_to(current, target)
    if current != wanted or not started:
        return _start(current, wanted, state, live, controller_epoch)
    missing = [r for r in target if r not in state.isr]
    if missing:
        return Wait(f"replicas {missing} are not in the ISR {state.isr} yet")
    if state.leader not in target or state.leader not in live:
        elected = reassignment_election(target, state.isr, live)
        if elected is None:
            return Wait(f"no live replica of {target} in the ISR {state.isr} can lead")
        return Elect(next_state(state, elected, controller_epoch))
    removed = [r for r in current.replicas if r not in target]
    shrunk = None
    if removed:
        isr = [r for r in state.isr if r not in removed]
        shrunk = next_state(state, Elected(state.leader, isr), controller_epoch)
    return Complete(shrunk, removed, Assignment(target))


def _start(
    current: Assignment,
    wanted: Assignment,
    state: PartitionState,
    live: Collection[int],
    controller_epoch: int,
) -> Step:
    dropped = [r for r in current.replicas if r not in wanted.replicas]
    isr = [r for r in state.isr if r not in dropped]
    leader = state.leader
    if leader in dropped or leader not in live:
        elected = reassignment_election(wanted.replicas, isr, live)
        if elected is None:
            if leader in dropped:
                return Wait(
                    f"no replica of {wanted.replicas} in the ISR can take over from leader {leader}"
                )
        else:
            leader, isr = elected.leader, elected.isr
    return Start(wanted, next_state(state, Elected(leader, isr), controller_epoch), dropped)
