"""The controller's requests to brokers, and the broker's request to the controller.

- LeaderAndIsr: become leader or follower of partitions (`ReplicaManager`, which starts and
  stops fetchers and tells the group coordinator what it leads now).
- UpdateMetadata: the cluster view answered to Metadata requests (`MetadataCache`); topics
  heard of for the first time are read from the store, deleted ones forgotten.
- StopReplica: stop following/leading partitions, deleting their logs with `delete`.
- ControlledShutdown: (to the controller) move my leaderships away before I stop.
Requests not from the controller the store names, or for another broker epoch, are
refused first (`server/fencing.py`).
Each request from the controller, and what it did, goes to the state-change log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.server import fencing, state_change_log
from riverlog.server.dispatch import RequestContext

if TYPE_CHECKING:
    from riverlog.server.broker import Broker


def handle_leader_and_isr(broker: Broker, ctx: RequestContext) -> m.LeaderAndIsrResponse:
    if (refused := fencing.check(broker, ctx, m.LeaderAndIsrResponse)) is not None:
        return refused
    request = ctx.request.body
    assert isinstance(request, m.LeaderAndIsrRequest)
    errors = broker.replicas.apply_leader_and_isr(
        request, broker.topic_config, ctx.request.header.correlation_id
    )
    if ctx.version < 5:
        return m.LeaderAndIsrResponse(
            partition_errors=[
                m.LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                    topic_name=topic, partition_index=index, error_code=error.code
                )
                for (topic, index), error in errors.items()
            ]
        )
    ids = {t.topic_name: t.topic_id for t in request.topic_states}
    by_topic: dict[str, list[m.LeaderAndIsrResponse.LeaderAndIsrPartitionError]] = {}
    for (name, index), error in errors.items():
        by_topic.setdefault(name, []).append(
            m.LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                partition_index=index, error_code=error.code
            )
        )
    return m.LeaderAndIsrResponse(
        topics=[
            m.LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=ids[name], partition_errors=errs)
            for name, errs in by_topic.items()
        ]
    )


def handle_update_metadata(broker: Broker, ctx: RequestContext) -> m.UpdateMetadataResponse:
    if (refused := fencing.check(broker, ctx, m.UpdateMetadataResponse)) is not None:
        return refused
    request = ctx.request.body
    assert isinstance(request, m.UpdateMetadataRequest)
    error, deleted = broker.metadata.apply(request)
    state_change_log.update_metadata_received(
        broker.broker_id,
        request,
        ctx.request.header.correlation_id,
        stale=error is not error_codes.NONE,
    )
    if error is error_codes.NONE:
        broker.metadata_changed(deleted)
    return m.UpdateMetadataResponse(error_code=error.code)


def handle_stop_replica(broker: Broker, ctx: RequestContext) -> m.StopReplicaResponse:
    if (refused := fencing.check(broker, ctx, m.StopReplicaResponse)) is not None:
        return refused
    request = ctx.request.body
    assert isinstance(request, m.StopReplicaRequest)
    wanted: list[tuple[tuple[str, int], bool]] = []
    if ctx.version >= 3:
        for topic in request.topic_states:
            wanted += [
                ((topic.topic_name, p.partition_index), p.delete_partition)
                for p in topic.partition_states
            ]
    elif ctx.version >= 1:
        for t in request.topics:
            wanted += [((t.name, i), request.delete_partitions) for i in t.partition_indexes]
    else:
        wanted = [
            ((p.topic_name, p.partition_index), request.delete_partitions)
            for p in request.ungrouped_partitions
        ]
    errors = broker.replicas.stop_replicas(request.controller_epoch, wanted)
    state_change_log.stop_replica_received(
        broker.broker_id,
        request.controller_id,
        request.controller_epoch,
        ctx.request.header.correlation_id,
        wanted,
        {k: e.name for k, e in errors.items()},
    )
    return m.StopReplicaResponse(
        partition_errors=[
            m.StopReplicaResponse.StopReplicaPartitionError(
                topic_name=topic, partition_index=index, error_code=error.code
            )
            for (topic, index), error in errors.items()
        ]
    )


async def handle_controlled_shutdown(
    broker: Broker, ctx: RequestContext
) -> m.ControlledShutdownResponse:
    if (refused := fencing.check(broker, ctx, m.ControlledShutdownResponse)) is not None:
        return refused
    request = ctx.request.body
    assert isinstance(request, m.ControlledShutdownRequest)
    if not broker.controller.active:
        return m.ControlledShutdownResponse(error_code=error_codes.NOT_CONTROLLER.code)
    remaining = await broker.controller.controlled_shutdown(request.broker_id)
    return m.ControlledShutdownResponse(
        remaining_partitions=[
            m.ControlledShutdownResponse.RemainingPartition(topic_name=t, partition_index=p)
            for t, p in remaining
        ]
    )
