"""The replica manager's ISR changes with a clock of the test's own: a real embedded metadata
store and real logs in a temporary directory, no network (the partition is led here and
no follower is fetched from)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from riverlog.clock import Clock
from riverlog.metadata import layout
from riverlog.metadata.store import EmbeddedStore
from riverlog.protocol.messages import LeaderAndIsrRequest
from riverlog.server.replication.replica_fetcher import ReplicaFetchers
from riverlog.server.replication.replica_manager import ReplicaManager
from riverlog.server.replication.throttle import UNLIMITED, ReplicationQuota
from riverlog.storage.manager import LogManager

LAG_MS = 10_000
T = "events"


class ManualClock(Clock):
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def wall_ms(self) -> int:
        return self.now_ms

    def wall_ns(self) -> int:
        return self.now_ms * 1_000_000

    def monotonic_s(self) -> float:
        return self.now_ms / 1000

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def leading(
    tmp_path: Path, clock: ManualClock, data: Path | None = None, **log_defaults: str
) -> tuple[ReplicaManager, EmbeddedStore]:
    """Broker 1 leads `events`-0 with replicas and ISR 1, 2, 3 (state znode version 0); its
    log directory is `data` (default `tmp_path`/data)."""
    store = EmbeddedStore(tmp_path / "metadata.json")
    path = layout.partition_state_path(T, 0)
    store.create(path, layout.PartitionState(1, 4, [1, 2, 3], 1).to_json())
    logs = LogManager(data or tmp_path / "data", log_defaults, clock_ms=clock.wall_ms)
    manager = ReplicaManager(
        1, logs, store, ReplicaFetchers(1, clock=clock), ReplicationQuota(UNLIMITED), clock
    )
    state = LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name=T,
        partition_index=0,
        controller_epoch=1,
        leader=1,
        leader_epoch=4,
        isr=[1, 2, 3],
        partition_epoch=0,
        replicas=[1, 2, 3],
    )
    request = LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=1,
        topic_states=[
            LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name=T, topic_id=uuid.uuid4(), partition_states=[state]
            )
        ],
    )
    manager.apply_leader_and_isr(request, lambda _topic: {}, correlation_id=1)
    return manager, store


def stored_isr(store: EmbeddedStore) -> list[int]:
    node = store.get(layout.partition_state_path(T, 0))
    return layout.PartitionState.from_json(node.data).isr


def test_followers_lagging_past_the_limit_leave_the_isr(tmp_path: Path) -> None:
    clock = ManualClock()
    manager, store = leading(tmp_path, clock)
    manager.shrink_isrs(LAG_MS)  # the first round: everyone just caught up
    clock.advance(LAG_MS // 2)
    manager.follower_fetched(2, [((T, 0), 0)])  # 2 is at the leader's end: caught up
    manager.shrink_isrs(LAG_MS)  # rounds come every half lag, as the broker runs them
    assert stored_isr(store) == [1, 2, 3]
    clock.advance(LAG_MS // 2 + 1)
    manager.shrink_isrs(LAG_MS)
    assert stored_isr(store) == [1, 2] and manager.get(T, 0).isr == [1, 2]


def test_a_leader_that_did_not_run_past_the_limit_skips_one_round(tmp_path: Path) -> None:
    """Frozen for longer than the lag, the leader has not read its followers' fetches yet:
    shrinking now would drop followers that did nothing wrong."""
    clock = ManualClock()
    manager, store = leading(tmp_path, clock)
    manager.shrink_isrs(LAG_MS)
    clock.advance(LAG_MS * 3)  # the broker was frozen
    manager.shrink_isrs(LAG_MS)
    assert stored_isr(store) == [1, 2, 3]
    manager.follower_fetched(2, [((T, 0), 0)])  # 2's fetch, read after the thaw
    clock.advance(LAG_MS // 2)
    manager.shrink_isrs(LAG_MS)  # the next round judges: 3 stayed silent, 2 did not
    assert stored_isr(store) == [1, 2]


def test_an_io_error_takes_the_directory_offline_and_tells_the_controller(
    tmp_path: Path,
) -> None:
    """KIP-112 at the replica manager: an append failing with a real I/O error (the log
    directory replaced by a file, so the segment roll fails) answers KAFKA_STORAGE_ERROR,
    unhosts the partition, and writes Kafka's notification for the controller once."""
    from riverlog.protocol import error_codes
    from riverlog.protocol.error_codes import KafkaError
    from riverlog.protocol.records.v2 import Record, encode_batch

    clock = ManualClock()
    manager, store = leading(tmp_path, clock)
    data = tmp_path / "data"
    hosted = manager.get(T, 0)
    hosted.log.config = manager.logs.config_for({"segment.bytes": "200"})
    batch = memoryview(encode_batch([Record(0, clock.now_ms, b"k", b"v" * 100)]))
    manager.append(T, 0, batch, acks=1)
    data.rename(tmp_path / "data.gone")
    data.write_bytes(b"")
    with pytest.raises(KafkaError) as failed:
        manager.append(T, 0, batch, acks=1)  # rolls a segment: ENOTDIR
    assert failed.value.error is error_codes.KAFKA_STORAGE_ERROR
    for call in (lambda: manager.get(T, 0), lambda: manager.append(T, 0, batch, acks=1)):
        with pytest.raises(KafkaError) as offline:
            call()
        assert offline.value.error is error_codes.KAFKA_STORAGE_ERROR
    [event] = store.children(layout.LOG_DIR_EVENT_NOTIFICATION)
    assert event.startswith("log_dir_event_") and event[len("log_dir_event_") :].isdigit()
    node = store.get(f"{layout.LOG_DIR_EVENT_NOTIFICATION}/{event}")
    assert json.loads(node.data) == {"version": 1, "broker": 1, "event": 1}
    manager.log_dir_failed(data)  # already known: no second notification
    assert len(store.children(layout.LOG_DIR_EVENT_NOTIFICATION)) == 1


def test_an_isr_write_whose_answer_was_lost_counts_as_written(tmp_path: Path) -> None:
    """The leader's ISR write reached ZooKeeper but its answer was lost with the connection
    (StoreUnavailableError: the leader keeps the old ISR and znode version). Its next attempt
    is refused for the version; the znode holds exactly what it wrote, so that is its own
    write (Kafka's checkLeaderAndIsrZkData) — before, the leader kept the old ISR with an ISR
    write "pending" for good and could change the ISR no more: a partition that never looked
    whole again, as after the 60 % packet loss of finding 5 (docs/fault-suite.md)."""
    clock = ManualClock()
    manager, store = leading(tmp_path, clock)
    manager.shrink_isrs(LAG_MS)
    clock.advance(LAG_MS // 2)
    manager.follower_fetched(2, [((T, 0), 0)])
    manager.shrink_isrs(LAG_MS)
    clock.advance(LAG_MS // 2 + 1)
    path = layout.partition_state_path(T, 0)
    store.set(path, layout.PartitionState(1, 4, [1, 2], 1).to_json(), expected_version=0)
    manager.shrink_isrs(LAG_MS)  # the same write again, at the version it still knows
    hosted = manager.get(T, 0)
    assert (hosted.isr, hosted.zk_version, hosted.pending_isr) == ([1, 2], 1, None)
    clock.advance(1)
    manager.follower_fetched(3, [((T, 0), 0)])  # 3 catches up: it may join again
    assert stored_isr(store) == [1, 2, 3] and hosted.isr == [1, 2, 3]


def test_an_isr_write_refused_for_another_state_changes_nothing(tmp_path: Path) -> None:
    """The znode moved on to something else (the controller wrote it): not ours."""
    clock = ManualClock()
    manager, store = leading(tmp_path, clock)
    manager.shrink_isrs(LAG_MS)
    clock.advance(LAG_MS // 2)
    manager.follower_fetched(2, [((T, 0), 0)])
    manager.shrink_isrs(LAG_MS)
    clock.advance(LAG_MS // 2 + 1)
    path = layout.partition_state_path(T, 0)
    store.set(path, layout.PartitionState(2, 5, [2, 3], 2).to_json(), expected_version=0)
    manager.shrink_isrs(LAG_MS)
    hosted = manager.get(T, 0)
    assert (hosted.isr, hosted.zk_version) == ([1, 2, 3], 0)
    assert stored_isr(store) == [2, 3]


async def test_fetched_data_the_log_refuses_backs_off_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by the long run (seed 1601): while a follower's disk was full, its fetcher
    fetched the same data again at once, ~1,000 times a second, logging two lines each
    time. Refused data (here a corrupt batch: the log's own refusal, as for a full disk)
    leaves the partition out of fetches for `replica.fetch.backoff.ms`, logged once per
    episode; the next append that succeeds says so."""
    from riverlog.protocol.messages import FetchResponse
    from riverlog.protocol.records.v2 import Record, encode_batch
    from riverlog.server.replication.replica_fetcher import _Fetcher, _Followed

    clock = ManualClock()
    manager, _ = leading(tmp_path, clock)
    hosted = manager.get(T, 0)
    owner = ReplicaFetchers(1, backoff_ms=1000, clock=clock)
    fetcher = _Fetcher(owner, 2, ("127.0.0.1", 9))  # nothing listens: it only backs off
    try:
        followed = _Followed(hosted, hosted.leader_epoch)
        good = encode_batch([Record(0, clock.now_ms, b"k", b"v")], partition_leader_epoch=4)
        bad = bytearray(good)
        bad[-1] ^= 0xFF  # the CRC no longer holds
        refused = FetchResponse.PartitionData(partition_index=0, high_watermark=0, records=bad)
        with caplog.at_level("INFO", logger="riverlog.server.replication.replica_fetcher"):
            for _ in range(3):
                fetcher._append(followed, refused)
            assert followed.refused == 3
            assert followed.delayed_until == clock.monotonic_s() + 1.0
            taken = FetchResponse.PartitionData(partition_index=0, high_watermark=0, records=good)
            fetcher._append(followed, taken)
        lines = [r.getMessage() for r in caplog.records if "replica of events-0" in r.message]
        assert len(lines) == 2, lines
        assert "refused fetched data" in lines[0] and "replica.fetch.backoff.ms=1000" in lines[0]
        assert "takes fetched data again (3 refusals)" in lines[1]
        assert followed.refused == 0 and hosted.log.log_end_offset == 1
    finally:
        fetcher.stop()
