"""The pure replication rules of `HostedPartition`, with chosen times and offsets: the high
watermark, Kafka's caught-up rule, ISR growth and shrinking, when an acks=all write is in
the ISR, leader-epoch fencing, and the truncation offset a follower derives from epochs."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from riverlog.model import UNDEFINED_EPOCH
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode, KafkaError
from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.server.replication.partition import HostedPartition, truncation_target
from riverlog.server.replication.replica_selector import ReplicaView, rack_aware
from riverlog.storage.epoch_cache import LeaderEpochCache
from riverlog.storage.log import PartitionLog
from riverlog.storage.log_config import LogConfig

LAG_MS = 10_000


def batch(count: int) -> memoryview:
    return memoryview(encode_batch([Record(i, 1_000, None, b"v") for i in range(count)]))


def leader(
    tmp_path: Path, records: int = 0, *, min_isr: int = 1, isr: list[int] | None = None
) -> HostedPartition:
    """Broker 1 leading (epoch 5) replicas 1, 2, 3 with `records` records already."""
    config = LogConfig.from_map({"min.insync.replicas": str(min_isr)})
    log = PartitionLog(tmp_path / "t-0", config)
    if records:
        log.append(batch(records), leader_epoch=4)
    hosted = HostedPartition("t", 0, uuid.uuid4(), log, local_id=1)
    hosted.make_leader(5, isr or [1, 2, 3], [1, 2, 3], zk_version=7, now_ms=0)
    return hosted


# --- the high watermark ----------------------------------------------------------------


def test_a_follower_whose_position_is_unknown_holds_the_high_watermark(tmp_path: Path) -> None:
    hosted = leader(tmp_path, 10)
    assert hosted.log.high_watermark == 0
    assert not hosted.follower_fetched(2, 10, now_ms=1).high_watermark_moved  # 3 unknown
    assert hosted.follower_fetched(3, 6, now_ms=1).high_watermark_moved
    assert hosted.log.high_watermark == 6  # the slowest ISR member
    assert hosted.follower_fetched(3, 10, now_ms=2).high_watermark_moved
    assert hosted.log.high_watermark == 10


def test_the_high_watermark_never_moves_back(tmp_path: Path) -> None:
    hosted = leader(tmp_path, 10)
    hosted.follower_fetched(2, 10, now_ms=1)
    hosted.follower_fetched(3, 10, now_ms=1)
    assert not hosted.follower_fetched(3, 4, now_ms=2).high_watermark_moved
    assert hosted.log.high_watermark == 10


def test_a_leader_alone_in_its_isr_moves_the_high_watermark_with_each_append(
    tmp_path: Path,
) -> None:
    hosted = leader(tmp_path, isr=[1])
    result = hosted.append_as_leader(batch(3))
    assert (result.last_offset, hosted.log.high_watermark) == (2, 3)


def test_a_follower_takes_its_leaders_high_watermark_capped_at_its_end(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig.from_map({}))
    follower = HostedPartition("t", 0, uuid.uuid4(), log, local_id=2)
    follower.make_follower(1, 5, [1, 2], [1, 2], zk_version=3)
    data = bytearray(batch(4))  # offsets 0-3 as the leader assigned them
    follower.append_as_follower(memoryview(data), leader_high_watermark=9)
    assert (log.log_end_offset, log.high_watermark) == (4, 4)
    follower.append_as_follower(memoryview(b""), leader_high_watermark=2)
    assert log.high_watermark == 2


# --- caught up, ISR growth and shrinking -------------------------------------------------

CAUGHT_UP_CASES = [
    # (leader end at the previous fetch, previous fetch at, this fetch offset, now,
    #  expected last caught-up time)
    pytest.param(None, None, 10, 500, 500, id="at the leader's end: caught up now"),
    pytest.param(None, None, 9, 500, 0, id="behind, no earlier fetch: never caught up"),
    pytest.param(10, 300, 10, 500, 500, id="reached the end"),
    pytest.param(8, 300, 8, 500, 300, id="has what existed at its previous fetch"),
    pytest.param(9, 300, 8, 500, 0, id="behind what existed then"),
]


@pytest.mark.parametrize(("prev_end", "prev_at", "offset", "now", "expected"), CAUGHT_UP_CASES)
def test_kafkas_caught_up_rule(
    tmp_path: Path,
    prev_end: int | None,
    prev_at: int | None,
    offset: int,
    now: int,
    expected: int,
) -> None:
    hosted = leader(tmp_path, 10, isr=[1])  # follower 2 is outside the ISR: caught up at 0
    if prev_end is not None and prev_at is not None:
        state = hosted.followers[2]
        state.last_fetch_leader_end, state.last_fetch_ms = prev_end, prev_at
        state.log_end_offset = prev_end - 1
    hosted.follower_fetched(2, offset, now_ms=now)
    assert hosted.followers[2].last_caught_up_ms == expected


def test_a_follower_joins_the_isr_once_at_the_high_watermark_and_in_this_epoch(
    tmp_path: Path,
) -> None:
    hosted = leader(tmp_path, 10, isr=[1, 2])
    hosted.follower_fetched(2, 10, now_ms=1)  # HW 10; the epoch started at 10
    assert hosted.follower_fetched(3, 9, now_ms=1).isr_expansion is None
    assert hosted.follower_fetched(3, 10, now_ms=2).isr_expansion == [1, 2, 3]
    hosted.pending_isr = [1, 2, 3]  # a write in flight: no second one
    assert hosted.follower_fetched(3, 10, now_ms=3).isr_expansion is None


def test_a_follower_behind_the_epoch_start_does_not_join(tmp_path: Path) -> None:
    hosted = leader(tmp_path, 10, isr=[1])
    hosted.leader_epoch_start = 12
    assert hosted.follower_fetched(2, 10, now_ms=1).isr_expansion is None


ISR_SHRINK_CASES = [
    pytest.param(LAG_MS, None, id="lagging exactly the limit: stays"),
    pytest.param(LAG_MS + 1, [1, 3], id="lagging past the limit: leaves"),
]


@pytest.mark.parametrize(("now", "expected"), ISR_SHRINK_CASES)
def test_isr_shrinks_around_followers_lagging_past_the_limit(
    tmp_path: Path, now: int, expected: list[int] | None
) -> None:
    hosted = leader(tmp_path, 10)  # everyone in the ISR caught up at 0 (make_leader)
    hosted.follower_fetched(3, 10, now_ms=now)
    assert hosted.isr_to_shrink(now, LAG_MS) == expected


def test_no_isr_shrink_while_a_write_is_pending_or_on_a_follower(tmp_path: Path) -> None:
    hosted = leader(tmp_path, 10)
    hosted.pending_isr = [1, 2]
    assert hosted.isr_to_shrink(LAG_MS * 5, LAG_MS) is None
    hosted.make_follower(2, 6, [2, 3], [1, 2, 3], zk_version=8)
    assert hosted.isr_to_shrink(LAG_MS * 5, LAG_MS) is None


def test_a_written_isr_may_move_the_high_watermark(tmp_path: Path) -> None:
    hosted = leader(tmp_path, 10)
    hosted.follower_fetched(2, 10, now_ms=1)  # 3 never fetched: HW held at 0
    assert hosted.log.high_watermark == 0
    assert hosted.isr_written([1, 2], zk_version=8)
    assert (hosted.log.high_watermark, hosted.zk_version, hosted.pending_isr) == (10, 8, None)


# --- acks=all: when is a write in the ISR ------------------------------------------------

REPLICATION_CASES = [
    # (ISR, min ISR, followers' offsets, still leader, expected for a write ending at 10)
    pytest.param([1, 2], 1, {2: 9}, True, None, id="not yet: wait"),
    pytest.param([1, 2], 1, {2: 10}, True, error_codes.NONE, id="in the ISR"),
    pytest.param(
        [1, 2],
        3,
        {2: 10},
        True,
        error_codes.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        id="in the ISR, but the ISR is below the minimum",
    ),
    pytest.param(
        [1, 2],
        1,
        {2: 9},
        False,
        error_codes.NOT_LEADER_OR_FOLLOWER,
        id="this broker stopped leading",
    ),
]


@pytest.mark.parametrize(("isr", "min_isr", "offsets", "leads", "expected"), REPLICATION_CASES)
def test_replication_status(
    tmp_path: Path,
    isr: list[int],
    min_isr: int,
    offsets: dict[int, int],
    leads: bool,
    expected: ErrorCode | None,
) -> None:
    hosted = leader(tmp_path, 10, min_isr=min_isr, isr=isr)
    for replica, offset in offsets.items():
        hosted.follower_fetched(replica, offset, now_ms=1)
    if not leads:
        hosted.make_follower(2, 6, [2], [1, 2, 3], zk_version=8)
    assert hosted.replication_status(10) is expected


def test_a_leader_epoch_bump_does_not_fail_a_waiting_write(tmp_path: Path) -> None:
    """The controller bumps the epoch for an ISR change it writes (a follower's controlled
    shutdown): the write is in this leader's log, and still waits for the ISR."""
    hosted = leader(tmp_path, 10)
    assert hosted.replication_status(10) is None
    hosted.make_leader(6, [1, 2], [1, 2, 3], zk_version=9, now_ms=2)  # 3 left the ISR
    assert hosted.replication_status(10) is None
    hosted.follower_fetched(2, 10, now_ms=3)
    assert hosted.replication_status(10) is error_codes.NONE


def test_acks_all_refuses_a_write_when_the_isr_is_too_small(tmp_path: Path) -> None:
    hosted = leader(tmp_path, min_isr=3, isr=[1, 2])
    with pytest.raises(KafkaError) as refused:
        hosted.check_min_isr()
    assert refused.value.code == error_codes.NOT_ENOUGH_REPLICAS.code


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        (-1, error_codes.NONE),
        (5, error_codes.NONE),
        (4, error_codes.FENCED_LEADER_EPOCH),
        (6, error_codes.UNKNOWN_LEADER_EPOCH),
    ],
)
def test_leader_epoch_fencing(tmp_path: Path, asked: int, expected: ErrorCode) -> None:
    assert leader(tmp_path).check_leader_epoch(asked) is expected


# --- truncation from epochs ---------------------------------------------------------------


def epochs(tmp_path: Path, starts: list[tuple[int, int]]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in starts:
        cache.assign(epoch, start)
    return cache


TRUNCATION_CASES = [
    # (local epochs (epoch, start), local end, local HW, leader's epoch, leader's end,
    #  expected (target, settled))
    pytest.param([(1, 0), (2, 50)], 80, 40, 2, 80, (80, True), id="same epoch, same end"),
    pytest.param(
        [(1, 0), (2, 50)],
        80,
        40,
        2,
        70,
        (70, True),
        id="the leader's epoch 2 ends earlier: cut there",
    ),
    pytest.param(
        [(1, 0), (2, 50)],
        80,
        40,
        1,
        60,
        (50, True),
        id="the leader knows only epoch 1: cut where mine ended",
    ),
    pytest.param(
        [(1, 0), (3, 50)],
        80,
        40,
        2,
        45,
        (45, False),
        id="an epoch I never had: cut at the older one's end, ask again",
    ),
    pytest.param(
        [(1, 0)],
        80,
        40,
        UNDEFINED_EPOCH,
        -1,
        (40, True),
        id="the leader knows no epochs: my high watermark",
    ),
    pytest.param([], 80, 40, 2, 60, (80, True), id="I know no epochs: keep everything"),
]


@pytest.mark.parametrize(
    ("starts", "end", "hw", "leader_epoch", "leader_end", "expected"), TRUNCATION_CASES
)
def test_truncation_target(
    tmp_path: Path,
    starts: list[tuple[int, int]],
    end: int,
    hw: int,
    leader_epoch: int,
    leader_end: int,
    expected: tuple[int, bool],
) -> None:
    cache = epochs(tmp_path, starts)
    assert truncation_target(cache, end, hw, leader_epoch, leader_end) == expected


# --- fetch from the closest replica (KIP-392) ----------------------------------------------

LEADER = ReplicaView(1, "r1", 100, 0)
SELECTOR_CASES = [
    pytest.param("", [ReplicaView(2, "r2", 100, 0)], 1, id="no client rack: the leader"),
    pytest.param("r1", [ReplicaView(2, "r1", 100, 0)], 1, id="the leader is in the rack"),
    pytest.param("r3", [ReplicaView(2, "r2", 100, 0)], 1, id="no replica in the rack"),
    pytest.param(
        "r2",
        [ReplicaView(2, "r2", 90, 0), ReplicaView(3, "r2", 95, 50)],
        3,
        id="the most caught-up replica in the rack",
    ),
    pytest.param(
        "r2",
        [ReplicaView(2, "r2", 95, 10), ReplicaView(3, "r2", 95, 50)],
        2,
        id="equally far: the most recently caught up",
    ),
]


@pytest.mark.parametrize(("rack", "candidates", "expected"), SELECTOR_CASES)
def test_rack_aware_replica_selector(
    rack: str, candidates: list[ReplicaView], expected: int
) -> None:
    assert rack_aware(rack, LEADER, candidates) == expected


def test_read_replicas_are_followers_holding_the_offset(tmp_path: Path) -> None:
    hosted = leader(tmp_path, 10)
    hosted.follower_fetched(2, 8, now_ms=100)
    assert hosted.read_replicas(5, now_ms=150) == [(2, 8, 150)]  # 3's position is unknown
    assert hosted.read_replicas(9, now_ms=150) == []
