"""The transactional producer (`transactional.id`): Kafka's transactions API on `AsyncProducer`.

    producer = AsyncTransactionalProducer({"bootstrap.servers": ..., "transactional.id": "copy"})
    await producer.init_transactions()
    await producer.begin_transaction()
    await producer.send("out", b"value")
    await producer.send_offsets_to_transaction({("in", 0): 42}, consumer.group_metadata())
    await producer.commit_transaction()          # or abort_transaction()

How it works. `init_transactions` finds the transaction coordinator (FindCoordinator, key
type TRANSACTION) and gets the producer id and epoch for the transactional id
(InitProducerId; this fences any older producer of the same id and aborts its open
transaction). Before a transaction's first batch to a partition is sent, the partition is
added to the transaction (AddPartitionsToTxn) — the sender's hook `_send_ready`. Batches are
transactional and carry the transactional id. `send_offsets_to_transaction` adds the group's
offsets partition (AddOffsetsToTxn) and commits the offsets through the group coordinator
(TxnOffsetCommit, with the consumer's generation and member id: KIP-447).
`commit_transaction` / `abort_transaction` flush every record, then end the transaction
(EndTxn); the coordinator writes the markers.

Two-phase commit across processes (Flink's KafkaSink does this by reflection on the Java
client). `prepare_transaction` flushes the open transaction and returns its
`TransactionHandle` (transactional id, producer id, epoch) without ending it; another process
— a Spark driver — makes a producer with the same `transactional.id`, calls
`resume_transaction(handle)` instead of `init_transactions`, and then `commit_transaction` or
`abort_transaction` (EndTxn with that id and epoch). The coordinator makes this safe: EndTxn
with a stale epoch is PRODUCER_FENCED (a newer producer took the id over, or the
coordinator aborted the transaction after `transaction.timeout.ms`), and repeating a commit
(or an abort) that already completed is answered NONE, so committing a handle twice is
harmless. A resumed producer sends nothing (the sequences are the other producer's).

Errors, as the Java client's: a failed record, a refused AddPartitionsToTxn or a sequence
error make the transaction abortable — `commit_transaction` raises that error, the
application calls `abort_transaction` (after which, for a sequence error, the producer takes a
new epoch with its current id and epoch: KIP-360) and begins again. Fencing
(PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is fatal:
every later call raises it; the application closes the producer.

Invariant: a record reaches a partition only after that partition was added to the open
transaction; records are sent only inside a transaction.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from riverlog.client.accumulator import ProducerBatch
from riverlog.client.partitioner import Partitioner
from riverlog.client.producer import AsyncProducer, Bytes, Headers, RecordMetadata
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.error_codes import KafkaError, for_code

TRANSACTION_KEY, GROUP_KEY = 1, 0
ADD_PARTITIONS_CLIENT_VERSION = 3  # v4+ is for brokers (KIP-890)
_RETRY_S = 0.05
_RETRIES = 600  # ~30 s of CONCURRENT_TRANSACTIONS and coordinator moves
_RETRIABLE = {
    error_codes.CONCURRENT_TRANSACTIONS.code,
    error_codes.COORDINATOR_LOAD_IN_PROGRESS.code,
    error_codes.COORDINATOR_NOT_AVAILABLE.code,
    error_codes.NOT_COORDINATOR.code,
    error_codes.UNKNOWN_TOPIC_OR_PARTITION.code,
    error_codes.REQUEST_TIMED_OUT.code,
}
_FATAL = {
    error_codes.PRODUCER_FENCED.code,
    error_codes.INVALID_PRODUCER_EPOCH.code,
    error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.code,
    error_codes.INVALID_PRODUCER_ID_MAPPING.code,
}


@dataclass(frozen=True)
class GroupMetadata:
    """What `send_offsets_to_transaction` needs of the consumer (KIP-447); a bare group id
    (generation -1) is accepted too, as before KIP-447."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True)
class TransactionHandle:
    """A prepared transaction, enough for another process to commit or abort it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...] = ()
    """The partitions in the transaction; none means nothing was written (nothing to end)."""


class _State(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    FATAL = "fatal"


class AsyncTransactionalProducer(AsyncProducer):
    def __init__(
        self, config: Mapping[str, object], *, partitioner: Partitioner | None = None
    ) -> None:
        super().__init__(config, partitioner=partitioner)
        if self.config.transactional_id is None:
            raise ValueError("a transactional producer needs transactional.id")
        self.transactional_id: str = self.config.transactional_id
        self._state = _State.UNINITIALIZED
        self._in_txn: set[TopicPartition] = set()
        self._abortable: BaseException | None = None
        self._fatal: KafkaError | None = None
        self._bump_epoch = False
        self._need_producer_id = False  # the producer id comes from init_transactions only
        self._resumed = False  # ends another producer's transaction: sends nothing

    # -- the application's calls -----------------------------------------------------------

    async def init_transactions(self) -> None:
        self._check_fatal()
        await self.start()
        await self._init_producer_id_for_txn(-1, -1)
        self._state = _State.READY

    async def resume_transaction(self, handle: TransactionHandle) -> None:
        """Instead of `init_transactions`: take over the transaction that another producer
        of this transactional id prepared (`prepare_transaction`), to commit or abort it."""
        self._check_fatal()
        if handle.transactional_id != self.transactional_id:
            raise ValueError(f"the handle is for {handle.transactional_id!r}")
        if self._state is not _State.UNINITIALIZED:
            raise KafkaError(error_codes.INVALID_TXN_STATE, "resume on an initialized producer")
        await self.start()
        self._producer_id, self._producer_epoch = handle.producer_id, handle.producer_epoch
        self._resumed = True
        self._state = _State.IN_TRANSACTION

    async def prepare_transaction(self) -> TransactionHandle:
        """Phase one of a two-phase commit: every record of the open transaction is
        acknowledged (or the error that makes it abortable is raised); the transaction stays
        open for this producer or a resumed one to end."""
        self._check_fatal()
        if self._state is not _State.IN_TRANSACTION or self._resumed:
            raise KafkaError(error_codes.INVALID_TXN_STATE, "no transaction to prepare")
        await self.flush()
        self._raise_abortable()
        return TransactionHandle(
            self.transactional_id,
            self._producer_id,
            self._producer_epoch,
            tuple(sorted(self._in_txn)),
        )

    async def begin_transaction(self) -> None:
        self._check_fatal()
        if self._state is not _State.READY or self._resumed:
            raise KafkaError(
                error_codes.INVALID_TXN_STATE, f"begin_transaction in state {self._state.value}"
            )
        self._in_txn.clear()
        self._abortable = None
        self._state = _State.IN_TRANSACTION

    async def send(
        self,
        topic: str,
        value: Bytes | None = None,
        key: Bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        self._check_fatal()
        if self._state is not _State.IN_TRANSACTION or self._resumed:
            raise KafkaError(error_codes.INVALID_TXN_STATE, "send outside a transaction")
        return await super().send(
            topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group: GroupMetadata | str
    ) -> None:
        self._check_fatal()
        if self._state is not _State.IN_TRANSACTION or self._resumed:
            raise KafkaError(error_codes.INVALID_TXN_STATE, "no transaction to add offsets to")
        meta = GroupMetadata(group) if isinstance(group, str) else group
        await self._call(
            TRANSACTION_KEY,
            self.transactional_id,
            lambda: m.AddOffsetsToTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=self._producer_id,
                producer_epoch=self._producer_epoch,
                group_id=meta.group_id,
            ),
        )
        by_topic: dict[str, list[m.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]] = {}
        for (topic, index), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                m.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                    partition_index=index, committed_offset=offset, committed_metadata=""
                )
            )
        request = m.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=meta.group_id,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            generation_id=meta.generation_id,
            member_id=meta.member_id,
            group_instance_id=meta.group_instance_id,
            topics=[
                m.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        await self._call(GROUP_KEY, meta.group_id, lambda: request)

    async def commit_transaction(self) -> None:
        self._check_fatal()
        if self._state is not _State.IN_TRANSACTION:
            raise KafkaError(error_codes.INVALID_TXN_STATE, "no transaction to commit")
        await self.flush()
        self._raise_abortable()
        await self._end(commit=True)

    def _raise_abortable(self) -> None:
        if self._abortable is not None:  # the application aborts
            if isinstance(self._abortable, KafkaError):
                raise KafkaError(self._abortable.error, self._abortable.message)
            raise KafkaError(error_codes.NETWORK_EXCEPTION, str(self._abortable))

    async def abort_transaction(self) -> None:
        self._check_fatal()
        if self._state is not _State.IN_TRANSACTION:
            raise KafkaError(error_codes.INVALID_TXN_STATE, "no transaction to abort")
        await self.flush()
        if self._in_txn or self._resumed:
            await self._end(commit=False)
        else:
            self._state = _State.READY
        if self._bump_epoch:  # KIP-360: a new epoch resets the sequences
            await self._init_producer_id_for_txn(self._producer_id, self._producer_epoch)
            self._bump_epoch = False
        self._abortable = None

    # -- requests to coordinators ------------------------------------------------------------

    async def _end(self, commit: bool) -> None:
        await self._call(
            TRANSACTION_KEY,
            self.transactional_id,
            lambda: m.EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=self._producer_id,
                producer_epoch=self._producer_epoch,
                committed=commit,
            ),
        )
        self._in_txn.clear()
        self._state = _State.READY

    async def _init_producer_id_for_txn(self, producer_id: int, epoch: int) -> None:
        response = await self._call(
            TRANSACTION_KEY,
            self.transactional_id,
            lambda: m.InitProducerIdRequest(
                transactional_id=self.transactional_id,
                transaction_timeout_ms=self.config.transaction_timeout_ms,
                producer_id=producer_id,
                producer_epoch=epoch,
            ),
        )
        assert isinstance(response, m.InitProducerIdResponse)
        self._producer_id, self._producer_epoch = response.producer_id, response.producer_epoch
        self._partitions.clear()  # sequences start again at 0 under the new epoch

    async def _coordinator(self, key_type: int, key: str) -> int:
        conn = await self.cluster.any_connection()
        version = conn.version_for(m.FindCoordinatorRequest)
        if version >= 4:
            request = m.FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
        else:
            request = m.FindCoordinatorRequest(key=key, key_type=key_type)
        response = await conn.send(request, version)
        assert isinstance(response, m.FindCoordinatorResponse)
        if version >= 4:
            found = response.coordinators[0]
            code, node, message = found.error_code, found.node_id, found.error_message
        else:
            code, node, message = response.error_code, response.node_id, response.error_message
        if code != 0:
            raise KafkaError(for_code(code), message or "")
        return node

    async def _call(
        self,
        key_type: int,
        key: str,
        make: Callable[[], ApiMessage],
        max_version: int | None = None,
    ) -> ApiMessage:
        """Send to the coordinator of `key` (at most `max_version`), retrying while it moves,
        loads or is busy with this transaction; fatal errors make the producer fatal."""
        last: KafkaError | None = None
        for _ in range(_RETRIES):
            try:
                node = await self._coordinator(key_type, key)
                request = make()
                version = (await self.cluster.connection(node)).version_for(type(request))
                if max_version is not None:
                    version = min(version, max_version)
                response = await self.cluster.send(node, request, version)
            except (ConnectionError, OSError) as e:
                last = KafkaError(error_codes.NETWORK_EXCEPTION, str(e))
                await asyncio.sleep(_RETRY_S)
                continue
            except KafkaError as e:
                if e.error.code not in _RETRIABLE:
                    raise
                last = e
                await asyncio.sleep(_RETRY_S)
                continue
            code = _first_error(response)
            if code == 0:
                return response
            error = KafkaError(for_code(code), f"{type(response).__name__}: {for_code(code).name}")
            if code in _FATAL:
                self._fatal, self._state = error, _State.FATAL
                raise error
            if code not in _RETRIABLE:
                raise error
            last = error
            await asyncio.sleep(_RETRY_S)
        assert last is not None
        raise last

    def _check_fatal(self) -> None:
        if self._fatal is not None:
            raise KafkaError(self._fatal.error, self._fatal.message)

    # -- hooks into the sender -------------------------------------------------------------

    async def _send_ready(self, ready: list[TopicPartition]) -> bool:
        new = sorted(tp for tp in ready if tp not in self._in_txn)
        if new and self._abortable is None and self._fatal is None:
            by_topic: dict[str, list[int]] = {}
            for topic, index in new:
                by_topic.setdefault(topic, []).append(index)
            try:
                await self._call(
                    TRANSACTION_KEY,
                    self.transactional_id,
                    lambda: m.AddPartitionsToTxnRequest(
                        v3_and_below_transactional_id=self.transactional_id,
                        v3_and_below_producer_id=self._producer_id,
                        v3_and_below_producer_epoch=self._producer_epoch,
                        v3_and_below_topics=[
                            m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                                name=t, partitions=ps
                            )
                            for t, ps in by_topic.items()
                        ],
                    ),
                    ADD_PARTITIONS_CLIENT_VERSION,
                )
                self._in_txn.update(new)
            except (KafkaError, ConnectionError) as e:
                self._abortable = e
        if new and (self._abortable is not None or self._fatal is not None):
            error = self._fatal or self._abortable
            assert error is not None
            for tp in new:  # never written outside the transaction
                for batch in self._accumulator.take_partition(tp):
                    self._finish(batch, -1, -1, error)
            ready = [tp for tp in ready if tp in self._in_txn]
        return await super()._send_ready(ready)

    def _prepare(self, batch: ProducerBatch) -> None:
        super()._prepare(batch)
        batch.is_transactional = True

    def _finish(
        self, batch: ProducerBatch, base_offset: int, append_time: int, error: BaseException | None
    ) -> None:
        if error is not None and self._abortable is None:
            self._abortable = error
            if isinstance(error, KafkaError) and error.error.code in _FATAL:
                self._fatal, self._state = error, _State.FATAL
        super()._finish(batch, base_offset, append_time, error)

    async def _init_producer_id(self) -> None:
        """The sender wants a new producer id (a sequence it cannot explain): abortable; the
        new epoch comes with `abort_transaction` (KIP-360)."""
        self._need_producer_id = False
        self._bump_epoch = True
        if self._abortable is None:
            self._abortable = KafkaError(
                error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER, "the transaction must be aborted"
            )


def _first_error(response: ApiMessage) -> int:
    """The first error code of a coordinator's answer (top level or per partition)."""
    code = getattr(response, "error_code", 0)
    if code:
        return int(code)
    for topic in getattr(response, "results_by_topic_v3_and_below", None) or ():
        for p in topic.results_by_partition:
            if p.partition_error_code:
                return int(p.partition_error_code)
    for topic in getattr(response, "topics", None) or ():
        for p in getattr(topic, "partitions", ()):
            if getattr(p, "error_code", 0):
                return int(p.error_code)
    return 0
