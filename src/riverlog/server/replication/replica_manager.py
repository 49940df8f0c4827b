"""The partitions this broker hosts and every replication rule applied to them at the edge:
appends with `acks`, the wait for the ISR, the read for a fetch, followers' progress and the
ISR, and becoming leader or follower.

Owns one `HostedPartition` (`replication/partition.py`, the pure rules) per local replica,
the follower fetchers (`replication/replica_fetcher.py`), the leader's replication throttle,
and the two purgatories. Handlers and coordinators call it; none of them looks at a
partition's leader, epoch or ISR themselves.

- `append` (produce, offset commits, group records): only on the leader; acks=all first
  checks `min.insync.replicas` (NOT_ENOUGH_REPLICAS); client appends to internal topics are
  refused. `await_replication` then waits in the produce purgatory until each write is in
  the ISR — one rule, `HostedPartition.replication_status`, for every waiter: the answer
  changes only when the high watermark passes the write or this broker stops leading the
  partition (a leader epoch bump alone, e.g. for an ISR change, changes nothing).
- The replica a fetch reads (`fetch_target`): only the leader answers (any replica for the
  debugging consumer, followers for consumers that may read from them), fenced by the
  request's leader epoch. How far and how much it reads, throttled, and the replica to read
  from instead: `fetch_reader` (`replication/fetch_reader.py`).
- LeaderAndIsr (`apply_leader_and_isr`): become leader or follower, start and stop the
  fetchers, and tell the listeners (the group coordinator) which partitions they gained or
  lost; StopReplica likewise. A leader changes the ISR itself — followers that caught up
  join, followers lagging more than `replica.lag.time.max.ms` leave — by a version-checked
  write of the partition's state znode plus an ISR change notification for the controller;
  a write refused for its version that finds the znode holding exactly what it wrote was
  its own earlier attempt, whose answer the connection lost, and counts as done.
  Each step goes to the state-change log.

Failed log directories (KIP-112): an I/O error from a log (`OSError` out of an append, a
read, a follower's write, or the log manager's housekeeping) takes its directory offline
(`log_dir_failed`): its partitions stop being hosted, answer KAFKA_STORAGE_ERROR from then
on (produce, fetch, LeaderAndIsr), and the controller is told through
`/log_dir_event_notification`; partitions in other directories carry on. AlterReplicaLogDirs
(`alter_log_dir`) moves a hosted replica's log to another directory.

Whoever moves a partition's end offset, high watermark or role wakes both purgatories for it.
Everything here runs on the event loop thread (storage calls are short, bounded file I/O).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from riverlog.clock import Clock
from riverlog.metadata import layout
from riverlog.metadata.store import (
    BadVersionError,
    MetadataStore,
    NoNodeError,
    StoreUnavailableError,
)
from riverlog.model import DEBUGGING_CONSUMER_ID, TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.messages import LeaderAndIsrRequest
from riverlog.server import state_change_log
from riverlog.server.replication.fetch_reader import FetchReader
from riverlog.server.replication.partition import HostedPartition
from riverlog.server.replication.purgatory import Purgatory
from riverlog.server.replication.replica_fetcher import ReplicaFetchers
from riverlog.server.replication.throttle import ReplicationQuota
from riverlog.server.topics import refuse_client_append
from riverlog.storage.log import AppendResult
from riverlog.storage.manager import LogManager
from riverlog.storage.producer_state import VerificationGuard

log = logging.getLogger(__name__)

__all__ = ["HostedPartition", "LeadershipListener", "ReplicaManager", "RoleChange"]


class LeadershipListener(Protocol):
    """Told when this broker starts or stops leading partitions of one topic (the group
    coordinator for `__consumer_offsets`)."""

    def became_leader(self, index: int) -> None: ...

    def stopped_leading(self, index: int) -> None: ...


@dataclass(frozen=True, slots=True)
class RoleChange:
    """Partitions that became leaders or followers in one LeaderAndIsr."""

    leaders: list[HostedPartition]
    followers: list[tuple[HostedPartition, tuple[str, int]]]
    """Each with its leader's (host, port)."""


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        logs: LogManager,
        store: MetadataStore,
        fetchers: ReplicaFetchers,
        leader_throttle: ReplicationQuota,
        clock: Clock,
        *,
        replica_selector: str = "",
        rack_of: Callable[[int], str | None] = lambda _broker_id: None,
    ) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.store = store
        self.fetchers = fetchers
        self.clock = clock
        self.fetch_reader = FetchReader(
            broker_id,
            leader_throttle,
            clock,
            self.storage_error,
            replica_selector=replica_selector,
            rack_of=rack_of,
        )
        """What a fetch reads from the partition `fetch_target` chose, throttled."""
        self.fetch_purgatory = Purgatory()
        self.produce_purgatory = Purgatory()
        self._partitions: dict[TopicPartition, HostedPartition] = {}
        self._listeners: dict[str, LeadershipListener] = {}
        self.controller_epoch = 0
        self._isr_checked_s: float | None = None
        self.isr_shrinks = 0
        self.isr_expands = 0
        """ISR changes this broker wrote as leader, one per partition changed (Kafka's
        IsrShrinksPerSec / IsrExpandsPerSec counts; the metrics endpoint reads them)."""
        self.offline: set[TopicPartition] = set()
        """Partitions whose log directory failed (KAFKA_STORAGE_ERROR)."""
        self._announced_dirs: set[Path] = set()
        fetchers.on_storage_error = self.storage_error
        self.on_all_dirs_failed: Callable[[], object] | None = None
        """Told (once) when no log directory is online any more (the broker stops, as
        Kafka's)."""
        self._all_dirs_failed = False

    def __iter__(self) -> Iterator[HostedPartition]:
        return iter(list(self._partitions.values()))

    def add_listener(self, topic: str, listener: LeadershipListener) -> None:
        self._listeners[topic] = listener

    def get(self, topic: str, index: int) -> HostedPartition:
        """The partition, or UNKNOWN_TOPIC_OR_PARTITION."""
        hosted = self._partitions.get((topic, index))
        if hosted is None:
            if (topic, index) in self.offline:
                raise KafkaError(error_codes.KAFKA_STORAGE_ERROR)
            raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
        return hosted

    def leader(self, topic: str, index: int) -> HostedPartition:
        """The partition if this broker leads it; else UNKNOWN_TOPIC_OR_PARTITION or
        NOT_LEADER_OR_FOLLOWER."""
        hosted = self.get(topic, index)
        if not hosted.is_leader:
            raise KafkaError(error_codes.NOT_LEADER_OR_FOLLOWER)
        return hosted

    def leads_all(self, keys: Iterable[TopicPartition]) -> bool:
        return all((h := self._partitions.get(key)) is not None and h.is_leader for key in keys)

    def _wake(self, key: TopicPartition) -> None:
        self.fetch_purgatory.check(key)
        self.produce_purgatory.check(key)

    # --- appends and the wait for the ISR ----------------------------------------------

    def append(
        self,
        topic: str,
        index: int,
        records: memoryview,
        *,
        acks: int,
        internal: bool = False,
        verification: VerificationGuard | None = None,
    ) -> tuple[HostedPartition, AppendResult]:
        """Append a record set on the leader. `internal`: a broker component's own write
        (Kafka's coordinator origin), allowed on internal topics — clients' writes there are
        refused, as Kafka does — and spared the checks made for clients' batches.
        `verification`: KIP-890's guard (`HostedPartition.start_transaction_verification`),
        None when verification is off."""
        if not internal:
            refuse_client_append(topic)
        hosted = self.leader(topic, index)
        if acks == -1:
            hosted.check_min_isr()
        try:
            result = hosted.append_as_leader(
                records, from_client=not internal, verification=verification
            )
        except OSError as e:
            raise self.storage_error(hosted, e) from e
        if not result.duplicate:
            self.fetch_purgatory.check(hosted.key)
        return hosted, result

    def append_marker(
        self,
        topic: str,
        index: int,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
    ) -> tuple[HostedPartition, int]:
        """WriteTxnMarkers: a transaction's commit or abort marker as a control batch on the
        leader; (partition, offset after it), to wait on with `await_replication`."""
        hosted = self.leader(topic, index)
        try:
            end = hosted.append_marker_as_leader(
                producer_id, producer_epoch, committed, coordinator_epoch
            )
        except OSError as e:
            raise self.storage_error(hosted, e) from e
        self.fetch_purgatory.check(hosted.key)
        return hosted, end

    def await_replication(
        self, writes: Sequence[tuple[HostedPartition, int]], timeout_ms: int
    ) -> list[ErrorCode] | asyncio.Future[list[ErrorCode]]:
        """For each (partition, offset after the write): NONE once the ISR has it, or why
        not (`HostedPartition.replication_status`; REQUEST_TIMED_OUT after `timeout_ms`) —
        at once when every write is settled already (a leader alone in its ISR), else as a
        future completed from the produce purgatory."""
        if len(writes) == 1:  # one partition (the common request): settled now, no closures
            hosted, required = writes[0]
            if self._partitions.get(hosted.key) is not hosted:
                return [error_codes.NOT_LEADER_OR_FOLLOWER]
            code = hosted.replication_status(required)
            if code is not None:
                return [code]
        outcome: list[ErrorCode | None] = [None] * len(writes)

        def status(hosted: HostedPartition, required: int) -> ErrorCode | None:
            if self._partitions.get(hosted.key) is not hosted:  # stopped hosting it since
                return error_codes.NOT_LEADER_OR_FOLLOWER
            return hosted.replication_status(required)

        def try_complete() -> list[ErrorCode] | None:
            for i, (hosted, required) in enumerate(writes):
                if outcome[i] is None:
                    outcome[i] = status(hosted, required)
            if any(code is None for code in outcome):
                return None
            return [code for code in outcome if code is not None]

        def expire() -> list[ErrorCode]:
            return [error_codes.REQUEST_TIMED_OUT if code is None else code for code in outcome]

        settled = try_complete()
        if settled is not None:
            return settled
        keys = list({hosted.key: None for hosted, _ in writes})
        return self.produce_purgatory.delay(keys, timeout_ms / 1000, try_complete, expire)

    # --- reads for fetches -------------------------------------------------------------

    def fetch_target(
        self,
        key: TopicPartition,
        current_leader_epoch: int,
        replica_id: int,
        *,
        followers_serve: bool = False,
    ) -> HostedPartition | ErrorCode:
        """The replica a fetch reads, or why not. The leader answers; so does a follower
        for the debugging consumer, and for consumers that may read from followers
        (`followers_serve`: Fetch v11+, KIP-392), up to its own high watermark."""
        hosted = self._partitions.get(key)
        if hosted is None:
            if key in self.offline:
                return error_codes.KAFKA_STORAGE_ERROR
            return error_codes.UNKNOWN_TOPIC_OR_PARTITION
        may_read_follower = replica_id == DEBUGGING_CONSUMER_ID or (
            followers_serve and replica_id < 0
        )
        if not hosted.is_leader and not may_read_follower:
            return error_codes.NOT_LEADER_OR_FOLLOWER
        error = hosted.check_leader_epoch(current_leader_epoch)
        return hosted if error is error_codes.NONE else error

    # --- leaders: followers' progress and the ISR --------------------------------------

    def follower_fetched(
        self, replica_id: int, positions: Iterable[tuple[TopicPartition, int]]
    ) -> None:
        """A follower's fetch offsets are its log end offsets: the leader's view of its
        progress, which may move high watermarks and grow ISRs."""
        now = self.clock.wall_ms()
        for key, offset in positions:
            hosted = self._partitions.get(key)
            if hosted is None or not hosted.is_leader:
                continue
            outcome = hosted.follower_fetched(replica_id, offset, now)
            if outcome.high_watermark_moved:
                self._wake(key)
            if outcome.isr_expansion is not None:
                self._change_isr(hosted, outcome.isr_expansion)

    def shrink_isrs(self, max_lag_ms: int) -> None:
        """Drop lagging followers from the ISRs this broker leads (run periodically, more
        often than `max_lag_ms`). A broker that did not run itself for longer than that —
        frozen, paused, starved — cannot tell lagging followers from fetches it has not
        read yet: it skips that round, and judges at the next one."""
        now = self.clock.wall_ms()
        ran_at, self._isr_checked_s = self._isr_checked_s, self.clock.monotonic_s()
        if ran_at is not None and (self._isr_checked_s - ran_at) * 1000 > max_lag_ms:
            log.info(
                "ISR check skipped: broker %d did not run for %.1f s",
                self.broker_id,
                self._isr_checked_s - ran_at,
            )
            return
        for hosted in self:
            shrunk = hosted.isr_to_shrink(now, max_lag_ms)
            if shrunk is not None:
                log.info(
                    "shrinking ISR of %s-%d from %s to %s",
                    hosted.topic,
                    hosted.index,
                    hosted.isr,
                    shrunk,
                )
                self._change_isr(hosted, shrunk)

    def _change_isr(self, hosted: HostedPartition, isr: list[int]) -> None:
        state = layout.PartitionState(
            self.broker_id, hosted.leader_epoch, isr, self.controller_epoch
        )
        path = layout.partition_state_path(hosted.topic, hosted.index)
        hosted.pending_isr = isr
        try:
            version = self.store.set(path, state.to_json(), expected_version=hosted.zk_version)
        except (BadVersionError, NoNodeError):
            written = self._written_before(path, state)
            if written is None:
                log.info("ISR of %s-%d not changed: its state moved on", hosted.topic, hosted.index)
                return  # pending stays set: the controller's next LeaderAndIsr resets it
            version = written
        except StoreUnavailableError as e:
            log.warning("ISR of %s-%d not changed for now: %s", hosted.topic, hosted.index, e)
            hosted.pending_isr = None  # maybe written: the next check tries again, and sees
            return
        state_change_log.isr_changed(
            self.broker_id, hosted.key, hosted.isr, isr, hosted.leader_epoch, version
        )
        if len(isr) < len(hosted.isr):
            self.isr_shrinks += 1
        elif len(isr) > len(hosted.isr):
            self.isr_expands += 1
        hosted.isr_written(isr, version)
        self._wake(hosted.key)  # the HW may have moved, or the ISR fell below the minimum
        note = json.dumps(
            {"version": 1, "partitions": [{"topic": hosted.topic, "partition": hosted.index}]}
        ).encode()
        name = f"isr_change_{self.clock.wall_ns()}_{self.broker_id}"
        try:
            self.store.create(f"{layout.ISR_CHANGE_NOTIFICATION}/{name}", note)
        except StoreUnavailableError as e:  # the controller reads the state at its next resync
            log.warning("ISR change of %s-%d not announced: %s", hosted.topic, hosted.index, e)

    def _written_before(self, path: str, state: layout.PartitionState) -> int | None:
        """The state znode's version if it already holds exactly `state` — this leader's
        earlier write whose answer was lost with the connection (Kafka's
        checkLeaderAndIsrZkData) — else None."""
        try:
            node = self.store.get(path)
        except (NoNodeError, StoreUnavailableError):
            return None
        try:
            stored = layout.PartitionState.from_json(node.data)
        except (ValueError, KeyError, TypeError):
            return None
        return node.version if stored == state else None

    # --- the controller's requests ------------------------------------------------------

    def _open(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        config: dict[str, str],
        *,
        is_new: bool = True,
    ) -> HostedPartition:
        existing = self._partitions.get((topic, index))
        if existing is not None:
            return existing
        plog = self.logs.get_or_create(topic, index, config, is_new=is_new)
        hosted = HostedPartition(topic, index, topic_id, plog, self.broker_id)
        self._partitions[(topic, index)] = hosted
        return hosted

    def apply_leader_and_isr(
        self,
        request: LeaderAndIsrRequest,
        configs: Callable[[str], dict[str, str]],
        correlation_id: int,
    ) -> dict[TopicPartition, ErrorCode]:
        """Become leader or follower of each partition the request names for this broker:
        leaders stop fetching, followers fetch from their leader, listeners learn what they
        lead now. A request from an older controller epoch, or a partition state with an
        older leader epoch than known, changes nothing."""
        errors: dict[TopicPartition, ErrorCode] = {}
        leaders: list[HostedPartition] = []
        followers: list[tuple[HostedPartition, tuple[str, int]]] = []
        endpoints = {b.broker_id: (b.host_name, b.port) for b in request.live_leaders}
        stale = request.controller_epoch < self.controller_epoch
        if not stale:
            self.controller_epoch = request.controller_epoch
        now = self.clock.wall_ms()
        for topic in request.topic_states:
            for p in topic.partition_states:
                key = (topic.topic_name, p.partition_index)
                if stale:
                    errors[key] = error_codes.STALE_CONTROLLER_EPOCH
                    continue
                if self.broker_id not in p.replicas:
                    errors[key] = error_codes.NONE
                    continue
                if key in self.offline:
                    errors[key] = error_codes.KAFKA_STORAGE_ERROR
                    continue
                current = self._partitions.get(key)
                if current is not None and p.leader_epoch <= current.leader_epoch:
                    errors[key] = (
                        error_codes.NONE
                        if p.leader_epoch == current.leader_epoch
                        else error_codes.STALE_CONTROLLER_EPOCH
                    )
                    continue
                try:
                    hosted = self._open(
                        key[0], key[1], topic.topic_id, configs(key[0]), is_new=p.is_new
                    )
                except KafkaError as e:  # its directory is offline
                    errors[key] = e.error
                    continue
                errors[key] = error_codes.NONE
                isr, replicas = list(p.isr), list(p.replicas)
                if p.leader == self.broker_id:
                    hosted.make_leader(p.leader_epoch, isr, replicas, p.partition_epoch, now)
                    leaders.append(hosted)
                else:
                    hosted.make_follower(p.leader, p.leader_epoch, isr, replicas, p.partition_epoch)
                    if p.leader in endpoints:
                        followers.append((hosted, endpoints[p.leader]))
                self._wake(key)
        change = RoleChange(leaders, followers)
        if state_change_log.enabled():
            state_change_log.leader_and_isr_received(
                self.broker_id, request, correlation_id, self._outcomes(errors, change)
            )
        self._start_roles(change)
        return errors

    def _start_roles(self, change: RoleChange) -> None:
        for hosted in change.leaders:
            self.fetchers.unfollow(hosted.key)
            listener = self._listeners.get(hosted.topic)
            if listener is not None:
                listener.became_leader(hosted.index)
        for hosted, address in change.followers:
            self.fetchers.follow(hosted, address)
            listener = self._listeners.get(hosted.topic)
            if listener is not None:
                listener.stopped_leading(hosted.index)

    def _outcomes(
        self, errors: dict[TopicPartition, ErrorCode], change: RoleChange
    ) -> dict[TopicPartition, str]:
        """What a LeaderAndIsr did to each partition, for the state-change log."""
        out = {}
        for key, error in errors.items():
            hosted = self._partitions.get(key)
            if error.code != 0:
                out[key] = f"ignored with error {error.name} (stale controller or leader epoch)"
            elif hosted is None:
                out[key] = "not a replica on this broker"
            else:
                out[key] = f"nothing to do: already at leader epoch {hosted.leader_epoch}"
        for hosted in change.leaders:
            out[hosted.key] = (
                f"became leader with leader epoch {hosted.leader_epoch} and ISR "
                f"{hosted.isr} at log end offset {hosted.log.log_end_offset}"
            )
        for hosted, _ in change.followers:
            out[hosted.key] = (
                f"became follower of broker {hosted.leader_id} with leader epoch "
                f"{hosted.leader_epoch} at log end offset {hosted.log.log_end_offset}"
            )
        return out

    def stop_replicas(
        self, controller_epoch: int, partitions: list[tuple[TopicPartition, bool]]
    ) -> dict[TopicPartition, ErrorCode]:
        """StopReplica: stop fetching, leading and serving (with `delete`, remove) these
        replicas."""
        if controller_epoch < self.controller_epoch:
            return {key: error_codes.STALE_CONTROLLER_EPOCH for key, _ in partitions}
        self.controller_epoch = controller_epoch
        for (topic, index), delete in partitions:
            self.fetchers.unfollow((topic, index))
            listener = self._listeners.get(topic)
            if listener is not None:
                listener.stopped_leading(index)
            hosted = self._partitions.pop((topic, index), None)
            if delete:
                self.offline.discard((topic, index))
                if hosted is not None:
                    self.logs.delete(topic, index)
            self._wake((topic, index))
        return {key: error_codes.NONE for key, _ in partitions}

    # --- log directories ----------------------------------------------------------------

    def storage_error(self, hosted: HostedPartition, error: OSError) -> KafkaError:
        """An I/O error from `hosted`'s log: its directory goes offline; the error to
        answer."""
        self.log_dir_failed(self.logs.dir_for_failure(hosted.log), error)
        return KafkaError(
            error_codes.KAFKA_STORAGE_ERROR, f"{hosted.topic}-{hosted.index}: {error}"
        )

    def log_dir_failed(self, directory: Path, error: BaseException | None = None) -> None:
        """KIP-112: stop hosting the partitions of a failed log directory, answer
        KAFKA_STORAGE_ERROR for them, and tell the controller (once per directory)."""
        lost = self.logs.fail_dir(directory, error)
        if not self.logs.online_dirs and not self._all_dirs_failed:
            self._all_dirs_failed = True
            if self.on_all_dirs_failed is not None:
                self.on_all_dirs_failed()
        for key in lost:
            self.offline.add(key)
            self.fetchers.unfollow(key)
            if self._partitions.pop(key, None) is not None:
                listener = self._listeners.get(key[0])
                if listener is not None:
                    listener.stopped_leading(key[1])
            self._wake(key)
        if directory in self._announced_dirs:
            return
        self._announced_dirs.add(directory)
        try:
            self.store.create_sequential(
                layout.LOG_DIR_EVENT_PREFIX, layout.log_dir_event_to_json(self.broker_id)
            )
        except StoreUnavailableError as e:
            log.error("failure of log directory %s not announced: %s", directory, e)
            self._announced_dirs.discard(directory)

    def alter_log_dir(self, key: TopicPartition, destination: Path) -> ErrorCode:
        """AlterReplicaLogDirs for one replica, with Kafka's answers: LOG_DIR_NOT_FOUND (not
        a configured directory), KAFKA_STORAGE_ERROR (it or the replica is offline),
        REPLICA_NOT_AVAILABLE (not hosted here: the directory is remembered for when it
        is)."""
        if destination not in self.logs.dirs:
            return error_codes.LOG_DIR_NOT_FOUND
        if destination in self.logs.offline_dirs or key in self.offline:
            return error_codes.KAFKA_STORAGE_ERROR
        hosted = self._partitions.get(key)
        if hosted is None:
            self.logs.preferred_dir[key] = destination
            return error_codes.REPLICA_NOT_AVAILABLE
        if self.logs.dir_of.get(key) == destination:
            return error_codes.NONE
        try:
            hosted.log = self.logs.move(key, destination)
        except OSError as e:
            log.error("moving %s-%d to %s failed: %s", key[0], key[1], destination, e)
            return error_codes.KAFKA_STORAGE_ERROR
        self._wake(key)
        return error_codes.NONE

    async def stop(self) -> None:
        """Broker shutdown: stop fetching and answer every waiting request now."""
        await self.fetchers.stop()
        self.fetch_purgatory.expire_all()
        self.produce_purgatory.expire_all()
