"""Log directories (JBOD): DescribeLogDirs and AlterReplicaLogDirs.

DescribeLogDirs answers one result per configured log directory, as Kafka does: an online
one with its replicas (size, offset lag = how far the log end is behind the high watermark,
never a future replica: riverlog moves logs without one, `storage/log_dirs.py`) and, from
v4, the total and usable bytes of its filesystem; an offline one with KAFKA_STORAGE_ERROR
and nothing else. AlterReplicaLogDirs moves each named replica (`ReplicaManager.alter_log_dir`,
Kafka's per-partition errors); directories are compared as absolute paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)
from riverlog.server.dispatch import RequestContext
from riverlog.storage.log_dirs import canonical

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

Described = DescribeLogDirsResponse.DescribeLogDirsResult


def handle_describe_log_dirs(broker: Broker, ctx: RequestContext) -> DescribeLogDirsResponse:
    request = ctx.request.body
    assert isinstance(request, DescribeLogDirsRequest)
    wanted = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    logs = broker.logs
    by_dir: dict[str, dict[str, list[DescribeLogDirsResponse.DescribeLogDirsPartition]]] = {}
    for hosted in broker.replicas:
        directory = logs.dir_of.get(hosted.key)
        if directory is None or (wanted is not None and hosted.key not in wanted):
            continue
        plog = hosted.log
        by_dir.setdefault(str(directory), {}).setdefault(hosted.topic, []).append(
            DescribeLogDirsResponse.DescribeLogDirsPartition(
                partition_index=hosted.index,
                partition_size=plog.size_bytes,
                offset_lag=max(plog.high_watermark - plog.log_end_offset, 0),
            )
        )
    results = []
    for directory in logs.dirs:
        if directory in logs.offline_dirs:
            results.append(
                Described(error_code=error_codes.KAFKA_STORAGE_ERROR.code, log_dir=str(directory))
            )
            continue
        total, usable = broker.disk_usage(directory)
        topics = by_dir.get(str(directory), {})
        results.append(
            Described(
                log_dir=str(directory),
                topics=[
                    DescribeLogDirsResponse.DescribeLogDirsTopic(
                        name=name, partitions=sorted(ps, key=lambda p: p.partition_index)
                    )
                    for name, ps in sorted(topics.items())
                ],
                total_bytes=total,
                usable_bytes=usable,
            )
        )
    return DescribeLogDirsResponse(results=results)


def handle_alter_replica_log_dirs(
    broker: Broker, ctx: RequestContext
) -> AlterReplicaLogDirsResponse:
    request = ctx.request.body
    assert isinstance(request, AlterReplicaLogDirsRequest)
    by_topic: dict[str, list[AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult]] = {}
    for target in request.dirs:
        destination = canonical(target.path)
        for topic in target.topics:
            for index in topic.partitions:
                error = broker.replicas.alter_log_dir((topic.name, index), destination)
                by_topic.setdefault(topic.name, []).append(
                    AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult(
                        partition_index=index, error_code=error.code
                    )
                )
    return AlterReplicaLogDirsResponse(
        results=[
            AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult(
                topic_name=name, partitions=results
            )
            for name, results in by_topic.items()
        ]
    )
