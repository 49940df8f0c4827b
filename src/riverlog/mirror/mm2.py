"""`riverlog connect-mirror-maker mm2.properties`: MirrorMaker 2's flows, each in this process.

For each enabled flow source->target: the offset-syncs topic (on the source) and the
checkpoints topic (on the target) are created if missing; the topic sync creates the remote
topics; `tasks.max` mirror streams (consumers of the group `mirror-maker-2.<source>-><target>`
on the source — several processes with the same file share the partitions, and a restarted
one resumes from the group's offsets) send every record to its remote topic's same
partition, committing every `offset.flush.interval.ms` only what the target acknowledged;
offset syncs follow the deliveries. A maintenance loop then, each on its interval:
`refresh.topics.interval.seconds` picks up new matching topics and added partitions,
`sync.topic.configs.interval.seconds` copies config changes, `emit.checkpoints.interval.seconds`
writes checkpoints, `sync.group.offsets.interval.seconds` commits translated offsets for
inactive groups on the target. With exactly-once enabled for the target
(`exactly.once.source.support`) the streams are `exactly_once.ExactlyOnceStream`s: records
and source offsets (in `offset.storage.topic` on the target) commit in one transaction per
poll or `transaction.boundary.interval.ms`, transactional ids
`mirror-maker-2.<source>-><target>-<topic>-<partition>`. A maintenance step that fails (a
cluster unreachable) is logged and retried at its next interval; a send that fails for good
stops the process (SendFailed). With `metrics.listener`, the process serves `metrics.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from riverlog.client.admin import AsyncAdmin
from riverlog.client.producer import AsyncProducer
from riverlog.metrics_http import parse_listener
from riverlog.mirror.checkpoints import Checkpointer, OffsetSyncEmitter
from riverlog.mirror.exactly_once import ExactlyOnceStream, OffsetStore, ensure_offsets_topic
from riverlog.mirror.flow import MirrorStream
from riverlog.mirror.metrics import MetricsEndpoint, MirrorMetrics
from riverlog.mirror.mm1 import INT_MAX
from riverlog.mirror.mm2_config import Flow
from riverlog.mirror.records import (
    Checkpoint,
    checkpoints_topic,
    offset_syncs_topic,
    source_offset_key,
)
from riverlog.mirror.topic_sync import TopicSync, ensure_internal_topic
from riverlog.protocol.error_codes import KafkaError

log = logging.getLogger("riverlog.mirror")


GROUP_PREFIX = "mirror-maker-2."
NO_LOSS = {"acks": "all", "delivery.timeout.ms": str(INT_MAX), "max.block.ms": str(INT_MAX)}


def group_of(flow: Flow) -> str:
    return f"{GROUP_PREFIX}{flow.name}"


class FlowRunner:
    """One flow's clients, streams and maintenance."""

    def __init__(self, flow: Flow, metrics: MirrorMetrics | None = None) -> None:
        self.flow = flow
        self.source = AsyncAdmin(flow.source.admin_config())
        self.target = AsyncAdmin(flow.target.admin_config())
        self.topic_sync = TopicSync(flow, self.source, self.target)
        self.producer = AsyncProducer({**NO_LOSS, **flow.target.producer_config()})
        self.sync_producer = AsyncProducer({**NO_LOSS, **flow.source.producer_config()})
        self.emitter = OffsetSyncEmitter(flow, self.sync_producer)
        self.checkpointer: Checkpointer | None = None
        self.checkpoints: list[Checkpoint] = []
        self.topics: dict[str, int] = {}
        self.metrics = metrics.flow(flow.source.alias, flow.target.alias) if metrics else None
        self.streams: list[MirrorStream] = []

    def _stream_options(self, i: int) -> tuple[dict[str, str], dict[str, object]]:
        flow, group = self.flow, group_of(self.flow)
        consumer = {
            **flow.source.consumer_config(),
            "group.id": group,
            "client.id": f"{group}-{i}",
            "enable.auto.commit": "false",
            "auto.offset.reset": "earliest",
        }
        options: dict[str, object] = {
            "commit_interval_ms": flow.number("offset.flush.interval.ms"),
            "rename": lambda topic: flow.policy.remote_topic(flow.source.alias, topic),
            "keep_partitions": True,
            "tracker": self.emitter,
            "metrics": self.metrics,
        }
        return consumer, options

    async def _make_streams(self) -> None:
        flow, count = self.flow, self.flow.number("tasks.max")
        if not flow.exactly_once:
            for i in range(count):
                consumer, options = self._stream_options(i)
                self.streams.append(MirrorStream(consumer, self.producer, **options))  # type: ignore[arg-type]
            return
        target = {**NO_LOSS, **flow.target.producer_config()}
        partitions = await ensure_offsets_topic(
            target,
            flow.offsets_topic,
            flow.number("offset.storage.partitions"),
            flow.number("offset.storage.replication.factor"),
        )
        alias = flow.source.alias

        def key_of(topic: str, partition: int) -> bytes:
            where: dict[str, str | int] = {"cluster": alias, "topic": topic, "partition": partition}
            return source_offset_key("MirrorSourceConnector", where)

        store = OffsetStore(target, flow.offsets_topic, partitions, key_of)
        for i in range(count):
            consumer, options = self._stream_options(i)
            options["commit_interval_ms"] = flow.transaction_interval_ms
            self.streams.append(
                ExactlyOnceStream(consumer, self.producer, target, store, group_of(flow), **options)
            )

    async def start(self) -> None:
        flow = self.flow
        syncs = offset_syncs_topic(flow.target.alias)
        rf = flow.number("offset-syncs.topic.replication.factor")
        await ensure_internal_topic(self.source, syncs, rf)
        await self.producer.start()
        await self.sync_producer.start()
        await self.sync_producer.partitions_for(syncs)
        if flow.flag("emit.checkpoints.enabled") or flow.flag("sync.group.offsets.enabled"):
            rf = flow.number("checkpoints.topic.replication.factor")
            await ensure_internal_topic(self.target, checkpoints_topic(flow.source.alias), rf)
            self.checkpointer = Checkpointer(
                flow, self.source, self.target, self.producer, GROUP_PREFIX
            )
        await self._make_streams()
        await self.refresh_topics()

    async def refresh_topics(self) -> None:
        topics = await self.topic_sync.sync(configs=False)
        grew = any(count > self.topics.get(t, count) for t, count in topics.items())
        changed = set(topics) != set(self.topics)
        self.topics = topics
        for stream in self.streams:
            if changed:
                stream.subscribe(set(topics))
            elif grew:
                stream.consumer.enforce_rebalance()

    async def sync_configs(self) -> None:
        await self.topic_sync.sync(configs=True)

    async def emit_checkpoints(self) -> None:
        if self.checkpointer is not None:
            self.checkpoints = await self.checkpointer.run_once()

    async def sync_group_offsets(self) -> None:
        if self.checkpointer is not None:
            await self.checkpointer.sync_group_offsets(self.checkpoints)

    def chores(self) -> list[tuple[float, Callable[[], Awaitable[None]]]]:
        """(interval in seconds, step) of each maintenance step this flow runs."""
        f = self.flow
        out: list[tuple[float, Callable[[], Awaitable[None]]]] = []
        if f.flag("refresh.topics.enabled"):
            out.append((f.seconds("refresh.topics.interval.seconds"), self.refresh_topics))
        if f.flag("sync.topic.configs.enabled"):
            out.append((f.seconds("sync.topic.configs.interval.seconds"), self.sync_configs))
        if f.flag("emit.checkpoints.enabled"):
            out.append((f.seconds("emit.checkpoints.interval.seconds"), self.emit_checkpoints))
        if f.flag("sync.group.offsets.enabled"):
            if not f.flag("emit.checkpoints.enabled"):
                out.append((f.seconds("emit.checkpoints.interval.seconds"), self.emit_checkpoints))
            out.append((f.seconds("sync.group.offsets.interval.seconds"), self.sync_group_offsets))
        return out

    async def maintain(self, stop: asyncio.Event) -> None:
        chores = self.chores()
        due = [time.monotonic() + interval for interval, _ in chores]
        while not stop.is_set() and chores:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, min(due) - time.monotonic())):
                    await stop.wait()
            now = time.monotonic()
            for i, (interval, step) in enumerate(chores):
                if now >= due[i] and not stop.is_set():
                    due[i] = now + interval
                    try:
                        await step()
                    except (KafkaError, ConnectionError, OSError) as e:
                        log.warning(
                            "mirror %s: %s failed: %s",
                            self.flow.name,
                            getattr(step, "__name__", step),
                            e,
                        )

    async def close(self) -> None:
        if self.checkpointer is not None:
            await self.checkpointer.close()
        for client in (self.producer, self.sync_producer, self.source, self.target):
            with contextlib.suppress(KafkaError, ConnectionError, OSError):
                await client.close()

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await self.start()
            log.info(
                "mirror %s: mirroring %d topic(s) as %s",
                self.flow.name,
                len(self.topics),
                group_of(self.flow),
            )
            tasks = [asyncio.create_task(s.run(stop)) for s in self.streams]
            tasks.append(asyncio.create_task(self.maintain(stop)))
            await _until_one_fails(tasks, stop)
        finally:
            await self.close()


async def run(flows: list[Flow], stop: asyncio.Event, metrics_listener: str = "") -> None:
    """Run every flow until `stop` is set or one fails (then all stop and it raises); with
    `metrics_listener`, serve the metrics meanwhile."""
    address = parse_listener(metrics_listener)
    metrics = MirrorMetrics() if address is not None else None
    async with contextlib.AsyncExitStack() as stack:
        if address is not None and metrics is not None:
            await stack.enter_async_context(MetricsEndpoint(metrics, *address))
        runners = [FlowRunner(flow, metrics) for flow in flows]
        await _until_one_fails([asyncio.create_task(r.run(stop)) for r in runners], stop)


async def _until_one_fails(tasks: list[asyncio.Task[None]], stop: asyncio.Event) -> None:
    """Wait for `tasks` to end; the first failure sets `stop` for the rest and is raised."""
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = [t.exception() for t in done if t.exception() is not None]
        if failed:
            raise failed[0]  # type: ignore[misc]
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
