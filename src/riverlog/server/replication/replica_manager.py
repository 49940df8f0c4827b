"""The partitions this broker hosts, their roles, and appends/reads on them for the handlers.

Owns one `HostedPartition` (`server/replication/partition.py`) per local replica. The controller's
LeaderAndIsr requests make replicas leaders or followers (`apply_leader_and_isr`) — on a
single node too, where it leads everything alone: a follower's log is
fed by the replica fetcher from its leader, after truncating to where it agrees with the
leader (by leader epoch); a leader tracks its followers through their fetches, advances the
high watermark over the ISR, and changes the ISR itself — followers that caught up join,
followers lagging more than `replica.lag.time.max.ms` leave — by a version-checked write of
the partition's state znode plus an ISR change notification for the controller (and a line
in the state-change log).

Whoever moves a partition's end offset, high watermark or role wakes both purgatories for
it: fetches waiting for data and produces waiting for acks=all.

Everything here runs on the event loop thread (storage calls are short, bounded file I/O);
the log manager's housekeeping thread takes each log's own lock.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from riverlog.metadata import layout
from riverlog.metadata.store import (
    BadVersionError,
    MetadataStore,
    NoNodeError,
    StoreUnavailableError,
)
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.messages import LeaderAndIsrRequest
from riverlog.server import state_change_log
from riverlog.server.replication.partition import HostedPartition
from riverlog.server.replication.purgatory import Purgatory
from riverlog.storage.log import AppendResult
from riverlog.storage.log import wall_clock_ms as now_ms
from riverlog.storage.manager import LogManager

log = logging.getLogger(__name__)

__all__ = ["HostedPartition", "ReplicaManager", "RoleChange"]


@dataclass(frozen=True, slots=True)
class RoleChange:
    """Partitions that became leaders or followers in one LeaderAndIsr, for the fetchers
    and the group coordinator."""

    leaders: list[HostedPartition]
    followers: list[tuple[HostedPartition, tuple[str, int]]]
    """Each with its leader's (host, port)."""


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        fetch_purgatory: Purgatory,
        produce_purgatory: Purgatory,
        store: MetadataStore,
    ) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.fetch_purgatory = fetch_purgatory
        self.produce_purgatory = produce_purgatory
        self.store = store
        self.partitions: dict[TopicPartition, HostedPartition] = {}
        self.controller_epoch = 0

    def __iter__(self) -> Iterator[HostedPartition]:
        return iter(list(self.partitions.values()))

    def _open(
        self, topic: str, index: int, topic_id: uuid.UUID, config: dict[str, str]
    ) -> HostedPartition:
        existing = self.partitions.get((topic, index))
        if existing is not None:
            return existing
        plog = self.logs.get_or_create(topic, index, config)
        hosted = HostedPartition(topic, index, topic_id, plog, -1, -1)
        self.partitions[(topic, index)] = hosted
        return hosted

    def stop_hosting(self, topic: str, index: int, *, delete: bool) -> None:
        hosted = self.partitions.pop((topic, index), None)
        if hosted is not None and delete:
            self.logs.delete(topic, index)
        self._wake((topic, index))

    def get(self, topic: str, index: int) -> HostedPartition:
        """The partition, or UNKNOWN_TOPIC_OR_PARTITION."""
        hosted = self.partitions.get((topic, index))
        if hosted is None:
            raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
        return hosted

    def leader(self, topic: str, index: int) -> HostedPartition:
        """The partition if this broker leads it; else UNKNOWN_TOPIC_OR_PARTITION or
        NOT_LEADER_OR_FOLLOWER."""
        hosted = self.get(topic, index)
        if hosted.leader_id != self.broker_id:
            raise KafkaError(error_codes.NOT_LEADER_OR_FOLLOWER)
        return hosted

    def _wake(self, key: TopicPartition) -> None:
        self.fetch_purgatory.check(key)
        self.produce_purgatory.check(key)

    def append(self, topic: str, index: int, records: memoryview) -> AppendResult:
        hosted = self.leader(topic, index)
        result = hosted.log.append(records, hosted.leader_epoch)
        if not result.duplicate:
            if hosted.alone:
                hosted.log.update_high_watermark(hosted.log.log_end_offset)
            self.fetch_purgatory.check(hosted.key)
        return result

    # --- leaders: followers' progress and the ISR --------------------------------------

    def follower_fetched(self, hosted: HostedPartition, replica_id: int, offset: int) -> None:
        now = now_ms()
        if hosted.follower_fetched(replica_id, offset, now):
            self._wake(hosted.key)
        if hosted.pending_isr is None and hosted.follower_to_add(replica_id):
            self._change_isr(hosted, [*hosted.isr, replica_id])

    def shrink_isrs(self, max_lag_ms: int) -> None:
        """Drop lagging followers from the ISRs this broker leads (run periodically)."""
        now = now_ms()
        for hosted in self:
            if hosted.leader_id != self.broker_id or hosted.pending_isr is not None:
                continue
            lagging = hosted.lagging(now, max_lag_ms)
            if lagging:
                log.info(
                    "shrinking ISR of %s-%d from %s: %s lagging",
                    hosted.topic, hosted.index, hosted.isr, lagging,
                )  # fmt: skip
                self._change_isr(hosted, [r for r in hosted.isr if r not in lagging])

    def _change_isr(self, hosted: HostedPartition, isr: list[int]) -> None:
        state = layout.PartitionState(self.broker_id, hosted.leader_epoch, isr,
                                      self.controller_epoch)  # fmt: skip
        path = layout.partition_state_path(hosted.topic, hosted.index)
        hosted.pending_isr = isr
        try:
            version = self.store.set(path, state.to_json(), expected_version=hosted.zk_version)
        except (BadVersionError, NoNodeError):
            log.info("ISR of %s-%d not changed: its state moved on", hosted.topic, hosted.index)
            return  # pending stays set: the controller's next LeaderAndIsr resets it
        except StoreUnavailableError as e:
            log.warning("ISR of %s-%d not changed for now: %s", hosted.topic, hosted.index, e)
            hosted.pending_isr = None  # nothing was written: the next check tries again
            return
        state_change_log.isr_changed(self.broker_id, hosted.key, hosted.isr, isr,
                                     hosted.leader_epoch, version)  # fmt: skip
        if hosted.isr_written(isr, version):
            self._wake(hosted.key)
        else:
            self.produce_purgatory.check(hosted.key)
        note = json.dumps(
            {"version": 1, "partitions": [{"topic": hosted.topic, "partition": hosted.index}]}
        ).encode()
        try:
            self.store.create(
                f"{layout.ISR_CHANGE_NOTIFICATION}/isr_change_{time.time_ns()}_{self.broker_id}", note
            )
        except StoreUnavailableError as e:  # the controller reads the state at its next resync
            log.warning("ISR change of %s-%d not announced: %s", hosted.topic, hosted.index, e)

    # --- the controller's requests ------------------------------------------------------

    def apply_leader_and_isr(
        self,
        request: LeaderAndIsrRequest,
        configs: Callable[[str], dict[str, str]],
    ) -> tuple[dict[TopicPartition, ErrorCode], RoleChange]:
        """Become leader or follower of each partition the request names for this broker.
        A request from an older controller epoch, or a partition state with an older
        leader epoch than known, changes nothing."""
        errors: dict[TopicPartition, ErrorCode] = {}
        leaders: list[HostedPartition] = []
        followers: list[tuple[HostedPartition, tuple[str, int]]] = []
        endpoints = {b.broker_id: (b.host_name, b.port) for b in request.live_leaders}
        stale = request.controller_epoch < self.controller_epoch
        if not stale:
            self.controller_epoch = request.controller_epoch
        now = now_ms()
        for topic in request.topic_states:
            for p in topic.partition_states:
                key = (topic.topic_name, p.partition_index)
                if stale:
                    errors[key] = error_codes.STALE_CONTROLLER_EPOCH
                    continue
                if self.broker_id not in p.replicas:
                    errors[key] = error_codes.NONE
                    continue
                current = self.partitions.get(key)
                if current is not None and p.leader_epoch <= current.leader_epoch:
                    errors[key] = error_codes.NONE if p.leader_epoch == current.leader_epoch \
                        else error_codes.STALE_CONTROLLER_EPOCH  # fmt: skip
                    continue
                hosted = self._open(key[0], key[1], topic.topic_id, configs(key[0]))
                errors[key] = error_codes.NONE
                if p.leader == self.broker_id:
                    hosted.make_leader(self.broker_id, p.leader_epoch, list(p.isr),
                                       list(p.replicas), p.partition_epoch, now)  # fmt: skip
                    leaders.append(hosted)
                else:
                    hosted.make_follower(p.leader, p.leader_epoch, list(p.isr),
                                         list(p.replicas), p.partition_epoch)  # fmt: skip
                    if p.leader in endpoints:
                        followers.append((hosted, endpoints[p.leader]))
                self._wake(key)
        return errors, RoleChange(leaders, followers)

    def stop_replicas(
        self, controller_epoch: int, partitions: list[tuple[TopicPartition, bool]]
    ) -> dict[TopicPartition, ErrorCode]:
        """StopReplica: stop serving (and with `delete`, remove) these replicas."""
        if controller_epoch < self.controller_epoch:
            return {key: error_codes.STALE_CONTROLLER_EPOCH for key, _ in partitions}
        self.controller_epoch = controller_epoch
        for (topic, index), delete in partitions:
            self.stop_hosting(topic, index, delete=delete)
        return {key: error_codes.NONE for key, _ in partitions}
