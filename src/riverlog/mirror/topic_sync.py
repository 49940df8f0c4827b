"""MirrorMaker 2's topic sync for one flow: which source topics to mirror, and their remote
topics on the target created, grown and configured like the source's.

A source topic is mirrored when the flow's `topics` filter takes it, it is not internal, and
mirroring it would not be a cycle (`ReplicationPolicy.is_cycle`: a topic that is already a
remote topic of the target cluster, e.g. `b.t` on a for a flow a->b). Its remote topic gets
the source's partition count and, with `sync.topic.configs.enabled`, the source's config
overrides except those `config.properties.exclude` matches, with `replication.factor`
replicas (-1: the target broker's default). A source topic that grew makes its remote topic
grow; a config override that changed on the source is set on the remote topic. Invariant:
remote topics only ever grow and are never deleted here.
"""

from __future__ import annotations

import logging

from riverlog.client import admin_requests as admin
from riverlog.client.admin import AsyncAdmin
from riverlog.mirror.mm2_config import Flow
from riverlog.mirror.policy import is_internal_topic
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError

log = logging.getLogger("riverlog.mirror")


class TopicSync:
    def __init__(self, flow: Flow, source: AsyncAdmin, target: AsyncAdmin) -> None:
        self.flow = flow
        self.source = source
        self.target = target

    def wanted(self, topic: str) -> bool:
        return (
            not is_internal_topic(topic)
            and self.flow.topics(topic)
            and not self.flow.policy.is_cycle(topic, self.flow.target.alias)
        )

    def remote(self, topic: str) -> str:
        return self.flow.policy.remote_topic(self.flow.source.alias, topic)

    async def source_topics(self) -> dict[str, int]:
        """The source topics this flow mirrors, with their partition counts."""
        return {
            t.name: len(t.partitions)
            for t in await self.source.describe_topics()
            if not t.is_internal and self.wanted(t.name)
        }

    async def sync(self, *, configs: bool) -> dict[str, int]:
        """Create or grow the remote topics (and copy configs if asked); the source topics
        mirrored, with their partition counts."""
        topics = await self.source_topics()
        existing = {t.name: len(t.partitions) for t in await self.target.describe_topics()}
        for topic, count in sorted(topics.items()):
            remote = self.remote(topic)
            if remote not in existing:
                await self._create(topic, remote, count)
                continue
            if existing[remote] < count:
                log.info("mirror %s: %s grew to %d partitions", self.flow.name, remote, count)
                await self.target.create_partitions(remote, count)
            if configs:
                await self._sync_configs(topic, remote)
        return topics

    async def _overrides(self, client: AsyncAdmin, topic: str) -> dict[str, str]:
        overrides = await admin.topic_config_overrides(await client.cluster.any_connection(), topic)
        return {k: v for k, v in overrides.items() if self.flow.config_exclude(k)}

    async def _create(self, topic: str, remote: str, count: int) -> None:
        configs = {}
        if self.flow.flag("sync.topic.configs.enabled"):
            configs = await self._overrides(self.source, topic)
        log.info("mirror %s: creating %s (%d partitions)", self.flow.name, remote, count)
        try:
            await self.target.create_topic(
                remote, count, self.flow.number("replication.factor"), configs
            )
        except KafkaError as e:
            if e.error.code != error_codes.TOPIC_ALREADY_EXISTS.code:
                raise  # another mirror process made it meanwhile: fine

    async def _sync_configs(self, topic: str, remote: str) -> None:
        wanted = await self._overrides(self.source, topic)
        current = await admin.topic_config_overrides(
            await self.target.cluster.any_connection(), remote
        )
        changed = {k: v for k, v in wanted.items() if current.get(k) != v}
        if changed:
            log.info("mirror %s: %s configs %s", self.flow.name, remote, changed)
            await self.target.alter_configs(admin.TOPIC_RESOURCE, remote, set=changed)


async def ensure_internal_topic(client: AsyncAdmin, name: str, replication_factor: int) -> None:
    """A one-partition compacted topic for offset syncs or checkpoints, if missing."""
    if name in await client.list_topics():
        return
    try:
        await client.create_topic(name, 1, replication_factor, {"cleanup.policy": "compact"})
    except KafkaError as e:
        if e.error.code != error_codes.TOPIC_ALREADY_EXISTS.code:
            raise
