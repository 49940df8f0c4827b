"""Metadata and cluster description: brokers, topics with ids, partitions, leaders, ISR.

Metadata v0 (and v1+ with a null topic list) means all topics; an empty list (v1+) means none.
Unknown topics are created when `auto.create.topics.enable` is on and the request allows it
(v4+ `allow_auto_topic_creation`; always before v4); the first answer then says
LEADER_NOT_AVAILABLE, as Kafka's does, and the client retries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import (
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
)
from riverlog.server.dispatch import RequestContext
from riverlog.server.group_coordinator import OFFSETS_TOPIC
from riverlog.server.topics import Topic, validate_topic_name

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

# Kafka answers -2**31 for "authorized operations not requested".
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _topic_entry(broker: Broker, topic: Topic) -> MetadataResponse.MetadataResponseTopic:
    partitions = []
    for index, replicas in sorted(topic.partitions.items()):
        hosted = broker.replicas.partitions.get((topic.name, index))
        partitions.append(
            MetadataResponse.MetadataResponsePartition(
                error_code=0 if hosted is not None else error_codes.LEADER_NOT_AVAILABLE.code,
                partition_index=index,
                leader_id=hosted.leader_id if hosted is not None else -1,
                leader_epoch=hosted.leader_epoch if hosted is not None else -1,
                replica_nodes=list(replicas),
                isr_nodes=list(hosted.isr) if hosted is not None else [],
                offline_replicas=[],
            )
        )
    return MetadataResponse.MetadataResponseTopic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=partitions,
        topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


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
    host, port = broker.advertised
    return MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=broker.broker_id, host=host, port=port, rack=broker.rack
            )
        ],
        cluster_id=broker.cluster_id,
        controller_id=broker.broker_id,
        topics=entries,
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )


def handle_describe_cluster(broker: Broker, ctx: RequestContext) -> DescribeClusterResponse:
    host, port = broker.advertised
    return DescribeClusterResponse(
        cluster_id=broker.cluster_id,
        controller_id=broker.broker_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=broker.broker_id, host=host, port=port, rack=broker.rack
            )
        ],
        cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
    )
