"""Partition reassignment requests: AlterPartitionReassignments, ListPartitionReassignments.

ZooKeeper-era design: the pending moves live in `/admin/reassign_partitions` (Kafka's JSON)
and the controller carries them out (`server/controller/reassignment_executor.py`), so any
broker can answer — Alter validates each partition and merges it into the node with a
version-checked write (retried when another writer or the controller changed it meanwhile);
List reads the node and the topics' znodes. Clients send these to the controller, which is
one such broker.

Per partition: replicas → a new target (it replaces a pending one); null replicas → cancel,
a move back to the replicas the partition had before (NO_REASSIGNMENT_IN_PROGRESS when none
runs). Unknown partitions are UNKNOWN_TOPIC_OR_PARTITION, bad replica lists (empty,
duplicates, unregistered brokers) INVALID_REPLICA_ASSIGNMENT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from riverlog.controller.reassignment import Assignment, invalid_target, moving_to
from riverlog.metadata import layout
from riverlog.metadata.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode
from riverlog.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from riverlog.server.dispatch import RequestContext

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

WRITE_ATTEMPTS = 10


def _pending(store: MetadataStore) -> tuple[dict[TopicPartition, list[int]], int | None]:
    """The targets in `/admin/reassign_partitions` and the node's version (None: no node)."""
    try:
        node = store.get(layout.REASSIGN_PARTITIONS)
    except NoNodeError:
        return {}, None
    try:
        return layout.reassignments_from_json(node.data), node.version
    except ValueError:
        return {}, node.version  # unreadable: the controller ignores it, a write replaces it


def _assignments(store: MetadataStore, topic: str) -> dict[int, Assignment] | None:
    """A topic's partitions as its znode holds them (None: no such topic, or being deleted)."""
    try:
        if store.exists(f"{layout.DELETE_TOPICS}/{topic}"):
            return None
        stored = layout.TopicAssignment.from_json(store.get(layout.topic_path(topic)).data)
    except NoNodeError:
        return None
    return {
        p: Assignment(
            list(r),
            list(stored.adding_replicas.get(p, [])),
            list(stored.removing_replicas.get(p, [])),
        )
        for p, r in stored.partitions.items()
    }


def _write(
    store: MetadataStore, targets: dict[TopicPartition, list[int]], version: int | None
) -> None:
    if version is None:
        store.create(layout.REASSIGN_PARTITIONS, layout.reassignments_json(targets))
    elif targets:
        store.set(
            layout.REASSIGN_PARTITIONS, layout.reassignments_json(targets), expected_version=version
        )
    else:
        store.delete(layout.REASSIGN_PARTITIONS, expected_version=version)


Outcome = tuple[ErrorCode, str | None]


def _merge(
    store: MetadataStore, request: AlterPartitionReassignmentsRequest
) -> dict[TopicPartition, Outcome]:
    brokers = {int(c) for c in store.children(layout.BROKER_IDS)}
    topics = {t.name: _assignments(store, t.name) for t in request.topics}
    outcomes: dict[TopicPartition, Outcome] = {}
    for _ in range(WRITE_ATTEMPTS):
        pending, version = _pending(store)
        targets = dict(pending)
        for topic in request.topics:
            partitions = topics[topic.name]
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                current = None if partitions is None else partitions.get(p.partition_index)
                outcomes[tp] = (error_codes.NONE, None)
                if current is None:
                    outcomes[tp] = (
                        error_codes.UNKNOWN_TOPIC_OR_PARTITION,
                        f"Unknown partition {topic.name}-{p.partition_index}.",
                    )
                elif p.replicas is None:  # cancel: back to the original replicas
                    if current.moving:
                        targets[tp] = current.origin
                    elif targets.pop(tp, None) is None:
                        outcomes[tp] = (error_codes.NO_REASSIGNMENT_IN_PROGRESS, None)
                else:
                    problem = invalid_target(p.replicas, brokers)
                    if problem is None:
                        targets[tp] = list(p.replicas)
                    else:
                        outcomes[tp] = (error_codes.INVALID_REPLICA_ASSIGNMENT, problem)
        if (targets == pending and version is not None) or (not targets and version is None):
            return outcomes
        try:
            _write(store, targets, version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # the controller (or another writer) changed it: merge again
        return outcomes
    raise RuntimeError(f"{layout.REASSIGN_PARTITIONS} kept changing")


def handle_alter_partition_reassignments(
    broker: Broker, ctx: RequestContext
) -> AlterPartitionReassignmentsResponse:
    request = ctx.request.body
    assert isinstance(request, AlterPartitionReassignmentsRequest)
    outcomes = _merge(broker.store, request)
    Partition = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse
    return AlterPartitionReassignmentsResponse(
        error_code=0,
        error_message=None,
        responses=[
            AlterPartitionReassignmentsResponse.ReassignableTopicResponse(
                name=t.name,
                partitions=[
                    Partition(
                        partition_index=p.partition_index,
                        error_code=outcomes[(t.name, p.partition_index)][0].code,
                        error_message=outcomes[(t.name, p.partition_index)][1],
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def handle_list_partition_reassignments(
    broker: Broker, ctx: RequestContext
) -> ListPartitionReassignmentsResponse:
    """The pending moves (of the requested partitions): replicas as the move has them (or
    will, when the controller has not started it yet), and those being added and removed."""
    request = ctx.request.body
    assert isinstance(request, ListPartitionReassignmentsRequest)
    store = broker.store
    pending, _ = _pending(store)
    if request.topics is not None:
        wanted = {(t.name, p) for t in request.topics for p in t.partition_indexes}
        pending = {tp: r for tp, r in pending.items() if tp in wanted}
    Ongoing = ListPartitionReassignmentsResponse.OngoingPartitionReassignment
    by_topic: dict[str, list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]] = {}
    topics: dict[str, dict[int, Assignment] | None] = {}
    for (topic, index), target in sorted(pending.items()):
        if topic not in topics:
            topics[topic] = _assignments(store, topic)
        current = (topics[topic] or {}).get(index)
        if current is None:
            continue
        shown = current if current.moving else moving_to(current, target)
        if not shown.moving and shown.replicas == current.replicas:
            continue  # nothing to move
        by_topic.setdefault(topic, []).append(
            Ongoing(
                partition_index=index,
                replicas=shown.replicas,
                adding_replicas=shown.adding,
                removing_replicas=shown.removing,
            )
        )
    return ListPartitionReassignmentsResponse(
        error_code=0,
        error_message=None,
        topics=[
            ListPartitionReassignmentsResponse.OngoingTopicReassignment(name=t, partitions=ps)
            for t, ps in sorted(by_topic.items())
        ],
    )
