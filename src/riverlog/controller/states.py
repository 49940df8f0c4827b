"""The controller's partition and replica state machines: the states and the legal moves
between them, as tables (Kafka's PartitionStateMachine / ReplicaStateMachine).

A move not in the table is a controller bug, raised as `IllegalTransition` — the caller logs
it to the state-change log and leaves the state as it was, as Kafka does. The tables say
*which* moves are legal; what a move does (elections, requests to brokers, store writes) is
decided elsewhere in the controller.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from typing import Generic, TypeVar


class PartitionState(enum.Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


class ReplicaState(enum.Enum):
    NON_EXISTENT = "NonExistentReplica"
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"


P, R = PartitionState, ReplicaState

PARTITION_MOVES: dict[PartitionState, frozenset[PartitionState]] = {
    P.NEW: frozenset({P.NON_EXISTENT}),
    P.ONLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.OFFLINE: frozenset({P.NEW, P.ONLINE, P.OFFLINE}),
    P.NON_EXISTENT: frozenset({P.OFFLINE}),
}
"""target state → the states it may be entered from."""

REPLICA_MOVES: dict[ReplicaState, frozenset[ReplicaState]] = {
    R.NEW: frozenset({R.NON_EXISTENT}),
    R.ONLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.OFFLINE: frozenset({R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}),
    R.DELETION_STARTED: frozenset({R.OFFLINE}),
    R.DELETION_SUCCESSFUL: frozenset({R.DELETION_STARTED}),
    R.DELETION_INELIGIBLE: frozenset({R.OFFLINE, R.DELETION_STARTED}),
    R.NON_EXISTENT: frozenset({R.DELETION_SUCCESSFUL}),
}
"""target state → the states it may be entered from."""


class IllegalTransition(Exception):
    def __init__(self, what: object, current: enum.Enum, target: enum.Enum) -> None:
        super().__init__(f"{what}: illegal state transition from {current.value} to {target.value}")


S = TypeVar("S", bound=enum.Enum)


class StateTable(Generic[S]):
    """Current state per partition (or replica); absent means non-existent."""

    def __init__(self, moves: dict[S, frozenset[S]], initial: S) -> None:
        self._moves: dict[S, frozenset[S]] = moves
        self._initial: S = initial
        self._states: dict[Hashable, S] = {}

    def __contains__(self, key: Hashable) -> bool:
        return key in self._states

    def state(self, key: Hashable) -> S:
        return self._states.get(key, self._initial)

    def move(self, key: Hashable, target: S) -> S:
        """Enter `target`; returns the previous state. Illegal moves raise and change nothing."""
        current = self.state(key)
        if current not in self._moves[target]:
            raise IllegalTransition(key, current, target)
        if target is self._initial:
            self._states.pop(key, None)
        else:
            self._states[key] = target
        return current


def partition_states() -> StateTable[PartitionState]:
    return StateTable(PARTITION_MOVES, PartitionState.NON_EXISTENT)


def replica_states() -> StateTable[ReplicaState]:
    return StateTable(REPLICA_MOVES, ReplicaState.NON_EXISTENT)
