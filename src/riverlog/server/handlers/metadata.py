"""Metadata and cluster description: brokers, topics with ids, partitions, leaders, ISR.

Metadata v0 (and v1+ with a null topic list) means all topics; an empty list (v1+) means none.
Unknown topics are created when `auto.create.topics.enable` is on and the request allows it
(v4+ `allow_auto_topic_creation`; always before v4); the first answer then says
LEADER_NOT_AVAILABLE, as Kafka's does, and the client retries. Topics by id (null name) are
for v12+; an older request with a null name closes the connection, as Kafka does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from riverlog.metadata.store import StoreUnavailableError
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
)
from riverlog.server import registration
from riverlog.server.authorized_operations import ResourceType, authorized_operations
from riverlog.server.controller.controller_election import controller_id
from riverlog.server.dispatch import RequestContext
from riverlog.server.group_coordinator import OFFSETS_TOPIC
from riverlog.server.metadata_cache import BrokerInfo
from riverlog.server.topics import Topic, validate_topic_name

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)


def _partition_entry(
    index: int,
    leader: int,
    epoch: int,
    replicas: Sequence[int],
    isr: Sequence[int],
    offline: Sequence[int],
) -> MetadataResponse.MetadataResponsePartition:
    return MetadataResponse.MetadataResponsePartition(
        error_code=0 if leader >= 0 else error_codes.LEADER_NOT_AVAILABLE.code,
        partition_index=index,
        leader_id=leader,
        leader_epoch=epoch,
        replica_nodes=list(replicas),
        isr_nodes=list(isr),
        offline_replicas=list(offline),
    )


def _topic_entry(
    broker: Broker, topic: Topic, with_operations: bool = False
) -> MetadataResponse.MetadataResponseTopic:
    """From the controller's view (UpdateMetadata); a topic it has not announced yet (just
    created) is LEADER_NOT_AVAILABLE, which clients retry."""
    known = broker.metadata.partitions_of(topic.name)
    return MetadataResponse.MetadataResponseTopic(
        error_code=0 if known else error_codes.LEADER_NOT_AVAILABLE.code,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=[
            _partition_entry(
                index, info.leader, info.leader_epoch, info.replicas, info.isr, info.offline
            )
            for index, info in sorted(known.items())
        ],
        topic_authorized_operations=authorized_operations(
            ResourceType.TOPIC, topic.name, with_operations
        ),
    )


def _brokers(broker: Broker, ctx: RequestContext) -> list[BrokerInfo]:
    """The live brokers as reached through the listener the client came in on (Kafka's
    rule: a broker without that listener is left out)."""
    listener = ctx.connection.listener if ctx.connection is not None else None
    if broker.metadata.brokers:
        known = [b.on(listener) for _, b in sorted(broker.metadata.brokers.items())]
        return [b for b in known if b is not None]
    # Before the controller's first UpdateMetadata: the registrations in the store, so a
    # client that bootstraps here can reach the controller named in the same answer.
    ours = tuple(broker.advertised_endpoints())
    me = BrokerInfo(broker.broker_id, ours[0][1], ours[0][2], broker.rack, ours)
    try:
        registered = registration.registered_brokers(broker.store)
    except StoreUnavailableError:
        registered = []
    found = {
        r.broker_id: BrokerInfo(
            r.broker_id,
            r.endpoints[0].host,
            r.endpoints[0].port,
            r.rack,
            tuple((e.listener, e.host, e.port) for e in r.endpoints),
        )
        for r in registered
        if r.endpoints
    }
    found.setdefault(broker.broker_id, me)
    reachable = [b.on(listener) for _, b in sorted(found.items())]
    return [b for b in reachable if b is not None]


def _controller_id(broker: Broker) -> int:
    if broker.metadata.controller_id >= 0:
        return broker.metadata.controller_id
    # Before the controller's first UpdateMetadata (a broker just started): ask the store,
    # so clients waiting for a controller (admin requests) need not wait for it.
    try:
        return controller_id(broker.store)
    except StoreUnavailableError:
        return -1


def handle_metadata(broker: Broker, ctx: RequestContext) -> MetadataResponse | None:
    request = ctx.request.body
    assert isinstance(request, MetadataRequest)
    version = ctx.version
    if version < 12 and any(t.name is None for t in request.topics or ()):
        # v10-11 can carry a null name, but Kafka refuses to parse such a request ("does
        # not support null topic names") and its answer could not name the topic: close.
        log.warning(
            "closing %s: Metadata v%d with a null topic name",
            ctx.connection.peer if ctx.connection else "?",
            version,
        )
        if ctx.connection is not None:
            ctx.connection.close()
        return None
    topic_ops = version >= 8 and request.include_topic_authorized_operations
    cluster_ops = 8 <= version <= 10 and request.include_cluster_authorized_operations
    entries: list[MetadataResponse.MetadataResponseTopic] = []
    if request.topics is None or (version == 0 and not request.topics):
        entries = [
            _topic_entry(broker, t, topic_ops)
            for t in broker.topics.all()
            if broker.metadata.partitions_of(t.name)
        ]  # announced by the controller
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
            entries.append(_topic_entry(broker, topic, topic_ops))
    return MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack
            )
            for b in _brokers(broker, ctx)
        ],
        cluster_id=broker.cluster_id,
        controller_id=_controller_id(broker),
        topics=entries,
        cluster_authorized_operations=authorized_operations(
            ResourceType.CLUSTER, "kafka-cluster", cluster_ops
        ),
    )


def handle_describe_cluster(broker: Broker, ctx: RequestContext) -> DescribeClusterResponse:
    request = ctx.request.body
    assert isinstance(request, DescribeClusterRequest)
    return DescribeClusterResponse(
        cluster_id=broker.cluster_id,
        controller_id=_controller_id(broker),
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack
            )
            for b in _brokers(broker, ctx)
        ],
        cluster_authorized_operations=authorized_operations(
            ResourceType.CLUSTER, "kafka-cluster", request.include_cluster_authorized_operations
        ),
    )
