"""Exactly-once mirroring: records and the mirror's source offsets in one transaction on the target.

A transaction can only hold offsets of a group on the cluster it writes to, and the mirror's
source offsets belong to the source cluster. So, as Kafka Connect's exactly-once source
connectors do (KIP-618), the offsets live in an offsets topic on the TARGET (`OffsetStore`:
compacted, Connect's JSON records, `records.source_offset_key`), written in the same
transaction as the records they cover; a mirror resumes from them, not from the source
group's committed offsets (those are only a fallback for partitions the topic does not know
yet, e.g. after switching from at-least-once).

`ExactlyOnceStream` is a `MirrorStream` whose source consumer (read_committed unless the
configuration says otherwise: aborted source records are not mirrored) still shares the
partitions through its consumer group, but which writes each source partition through a
transactional producer of its own, `transactional.id` = `<prefix>-<topic>-<partition>`
(Kafka Streams' first exactly-once design: one producer per unit of work). When a partition is
assigned, its producer's `init_transactions` fences any earlier owner (a zombie mirror) and
aborts its open transaction; only then is the partition's stored offset read (read_committed,
up to the high watermark seen after the fencing, so nothing a fenced owner committed is
missed) and the consumer seeks there. Every commit interval (0: after every poll, Kafka
Connect's `transaction.boundary=poll`; at most half the producer's `transaction.timeout.ms`),
on a revoke and on a clean stop, each partition's open transaction gets its offset record
and is committed. A transaction
that cannot be committed (its coordinator or a leader gone too long) is dropped: the
partition's producer is replaced (fencing the old epoch, aborting what it wrote) and the
partition resumes from the stored offset. A fenced producer means another mirror owns the
partition now: the stream stops (SendFailed). A record the target refuses for good stops it
too (five failed transactions of a partition in a row; skipping would need a transaction
of its own).

Invariant: for each source partition the target holds, among committed records, exactly the
source records up to the stored offset, once each, in order; the stored offset only moves in
the transaction that wrote the records before it. Cost: one producer (and its connections)
per assigned source partition, and a transaction per partition per commit interval —
read_committed consumers on the target see records up to that interval late.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from riverlog.client.admin import AsyncAdmin
from riverlog.client.config import ProducerConfig, common_config
from riverlog.client.consumer import AsyncConsumer, ConsumerRecord
from riverlog.client.partitioner import key_partition
from riverlog.client.producer import AsyncProducer
from riverlog.client.transactional_producer import AsyncTransactionalProducer
from riverlog.mirror.flow import MirrorStream, SendFailed
from riverlog.mirror.records import decode_source_offset, source_offset_value
from riverlog.model import LATEST_TIMESTAMP
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError

log = logging.getLogger("riverlog.mirror")
TopicPartition = tuple[str, int]
FENCED = {
    error_codes.PRODUCER_FENCED.code,
    error_codes.INVALID_PRODUCER_EPOCH.code,
    error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code,
    error_codes.INVALID_PRODUCER_ID_MAPPING.code,
}
CLOSE_TIMEOUT_S = 5.0
RESTART_ATTEMPTS = 10
MAX_FAILURES = 5
"""Transactions of one partition failing in a row before the stream stops."""


async def ensure_offsets_topic(
    client_config: Mapping[str, object], name: str, partitions: int, replication_factor: int
) -> int:
    """The compacted offsets topic on the target, created if missing (replication factor
    capped at the number of brokers); its partition count."""
    async with AsyncAdmin(common_config(client_config)) as admin:
        topics = {t.name: len(t.partitions) for t in await admin.describe_topics()}
        if name in topics:
            return topics[name]
        brokers = len((await admin.describe_cluster()).brokers)
        try:
            await admin.create_topic(
                name, partitions, min(replication_factor, brokers), {"cleanup.policy": "compact"}
            )
        except KafkaError as e:
            if e.error.code != error_codes.TOPIC_ALREADY_EXISTS.code:
                raise
        return await admin.cluster.partitions_of(name)


class OffsetStore:
    """The offsets topic on the target: each source partition's last mirrored offset."""

    def __init__(
        self,
        client_config: Mapping[str, object],
        topic: str,
        partitions: int,
        key_of: Callable[[str, int], bytes],
        wait_s: float = 120.0,
    ) -> None:
        self.client = common_config(client_config)
        self.topic = topic
        self.partitions = partitions
        self.key_of = key_of
        self.wait_s = wait_s
        """How long a read waits for other writers' open transactions to end."""

    def partition_of(self, key: bytes) -> int:
        return key_partition(key, self.partitions)

    async def load(self, tps: set[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset to mirror of each of `tps` the topic knows, as committed now: read
        with read_committed up to the high watermark (so past every transaction that had
        written before this call)."""
        keys = {self.key_of(*tp): tp for tp in tps}
        wanted = sorted({(self.topic, self.partition_of(k)) for k in keys})
        if not wanted:
            return {}
        consumer = AsyncConsumer(
            {
                **self.client,
                "isolation.level": "read_committed",
                "enable.auto.commit": "false",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign(wanted)
        out: dict[TopicPartition, int] = {}
        async with consumer:
            async with AsyncAdmin(self.client) as admin:
                ends = await admin.list_offsets(wanted, LATEST_TIMESTAMP)
            consumer.seek_to_beginning()
            deadline = time.monotonic() + self.wait_s
            while any([await consumer.position(p) < ends[p] for p in wanted]):
                if time.monotonic() > deadline:
                    raise KafkaError(
                        error_codes.REQUEST_TIMED_OUT,
                        f"{self.topic}: a transaction stayed open for {self.wait_s} s",
                    )
                for r in await consumer.poll(200):
                    tp = keys.get(r.key or b"")
                    if tp is None:
                        continue
                    if r.value is None:
                        out.pop(tp, None)
                        continue
                    try:
                        out[tp] = decode_source_offset(r.value) + 1
                    except ValueError as e:
                        log.warning("%s offset %d: %s; skipped", self.topic, r.offset, e)
        return out


class ExactlyOnceStream(MirrorStream):
    """A mirror stream writing each source partition in transactions of its own."""

    def __init__(
        self,
        consumer_config: Mapping[str, object],
        producer: AsyncProducer,
        producer_config: Mapping[str, object],
        store: OffsetStore,
        transactional_prefix: str,
        **options: object,
    ) -> None:
        super().__init__(
            {"isolation.level": "read_committed", **consumer_config},
            producer,
            **options,  # type: ignore[arg-type]
        )
        self.producer_config = {k: v for k, v in producer_config.items() if k != "transactional.id"}
        # A transaction must end well within the coordinator's timeout for it.
        timeout_s = ProducerConfig.parse(self.producer_config).transaction_timeout_ms / 1000
        if self.commit_interval_s > timeout_s / 2:
            log.info(
                "mirror: transactions commit every %.1f s (half of transaction.timeout.ms)",
                timeout_s / 2,
            )
            self.commit_interval_s = timeout_s / 2
        self.store = store
        self.prefix = transactional_prefix
        self._producers: dict[TopicPartition, AsyncTransactionalProducer] = {}
        self._open: set[TopicPartition] = set()
        """Partitions whose producer has a transaction begun."""
        self._start: dict[TopicPartition, int] = {}
        """Where a partition resumed when the offsets topic had nothing for it."""
        self._lock = asyncio.Lock()
        self._failures: dict[TopicPartition, int] = {}
        """Transactions of a partition that failed in a row."""

    # -- partitions come and go ------------------------------------------------------------

    async def _assigned(self, partitions: set[TopicPartition]) -> None:
        self.consumer.pause(partitions)  # nothing is fetched before the stored offset is known
        async with self._lock:
            # A stored offset is read past every open transaction on its offsets partition:
            # this stream's own open transactions must not be among them.
            await self._commit_locked(self._owned())
            await asyncio.gather(*(self._new_producer(tp) for tp in partitions))
            await self._resume(partitions)

    async def _revoked(self, partitions: set[TopicPartition]) -> None:
        async with self._lock:
            if self._failed is None:  # after a failure nothing more is committed
                await self._commit_locked(
                    {tp: self._next[tp] for tp in partitions if tp in self._next}
                )
            await self._drop(partitions)

    async def _lost(self, partitions: set[TopicPartition]) -> None:
        async with self._lock:
            await self._drop(partitions)

    async def _new_producer(self, tp: TopicPartition) -> None:
        """A transactional producer for `tp`, initialised (which fences an earlier owner and
        aborts its open transaction); retried while the target cannot answer, up to
        RESTART_ATTEMPTS times."""
        for attempt in range(RESTART_ATTEMPTS):
            producer = AsyncTransactionalProducer(
                {**self.producer_config, "transactional.id": f"{self.prefix}-{tp[0]}-{tp[1]}"}
            )
            try:
                await producer.init_transactions()
                await producer.partitions_for(self.store.topic)
                self._producers[tp] = producer
                return
            except (KafkaError, ConnectionError, OSError) as e:
                with contextlib.suppress(KafkaError, ConnectionError, OSError):
                    await producer.close(0)
                fenced = isinstance(e, KafkaError) and e.error.code in FENCED
                if fenced or attempt == RESTART_ATTEMPTS - 1:
                    raise
                log.warning("mirror: a producer for %s-%d: %s; retrying", tp[0], tp[1], e)
                await asyncio.sleep(self.consumer.config.retry_backoff_ms / 1000)

    async def _resume(self, partitions: set[TopicPartition]) -> None:
        """Seek to the stored offsets (or note where the group's offsets put the partition)
        and fetch again."""
        stored = await self.store.load(partitions)
        owned = self.consumer.assignment()
        for tp in sorted(partitions & owned):
            if tp in stored:
                self.consumer.seek(tp, stored[tp])
            elif tp in self._start:
                self.consumer.seek(tp, self._start[tp])
            else:
                self._start[tp] = await self.consumer.position(tp)
            self._next.pop(tp, None)
            log.info(
                "mirror: %s-%d resumes at offset %d (%s)",
                *tp,
                stored.get(tp, self._start.get(tp, -1)),
                "stored on the target" if tp in stored else "the group's or auto.offset.reset",
            )
        self.consumer.resume(partitions)

    async def _drop(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self._next.pop(tp, None)
            self._start.pop(tp, None)
        await asyncio.gather(*(self._close(tp) for tp in partitions))

    async def _close(self, tp: TopicPartition) -> None:
        """Close a partition's producer; an open transaction is left to the next owner's
        fencing (or the transaction timeout) to abort."""
        self._open.discard(tp)
        producer = self._producers.pop(tp, None)
        if producer is not None:
            with contextlib.suppress(KafkaError, ConnectionError, OSError):
                await producer.close(CLOSE_TIMEOUT_S)

    # -- sending -------------------------------------------------------------------------

    async def _send(self, records: list[ConsumerRecord]) -> None:
        async with self._lock:  # not while partitions are being handed over
            mine = [r for r in records if (r.topic, r.partition) in self._producers]
            if mine:
                await super()._send(mine)

    async def _before_send(self, records: list[ConsumerRecord]) -> None:
        for tp in {(r.topic, r.partition) for r in records} - self._open:
            try:
                await self._producers[tp].begin_transaction()
            except KafkaError as e:
                if e.error.code in FENCED:
                    self._failed = SendFailed(f"{tp[0]}-{tp[1]}: fenced by another mirror ({e})")
                    raise self._failed from e
                raise
            self._open.add(tp)

    def _producer_for(self, topic: str, partition: int) -> AsyncProducer:
        return self._producers[(topic, partition)]

    def _check_failures(self) -> None:
        """Failed records surface when their transaction commits (`_commit_one`)."""

    # -- committing ----------------------------------------------------------------------

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self._failed is not None:
            return
        async with self._lock:
            await self._commit_locked(offsets)

    async def _commit_locked(self, offsets: Mapping[TopicPartition, int]) -> None:
        todo = [tp for tp in offsets if tp in self._open]
        results = await asyncio.gather(
            *(self._commit_one(tp, offsets[tp]) for tp in todo), return_exceptions=True
        )
        broken = []
        for tp, result in zip(todo, results, strict=True):
            if isinstance(result, SendFailed):
                self._failed = result
                raise result
            if isinstance(result, BaseException):
                raise result
            if not result:
                broken.append(tp)
        if broken:
            # Reading a stored offset waits for open transactions on its offsets partition:
            # this stream's others are committed first.
            await self._commit_locked({tp: self._next[tp] for tp in self._open if tp in self._next})
            for tp in broken:
                await self._restart(tp)

    async def _commit_one(self, tp: TopicPartition, next_offset: int) -> bool:
        """Commit a partition's transaction with its offset record: whether it committed
        (False: the partition must restart). SendFailed when fenced, or when the partition's
        transactions failed `MAX_FAILURES` times in a row (a record refused for good)."""
        producer = self._producers[tp]
        key = self.store.key_of(*tp)
        try:
            producer.enqueue(
                self.store.topic,
                source_offset_value(next_offset - 1),
                key,
                self.store.partition_of(key),
                None,
                None,
                None,
            )
            await producer.commit_transaction()
        except (KafkaError, ConnectionError, OSError) as e:
            if isinstance(e, KafkaError) and e.error.code in FENCED:
                raise SendFailed(f"{tp[0]}-{tp[1]}: fenced by another mirror ({e})") from e
            failures = self._failures[tp] = self._failures.get(tp, 0) + 1
            if failures >= MAX_FAILURES:
                raise SendFailed(
                    f"{tp[0]}-{tp[1]}: {failures} transactions in a row failed, the last: {e}"
                ) from e
            self._open.discard(tp)  # that transaction is lost; `_restart` aborts it
            log.warning(
                "mirror: the transaction of %s-%d failed (%s); resuming from its stored offset",
                tp[0],
                tp[1],
                e,
            )
            return False
        self._open.discard(tp)
        self._failures.pop(tp, None)
        return True

    async def _restart(self, tp: TopicPartition) -> None:
        """Replace a partition's producer (aborting what it wrote) and resume the partition
        from its stored offset."""
        await self._close(tp)
        await self._new_producer(tp)
        if tp in self.consumer.assignment():
            self.consumer.pause({tp})
            await self._resume({tp})

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await super().run(stop)
        finally:
            await asyncio.gather(*(self._close(tp) for tp in list(self._producers)))
