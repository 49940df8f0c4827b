"""The controller's writes of partition states to the store
(`/brokers/topics/T/partitions/N/state`).

Invariants: every write is checked against the znode version the controller last read (a
partition without a state node gets one created, with its parent nodes); partitions are
written in multi-ops of `WRITE_BATCH`, each also checking `/controller_epoch`'s version, so
a deposed controller's writes fail; a batch the store refused is written again one partition
at a time once the controller epoch is confirmed unchanged (`NotControllerError` otherwise);
a state the store accepted is kept in the controller's context and told to the state-change
log; partitions whose write conflicted (a leader changed their ISR meanwhile) are returned,
for the caller to re-read and decide again (`ControllerService._decide`).
"""

from __future__ import annotations

from riverlog.controller.context import ControllerContext
from riverlog.metadata import layout
from riverlog.metadata.store import (
    BadVersionError,
    CheckOp,
    CreateOp,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
)
from riverlog.model import TopicPartition
from riverlog.server import state_change_log

WRITE_BATCH = 500


class NotControllerError(Exception):
    """The controller epoch moved on: another broker is the controller now."""


def write_states(
    store: MetadataStore,
    broker_id: int,
    ctx: ControllerContext,
    epoch_version: int,
    states: dict[TopicPartition, layout.PartitionState],
) -> list[TopicPartition]:
    """Write partition states in batches; the partitions whose write conflicted."""
    items = sorted(states.items())
    conflicts: list[TopicPartition] = []
    nodes: dict[str, set[int] | None] = {}  # topic → its partition nodes (None: none yet)
    for start in range(0, len(items), WRITE_BATCH):
        batch = items[start : start + WRITE_BATCH]
        ops: list[Op] = [CheckOp(layout.CONTROLLER_EPOCH, epoch_version)]
        for (topic, index), state in batch:
            path = layout.partition_state_path(topic, index)
            if ctx.version((topic, index)) < 0:
                parent = f"{layout.topic_path(topic)}/partitions"
                if topic not in nodes:
                    nodes[topic] = partition_nodes(store, topic)
                existing = nodes[topic]
                if existing is None:
                    ops.append(CreateOp(parent, b""))
                    existing = nodes[topic] = set()
                if index not in existing:
                    ops.append(CreateOp(f"{parent}/{index}", b""))
                    existing.add(index)
                ops.append(CreateOp(path, state.to_json()))
            else:
                ops.append(SetOp(path, state.to_json(), ctx.version((topic, index))))
        try:
            store.multi(ops)
        except (BadVersionError, NodeExistsError, NoNodeError):
            conflicts += _write_one_by_one(store, broker_id, ctx, epoch_version, batch)
            continue
        for tp, state in batch:
            _written(broker_id, ctx, tp, state)
    return conflicts


def _write_one_by_one(
    store: MetadataStore,
    broker_id: int,
    ctx: ControllerContext,
    epoch_version: int,
    batch: list[tuple[TopicPartition, layout.PartitionState]],
) -> list[TopicPartition]:
    check_epoch(store, epoch_version)
    conflicts = []
    for tp, state in batch:
        path = layout.partition_state_path(*tp)
        try:
            if ctx.version(tp) < 0:
                store.create(path, state.to_json())
            else:
                store.set(path, state.to_json(), expected_version=ctx.version(tp))
        except (BadVersionError, NodeExistsError, NoNodeError):
            conflicts.append(tp)
            continue
        _written(broker_id, ctx, tp, state)
    return conflicts


def _written(
    broker_id: int, ctx: ControllerContext, tp: TopicPartition, state: layout.PartitionState
) -> None:
    """The store accepted `state`: remember it, and say so in the state-change log."""
    before = ctx.state(tp)
    ctx.written(tp, state)
    state_change_log.partition_changed(broker_id, ctx.epoch, tp, before, state, ctx.version(tp))


def check_epoch(store: MetadataStore, epoch_version: int) -> None:
    """NotControllerError unless `/controller_epoch` is still at `epoch_version`."""
    try:
        version = store.get(layout.CONTROLLER_EPOCH).version
    except NoNodeError:
        version = -1
    if version != epoch_version:
        raise NotControllerError


def partition_nodes(store: MetadataStore, topic: str) -> set[int] | None:
    """The partitions with a node under `/brokers/topics/T/partitions` (None: no such
    node yet)."""
    try:
        return {int(p) for p in store.children(f"{layout.topic_path(topic)}/partitions")}
    except NoNodeError:
        return None
