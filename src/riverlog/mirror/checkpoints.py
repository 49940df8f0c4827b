"""MirrorMaker 2's offset syncs and checkpoints for one flow source->target.

`OffsetSyncEmitter` asks to hear where a partition's first record and then every
`offset.lag.max`-th one landed (and the mirror stream also tells it about the last record of
each poll); it writes an offset sync to `mm2-offset-syncs.<target>.internal` on the source
for the first, when `offset.lag.max` source records passed since the last sync, or when the
mapping drifted (target offsets no longer advance one for one with the source's, e.g. after
duplicates). So a group's offset translates to at most `offset.lag.max` records early.

`Checkpointer.run_once` reads the offset syncs (from the topic, so syncs of every mirror
process and of earlier runs count), then for each source group the flow's `groups` filter
takes (never the mirrors' own groups) translates its committed offsets of mirrored topics
(`records.OffsetSyncStore`) and writes the changed ones as checkpoints to
`<source>.checkpoints.internal` on the target. With `sync.group.offsets.enabled` it also
commits the translated offsets for the group on the target — only while the group has no
active member there, and only forward of what it has committed there (as Kafka does).

`read_checkpoints` reads a checkpoints topic back: each group's latest translated offsets
(for `riverlog consumer-groups --reset-offsets --from-checkpoints`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from riverlog.client.admin import AsyncAdmin
from riverlog.client.config import common_config
from riverlog.client.consumer import AsyncConsumer
from riverlog.client.producer import AsyncProducer, RecordMetadata
from riverlog.mirror.mm2_config import Flow
from riverlog.mirror.records import (
    Checkpoint,
    OffsetSync,
    OffsetSyncStore,
    checkpoints_topic,
    offset_syncs_topic,
)
from riverlog.model import LATEST_TIMESTAMP
from riverlog.protocol.error_codes import KafkaError

log = logging.getLogger("riverlog.mirror")
TopicPartition = tuple[str, int]
INACTIVE = {"Empty", "Dead"}


class OffsetSyncEmitter:
    def __init__(self, flow: Flow, producer: AsyncProducer) -> None:
        self.topic = offset_syncs_topic(flow.target.alias)
        self.lag_max = flow.number("offset.lag.max")
        self.producer = producer
        self._last: dict[TopicPartition, tuple[int, int]] = {}
        self._asked: dict[TopicPartition, int] = {}

    def wants(self, topic: str, partition: int, offset: int) -> bool:
        asked = self._asked.get((topic, partition))
        if asked is not None and asked <= offset < asked + self.lag_max:
            return False
        self._asked[(topic, partition)] = offset
        return True

    def delivered(self, topic: str, partition: int, offset: int, where: RecordMetadata) -> None:
        if where.offset < 0:
            return  # acks=0: where it landed is unknown
        last = self._last.get((topic, partition))
        if last is not None:
            upstream, downstream = last
            in_step = where.offset - downstream == offset - upstream
            if in_step and offset - upstream < self.lag_max:
                return
        if not self.producer.can_enqueue(self.topic):
            return  # the buffer is full: a later delivery brings a sync
        self._last[(topic, partition)] = (offset, where.offset)
        sync = OffsetSync(topic, partition, offset, where.offset)
        self.producer.enqueue(self.topic, sync.value(), sync.key(), 0, None, None, None)


class Checkpointer:
    def __init__(
        self,
        flow: Flow,
        source: AsyncAdmin,
        target: AsyncAdmin,
        target_producer: AsyncProducer,
        own_groups: str,
    ) -> None:
        self.flow = flow
        self.source = source
        self.target = target
        self.producer = target_producer
        self.own_groups = own_groups
        """The prefix of the mirrors' own consumer groups (never checkpointed)."""
        self.store = OffsetSyncStore()
        self.topic = checkpoints_topic(flow.source.alias)
        self._syncs = AsyncConsumer(
            {
                **flow.source.consumer_config(),
                "enable.auto.commit": "false",
                "auto.offset.reset": "earliest",
            }
        )
        self._syncs.assign([(offset_syncs_topic(flow.target.alias), 0)])
        self._emitted: dict[tuple[str, TopicPartition], int] = {}

    async def close(self) -> None:
        await self._syncs.close()

    async def read_syncs(self) -> None:
        """Everything the offset-syncs topic holds now (an empty poll ends it)."""
        while records := await self._syncs.poll(200):
            for r in records:
                if r.key is None or r.value is None:
                    continue
                try:
                    self.store.add(OffsetSync.decode(r.key, r.value))
                except ValueError:
                    log.warning(
                        "mirror %s: skipping a bad offset sync at offset %d",
                        self.flow.name,
                        r.offset,
                    )

    async def checkpoints(self) -> list[Checkpoint]:
        """Translated offsets of every group the flow checkpoints."""
        out = []
        policy, alias = self.flow.policy, self.flow.source.alias
        mirrored = self.store.partitions()
        for listing in await self.source.list_groups():
            group = listing.group_id
            if group.startswith(self.own_groups) or not self.flow.groups(group):
                continue
            try:
                offsets = await self.source.group_offsets(group)
            except (KafkaError, ConnectionError) as e:
                log.warning("mirror %s: offsets of group %s: %s", self.flow.name, group, e)
                continue
            for (topic, partition), upstream in sorted(offsets.items()):
                if (topic, partition) not in mirrored:
                    continue
                downstream = self.store.translate(topic, partition, upstream)
                if downstream is not None:
                    remote = policy.remote_topic(alias, topic)
                    out.append(Checkpoint(group, remote, partition, upstream, downstream))
        return out

    async def run_once(self) -> list[Checkpoint]:
        """Emit the checkpoints that changed; all of them."""
        await self.read_syncs()
        checkpoints = await self.checkpoints()
        for c in checkpoints:
            where = (c.group, (c.topic, c.partition))
            if self._emitted.get(where) == c.downstream_offset:
                continue
            self._emitted[where] = c.downstream_offset
            await self.producer.send(self.topic, c.value(), c.key(), partition=0)
        await self.producer.flush()
        return checkpoints

    async def sync_group_offsets(self, checkpoints: list[Checkpoint]) -> None:
        by_group: dict[str, dict[TopicPartition, int]] = {}
        for c in checkpoints:
            by_group.setdefault(c.group, {})[(c.topic, c.partition)] = c.downstream_offset
        for group, translated in sorted(by_group.items()):
            try:
                description = await self.target.describe_group(group)
                if description.state not in INACTIVE:
                    continue  # consumers are active on the target: theirs to commit
                current = await self.target.group_offsets(group)
                ahead = {tp: o for tp, o in translated.items() if current.get(tp, -1) < o}
                if ahead:
                    await self.target.reset_group_offsets(group, ahead)
            except (KafkaError, ConnectionError) as e:
                log.warning("mirror %s: syncing offsets of group %s: %s", self.flow.name, group, e)


async def read_checkpoints(
    client_config: Mapping[str, object], source_alias: str
) -> dict[str, dict[TopicPartition, int]]:
    """Per group, the latest checkpointed target offset of each partition (from
    `<source_alias>.checkpoints.internal` on the cluster `client_config` reaches: Kafka client
    keys, `bootstrap.servers` and security settings)."""
    config = {"client.id": "riverlog-checkpoints", **common_config(client_config)}
    topic = checkpoints_topic(source_alias)
    async with AsyncAdmin(config) as admin:
        if topic not in await admin.list_topics():
            raise ValueError(f"{topic} does not exist: no MirrorMaker 2 flow from {source_alias}")
        end = (await admin.list_offsets([(topic, 0)], LATEST_TIMESTAMP))[(topic, 0)]
    out: dict[str, dict[TopicPartition, int]] = {}
    consumer = AsyncConsumer({**config, "enable.auto.commit": "false"})
    consumer.assign([(topic, 0)])
    consumer.seek_to_beginning()
    async with consumer:
        while await consumer.position((topic, 0)) < end:
            for r in await consumer.poll(1000):
                if r.key is None or r.value is None:
                    continue
                try:
                    c = Checkpoint.decode(r.key, r.value)
                except ValueError:
                    log.warning("skipping a bad checkpoint at offset %d of %s", r.offset, topic)
                    continue
                out.setdefault(c.group, {})[(c.topic, c.partition)] = c.downstream_offset
    return out
