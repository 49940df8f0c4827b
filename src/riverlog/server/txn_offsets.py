"""Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447) waiting for their marker.

A transactional producer's offsets are appended to the group's `__consumer_offsets`
partition as a transactional batch (its producer id and epoch, so a fenced producer's
commit is refused with PRODUCER_FENCED by the partition's producer state), replicated to
the ISR, and then held here per producer id — not yet visible to OffsetFetch. When the
transaction's marker reaches that partition (`complete`, called by WriteTxnMarkers), a
commit moves them into the group coordinator's committed offsets; an abort drops them.

Validation as Kafka's: with a generation or member id (KIP-447, v3+) the member must be
current; without one (v0-v2) any group is accepted.

Verification (KIP-890 part 1, as for produce; `transaction.partition.verification.enable`):
when the commit would open the producer's transaction on the group's offsets partition, the
transaction coordinator is asked first whether that partition is in the transaction
(AddOffsetsToTxn put it there) — `server/txn_verification.py`, which also says how a
refusal is answered — and the batch is appended with the guard it gave, so a marker written
meanwhile voids it. A commit sent without AddOffsetsToTxn, or a late one after its
transaction ended, is refused (INVALID_TXN_STATE) and never pending: no marker could ever
complete it, and it would hold the partition's last stable offset.

Everything runs on the event loop thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.coordinator.records import (
    OffsetKey,
    StoredOffset,
    encode_offset_key,
    encode_offset_value,
)
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.server.group_coordinator import OFFSETS_TOPIC
from riverlog.server.txn_markers import until_replicated
from riverlog.server.txn_verification import offset_commit_error
from riverlog.storage.producer_state import NO_GUARD, VerificationGuard

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

_FENCED = {error_codes.INVALID_PRODUCER_EPOCH.code, error_codes.PRODUCER_FENCED.code}
_MOVED = {error_codes.NOT_LEADER_OR_FOLLOWER.code, error_codes.UNKNOWN_TOPIC_OR_PARTITION.code}


class TxnOffsets:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.pending: dict[int, dict[str, dict[TopicPartition, StoredOffset]]] = {}
        """Producer id -> group -> offsets committed in its open transaction."""

    async def commit(
        self,
        group_id: str,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[TopicPartition, StoredOffset],
        version: int,
    ) -> dict[TopicPartition, ErrorCode]:
        """Append the offsets as the producer's transactional batch (verified first) and
        hold them until the marker; each partition's error (all the same)."""
        groups = self.broker.groups
        error = groups.coordinator_error(group_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        index = groups.partition_of(group_id)
        records = [
            Record(
                i,
                self.broker.clock.wall_ms(),
                encode_offset_key(OffsetKey(group_id, t, p)),
                encode_offset_value(o),
            )
            for i, ((t, p), o) in enumerate(offsets.items())
        ]
        batch = memoryview(
            encode_batch(
                records, producer_id=producer_id, producer_epoch=epoch, is_transactional=True
            )
        )
        try:
            guard = await self._verify(transactional_id, producer_id, epoch, index, batch)
            if isinstance(guard, ErrorCode):
                return dict.fromkeys(offsets, offset_commit_error(guard, version))
            # The member is checked after the verification's round trip, with no await
            # before the append (Kafka's doTxnCommitOffsets): a rebalance meanwhile counts.
            error = self._member_error(group_id, generation, member_id, instance_id)
            if error is not None:
                return dict.fromkeys(offsets, error)
            hosted, result = self.broker.replicas.append(
                OFFSETS_TOPIC, index, batch, acks=1, internal=True, verification=guard
            )
            stored = await until_replicated(
                self.broker, hosted, result.last_offset + 1, groups.commit_timeout_ms / 1000
            )
        except KafkaError as e:
            if e.code in _FENCED:
                stored = error_codes.PRODUCER_FENCED
            elif e.error is error_codes.INVALID_TXN_STATE:  # a marker voided the guard
                stored = e.error
            elif e.code in _MOVED:
                stored = error_codes.NOT_COORDINATOR
            else:
                stored = error_codes.COORDINATOR_NOT_AVAILABLE
        else:
            if stored is error_codes.NOT_LEADER_OR_FOLLOWER:
                stored = error_codes.NOT_COORDINATOR
            elif stored is not error_codes.NONE:
                stored = error_codes.COORDINATOR_NOT_AVAILABLE
        if stored is error_codes.NONE:
            self.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)
        return dict.fromkeys(offsets, stored)

    def _member_error(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        """Why this member may not commit now (None: it may): KIP-447's checks with a
        generation or member id, any group without one (v0-v2)."""
        groups = self.broker.groups
        error = groups.coordinator_error(group_id)
        if error is None and (
            generation >= 0
            or member_id
            or instance_id is not None
            or groups.manager.get(group_id) is None
        ):
            error = groups.manager.validate_offset_commit(
                self.broker.clock.wall_ms(), group_id, generation, member_id, instance_id
            )
            error = None if error is error_codes.NONE else error
        return error

    async def _verify(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        index: int,
        batch: memoryview,
    ) -> VerificationGuard | ErrorCode | None:
        """The guard to append `batch` with (None: verification is off; NO_GUARD: the
        producer's transaction is open on the partition already), or the coordinator's
        refusal. Raises KafkaError when this broker does not lead the partition."""
        verifier = self.broker.txn_verifier
        if not verifier.enabled:
            return None
        guard = self.broker.replicas.leader(OFFSETS_TOPIC, index).start_transaction_verification(
            batch
        )
        if guard is NO_GUARD:
            return guard
        tp = (OFFSETS_TOPIC, index)
        refused = (await verifier.verify(transactional_id, producer_id, epoch, [tp])).get(tp)
        return guard if refused is None else refused

    def restore(
        self, producer_id: int, by_group: dict[str, dict[TopicPartition, StoredOffset]]
    ) -> None:
        """Offsets of an open transaction found when loading a `__consumer_offsets`
        partition."""
        mine = self.pending.setdefault(producer_id, {})
        for group_id, offsets in by_group.items():
            mine.setdefault(group_id, {}).update(offsets)

    def drop_partition(self, offsets_partition: int) -> None:
        """The group coordinator gave up (or reloads) a `__consumer_offsets` partition: forget
        what was pending for its groups (a reload restores what is still open)."""
        groups = self.broker.groups
        for producer_id in list(self.pending):
            by_group = self.pending[producer_id]
            for group_id in [g for g in by_group if groups.partition_of(g) == offsets_partition]:
                del by_group[group_id]
            if not by_group:
                del self.pending[producer_id]

    def pending_partitions(self, group_id: str) -> frozenset[TopicPartition]:
        """Partitions of the group with transactional offsets awaiting their marker."""
        return frozenset(
            tp for by_group in self.pending.values() for tp in by_group.get(group_id, {})
        )

    def complete(self, producer_id: int, commit: bool, offsets_partition: int) -> None:
        """The marker of `producer_id`'s transaction is on `__consumer_offsets` partition
        `offsets_partition`: its offsets for groups there become committed, or are dropped."""
        by_group = self.pending.get(producer_id)
        if by_group is None:
            return
        groups = self.broker.groups
        for group_id in [g for g in by_group if groups.partition_of(g) == offsets_partition]:
            offsets = by_group.pop(group_id)
            if commit:
                groups.offsets.commit(group_id, offsets)
        if not by_group:
            del self.pending[producer_id]
