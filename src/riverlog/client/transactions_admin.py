"""Admin requests about transactions (Kafka's Admin.listTransactions, describeTransactions,
describeProducers, abortTransaction), over a `Cluster`.

ListTransactions goes to every broker (each lists the transactional ids it coordinates);
DescribeTransactions to the id's coordinator (FindCoordinator, key type TRANSACTION);
DescribeProducers to each partition's leader; aborting a hanging transaction writes an abort
marker with WriteTxnMarkers to the partition's leader, as Kafka's admin does. Errors raise
`KafkaError` with the broker's code.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

from riverlog.client.cluster import Cluster
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.error_codes import KafkaError, for_code

TopicPartition = tuple[str, int]
TRANSACTION_KEY = 1
_RETRIABLE = {
    error_codes.COORDINATOR_NOT_AVAILABLE.code,
    error_codes.COORDINATOR_LOAD_IN_PROGRESS.code,
    error_codes.NOT_COORDINATOR.code,
}


def _check(code: int, message: str | None = None) -> None:
    if code != 0:
        raise KafkaError(for_code(code), message or for_code(code).message)


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: none
    partitions: list[TopicPartition]


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    txn_start_offset: int  # -1: no open transaction


class TransactionsAdmin:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def list_transactions(
        self, producer_ids: set[int] | None = None
    ) -> list[TransactionListing]:
        await self.cluster.refresh()
        request = m.ListTransactionsRequest(producer_id_filters=sorted(producer_ids or ()))
        out: list[TransactionListing] = []
        for node in sorted(self.cluster.brokers):
            response = await self.cluster.send(node, request)
            assert isinstance(response, m.ListTransactionsResponse)
            _check(response.error_code)
            out += [
                TransactionListing(t.transactional_id, node, t.producer_id, t.transaction_state)
                for t in response.transaction_states
            ]
        return out

    async def _coordinator(self, transactional_id: str) -> int:
        conn = await self.cluster.any_connection()
        version = conn.version_for(m.FindCoordinatorRequest)
        for attempt in range(50):
            if version >= 4:
                request = m.FindCoordinatorRequest(
                    key_type=TRANSACTION_KEY, coordinator_keys=[transactional_id]
                )
            else:
                request = m.FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_KEY)
            response = await conn.send(request, version)
            assert isinstance(response, m.FindCoordinatorResponse)
            if version >= 4:
                found = response.coordinators[0]
                code, message, node = found.error_code, found.error_message, found.node_id
            else:
                code, message, node = response.error_code, response.error_message, response.node_id
            if code == 0:
                return node
            if code not in _RETRIABLE or attempt == 49:
                _check(code, message)
            await asyncio.sleep(0.1)
        raise AssertionError("unreachable")

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        for attempt in range(50):
            node = await self._coordinator(transactional_id)
            response = await self.cluster.send(
                node, m.DescribeTransactionsRequest(transactional_ids=[transactional_id])
            )
            assert isinstance(response, m.DescribeTransactionsResponse)
            s = response.transaction_states[0]
            if s.error_code in _RETRIABLE and attempt < 49:
                await asyncio.sleep(0.1)
                continue
            _check(s.error_code)
            return TransactionDescription(
                node,
                transactional_id,
                s.producer_id,
                s.producer_epoch,
                s.transaction_state,
                s.transaction_timeout_ms,
                s.transaction_start_time_ms,
                [(t.topic, p) for t in s.topics for p in t.partitions],
            )
        raise AssertionError("unreachable")

    async def describe_producers(
        self, partitions: list[TopicPartition], broker_id: int | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        by_node: dict[int, list[TopicPartition]] = defaultdict(list)
        for topic, index in partitions:
            node = (
                broker_id if broker_id is not None else await self.cluster.leader_of(topic, index)
            )
            by_node[node].append((topic, index))
        out: dict[TopicPartition, list[ProducerState]] = {}
        for node, tps in by_node.items():
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, index in tps:
                by_topic[topic].append(index)
            request = m.DescribeProducersRequest(
                topics=[
                    m.DescribeProducersRequest.TopicRequest(name=t, partition_indexes=ps)
                    for t, ps in by_topic.items()
                ]
            )
            response = await self.cluster.send(node, request)
            assert isinstance(response, m.DescribeProducersResponse)
            for t in response.topics:
                for p in t.partitions:
                    _check(p.error_code, p.error_message)
                    out[(t.name, p.partition_index)] = [
                        ProducerState(
                            a.producer_id,
                            a.producer_epoch,
                            a.coordinator_epoch,
                            a.last_sequence,
                            a.last_timestamp,
                            a.current_txn_start_offset,
                        )
                        for a in p.active_producers
                    ]
        return out

    async def abort_transaction(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Write an abort marker for the producer's open transaction on `tp`."""
        node = await self.cluster.leader_of(*tp)
        request = m.WriteTxnMarkersRequest(
            markers=[
                m.WriteTxnMarkersRequest.WritableTxnMarker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=False,
                    coordinator_epoch=coordinator_epoch,
                    topics=[
                        m.WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                            name=tp[0], partition_indexes=[tp[1]]
                        )
                    ],
                )
            ]
        )
        response = await self.cluster.send(node, request)
        assert isinstance(response, m.WriteTxnMarkersResponse)
        for marker in response.markers:
            for t in marker.topics:
                for p in t.partitions:
                    _check(p.error_code)
