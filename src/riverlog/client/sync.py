"""The blocking facade: `Producer`, `Consumer`, `Admin` for scripts, the CLI and Spark executors.

Each wraps the asyncio client of the same name, run on one private event loop thread per
process (uvloop when installed), started on first use and shared by every blocking client.
Calls block the caller until the loop has done the work, except `Producer.send`, which only
queues the record (handed to the loop in bulk, so a tight loop of sends costs little) and
reports its delivery to a callback, confluent-kafka style.

Invariants: the asyncio objects are only touched on the loop thread; a blocking call never
runs on that thread (it would deadlock) — calling one from inside a coroutine on it raises.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from riverlog.client.admin import AsyncAdmin, ClusterDescription
from riverlog.client.admin_requests import PartitionReassignment, TopicInfo
from riverlog.client.consumer import AsyncConsumer, ConsumerRecord, Listener
from riverlog.client.group_admin import GroupDescription, GroupListing
from riverlog.client.partitioner import Partitioner
from riverlog.client.producer import (
    AsyncProducer,
    Bytes,
    DeliveryCallback,
    Headers,
    RecordMetadata,
)
from riverlog.model import TopicPartition
from riverlog.protocol.error_codes import KafkaError

if TYPE_CHECKING:
    import pyarrow as pa

_T = TypeVar("_T")
_QUEUE_LIMIT = 100_000  # records queued by `send` before it waits for the loop
_BURST = 1_000  # records the loop moves into the producer at most between two yields

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _client_loop() -> asyncio.AbstractEventLoop:
    """The shared loop thread, started on first use (a daemon: it never blocks exit)."""
    global _loop
    with _lock:
        if _loop is None:
            try:
                import uvloop

                loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            except ImportError:  # pragma: no cover — uvloop is a dependency
                loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="riverlog-client", daemon=True).start()
            _loop = loop
        return _loop


def run_blocking(coroutine: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T:
    """Run `coroutine` on the client loop thread and wait for its result (for code outside
    the loop, such as the Spark connector, that drives asyncio client objects)."""
    loop = _client_loop()
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coroutine.close()
        raise RuntimeError("a blocking riverlog call inside the client's own loop")
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout_s)


async def _construct(factory: Any, *args: Any, **kwargs: Any) -> Any:
    return factory(*args, **kwargs)  # asyncio objects are created on the loop thread


class Producer:
    """Blocking producer, confluent-kafka style: `send` queues and returns at once; delivery
    is reported to `on_delivery(error, metadata)` (called on the client's loop thread) if
    given, and otherwise a failure is raised by the next `flush`."""

    def __init__(
        self, config: Mapping[str, object], *, partitioner: Partitioner | None = None
    ) -> None:
        self._async: AsyncProducer = run_blocking(
            _construct(AsyncProducer, config, partitioner=partitioner)
        )
        run_blocking(self._async.start())
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._draining = False
        """Set by `send` (any thread) when it asked the loop for a drain; cleared by the drain."""
        self._drain_task: asyncio.Task[None] | None = None
        """The one task that moves queued records into the producer (loop thread only: two
        at once could reorder records while one of them waits in `send`)."""
        self._room = threading.Condition()
        self._loop = _client_loop()

    def send(
        self,
        topic: str,
        value: Bytes | None = None,
        key: Bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Queue a record (waits only while `_QUEUE_LIMIT` records are queued)."""
        if len(self._queue) >= _QUEUE_LIMIT:
            with self._room:
                self._room.wait_for(lambda: len(self._queue) < _QUEUE_LIMIT // 2, timeout=60)
        self._queue.append((topic, value, key, partition, timestamp_ms, headers, on_delivery))
        if not self._draining:
            self._draining = True
            self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        producer, queue = self._async, self._queue
        try:
            while queue:
                before = len(queue)
                if producer.can_enqueue(queue[0][0]):
                    # A batch started: let the sender send full batches and answers come in.
                    if producer.enqueue_queued(queue, _BURST):
                        await asyncio.sleep(0)
                else:  # the topic's metadata or room in the buffer is awaited
                    topic, value, key, partition, timestamp, headers, on_delivery = queue.popleft()
                    try:
                        future = await producer.send(
                            topic,
                            value,
                            key,
                            partition=partition,
                            timestamp_ms=timestamp,
                            headers=headers,
                        )
                        future.add_done_callback(_reporter(on_delivery, producer))
                    except Exception as e:
                        producer.report(on_delivery, e)
                if before >= _QUEUE_LIMIT // 2 > len(queue):  # `send` may wait for room
                    with self._room:
                        self._room.notify_all()
        finally:
            self._draining = False
            with self._room:
                self._room.notify_all()
            if queue:  # a send raced with the end of the loop above
                self._draining = True
                self._loop.call_soon(self._start_drain)  # runs once this task is done

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every record sent so far is answered; raise the first failure of a
        record sent without `on_delivery`."""
        run_blocking(self._flush(timeout_s))
        if self._async.unreported_errors:
            first = self._async.unreported_errors[0]
            self._async.unreported_errors.clear()
            raise first

    async def _flush(self, timeout_s: float | None) -> None:
        while self._queue or self._draining:
            await asyncio.sleep(0.001)
        await self._async.flush(timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        try:
            self.flush(timeout_s)
        finally:
            run_blocking(self._async.close(timeout_s))

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reporter(
    on_delivery: DeliveryCallback | None, producer: AsyncProducer
) -> Callable[[asyncio.Future[RecordMetadata]], None]:
    def report(future: asyncio.Future[RecordMetadata]) -> None:
        error = future.exception()
        if error is not None:
            producer.report(on_delivery, error)
        elif on_delivery is not None:
            on_delivery(None, future.result())

    return report


class Consumer:
    """Blocking consumer with the methods of `AsyncConsumer`."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self._async: AsyncConsumer = run_blocking(_construct(AsyncConsumer, config))

    def subscribe(
        self,
        topics: Iterable[str] = (),
        *,
        pattern: str | None = None,
        on_assign: Listener | None = None,
        on_revoke: Listener | None = None,
        on_lost: Listener | None = None,
    ) -> None:
        """See `AsyncConsumer.subscribe`; listeners run on the client's loop thread."""
        self._async.subscribe(
            list(topics), pattern=pattern, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
        )

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._async.assign(list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._async.assignment()

    def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        return run_blocking(self._async.poll(timeout_ms))

    def poll_arrow(self, timeout_ms: int = 0, *, include_headers: bool = True) -> pa.Table:
        return run_blocking(self._async.poll_arrow(timeout_ms, include_headers=include_headers))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._async.seek(tp, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._async.seek_to_beginning(partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._async.seek_to_end(partitions)

    def seek_to_timestamp(
        self, timestamp_ms: int, partitions: Iterable[TopicPartition] | None = None
    ) -> None:
        run_blocking(self._async.seek_to_timestamp(timestamp_ms, partitions))

    def position(self, tp: TopicPartition) -> int:
        return run_blocking(self._async.position(tp))

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._async.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._async.resume(partitions)

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        run_blocking(self._async.commit(offsets))

    def commit_async(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Start a commit; its outcome is not reported (as with a callback-less commit)."""
        run_blocking(_start_commit(self._async, offsets))

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return run_blocking(self._async.committed(list(partitions)))

    def close(self) -> None:
        run_blocking(self._async.close())

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _start_commit(
    consumer: AsyncConsumer, offsets: Mapping[TopicPartition, int] | None
) -> None:
    consumer.commit_async(offsets)


class Admin:
    """Blocking admin client: each method is `AsyncAdmin`'s of the same name, run on the
    client loop thread (and carries its docstring)."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self._async: AsyncAdmin = run_blocking(_construct(AsyncAdmin, config))

    def describe_cluster(self) -> ClusterDescription:
        return run_blocking(self._async.describe_cluster())

    def list_topics(self) -> list[str]:
        return run_blocking(self._async.list_topics())

    def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        return run_blocking(self._async.describe_topics(names))

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
    ) -> None:
        run_blocking(
            self._async.create_topic(
                name, partitions, replication_factor, configs, validate_only=validate_only
            )
        )

    def delete_topic(self, name: str) -> None:
        run_blocking(self._async.delete_topic(name))

    def create_partitions(self, name: str, count: int) -> None:
        run_blocking(self._async.create_partitions(name, count))

    def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, KafkaError | None]:
        return run_blocking(self._async.elect_leaders(election_type, partitions))

    def describe_configs(self, resource_type: int, name: str) -> dict[str, str | None]:
        return run_blocking(self._async.describe_configs(resource_type, name))

    def alter_configs(
        self,
        resource_type: int,
        name: str,
        *,
        set: Mapping[str, str] | None = None,
        delete: list[str] | None = None,
    ) -> None:
        run_blocking(self._async.alter_configs(resource_type, name, set=set, delete=delete))

    def alter_partition_reassignments(
        self, targets: Mapping[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, KafkaError | None]:
        return run_blocking(self._async.alter_partition_reassignments(targets))

    def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        return run_blocking(self._async.list_partition_reassignments(partitions))

    def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return run_blocking(self._async.delete_records(before))

    def list_offsets(
        self, partitions: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        return run_blocking(self._async.list_offsets(partitions, timestamp))

    def list_groups(self) -> list[GroupListing]:
        return run_blocking(self._async.list_groups())

    def describe_group(self, group: str) -> GroupDescription:
        return run_blocking(self._async.describe_group(group))

    def group_offsets(self, group: str) -> dict[TopicPartition, int]:
        return run_blocking(self._async.group_offsets(group))

    def reset_group_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        run_blocking(self._async.reset_group_offsets(group, offsets))

    def delete_group(self, group: str) -> None:
        run_blocking(self._async.delete_group(group))

    def close(self) -> None:
        run_blocking(self._async.close())

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


for _name, _blocking in vars(Admin).items():  # one docstring per call: AsyncAdmin's
    if not _name.startswith("_"):
        _blocking.__doc__ = getattr(AsyncAdmin, _name).__doc__
