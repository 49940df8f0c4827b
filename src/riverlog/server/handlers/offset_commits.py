"""Committed offsets: OffsetCommit, OffsetFetch and OffsetDelete, every version.

All versions are served from `__consumer_offsets` — v0 included, which ZooKeeper-era Kafka
kept in ZooKeeper; riverlog keeps one store. Wire differences handled here: v1 carries a
commit timestamp per partition, v2-v4 a retention time (an explicit expiry), v6+ the leader
epoch of the committed offset; OffsetFetch v2+ may ask for all partitions (null topics) and
has a top-level error, v8+ batches groups. A partition without a commit answers offset -1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from riverlog.coordinator.records import StoredOffset
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.server.dispatch import RequestContext

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

NO_EXPIRY = -1


async def handle_offset_commit(broker: Broker, ctx: RequestContext) -> m.OffsetCommitResponse:
    request = ctx.request.body
    assert isinstance(request, m.OffsetCommitRequest)
    groups = broker.groups
    version = ctx.version
    now = broker.clock.wall_ms()
    retention = request.retention_time_ms if 2 <= version <= 4 else -1
    expire = now + retention if retention >= 0 else NO_EXPIRY
    wanted: dict[TopicPartition, StoredOffset] = {}
    for topic in request.topics:
        for p in topic.partitions:
            commit_time = p.commit_timestamp if version == 1 and p.commit_timestamp >= 0 else now
            wanted[(topic.name, p.partition_index)] = StoredOffset(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
                metadata=p.committed_metadata or "",
                commit_timestamp=commit_time,
                expire_timestamp=expire,
            )
    error = groups.coordinator_error(request.group_id)
    if error is not None:
        errors = dict.fromkeys(wanted, error)
    else:
        errors = await groups.commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch if version >= 1 else -1,
            request.member_id if version >= 1 else "",
            request.group_instance_id if version >= 7 else None,
            wanted,
        )
    by_topic: dict[str, list[m.OffsetCommitResponse.OffsetCommitResponsePartition]] = {}
    for (topic_name, index), e in errors.items():
        by_topic.setdefault(topic_name, []).append(
            m.OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=index, error_code=e.code
            )
        )
    return m.OffsetCommitResponse(
        topics=[
            m.OffsetCommitResponse.OffsetCommitResponseTopic(name=name, partitions=parts)
            for name, parts in by_topic.items()
        ]
    )


def _fetch_group(
    broker: Broker, group_id: str, wanted: list[TopicPartition] | None
) -> tuple[error_codes.ErrorCode, dict[TopicPartition, StoredOffset | None]]:
    """The group's committed offsets for `wanted` (None: every committed partition)."""
    groups = broker.groups
    error = groups.coordinator_error(group_id)
    if error is not None:
        return error, dict.fromkeys(wanted or [])
    committed = groups.offsets.fetch(group_id, wanted)
    if wanted is None:
        return error_codes.NONE, dict(committed)
    return error_codes.NONE, {tp: committed.get(tp) for tp in wanted}


def _by_topic(
    offsets: dict[TopicPartition, StoredOffset | None],
    error: error_codes.ErrorCode,
    unstable: frozenset[TopicPartition] = frozenset(),
) -> dict[str, list[tuple[int, int, int, str, int]]]:
    """topic → [(partition, offset, leader epoch, metadata, error code)]; partitions in
    `unstable` (`_unstable`) answer UNSTABLE_OFFSET_COMMIT."""
    out: dict[str, list[tuple[int, int, int, str, int]]] = {}
    for (topic, index), stored in offsets.items():
        if (topic, index) in unstable:
            row = (index, -1, -1, "", error_codes.UNSTABLE_OFFSET_COMMIT.code)
        elif stored is None:
            row = (index, -1, -1, "", error.code)
        else:
            row = (index, stored.offset, stored.leader_epoch, stored.metadata, 0)
        out.setdefault(topic, []).append(row)
    return out


def _response_topics(
    offsets: dict[TopicPartition, StoredOffset | None],
    error: error_codes.ErrorCode,
    topic_cls: Any,
    partition_cls: Any,
    unstable: frozenset[TopicPartition] = frozenset(),
) -> list[Any]:
    """The response's topics, in the per-version classes (same fields, other names)."""
    return [
        topic_cls(
            name=name,
            partitions=[
                partition_cls(
                    partition_index=i,
                    committed_offset=o,
                    committed_leader_epoch=ep,
                    metadata=md,
                    error_code=code,
                )
                for i, o, ep, md, code in rows
            ],
        )
        for name, rows in _by_topic(offsets, error, unstable).items()
    ]


def _wanted(topics: list[Any] | None) -> list[TopicPartition] | None:
    """The partitions a request names; None (every committed partition) for null topics."""
    if topics is None:
        return None
    return [(t.name, i) for t in topics for i in t.partition_indexes]


def _unstable(broker: Broker, group_id: str, require_stable: bool) -> frozenset[TopicPartition]:
    """With require_stable (KIP-447), the partitions whose offset is about to change: a
    transactional commit awaiting its marker, or a commit awaiting the ISR."""
    if not require_stable or broker.groups.coordinator_error(group_id) is not None:
        return frozenset()
    return broker.txn_offsets.pending_partitions(group_id) | broker.groups.pending_partitions(
        group_id
    )


def handle_offset_fetch(broker: Broker, ctx: RequestContext) -> m.OffsetFetchResponse:
    request = ctx.request.body
    assert isinstance(request, m.OffsetFetchRequest)
    answer = m.OffsetFetchResponse
    if ctx.version >= 8:
        results = []
        for g in request.groups:
            error, offsets = _fetch_group(broker, g.group_id, _wanted(g.topics))
            topics = _response_topics(
                offsets,
                error_codes.NONE,
                answer.OffsetFetchResponseTopics,
                answer.OffsetFetchResponsePartitions,
                _unstable(broker, g.group_id, request.require_stable),
            )
            results.append(
                answer.OffsetFetchResponseGroup(
                    group_id=g.group_id, error_code=error.code, topics=topics
                )
            )
        return answer(groups=results)
    error, offsets = _fetch_group(broker, request.group_id, _wanted(request.topics))
    partition_error = error if ctx.version < 2 else error_codes.NONE
    topics = _response_topics(
        offsets,
        partition_error,
        answer.OffsetFetchResponseTopic,
        answer.OffsetFetchResponsePartition,
        _unstable(broker, request.group_id, ctx.version >= 7 and request.require_stable),
    )
    return answer(error_code=error.code, topics=topics)


def handle_offset_delete(broker: Broker, ctx: RequestContext) -> m.OffsetDeleteResponse:
    request = ctx.request.body
    assert isinstance(request, m.OffsetDeleteRequest)
    groups = broker.groups
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error = groups.coordinator_error(request.group_id)
    if error is None:
        error, errors = groups.delete_offsets(request.group_id, wanted)
    if error is not error_codes.NONE:
        return m.OffsetDeleteResponse(error_code=error.code)
    by_topic: dict[str, list[m.OffsetDeleteResponse.OffsetDeleteResponsePartition]] = {}
    for (topic, index), e in errors.items():
        by_topic.setdefault(topic, []).append(
            m.OffsetDeleteResponse.OffsetDeleteResponsePartition(
                partition_index=index, error_code=e.code
            )
        )
    return m.OffsetDeleteResponse(
        topics=[
            m.OffsetDeleteResponse.OffsetDeleteResponseTopic(name=name, partitions=parts)
            for name, parts in by_topic.items()
        ]
    )
