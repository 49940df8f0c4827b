"""The driver's questions to the cluster: which partitions a query reads and their offsets.

Owns `OffsetLookup`: the partitions a subscription covers now (`subscribe` topics that exist,
every topic matching `subscribePattern`, or the `assign` list), earliest / latest / by
timestamp offsets for many partitions at once (one ListOffsets per leader, retried when
leadership moved), and `resolve` of an `OffsetSpec` into concrete offsets. Runs on the
driver (batch planning, the streaming source's offset calls) through the blocking client's
loop thread; never creates topics.

Invariants: `resolve` returns an offset for every partition asked about, within
[earliest, latest] of the moment it asked, except explicit per-partition offsets, which are
passed through for the reader to check (out of range is data loss, reported there).
"""

from __future__ import annotations

from collections.abc import Iterable

from riverlog.client import admin_requests as admin
from riverlog.client.cluster import Cluster
from riverlog.client.config import ConsumerConfig
from riverlog.model import TopicPartition
from riverlog.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions

# A task reads one partition: fetch more of it per request than a consumer of many would
# (fewer round trips, bigger Arrow batches for Spark). `kafka.*` options override these.
READ_DEFAULTS = {"max.partition.fetch.bytes": str(8 << 20), "fetch.max.bytes": str(64 << 20)}


def consumer_config(options: SourceOptions) -> ConsumerConfig:
    """The client config of every connection the connector makes for a source."""
    return ConsumerConfig.parse(
        {
            **READ_DEFAULTS,
            **options.client,
            "enable.auto.commit": "false",
            "auto.offset.reset": "none",
        }
    )


class OffsetLookup:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.config = consumer_config(options)
        self.cluster = Cluster.from_config(self.config)

    async def close(self) -> None:
        await self.cluster.close()

    async def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now (sorted)."""
        subscription = self.options.subscription
        if subscription[0] == "assign":
            return list(subscription[1])
        if subscription[0] == "subscribe":
            topics = subscription[1]
        else:
            pattern = subscription[1]
            topics = [t for t in await self.cluster.all_topics() if pattern.fullmatch(t)]
        if topics:
            await self.cluster.refresh(topics, allow_auto_create=False)
        return sorted(
            (t, p) for t in topics for p in range(self.cluster.partition_counts.get(t, 0))
        )

    async def list_offsets(
        self, partitions: Iterable[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """Earliest (-2), latest (-1) or first-at-`timestamp` offsets (-1: none that new)."""
        return await admin.leader_offsets(
            self.cluster, partitions, timestamp, self.config.retry_backoff_ms
        )

    async def resolve(
        self, spec: OffsetSpec, partitions: list[TopicPartition], *, ending: bool
    ) -> dict[TopicPartition, int]:
        """`spec` as offsets of `partitions`. A timestamp with no record at or after it gives
        the latest offset for an end, and for a start what startingOffsetsByTimestampStrategy
        says (an error by default, as in Spark)."""
        if spec.kind in ("earliest", "latest"):
            return await self.list_offsets(
                partitions, EARLIEST if spec.kind == "earliest" else LATEST
            )
        if spec.kind == "offsets":
            missing = [tp for tp in partitions if tp not in spec.per_partition]
            if missing:
                raise ValueError(f"no offset given for {', '.join(f'{t}-{p}' for t, p in missing)}")
            out = {tp: spec.per_partition[tp] for tp in partitions}
            for special in (EARLIEST, LATEST):
                named = [tp for tp, o in out.items() if o == special]
                if named:
                    out.update(await self.list_offsets(named, special))
            return out
        found: dict[TopicPartition, int] = {}
        for tp in partitions:
            if spec.kind == "timestamp":
                stamp = spec.timestamp
            elif tp in spec.per_partition:
                stamp = spec.per_partition[tp]
            else:
                raise ValueError(f"no timestamp given for {tp[0]}-{tp[1]}")
            found.update(await self.list_offsets([tp], stamp))
        unmatched = [tp for tp, o in found.items() if o < 0]
        if unmatched and not ending and self.options.timestamp_strategy == "error":
            raise ValueError(
                "no record at or after the starting timestamp in "
                + ", ".join(f"{t}-{p}" for t, p in unmatched)
                + " (set startingOffsetsByTimestampStrategy=latest to start at the end)"
            )
        if unmatched:
            found.update(await self.list_offsets(unmatched, LATEST))
        return found
