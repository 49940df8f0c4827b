"""Metadata and cluster description: brokers, topics with ids, partitions, leaders, ISR.

Metadata v0 (and v1+ with a null topic list) means all topics; an empty list (v1+) means none.
Unknown topics are created when `auto.create.topics.enable` is on and the request allows it
(v4+ `allow_auto_topic_creation`; always before v4); the first answer then says
LEADER_NOT_AVAILABLE, as Kafka's does, and the client retries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.controller.election import controller_id
from riverlog.metadata.store import StoreUnavailableError
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import (
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
)
from riverlog.server import registration
from riverlog.server.dispatch import RequestContext
from riverlog.server.group_coordinator import OFFSETS_TOPIC
from riverlog.server.metadata_cache import BrokerInfo
from riverlog.server.topics import Topic, validate_topic_name

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

# Kafka answers -2**31 for "authorized operations not requested".
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _partition_entry(
    index: int, leader: int, epoch: int, replicas: list[int], isr: list[int], offline: list[int]
) -> MetadataResponse.MetadataResponsePartition:
    return MetadataResponse.MetadataResponsePartition(
        error_code=0 if leader >= 0 else error_codes.LEADER_NOT_AVAILABLE.code,
        partition_index=index,
        leader_id=leader,
        leader_epoch=epoch,
        replica_nodes=replicas,
        isr_nodes=isr,
        offline_replicas=offline,
    )


def _partitions(broker: Broker, topic: Topic) -> list[MetadataResponse.MetadataResponsePartition]:
    """From the controller's view in a cluster; from the local replicas on one broker."""
    out = []
    if broker.in_zookeeper:
        for index, info in sorted(broker.metadata.partitions_of(topic.name).items()):
            out.append(_partition_entry(index, info.leader, info.leader_epoch,
                                        list(info.replicas), list(info.isr), list(info.offline)))
        return out  # fmt: skip
    for index, replicas in sorted(topic.partitions.items()):
        hosted = broker.replicas.partitions.get((topic.name, index))
        if hosted is None:
            out.append(_partition_entry(index, -1, -1, list(replicas), [], []))
        else:
            out.append(_partition_entry(index, hosted.leader_id, hosted.leader_epoch,
                                        list(replicas), list(hosted.isr), []))  # fmt: skip
    return out


def _topic_entry(broker: Broker, topic: Topic) -> MetadataResponse.MetadataResponseTopic:
    return MetadataResponse.MetadataResponseTopic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=_partitions(broker, topic),
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def _brokers(broker: Broker) -> list[BrokerInfo]:
    if broker.in_zookeeper and broker.metadata.brokers:
        return [b for _, b in sorted(broker.metadata.brokers.items())]
    host, port = broker.advertised
    me = BrokerInfo(broker.broker_id, host, port, broker.rack)
    if not broker.in_zookeeper:
        return [me]
    # Before the controller's first UpdateMetadata: the registrations in ZooKeeper, so a
    # client that bootstraps here can reach the controller named in the same answer.
    try:
        registered = registration.registered_brokers(broker.store)
    except StoreUnavailableError:
        return [me]
    found = {r.broker_id: BrokerInfo(r.broker_id, r.endpoints[0].host, r.endpoints[0].port,
                                     r.rack) for r in registered if r.endpoints}  # fmt: skip
    found.setdefault(broker.broker_id, me)
    return [b for _, b in sorted(found.items())]


def _controller_id(broker: Broker) -> int:
    if not broker.in_zookeeper:
        return broker.broker_id
    if broker.metadata.controller_id >= 0:
        return broker.metadata.controller_id
    # Before the controller's first UpdateMetadata (a broker just started): ask ZooKeeper,
    # so clients waiting for a controller (admin requests) need not wait for it.
    try:
        return controller_id(broker.store)
    except StoreUnavailableError:
        return -1


def handle_metadata(broker: Broker, ctx: RequestContext) -> MetadataResponse:
    request = ctx.request.body
    assert isinstance(request, MetadataRequest)
    version = ctx.version
    entries: list[MetadataResponse.MetadataResponseTopic] = []
    if request.topics is None or (version == 0 and not request.topics):
        entries = [_topic_entry(broker, t) for t in broker.topics.all()]
    else:
        auto_create = broker.config["auto.create.topics.enable"] and (
            version < 4 or request.allow_auto_topic_creation
        )
        for wanted in request.topics:
            name = wanted.name
            if name is None:
                known = broker.topics.by_id(wanted.topic_id)
                if known is None:
                    entries.append(
                        MetadataResponse.MetadataResponseTopic(
                            error_code=error_codes.UNKNOWN_TOPIC_ID.code,
                            name=None,
                            topic_id=wanted.topic_id,
                            partitions=[],
                        )
                    )
                    continue
                name = known.name
            topic = broker.topics.get(name)
            if topic is None:
                error = error_codes.UNKNOWN_TOPIC_OR_PARTITION.code
                if auto_create:
                    try:
                        validate_topic_name(name)
                        if name == OFFSETS_TOPIC:
                            broker.groups.ensure_offsets_topic()
                        else:
                            broker.create_topic(
                                name,
                                broker.config["num.partitions"],
                                broker.config["default.replication.factor"],
                                {},
                            )
                        error = error_codes.LEADER_NOT_AVAILABLE.code
                    except KafkaError as e:
                        error = e.code
                entries.append(
                    MetadataResponse.MetadataResponseTopic(
                        error_code=error, name=name, partitions=[]
                    )
                )
                continue
            entries.append(_topic_entry(broker, topic))
    return MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack
            )
            for b in _brokers(broker)
        ],
        cluster_id=broker.cluster_id,
        controller_id=_controller_id(broker),
        topics=entries,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def handle_describe_cluster(broker: Broker, ctx: RequestContext) -> DescribeClusterResponse:
    return DescribeClusterResponse(
        cluster_id=broker.cluster_id,
        controller_id=_controller_id(broker),
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack
            )
            for b in _brokers(broker)
        ],
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
