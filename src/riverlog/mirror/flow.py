"""One mirror stream: a consumer-group member on the source cluster feeding a producer to
the target cluster, MirrorMaker 1's loop.

Each polled record goes to the producer with its key, value, headers and timestamp, to the
topic `rename(topic)`, and to the same partition number when the target topic has as many
partitions as the source topic (or always, with `keep_partitions`, as MirrorMaker 2 does);
otherwise the producer's partitioner picks (by key). Every `commit_interval_ms`, on a
rebalance that revokes partitions, and on a clean stop, the stream flushes the producer —
waits until the target answered every record sent so far — and only then commits the
positions it sent up to. So a committed offset covers only acknowledged records, and a
stream killed at any moment resends at most what followed its last commit: at-least-once
(duplicates on the target, never gaps). Records of one source partition are written in order
(the idempotent producer keeps order across retries).

A source that fails for a while (a leader or the group coordinator moving, a broker down)
is polled again after `retry.backoff.ms`; only an error that retrying cannot cure stops the
stream. A failed send (the producer gave up: `delivery.timeout.ms`, a record refused for good) stops
the stream without committing when `abort_on_send_failure` (the default, as in MM1);
otherwise it is logged and skipped. A `tracker` hears where the records it asks for and the
last record of each partition of each poll landed (MirrorMaker 2's offset syncs).

Metrics (`metrics.MirrorMetrics`, when given): records and bytes counted per poll as they are
handed to the producer, replication latency (acknowledgement time minus the source record's
timestamp) from the last record of each partition of each poll, lag per partition from the
consumer (`current_lag`) at scrape time. `exactly_once.py` subclasses the stream: one
transactional producer per source partition (`_producer_for`, `_before_send`, `_commit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from riverlog.client.consumer import AsyncConsumer, ConsumerRecord
from riverlog.client.producer import AsyncProducer, RecordMetadata
from riverlog.mirror.metrics import FlowMetrics
from riverlog.protocol.error_codes import KafkaError

log = logging.getLogger("riverlog.mirror")
TopicPartition = tuple[str, int]
POLL_MS = 100


class DeliveryTracker(Protocol):
    """Who hears where some mirrored records landed (MirrorMaker 2's offset syncs)."""

    def wants(self, topic: str, partition: int, offset: int) -> bool:
        """Whether to hear about this record (asked as it is sent)."""

    def delivered(self, topic: str, partition: int, offset: int, where: RecordMetadata) -> None:
        """Where a record landed on the target (after the target acknowledged it)."""


class SendFailed(RuntimeError):
    """A record could not be delivered and `abort.on.send.failure` is on."""


def _same(topic: str) -> str:
    return topic


class MirrorStream:
    """A consumer on the source, sending to a (shared) producer on the target."""

    def __init__(
        self,
        consumer_config: Mapping[str, object],
        producer: AsyncProducer,
        *,
        commit_interval_ms: int = 60_000,
        abort_on_send_failure: bool = True,
        rename: Callable[[str], str] = _same,
        keep_partitions: bool = False,
        tracker: DeliveryTracker | None = None,
        metrics: FlowMetrics | None = None,
    ) -> None:
        self.consumer = AsyncConsumer(consumer_config)
        self.metrics = metrics
        if metrics is not None:
            metrics.watch(self.consumer)
        self.producer = producer
        self.commit_interval_s = commit_interval_ms / 1000
        self.abort_on_send_failure = abort_on_send_failure
        self.rename = rename
        self.keep_partitions = keep_partitions
        self.tracker = tracker
        self.dropped = 0
        """Records the producer gave up on (skipped, with abort_on_send_failure off)."""
        self._next: dict[TopicPartition, int] = {}
        """Per partition, the offset after the last record handed to the producer."""
        self._failed: SendFailed | None = None

    # -- subscription --------------------------------------------------------------------

    def subscribe(self, topics: set[str] | None = None, pattern: str | None = None) -> None:
        """Mirror `topics`, or every topic matching `pattern` (a whole-name regex)."""
        if pattern is not None:
            re.compile(pattern)
            self.consumer.subscribe(
                pattern=pattern,
                on_assign=self._assigned,
                on_revoke=self._revoked,
                on_lost=self._lost,
            )
        else:
            self.consumer.subscribe(
                sorted(topics or ()),
                on_assign=self._assigned,
                on_revoke=self._revoked,
                on_lost=self._lost,
            )

    def _owned(self) -> dict[TopicPartition, int]:
        """What to commit: the partitions this stream still owns (a rebalance may have run
        while records of a revoked one were being sent)."""
        owned = self.consumer.assignment()
        return {tp: offset for tp, offset in self._next.items() if tp in owned}

    async def _assigned(self, partitions: set[TopicPartition]) -> None:
        """New partitions (they resume from the group's committed offsets)."""

    async def _revoked(self, partitions: set[TopicPartition]) -> None:
        await self._commit({tp: self._next[tp] for tp in partitions if tp in self._next})
        for tp in partitions:
            self._next.pop(tp, None)

    async def _lost(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._next.pop(tp, None)

    # -- the loop ------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Mirror until `stop` is set (then flush and commit) or a send fails for good
        (SendFailed, nothing more committed). Closes the consumer either way."""
        next_commit = time.monotonic() + self.commit_interval_s
        clean = False
        try:
            while not stop.is_set():
                try:
                    records = await self.consumer.poll(POLL_MS)
                except (KafkaError, ConnectionError, OSError) as e:
                    if isinstance(e, KafkaError) and not e.retriable:
                        raise
                    log.warning("mirror: polling the source failed (%s); retrying", e)
                    await asyncio.sleep(self.consumer.config.retry_backoff_ms / 1000)
                    continue
                if records:
                    await self._send(records)
                self._check_failures()
                if time.monotonic() >= next_commit:
                    await self._commit(self._owned())
                    next_commit = time.monotonic() + self.commit_interval_s
            await self._commit(self._owned())
            clean = True
        finally:
            if not clean and self._failed is None:
                self._failed = SendFailed("stopped by an error")  # the close must not commit
            with contextlib.suppress(KafkaError, ConnectionError, OSError):
                await self.consumer.close()

    async def _send(self, records: list[ConsumerRecord]) -> None:
        tracker, metrics = self.tracker, self.metrics
        await self._before_send(records)
        last: dict[TopicPartition, int] = {}
        if tracker is not None or metrics is not None:
            for i, r in enumerate(records):
                last[(r.topic, r.partition)] = i
        if metrics is not None:
            metrics.sent(records)
        source_counts = self.consumer.cluster.partition_counts
        for i, r in enumerate(records):
            producer = self._producer_for(r.topic, r.partition)
            counts = producer.cluster.partition_counts
            target = self.rename(r.topic)
            if target not in counts:
                await producer.partitions_for(target)
            partition: int | None = r.partition
            if self.keep_partitions:
                if r.partition >= counts[target]:
                    await self._wait_for_partition(producer, target, r.partition)
            elif counts.get(target) != source_counts.get(r.topic):
                partition = None
            waiter = None
            is_last = bool(last) and last[(r.topic, r.partition)] == i
            if is_last or (tracker is not None and tracker.wants(r.topic, r.partition, r.offset)):
                waiter = self._delivery_callback(r, producer)
            timestamp = r.timestamp if r.timestamp >= 0 else None
            headers = r.headers or None
            if producer.can_enqueue(target):
                if producer.enqueue(target, r.value, r.key, partition, timestamp, headers, waiter):
                    await asyncio.sleep(0)  # let the sender send the batch that filled up
            else:  # the buffer is full: send waits for room
                future = await producer.send(
                    target,
                    r.value,
                    r.key,
                    partition=partition,
                    timestamp_ms=timestamp,
                    headers=headers,
                )
                future.add_done_callback(self._future_done(waiter, producer))
            self._next[(r.topic, r.partition)] = r.offset + 1

    async def _before_send(self, records: list[ConsumerRecord]) -> None:
        """Called before `records` are sent (the exactly-once stream begins transactions)."""

    def _producer_for(self, topic: str, partition: int) -> AsyncProducer:
        """The producer that sends the records of one source partition."""
        return self.producer

    async def _wait_for_partition(
        self, producer: AsyncProducer, topic: str, partition: int
    ) -> None:
        """The target topic grew after the source's (MirrorMaker 2 grows it first): wait
        until the producer's metadata shows the partition."""
        cluster = producer.cluster
        deadline = time.monotonic() + producer.config.max_block_ms / 1000
        while partition >= cluster.partition_counts.get(topic, 0):
            if time.monotonic() > deadline:
                raise SendFailed(f"{topic} has no partition {partition} on the target")
            await asyncio.sleep(producer.config.retry_backoff_ms / 1000)
            with contextlib.suppress(KafkaError, ConnectionError):
                await cluster.refresh([topic], allow_auto_create=False)

    def _delivery_callback(
        self, record: ConsumerRecord, producer: AsyncProducer
    ) -> Callable[[BaseException | None, RecordMetadata | None], None]:
        topic, partition, offset, timestamp = (
            record.topic,
            record.partition,
            record.offset,
            record.timestamp,
        )

        def delivered(error: BaseException | None, metadata: RecordMetadata | None) -> None:
            if error is not None:
                producer.unreported_errors.append(error)
                return
            if metadata is None:
                return
            if self.tracker is not None:
                self.tracker.delivered(topic, partition, offset, metadata)
            if self.metrics is not None and timestamp >= 0:
                self.metrics.delivered(topic, partition, time.time() * 1000 - timestamp)

        return delivered

    def _future_done(
        self,
        waiter: Callable[[BaseException | None, RecordMetadata | None], None] | None,
        producer: AsyncProducer,
    ) -> Callable[[asyncio.Future[RecordMetadata]], None]:
        def done(future: asyncio.Future[RecordMetadata]) -> None:
            error = future.exception()
            if waiter is not None:
                waiter(error, None if error else future.result())
            elif error is not None:
                producer.unreported_errors.append(error)

        return done

    def _check_failures(self) -> None:
        errors = self.producer.unreported_errors
        if not errors:
            return
        if self.abort_on_send_failure:
            self._failed = SendFailed(f"a record could not be mirrored: {errors[0]}")
            raise self._failed
        log.error(
            "mirror: %d record(s) could not be sent and are skipped: %s", len(errors), errors[0]
        )
        self.dropped += len(errors)
        errors.clear()

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Flush the producer, then commit `offsets` — unless a send failed for good."""
        if self._failed is not None:
            return
        await self.producer.flush()
        self._check_failures()
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except (KafkaError, ConnectionError) as e:
            log.warning("mirror: committing offsets failed (%s); the next commit covers them", e)
