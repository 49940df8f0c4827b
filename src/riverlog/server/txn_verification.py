"""KIP-890 part 1 at the partition leader: asking transaction coordinators whether a
partition is in a producer's ongoing transaction before its first transactional write there
(Kafka's AddPartitionsToTxnManager), and what a produce request is answered when not.

Why: a transactional batch that reaches a leader after its transaction ended (a late retry
of an aborted transaction) or for a partition the producer never added would open a
transaction no coordinator will ever end — a hanging transaction, holding the partition's
last stable offset (and every read_committed consumer) until an operator aborts it.

How, with `transaction.partition.verification.enable` (Kafka's key, on by default, dynamic):
the produce handler takes a `VerificationGuard` per partition from the leader
(`HostedPartition.start_transaction_verification`: only where the batch would open the
producer's transaction), asks `TxnVerifier.verify`, and appends with the guard what the
coordinator confirmed; the log refuses a guard a marker voided meanwhile
(`storage/producer_state.py`). Nothing else waits for the answer but that request and the
produce requests behind it on its connection (`handlers/produce.py` keeps their order).

The pure part (no I/O): `PendingVerifications` — per coordinator broker the verifications
waiting for the next request, at most one per transactional id (a newer one displaces an
older one: the older is answered INVALID_PRODUCER_EPOCH when its epoch is older, else
NETWORK_EXCEPTION; an incoming older epoch is refused INVALID_PRODUCER_EPOCH) —
`verify_request`, `outcomes` (the coordinator's answer per verification: PRODUCER_FENCED as
INVALID_PRODUCER_EPOCH, a whole-request CLUSTER_AUTHORIZATION_FAILED as INVALID_TXN_STATE,
an unanswered partition as NETWORK_EXCEPTION), `produce_error` (Kafka's answers to
producers: TRANSACTION_ABORTABLE is INVALID_TXN_STATE before Produce v11; the retriable
coordinator errors become NOT_ENOUGH_REPLICAS, which clients retry without a metadata
refresh) and `offset_commit_error` (the group coordinator's answers to TxnOffsetCommit,
whose transactional write to `__consumer_offsets` is verified the same way:
`server/txn_offsets.py`).

The edge (`TxnVerifier`): the coordinator of a transactional id is the leader of its
`__transaction_state` partition in this broker's metadata (none: COORDINATOR_NOT_AVAILABLE,
without creating the topic); one AddPartitionsToTxn (v4+, `verify_only`) in flight per
coordinator broker, carrying every verification that queued meanwhile; an unreachable or
silent broker answers NETWORK_EXCEPTION. Everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.error_codes import ErrorCode, KafkaError, for_code
from riverlog.protocol.exceptions import ProtocolError
from riverlog.server.broker_connections import BrokerConnections
from riverlog.server.transaction_coordinator import TRANSACTION_TOPIC

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)

ENABLE_KEY = "transaction.partition.verification.enable"
REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms for inter-broker requests
VERIFY_FROM_VERSION = 4  # AddPartitionsToTxn v4+: batches of transactions, verify_only
ABORTABLE_FROM_PRODUCE = 11  # Produce v11+ clients know TRANSACTION_ABORTABLE
ABORTABLE_FROM_TXN_OFFSET_COMMIT = 5  # and TxnOffsetCommit v5+
_RETRIABLE = frozenset(
    {
        error_codes.NETWORK_EXCEPTION,
        error_codes.COORDINATOR_LOAD_IN_PROGRESS,
        error_codes.COORDINATOR_NOT_AVAILABLE,
        error_codes.NOT_COORDINATOR,
        error_codes.CONCURRENT_TRANSACTIONS,
    }
)

Errors = dict[TopicPartition, ErrorCode]
"""The partitions a verification could not confirm, with why (confirmed ones are absent)."""


# --- pure: the queue, the request, the answers ---------------------------------------------


@dataclass(slots=True)
class Verification:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    done: asyncio.Future[Errors]

    def fail(self, error: ErrorCode) -> Errors:
        return dict.fromkeys(self.partitions, error)


class PendingVerifications:
    def __init__(self) -> None:
        self._by_broker: dict[int, dict[str, Verification]] = {}

    def add(self, broker_id: int, new: Verification) -> list[tuple[Verification, Errors]]:
        """Queue `new` for `broker_id`; the verifications answered now (the one displaced,
        or `new` itself when older than the one queued)."""
        queued = self._by_broker.setdefault(broker_id, {})
        old = queued.get(new.transactional_id)
        if old is not None and old.producer_epoch > new.producer_epoch:
            return [(new, new.fail(error_codes.INVALID_PRODUCER_EPOCH))]
        queued[new.transactional_id] = new
        if old is None:
            return []
        error = (
            error_codes.INVALID_PRODUCER_EPOCH
            if old.producer_epoch < new.producer_epoch
            else error_codes.NETWORK_EXCEPTION
        )
        return [(old, old.fail(error))]

    def take(self, broker_id: int) -> list[Verification]:
        """Everything queued for `broker_id`, which is no longer queued."""
        return list(self._by_broker.pop(broker_id, {}).values())

    def take_all(self) -> list[Verification]:
        taken = [v for queued in self._by_broker.values() for v in queued.values()]
        self._by_broker.clear()
        return taken


def verify_request(batch: Iterable[Verification]) -> m.AddPartitionsToTxnRequest:
    transactions = []
    for v in batch:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, index in v.partitions:
            by_topic[topic].append(index)
        transactions.append(
            m.AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=v.transactional_id,
                producer_id=v.producer_id,
                producer_epoch=v.producer_epoch,
                verify_only=True,
                topics=[
                    m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
            )
        )
    return m.AddPartitionsToTxnRequest(transactions=transactions)


def outcomes(
    batch: list[Verification], response: m.AddPartitionsToTxnResponse
) -> list[tuple[Verification, Errors]]:
    """What the coordinator's answer means for each verification of the request."""
    if response.error_code:
        error = for_code(response.error_code)
        if error is error_codes.CLUSTER_AUTHORIZATION_FAILED:
            error = error_codes.INVALID_TXN_STATE  # never shown to producers
        return [(v, v.fail(error)) for v in batch]
    answered: dict[str, dict[TopicPartition, int]] = {
        r.transactional_id: {
            (t.name, p.partition_index): p.partition_error_code
            for t in r.topic_results
            for p in t.results_by_partition
        }
        for r in response.results_by_transaction
    }
    out = []
    for v in batch:
        codes = answered.get(v.transactional_id, {})
        errors: Errors = {}
        for tp in v.partitions:
            code = codes.get(tp, error_codes.NETWORK_EXCEPTION.code)
            if code == error_codes.PRODUCER_FENCED.code:
                code = error_codes.INVALID_PRODUCER_EPOCH.code  # what producers expect here
            if code:
                errors[tp] = for_code(code)
        out.append((v, errors))
    return out


def produce_error(error: ErrorCode, produce_version: int) -> KafkaError:
    """How a partition whose verification failed is answered (Kafka's ReplicaManager)."""
    if error is error_codes.TRANSACTION_ABORTABLE and produce_version < ABORTABLE_FROM_PRODUCE:
        error = error_codes.INVALID_TXN_STATE
    if error is error_codes.INVALID_TXN_STATE:
        return KafkaError(error, "Partition was not added to the transaction")
    if error in _RETRIABLE:
        return KafkaError(
            error_codes.NOT_ENOUGH_REPLICAS,
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {error.name}",
        )
    return KafkaError(error)


def offset_commit_error(error: ErrorCode, version: int) -> ErrorCode:
    """How a TxnOffsetCommit is answered when its write was not verified (Kafka's
    GroupCoordinator, `maybeConvertOffsetCommitError`): TRANSACTION_ABORTABLE is
    INVALID_TXN_STATE before TxnOffsetCommit v5; NETWORK_EXCEPTION, which older clients do
    not retry well, becomes COORDINATOR_LOAD_IN_PROGRESS (retried without a coordinator
    lookup); the rest as they are (INVALID_PRODUCER_EPOCH, INVALID_PRODUCER_ID_MAPPING, the
    coordinator errors)."""
    if error is error_codes.TRANSACTION_ABORTABLE and version < ABORTABLE_FROM_TXN_OFFSET_COMMIT:
        return error_codes.INVALID_TXN_STATE
    if error is error_codes.NETWORK_EXCEPTION:
        return error_codes.COORDINATOR_LOAD_IN_PROGRESS
    return error


# --- the edge --------------------------------------------------------------------------------


class TxnVerifier:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.enabled: bool = broker.config[ENABLE_KEY]
        """`transaction.partition.verification.enable`, kept current by the broker's
        dynamic config reload."""
        self.pending = PendingVerifications()
        self.connections = BrokerConnections(
            broker, f"AddPartitionsToTxnSenderThread-{broker.broker_id}"
        )
        self._in_flight: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> asyncio.Future[Errors]:
        """Ask the transactional id's coordinator whether `partitions` are in the producer's
        ongoing transaction; the future holds the ones it could not confirm, with why."""
        wanted = tuple(dict.fromkeys(partitions))
        done: asyncio.Future[Errors] = asyncio.get_running_loop().create_future()
        v = Verification(transactional_id, producer_id, producer_epoch, wanted, done)
        if self._closing:
            done.set_result(v.fail(error_codes.NETWORK_EXCEPTION))
            return done
        coordinator = self._coordinator(transactional_id)
        if coordinator is None:
            done.set_result(v.fail(error_codes.COORDINATOR_NOT_AVAILABLE))
            return done
        for answered, errors in self.pending.add(coordinator, v):
            _settle(answered, errors)
        self._send_next(coordinator)
        return done

    def _coordinator(self, transactional_id: str) -> int | None:
        """The broker leading the id's `__transaction_state` partition, if known and alive."""
        metadata = self.broker.metadata
        index = self.broker.transactions.partition_of(transactional_id)
        leader = metadata.leader_of(TRANSACTION_TOPIC, index)
        return leader if leader >= 0 and leader in metadata.brokers else None

    def _send_next(self, broker_id: int) -> None:
        if broker_id in self._in_flight:
            return  # sent when the request in flight is answered
        batch = self.pending.take(broker_id)
        if not batch:
            return
        self._in_flight.add(broker_id)
        task = asyncio.get_running_loop().create_task(self._send(broker_id, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, broker_id: int, batch: list[Verification]) -> None:
        try:
            try:
                conn = await self.connections.get(broker_id)
                version = conn.version_for(m.AddPartitionsToTxnRequest)
                if version < VERIFY_FROM_VERSION:
                    raise KafkaError(error_codes.UNSUPPORTED_VERSION)
                response = await conn.send(
                    verify_request(batch), version, timeout_s=REQUEST_TIMEOUT_S
                )
                assert isinstance(response, m.AddPartitionsToTxnResponse)
            except (ConnectionError, OSError, TimeoutError, KafkaError, ProtocolError) as e:
                log.info("transaction verification with broker %d failed: %r", broker_id, e)
                await self.connections.drop(broker_id)
                answers = [(v, v.fail(error_codes.NETWORK_EXCEPTION)) for v in batch]
            else:
                answers = outcomes(batch, response)
            for v, errors in answers:
                _settle(v, errors)
        finally:
            for v in batch:  # cancelled at shutdown: answered all the same
                _settle(v, v.fail(error_codes.NETWORK_EXCEPTION))
            self._in_flight.discard(broker_id)
            if not self._closing:
                self._send_next(broker_id)

    async def close(self) -> None:
        """Broker shutdown: whatever still waits is answered NETWORK_EXCEPTION."""
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for v in self.pending.take_all():
            _settle(v, v.fail(error_codes.NETWORK_EXCEPTION))
        await self.connections.close()


def _settle(v: Verification, errors: Errors) -> None:
    if not v.done.done():
        v.done.set_result(errors)
