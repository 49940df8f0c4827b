"""Partition leader elections, as pure functions (Kafka's PartitionLeaderElectionAlgorithms).

Each election takes a partition's replica assignment (preferred replica first), its ISR and
which brokers are alive, and returns the new leader and ISR, or None when no replica may lead.
The controller applies the result with the leader epoch bumped and its own epoch stamped
(`next_state`), writes it version-checked, and tells the brokers.

- offline: the first assigned replica that is alive and in the ISR; with
  `unclean.leader.election.enable` (off by default) any alive assigned replica, losing
  whatever the ISR had that it lacks — the ISR becomes just the new leader.
- reassignment: the first replica of the target assignment that is alive and in the ISR.
- preferred: the first assigned replica, if it is alive and in the ISR; otherwise nothing
  (preferred election never moves leadership anywhere else).
- controlled shutdown: the first assigned replica in the ISR that is not shutting down; the
  shutting-down brokers leave the ISR.
A leader is never chosen outside the ISR except by an explicit unclean election.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from riverlog.metadata.layout import PartitionState
from riverlog.model import NO_LEADER


@dataclass(frozen=True, slots=True)
class Elected:
    leader: int
    isr: list[int]
    unclean: bool = False


def _alive_isr(isr: Sequence[int], live: Collection[int]) -> list[int]:
    return [r for r in isr if r in live]


def offline_election(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    *,
    unclean_allowed: bool = False,
) -> Elected | None:
    for replica in assignment:
        if replica in live and replica in isr:
            return Elected(replica, _alive_isr(isr, live))
    if unclean_allowed:
        for replica in assignment:
            if replica in live:
                return Elected(replica, [replica], unclean=True)
    return None


def reassignment_election(
    target: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> Elected | None:
    for replica in target:
        if replica in live and replica in isr:
            return Elected(replica, _alive_isr(isr, live))
    return None


def preferred_election(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> Elected | None:
    if assignment and assignment[0] in live and assignment[0] in isr:
        return Elected(assignment[0], _alive_isr(isr, live))
    return None


def controlled_shutdown_election(
    assignment: Sequence[int], isr: Sequence[int], shutting_down: Collection[int]
) -> Elected | None:
    remaining = [r for r in isr if r not in shutting_down]
    for replica in assignment:
        if replica in remaining:
            return Elected(replica, remaining)
    return None


def next_state(
    current: PartitionState | None, elected: Elected, controller_epoch: int
) -> PartitionState:
    """The partition state to write: the new leader and ISR with the leader epoch bumped."""
    epoch = 0 if current is None else current.leader_epoch + 1
    return PartitionState(elected.leader, epoch, list(elected.isr), controller_epoch)


def offline_state(current: PartitionState, controller_epoch: int) -> PartitionState:
    """No replica may lead: the leader becomes -1 (the ISR keeps its last member, as Kafka
    does, so a clean election can happen when that broker returns)."""
    return PartitionState(
        NO_LEADER, current.leader_epoch + 1, list(current.isr[-1:]), controller_epoch
    )
