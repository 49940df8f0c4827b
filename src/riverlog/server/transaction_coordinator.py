"""The transaction coordinator at the edge: clock, `__transaction_state` I/O, markers, timers.

Wraps the pure state machine (`coordinator/transaction.py`): each request's decision is
carried out here. A transition is written to partition `partition_for(transactional id)` of
the compacted internal topic `__transaction_state` (Kafka's record formats,
`coordinator/transaction_records.py`) and becomes current only once the ISR has it
(`txn_markers.until_replicated`); meanwhile the id's entry is `pending` and other requests
for it get CONCURRENT_TRANSACTIONS. After a PrepareCommit/PrepareAbort is replicated the
client is answered and the markers go out (`txn_markers.MarkerSender`); when every
partition has its marker, CompleteCommit/CompleteAbort is written.

Waiting instead of CONCURRENT_TRANSACTIONS: a request for an id whose markers are being
written (PrepareCommit/PrepareAbort until Complete* is stored) would be answered
CONCURRENT_TRANSACTIONS, and clients retry that after a backoff (librdkafka and the Java
client: 20 ms). A producer's next transaction starts with an AddPartitionsToTxn sent as soon
as EndTxn is answered, before the markers are done, so that retry would cost every
transaction its backoff. Such a request instead waits for the markers (`_ending`), at most
`ENDING_WAIT_S`, and is then decided on the state it finds — the answer the client's retry
would have got, without the backoff; past the bound it gets CONCURRENT_TRANSACTIONS as before.

Which ids are served here: those whose `__transaction_state` partition this broker leads and
has loaded, as the group coordinator does with `__consumer_offsets`. Loading replays the
partition to its log end (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and then finishes every
transaction left in PrepareCommit/PrepareAbort (sends its markers again). The coordinator
epoch sent with markers is the partition's leader epoch. `load_partition` and
`unload_partition` are the leadership hooks.

Timers: every `transaction.abort.timed.out.transaction.cleanup.interval.ms` ongoing
transactions past their timeout are aborted under a bumped epoch; every
`transaction.remove.expired.transaction.cleanup.interval.ms` ids idle for
`transactional.id.expiration.ms` are tombstoned.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from riverlog.coordinator import transaction as txn
from riverlog.coordinator.transaction import TopicPartition, Transition, TxnEntry, TxnMetadata
from riverlog.coordinator.transaction_records import (
    encode_key,
    encode_value,
    replay,
)
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.records.v2 import Record, RecordBatch, encode_batch
from riverlog.server.coordinator_partitions import CoordinatorPartitions, Pair
from riverlog.server.txn_markers import MarkerSender, until_replicated

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)

TRANSACTION_TOPIC = "__transaction_state"
ENDING_WAIT_S = 1.0  # longest a request waits for an ended transaction's markers
_MOVED = {error_codes.NOT_LEADER_OR_FOLLOWER.code, error_codes.UNKNOWN_TOPIC_OR_PARTITION.code}


class TransactionCoordinator:
    def __init__(self, broker: Broker) -> None:
        config = broker.config
        self.broker = broker
        self.limits = txn.Limits(
            config["transaction.max.timeout.ms"], config["transactional.id.expiration.ms"]
        )
        self.entries: dict[str, TxnEntry] = {}
        self.sender = MarkerSender(broker)
        self.write_timeout_s: float = config["offsets.commit.timeout.ms"] / 1000
        self.partitions = CoordinatorPartitions(
            broker, TRANSACTION_TOPIC, "transaction.state.log.num.partitions"
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._ending: dict[str, asyncio.Event] = {}  # ids whose markers are being written
        broker.replicas.add_listener(TRANSACTION_TOPIC, self)

    # --- lifecycle and ownership -------------------------------------------------------

    def start(self) -> None:
        for hosted in self.broker.replicas:
            if hosted.topic == TRANSACTION_TOPIC and hosted.is_leader:
                self.load_partition(hosted.index)
        config = self.broker.config
        self._spawn(
            self._every(
                config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                self.abort_timed_out,
            )
        )
        self._spawn(
            self._every(
                config["transaction.remove.expired.transaction.cleanup.interval.ms"],
                self.expire_ids,
            )
        )

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for index in self.partitions.held():
            self.unload_partition(index)
        await self.sender.close()

    def _spawn(self, coro: object) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _every(self, interval_ms: int, action: object) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                action()  # type: ignore[operator]
            except Exception:
                log.exception("transaction coordinator timer failed")

    def partition_of(self, transactional_id: str) -> int:
        return self.partitions.of(transactional_id)

    def ensure_topic(self) -> None:
        """Create `__transaction_state` on first use (compacted, Kafka's settings)."""
        config = self.broker.config
        self.partitions.ensure_topic(
            config["transaction.state.log.replication.factor"],
            {
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "min.insync.replicas": str(config["transaction.state.log.min.isr"]),
                "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
                "unclean.leader.election.enable": "false",
            },
        )

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        return self.partitions.error_for(transactional_id)

    def became_leader(self, index: int) -> None:
        self.load_partition(index)

    def stopped_leading(self, index: int) -> None:
        self.unload_partition(index)

    def load_partition(self, index: int) -> None:
        """Replay partition `index` (led here) unless it is loading or loaded at this epoch;
        what an earlier epoch loaded is dropped first."""
        try:
            epoch = self.broker.replicas.get(TRANSACTION_TOPIC, index).leader_epoch
        except KafkaError:
            return
        if self.partitions.epoch(index) == epoch:
            return  # loading or loaded at this epoch
        self.unload_partition(index)
        self.partitions.begin_load(index, epoch)
        self._spawn(self._load(index, epoch))

    def unload_partition(self, index: int) -> None:
        self.partitions.drop(index)
        for transactional_id in [i for i in self.entries if self.partitions.of(i) == index]:
            del self.entries[transactional_id]

    async def _load(self, index: int, epoch: int) -> None:
        loaded: dict[str, TxnMetadata] = {}
        try:
            for pairs in self.partitions.read(index, _data_records):
                replay(pairs, into=loaded)
                await asyncio.sleep(0)
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_TOPIC, index)
            self.partitions.drop(index)
            return
        if not self.partitions.finish_load(index, epoch):
            return  # unloaded, or loading again under a newer epoch, meanwhile
        for transactional_id, meta in loaded.items():
            self.entries[transactional_id] = TxnEntry(meta)
        log.log(
            logging.INFO if loaded else logging.DEBUG,
            "loaded %d transactional ids from %s-%d",
            len(loaded),
            TRANSACTION_TOPIC,
            index,
        )
        for transactional_id, meta in loaded.items():
            if meta.state in (txn.S.PREPARE_COMMIT, txn.S.PREPARE_ABORT):
                markers = txn.Markers(
                    meta.producer_id,
                    meta.producer_epoch,
                    meta.state is txn.S.PREPARE_COMMIT,
                    meta.partitions,
                )
                self._spawn_finish(transactional_id, markers)

    # --- writing ---------------------------------------------------------------------------

    async def _write(self, entry: TxnEntry, transition: Transition) -> ErrorCode:
        """Append the transition, wait for the ISR, apply it; the error otherwise."""
        meta = transition.target
        index = self.partition_of(meta.transactional_id)
        epoch = self.partitions.epoch(index)
        entry.pending = transition
        value = None if meta.state is txn.S.DEAD else encode_value(meta)
        batch = encode_batch(
            [Record(0, self.broker.clock.wall_ms(), encode_key(meta.transactional_id), value)]
        )
        try:
            hosted, result = self.broker.replicas.append(
                TRANSACTION_TOPIC, index, memoryview(batch), acks=-1, internal=True
            )
            error = await until_replicated(
                self.broker, hosted, result.last_offset + 1, self.write_timeout_s
            )
        except KafkaError as e:
            log.warning("could not store transaction %s: %s", meta.transactional_id, e)
            error = (
                error_codes.NOT_COORDINATOR
                if e.code in _MOVED
                else error_codes.COORDINATOR_NOT_AVAILABLE
            )
        else:
            if error is error_codes.NOT_LEADER_OR_FOLLOWER:
                error = error_codes.NOT_COORDINATOR
            elif error is not error_codes.NONE:
                error = error_codes.COORDINATOR_NOT_AVAILABLE
        moved = self.partitions.epoch(index) != epoch
        if moved or self.entries.get(meta.transactional_id) is not entry:
            return error_codes.NOT_COORDINATOR  # unloaded meanwhile: the new leader decides
        if error is not error_codes.NONE:
            entry.pending = None
            return error
        txn.apply(entry, transition)
        if meta.state is txn.S.DEAD:
            del self.entries[meta.transactional_id]
        if transition.markers is not None:
            self._spawn_finish(meta.transactional_id, transition.markers)
        return error_codes.NONE

    def _spawn_finish(self, transactional_id: str, markers: txn.Markers) -> None:
        """Finish the transaction in the background; requests for the id meanwhile may wait
        for it (`_after_ending`)."""
        ended = self._ending.setdefault(transactional_id, asyncio.Event())

        async def finishing() -> None:
            try:
                await self._finish(transactional_id, markers)
            finally:
                if self._ending.get(transactional_id) is ended:
                    del self._ending[transactional_id]
                ended.set()

        self._spawn(finishing())

    async def _after_ending(self, transactional_id: str, decision: txn.Decision) -> bool:
        """Whether `decision` should be made again: it was CONCURRENT_TRANSACTIONS while the
        id's markers were being written, and they are done now (waited for, at most
        `ENDING_WAIT_S`)."""
        ending = self._ending.get(transactional_id)
        if ending is None or decision.error is not error_codes.CONCURRENT_TRANSACTIONS:
            return False
        try:
            async with asyncio.timeout(ENDING_WAIT_S):
                await ending.wait()
        except TimeoutError:
            return False
        return True

    async def _finish(self, transactional_id: str, markers: txn.Markers) -> None:
        """Send the markers, then write CompleteCommit/CompleteAbort."""
        index = self.partition_of(transactional_id)
        epoch = self.partitions.epoch(index)
        if epoch is None:
            return
        await self.sender.send(markers, epoch)
        while True:
            entry = self.entries.get(transactional_id)
            if entry is None or self.partitions.epoch(index) != epoch:
                return
            if entry.pending is None:
                error = await self._write(entry, txn.complete(entry, self.broker.clock.wall_ms()))
                if error is error_codes.NONE or error is error_codes.NOT_COORDINATOR:
                    return
            await asyncio.sleep(0.1)

    def _entry(self, transactional_id: str) -> TxnEntry | None:
        return self.entries.get(transactional_id)

    # --- requests ----------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int
    ) -> tuple[ErrorCode, int, int]:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error, -1, -1
        entry = self._entry(transactional_id)
        decision = txn.init_producer_id(
            entry,
            transactional_id,
            timeout_ms,
            producer_id,
            epoch,
            self.broker.producer_ids.next,
            self.broker.clock.wall_ms(),
            self.limits,
        )
        if await self._after_ending(transactional_id, decision):
            return await self.init_producer_id(transactional_id, timeout_ms, producer_id, epoch)
        if decision.transition is not None:
            if entry is None:
                entry = self.entries.setdefault(
                    transactional_id, TxnEntry(decision.transition.target)
                )
            written = await self._write(entry, decision.transition)
            if written is not error_codes.NONE:
                if entry.metadata is decision.transition.target and entry.pending is None:
                    self.entries.pop(transactional_id, None)  # never stored
                return written, -1, -1
        if not decision.ok or decision.answer is None:
            return decision.error, -1, -1
        return error_codes.NONE, decision.answer.producer_id, decision.answer.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: frozenset[TopicPartition],
    ) -> ErrorCode:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error
        entry = self._entry(transactional_id)
        decision = txn.add_partitions(
            entry, producer_id, epoch, partitions, self.broker.clock.wall_ms()
        )
        if await self._after_ending(transactional_id, decision):
            return await self.add_partitions(transactional_id, producer_id, epoch, partitions)
        if decision.transition is not None and entry is not None:
            return await self._write(entry, decision.transition)
        return decision.error

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: frozenset[TopicPartition],
    ) -> ErrorCode | dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn `verify_only` (KIP-890 part 1): `txn.verify_partitions`."""
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error
        return txn.verify_partitions(self._entry(transactional_id), producer_id, epoch, partitions)

    async def end_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> ErrorCode:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error
        entry = self._entry(transactional_id)
        decision = txn.end_transaction(
            entry, producer_id, epoch, commit, self.broker.clock.wall_ms()
        )
        if await self._after_ending(transactional_id, decision):
            return await self.end_transaction(transactional_id, producer_id, epoch, commit)
        if decision.transition is not None and entry is not None:
            return await self._write(entry, decision.transition)
        return decision.error

    # --- timers --------------------------------------------------------------------------

    def abort_timed_out(self) -> int:
        now = self.broker.clock.wall_ms()
        count = 0
        for transactional_id, entry in list(self.entries.items()):
            if self.coordinator_error(transactional_id) is not None:
                continue
            transition = txn.timed_out(entry, now)
            if transition is not None:
                log.info(
                    "aborting transaction %s: timed out after %d ms",
                    transactional_id,
                    entry.metadata.timeout_ms,
                )
                self._spawn(self._write_logged(entry, transition))
                count += 1
        return count

    def expire_ids(self) -> int:
        now = self.broker.clock.wall_ms()
        count = 0
        for transactional_id, entry in list(self.entries.items()):
            if self.coordinator_error(transactional_id) is not None:
                continue
            transition = txn.expired(entry, now, self.limits)
            if transition is not None:
                self._spawn(self._write_logged(entry, transition))
                count += 1
        return count

    async def _write_logged(self, entry: TxnEntry, transition: Transition) -> None:
        error = await self._write(entry, transition)
        if error is not error_codes.NONE:
            log.info(
                "transaction %s: %s not stored: %s",
                transition.target.transactional_id,
                transition.target.state.kafka_name,
                error.name,
            )

    # --- describing --------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error, None
        entry = self._entry(transactional_id)
        if entry is None:
            return error_codes.TRANSACTIONAL_ID_NOT_FOUND, None
        return error_codes.NONE, entry.metadata

    def listing(self, filters: txn.Listing) -> list[TxnMetadata]:
        now = self.broker.clock.wall_ms()
        return [
            e.metadata
            for i, e in self.entries.items()
            if self.coordinator_error(i) is None and filters.matches(e.metadata, now)
        ]

    def loading(self) -> bool:
        return self.partitions.loading()


def _data_records(batch: RecordBatch) -> list[Pair]:
    """A `__transaction_state` batch's (key, value) pairs; none from a control batch."""
    if batch.header.is_control:
        return []
    return [(r.key, r.value) for r in batch.records]
