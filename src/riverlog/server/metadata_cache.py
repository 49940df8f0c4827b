"""What this broker knows of the cluster: live brokers, the controller, each partition's
leader, leader epoch, replicas, ISR and offline replicas — the source of Metadata answers.

In a cluster the controller keeps it current with UpdateMetadata requests (Kafka's
MetadataCache): a request from an older controller epoch is refused with
STALE_CONTROLLER_EPOCH and changes nothing; a partition whose leader is -2
(`LEADER_DURING_DELETE`) is being deleted and leaves the cache, with its topic when it was the
last. On a single broker the broker itself writes its own partitions here as it hosts them.

Pure data, updated and read on the event loop thread.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from riverlog.model import LEADER_DURING_DELETE, NO_LEADER, TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode
from riverlog.protocol.messages import UpdateMetadataRequest


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()
    """(listener, host, port) of each listener; host and port above are the first's."""

    def on(self, listener: str | None) -> BrokerInfo | None:
        """This broker as reached through `listener` (None: the first endpoint); None when
        it has no such listener."""
        if listener is None or not self.endpoints:
            return self
        for name, host, port in self.endpoints:
            if name == listener:
                return BrokerInfo(self.broker_id, host, port, self.rack, self.endpoints)
        return None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline: tuple[int, ...] = ()


class MetadataCache:
    def __init__(self) -> None:
        self.controller_id = NO_LEADER
        self.controller_epoch = 0
        self.brokers: dict[int, BrokerInfo] = {}
        self.partitions: dict[TopicPartition, PartitionInfo] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self._counts: dict[str, int] = {}

    def topics(self) -> list[str]:
        return sorted(self.topic_ids)

    def partitions_of(self, topic: str) -> dict[int, PartitionInfo]:
        count = self._counts.get(topic, 0)
        found = {}
        for index in range(count):
            info = self.partitions.get((topic, index))
            if info is not None:
                found[index] = info
        return found

    def leader_of(self, topic: str, index: int) -> int:
        info = self.partitions.get((topic, index))
        return NO_LEADER if info is None else info.leader

    def put(self, topic: str, topic_id: uuid.UUID, index: int, info: PartitionInfo) -> None:
        self.topic_ids[topic] = topic_id
        self.partitions[(topic, index)] = info
        self._counts[topic] = max(self._counts.get(topic, 0), index + 1)

    def remove(self, topic: str, index: int) -> None:
        self.partitions.pop((topic, index), None)
        if not any((topic, i) in self.partitions for i in range(self._counts.get(topic, 0))):
            self.topic_ids.pop(topic, None)
            self._counts.pop(topic, None)

    def apply(self, request: UpdateMetadataRequest) -> tuple[ErrorCode, list[str]]:
        """Apply an UpdateMetadata request; (error, topics that were deleted)."""
        if request.controller_epoch < self.controller_epoch:
            return error_codes.STALE_CONTROLLER_EPOCH, []
        self.controller_epoch = request.controller_epoch
        self.controller_id = request.controller_id
        self.brokers = {}
        for b in request.live_brokers:
            endpoint = b.endpoints[0] if b.endpoints else None
            host = endpoint.host if endpoint is not None else b.v0_host
            port = endpoint.port if endpoint is not None else b.v0_port
            endpoints = tuple((e.listener, e.host, e.port) for e in b.endpoints)
            self.brokers[b.id] = BrokerInfo(b.id, host, port, b.rack or None, endpoints)
        states = list(request.ungrouped_partition_states)
        ids: dict[str, uuid.UUID] = {}
        for topic in request.topic_states:
            ids[topic.topic_name] = topic.topic_id
            for p in topic.partition_states:
                p.topic_name = topic.topic_name
                states.append(p)
        deleted: set[str] = set()
        for p in states:
            if p.leader == LEADER_DURING_DELETE:
                self.remove(p.topic_name, p.partition_index)
                if p.topic_name not in self.topic_ids:
                    deleted.add(p.topic_name)
                continue
            info = PartitionInfo(
                p.leader, p.leader_epoch, tuple(p.isr), tuple(p.replicas), tuple(p.offline_replicas)
            )
            topic_id = ids.get(p.topic_name) or self.topic_ids.get(p.topic_name) or uuid.UUID(int=0)
            self.put(p.topic_name, topic_id, p.partition_index, info)
        return error_codes.NONE, sorted(deleted)
