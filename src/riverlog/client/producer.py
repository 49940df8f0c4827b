"""The asyncio producer: `send` queues a record and returns a future of where it landed.

How it works. `send` picks the partition (`partitioner.py`), appends the record to the
accumulator (`accumulator.py`) and returns at once — it waits only while `buffer.memory` is
full. One sender task drains ready batches, groups them by leader into Produce requests (at
most `max.in.flight.requests.per.connection` per broker), and completes every record's future
from the answers.

Idempotence (on by default, as in the Java client): the producer gets a producer id from
InitProducerId and numbers each partition's batches with sequences when they are first sent;
the broker drops a duplicate (answering with the original offset) and refuses a gap, so retries
never write a record twice and never reorder. A leader refuses gaps only from producers it
knows, so a partition's first batch under a producer id travels alone; the rest follow once it
is answered. Retries: a retriable error or a lost connection
marks the partition; once none of its batches is in flight, the failed ones go back, in
sequence order, in front of everything not yet sent (so ordering holds even with 5 requests in
flight), after `retry.backoff.ms` and a metadata refresh. What each answer means — done,
retry, fail, take a new producer id — is `sequencing.judge`'s (the out-of-order rules are
there). Every record is answered within `delivery.timeout.ms`.

Invariants: each record's future completes exactly once; records of one partition are
written in `send` order (with idempotence, also across retries); Produce v13 (topic ids) is
not used — v12 at most, by topic name.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from time import time_ns
from typing import NamedTuple

from riverlog.client.accumulator import RECORD_BOUND, KeyValue, ProducerBatch, RecordAccumulator
from riverlog.client.cluster import Cluster
from riverlog.client.config import ProducerConfig
from riverlog.client.partitioner import DefaultPartitioner, Partitioner, key_partition
from riverlog.client.sequencing import PartitionState, Verdict, judge
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

log = logging.getLogger(__name__)

MAX_PRODUCE_VERSION = 12  # v13 addresses topics by id only
Headers = Sequence[tuple[str, bytes | None]]
DeliveryCallback = Callable[[BaseException | None, "RecordMetadata | None"], None]
Waiter = asyncio.Future["RecordMetadata"] | DeliveryCallback | None
Bytes = bytes | bytearray | memoryview | str
QueuedRecord = tuple[
    str, "Bytes | None", "Bytes | None", "int | None", "int | None", "Headers | None", Waiter
]
"""A record as `enqueue` takes it: topic, value, key, partition, timestamp_ms, headers and
who hears how it went."""
Runs = dict[TopicPartition, tuple[list[KeyValue], list[Waiter]]]
"""Plain records grouped by partition, in queue order, with who hears about each."""


class RecordMetadata(NamedTuple):
    """Where a record landed. `offset` is -1 with acks=0; `timestamp` is the record's, or the
    broker's when the topic uses LogAppendTime."""

    topic: str
    partition: int
    offset: int
    timestamp: int


def _as_bytes(data: Bytes | None) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    return bytes(data)


class AsyncProducer:
    """Kafka producer on asyncio. Configure with Kafka's keys:

        async with AsyncProducer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 10}) as p:
            future = await p.send("events", b"value", key=b"user-1")
            metadata = await future

    `partitioner` replaces the default (murmur2 for keys, sticky for keyless records).
    """

    def __init__(
        self, config: Mapping[str, object], *, partitioner: Partitioner | None = None
    ) -> None:
        self.config = ProducerConfig.parse(config)
        c = self.config
        self.cluster = Cluster.from_config(c)
        self.partitioner: Partitioner = partitioner or DefaultPartitioner()
        self._keys_by_murmur2 = partitioner is None  # the default's keyed case, inlined
        self._accumulator = RecordAccumulator(c.batch_size, c.linger_ms)
        self._partitions: dict[TopicPartition, PartitionState] = {}
        self._in_flight_by_node: dict[int, int] = {}
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._closing = False
        self._producer_id = -1
        self._producer_epoch = -1
        self._need_producer_id = c.enable_idempotence
        self._requests: set[asyncio.Task[None]] = set()
        self._unsent = 0  # records accepted and not yet completed
        self.unreported_errors: list[BaseException] = []
        """Failures of records sent without a waiter (the first 100)."""
        self._next_refresh = 0.0  # no metadata refresh for missing leaders before (monotonic)

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect and (with idempotence) get a producer id; `send` calls it if needed."""
        if self._sender is None:
            await self.cluster.any_connection()
            self._sender = asyncio.get_running_loop().create_task(self._run())

    async def partitions_for(self, topic: str) -> list[int]:
        return list(range(await self.cluster.partitions_of(topic)))

    async def send(
        self,
        topic: str,
        value: Bytes | None = None,
        key: Bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue a record; the future resolves to its `RecordMetadata` or fails with a
        `KafkaError`. Waits only while the buffer is full (at most `max.block.ms`)."""
        if self._sender is None or self._closing:
            if self._closing:
                raise RuntimeError("the producer is closed")
            await self.start()
        if topic not in self.cluster.partition_counts:
            await self.cluster.partitions_of(topic, timeout_s=self.config.max_block_ms / 1000)
        if self._accumulator.buffered_bytes >= self.config.buffer_memory:
            await self._wait_for_space()
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        if self.enqueue(topic, value, key, partition, timestamp_ms, headers, future):
            # A caller sending in a loop never gives the event loop a turn otherwise: let the
            # sender send full batches and answers come in, once per batch.
            await asyncio.sleep(0)
        return future

    def can_enqueue(self, topic: str) -> bool:
        """Whether `enqueue` may take a record for `topic` now: its metadata is known and the
        buffer has room (otherwise `send` does the waiting)."""
        return (
            topic in self.cluster.partition_counts
            and self._accumulator.buffered_bytes < self.config.buffer_memory
        )

    def enqueue_queued(self, queue: collections.deque[QueuedRecord], limit: int) -> bool:
        """`enqueue` records from the left of `queue` (the blocking facade's), up to `limit`,
        while their topic's metadata is known and the buffer has room; a record refused goes
        to its waiter. Whether a batch was started (the caller then lets the sender run).

        The common record — a key, a value, nothing else given — is grouped by partition
        and added in runs (`RecordAccumulator.append_plain`); any other record first adds
        the runs collected before it, so each partition keeps the queue's order."""
        counts, accumulator = self.cluster.partition_counts, self._accumulator
        memory, enqueue = self.config.buffer_memory, self.enqueue
        plain = self._keys_by_murmur2
        runs: Runs = {}
        pending = 0  # the size bound of the records in `runs`
        started = False
        for _ in range(min(limit, len(queue))):
            record = queue[0]
            topic, value, key, partition, timestamp, headers, waiter = record
            if topic not in counts or accumulator.buffered_bytes + pending >= memory:
                break
            queue.popleft()
            if (
                plain
                and type(key) is bytes
                and type(value) is bytes
                and partition is None
                and timestamp is None
                and not headers
            ):
                tp = (topic, key_partition(key, counts[topic]))
                run = runs.get(tp)
                if run is None:
                    run = runs[tp] = ([], [])
                run[0].append((key, value))
                run[1].append(waiter)
                pending += RECORD_BOUND + len(key) + len(value)
                continue
            if runs:
                started |= self._append_runs(runs)
                runs.clear()
                pending = 0
            try:
                started |= enqueue(*record)
            except Exception as e:  # a bad partition, say: the record's own failure
                self.report(waiter, e)
        if runs:
            started |= self._append_runs(runs)
        return started

    def _append_runs(self, runs: Runs) -> bool:
        """Add grouped records (queued just now: stamped now); whether a batch was started."""
        now = time_ns() // 1_000_000
        started = False
        for (topic, partition), (records, waiters) in runs.items():
            self._unsent += len(records)
            if self._accumulator.append_plain(topic, partition, now, records, waiters, now):
                self.partitioner.on_new_batch(topic, partition)
                started = True
        self._wake.set()  # the sender sees whether a batch filled up
        return started

    def report(self, waiter: Waiter, error: BaseException) -> None:
        """Tell `waiter` (a future, a callback, or None: `unreported_errors`) of a failure."""
        if isinstance(waiter, asyncio.Future):
            if not waiter.done():
                waiter.set_exception(error)
        elif waiter is not None:
            waiter(error, None)
        elif len(self.unreported_errors) < 100:
            self.unreported_errors.append(error)

    def enqueue(
        self,
        topic: str,
        value: Bytes | None,
        key: Bytes | None,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers | None,
        waiter: Waiter,
    ) -> bool:
        """`send` without waiting, for callers that did the waiting (the topic's metadata is
        known, the buffer has room): append the record, `waiter` hears how it went (a future,
        a callback `(error, metadata)`, or None: errors then go to `unreported_errors`).
        Returns whether the record started a new batch."""
        if key is not None and type(key) is not bytes:
            key = _as_bytes(key)
        if value is not None and type(value) is not bytes:
            value = _as_bytes(value)
        header_list = [(k, _as_bytes(v)) for k, v in headers] if headers else ()
        count = self.cluster.partition_counts[topic]
        if partition is None:
            if key is not None and self._keys_by_murmur2:
                partition = key_partition(key, count)
            else:
                available = self.cluster.available_partitions(topic)
                partition = self.partitioner.partition(topic, key, count, available)
        if not 0 <= partition < count:
            raise KafkaError(for_code(3), f"Partition {partition} of '{topic}' does not exist.")
        now = time_ns() // 1_000_000
        batch, started = self._accumulator.append(
            topic,
            partition,
            now if timestamp_ms is None else timestamp_ms,
            key,
            value,
            header_list,
            now,
        )
        batch.futures.append(waiter)
        self._unsent += 1
        if started:
            self.partitioner.on_new_batch(topic, partition)
            self._wake.set()
        elif batch.size >= self.config.batch_size:
            self._wake.set()
        return started

    async def _wait_for_space(self) -> None:
        while self._accumulator.buffered_bytes >= self.config.buffer_memory:
            self._space.clear()
            try:
                async with asyncio.timeout(self.config.max_block_ms / 1000):
                    await self._space.wait()
            except TimeoutError:
                raise KafkaError(
                    error_codes.REQUEST_TIMED_OUT,
                    f"buffer.memory full for {self.config.max_block_ms} ms",
                ) from None

    async def send_and_wait(
        self, topic: str, value: Bytes | None = None, key: Bytes | None = None, **kwargs: object
    ) -> RecordMetadata:
        """`send`, then wait for the record's metadata."""
        return await (await self.send(topic, value, key, **kwargs))  # type: ignore[arg-type]

    async def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued now and wait until every record sent so far is answered."""
        if self._sender is None:
            return
        self._accumulator.begin_flush()
        self._wake.set()
        try:
            async with asyncio.timeout(timeout_s):
                while self._unsent > 0:
                    self._space.clear()
                    await self._space.wait()
        finally:
            self._accumulator.end_flush()

    async def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender, close connections. Records still unanswered after
        `timeout_s` fail."""
        if self._closing:
            return
        try:
            with contextlib.suppress(TimeoutError):
                await self.flush(timeout_s)
        finally:
            self._closing = True
            self._wake.set()
            if self._sender is not None:
                self._sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._sender
            for task in list(self._requests):
                task.cancel()
            closed = KafkaError(error_codes.REQUEST_TIMED_OUT, "producer closed")
            for batch in self._accumulator.take_expired(0, -1):
                self._finish(batch, -1, -1, closed)
            await self.cluster.close()

    # -- the sender ----------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closing:
            now_ms = int(time.time() * 1000)
            self._expire(now_ms)
            idle = not any(s.in_flight for s in self._partitions.values())
            if self._need_producer_id and idle:
                await self._init_producer_id()
                continue
            self._requeue_failed()
            if self.cluster.metadata_is_old() and time.monotonic() >= self._next_refresh:
                self._next_refresh = time.monotonic() + self.config.retry_backoff_ms / 1000
                self._spawn(self._refresh([]))
            waiting_for_metadata = False
            if not self._need_producer_id:
                ready = self._accumulator.ready(now_ms, self._held)
                waiting_for_metadata = await self._send_ready(ready)
            self._wake.clear()
            deadline = self._accumulator.next_linger_deadline()
            timeout = None if deadline is None else max(0.001, (deadline - now_ms) / 1000)
            if waiting_for_metadata or any(s.failed for s in self._partitions.values()):
                timeout = min(timeout or 1.0, self.config.retry_backoff_ms / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    def _requeue_failed(self) -> None:
        """Partitions whose failed batches are all back and whose backoff passed: retry them
        in their original order, in front of everything not sent yet."""
        now = time.monotonic()
        for state in self._partitions.values():
            if state.failed and not state.in_flight and now >= state.retry_at:
                state.failed.sort(key=lambda b: b.serial)
                self._accumulator.requeue(state.failed)
                state.failed = []

    def _held(self, tp: TopicPartition) -> bool:
        """Whether a partition's next batch must wait: a retry is pending, or it has as many
        batches in flight as a connection may carry — or, with idempotence, its first batch
        under this producer id is not answered yet. A leader accepts a producer it does not
        know at any sequence (Kafka's rule, for producers whose state expired), so a second
        batch in flight could be written ahead of a first one refused with a retriable error
        (a partition just created, say), and that one could then only go in behind it."""
        state = self._partitions.get(tp)
        return state is not None and (
            bool(state.failed)
            or state.in_flight >= self.config.max_in_flight
            or (state.in_flight > 0 and not state.acked and self.config.enable_idempotence)
        )

    async def _send_ready(self, ready: list[TopicPartition]) -> bool:
        """Send the ready batches; whether some wait for a leader to be known."""
        by_node: dict[int, list[TopicPartition]] = {}
        stale: set[str] = set()
        for tp in ready:
            leader = self.cluster.leaders.get(tp, -1)
            if leader < 0 or leader not in self.cluster.brokers:
                stale.add(tp[0])
            else:
                by_node.setdefault(leader, []).append(tp)
        if stale and time.monotonic() >= self._next_refresh:
            self._next_refresh = time.monotonic() + self.config.retry_backoff_ms / 1000
            self._spawn(self._refresh(sorted(stale)))
        for node, tps in by_node.items():
            if self._in_flight_by_node.get(node, 0) >= self.config.max_in_flight:
                continue
            batches: list[ProducerBatch] = []
            size = 0
            for tp in tps:
                batch = self._accumulator.pop(tp)
                self._prepare(batch)
                batches.append(batch)
                size += batch.size
                if size >= self.config.max_request_size:
                    break
            self._in_flight_by_node[node] = self._in_flight_by_node.get(node, 0) + 1
            self._spawn(self._produce(node, batches))
        return bool(stale)

    def _prepare(self, batch: ProducerBatch) -> None:
        state = self._partitions.setdefault((batch.topic, batch.partition), PartitionState())
        state.sending.append(batch)
        batch.attempts += 1
        if self.config.enable_idempotence and batch.producer_id != self._producer_id:
            batch.producer_id, batch.producer_epoch = self._producer_id, self._producer_epoch
            batch.base_sequence = state.next_sequence
            state.next_sequence = (state.next_sequence + batch.count) & 0x7FFFFFFF
        batch.sent_behind = state.earlier_unsettled(batch)

    def _spawn(self, coroutine: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _refresh(self, topics: list[str]) -> None:
        with contextlib.suppress(ConnectionError, KafkaError):
            await self.cluster.refresh(topics)
        self._wake.set()

    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        topics: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        for b in batches:
            topics.setdefault(b.topic, []).append(
                ProduceRequest.PartitionProduceData(
                    index=b.partition, records=b.encode(self.config.compression_type)
                )
            )
        request = ProduceRequest(
            transactional_id=self.config.transactional_id,
            acks=self.config.acks,
            timeout_ms=self.config.request_timeout_ms,
            topic_data=[
                ProduceRequest.TopicProduceData(name=t, partition_data=ps)
                for t, ps in topics.items()
            ],
        )
        answers: dict[TopicPartition, tuple[int, int, int, str | None]] = {}
        try:
            conn = await self.cluster.connection(node)
            version = min(conn.version_for(ProduceRequest), MAX_PRODUCE_VERSION)
            if self.config.acks == 0:
                await conn.send_no_response(request, version)
                answers = {(b.topic, b.partition): (0, -1, -1, None) for b in batches}
            else:
                response = await self.cluster.send(node, request, version)
                assert isinstance(response, ProduceResponse)
                for t in response.responses:
                    for p in t.partition_responses:
                        answers[(t.name, p.index)] = (
                            p.error_code,
                            p.base_offset,
                            p.log_append_time_ms,
                            p.error_message,
                        )
        except (ConnectionError, OSError, KafkaError) as e:
            network = error_codes.NETWORK_EXCEPTION.code
            answers = {(b.topic, b.partition): (network, -1, -1, str(e)) for b in batches}
        finally:
            self._in_flight_by_node[node] -= 1
        for batch in batches:
            code, base_offset, append_time, message = answers.get(
                (batch.topic, batch.partition),
                (error_codes.NETWORK_EXCEPTION.code, -1, -1, "no answer for the partition"),
            )
            self._handle(batch, code, base_offset, append_time, message)
        self._wake.set()

    def _handle(
        self,
        batch: ProducerBatch,
        code: int,
        base_offset: int,
        append_time: int,
        message: str | None,
    ) -> None:
        state = self._partitions[(batch.topic, batch.partition)]
        c = self.config
        verdict = judge(
            state,
            batch,
            code,
            message,
            producer_id=self._producer_id,
            idempotent=c.enable_idempotence,
            retries=c.retries,
        )
        if verdict.renew_because is not None:
            self._renew_producer_id(verdict.renew_because)
        if verdict.verdict is Verdict.DONE:
            offset = base_offset if verdict.offset_known else -1
            self._finish(batch, offset, append_time if verdict.answered else -1, None)
        elif verdict.verdict is Verdict.RETRY:
            if verdict.refresh_metadata:
                self.cluster.mark_stale((batch.topic, batch.partition))
                self._spawn(self._refresh([batch.topic]))
            state.failed.append(batch)
            state.retry_at = time.monotonic() + c.retry_backoff_ms / 1000
        else:
            self._finish(batch, -1, -1, verdict.error)

    def _finish(
        self, batch: ProducerBatch, base_offset: int, append_time: int, error: BaseException | None
    ) -> None:
        self._accumulator.release(batch)
        self._unsent -= batch.count
        topic, partition = batch.topic, batch.partition
        if error is None and not any(batch.futures):  # nobody to tell (the blocking facade)
            self._space.set()
            return
        for i, (waiter, timestamp) in enumerate(zip(batch.futures, batch.timestamps, strict=True)):
            if waiter is None:
                if error is not None and len(self.unreported_errors) < 100:
                    self.unreported_errors.append(error)
                continue
            metadata = (
                None
                if error is not None
                else RecordMetadata(
                    topic,
                    partition,
                    base_offset + i if base_offset >= 0 else -1,
                    append_time if append_time >= 0 else timestamp,
                )
            )
            if isinstance(waiter, asyncio.Future):
                if waiter.done():
                    continue
                if metadata is None:
                    waiter.set_exception(error)  # type: ignore[arg-type]
                else:
                    waiter.set_result(metadata)
            else:
                waiter(error, metadata)
        self._space.set()

    def _expire(self, now_ms: int) -> None:
        """Fail the batches older than `delivery.timeout.ms`: waiting ones, and failed ones
        waiting for a retry (their outcome is unknown, so a new producer id follows)."""
        deadline = self.config.delivery_timeout_ms
        expired = self._accumulator.take_expired(now_ms, deadline)
        for state in self._partitions.values():
            retrying = [b for b in state.failed if now_ms - b.created_ms >= deadline]
            for batch in retrying:
                state.failed.remove(batch)
                if self.config.enable_idempotence:
                    self._renew_producer_id(f"{batch.topic}-{batch.partition}: retries expired")
            expired += retrying
        for batch in expired:
            timeout = f"not delivered within delivery.timeout.ms={deadline}"
            self._finish(batch, -1, -1, KafkaError(error_codes.REQUEST_TIMED_OUT, timeout))

    def _renew_producer_id(self, reason: str) -> None:
        """Take a new producer id once nothing is in flight (sequences start again at 0)."""
        if not self._need_producer_id:
            log.warning("producer id %d: taking a new one (%s)", self._producer_id, reason)
        self._need_producer_id = True

    async def _init_producer_id(self) -> None:
        try:
            conn = await self.cluster.any_connection()
            response = await conn.send(
                InitProducerIdRequest(
                    transactional_id=None,
                    transaction_timeout_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                )
            )
            assert isinstance(response, InitProducerIdResponse)
            if response.error_code != 0:
                raise KafkaError(for_code(response.error_code))
        except (ConnectionError, KafkaError):
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            return
        self._producer_id, self._producer_epoch = response.producer_id, response.producer_epoch
        for state in self._partitions.values():
            state.next_sequence, state.acked, state.acked_serial = 0, False, -1
        self._need_producer_id = False
