"""The controller's requests to brokers, built from its context (pure).

- LeaderAndIsr: to the replicas of changed partitions — who leads, at which leader epoch,
  with which ISR and replicas, the state znode's version (`partition_epoch`, which the leader
  uses to write ISR changes version-checked), and the leaders' endpoints so followers know
  where to fetch from.
- UpdateMetadata: to every live broker — live brokers with endpoints and racks, and the
  state of the given partitions (all of them for a broker that just started). A partition
  with leader -2 is being deleted.
- StopReplica: replicas to stop fetching/leading, and to delete when a topic goes.
Every request carries the controller's id and epoch; brokers refuse older epochs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from riverlog.controller.context import ControllerContext
from riverlog.metadata.layout import BrokerRegistration
from riverlog.model import LEADER_DURING_DELETE, TopicPartition
from riverlog.protocol.messages import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)

SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
"""Kafka's SecurityProtocol ids, as UpdateMetadata carries them per endpoint."""


def _live_leaders(
    ctx: ControllerContext, leaders: Iterable[int]
) -> list[LeaderAndIsrRequest.LeaderAndIsrLiveLeader]:
    out = []
    for broker_id in sorted(set(leaders)):
        reg = ctx.live.get(broker_id)
        if reg is not None:
            endpoint = reg.endpoints[0]
            out.append(
                LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
                    broker_id=broker_id, host_name=endpoint.host, port=endpoint.port
                )
            )
    return out


def leader_and_isr(
    ctx: ControllerContext,
    controller_id: int,
    partitions: Iterable[TopicPartition],
    *,
    is_new: bool = False,
) -> LeaderAndIsrRequest:
    by_topic: dict[str, list[LeaderAndIsrRequest.LeaderAndIsrPartitionState]] = defaultdict(list)
    leaders = []
    for tp in partitions:
        state = ctx.state(tp)
        if state is None:
            continue
        leaders.append(state.leader)
        by_topic[tp[0]].append(
            LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                topic_name=tp[0],
                partition_index=tp[1],
                controller_epoch=state.controller_epoch,
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                isr=list(state.isr),
                partition_epoch=ctx.version(tp),
                replicas=list(ctx.replicas(tp)),
                is_new=is_new,
            )
        )
    return LeaderAndIsrRequest(
        controller_id=controller_id,
        controller_epoch=ctx.epoch,
        topic_states=[
            LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name=topic, topic_id=ctx.topics[topic].topic_id, partition_states=states
            )
            for topic, states in sorted(by_topic.items())
            if topic in ctx.topics
        ],
        live_leaders=_live_leaders(ctx, leaders),
    )


def _broker_entry(reg: BrokerRegistration) -> UpdateMetadataRequest.UpdateMetadataBroker:
    return UpdateMetadataRequest.UpdateMetadataBroker(
        id=reg.broker_id,
        endpoints=[
            UpdateMetadataRequest.UpdateMetadataEndpoint(
                port=e.port,
                host=e.host,
                listener=e.listener,
                security_protocol=SECURITY_PROTOCOL_IDS.get(reg.protocol(e.listener), 0),
            )
            for e in reg.endpoints
        ],
        rack=reg.rack,
    )


def update_metadata(
    ctx: ControllerContext,
    controller_id: int,
    partitions: Iterable[TopicPartition],
    *,
    deleted: Iterable[TopicPartition] = (),
) -> UpdateMetadataRequest:
    by_topic: dict[str, list[UpdateMetadataRequest.UpdateMetadataPartitionState]] = defaultdict(
        list
    )
    for tp in partitions:
        state = ctx.state(tp)
        if state is None:
            continue
        by_topic[tp[0]].append(
            UpdateMetadataRequest.UpdateMetadataPartitionState(
                topic_name=tp[0],
                partition_index=tp[1],
                controller_epoch=state.controller_epoch,
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                isr=list(state.isr),
                zk_version=ctx.version(tp),
                replicas=list(ctx.replicas(tp)),
                offline_replicas=ctx.offline_replicas(tp),
            )
        )
    for topic, index in deleted:
        by_topic[topic].append(
            UpdateMetadataRequest.UpdateMetadataPartitionState(
                topic_name=topic,
                partition_index=index,
                controller_epoch=ctx.epoch,
                leader=LEADER_DURING_DELETE,
            )
        )
    topic_states = []
    for topic, states in sorted(by_topic.items()):
        info = ctx.topics.get(topic)
        entry = UpdateMetadataRequest.UpdateMetadataTopicState(
            topic_name=topic, partition_states=states
        )
        if info is not None:
            entry.topic_id = info.topic_id
        topic_states.append(entry)
    return UpdateMetadataRequest(
        controller_id=controller_id,
        controller_epoch=ctx.epoch,
        topic_states=topic_states,
        live_brokers=[_broker_entry(reg) for _, reg in sorted(ctx.live.items())],
    )


def stop_replica(
    ctx: ControllerContext,
    controller_id: int,
    partitions: Iterable[TopicPartition],
    *,
    delete: bool,
) -> StopReplicaRequest:
    by_topic: dict[str, list[StopReplicaRequest.StopReplicaPartitionState]] = defaultdict(list)
    for topic, index in partitions:
        state = ctx.state((topic, index))
        by_topic[topic].append(
            StopReplicaRequest.StopReplicaPartitionState(
                partition_index=index,
                leader_epoch=LEADER_DURING_DELETE
                if delete or state is None
                else state.leader_epoch,
                delete_partition=delete,
            )
        )
    return StopReplicaRequest(
        controller_id=controller_id,
        controller_epoch=ctx.epoch,
        topic_states=[
            StopReplicaRequest.StopReplicaTopicState(topic_name=t, partition_states=s)
            for t, s in sorted(by_topic.items())
        ],
    )
