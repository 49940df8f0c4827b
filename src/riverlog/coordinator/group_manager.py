"""The group coordinator's membership logic for many groups: pure, driven by `now_ms`.

`GroupManager` takes the classic-protocol requests (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup), the validation an OffsetCommit needs, and timer expiry, and answers with error
codes and `Outbox`es (see `group.py`): replies for waiting requests, and groups whose stored
form changed. The caller owns the clock, the waiting requests and persistence; this module
never does I/O, so every rule here is testable by calling methods with chosen times.

Rules follow Kafka's GroupCoordinator: KIP-394 (a new member without an id is answered
MEMBER_ID_REQUIRED with one, and the group waits for it to rejoin), KIP-345 static members
(a returning `group.instance.id` takes over its old member without a rebalance when nothing
changed; the old member id is fenced), generation fencing, session timeouts within the
broker's bounds, and the initial rebalance delay for groups starting from Empty.

Timers: `next_deadline_ms()` is the earliest time `expire(now_ms)` has work to do (a member's
session, a pending member id, the end of a join phase); the caller sleeps until then, or until
the next request. The heap may hold stale entries; expiry re-checks each group.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from riverlog.coordinator.group import (
    Group,
    GroupState,
    JoinResult,
    Member,
    Outbox,
    SyncResult,
)
from riverlog.coordinator.records import StoredGroup, StoredMember
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
"""How long a new member waiting in its first join is kept without a heartbeat (Kafka's)."""


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


def random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupManager:
    """All groups this coordinator serves; used from one thread."""

    def __init__(
        self,
        config: GroupConfig,
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        self.config = config
        self._new_member_id = new_member_id
        self._groups: dict[str, Group] = {}
        self._timers: list[tuple[int, str]] = []
        self.completed_rebalances = 0
        """Leaders' SyncGroups that ended a rebalance (Kafka's group-completed-rebalance
        count: recorded when the leader's assignment arrives in CompletingRebalance)."""

    # --- lookups ---------------------------------------------------------------------

    def get(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def __iter__(self) -> Iterator[Group]:
        return iter(list(self._groups.values()))

    def summary(self, group_id: str) -> GroupSummary | None:
        group = self._groups.get(group_id)
        if group is None:
            return None
        stable = group.is_(GroupState.STABLE) and group.protocol_name is not None
        members = tuple(
            MemberSummary(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata_for(group.protocol_name) if stable and group.protocol_name else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return GroupSummary(
            group_id,
            group.state,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            members,
        )

    # --- timers ----------------------------------------------------------------------

    def _schedule(self, group: Group) -> None:
        deadline = group.next_deadline_ms()
        if deadline is not None:
            heapq.heappush(self._timers, (deadline, group.group_id))

    def next_deadline_ms(self) -> int | None:
        return self._timers[0][0] if self._timers else None

    def expire(self, now_ms: int) -> Outbox:
        """Sessions that ran out, pending member ids never used, join phases that ended."""
        box = Outbox()
        due: set[str] = set()
        while self._timers and self._timers[0][0] <= now_ms:
            due.add(heapq.heappop(self._timers)[1])
        for group_id in due:
            group = self._groups.get(group_id)
            if group is None:
                continue
            for member_id, deadline in list(group.pending_members.items()):
                if deadline <= now_ms:
                    del group.pending_members[member_id]
            for member in list(group.members.values()):
                if member.is_expired(now_ms):
                    self._remove_member(group, member.member_id, now_ms, box)
            if (
                group.is_(GroupState.PREPARING_REBALANCE)
                and group.join_deadline_ms is not None
                and group.join_deadline_ms <= now_ms
            ):
                group.on_join_deadline(now_ms, box)
            else:
                group.try_complete_join(now_ms, box)
            self._schedule(group)
        return box

    # --- JoinGroup -------------------------------------------------------------------

    def join(self, now_ms: int, request: JoinRequest, waiter: object) -> Outbox:
        """Handle a JoinGroup; `waiter` is answered through the outbox, now or later."""
        box = Outbox()
        error = self._check_join(request)
        group = self._groups.get(request.group_id)
        if error is None and group is None and request.member_id:
            error = error_codes.UNKNOWN_MEMBER_ID
        if (
            error is None
            and group is not None
            and not group.supports(request.protocol_type, request.protocols)
        ):
            error = error_codes.INCONSISTENT_GROUP_PROTOCOL
        if error is None and group is None and not (request.protocol_type and request.protocols):
            error = error_codes.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            box.reply(waiter, JoinResult(error, request.member_id))
            return box
        if group is None:
            group = self._groups[request.group_id] = Group(request.group_id, now_ms)
        if request.member_id:
            self._join_known(group, request, waiter, now_ms, box)
        else:
            self._join_new(group, request, waiter, now_ms, box)
        self._schedule(group)
        return box

    def _check_join(self, request: JoinRequest) -> ErrorCode | None:
        if not request.group_id:
            return error_codes.INVALID_GROUP_ID
        timeout = request.session_timeout_ms
        if not (
            self.config.min_session_timeout_ms <= timeout <= self.config.max_session_timeout_ms
        ):
            return error_codes.INVALID_SESSION_TIMEOUT
        return None

    def _join_new(
        self, group: Group, request: JoinRequest, waiter: object, now_ms: int, box: Outbox
    ) -> None:
        instance_id = request.group_instance_id
        member_id = self._new_member_id(instance_id or request.client_id)
        if instance_id is not None and instance_id in group.static_members:
            self._rejoin_static(group, request, member_id, waiter, now_ms, box)
            return
        if len(group.members) + len(group.pending_members) >= self.config.max_size:
            box.reply(waiter, JoinResult(error_codes.GROUP_MAX_SIZE_REACHED, ""))
            return
        if instance_id is None and request.require_known_member_id:
            group.pending_members[member_id] = now_ms + request.session_timeout_ms
            box.reply(waiter, JoinResult(error_codes.MEMBER_ID_REQUIRED, member_id))
            return
        self._add_member(group, request, member_id, waiter, now_ms, box)

    def _join_known(
        self, group: Group, request: JoinRequest, waiter: object, now_ms: int, box: Outbox
    ) -> None:
        member_id = request.member_id
        if member_id in group.pending_members:
            self._add_member(group, request, member_id, waiter, now_ms, box)
            return
        error = self._check_member(group, member_id, request.group_instance_id)
        if error is not None:
            box.reply(waiter, JoinResult(error, member_id))
            return
        member = group.members[member_id]
        same = member.matches(request.protocols)
        if (group.is_(GroupState.COMPLETING_REBALANCE) and same) or (
            group.is_(GroupState.STABLE) and same and member_id != group.leader_id
        ):
            member.deadline_ms = now_ms + member.session_timeout_ms
            box.reply(waiter, group.join_result_for(member))
        else:
            self._update_member(group, member, request, waiter, now_ms, box)

    def _rejoin_static(
        self,
        group: Group,
        request: JoinRequest,
        member_id: str,
        waiter: object,
        now_ms: int,
        box: Outbox,
    ) -> None:
        """A known `group.instance.id` returns (a restart): it takes over its old member."""
        assert request.group_instance_id is not None
        member = group.replace_static_member(request.group_instance_id, member_id, box)
        member.client_id = request.client_id
        member.client_host = request.client_host
        unchanged = member.matches(request.protocols)
        if unchanged and group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            member.session_timeout_ms = request.session_timeout_ms
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
            member.deadline_ms = now_ms + member.session_timeout_ms
            box.store(group.group_id)
            box.reply(waiter, group.join_result_for(member, skip_assignment=True))
        else:
            self._update_member(group, member, request, waiter, now_ms, box)

    def _add_member(
        self,
        group: Group,
        request: JoinRequest,
        member_id: str,
        waiter: object,
        now_ms: int,
        box: Outbox,
    ) -> None:
        group.pending_members.pop(member_id, None)
        member = Member(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            request.protocol_type,
            list(request.protocols),
            join_waiter=waiter,
            deadline_ms=now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS,
            is_new=True,
        )
        group.add(member)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.initial_delay_ms > 0:
            group.new_member_added = True
        self._rebalance(group, now_ms, box)

    def _update_member(
        self,
        group: Group,
        member: Member,
        request: JoinRequest,
        waiter: object,
        now_ms: int,
        box: Outbox,
    ) -> None:
        if member.join_waiter is not None:
            box.reply(member.join_waiter, JoinResult(error_codes.REBALANCE_IN_PROGRESS, ""))
        member.protocols = list(request.protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.join_waiter = waiter
        self._rebalance(group, now_ms, box)

    def _rebalance(self, group: Group, now_ms: int, box: Outbox) -> None:
        if group.can_rebalance():
            delay = self.config.initial_rebalance_delay_ms if group.is_(GroupState.EMPTY) else 0
            group.prepare_rebalance(now_ms, delay, box)
        group.try_complete_join(now_ms, box)

    def _check_member(
        self, group: Group, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        if group.is_static_member_fenced(member_id, instance_id):
            return error_codes.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return error_codes.UNKNOWN_MEMBER_ID
        return None

    def _remove_member(self, group: Group, member_id: str, now_ms: int, box: Outbox) -> None:
        group.remove(member_id, box)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._rebalance(group, now_ms, box)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            group.try_complete_join(now_ms, box)

    # --- SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------

    def sync(
        self,
        now_ms: int,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol: tuple[str | None, str | None],
        assignments: dict[str, bytes],
        waiter: object,
    ) -> Outbox:
        """Handle a SyncGroup; `protocol` is the (type, name) pair the request names, if any."""
        box = Outbox()
        group = self._groups.get(group_id)
        error = self._check_generation(group, generation, member_id, instance_id)
        protocol_type, protocol_name = protocol
        if error is None and group is not None:
            if (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name
            ):
                error = error_codes.INCONSISTENT_GROUP_PROTOCOL
            elif group.is_(GroupState.PREPARING_REBALANCE):
                error = error_codes.REBALANCE_IN_PROGRESS
        if error is not None or group is None:
            box.reply(waiter, SyncResult(error or error_codes.UNKNOWN_MEMBER_ID))
            return box
        member = group.members[member_id]
        if group.is_(GroupState.STABLE):
            member.deadline_ms = now_ms + member.session_timeout_ms
            box.reply(
                waiter,
                SyncResult(
                    error_codes.NONE, group.protocol_type, group.protocol_name, member.assignment
                ),
            )
            self._schedule(group)
            return box
        if member.sync_waiter is not None:
            box.reply(member.sync_waiter, SyncResult(error_codes.REBALANCE_IN_PROGRESS))
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            self.completed_rebalances += 1
            group.complete_sync(assignments, now_ms, box)
        self._schedule(group)
        return box

    def _check_generation(
        self, group: Group | None, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        if group is None:
            return error_codes.UNKNOWN_MEMBER_ID
        error = self._check_member(group, member_id, instance_id)
        if error is None and generation != group.generation:
            error = error_codes.ILLEGAL_GENERATION
        return error

    def heartbeat(
        self, now_ms: int, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        group = self._groups.get(group_id)
        error = self._check_generation(group, generation, member_id, instance_id)
        if error is not None or group is None:
            return error or error_codes.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.deadline_ms = now_ms + member.session_timeout_ms
        self._schedule(group)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return error_codes.REBALANCE_IN_PROGRESS
        return error_codes.NONE

    def leave(
        self, now_ms: int, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[list[ErrorCode], Outbox]:
        """Handle a LeaveGroup of (member id, group instance id) pairs; an error per pair.
        A pair with an empty member id names a static member by its instance id (admin)."""
        box = Outbox()
        group = self._groups.get(group_id)
        if group is None:
            return [error_codes.UNKNOWN_MEMBER_ID] * len(members), box
        errors = []
        for member_id, instance_id in members:
            if not member_id and instance_id is not None:
                member_id = group.static_members.get(instance_id, "")
            if member_id in group.pending_members:
                del group.pending_members[member_id]
                group.try_complete_join(now_ms, box)
                errors.append(error_codes.NONE)
                continue
            error = self._check_member(group, member_id, instance_id)
            if error is None:
                self._remove_member(group, member_id, now_ms, box)
            errors.append(error or error_codes.NONE)
        self._schedule(group)
        return errors, box

    # --- offsets, deletion, loading -----------------------------------------------------

    def validate_offset_commit(
        self, now_ms: int, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        """May this commit be stored? Commits without a generation ("simple" consumers and
        admin tools) are allowed while the group has no members, and create it if needed."""
        group = self._groups.get(group_id)
        if group is None:
            if generation >= 0:
                return error_codes.ILLEGAL_GENERATION
            self._groups[group_id] = Group(group_id, now_ms)
            return error_codes.NONE
        if generation < 0 and group.is_(GroupState.EMPTY):
            return error_codes.NONE
        if generation >= 0 or member_id or instance_id is not None:
            error = self._check_generation(group, generation, member_id, instance_id)
            if error is not None:
                return error
            member = group.members[member_id]
            member.deadline_ms = max(member.deadline_ms, now_ms + member.session_timeout_ms)
        elif not group.is_(GroupState.EMPTY):
            return error_codes.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return error_codes.REBALANCE_IN_PROGRESS
        return error_codes.NONE

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups: only groups without members; they become Dead and are dropped."""
        group = self._groups.get(group_id)
        if group is None:
            return error_codes.GROUP_ID_NOT_FOUND
        if not group.is_(GroupState.EMPTY):
            return error_codes.NON_EMPTY_GROUP
        self.drop(group_id)
        return error_codes.NONE

    def drop(self, group_id: str) -> None:
        """Forget a group (deleted, expired, or no longer served here)."""
        group = self._groups.pop(group_id, None)
        if group is not None:
            group.transition(GroupState.DEAD, group.state_timestamp_ms)

    def to_stored(self, group_id: str) -> StoredGroup | None:
        """The group as `__consumer_offsets` keeps it; None for a group that only stores
        offsets (Kafka writes no group record for those)."""
        group = self._groups.get(group_id)
        if group is None or group.protocol_type is None:
            return None
        protocol = group.protocol_name
        return StoredGroup(
            protocol_type=group.protocol_type,
            generation=group.generation,
            protocol_name=protocol,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp_ms,
            members=tuple(
                StoredMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=m.metadata_for(protocol) if protocol else b"",
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ),
        )

    def load(self, group_id: str, stored: StoredGroup | None, now_ms: int) -> None:
        """Rebuild a group from its stored form: members come back Stable and must heartbeat
        within their session timeout, as after a coordinator move in Kafka."""
        group = Group(group_id, now_ms)
        if stored is not None:
            group.protocol_type = stored.protocol_type
            group.generation = stored.generation
            group.protocol_name = stored.protocol_name
            if stored.current_state_timestamp >= 0:
                group.state_timestamp_ms = stored.current_state_timestamp
            for s in stored.members:
                protocols = [(stored.protocol_name, s.subscription)] if stored.protocol_name else []
                group.add(
                    Member(
                        s.member_id,
                        s.group_instance_id,
                        s.client_id,
                        s.client_host,
                        s.rebalance_timeout_ms,
                        s.session_timeout_ms,
                        stored.protocol_type,
                        protocols,
                        assignment=s.assignment,
                        deadline_ms=now_ms + s.session_timeout_ms,
                    )
                )
            group.leader_id = stored.leader if stored.leader in group.members else group.leader_id
            if group.members and stored.protocol_name:
                group.state = GroupState.STABLE
        self._groups[group_id] = group
        self._schedule(group)
