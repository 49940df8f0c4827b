"""The partitions of a coordinator's internal topic that this broker serves, and the topic.

Shared by the group coordinator (`__consumer_offsets`) and the transaction coordinator
(`__transaction_state`), which differ only in what they replay and write. Owns: the topic's
creation on first use (as Kafka creates it on the first FindCoordinator), which partition
holds a key (`partition_for`), the load state of each partition this broker leads, and
reading a partition back a chunk at a time.

Invariants:
- A key is served (`error_for` answers None) only when its partition is loaded; while it
  loads, COORDINATOR_LOAD_IN_PROGRESS; when it is not led here, NOT_COORDINATOR.
- A load belongs to the leader epoch it began under. `begin_load` at the epoch already loaded
  or loading does nothing; a load that ends after its partition was dropped, or after a load
  under a newer epoch began, is discarded (`finish_load` answers False), so a broker that
  lost leadership while replaying never starts serving what it replayed.
- Reading goes to the log end as it is after each chunk, not to the high watermark: a new
  leader's high watermark lags its log until the followers fetch again, and a leader keeps
  what its log holds (as Kafka loads). A chunk with no whole batch is CORRUPT_MESSAGE.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from riverlog.coordinator.records import partition_for
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.records.v2 import RecordBatch, iter_record_batches

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

LOAD_CHUNK_BYTES = 1 << 20

Pair = tuple[bytes | None, bytes | None]


class _Load(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"


class CoordinatorPartitions:
    def __init__(self, broker: Broker, topic: str, partitions_key: str) -> None:
        self.broker = broker
        self.topic = topic
        self._partitions_key = partitions_key
        self._states: dict[int, _Load] = {}
        self._epochs: dict[int, int] = {}

    # --- the topic -------------------------------------------------------------------------

    def count(self) -> int:
        """The topic's partition count, or the configured count before it exists."""
        topic = self.broker.topics.get(self.topic)
        if topic is not None:
            return len(topic.partitions)
        return int(self.broker.config[self._partitions_key])

    def of(self, key: str) -> int:
        return partition_for(key, self.count())

    def ensure_topic(self, replication_factor: int, configs: dict[str, str]) -> None:
        """Create the topic unless it exists (or another broker creates it first)."""
        if self.broker.topics.get(self.topic) is not None:
            return
        try:
            self.broker.create_topic(
                self.topic, self.broker.config[self._partitions_key], replication_factor, configs
            )
        except KafkaError as e:
            if e.code != error_codes.TOPIC_ALREADY_EXISTS.code:
                raise

    # --- load states -----------------------------------------------------------------------

    def error_for(self, key: str) -> ErrorCode | None:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS when this broker cannot serve
        `key` now; None when it can."""
        state = self._states.get(self.of(key))
        if state is None:
            return error_codes.NOT_COORDINATOR
        if state is _Load.LOADING:
            return error_codes.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def loading(self) -> bool:
        return any(state is _Load.LOADING for state in self._states.values())

    def held(self) -> list[int]:
        """The partitions loading or loaded here."""
        return list(self._states)

    def epoch(self, index: int) -> int | None:
        """The leader epoch `index` is loading or loaded under; None when not held. The
        transaction coordinator sends it with its markers (the coordinator epoch)."""
        return self._epochs.get(index)

    def begin_load(self, index: int, leader_epoch: int) -> bool:
        """Mark `index` loading under `leader_epoch`; False when it already is (or is loaded)
        under that epoch and nothing is to be done."""
        if index in self._states and self._epochs.get(index) == leader_epoch:
            return False
        self._states[index] = _Load.LOADING
        self._epochs[index] = leader_epoch
        return True

    def finish_load(self, index: int, leader_epoch: int) -> bool:
        """Mark `index` loaded; False (and nothing changes) when the load is stale."""
        if self._states.get(index) is not _Load.LOADING or self._epochs.get(index) != leader_epoch:
            return False
        self._states[index] = _Load.LOADED
        return True

    def drop(self, index: int) -> None:
        self._states.pop(index, None)
        self._epochs.pop(index, None)

    # --- reading back ----------------------------------------------------------------------

    def read(
        self, index: int, pairs_of: Callable[[RecordBatch], Iterable[Pair]]
    ) -> Iterator[list[Pair]]:
        """The (key, value) pairs that `pairs_of` takes from each batch of partition `index`,
        a chunk at a time, up to the log end as it is after each chunk."""
        plog = self.broker.replicas.get(self.topic, index).log
        offset = plog.log_start_offset
        while offset < (end := plog.log_end_offset):
            region = plog.read(offset, LOAD_CHUNK_BYTES, max_offset=end).records
            if region is None:
                return
            data = os.pread(region.fileno, region.length, region.offset)
            pairs: list[Pair] = []
            start = offset
            for batch in iter_record_batches(data):
                offset = batch.header.next_offset
                pairs.extend(pairs_of(batch))
            if offset == start:
                raise KafkaError(error_codes.CORRUPT_MESSAGE, f"no whole batch at {offset}")
            yield pairs
