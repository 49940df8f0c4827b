"""A consumer's membership in its group: join, sync, heartbeat, leave — the classic protocol.

How it works. `ensure_active` (called from the consumer's poll) joins when needed: find the
coordinator (a connection of its own, so heartbeats never queue behind a long-poll fetch),
JoinGroup with one protocol per configured assignor (subscription in Kafka's
ConsumerProtocolSubscription v3: topics, owned partitions, generation), answer
MEMBER_ID_REQUIRED by joining again with the given id, compute the assignment when elected
leader, SyncGroup, and apply the result. With an eager protocol (range, roundrobin) every
partition is revoked before joining; with cooperative-sticky only the partitions that move
are revoked after the sync, and then the member joins once more so that they can be
reassigned (KIP-429). A heartbeat task runs between rebalances; it notices a rebalance,
a lost membership (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID: the partitions are *lost*, not
revoked) and a consumer that stopped polling for `max.poll.interval.ms` (it leaves the group).

Static membership (`group.instance.id`): the member keeps its id across restarts and does not
send LeaveGroup on close, so a quick restart causes no rebalance.

Invariants: `assignment` changes only in the rebalance task `ensure_active` starts (the
callbacks run there, on the event loop, while the consumer waits in poll); `generation` and
`member_id` are those of the last successful join; callbacks run in the order revoke →
assign, and a partition is never in two callbacks of the same kind in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

from riverlog.client.assignors import Assignor, MemberSubscription, assignor_for
from riverlog.client.cluster import Cluster
from riverlog.client.config import ConsumerConfig
from riverlog.client.connection import Connection, RequestTimeoutError
from riverlog.client.group_admin import GroupAdmin, decode_assignment
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

Callback = Callable[[set[TopicPartition]], Awaitable[None]]
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3

_REDISCOVER = {
    error_codes.NOT_COORDINATOR.code,
    error_codes.COORDINATOR_NOT_AVAILABLE.code,
    error_codes.COORDINATOR_LOAD_IN_PROGRESS.code,
}
_RESET = {error_codes.UNKNOWN_MEMBER_ID.code, error_codes.ILLEGAL_GENERATION.code}


def encode_subscription(
    topics: Iterable[str], owned: Iterable[TopicPartition], generation: int
) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(owned):
        by_topic.setdefault(topic, []).append(partition)
    subscription = ConsumerProtocolSubscription(
        topics=sorted(topics),
        owned_partitions=[
            ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
        generation_id=generation,
    )
    return SUBSCRIPTION_VERSION.to_bytes(2, "big") + subscription.encode(SUBSCRIPTION_VERSION)


def decode_subscription(member_id: str, instance_id: str | None, data: bytes) -> MemberSubscription:
    """A member's subscription; an undecodable one subscribes to nothing."""
    view = memoryview(data)
    try:
        version = min(
            int.from_bytes(view[:2], "big", signed=True), ConsumerProtocolSubscription.MAX_VERSION
        )
        sub, _ = ConsumerProtocolSubscription.read_from(view, 2, max(version, 0))
    except Exception:
        return MemberSubscription(member_id, instance_id, (), {}, -1)
    owned = {tp.topic: sorted(tp.partitions) for tp in sub.owned_partitions}
    return MemberSubscription(member_id, instance_id, tuple(sub.topics), owned, sub.generation_id)


def encode_assignment(partitions: dict[str, list[int]]) -> bytes:
    assignment = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
            for t, ps in sorted(partitions.items())
        ]
    )
    return ASSIGNMENT_VERSION.to_bytes(2, "big") + assignment.encode(ASSIGNMENT_VERSION)


class GroupMembership:
    def __init__(
        self,
        cluster: Cluster,
        config: ConsumerConfig,
        on_revoked: Callback,
        on_assigned: Callback,
        on_lost: Callback,
    ) -> None:
        assert config.group_id is not None
        self.group_id = config.group_id
        self.config = config
        self.cluster = cluster
        self.assignors: list[Assignor] = [assignor_for(n) for n in config.assignment_strategies]
        self.admin = GroupAdmin(cluster)
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.assignment: set[TopicPartition] = set()
        self.subscription: set[str] = set()
        self._on_revoked, self._on_assigned, self._on_lost = on_revoked, on_assigned, on_lost
        self._rejoin = True
        self._lost = False
        self._heartbeat: asyncio.Task[None] | None = None
        self._joining: asyncio.Task[None] | None = None
        self._request_timeout_s = config.request_timeout_ms / 1000
        self.last_poll = time.monotonic()

    @property
    def cooperative(self) -> bool:
        chosen = next((a for a in self.assignors if a.name == self.protocol), self.assignors[0])
        return bool(chosen.cooperative)

    def subscribe(self, topics: set[str]) -> None:
        if topics != self.subscription:
            self.subscription = set(topics)
            self._rejoin = True

    def request_rejoin(self) -> None:
        """Join again at the next poll, so the leader assigns from fresh metadata."""
        self._rejoin = True

    async def _coordinator(self) -> Connection:
        return await self.admin.coordinator(self.group_id)

    async def _ask(self, conn: Connection, request: ApiMessage, timeout_s: float) -> ApiMessage:
        """A request to the coordinator; a coordinator silent for `timeout_s` (frozen,
        partitioned away) counts as gone: the connection is closed, ConnectionError."""
        try:
            return await conn.send(request, timeout_s=timeout_s)
        except RequestTimeoutError:
            self._rediscover()
            raise

    def _rediscover(self) -> None:
        self.admin.forget(self.group_id)

    def ensure_active(self) -> asyncio.Task[None] | None:
        """Start a rebalance if the group needs one; the running rebalance, if any. The
        consumer waits for it as long as its poll may, and polls on (the partitions it
        still owns) if it takes longer — a rebalance waits for every member."""
        self.last_poll = time.monotonic()
        if (self._rejoin or self._lost) and (self._joining is None or self._joining.done()):
            self._joining = asyncio.get_running_loop().create_task(self._rebalance())
        if self._joining is not None and self._joining.done():
            joined, self._joining = self._joining, None
            joined.result()  # a fatal join error (e.g. FENCED_INSTANCE_ID) reaches the caller
            return None
        return self._joining

    async def _rebalance(self) -> None:
        if self._lost:
            self._lost = False
            lost, self.assignment = self.assignment, set()
            if lost:
                await self._on_lost(lost)
        while self._rejoin:
            await self._join_and_sync()

    async def _join_and_sync(self) -> None:
        if not self.cooperative and self.assignment:
            revoked, self.assignment = self.assignment, set()
            await self._on_revoked(revoked)
        await self._stop_heartbeat()
        conn = await self._coordinator()
        metadata = encode_subscription(self.subscription, self.assignment, self.generation)
        request = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type="consumer",
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(name=a.name, metadata=metadata)
                for a in self.assignors
            ],
            reason=None,
        )
        try:
            # The join waits for every member to rejoin: up to the rebalance timeout.
            wait = (self.config.max_poll_interval_ms + self.config.request_timeout_ms) / 1000
            response = await self._ask(conn, request, wait)
        except ConnectionError:
            self._rediscover()
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            return
        assert isinstance(response, JoinGroupResponse)
        code = response.error_code
        if code == error_codes.MEMBER_ID_REQUIRED.code:
            self.member_id = response.member_id
            return
        if code != 0:
            await self._join_error(code)
            return
        self.member_id, self.generation = response.member_id, response.generation_id
        self.protocol = response.protocol_name
        assignments: list[SyncGroupRequest.SyncGroupRequestAssignment] = []
        if response.leader == self.member_id:
            assignments = await self._assign(response.protocol_name or "", response.members)
        sync = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type="consumer",
            protocol_name=self.protocol,
            assignments=assignments,
        )
        try:
            synced = await self._ask(conn, sync, self._request_timeout_s)
        except ConnectionError:
            self._rediscover()
            return
        assert isinstance(synced, SyncGroupResponse)
        if synced.error_code != 0:
            await self._join_error(synced.error_code)
            return
        new = {(t, p) for t, ps in decode_assignment(bytes(synced.assignment)).items() for p in ps}
        self._rejoin = False
        revoked = self.assignment - new
        added = new - self.assignment
        if revoked:  # cooperative: give up what moves, then join again so it can be assigned
            self.assignment -= revoked
            await self._on_revoked(revoked)
            self._rejoin = True
        self.assignment |= added
        await self._on_assigned(added)
        self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _join_error(self, code: int) -> None:
        if code in _REDISCOVER:
            self._rediscover()
        elif code in _RESET:
            self.member_id, self.generation = "", -1
        elif code != error_codes.REBALANCE_IN_PROGRESS.code:
            raise KafkaError(for_code(code), f"joining group {self.group_id!r} failed")
        await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def _assign(
        self, protocol: str, members: Sequence[JoinGroupResponse.JoinGroupResponseMember]
    ) -> list[SyncGroupRequest.SyncGroupRequestAssignment]:
        """The leader's work: the chosen assignor over every member's subscription."""
        assignor = assignor_for(protocol)
        subscriptions = [
            decode_subscription(m.member_id, m.group_instance_id, bytes(m.metadata))
            for m in members
        ]
        topics = sorted({t for s in subscriptions for t in s.topics})
        await self.cluster.refresh(topics, allow_auto_create=False)
        counts = {
            t: self.cluster.partition_counts[t]
            for t in topics
            if t in self.cluster.partition_counts
        }
        result = assignor.assign(counts, subscriptions)
        return [
            SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=member, assignment=encode_assignment(partitions)
            )
            for member, partitions in result.items()
        ]

    async def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if time.monotonic() - self.last_poll > self.config.max_poll_interval_ms / 1000:
                await self._leave("the consumer did not poll within max.poll.interval.ms")
                self._lost = self._rejoin = True
                return
            try:
                conn = await self._coordinator()
                heartbeat = HeartbeatRequest(
                    group_id=self.group_id,
                    generation_id=self.generation,
                    member_id=self.member_id,
                    group_instance_id=self.config.group_instance_id,
                )
                response = await self._ask(conn, heartbeat, self._request_timeout_s)
            except (ConnectionError, KafkaError):
                self._rediscover()
                continue
            assert isinstance(response, HeartbeatResponse)
            code = response.error_code
            if code == error_codes.REBALANCE_IN_PROGRESS.code:
                self._rejoin = True
                return
            if code in _RESET or code == error_codes.FENCED_INSTANCE_ID.code:
                self.member_id, self.generation = "", -1
                self._lost = self._rejoin = True
                return
            if code in _REDISCOVER:
                self._rediscover()

    async def _stop_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None

    async def _leave(self, reason: str) -> None:
        if self.config.group_instance_id is not None or not self.member_id:
            return  # a static member keeps its place until its session times out
        with contextlib.suppress(ConnectionError, KafkaError):
            conn = await self._coordinator()
            leave = LeaveGroupRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                members=[LeaveGroupRequest.MemberIdentity(member_id=self.member_id, reason=reason)],
            )
            response = await self._ask(conn, leave, self._request_timeout_s)
            assert isinstance(response, LeaveGroupResponse)
        self.member_id, self.generation = "", -1

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit as this generation's member; KafkaError if the group moved on."""
        await self.admin.commit_offsets(
            self.group_id,
            offsets,
            generation=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
        )

    async def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The committed offsets, stable ones only, as Kafka's consumer asks: while a commit
        of one of them is still being written (UNSTABLE_OFFSET_COMMIT), ask again every
        `retry.backoff.ms`, for up to `request.timeout.ms`; a commit is settled within the
        broker's `offsets.commit.timeout.ms`."""
        deadline = time.monotonic() + self.config.request_timeout_ms / 1000
        while True:
            try:
                return await self.admin.fetch_offsets(
                    self.group_id, partitions, require_stable=True
                )
            except KafkaError as e:
                if e.code != error_codes.UNSTABLE_OFFSET_COMMIT.code:
                    raise
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    async def close(self) -> None:
        """Revoke (so the last offsets are committed by the callback) and leave the group."""
        if self._joining is not None:
            self._joining.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkaError, ConnectionError):
                await self._joining
        await self._stop_heartbeat()
        if self.assignment:
            revoked, self.assignment = self.assignment, set()
            await self._on_revoked(revoked)
        await self._leave("the consumer is closing")
        await self.admin.close()
