"""Transaction markers at the edge: sending them to partition leaders, writing them there.

Coordinator side (`MarkerSender`): an ended transaction's markers are grouped by the
current leader of each partition and sent as one WriteTxnMarkers request per broker (over
`server/broker_connections.py`, one connection per broker kept open). Partitions
whose leader is unknown, moved (NOT_LEADER_OR_FOLLOWER, ...), or whose broker could not be
reached are retried after `RETRY_S`, with leaders looked up again, until every partition
has the marker; a partition whose topic is gone (UNKNOWN_TOPIC_OR_PARTITION with no topic
in the metadata) needs none, nor one refused as TRANSACTION_COORDINATOR_FENCED (a newer
coordinator took the transaction over). `send` returns when every partition is done, or raises
`asyncio.CancelledError` when the coordinator gives up the transaction (it moved).

The markers of partitions this broker leads itself are written in-process
(`write_markers`, what the WriteTxnMarkers handler runs), not sent through its own socket:
the same appends and waits, without the request's encoding, a loopback round trip and
event-loop turns between an ended transaction and its CompleteCommit/CompleteAbort (a
client's next AddPartitionsToTxn meets CONCURRENT_TRANSACTIONS until then).

Leader side (`write_markers`): a marker is appended as a control batch by the leader
(`ReplicaManager.append_marker`), then the answer waits until the ISR has it
(`until_replicated`, through the replica manager's one rule for waiting writes). Markers on
`__consumer_offsets` complete the transaction's offset commits.

Everything runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from riverlog.coordinator.transaction import Markers, TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.server.broker_connections import BrokerConnections
from riverlog.server.group_coordinator import OFFSETS_TOPIC
from riverlog.server.replication.partition import HostedPartition

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)

RETRY_S = 0.1
REQUEST_TIMEOUT_S = 30.0
MARKER_WAIT_S = 30.0
_GONE = error_codes.UNKNOWN_TOPIC_OR_PARTITION.code
_FENCED = error_codes.TRANSACTION_COORDINATOR_FENCED.code
_DENIED = error_codes.CLUSTER_AUTHORIZATION_FAILED.code


async def until_replicated(
    broker: Broker, hosted: HostedPartition, end_offset: int, timeout_s: float
) -> ErrorCode:
    """NONE once the ISR has everything before `end_offset`, else why not: the replica
    manager's one rule for every write that waits for the ISR (`await_replication`)."""
    codes = broker.replicas.await_replication([(hosted, end_offset)], int(timeout_s * 1000))
    [code] = codes if isinstance(codes, list) else await codes
    return code


class MarkerSender:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.connections = BrokerConnections(broker, "txn-marker-sender")
        self._denied_by: set[int] = set()  # brokers whose refusal was logged

    async def close(self) -> None:
        await self.connections.close()

    async def send(self, markers: Markers, coordinator_epoch: int) -> None:
        """Write the markers to every partition's leader; return when all have them."""
        remaining = set(markers.partitions)
        while remaining:
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp in remaining:
                if self.broker.topics.get(tp[0]) is None:
                    continue  # deleted: no marker needed
                by_leader[self.broker.metadata.leader_of(*tp)].append(tp)
            remaining &= {tp for tps in by_leader.values() for tp in tps}
            calls = [
                self._send_to(leader, markers, coordinator_epoch, tps)
                for leader, tps in by_leader.items()
                if leader >= 0
            ]
            for done in await asyncio.gather(*calls):
                remaining -= done
            if remaining:
                await asyncio.sleep(RETRY_S)

    async def _send_to(
        self, broker_id: int, markers: Markers, coordinator_epoch: int, tps: list[TopicPartition]
    ) -> set[TopicPartition]:
        """The partitions this broker wrote the marker to (or that no longer exist)."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, index in tps:
            by_topic[topic].append(index)
        request = m.WriteTxnMarkersRequest(
            markers=[
                m.WriteTxnMarkersRequest.WritableTxnMarker(
                    producer_id=markers.producer_id,
                    producer_epoch=markers.producer_epoch,
                    transaction_result=markers.commit,
                    coordinator_epoch=coordinator_epoch,
                    topics=[
                        m.WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                            name=topic, partition_indexes=indexes
                        )
                        for topic, indexes in by_topic.items()
                    ],
                )
            ]
        )
        try:
            if broker_id == self.broker.broker_id:
                response: ApiMessage = await write_markers(self.broker, request)
            else:
                conn = await self.connections.get(broker_id)
                response = await conn.send(request, timeout_s=REQUEST_TIMEOUT_S)
        except (ConnectionError, OSError, TimeoutError, KafkaError) as e:
            log.info("transaction markers to broker %d: %r, retrying", broker_id, e)
            await self.connections.drop(broker_id)
            return set()
        assert isinstance(response, m.WriteTxnMarkersResponse)
        done: set[TopicPartition] = set()
        for result in response.markers:
            for answered in result.topics:
                name = answered.name
                for p in answered.partitions:
                    gone = p.error_code == _GONE and self.broker.topics.get(name) is None
                    if p.error_code == _FENCED:  # a newer coordinator owns the transaction
                        log.warning(
                            "marker for %s-%d: this coordinator is fenced", name, p.partition_index
                        )
                    if p.error_code in (0, _FENCED) or gone:
                        done.add((name, p.partition_index))
                    elif p.error_code == _DENIED and broker_id not in self._denied_by:
                        self._denied_by.add(broker_id)  # retried, but say it once: an operator
                        log.warning(  # must grant ClusterAction to the brokers' principal
                            "transaction markers refused by broker %d: "
                            "CLUSTER_AUTHORIZATION_FAILED (the inter-broker principal needs "
                            "ClusterAction on the cluster, or to be in super.users); retrying",
                            broker_id,
                        )
                    else:
                        log.debug(
                            "marker for %s-%d: error %d", name, p.partition_index, p.error_code
                        )
        return done


async def write_markers(
    broker: Broker, request: m.WriteTxnMarkersRequest
) -> m.WriteTxnMarkersResponse:
    """Append each marker as a control batch where this broker leads; answer once the ISR
    has them. Markers on `__consumer_offsets` complete the transaction's offset commits."""
    results: list[m.WriteTxnMarkersResponse.WritableTxnMarkerResult] = []
    waits: list[
        tuple[
            m.WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult,
            HostedPartition,
            int,
            int,
            bool,
        ]
    ] = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            answers = []
            for index in topic.partition_indexes:
                answer = m.WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult(
                    partition_index=index
                )
                try:
                    hosted, end = broker.replicas.append_marker(
                        topic.name,
                        index,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.transaction_result,
                        marker.coordinator_epoch,
                    )
                except KafkaError as e:
                    answer.error_code = e.code
                else:
                    waits.append(
                        (answer, hosted, end, marker.producer_id, marker.transaction_result)
                    )
                answers.append(answer)
            topics.append(
                m.WriteTxnMarkersResponse.WritableTxnMarkerTopicResult(
                    name=topic.name, partitions=answers
                )
            )
        results.append(
            m.WriteTxnMarkersResponse.WritableTxnMarkerResult(
                producer_id=marker.producer_id, topics=topics
            )
        )
    errors = await asyncio.gather(
        *(until_replicated(broker, hosted, end, MARKER_WAIT_S) for _, hosted, end, _, _ in waits)
    )
    for (answer, hosted, _, producer_id, commit), error in zip(waits, errors, strict=True):
        answer.error_code = error.code
        if error is error_codes.NONE and hosted.topic == OFFSETS_TOPIC:
            broker.txn_offsets.complete(producer_id, commit, hosted.index)
    return m.WriteTxnMarkersResponse(markers=results)
