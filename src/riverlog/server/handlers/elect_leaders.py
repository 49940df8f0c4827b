"""ElectLeaders: preferred (type 0, the only one of v0) or unclean (type 1) leader elections,
held by the controller (`server/controller/leader_rebalance.py`).

Answered per partition with Kafka's error codes. Only the controller holds elections; any
other broker answers NOT_CONTROLLER for every partition (clients then ask the controller). A
null partition list means every partition, and the answer then leaves out those that needed
no election, as Kafka's does. A partition elected is answered once this broker's metadata
shows its new leader — the controller's UpdateMetadata reached it — or with REQUEST_TIMED_OUT
after the request's timeout.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from riverlog.controller.leader_balance import ELECTION_TYPES, PREFERRED, Outcome
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.messages import ElectLeadersRequest, ElectLeadersResponse
from riverlog.server.controller.state_writes import NotControllerError
from riverlog.server.dispatch import RequestContext

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

POLL_S = 0.01


async def handle_elect_leaders(broker: Broker, ctx: RequestContext) -> ElectLeadersResponse:
    request = ctx.request.body
    assert isinstance(request, ElectLeadersRequest)
    election_type = request.election_type if ctx.version >= 1 else PREFERRED
    wanted: list[TopicPartition] | None = None
    if request.topic_partitions is not None:
        wanted = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    if election_type not in ELECTION_TYPES:
        invalid = Outcome(error_codes.INVALID_REQUEST, f"Unknown election type {election_type}")
        return _response(error_codes.INVALID_REQUEST, _all(broker, wanted, invalid))
    results = await _elect(broker, wanted, election_type, request.timeout_ms / 1000)
    if wanted is None:
        results = {
            tp: o for tp, o in results.items() if o.error is not error_codes.ELECTION_NOT_NEEDED
        }
    return _response(error_codes.NONE, results)


def _all(
    broker: Broker, wanted: list[TopicPartition] | None, outcome: Outcome
) -> dict[TopicPartition, Outcome]:
    """The same outcome for every partition asked for (None: every partition known here)."""
    if wanted is None:
        metadata = broker.metadata
        wanted = [(t, i) for t in metadata.topics() for i in metadata.partitions_of(t)]
    return dict.fromkeys(wanted, outcome)


async def _elect(
    broker: Broker, wanted: list[TopicPartition] | None, election_type: int, timeout_s: float
) -> dict[TopicPartition, Outcome]:
    if not broker.controller.active:
        return _all(broker, wanted, Outcome(error_codes.NOT_CONTROLLER))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    timed_out = Outcome(error_codes.REQUEST_TIMED_OUT)
    try:
        async with asyncio.timeout_at(deadline):
            results = await broker.controller.leader_rebalance.elect(wanted, election_type)
    except NotControllerError:
        return _all(broker, wanted, Outcome(error_codes.NOT_CONTROLLER))
    except TimeoutError:
        return _all(broker, wanted, timed_out)
    except Exception as e:  # the store failed the controller: it re-reads the cluster
        return _all(broker, wanted, Outcome(error_codes.UNKNOWN_SERVER_ERROR, str(e)))
    elected = {tp: o.leader for tp, o in results.items() if o.error is error_codes.NONE}
    while True:
        pending = [tp for tp, leader in elected.items() if broker.metadata.leader_of(*tp) != leader]
        if not pending:
            return results
        if loop.time() >= deadline:
            return {**results, **dict.fromkeys(pending, timed_out)}
        await asyncio.sleep(POLL_S)


def _response(
    error: error_codes.ErrorCode, results: dict[TopicPartition, Outcome]
) -> ElectLeadersResponse:
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for (topic, index), outcome in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            ElectLeadersResponse.PartitionResult(
                partition_id=index, error_code=outcome.error.code, error_message=outcome.message
            )
        )
    return ElectLeadersResponse(
        error_code=error.code,
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=t, partition_result=ps)
            for t, ps in by_topic.items()
        ],
    )
