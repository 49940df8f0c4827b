"""ListOffsets answers of a leader replica, on a real partition log (no network)."""

from __future__ import annotations

import uuid
from pathlib import Path

from riverlog.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from riverlog.protocol import error_codes
from riverlog.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from riverlog.server.handlers.offsets import offsets_answer
from riverlog.server.replication.partition import HostedPartition
from riverlog.storage.log import PartitionLog
from tests.storage.logtools import config, make_batch


def ask(
    hosted: HostedPartition, timestamp: int, version: int = 2, *, consumer: bool = True
) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    request = ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)
    return offsets_answer(hosted, request, version, consumer)


def new_leader(tmp_path: Path, records: int) -> HostedPartition:
    """Broker 1 just became leader (epoch 3, ISR 1 and 2) of a log holding `records` records
    whose high watermark it has not learnt: the follower has not fetched from it yet."""
    log = PartitionLog(tmp_path / "t-0", config())
    log.append(make_batch([(None, b"v", 1_000 + i) for i in range(records)]), leader_epoch=2)
    hosted = HostedPartition("t", 0, uuid.uuid4(), log, local_id=1)
    hosted.make_leader(3, isr=[1, 2], replicas=[1, 2], zk_version=5, now_ms=0)
    return hosted


def test_a_new_leader_behind_on_its_high_watermark_says_offsets_are_not_available(
    tmp_path: Path,
) -> None:
    hosted = new_leader(tmp_path, 10)
    assert hosted.log.high_watermark == 0 and hosted.leader_epoch_start == 10
    not_available = error_codes.OFFSET_NOT_AVAILABLE.code
    assert ask(hosted, LATEST_TIMESTAMP).error_code == not_available
    assert ask(hosted, 1_005, version=5).error_code == not_available
    earliest = ask(hosted, EARLIEST_TIMESTAMP)
    assert (earliest.error_code, earliest.offset) == (0, 0)
    # Versions before isolation levels (v0, v1) and replicas get what the log says.
    assert ask(hosted, LATEST_TIMESTAMP, version=1).offset == 0
    assert ask(hosted, LATEST_TIMESTAMP, consumer=False).offset == 10

    # the follower's first fetch: HW 10
    assert hosted.follower_fetched(2, 10, now_ms=1).high_watermark_moved
    latest = ask(hosted, LATEST_TIMESTAMP)
    assert (latest.error_code, latest.offset, latest.leader_epoch) == (0, 10, 3)
    by_time = ask(hosted, 1_005, version=5)
    assert (by_time.error_code, by_time.offset) == (0, 5)
