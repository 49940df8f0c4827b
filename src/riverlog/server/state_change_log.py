"""The state-change log: what the controller decides and sends, what brokers receive and do.

Kafka's `state.change.logger`. Every line names one partition as `topic-partition`, so that
`riverlog state-change-log-merger` can merge the logs of all brokers in time order and filter
them by topic and partition. Lines written here:

- the controller (prefix `[Controller id=N epoch=E]`): each partition state it wrote
  ("Changed partition t-0 from OnlinePartition to OfflinePartition with state
  LeaderAndIsr(...)"), and each LeaderAndIsr, UpdateMetadata and StopReplica it sends, per
  partition and broker;
- every broker (prefix `[Broker id=N]`): each of those requests received, per partition, with
  what it did (became leader or follower, ignored a stale state, cached the metadata, stopped
  the replica), and the ISR changes it made as a leader.

This module only formats and logs, at TRACE, on the dedicated logger; where the lines go is
the process's decision (`riverlog server` adds a file handler writing `state-change.log`
into the broker's data directory with `LINE_FORMAT`, Kafka's log4j layout, rolled every hour
to `state-change.log.YYYY-MM-DD-HH` as Kafka's log4j configuration rolls it, keeping
`HOURS_KEPT` rolled files). Without a handler at TRACE nothing is formatted: every function
checks `enabled()` first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from riverlog.metadata.layout import PartitionState
from riverlog.model import NO_LEADER
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.messages import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)

LOGGER_NAME = "state.change.logger"
FILE_NAME = "state-change.log"
TRACE = 5
LINE_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"
"""Kafka's `[%d] %p %m (%c)%n`: `%(asctime)s` is `YYYY-MM-DD HH:MM:SS,mmm`, as log4j's."""
ROLLED_SUFFIX = "%Y-%m-%d-%H"
"""A rolled file's name is FILE_NAME + "." + this (log4j's DatePattern `'.'yyyy-MM-dd-HH`)."""
ROLLED_SUFFIX_PATTERN = r"^\d{4}-\d{2}-\d{2}-\d{2}$"
HOURS_KEPT = 7 * 24
"""Rolled files kept (a week of hours); Kafka's log4j keeps them all, which only grows."""

logging.addLevelName(TRACE, "TRACE")
logger = logging.getLogger(LOGGER_NAME)


def enabled() -> bool:
    return logger.isEnabledFor(TRACE)


def _ints(values: Iterable[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def partition_name(topic: str, index: int) -> str:
    return f"{topic}-{index}"


def partition_state_name(state: PartitionState | None) -> str:
    """Kafka's partition states as a written leader/ISR state shows them."""
    if state is None:
        return "NewPartition"
    return "OfflinePartition" if state.leader == NO_LEADER else "OnlinePartition"


def leader_and_isr(state: PartitionState, zk_version: int) -> str:
    return (
        f"LeaderAndIsr(leader={state.leader}, leaderEpoch={state.leader_epoch}, "
        f"isr={_ints(state.isr)}, zkVersion={zk_version})"
    )


def leader_and_isr_partition(topic: str, p: LeaderAndIsrRequest.LeaderAndIsrPartitionState) -> str:
    return (
        f"LeaderAndIsrPartitionState(topicName='{topic}', "
        f"partitionIndex={p.partition_index}, controllerEpoch={p.controller_epoch}, "
        f"leader={p.leader}, leaderEpoch={p.leader_epoch}, isr={_ints(p.isr)}, "
        f"zkVersion={p.partition_epoch}, replicas={_ints(p.replicas)}, "
        f"addingReplicas={_ints(p.adding_replicas)}, "
        f"removingReplicas={_ints(p.removing_replicas)}, "
        f"isNew={str(p.is_new).lower()})"
    )


def update_metadata_partition(
    topic: str, p: UpdateMetadataRequest.UpdateMetadataPartitionState
) -> str:
    return (
        f"UpdateMetadataPartitionState(topicName='{topic}', "
        f"partitionIndex={p.partition_index}, controllerEpoch={p.controller_epoch}, "
        f"leader={p.leader}, leaderEpoch={p.leader_epoch}, isr={_ints(p.isr)}, "
        f"zkVersion={p.zk_version}, replicas={_ints(p.replicas)}, "
        f"offlineReplicas={_ints(p.offline_replicas)})"
    )


def leader_and_isr_states(
    request: LeaderAndIsrRequest,
) -> list[tuple[str, LeaderAndIsrRequest.LeaderAndIsrPartitionState]]:
    """The request's partition states with their topics (any version)."""
    out = [(p.topic_name, p) for p in request.ungrouped_partition_states]
    out += [(t.topic_name, p) for t in request.topic_states for p in t.partition_states]
    return out


def update_metadata_states(
    request: UpdateMetadataRequest,
) -> list[tuple[str, UpdateMetadataRequest.UpdateMetadataPartitionState]]:
    out = [(p.topic_name, p) for p in request.ungrouped_partition_states]
    out += [(t.topic_name, p) for t in request.topic_states for p in t.partition_states]
    return out


# --- the controller ------------------------------------------------------------------------


def _controller(controller_id: int, epoch: int) -> str:
    return f"[Controller id={controller_id} epoch={epoch}]"


def partition_changed(
    controller_id: int,
    epoch: int,
    tp: tuple[str, int],
    before: PartitionState | None,
    after: PartitionState,
    zk_version: int,
) -> None:
    """The controller wrote a partition's leader and ISR."""
    if enabled():
        logger.log(
            TRACE,
            "%s Changed partition %s from %s to %s with state %s",
            _controller(controller_id, epoch),
            partition_name(*tp),
            partition_state_name(before),
            partition_state_name(after),
            leader_and_isr(after, zk_version),
        )


def request_sent(broker_id: int, request: ApiMessage) -> None:
    """The controller queued a request for `broker_id`: one line per partition it names."""
    if not enabled():
        return
    if isinstance(request, LeaderAndIsrRequest):
        prefix = _controller(request.controller_id, request.controller_epoch)
        for topic, p in leader_and_isr_states(request):
            role = "become-leader" if p.leader == broker_id else "become-follower"
            logger.log(
                TRACE,
                "%s Sending %s LeaderAndIsr request %s to broker %d for partition %s",
                prefix,
                role,
                leader_and_isr_partition(topic, p),
                broker_id,
                partition_name(topic, p.partition_index),
            )
    elif isinstance(request, UpdateMetadataRequest):
        prefix = _controller(request.controller_id, request.controller_epoch)
        states = update_metadata_states(request)
        logger.log(
            TRACE,
            "%s Sending UpdateMetadata request to broker %d for %d partitions and live brokers %s",
            prefix,
            broker_id,
            len(states),
            _ints(b.id for b in request.live_brokers),
        )
        for topic, u in states:
            logger.log(
                TRACE,
                "%s Sending UpdateMetadata request %s to broker %d for partition %s",
                prefix,
                update_metadata_partition(topic, u),
                broker_id,
                partition_name(topic, u.partition_index),
            )
    elif isinstance(request, StopReplicaRequest):
        prefix = _controller(request.controller_id, request.controller_epoch)
        for t in request.topic_states:
            for s in t.partition_states:
                logger.log(
                    TRACE,
                    "%s Sending StopReplica request (delete=%s, leaderEpoch=%d) "
                    "to broker %d for partition %s",
                    prefix,
                    str(s.delete_partition).lower(),
                    s.leader_epoch,
                    broker_id,
                    partition_name(t.topic_name, s.partition_index),
                )


# --- brokers -------------------------------------------------------------------------------


def _broker(broker_id: int) -> str:
    return f"[Broker id={broker_id}]"


def leader_and_isr_received(
    broker_id: int,
    request: LeaderAndIsrRequest,
    correlation_id: int,
    outcomes: dict[tuple[str, int], str],
) -> None:
    """A LeaderAndIsr request and, per partition, what this broker made of it."""
    if not enabled():
        return
    prefix = _broker(broker_id)
    source = (
        f"correlation id {correlation_id} from controller {request.controller_id} "
        f"epoch {request.controller_epoch}"
    )
    for topic, p in leader_and_isr_states(request):
        tp = (topic, p.partition_index)
        name = partition_name(*tp)
        logger.log(
            TRACE,
            "%s Received LeaderAndIsr request %s %s for partition %s",
            prefix,
            leader_and_isr_partition(topic, p),
            source,
            name,
        )
        outcome = outcomes.get(tp)
        if outcome is not None:
            logger.log(
                TRACE,
                "%s Handled LeaderAndIsr request %s for partition %s: %s",
                prefix,
                source,
                name,
                outcome,
            )


def update_metadata_received(
    broker_id: int, request: UpdateMetadataRequest, correlation_id: int, stale: bool
) -> None:
    """An UpdateMetadata request: each partition state cached (or refused as stale)."""
    if not enabled():
        return
    prefix = _broker(broker_id)
    source = (
        f"UpdateMetadata request sent by controller {request.controller_id} "
        f"epoch {request.controller_epoch} with correlation id {correlation_id}"
    )
    verb = "Ignored stale" if stale else "Cached"
    for topic, p in update_metadata_states(request):
        logger.log(
            TRACE,
            "%s %s leader info %s for partition %s in response to %s",
            prefix,
            verb,
            update_metadata_partition(topic, p),
            partition_name(topic, p.partition_index),
            source,
        )


def stop_replica_received(
    broker_id: int,
    controller_id: int,
    controller_epoch: int,
    correlation_id: int,
    partitions: Sequence[tuple[tuple[str, int], bool]],
    errors: dict[tuple[str, int], str],
) -> None:
    """A StopReplica request: each partition stopped (and deleted), or why not."""
    if not enabled():
        return
    prefix = _broker(broker_id)
    for tp, delete in partitions:
        error = errors.get(tp, "NONE")
        logger.log(
            TRACE,
            "%s Handled StopReplica request correlation id %d from controller %d "
            "epoch %d for partition %s (delete=%s) with error %s",
            prefix,
            correlation_id,
            controller_id,
            controller_epoch,
            partition_name(*tp),
            str(delete).lower(),
            error,
        )


def isr_changed(
    broker_id: int,
    tp: tuple[str, int],
    before: Sequence[int],
    after: Sequence[int],
    leader_epoch: int,
    zk_version: int,
) -> None:
    """This broker, as leader, wrote a new ISR for a partition."""
    if enabled():
        verb = "Shrunk" if len(after) < len(before) else "Expanded"
        logger.log(
            TRACE,
            "%s %s ISR of partition %s from %s to %s at leader epoch %d (zkVersion %d)",
            _broker(broker_id),
            verb,
            partition_name(*tp),
            _ints(before),
            _ints(after),
            leader_epoch,
            zk_version,
        )
