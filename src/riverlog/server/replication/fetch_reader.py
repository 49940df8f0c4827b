"""How much, and what, a fetch reads from a partition this broker hosts (the replica to read
chosen by `ReplicaManager.fetch_target`): the limit by who fetches, the leader's replication
throttle, and the replica a consumer should read from instead (KIP-392).

Invariants: followers read up to the log end, consumers up to the high watermark,
READ_COMMITTED consumers up to the last stable offset; a follower catching up (not in the
ISR) on a partition throttled on this leader gets no data while the leader's replication
quota is used up, and what it reads is recorded against that quota; an `OSError` from a log
goes to the replica manager's `storage_error` (its directory goes offline) and is answered
as the KafkaError it returns. Nothing here changes a partition's state.
"""

from __future__ import annotations

from collections.abc import Callable

from riverlog.clock import Clock
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.primitives import FileRegion
from riverlog.server.replication.partition import HostedPartition
from riverlog.server.replication.replica_selector import ReplicaView, rack_aware
from riverlog.server.replication.throttle import ReplicationQuota, throttled


class FetchReader:
    def __init__(
        self,
        broker_id: int,
        leader_throttle: ReplicationQuota,
        clock: Clock,
        storage_error: Callable[[HostedPartition, OSError], KafkaError],
        *,
        replica_selector: str = "",
        rack_of: Callable[[int], str | None] = lambda _broker_id: None,
    ) -> None:
        self.broker_id = broker_id
        self.leader_throttle = leader_throttle
        self.clock = clock
        self.storage_error = storage_error
        self.replica_selector = replica_selector
        self.rack_of = rack_of
        """The rack of a broker (`broker.rack`), as the cluster's metadata says."""

    def preferred_read_replica(
        self, hosted: HostedPartition, fetch_offset: int, client_rack: str
    ) -> int:
        """KIP-392: the replica a consumer should read from instead of this leader, or -1
        (no selector, no better replica, or not the leader)."""
        if not self.replica_selector or not hosted.is_leader:
            return -1
        now = self.clock.wall_ms()
        leader = ReplicaView(
            self.broker_id, self.rack_of(self.broker_id), hosted.log.log_end_offset, 0
        )
        candidates = [
            ReplicaView(replica, self.rack_of(replica), end, since)
            for replica, end, since in hosted.read_replicas(fetch_offset, now)
        ]
        chosen = rack_aware(client_rack, leader, candidates)
        return -1 if chosen == self.broker_id else chosen

    @staticmethod
    def fetch_limit(
        hosted: HostedPartition, replica_id: int, *, read_committed: bool = False
    ) -> int:
        """Followers read up to the log end, consumers up to the (local) high watermark,
        READ_COMMITTED consumers up to the last stable offset."""
        plog = hosted.log
        if replica_id >= 0:
            return plog.log_end_offset
        return plog.last_stable_offset if read_committed else plog.high_watermark

    def _throttled(self, hosted: HostedPartition, replica_id: int) -> bool:
        """A follower catching up on a partition throttled on this leader."""
        return (
            replica_id >= 0
            and self.leader_throttle.limited
            and replica_id not in hosted.isr
            and throttled(
                hosted.log.config.leader_replication_throttled_replicas,
                hosted.index,
                self.broker_id,
            )
        )

    def _held(self, hosted: HostedPartition, replica_id: int) -> bool:
        """Throttled while the leader's replication quota is used up: no data this time."""
        return self._throttled(hosted, replica_id) and self.leader_throttle.exceeded(
            self.clock.monotonic_s()
        )

    def fetchable_bytes(
        self,
        hosted: HostedPartition,
        fetch_offset: int,
        max_bytes: int,
        replica_id: int,
        min_bytes: int,
        *,
        read_committed: bool = False,
    ) -> int:
        """Bytes a fetch could read now from one partition, at least `min_bytes` when the
        fetch must be answered at once (an offset out of range); cheap: offsets first."""
        plog = hosted.log
        if fetch_offset > plog.log_end_offset or fetch_offset < plog.log_start_offset:
            return min_bytes
        limit = self.fetch_limit(hosted, replica_id, read_committed=read_committed)
        if limit <= fetch_offset or self._held(hosted, replica_id):
            return 0
        if replica_id >= 0 and min_bytes <= 1:
            # A follower reads up to the log end, where the last batch ends: with its
            # offset below that there is a batch to send (`read_for_fetch` reads it).
            return min_bytes
        try:
            read = plog.read(fetch_offset, max_bytes, max_offset=limit)
        except OSError as e:
            raise self.storage_error(hosted, e) from e
        return read.records.length if read.records is not None else 0

    def read_for_fetch(
        self,
        hosted: HostedPartition,
        fetch_offset: int,
        max_bytes: int,
        replica_id: int,
        *,
        min_one_batch: bool,
        read_committed: bool = False,
    ) -> FileRegion | None:
        """Record data for one partition of a fetch (None: nothing now); raises KafkaError
        (OFFSET_OUT_OF_RANGE)."""
        if self._held(hosted, replica_id):
            return None
        try:
            read = hosted.log.read(
                fetch_offset,
                max_bytes,
                max_offset=self.fetch_limit(hosted, replica_id, read_committed=read_committed),
                min_one_batch=min_one_batch,
            )
        except OSError as e:
            raise self.storage_error(hosted, e) from e
        if read.records is not None and self._throttled(hosted, replica_id):
            self.leader_throttle.record(read.records.length, self.clock.monotonic_s())
        return read.records
