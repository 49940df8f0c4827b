"""Followers' replication: one fetcher task per leader broker, fetching with the Fetch API.

How it works. `ReplicaFetchers.follow` puts a follower partition under the fetcher of its
leader (creating it), taking it away from any other. A fetcher first reconciles each new
partition with its leader — OffsetForLeaderEpoch for the follower's latest leader epoch, then
truncation to where both logs agree (repeated for older epochs until they do; the leader's
high watermark when the leader knows no epoch) — so a former leader drops writes that never
reached the ISR and the replicas stay byte-identical. Then it long-polls Fetch (replica id
set, from each partition's log end offset, carrying the leader epoch it follows so a stale
leader refuses) and appends what comes back as is: batches keep the leader's offsets and
epochs. The follower's high watermark is the leader's, capped at its own end.

Throttling. Partitions named in their topic's `follower.replication.throttled.replicas` for
this broker, while catching up, are left out of fetch requests whenever the broker's
follower replication quota is used up (`server/replication/throttle.py`).

Errors. A lost connection is retried with backoff, and so is a leader that leaves a fetch
unanswered past `replica.fetch.wait.max.ms` + REQUEST_TIMEOUT_S (a watchdog ticking every
WATCHDOG_S drops the connection: cheaper than a loop timer per fetch, issue 29); partition
errors (the leader moved, a newer epoch) leave the partition in place until the
controller's next LeaderAndIsr moves it. While the partitions fetched stay the same, each
fetch reuses the last request's objects with the new offsets.
Fetched data the local log refuses (a full disk, a corrupt batch) leaves the partition out of
fetches for `replica.fetch.backoff.ms`, as Kafka delays a partition with an error, and is
logged once until an append succeeds again (not once per fetch, which spun the fetcher at
~1,000 fetches/s of the same data while a disk was full). Any other I/O error writing the
local log goes to `on_storage_error` (its log directory fails) — also a full disk during a
truncation, which is several writes, not one that is cut off whole: a truncation left half
done once left a follower refusing its leader's batches for good (long run seed 1602).
Runs on the event loop; the only I/O is the fetcher's connection to its leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass

from riverlog.client.connection import PLAINTEXT, Connection
from riverlog.clock import SYSTEM_CLOCK, Clock
from riverlog.model import TopicPartition
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import (
    FetchRequest,
    FetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from riverlog.server.background import BackgroundLoop, stop_all
from riverlog.server.replication.partition import HostedPartition
from riverlog.server.replication.throttle import UNLIMITED, ReplicationQuota, throttled

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # topic names, leader epochs, replica id in the request header
EPOCH_VERSION = 4
BACKOFF_S = 0.2
REQUEST_TIMEOUT_S = 10.0
MAX_TRUNCATION_ROUNDS = 10
STOP_TIMEOUT_S = 5.0
WATCHDOG_S = 1.0
_LENGTH = struct.Struct(">i")


def whole_batches(data: memoryview) -> memoryview:
    """The leading whole record batches of a fetched record set (a size-bounded read may
    end inside a batch)."""
    position = 0
    while len(data) - position >= 12:
        size = 12 + _LENGTH.unpack_from(data, position + 8)[0]
        if position + size > len(data):
            break
        position += size
    return data[:position]


@dataclass(eq=False)
class _Followed:
    hosted: HostedPartition
    epoch: int
    reconciled: bool = False
    caught_up: bool = False
    """At the leader's high watermark after the last fetch (never throttled then)."""
    refused: int = 0
    """Fetched data the local log refused since it last took some."""
    delayed_until: float = 0.0
    """Left out of fetches until then (monotonic seconds), after a refusal."""


class _Fetcher(BackgroundLoop):
    def __init__(self, owner: ReplicaFetchers, leader_id: int, address: tuple[str, int]) -> None:
        self.owner = owner
        self.leader_id = leader_id
        self.address = address
        self.partitions: dict[TopicPartition, _Followed] = {}
        self.changed = asyncio.Event()
        self._conn: Connection | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._due = 0.0
        """Loop time by which the fetch in flight must be answered (0: none in flight)."""
        self._request: FetchRequest | None = None
        self._request_for: dict[TopicPartition, _Followed] = {}
        """What `_request` asks for: reused while the partitions sent are these."""
        self._parts: list[tuple[FetchRequest.FetchPartition, HostedPartition]] = []
        super().__init__()

    async def _run(self) -> None:
        host, port = self.address
        conn: Connection | None = None
        failed = False
        self._watchdog = asyncio.get_running_loop().call_later(WATCHDOG_S, self._watch)
        try:
            while not self.stopped:
                if not self.partitions:
                    self.changed.clear()
                    await self.changed.wait()
                    continue
                try:
                    if conn is None or conn.closed:
                        conn = self._conn = await Connection.open(
                            host,
                            port,
                            client_id=f"replica-fetcher-{self.owner.broker_id}",
                            security=self.owner.security,
                        )
                    await self._reconcile(conn)
                    await self._fetch(conn)
                except (ConnectionError, OSError, TimeoutError) as e:
                    log.info("replica fetcher to broker %d: %r", self.leader_id, e)
                    failed = True
                except Exception:
                    log.exception("replica fetcher to broker %d failed", self.leader_id)
                    failed = True
                if failed:
                    failed = False
                    if conn is not None:
                        await conn.close()
                    conn = None
                    await asyncio.sleep(BACKOFF_S)
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None
            if conn is not None:
                await conn.close()

    def _watch(self) -> None:
        """Every WATCHDOG_S: drop the connection of a fetch unanswered past its deadline
        (its request then fails with ConnectionError, and the fetcher reconnects)."""
        if self.stopped:
            return
        loop = asyncio.get_running_loop()
        if self._due and loop.time() > self._due and self._conn is not None:
            log.info("replica fetcher to broker %d: no answer to a fetch in time", self.leader_id)
            self._due = 0.0
            self._conn.abort()
        self._watchdog = loop.call_later(WATCHDOG_S, self._watch)

    def _still_current(
        self, asked: dict[TopicPartition, _Followed], topic: str, index: int
    ) -> _Followed | None:
        """What a request asked about `topic`-`index`, if this fetcher still follows it so
        (the same partition object, the same leader epoch); None to ignore the answer."""
        followed = asked.get((topic, index))
        if followed is None or self.partitions.get((topic, index)) is not followed:
            return None
        return followed if followed.hosted.leader_epoch == followed.epoch else None

    # --- truncation --------------------------------------------------------------------

    async def _reconcile(self, conn: Connection) -> None:
        for _ in range(MAX_TRUNCATION_ROUNDS):
            pending = {k: f for k, f in self.partitions.items() if not f.reconciled}
            if not pending:
                return
            topics: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
            for (topic, index), followed in pending.items():
                topics.setdefault(topic, []).append(
                    OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                        partition=index,
                        current_leader_epoch=followed.epoch,
                        leader_epoch=followed.hosted.log.epochs.latest_epoch,
                    )
                )
            request = OffsetForLeaderEpochRequest(
                replica_id=self.owner.broker_id,
                topics=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps)
                    for t, ps in topics.items()
                ],
            )
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                response = await conn.send(request, EPOCH_VERSION)
            assert isinstance(response, OffsetForLeaderEpochResponse)
            retry = False
            for topic_result in response.topics:
                for answer in topic_result.partitions:
                    current = self._still_current(pending, topic_result.topic, answer.partition)
                    if current is None:
                        continue
                    if answer.error_code != 0:
                        retry = True
                        continue
                    try:
                        current.reconciled = self._truncate(current.hosted, answer)
                    except OSError as e:  # half-truncated: the directory goes offline
                        self.owner.on_storage_error(current.hosted, e)
            if retry:
                await asyncio.sleep(BACKOFF_S)
        for left in list(self.partitions.values()):  # no agreement found: fall back to the HW
            if not left.reconciled:
                try:
                    left.hosted.truncate_to_high_watermark()
                except OSError as e:
                    self.owner.on_storage_error(left.hosted, e)
                left.reconciled = True

    @staticmethod
    def _truncate(
        hosted: HostedPartition, answer: OffsetForLeaderEpochResponse.EpochEndOffset
    ) -> bool:
        """Truncate to where this log agrees with the leader's; whether that is settled."""
        end = hosted.log.log_end_offset
        settled = hosted.truncate_to_leader(answer.leader_epoch, answer.end_offset)
        if hosted.log.log_end_offset < end:
            log.info(
                "truncated %s-%d from %d to %d (leader epoch %d ends at %d there)",
                hosted.topic,
                hosted.index,
                end,
                hosted.log.log_end_offset,
                answer.leader_epoch,
                answer.end_offset,
            )
        return settled

    # --- fetching ----------------------------------------------------------------------

    def _throttled(self, followed: _Followed) -> bool:
        """Catching up on a partition throttled on this follower."""
        hosted = followed.hosted
        return (
            self.owner.quota.limited
            and not followed.caught_up
            and self.owner.broker_id not in hosted.isr
            and throttled(
                hosted.log.config.follower_replication_throttled_replicas,
                hosted.index,
                self.owner.broker_id,
            )
        )

    async def _fetch(self, conn: Connection) -> None:
        quota = self.owner.quota
        now = self.owner.clock.monotonic_s()
        held = quota.exceeded(now)
        sent = {
            k: f
            for k, f in self.partitions.items()
            if f.delayed_until <= now and not (held and self._throttled(f))
        }
        if not sent:  # all throttled or delayed: wait for the quota or the first delay
            waits = [
                f.delayed_until - now for f in self.partitions.values() if f.delayed_until > now
            ]
            if held:
                waits.append(quota.delay_s(now))
            await asyncio.sleep(min(1.0, max(0.01, min(waits, default=0.01))))
            return
        request = self._request_to_send(sent)
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self.owner.max_wait_ms / 1000 + REQUEST_TIMEOUT_S
        try:
            response = await conn.send(request, FETCH_VERSION)
        finally:
            self._due = 0.0
        assert isinstance(response, FetchResponse)
        failed = 0
        for topic_response in response.responses:
            for data in topic_response.partitions:
                current = self._still_current(sent, topic_response.topic, data.partition_index)
                if current is None:
                    continue
                if data.error_code != 0:
                    failed += 1
                    continue
                records = data.records
                if self._throttled(current) and isinstance(records, bytes | bytearray | memoryview):
                    quota.record(len(records), self.owner.clock.monotonic_s())
                self._append(current, data)
                current.caught_up = current.hosted.log.log_end_offset >= data.high_watermark
        if failed and failed == len(sent):
            await asyncio.sleep(BACKOFF_S)

    def _request_to_send(self, sent: dict[TopicPartition, _Followed]) -> FetchRequest:
        """A Fetch for `sent` from each partition's log end: the last request with new
        offsets when it asked for the same partitions, else a new one."""
        owner = self.owner
        request = self._request
        if request is None or sent != self._request_for:
            topics: dict[str, FetchRequest.FetchTopic] = {}
            self._parts = []
            for (topic, index), followed in sent.items():
                entry = topics.setdefault(
                    topic, FetchRequest.FetchTopic(topic=topic, topic_id=followed.hosted.topic_id)
                )
                part = FetchRequest.FetchPartition(
                    partition=index, current_leader_epoch=followed.epoch
                )
                entry.partitions.append(part)
                self._parts.append((part, followed.hosted))
            request = self._request = FetchRequest(
                replica_id=owner.broker_id,
                session_id=0,
                session_epoch=-1,
                topics=list(topics.values()),
            )
            self._request_for = sent
        request.max_wait_ms = owner.max_wait_ms
        request.min_bytes = owner.min_bytes
        request.max_bytes = owner.max_bytes
        for part, hosted in self._parts:
            plog = hosted.log
            part.fetch_offset = plog.log_end_offset
            part.log_start_offset = plog.log_start_offset
            part.partition_max_bytes = owner.partition_max_bytes
        return request

    def _append(self, followed: _Followed, data: FetchResponse.PartitionData) -> None:
        hosted = followed.hosted
        plog = hosted.log
        records = data.records
        batches = memoryview(b"")
        if isinstance(records, bytes | bytearray | memoryview) and len(records) > 0:
            batches = whole_batches(memoryview(records))
        try:
            hosted.append_as_follower(batches, data.high_watermark)
            if data.log_start_offset > plog.log_start_offset:
                with contextlib.suppress(KafkaError):
                    plog.delete_records_before(min(data.log_start_offset, plog.high_watermark))
        except KafkaError as e:
            if not followed.refused:
                log.error(
                    "replica of %s-%d refused fetched data: %s (fetching it again every "
                    "replica.fetch.backoff.ms=%d)",
                    hosted.topic,
                    hosted.index,
                    e,
                    self.owner.backoff_ms,
                )
            followed.refused += 1
            followed.delayed_until = self.owner.clock.monotonic_s() + self.owner.backoff_ms / 1000
            return
        except OSError as e:
            self.owner.on_storage_error(hosted, e)
            return
        if followed.refused:
            log.info(
                "replica of %s-%d takes fetched data again (%d refusals)",
                hosted.topic,
                hosted.index,
                followed.refused,
            )
            followed.refused = 0


def _log_only(hosted: HostedPartition, error: OSError) -> None:
    log.error("replica of %s-%d: %s", hosted.topic, hosted.index, error)


class ReplicaFetchers:
    """The fetchers of one broker, by leader broker id."""

    def __init__(
        self,
        broker_id: int,
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 10 * 1024 * 1024,
        partition_max_bytes: int = 1024 * 1024,
        backoff_ms: int = 1000,
        quota: ReplicationQuota | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.broker_id = broker_id
        self.clock = clock
        self.quota = quota or ReplicationQuota(UNLIMITED)
        self.security = PLAINTEXT
        """How fetchers connect (the inter-broker listener's protocol and login)."""
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.backoff_ms = backoff_ms
        """`replica.fetch.backoff.ms`: how long a partition whose data was refused waits."""
        self._fetchers: dict[int, _Fetcher] = {}
        self._stopped = False
        self.on_storage_error: Callable[[HostedPartition, OSError], object] = _log_only
        """Told of an I/O error from a local log (the replica manager fails its directory)."""

    def follow(self, hosted: HostedPartition, leader_address: tuple[str, int]) -> None:
        self.unfollow(hosted.key)
        if self._stopped:  # the broker is shutting down
            return
        fetcher = self._fetchers.get(hosted.leader_id)
        if fetcher is not None and fetcher.address != leader_address:
            fetcher.stop()
            del self._fetchers[hosted.leader_id]
            fetcher = None
        if fetcher is None:
            fetcher = _Fetcher(self, hosted.leader_id, leader_address)
            self._fetchers[hosted.leader_id] = fetcher
        fetcher.partitions[hosted.key] = _Followed(hosted, hosted.leader_epoch)
        fetcher.changed.set()

    def unfollow(self, key: TopicPartition) -> None:
        for fetcher in self._fetchers.values():
            fetcher.partitions.pop(key, None)

    async def stop(self) -> None:
        self._stopped = True
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        await stop_all(fetchers, STOP_TIMEOUT_S)
