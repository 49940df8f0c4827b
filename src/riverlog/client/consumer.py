"""The asyncio consumer: subscribe (group) or assign (simple consumer), poll records or Arrow.

How it works. The consumer keeps a *position* per assigned partition (the next offset to hand
out). `poll` first lets the group membership rebalance if needed (`membership.py`), commits
on schedule when `enable.auto.commit` is on, and gives positions to new partitions (the
group's committed offset, else `auto.offset.reset` through ListOffsets). Then it hands out
buffered records, or waits for fetches: one Fetch in flight per leader (`fetcher.py`) for the
partitions that have no buffered data, started again as soon as a poll takes data, so the
next fetch overlaps the application's processing. `poll_arrow` hands out the same buffered
data as one `pyarrow.Table` (`arrow.py`), without building Python objects per record.

Invariants: a record is handed out once unless the application seeks; positions only move
forward through poll (or by seek); a fetch answer for a position that changed meanwhile (a
seek, a rebalance) is dropped, and so is a position looked up for a partition that was
sought, revoked or given a position meanwhile (Kafka's consumer skips a reset "no longer
needed"); paused partitions are not fetched, and what was buffered for them stays until
resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeVar

from riverlog.client import fetcher
from riverlog.client.admin_requests import leader_offsets
from riverlog.client.cluster import Cluster
from riverlog.client.config import ConsumerConfig
from riverlog.client.fetcher import ConsumerRecord, FetchedPartition
from riverlog.client.group_member import GroupMembership
from riverlog.client.transactional_producer import GroupMetadata
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.records.batch_header import read_batch_header

if TYPE_CHECKING:
    import pyarrow as pa

_T = TypeVar("_T")
EARLIEST = -2
LATEST = -1
Listener = Callable[[set[TopicPartition]], Awaitable[None] | None]

__all__ = ["EARLIEST", "LATEST", "AsyncConsumer", "ConsumerRecord"]


class AsyncConsumer:
    """Kafka consumer on asyncio. Configure with Kafka's keys:

    consumer = AsyncConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "g",
                              "auto.offset.reset": "earliest"})
    consumer.subscribe(["events"])
    async with consumer:
        for record in await consumer.poll(1000):
            ...
    """

    def __init__(self, config: Mapping[str, object]) -> None:
        self.config = ConsumerConfig.parse(config)
        c = self.config
        self.cluster = Cluster.from_config(c)
        self._positions: dict[TopicPartition, int | None] = {}
        self._paused: set[TopicPartition] = set()
        self._buffered: dict[TopicPartition, FetchedPartition] = {}
        self._fetching: dict[int, asyncio.Task[None]] = {}
        self._in_flight: set[TopicPartition] = set()
        self._arrived = asyncio.Event()
        self._topics: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._pattern_checked = 0.0
        self._listeners: tuple[Listener | None, Listener | None, Listener | None] = (None,) * 3
        self._group: GroupMembership | None = None
        self._next_auto_commit = time.monotonic() + c.auto_commit_interval_ms / 1000
        self._needs_reset: set[TopicPartition] = set()
        self._refresh: asyncio.Task[None] | None = None
        self._commits: set[asyncio.Task[None]] = set()
        self._end_offsets: dict[TopicPartition, int] = {}
        """Per partition, the end offset the last fetch answer gave (the high watermark, or
        the last stable offset with read_committed): for `current_lag`."""
        self._closed = False

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- what to consume -----------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] = (),
        *,
        pattern: str | None = None,
        on_assign: Listener | None = None,
        on_revoke: Listener | None = None,
        on_lost: Listener | None = None,
    ) -> None:
        """Join the group (`group.id`) for `topics`, or for every topic matching `pattern`
        (a regex; a topic name starting with `^` in `topics` also counts as one). New
        matching topics are picked up every `metadata.max.age.ms`. The listeners get the
        partitions that were assigned, revoked, or lost (membership ended without a
        revoke); `on_lost` defaults to `on_revoke`."""
        if self.config.group_id is None:
            raise ValueError("subscribe needs group.id; use assign without a group")
        names = list(topics)
        patterns = [t for t in names if t.startswith("^")] + ([pattern] if pattern else [])
        if patterns and (len(patterns) > 1 or len(patterns) != len(names) + bool(pattern)):
            raise ValueError("subscribe to topic names or to one pattern, not both")
        self._pattern = re.compile(patterns[0]) if patterns else None
        self._topics = set() if patterns else set(names)
        self._pattern_checked = 0.0
        self._listeners = (on_assign, on_revoke, on_lost or on_revoke)
        if self._group is None:
            self._group = GroupMembership(
                self.cluster, self.config, self._revoked, self._assigned, self._lost
            )
        self._group.subscribe(self._topics)

    def enforce_rebalance(self) -> None:
        """Rejoin the group at the next poll (the Java consumer's `enforceRebalance`): after
        a subscribed topic grew, say, so that its new partitions get assigned."""
        if self._group is not None:
            self._group.request_rejoin()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions, without group membership."""
        if self._group is not None:
            raise ValueError("this consumer subscribed; it cannot also assign")
        wanted = set(partitions)
        for tp in set(self._positions) - wanted:
            self._drop(tp)
        for tp in wanted:
            self._positions.setdefault(tp, None)

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def group_metadata(self) -> GroupMetadata:
        """For a transactional producer's `send_offsets_to_transaction` (KIP-447)."""
        if self.config.group_id is None:
            raise ValueError("the consumer has no group.id")
        group = self._group
        return GroupMetadata(
            self.config.group_id,
            group.generation if group is not None else -1,
            group.member_id if group is not None else "",
            self.config.group_instance_id,
        )

    def _drop(self, tp: TopicPartition) -> None:
        self._positions.pop(tp, None)
        self._end_offsets.pop(tp, None)
        self._buffered.pop(tp, None)
        self._paused.discard(tp)
        self._needs_reset.discard(tp)

    async def _call(self, listener: Listener | None, partitions: set[TopicPartition]) -> None:
        if listener is not None:
            result = listener(partitions)
            if inspect.isawaitable(result):
                await result

    async def _assigned(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.setdefault(tp, None)
        await self._call(self._listeners[0], partitions)

    async def _revoked(self, partitions: set[TopicPartition]) -> None:
        if self.config.enable_auto_commit:
            with contextlib.suppress(KafkaError, ConnectionError):
                await self.commit(
                    {tp: o for tp in partitions if (o := self._positions.get(tp)) is not None}
                )
        await self._call(self._listeners[1], partitions)
        for tp in partitions:
            self._drop(tp)

    async def _lost(self, partitions: set[TopicPartition]) -> None:
        await self._call(self._listeners[2], partitions)
        for tp in partitions:
            self._drop(tp)

    # -- positions -----------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Hand out `tp` from `offset` next (EARLIEST / LATEST also accepted)."""
        if tp not in self._positions:
            raise ValueError(f"{tp} is not assigned to this consumer")
        self._buffered.pop(tp, None)
        self._needs_reset.discard(tp)
        self._positions[tp] = offset

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Hand out from the earliest offset (all assigned partitions by default)."""
        for tp in list(partitions if partitions is not None else self._positions):
            self.seek(tp, EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Hand out only records written from now on (all assigned partitions by default)."""
        for tp in list(partitions if partitions is not None else self._positions):
            self.seek(tp, LATEST)

    async def seek_to_timestamp(
        self, timestamp_ms: int, partitions: Iterable[TopicPartition] | None = None
    ) -> None:
        """Move to the first offset with a timestamp ≥ `timestamp_ms` (the end if none)."""
        for tp in list(partitions if partitions is not None else self._positions):
            found = await self._offset_at(tp, timestamp_ms)
            self.seek(tp, found if found >= 0 else await self._offset_at(tp, LATEST))

    async def position(self, tp: TopicPartition) -> int:
        while (position := self._positions[tp]) is None or position < 0:
            await self._initialize_positions()
        return position

    def current_lag(self, tp: TopicPartition) -> int | None:
        """Records between the position and the partition's end offset as of the last fetch
        (the Java consumer's `currentLag`, KIP-695); None before a fetch answered."""
        end, position = self._end_offsets.get(tp), self._positions.get(tp)
        if end is None or position is None or position < 0:
            return None
        return max(0, end - position)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused.update(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused.difference_update(partitions)

    async def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets for `partitions` (only those that have one)."""
        return await self._membership().committed(list(partitions))

    async def _offset_at(self, tp: TopicPartition, timestamp: int) -> int:
        offsets = await leader_offsets(self.cluster, [tp], timestamp, self.config.retry_backoff_ms)
        return offsets[tp]

    async def _reset_offset(self, tp: TopicPartition) -> int:
        """Where `auto.offset.reset` puts `tp`."""
        policy = self.config.auto_offset_reset
        if policy == "none":
            raise KafkaError(
                error_codes.OFFSET_OUT_OF_RANGE, f"no position for {tp} and auto.offset.reset=none"
            )
        return await self._offset_at(tp, EARLIEST if policy == "earliest" else LATEST)

    async def _initialize_positions(self) -> None:
        """Give positions to partitions without one: the group's committed offset, else
        `auto.offset.reset`; a seek to EARLIEST / LATEST is looked up. Each answer is taken
        only if the partition still waits for it: the lookups are requests, and a seek (an
        `on_assign` listener's, say), a revoke or another caller may have settled the
        partition meanwhile — overwriting that seek would rewind the partition."""
        missing = {tp: p for tp, p in self._positions.items() if p is None or p < 0}
        if not missing:
            return
        committed: dict[TopicPartition, int] = {}
        unset = [tp for tp, p in missing.items() if p is None and tp not in self._needs_reset]
        if self.config.group_id is not None and unset:
            committed = await self._membership().committed(unset)
        for tp, wanted in missing.items():
            if tp not in self._positions or self._positions[tp] != wanted:
                continue  # settled meanwhile
            if tp in self._needs_reset:  # out of range: the policy decides, not the commit
                found = await self._reset_offset(tp)
            elif wanted is not None:  # a seek to EARLIEST / LATEST
                found = await self._offset_at(tp, wanted)
            elif tp in committed:
                found = committed[tp]
            else:
                found = await self._reset_offset(tp)
            if tp in self._positions and self._positions[tp] == wanted:
                self._positions[tp] = found
                self._needs_reset.discard(tp)

    def _membership(self) -> GroupMembership:
        if self._group is None:
            if self.config.group_id is None:
                raise ValueError("committed offsets need group.id")
            self._group = GroupMembership(
                self.cluster, self.config, self._revoked, self._assigned, self._lost
            )
        return self._group

    # -- polling -------------------------------------------------------------------------

    async def _maintain(self, deadline: float) -> None:
        if self._closed:
            raise RuntimeError("the consumer is closed")
        if self._pattern is not None and self._group is not None:
            await self._match_pattern()
        if self._group is not None and self._group.subscription | self._topics:
            rebalance = self._group.ensure_active()
            if rebalance is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        await asyncio.shield(rebalance)
                self._group.ensure_active()  # raises what the rebalance raised, if it ended
        await self._initialize_positions()
        with contextlib.suppress(KafkaError, ConnectionError):
            await self.cluster.refresh_if_old()
        auto_commit = self.config.enable_auto_commit and self.config.group_id is not None
        if auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
            self.commit_async()

    async def _match_pattern(self) -> None:
        assert self._pattern is not None and self._group is not None
        now = time.monotonic()
        if now - self._pattern_checked < self.config.metadata_max_age_ms / 1000:
            return
        self._pattern_checked = now
        names = await self.cluster.all_topics()
        self._group.subscribe({t for t in names if self._pattern.fullmatch(t)})

    async def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Records from the assigned partitions, at most `max.poll.records`; waits up to
        `timeout_ms` for some. Raises KafkaError for errors the application must see."""
        return await self._poll(timeout_ms, self._take_records)

    async def poll_arrow(self, timeout_ms: int = 0, *, include_headers: bool = True) -> pa.Table:
        """Everything fetched so far as one Arrow table with the columns of Spark's Kafka
        source (key, value, topic, partition, offset, timestamp, timestampType[, headers]);
        waits up to `timeout_ms` for data. `max.poll.records` does not apply."""
        from riverlog.client import arrow

        tables = await self._poll(timeout_ms, lambda: self._take_arrow(include_headers))
        schema = arrow.SCHEMA if include_headers else arrow.SCHEMA_WITHOUT_HEADERS
        import pyarrow as pa

        return pa.Table.from_batches(tables, schema=schema)

    async def _poll(self, timeout_ms: int, take: Callable[[], list[_T]]) -> list[_T]:
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            await self._maintain(deadline)
            self._raise_errors()
            out = take()
            self._start_fetches()
            if out:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, self.config.heartbeat_interval_ms / 1000)):
                    await self._arrived.wait()

    def _fetchable(self, tp: TopicPartition) -> bool:
        return (
            tp not in self._paused
            and tp not in self._in_flight
            and tp not in self._buffered
            and self._positions.get(tp) is not None
        )

    def _take_records(self) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        room = self.config.max_poll_records
        for tp, fetched in list(self._buffered.items()):
            if tp in self._paused or fetched.error_code:
                continue
            position = self._positions.get(tp)
            if position is None:
                continue
            if fetched.records is None:
                try:
                    fetched.records = fetcher.decode_records(tp, fetched.batches, position)
                except fetcher.UnreadableBatchError as e:
                    if not e.records_before:
                        del self._buffered[tp]
                        raise KafkaError(
                            error_codes.CORRUPT_MESSAGE,
                            f"{e}: seek past it to go on (the position stays at {position})",
                        ) from e
                    # Hand out the records before it; the position then stops at it and
                    # the next fetch starts there (and raises).
                    fetched.records, fetched.next_offset = e.records_before, e.offset
            taken, fetched.records = fetched.records[:room], fetched.records[room:]
            out += taken
            room -= len(taken)
            if taken:
                self._positions[tp] = taken[-1].offset + 1
            if not fetched.records:
                del self._buffered[tp]
                self._positions[tp] = max(self._positions[tp] or 0, fetched.next_offset)
            if room <= 0:
                break
        return out

    def _take_arrow(self, include_headers: bool) -> list[pa.RecordBatch]:
        from riverlog.client import arrow

        out = []
        for tp, fetched in list(self._buffered.items()):
            position = self._positions.get(tp)
            if tp in self._paused or fetched.error_code or position is None:
                continue
            del self._buffered[tp]
            if fetched.records is not None:  # a poll decoded part of it: go on from there
                fetched.batches = [
                    b for b in fetched.batches if read_batch_header(b).next_offset > position
                ]
            table = arrow.batches_to_arrow(
                tp[0], tp[1], fetched.batches, min_offset=position, include_headers=include_headers
            )
            if table.num_rows:
                out.append(table)
            self._positions[tp] = max(position, fetched.next_offset)
        return out

    def _raise_errors(self) -> None:
        for tp, fetched in list(self._buffered.items()):
            code = fetched.error_code
            if code == 0:
                continue
            del self._buffered[tp]
            if code == error_codes.OFFSET_OUT_OF_RANGE.code:
                self._positions[tp] = None
                self._needs_reset.add(tp)
            elif code in fetcher.STALE_METADATA_ERRORS or (
                for_code(code).retriable and code != error_codes.CORRUPT_MESSAGE.code
            ):
                self.cluster.mark_stale(tp)
            else:
                raise KafkaError(for_code(code), f"fetching {tp[0]}-{tp[1]} failed")

    def _start_fetches(self) -> None:
        by_node: dict[int, dict[TopicPartition, int]] = {}
        for tp, position in self._positions.items():
            if not self._fetchable(tp):
                continue
            leader = self.cluster.leaders.get(tp, -1)
            if leader < 0 or leader not in self.cluster.brokers:
                if self._refresh is None or self._refresh.done():
                    self._refresh = asyncio.get_running_loop().create_task(
                        self._refresh_metadata(tp[0])
                    )
                continue
            if leader in self._fetching:
                continue
            assert position is not None
            by_node.setdefault(leader, {})[tp] = position
        for node, positions in by_node.items():
            self._in_flight.update(positions)
            self._fetching[node] = asyncio.get_running_loop().create_task(
                self._fetch(node, positions)
            )

    async def _fetch(self, node: int, positions: dict[TopicPartition, int]) -> None:
        try:
            results = await fetcher.fetch_from(self.cluster, node, positions, self.config)
        except (ConnectionError, OSError, KafkaError):
            results = []
            for tp in positions:
                self.cluster.mark_stale(tp)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._in_flight.difference_update(positions)
            self._fetching.pop(node, None)
        for fetched in results:
            if self._positions.get(fetched.tp) != fetched.fetch_offset:
                continue  # a seek or a rebalance happened meanwhile
            if fetched.error_code == 0:
                end = fetched.high_watermark
                if self.config.isolation_level == "read_committed":
                    end = fetched.last_stable_offset
                if end >= 0:
                    self._end_offsets[fetched.tp] = end
            if fetched.error_code == 0 and not fetched.batches:
                if fetched.next_offset > fetched.fetch_offset:  # only markers: skip them
                    self._positions[fetched.tp] = fetched.next_offset
                continue
            self._buffered[fetched.tp] = fetched
        self._arrived.set()

    async def _refresh_metadata(self, topic: str) -> None:
        with contextlib.suppress(KafkaError, ConnectionError):
            await self.cluster.refresh([topic], allow_auto_create=False)
        await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        self._arrived.set()

    # -- commits and closing -------------------------------------------------------------

    def _consumed(self) -> dict[TopicPartition, int]:
        return {tp: p for tp, p in self._positions.items() if p is not None and p >= 0}

    async def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Commit `offsets` (the next offsets to read), by default the positions of every
        assigned partition, and wait for the answer. KafkaError if the group rebalanced
        meanwhile (the partitions may be someone else's now)."""
        wanted = dict(offsets) if offsets is not None else self._consumed()
        if not wanted:
            return
        group = self._membership()
        for attempt in range(5):
            try:
                await group.commit(wanted)
                return
            except (KafkaError, ConnectionError) as e:
                coordinator_moved = isinstance(e, ConnectionError) or e.error.code in (
                    error_codes.NOT_COORDINATOR.code,
                    error_codes.COORDINATOR_NOT_AVAILABLE.code,
                    error_codes.COORDINATOR_LOAD_IN_PROGRESS.code,
                    error_codes.REQUEST_TIMED_OUT.code,
                )
                if not coordinator_moved or attempt == 4:
                    raise
                group.admin.forget(group.group_id)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    def commit_async(
        self, offsets: Mapping[TopicPartition, int] | None = None
    ) -> asyncio.Task[None]:
        """Start a commit and return at once; await the task to learn how it went."""
        task = asyncio.get_running_loop().create_task(self.commit(offsets))
        self._commits.add(task)
        task.add_done_callback(self._commit_done)
        return task

    def _commit_done(self, task: asyncio.Task[None]) -> None:
        self._commits.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the awaiting caller, if any, sees it too

    async def close(self) -> None:
        """Stop fetching, commit (with `enable.auto.commit`), leave the group, disconnect."""
        if self._closed:
            return
        self._closed = True
        for task in [*self._fetching.values(), *([self._refresh] if self._refresh else [])]:
            task.cancel()
        if self._commits:
            await asyncio.gather(*self._commits, return_exceptions=True)
        try:
            if self._group is not None:
                await self._group.close()
            elif self.config.enable_auto_commit and self.config.group_id and self._consumed():
                with contextlib.suppress(KafkaError, ConnectionError):
                    await self.commit()
        finally:
            await self.cluster.close()
