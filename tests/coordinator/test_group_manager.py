"""The pure group state machine: joins, syncs, heartbeats, leaves and timers, by `now_ms`."""

from __future__ import annotations

import itertools

import pytest

from riverlog.coordinator.group import (
    VALID_PREVIOUS_STATES,
    Group,
    GroupState,
    IllegalTransitionError,
    JoinResult,
    Outbox,
    SyncResult,
)
from riverlog.coordinator.group_manager import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    GroupConfig,
    GroupManager,
    JoinRequest,
)
from riverlog.coordinator.offsets import OffsetCache
from riverlog.coordinator.records import StoredOffset
from riverlog.protocol import error_codes

SESSION = 10_000
REBALANCE = 30_000
RANGE = [("range", b"r")]


def manager(delay_ms: int = 0, max_size: int = 2**31 - 1) -> GroupManager:
    counter = itertools.count(1)
    return GroupManager(
        GroupConfig(initial_rebalance_delay_ms=delay_ms, max_size=max_size),
        new_member_id=lambda prefix: f"{prefix}-{next(counter)}",
    )


def request(
    member_id: str = "",
    *,
    group: str = "g",
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
    session: int = SESSION,
    known_id_required: bool = False,
    client: str = "c",
    rebalance: int = REBALANCE,
) -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        group_instance_id=instance,
        client_id=client,
        client_host="/127.0.0.1",
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type=protocol_type,
        protocols=RANGE if protocols is None else protocols,
        require_known_member_id=known_id_required,
    )


def reply(box: Outbox, waiter: object) -> JoinResult | SyncResult | None:
    found = [result for w, result in box.replies if w is waiter]
    assert len(found) <= 1
    return found[0] if found else None


def join(mgr: GroupManager, now: int, req: JoinRequest) -> tuple[object, Outbox]:
    waiter = object()
    return waiter, mgr.join(now, req, waiter)


def joined(mgr: GroupManager, now: int, req: JoinRequest) -> JoinResult:
    waiter, box = join(mgr, now, req)
    result = reply(box, waiter)
    assert isinstance(result, JoinResult), box
    return result


def sync(
    mgr: GroupManager,
    now: int,
    result: JoinResult,
    assignments: dict[str, bytes] | None = None,
    group: str = "g",
) -> tuple[object, Outbox]:
    waiter = object()
    box = mgr.sync(
        now,
        group,
        result.generation,
        result.member_id,
        None,
        (None, None),
        assignments or {},
        waiter,
    )
    return waiter, box


def stable_group_of_one(mgr: GroupManager, now: int = 0) -> JoinResult:
    result = joined(mgr, now, request(client="a"))
    waiter, box = sync(mgr, now, result, {result.member_id: b"A"})
    assert reply(box, waiter) == SyncResult(error_codes.NONE, "consumer", "range", b"A")
    return result


def test_first_join_answers_with_a_new_member_id_when_known_ids_are_required() -> None:
    mgr = manager()
    first = joined(mgr, 0, request(known_id_required=True))
    assert first.error is error_codes.MEMBER_ID_REQUIRED
    assert first.member_id == "c-1"
    second = joined(mgr, 5, request(first.member_id, known_id_required=True))
    assert second.error is error_codes.NONE
    assert (second.member_id, second.generation, second.leader_id) == ("c-1", 1, "c-1")
    assert [j.member_id for j in second.members] == ["c-1"]
    group = mgr.get("g")
    assert group is not None and group.is_(GroupState.COMPLETING_REBALANCE)


def test_a_pending_member_id_expires_after_the_session_timeout() -> None:
    mgr = manager()
    first = joined(mgr, 0, request(known_id_required=True))
    mgr.expire(SESSION)
    late = joined(mgr, SESSION + 1, request(first.member_id, known_id_required=True))
    assert late.error is error_codes.UNKNOWN_MEMBER_ID


def test_leader_sync_hands_out_assignments_and_makes_the_group_stable() -> None:
    mgr = manager()
    leader = stable_group_of_one(mgr)
    group = mgr.get("g")
    assert group is not None and group.is_(GroupState.STABLE)
    waiter, box = sync(mgr, 10, leader)
    assert reply(box, waiter) == SyncResult(error_codes.NONE, "consumer", "range", b"A")
    assert box.persist == []


def test_sync_is_answered_only_after_the_group_is_stored() -> None:
    mgr = manager()
    result = joined(mgr, 0, request())
    _, box = sync(mgr, 1, result, {result.member_id: b"A"})
    assert box.persist == ["g"]


def test_a_second_member_triggers_a_rebalance_that_waits_for_the_first() -> None:
    mgr = manager()
    a = stable_group_of_one(mgr)
    waiter_b, box = join(mgr, 100, request(client="b"))
    assert reply(box, waiter_b) is None
    assert mgr.heartbeat(200, "g", a.generation, a.member_id, None) is (
        error_codes.REBALANCE_IN_PROGRESS
    )
    waiter_a, box = join(mgr, 300, request(a.member_id))
    ra, rb = reply(box, waiter_a), reply(box, waiter_b)
    assert isinstance(ra, JoinResult) and isinstance(rb, JoinResult)
    assert ra.generation == rb.generation == 2
    assert ra.leader_id == a.member_id
    assert {j.member_id for j in ra.members} == {a.member_id, rb.member_id}
    assert rb.members == ()


def test_a_member_that_does_not_rejoin_is_removed_when_the_rebalance_timeout_ends() -> None:
    mgr = manager()
    a = stable_group_of_one(mgr)
    waiter_b, box = join(mgr, 1_000, request(client="b"))
    assert reply(box, waiter_b) is None
    assert mgr.next_deadline_ms() is not None
    box = mgr.expire(1_000 + REBALANCE)
    rb = reply(box, waiter_b)
    assert isinstance(rb, JoinResult) and rb.error is error_codes.NONE
    assert rb.leader_id == rb.member_id and rb.generation == 2
    late = joined(mgr, 1_000 + REBALANCE + 1, request(a.member_id))
    assert late.error is error_codes.UNKNOWN_MEMBER_ID


def test_a_silent_member_is_removed_after_its_session_timeout() -> None:
    mgr = manager()
    a = stable_group_of_one(mgr)
    assert mgr.heartbeat(SESSION - 1, "g", 1, a.member_id, None) is error_codes.NONE
    mgr.expire(2 * SESSION - 2)
    assert a.member_id in mgr.get("g").members  # type: ignore[union-attr]
    mgr.expire(2 * SESSION - 1)
    group = mgr.get("g")
    assert group is not None and not group.members
    assert group.is_(GroupState.EMPTY) and group.generation == 2
    assert mgr.heartbeat(2 * SESSION, "g", 1, a.member_id, None) is error_codes.UNKNOWN_MEMBER_ID


def test_fencing_by_generation_and_member_id() -> None:
    mgr = manager()
    a = stable_group_of_one(mgr)
    assert mgr.heartbeat(1, "g", 0, a.member_id, None) is error_codes.ILLEGAL_GENERATION
    assert mgr.heartbeat(1, "g", 1, "nobody", None) is error_codes.UNKNOWN_MEMBER_ID
    assert mgr.heartbeat(1, "other", 1, a.member_id, None) is error_codes.UNKNOWN_MEMBER_ID
    waiter, box = sync(mgr, 1, JoinResult(error_codes.NONE, a.member_id, 7))
    assert reply(box, waiter) == SyncResult(error_codes.ILLEGAL_GENERATION)
    join(mgr, 2, request(client="b"))
    waiter, box = sync(mgr, 3, a)
    assert reply(box, waiter) == SyncResult(error_codes.REBALANCE_IN_PROGRESS)


def test_the_initial_delay_waits_for_more_members_then_completes() -> None:
    mgr = manager(delay_ms=3_000)
    waiter_a, box = join(mgr, 0, request(client="a"))
    assert reply(box, waiter_a) is None
    waiter_b, _ = join(mgr, 1_000, request(client="b"))
    assert mgr.expire(2_999).replies == []
    assert mgr.expire(3_000).replies == []  # b arrived during the delay: wait once more
    box = mgr.expire(6_000)
    results = [reply(box, waiter_a), reply(box, waiter_b)]
    assert all(isinstance(r, JoinResult) and r.generation == 1 for r in results)


def test_protocol_selection_uses_only_protocols_every_member_supports() -> None:
    mgr = manager(delay_ms=1)
    both = [("range", b"1"), ("roundrobin", b"2")]
    join(mgr, 0, request(protocols=both, client="a"))
    join(mgr, 0, request(protocols=[("roundrobin", b"3"), ("range", b"4")], client="b"))
    waiter, _ = join(mgr, 0, request(protocols=[("roundrobin", b"5")], client="c"))
    assert mgr.expire(10).replies == []  # members arrived during the delay: one more
    box = mgr.expire(20)
    result = reply(box, waiter)
    assert isinstance(result, JoinResult) and result.protocol_name == "roundrobin"


def test_bad_joins_get_kafkas_error_codes() -> None:
    mgr = manager()
    assert joined(mgr, 0, request(group="")).error is error_codes.INVALID_GROUP_ID
    assert joined(mgr, 0, request(session=1)).error is error_codes.INVALID_SESSION_TIMEOUT
    assert joined(mgr, 0, request(session=10**8)).error is error_codes.INVALID_SESSION_TIMEOUT
    assert joined(mgr, 0, request(protocols=[])).error is error_codes.INCONSISTENT_GROUP_PROTOCOL
    assert joined(mgr, 0, request(protocol_type="")).error is (
        error_codes.INCONSISTENT_GROUP_PROTOCOL
    )
    assert joined(mgr, 0, request("stranger")).error is error_codes.UNKNOWN_MEMBER_ID
    assert mgr.get("g") is None  # refused joins leave no group behind
    stable_group_of_one(mgr)
    assert joined(mgr, 1, request(protocol_type="connect")).error is (
        error_codes.INCONSISTENT_GROUP_PROTOCOL
    )
    assert joined(mgr, 1, request(protocols=[("sticky", b"")])).error is (
        error_codes.INCONSISTENT_GROUP_PROTOCOL
    )


def test_group_max_size_refuses_extra_members() -> None:
    mgr = manager(max_size=1)
    stable_group_of_one(mgr)
    assert joined(mgr, 1, request(client="b")).error is error_codes.GROUP_MAX_SIZE_REACHED


def test_a_static_member_restarting_in_time_keeps_its_assignment_without_a_rebalance() -> None:
    mgr = manager()
    first = joined(mgr, 0, request(instance="i1"))
    sync(mgr, 0, first, {first.member_id: b"A"})
    again = joined(mgr, 5_000, request(instance="i1"))
    assert again.error is error_codes.NONE
    assert again.member_id != first.member_id
    assert again.generation == first.generation  # no new generation: no rebalance
    group = mgr.get("g")
    assert group is not None and group.is_(GroupState.STABLE)
    waiter, box = sync(mgr, 5_001, again)
    assert reply(box, waiter) == SyncResult(error_codes.NONE, "consumer", "range", b"A")
    assert mgr.heartbeat(5_002, "g", 1, first.member_id, "i1") is error_codes.FENCED_INSTANCE_ID


def test_a_static_member_that_stays_away_is_removed_after_its_session() -> None:
    mgr = manager()
    first = joined(mgr, 0, request(instance="i1"))
    sync(mgr, 0, first, {first.member_id: b"A"})
    mgr.expire(SESSION)
    group = mgr.get("g")
    assert group is not None and not group.members and not group.static_members


def test_leaving_rebalances_the_rest_and_moves_the_leadership() -> None:
    mgr = manager(delay_ms=1)
    waiter_a, _ = join(mgr, 0, request(client="a"))
    waiter_b, _ = join(mgr, 0, request(client="b"))
    mgr.expire(2)
    box = mgr.expire(5)
    ra, rb = reply(box, waiter_a), reply(box, waiter_b)
    assert isinstance(ra, JoinResult) and isinstance(rb, JoinResult)
    sync(mgr, 6, ra, {ra.member_id: b"A", rb.member_id: b"B"})
    errors, box = mgr.leave(10, "g", [(ra.member_id, None), ("ghost", None)])
    assert errors == [error_codes.NONE, error_codes.UNKNOWN_MEMBER_ID]
    group = mgr.get("g")
    assert group is not None and group.leader_id == rb.member_id
    assert group.is_(GroupState.PREPARING_REBALANCE)
    waiter, box = join(mgr, 11, request(rb.member_id))
    result = reply(box, waiter)
    assert isinstance(result, JoinResult) and result.generation == 2


def test_leave_by_instance_id_alone_removes_a_static_member() -> None:
    mgr = manager()
    first = joined(mgr, 0, request(instance="i1"))
    sync(mgr, 0, first, {first.member_id: b"A"})
    errors, _ = mgr.leave(1, "g", [("", "i1")])
    assert errors == [error_codes.NONE]
    assert not mgr.get("g").members  # type: ignore[union-attr]


def test_a_join_completes_when_the_member_it_waits_for_loses_its_session() -> None:
    mgr = manager(delay_ms=0)
    a = stable_group_of_one(mgr)
    waiter_b, _ = join(mgr, 0, request(client="b"))  # b waits for a, whose session lapses
    assert mgr.expire(SESSION - 1).replies == []
    result = reply(mgr.expire(SESSION), waiter_b)
    assert isinstance(result, JoinResult) and result.error is error_codes.NONE
    assert a.member_id not in mgr.get("g").members  # type: ignore[union-attr]


def test_a_new_member_waiting_in_a_long_join_is_dropped_after_the_join_timeout() -> None:
    mgr = manager(delay_ms=0)
    a = joined(mgr, 0, request(client="a", rebalance=10 * NEW_MEMBER_JOIN_TIMEOUT_MS))
    sync(mgr, 0, a, {a.member_id: b"A"})
    waiter_b, _ = join(mgr, 0, request(client="b"))
    for now in range(5_000, NEW_MEMBER_JOIN_TIMEOUT_MS, 5_000):  # a stays, never rejoins
        assert mgr.heartbeat(now, "g", 1, a.member_id, None) is error_codes.REBALANCE_IN_PROGRESS
        assert reply(mgr.expire(now), waiter_b) is None
    result = reply(mgr.expire(NEW_MEMBER_JOIN_TIMEOUT_MS), waiter_b)
    assert result == JoinResult(error_codes.UNKNOWN_MEMBER_ID, "b-2")


def test_offset_commit_validation() -> None:
    mgr = manager()
    ok = error_codes.NONE
    assert mgr.validate_offset_commit(0, "simple", -1, "", None) is ok
    assert mgr.get("simple") is not None
    assert mgr.validate_offset_commit(0, "nogroup", 3, "m", None) is error_codes.ILLEGAL_GENERATION
    result = joined(mgr, 0, request())
    member = result.member_id
    assert mgr.validate_offset_commit(1, "g", 1, member, None) is error_codes.REBALANCE_IN_PROGRESS
    sync(mgr, 2, result, {member: b""})
    assert mgr.validate_offset_commit(3, "g", 1, member, None) is ok
    assert mgr.validate_offset_commit(3, "g", -1, "", None) is error_codes.UNKNOWN_MEMBER_ID
    assert mgr.validate_offset_commit(3, "g", 0, member, None) is error_codes.ILLEGAL_GENERATION


def test_offset_commits_of_a_member_whose_generation_ended_are_refused() -> None:
    """Finding 13's sequence, by the clock: b's commit is accepted while b is a member of
    generation 2 (and counts as a heartbeat, as Kafka's); b then goes silent, its session
    ends, a rebalances alone into generation 3 — from then on b's commits are refused
    (UNKNOWN_MEMBER_ID), a's with its old generation too (ILLEGAL_GENERATION), and a's of
    generation 3 before its sync get REBALANCE_IN_PROGRESS, as Kafka answers."""
    mgr = manager()
    a = stable_group_of_one(mgr)
    waiter_b, _ = join(mgr, 10, request(client="b"))
    waiter_a, box = join(mgr, 20, request(a.member_id))
    ra, rb = reply(box, waiter_a), reply(box, waiter_b)
    assert isinstance(ra, JoinResult) and isinstance(rb, JoinResult) and ra.generation == 2
    sync(mgr, 30, ra, {ra.member_id: b"A", rb.member_id: b"B"})
    sync(mgr, 30, rb)
    ok = error_codes.NONE
    assert mgr.validate_offset_commit(1_000, "g", 2, rb.member_id, None) is ok
    for now in range(3_000, 1_000 + SESSION, 3_000):  # a heartbeats, b is silent
        assert mgr.heartbeat(now, "g", 2, ra.member_id, None) is ok
    mgr.expire(1_000 + SESSION - 1)  # the commit at 1_000 renewed b's session
    assert rb.member_id in mgr.get("g").members  # type: ignore[union-attr]
    mgr.expire(1_000 + SESSION)
    now = 1_000 + SESSION + 1
    assert mgr.heartbeat(now, "g", 2, ra.member_id, None) is error_codes.REBALANCE_IN_PROGRESS
    assert mgr.validate_offset_commit(now, "g", 2, rb.member_id, None) is (
        error_codes.UNKNOWN_MEMBER_ID
    )
    # PreparingRebalance keeps generation 2 current: its remaining member may still commit.
    assert mgr.validate_offset_commit(now, "g", 2, ra.member_id, None) is ok
    alone = joined(mgr, now, request(ra.member_id))
    assert alone.generation == 3 and [m.member_id for m in alone.members] == [ra.member_id]
    assert mgr.validate_offset_commit(now, "g", 3, ra.member_id, None) is (
        error_codes.REBALANCE_IN_PROGRESS
    )
    assert mgr.validate_offset_commit(now, "g", 2, ra.member_id, None) is (
        error_codes.ILLEGAL_GENERATION
    )
    sync(mgr, now, alone, {ra.member_id: b"AB"})
    assert mgr.validate_offset_commit(now, "g", 3, ra.member_id, None) is ok
    for generation in (2, 3):
        assert mgr.validate_offset_commit(now, "g", generation, rb.member_id, None) is (
            error_codes.UNKNOWN_MEMBER_ID
        )
    assert mgr.validate_offset_commit(now, "g", -1, "", None) is error_codes.UNKNOWN_MEMBER_ID


def test_delete_only_empty_groups() -> None:
    mgr = manager()
    stable_group_of_one(mgr)
    assert mgr.delete("g") is error_codes.NON_EMPTY_GROUP
    assert mgr.delete("missing") is error_codes.GROUP_ID_NOT_FOUND
    mgr.validate_offset_commit(0, "simple", -1, "", None)
    assert mgr.delete("simple") is error_codes.NONE
    assert mgr.get("simple") is None


def test_stored_form_round_trip_restores_a_stable_group() -> None:
    mgr = manager()
    a = stable_group_of_one(mgr)
    stored = mgr.to_stored("g")
    assert stored is not None and stored.generation == 1 and stored.leader == a.member_id
    other = manager()
    other.load("g", stored, 50_000)
    group = other.get("g")
    assert group is not None and group.is_(GroupState.STABLE)
    assert other.heartbeat(50_001, "g", 1, a.member_id, None) is error_codes.NONE
    waiter, box = sync(other, 50_002, a)
    assert reply(box, waiter) == SyncResult(error_codes.NONE, "consumer", "range", b"A")
    other.expire(50_002 + SESSION)
    assert other.get("g").is_(GroupState.EMPTY)  # type: ignore[union-attr]
    assert mgr.to_stored("never") is None


def test_offset_retention_rules() -> None:
    mgr = manager()
    cache = OffsetCache()
    day = 86_400_000

    def offset(at: int, expire: int = -1) -> StoredOffset:
        return StoredOffset(5, -1, "", at, expire)

    mgr.validate_offset_commit(0, "simple", -1, "", None)
    cache.commit("simple", {("t", 0): offset(0), ("t", 1): offset(day)})
    simple = mgr.get("simple")
    assert simple is not None
    assert cache.expired(simple, day, day) == [("t", 0)]
    stable_group_of_one(mgr)
    group = mgr.get("g")
    assert group is not None
    cache.commit("g", {("t", 0): offset(0), ("t", 1): offset(0, expire=10)})
    assert cache.expired(group, 10 * day, day) == []  # an active group keeps its offsets
    mgr.leave(day, "g", [(group.leader_id or "", None)])
    assert group.is_(GroupState.EMPTY)
    assert cache.expired(group, day + 20, day) == [("t", 1)]
    assert sorted(cache.expired(group, 2 * day, day)) == [("t", 0), ("t", 1)]
    assert cache.delete("g", [("t", 0), ("t", 9)]) == [("t", 0)]
    assert cache.delete_group("g") == [("t", 1)] and not cache.has_offsets("g")


# --- the state table ---------------------------------------------------------------------

TRANSITIONS = [
    (before, after, before in VALID_PREVIOUS_STATES[after])
    for before in GroupState
    for after in GroupState
]


@pytest.mark.parametrize(("before", "after", "allowed"), TRANSITIONS)
def test_only_kafkas_valid_previous_states_lead_to_a_state(
    before: GroupState, after: GroupState, allowed: bool
) -> None:
    group = Group("g", now_ms=0)
    group.state = before
    if allowed:
        group.transition(after, now_ms=5)
        assert (group.state, group.state_timestamp_ms) == (after, 5)
    else:
        with pytest.raises(IllegalTransitionError):
            group.transition(after, now_ms=5)
        assert group.state is before


def test_the_table_is_kafkas() -> None:
    expected = {
        ("Empty", "PreparingRebalance"),
        ("PreparingRebalance", "CompletingRebalance"),
        ("PreparingRebalance", "Empty"),
        ("CompletingRebalance", "Stable"),
        ("CompletingRebalance", "PreparingRebalance"),
        ("Stable", "PreparingRebalance"),
        *((state.value, "Dead") for state in GroupState),
    }
    assert {(b.value, a.value) for b, a, allowed in TRANSITIONS if allowed} == expected
