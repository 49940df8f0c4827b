"""One consumer group of the classic protocol: its members and its state, as pure data.

States (Kafka's GroupMetadata): Empty → PreparingRebalance → CompletingRebalance → Stable,
and Dead once deleted or unloaded. A rebalance collects JoinGroup requests until every known
member has rejoined (or the rebalance timeout passes), then starts a new generation: each
member gets a JoinGroup answer, the leader the member list with their metadata for the chosen
protocol. The leader's SyncGroup hands out the assignments and the group becomes Stable.

Waiting requests are opaque `waiter` tokens held by members (`join_waiter`, `sync_waiter`);
this module never answers them itself: transitions append `(waiter, result)` pairs to an
`Outbox`, and the names of groups whose stored form changed, for the caller to persist
*before* it delivers the replies (Kafka answers a SyncGroup only after the group is stored).

Invariants: `leader_id` is a member (or None when there are none); `static_members` maps each
`group.instance.id` to a current member's id; a member has a `join_waiter` only while the
group is PreparingRebalance and a `sync_waiter` only while it is CompletingRebalance.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.messages import ConsumerProtocolSubscription

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    # Kafka's GroupMetadata.validPreviousStates: a transition from anywhere else is a bug.
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalTransitionError(AssertionError):
    """A group moved to a state its current state cannot lead to (a coordinator bug)."""


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """One entry of the member list a leader receives."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class Outbox:
    """What a transition asks of the caller: groups to store, then replies to deliver."""

    persist: list[str] = field(default_factory=list)
    replies: list[tuple[object, JoinResult | SyncResult]] = field(default_factory=list)
    rebalances: int = 0
    """Rebalances completed (join phases that started a generation with members)."""

    def reply(self, waiter: object, result: JoinResult | SyncResult) -> None:
        self.replies.append((waiter, result))

    def store(self, group_id: str) -> None:
        if group_id not in self.persist:
            self.persist.append(group_id)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: object | None = None
    sync_waiter: object | None = None
    deadline_ms: int = 0
    """When the member is removed unless it heartbeats (not while it waits in a join)."""
    is_new: bool = False

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def can_expire(self) -> bool:
        """Members waiting in a join are bounded by the rebalance timeout instead (new ones
        by their join timeout), members waiting in a sync by the leader's session."""
        if self.join_waiter is not None:
            return self.is_new
        return self.sync_waiter is None

    def is_expired(self, now_ms: int) -> bool:
        return self.can_expire() and now_ms >= self.deadline_ms


class Group:
    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.pending_members: dict[str, int] = {}
        """Member ids handed out with MEMBER_ID_REQUIRED (KIP-394) → expiry time."""
        self.static_members: dict[str, str] = {}
        self.join_deadline_ms: int | None = None
        self.initial_delay_ms = 0
        """During the first join of an Empty group: the delay still allowed (Kafka's
        InitialDelayedJoin), extended while new members keep arriving."""
        self.initial_remaining_ms = 0
        self.new_member_added = False

    # --- queries ---------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_waiter is not None for m in self.members.values()
        )

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        names = {name for name, _ in members[0].protocols}
        for m in members[1:]:
            names &= {name for name, _ in m.protocols}
        return names

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & {name for name, _ in protocols})

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])  # ties: the first member's choice

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def current_member_list(self) -> tuple[JoinedMember, ...]:
        assert self.protocol_name is not None
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        )

    def join_result_for(self, member: Member, *, skip_assignment: bool = False) -> JoinResult:
        is_leader = member.member_id == self.leader_id
        return JoinResult(
            error_codes.NONE,
            member.member_id,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader_id or "",
            self.current_member_list() if is_leader else (),
            skip_assignment and is_leader,
        )

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members of a consumer group subscribe to; None when unknown
        (another protocol type, no generation yet, or metadata that does not parse)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        top = ConsumerProtocolSubscription.MAX_VERSION
        for member in self.members.values():
            data = memoryview(member.metadata_for(self.protocol_name))
            try:
                version = min(max(int.from_bytes(data[:2], "big", signed=True), 0), top)
                subscription, _ = ConsumerProtocolSubscription.read_from(data, 2, version)
            except ProtocolError:
                return None
            topics.update(subscription.topics)
        return topics

    def next_deadline_ms(self) -> int | None:
        times = [m.deadline_ms for m in self.members.values() if m.can_expire()]
        times += self.pending_members.values()
        if self.join_deadline_ms is not None:
            times.append(self.join_deadline_ms)
        return min(times, default=None)

    # --- membership ------------------------------------------------------------------

    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransitionError(
                f"group {self.group_id}: {self.state.value} cannot become {state.value}"
            )
        self.state = state
        self.state_timestamp_ms = now_ms

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str, box: Outbox) -> Member | None:
        """Drop a member; its waiting requests are answered UNKNOWN_MEMBER_ID."""
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        gone = JoinResult(error_codes.UNKNOWN_MEMBER_ID, member_id)
        if member.join_waiter is not None:
            box.reply(member.join_waiter, gone)
            member.join_waiter = None
        if member.sync_waiter is not None:
            box.reply(member.sync_waiter, SyncResult(error_codes.UNKNOWN_MEMBER_ID))
            member.sync_waiter = None
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, new_member_id: str, box: Outbox) -> Member:
        """A static member came back with a new member id: the old id is fenced."""
        old_id = self.static_members[instance_id]
        member = self.members.pop(old_id)
        fenced = error_codes.FENCED_INSTANCE_ID
        if member.join_waiter is not None:
            box.reply(member.join_waiter, JoinResult(fenced, old_id))
            member.join_waiter = None
        if member.sync_waiter is not None:
            box.reply(member.sync_waiter, SyncResult(fenced))
            member.sync_waiter = None
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_id:
            self.leader_id = new_member_id
        return member

    # --- rebalancing -----------------------------------------------------------------

    def can_rebalance(self) -> bool:
        return self.state in (
            GroupState.STABLE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
        )

    def prepare_rebalance(self, now_ms: int, initial_delay_ms: int, box: Outbox) -> None:
        if self.is_(GroupState.COMPLETING_REBALANCE):
            self._answer_syncs_with(error_codes.REBALANCE_IN_PROGRESS, box)
        if self.is_(GroupState.EMPTY) and initial_delay_ms > 0:
            self.initial_delay_ms = initial_delay_ms
            self.initial_remaining_ms = max(self.rebalance_timeout_ms - initial_delay_ms, 0)
            self.new_member_added = False
            self.join_deadline_ms = now_ms + initial_delay_ms
        else:
            self.initial_delay_ms = 0
            self.join_deadline_ms = now_ms + self.rebalance_timeout_ms
        self.transition(GroupState.PREPARING_REBALANCE, now_ms)

    def try_complete_join(self, now_ms: int, box: Outbox) -> None:
        """Complete the join phase early once everyone is in (not during an initial delay)."""
        if (
            self.is_(GroupState.PREPARING_REBALANCE)
            and self.initial_delay_ms == 0
            and self.has_all_members_joined()
        ):
            self.complete_join(now_ms, box)

    def on_join_deadline(self, now_ms: int, box: Outbox) -> None:
        if self.initial_delay_ms > 0 and self.new_member_added and self.initial_remaining_ms > 0:
            delay = min(self.initial_delay_ms, self.initial_remaining_ms)
            self.initial_remaining_ms -= delay
            self.new_member_added = False
            self.join_deadline_ms = now_ms + delay
            return
        self.complete_join(now_ms, box)

    def complete_join(self, now_ms: int, box: Outbox) -> None:
        """Start the next generation with the members that rejoined; the rest are removed."""
        self.join_deadline_ms = None
        self.initial_delay_ms = 0
        for member in [m for m in self.members.values() if m.join_waiter is None]:
            self.remove(member.member_id, box)
        self.generation += 1
        if not self.members:
            self.protocol_name = None
            self.transition(GroupState.EMPTY, now_ms)
            box.store(self.group_id)
            return
        self.protocol_name = self.select_protocol()
        self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        box.rebalances += 1
        for member in self.members.values():
            waiter = member.join_waiter
            assert waiter is not None
            member.join_waiter = None
            member.is_new = False
            member.deadline_ms = now_ms + member.session_timeout_ms
            box.reply(waiter, self.join_result_for(member))

    def complete_sync(self, assignments: dict[str, bytes], now_ms: int, box: Outbox) -> None:
        """The leader's assignments: store the group, answer waiting syncs, become Stable."""
        for member in self.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        box.store(self.group_id)
        self.transition(GroupState.STABLE, now_ms)
        for member in self.members.values():
            if member.sync_waiter is not None:
                box.reply(
                    member.sync_waiter,
                    SyncResult(
                        error_codes.NONE, self.protocol_type, self.protocol_name, member.assignment
                    ),
                )
                member.sync_waiter = None
                member.deadline_ms = now_ms + member.session_timeout_ms

    def _answer_syncs_with(self, error: ErrorCode, box: Outbox) -> None:
        for member in self.members.values():
            member.assignment = b""
            if member.sync_waiter is not None:
                box.reply(member.sync_waiter, SyncResult(error))
                member.sync_waiter = None
