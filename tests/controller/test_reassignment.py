"""Partition reassignment's pure steps: design doc 000's worked example step by step, new
targets mid-way, cancelling, replication factor changes, resuming after a controller crash,
and the safety rules over generated inputs."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from riverlog.controller.reassignment import (
    Assignment,
    Complete,
    Done,
    Elect,
    Start,
    Step,
    Wait,
    invalid_target,
    moving_to,
    next_step,
)
from riverlog.metadata.layout import PartitionState

EPOCH = 3


@dataclass
class World:
    """What the store holds for one partition, and the steps applied to it."""

    assignment: Assignment
    state: PartitionState
    live: set[int]
    started: bool = False

    def step(self, target: list[int]) -> Step:
        step = next_step(
            self.assignment, target, self.state, self.live, EPOCH, started=self.started
        )
        if isinstance(step, Start):
            self.assignment, self.state, self.started = step.assignment, step.state, True
        elif isinstance(step, Elect):
            self.state = step.state
        elif isinstance(step, Complete):
            if step.state is not None:
                self.state = step.state
            self.assignment = step.assignment
        return step

    def catch_up(self, *replicas: int) -> None:
        """The leader adds caught-up followers to the ISR (its own write, same epoch)."""
        s = self.state
        self.state = PartitionState(
            s.leader, s.leader_epoch, [*s.isr, *replicas], s.controller_epoch
        )

    def view(self) -> tuple[set[int], int, set[int]]:
        return set(self.assignment.replicas), self.state.leader, set(self.state.isr)


def test_the_worked_example_of_design_doc_000() -> None:
    world = World(Assignment([1, 2, 3]), PartitionState(1, 7, [1, 2, 3], 1), set(range(1, 7)))
    target = [4, 5, 6]
    assert world.view() == ({1, 2, 3}, 1, {1, 2, 3})
    start = world.step(target)
    assert isinstance(start, Start) and start.dropped == []
    assert world.assignment == Assignment([4, 5, 6, 1, 2, 3], [4, 5, 6], [1, 2, 3])
    assert world.view() == ({1, 2, 3, 4, 5, 6}, 1, {1, 2, 3})  # step 2
    assert world.state.leader_epoch == 8 and world.state.controller_epoch == EPOCH
    assert isinstance(world.step(target), Wait)
    world.catch_up(4, 5)
    assert isinstance(world.step(target), Wait)  # 6 is not in the ISR yet
    world.catch_up(6)
    assert world.view() == ({1, 2, 3, 4, 5, 6}, 1, {1, 2, 3, 4, 5, 6})  # step 4
    assert isinstance(world.step(target), Elect)
    assert world.view() == ({1, 2, 3, 4, 5, 6}, 4, {1, 2, 3, 4, 5, 6})  # step 7
    assert world.state.leader_epoch == 9
    complete = world.step(target)
    assert isinstance(complete, Complete) and complete.removed == [1, 2, 3]
    assert complete.state == PartitionState(4, 10, [4, 5, 6], EPOCH)  # step 8
    assert world.view() == ({4, 5, 6}, 4, {4, 5, 6})  # step 10
    assert world.assignment == Assignment([4, 5, 6])
    assert world.step(target) == Done()


def test_a_leader_already_in_the_target_keeps_leading() -> None:
    world = World(Assignment([1, 2, 3]), PartitionState(2, 0, [1, 2, 3], 1), {1, 2, 3, 4})
    target = [4, 2, 3]
    assert isinstance(world.step(target), Start)
    world.catch_up(4)
    complete = world.step(target)
    assert isinstance(complete, Complete)
    assert complete.state == PartitionState(2, 2, [2, 3, 4], EPOCH)
    assert world.assignment.replicas == [4, 2, 3]


def test_changing_the_replication_factor_up_and_down() -> None:
    world = World(Assignment([1, 2]), PartitionState(1, 0, [1, 2], 1), {1, 2, 3})
    assert isinstance(world.step([1, 2, 3]), Start)
    assert world.assignment == Assignment([1, 2, 3], [3], [])
    world.catch_up(3)
    up = world.step([1, 2, 3])
    assert up == Complete(None, [], Assignment([1, 2, 3]))  # nothing leaves the ISR
    world.started = False
    assert isinstance(world.step([3, 1]), Start)
    assert world.assignment == Assignment([3, 1, 2], [], [2])
    assert isinstance(world.step([3, 1]), Complete)
    assert world.view() == ({1, 3}, 1, {1, 3})  # the preferred replica changes, not the leader


def test_a_new_target_midway_drops_what_the_old_one_added() -> None:
    world = World(Assignment([1, 2, 3]), PartitionState(1, 0, [1, 2, 3], 1), set(range(1, 8)))
    world.step([4, 5, 6])
    world.catch_up(4)
    start = world.step([4, 7, 3])
    assert isinstance(start, Start)
    assert start.dropped == [5, 6]
    assert world.assignment == Assignment([4, 7, 3, 1, 2], [4, 7], [1, 2])  # same OAR
    assert world.state.isr == [1, 2, 3, 4]


def test_cancelling_moves_back_to_the_original_replicas() -> None:
    world = World(Assignment([1, 2, 3]), PartitionState(1, 0, [1, 2, 3], 1), set(range(1, 7)))
    world.step([4, 5, 6])
    world.catch_up(4, 5, 6)
    world.step([4, 5, 6])  # elect 4
    assert world.state.leader == 4
    origin = world.assignment.origin
    assert origin == [1, 2, 3]
    start = world.step(origin)
    assert isinstance(start, Start)
    assert start.dropped == [4, 5, 6]
    assert world.state.leader == 1 and world.state.isr == [1, 2, 3]  # leadership came back
    assert world.assignment == Assignment([1, 2, 3])  # AR = OAR already: nothing left
    assert world.step(origin) == Done()


def test_cancelling_waits_when_no_original_replica_can_lead() -> None:
    world = World(Assignment([4, 1], [4], [1]), PartitionState(4, 5, [4], 1), {1, 4})
    assert isinstance(world.step([1]), Wait)


def test_a_new_controller_starts_the_move_again_then_carries_on() -> None:
    world = World(Assignment([1, 2, 3]), PartitionState(1, 0, [1, 2, 3], 1), set(range(1, 7)))
    world.step([4, 5, 6])
    world.catch_up(4, 5, 6)
    world.started = False  # the controller crashed; its successor read the store
    again = world.step([4, 5, 6])
    assert isinstance(again, Start) and again.assignment == world.assignment
    assert again.state.leader_epoch == 2  # the leader hears of the move in any case
    assert isinstance(world.step([4, 5, 6]), Elect)
    # crashed after the ISR shrank but before AR = RAR was written: resumes from there
    moving = world.assignment
    assert isinstance(world.step([4, 5, 6]), Complete)
    world.assignment, world.started = moving, False
    assert isinstance(world.step([4, 5, 6]), Start)
    assert world.step([4, 5, 6]) == Complete(
        PartitionState(4, 6, [4, 5, 6], EPOCH), [1, 2, 3], Assignment([4, 5, 6])
    )


def test_a_dead_leader_is_replaced_from_the_target() -> None:
    world = World(Assignment([1, 2, 3]), PartitionState(1, 0, [1, 2, 3], 1), {1, 2, 3, 4})
    world.step([4, 2])
    world.catch_up(4)
    world.live.discard(1)
    assert world.step([4, 2]) == Elect(PartitionState(4, 2, [2, 3, 4], EPOCH))


def test_no_state_yet_waits_and_an_unchanged_assignment_is_done() -> None:
    assert isinstance(next_step(Assignment([1]), [2], None, {1, 2}, 1, started=False), Wait)
    assert next_step(Assignment([1, 2]), [1, 2], None, {1}, 1, started=False) == Done()


def test_moving_to_and_invalid_targets() -> None:
    assert moving_to(Assignment([1, 2, 3]), [3, 4]) == Assignment([3, 4, 1, 2], [4], [1, 2])
    assert Assignment([3, 4, 1, 2], [4], [1, 2]).origin == [3, 1, 2]
    assert invalid_target([], {1}) == "The replica list is empty."
    assert invalid_target([1, 1], {1}) is not None
    assert invalid_target([1, 9], {1}) is not None and "[9]" in str(invalid_target([1, 9], {1}))
    assert invalid_target([1], {1, 2}) is None


brokers = st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True)


@given(brokers, brokers, st.data())
def test_moves_keep_leaders_in_the_isr_and_finish_at_the_target(
    origin: list[int], target: list[int], data: st.DataObject
) -> None:
    live = set(range(1, 7))
    world = World(Assignment(origin), PartitionState(origin[0], 0, list(origin), 1), live)
    for _ in range(12):
        step = world.step(target)
        state = world.state
        assert state.leader in state.isr
        if isinstance(step, Done):
            break
        if isinstance(step, Wait):
            lagging = [r for r in world.assignment.replicas if r not in state.isr]
            world.catch_up(*data.draw(st.lists(st.sampled_from(lagging), min_size=1, unique=True)))
    assert world.assignment == Assignment(target)
    assert set(world.state.isr) == set(target) and world.state.leader in target
