"""The partitions this broker hosts, and appends/reads on them for the request handlers.

Owns one `HostedPartition` per local replica: its log, topic id, leader epoch, replica set and
ISR. On a single broker every replica is local and the leader, so the high watermark follows
the log end offset after each append; the cluster issue replaces that rule with the ISR's.

After every append the fetch purgatory is woken for that partition, so a consumer waiting in a
long poll gets the new data at once, not after `max_wait_ms`.

Everything here runs on the event loop thread (storage calls are short, bounded file I/O);
the log manager's housekeeping thread takes each log's own lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.server.purgatory import Purgatory
from riverlog.storage.log import AppendResult, PartitionLog
from riverlog.storage.manager import LogManager

TopicPartition = tuple[str, int]


@dataclass
class HostedPartition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: PartitionLog
    leader_id: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.index)


class ReplicaManager:
    def __init__(self, broker_id: int, logs: LogManager, fetch_purgatory: Purgatory) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.fetch_purgatory = fetch_purgatory
        self.partitions: dict[TopicPartition, HostedPartition] = {}

    def __iter__(self) -> Iterator[HostedPartition]:
        return iter(list(self.partitions.values()))

    def host(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        replicas: list[int],
        config: dict[str, str],
    ) -> HostedPartition:
        """Create (or open) the local log and lead the partition."""
        existing = self.partitions.get((topic, index))
        if existing is not None:
            return existing
        log = self.logs.get_or_create(topic, index, config)
        hosted = HostedPartition(
            topic,
            index,
            topic_id,
            log,
            self.broker_id,
            max(0, log.epochs.latest_epoch),
            list(replicas),
            [self.broker_id],
        )
        log.update_high_watermark(log.log_end_offset)
        self.partitions[(topic, index)] = hosted
        return hosted

    def stop_hosting(self, topic: str, index: int, *, delete: bool) -> None:
        hosted = self.partitions.pop((topic, index), None)
        if hosted is not None and delete:
            self.logs.delete(topic, index)
        self.fetch_purgatory.check((topic, index))

    def get(self, topic: str, index: int) -> HostedPartition:
        """The partition, or UNKNOWN_TOPIC_OR_PARTITION."""
        hosted = self.partitions.get((topic, index))
        if hosted is None:
            raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
        return hosted

    def append(self, topic: str, index: int, records: memoryview) -> AppendResult:
        hosted = self.get(topic, index)
        result = hosted.log.append(records, hosted.leader_epoch)
        if not result.duplicate:
            hosted.log.update_high_watermark(hosted.log.log_end_offset)
            self.fetch_purgatory.check(hosted.key)
        return result
