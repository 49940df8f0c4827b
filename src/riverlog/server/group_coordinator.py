"""The group coordinator at the edge: clock, waiting requests, `__consumer_offsets` I/O.

Wraps the pure `GroupManager` (membership) and `OffsetCache` (committed offsets) with what
they leave out: the wall clock, futures for JoinGroup/SyncGroup requests that wait for a
rebalance, one event-loop timer at the manager's next deadline, and persistence. Group
records and offset commits are appended to partition `partition_for(group)` of the
compacted internal topic `__consumer_offsets` in Kafka's formats (`coordinator/records.py`).
An offset commit is answered, and enters the cache, only once the partition's high watermark
has passed it — the ISR holds it, as Kafka's acks=-1 append of `offsets.commit.required.acks`
— or fails after `offsets.commit.timeout.ms` with COORDINATOR_NOT_AVAILABLE (NOT_COORDINATOR
if leadership moved meanwhile). Commits enter the cache in append order, whatever order their
waits end in, so a later commit is never overwritten by an earlier one. While a commit waits,
its partitions are *pending* (`pending_partitions`): an OffsetFetch that requires stable
offsets gets UNSTABLE_OFFSET_COMMIT for them, as Kafka answers (its
`hasPendingOffsetCommitsForTopicPartition`), so a consumer taking over a partition retries
instead of starting from the offset before the commit (finding 13 of docs/fault-suite.md).

Which groups are served here: those whose offsets partition this broker leads and has
loaded. On start each local offsets partition is replayed from its log (COORDINATOR_LOAD_IN_
PROGRESS meanwhile); groups of partitions led elsewhere get NOT_COORDINATOR. When the cluster
moves leadership, `load_partition`/`unload_partition` are the hooks; on one broker every
partition is local. The topic itself is created on first use (FindCoordinator), as Kafka does.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from riverlog.coordinator.group import GroupState, JoinResult, Outbox, SyncResult
from riverlog.coordinator.group_manager import GroupConfig, GroupManager, JoinRequest
from riverlog.coordinator.offsets import OffsetCache
from riverlog.coordinator.records import (
    GroupKey,
    OffsetKey,
    Replayed,
    StoredOffset,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    replay,
)
from riverlog.coordinator.txn_replay import TxnReplay
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.server.coordinator_partitions import CoordinatorPartitions
from riverlog.server.replication.partition import HostedPartition
from riverlog.storage.log import AppendResult

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
_MOVED = {error_codes.NOT_LEADER_OR_FOLLOWER.code, error_codes.UNKNOWN_TOPIC_OR_PARTITION.code}


@dataclass(slots=True)
class _PendingCommit:
    """An offset commit appended to the log, entering the cache once replicated."""

    end_offset: int  # the high watermark that makes it durable
    group_id: str
    offsets: dict[TopicPartition, StoredOffset]


class GroupCoordinator:
    def __init__(self, broker: Broker) -> None:
        config = broker.config
        self.broker = broker
        self.manager = GroupManager(
            GroupConfig(
                min_session_timeout_ms=config["group.min.session.timeout.ms"],
                max_session_timeout_ms=config["group.max.session.timeout.ms"],
                initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
                max_size=config["group.max.size"],
            )
        )
        self.offsets = OffsetCache()
        self.retention_ms: int = config["offsets.retention.minutes"] * 60_000
        self.metadata_max_bytes: int = config["offset.metadata.max.bytes"]
        self.partitions = CoordinatorPartitions(
            broker, OFFSETS_TOPIC, "offsets.topic.num.partitions"
        )
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._load_tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[int, collections.deque[_PendingCommit]] = {}
        self.commit_timeout_ms: int = config["offsets.commit.timeout.ms"]
        self.clock = broker.clock
        broker.replicas.add_listener(OFFSETS_TOPIC, self)

    # --- lifecycle and ownership -------------------------------------------------------

    def start(self) -> None:
        """Load the offsets partitions this broker leads; start the retention check."""
        for hosted in self.broker.replicas:
            if hosted.topic == OFFSETS_TOPIC and hosted.is_leader:
                self.load_partition(hosted.index)  # unless loading since a LeaderAndIsr
        interval = self.broker.config["offsets.retention.check.interval.ms"]
        self._retention_task = asyncio.get_running_loop().create_task(
            self._retention_loop(interval)
        )

    def stop(self) -> None:
        """Answer every waiting request NOT_COORDINATOR (clients find the new coordinator)."""
        for task in [*self._load_tasks, self._retention_task]:
            if task is not None:
                task.cancel()
        if self._timer is not None:
            self._timer.cancel()
        for index in self.partitions.held():
            self.unload_partition(index)

    def partition_of(self, group_id: str) -> int:
        return self.partitions.of(group_id)

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use (compacted, Kafka's settings)."""
        config = self.broker.config
        self.partitions.ensure_topic(
            config["offsets.topic.replication.factor"],
            {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(config["offsets.topic.segment.bytes"]),
            },
        )

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when this broker cannot serve the
        group now; None when it can."""
        return self.partitions.error_for(group_id)

    def loading(self) -> bool:
        return self.partitions.loading()

    def became_leader(self, index: int) -> None:
        self.load_partition(index)

    def stopped_leading(self, index: int) -> None:
        self.unload_partition(index)

    def load_partition(self, index: int) -> None:
        """Replay partition `index` (led here) unless it is loading or loaded at this epoch."""
        try:
            epoch = self.broker.replicas.get(OFFSETS_TOPIC, index).leader_epoch
        except KafkaError:
            return
        if not self.partitions.begin_load(index, epoch):
            return
        task = asyncio.get_running_loop().create_task(self._load(index, epoch))
        self._load_tasks.add(task)
        task.add_done_callback(self._load_tasks.discard)

    def unload_partition(self, index: int) -> None:
        self.partitions.drop(index)
        self._pending.pop(index, None)
        self.broker.txn_offsets.drop_partition(index)
        box = Outbox()
        for group in self.manager:
            if self.partitions.of(group.group_id) != index:
                continue
            for member in group.members.values():
                if member.join_waiter is not None:
                    box.reply(member.join_waiter, JoinResult(error_codes.NOT_COORDINATOR, ""))
                    member.join_waiter = None
                if member.sync_waiter is not None:
                    box.reply(member.sync_waiter, SyncResult(error_codes.NOT_COORDINATOR))
                    member.sync_waiter = None
            self.manager.drop(group.group_id)
            self.offsets.delete_group(group.group_id)
        self._deliver(box)

    async def _load(self, index: int, epoch: int) -> None:
        """Replay the partition's records, to the log end (`CoordinatorPartitions.read`);
        transactional offset commits come out at their commit marker."""
        replayed = Replayed({}, {})
        txns = TxnReplay()
        try:
            for pairs in self.partitions.read(index, txns.feed):
                replay(pairs, into=replayed)
                await asyncio.sleep(0)
        except Exception:
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, index)
            self.partitions.drop(index)
            raise
        if not self.partitions.finish_load(index, epoch):
            return  # unloaded, or loading again under a newer epoch, meanwhile
        now = self.clock.wall_ms()
        for group_id in replayed.groups.keys() | replayed.offsets.keys():
            self.manager.load(group_id, replayed.groups.get(group_id), now)
            self.offsets.commit(group_id, replayed.offsets.get(group_id, {}))
        self.broker.txn_offsets.drop_partition(index)
        for producer_id, pairs in txns.open.items():  # transactions awaiting their marker
            self.broker.txn_offsets.restore(producer_id, replay(pairs).offsets)
        self._reschedule()
        level = logging.INFO if replayed.groups or replayed.offsets else logging.DEBUG
        log.log(level, "loaded %d groups from %s-%d", len(replayed.groups), OFFSETS_TOPIC, index)

    # --- persistence ---------------------------------------------------------------------

    def _append(
        self, group_id: str, entries: list[tuple[bytes, bytes | None]]
    ) -> tuple[HostedPartition, AppendResult] | None:
        if not entries:
            return None
        timestamp = self.clock.wall_ms()
        batch = encode_batch(
            [Record(i, timestamp, key, value) for i, (key, value) in enumerate(entries)]
        )
        index = self.partition_of(group_id)
        return self.broker.replicas.append(
            OFFSETS_TOPIC, index, memoryview(batch), acks=1, internal=True
        )

    async def _replicated(
        self, index: int, hosted: HostedPartition, commit: _PendingCommit
    ) -> ErrorCode:
        """Queue an appended commit; NONE once the ISR has it (and the cache too), as
        Kafka maps the outcome of its acks=-1 append: NOT_COORDINATOR once this broker
        no longer leads the partition, COORDINATOR_NOT_AVAILABLE for a timeout or an ISR
        below `min.insync.replicas`."""
        queue = self._pending.setdefault(index, collections.deque())
        queue.append(commit)
        codes = self.broker.replicas.await_replication(
            [(hosted, commit.end_offset)], self.commit_timeout_ms
        )
        [code] = codes if isinstance(codes, list) else await codes
        if code is error_codes.NONE:
            self._apply_replicated(index, hosted)
            return error_codes.NONE
        self._drop(index, commit)
        if code is error_codes.NOT_LEADER_OR_FOLLOWER:
            return error_codes.NOT_COORDINATOR
        return error_codes.COORDINATOR_NOT_AVAILABLE

    def _apply_replicated(self, index: int, hosted: HostedPartition) -> None:
        """Move every replicated commit at the head of the queue into the cache, in order."""
        queue = self._pending.get(index)
        high_watermark = hosted.log.high_watermark
        while queue and queue[0].end_offset <= high_watermark:
            done = queue.popleft()
            self.offsets.commit(done.group_id, done.offsets)

    def pending_partitions(self, group_id: str) -> frozenset[TopicPartition]:
        """The group's partitions with a commit appended but not yet replicated."""
        queue = self._pending.get(self.partition_of(group_id), ())
        return frozenset(tp for c in queue if c.group_id == group_id for tp in c.offsets)

    def _drop(self, index: int, commit: _PendingCommit) -> None:
        queue = self._pending.get(index)
        if queue is not None and commit in queue:
            queue.remove(commit)

    def _group_entry(self, group_id: str) -> tuple[bytes, bytes | None]:
        stored = self.manager.to_stored(group_id)
        value = encode_group_value(stored) if stored is not None else None
        return encode_group_key(GroupKey(group_id)), value

    def _deliver(self, box: Outbox) -> None:
        for group_id in box.persist:
            try:
                self._append(group_id, [self._group_entry(group_id)])
            except KafkaError as e:
                log.error("could not store group %s: %s", group_id, e)
        for waiter, result in box.replies:
            assert isinstance(waiter, asyncio.Future)
            if not waiter.done():
                waiter.set_result(result)
        self._reschedule()

    # --- timers ----------------------------------------------------------------------------

    def _reschedule(self) -> None:
        deadline = self.manager.next_deadline_ms()
        if deadline is None or (self._timer_at is not None and self._timer_at <= deadline):
            return
        if self._timer is not None:
            self._timer.cancel()
        delay_s = max(0.0, (deadline - self.clock.wall_ms()) / 1000)
        self._timer_at = deadline
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._deliver(self.manager.expire(self.clock.wall_ms()))

    async def _retention_loop(self, interval_ms: int) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            self.expire_offsets(self.clock.wall_ms())

    def expire_offsets(self, now: int) -> int:
        """Tombstone expired offsets; drop Empty groups left without any. Returns how many
        offsets expired."""
        count = 0
        for group in self.manager:
            if self.coordinator_error(group.group_id) is not None:
                continue
            expired = self.offsets.expired(group, now, self.retention_ms)
            entries: list[tuple[bytes, bytes | None]] = [
                (encode_offset_key(OffsetKey(group.group_id, t, p)), None) for t, p in expired
            ]
            drop = group.is_(GroupState.EMPTY) and len(expired) == len(
                self.offsets.fetch(group.group_id)
            )
            if drop:
                entries.append((encode_group_key(GroupKey(group.group_id)), None))
            self._append(group.group_id, entries)
            self.offsets.delete(group.group_id, expired)
            if drop:
                self.manager.drop(group.group_id)
            count += len(expired)
        return count

    # --- requests ----------------------------------------------------------------------------

    async def join(self, request: JoinRequest) -> JoinResult:
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        self._deliver(self.manager.join(self.clock.wall_ms(), request, waiter))
        return await waiter

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        protocol: tuple[str | None, str | None],
        assignments: dict[str, bytes],
    ) -> SyncResult:
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        box = self.manager.sync(
            self.clock.wall_ms(),
            group_id,
            generation,
            member_id,
            instance_id,
            protocol,
            assignments,
            waiter,
        )
        self._deliver(box)
        return await waiter

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        error = self.manager.heartbeat(
            self.clock.wall_ms(), group_id, generation, member_id, instance_id
        )
        self._reschedule()
        return error

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        errors, box = self.manager.leave(self.clock.wall_ms(), group_id, members)
        self._deliver(box)
        return errors

    async def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[TopicPartition, StoredOffset],
    ) -> dict[TopicPartition, ErrorCode]:
        """Validate and store a commit, replicated to the ISR; an error code per partition."""
        now = self.clock.wall_ms()
        error = self.manager.validate_offset_commit(
            now, group_id, generation, member_id, instance_id
        )
        if error is not error_codes.NONE:
            return dict.fromkeys(offsets, error)
        self._reschedule()
        errors: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, StoredOffset] = {}
        for (topic, partition), offset in offsets.items():
            if len(offset.metadata.encode()) > self.metadata_max_bytes:
                errors[(topic, partition)] = error_codes.OFFSET_METADATA_TOO_LARGE
            elif not self._partition_exists(topic, partition):
                errors[(topic, partition)] = error_codes.UNKNOWN_TOPIC_OR_PARTITION
            else:
                accepted[(topic, partition)] = offset
        index = self.partition_of(group_id)
        try:
            appended = self._append(
                group_id,
                [
                    (encode_offset_key(OffsetKey(group_id, t, p)), encode_offset_value(o))
                    for (t, p), o in accepted.items()
                ],
            )
        except KafkaError as e:
            log.error("could not store offsets of group %s: %s", group_id, e)
            code = (
                error_codes.NOT_COORDINATOR
                if e.code in _MOVED
                else error_codes.COORDINATOR_NOT_AVAILABLE
            )
            return {**errors, **dict.fromkeys(accepted, code)}
        stored = error_codes.NONE
        if appended is not None:
            hosted, result = appended
            commit = _PendingCommit(result.last_offset + 1, group_id, accepted)
            stored = await self._replicated(index, hosted, commit)
        return {**errors, **dict.fromkeys(accepted, stored)}

    def _partition_exists(self, topic: str, partition: int) -> bool:
        known = self.broker.topics.get(topic)
        return known is not None and partition in known.partitions

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: a group-level error, or an error per partition."""
        group = self.manager.get(group_id)
        if group is None:
            return error_codes.GROUP_ID_NOT_FOUND, {}
        subscribed: set[str] | None = set()
        if not group.is_(GroupState.EMPTY):
            subscribed = group.subscribed_topics()
            if subscribed is None and group.protocol_type != "consumer":
                return error_codes.NON_EMPTY_GROUP, {}
        errors: dict[TopicPartition, ErrorCode] = {}
        doomed = []
        for tp in partitions:
            if subscribed is None or tp[0] in subscribed:
                errors[tp] = error_codes.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                errors[tp] = error_codes.NONE
                doomed.append(tp)
        committed = self.offsets.fetch(group_id, doomed)
        present = [tp for tp in doomed if tp in committed]
        self._append(
            group_id, [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in present]
        )
        self.offsets.delete(group_id, present)
        return error_codes.NONE, errors

    def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups: tombstones for the group and every offset it committed."""
        error = self.manager.delete(group_id)
        if error is not error_codes.NONE:
            return error
        entries: list[tuple[bytes, bytes | None]] = [
            (encode_offset_key(OffsetKey(group_id, t, p)), None)
            for t, p in self.offsets.delete_group(group_id)
        ]
        entries.append((encode_group_key(GroupKey(group_id)), None))
        self._append(group_id, entries)
        return error
