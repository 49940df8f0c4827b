"""State-change log lines: Kafka's layout, one partition named per line, nothing formatted
while the logger is off."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator

import pytest

from riverlog.metadata.layout import PartitionState
from riverlog.protocol.messages import LeaderAndIsrRequest, StopReplicaRequest
from riverlog.server import state_change_log as scl


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(scl.TRACE)
        self.setFormatter(logging.Formatter(scl.LINE_FORMAT))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def lines() -> Iterator[list[str]]:
    handler = Lines()
    logger = logging.getLogger(scl.LOGGER_NAME)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(scl.TRACE)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_partition_change_line_in_kafkas_layout(lines: list[str]) -> None:
    before = PartitionState(1, 3, [1, 2, 3], 2)
    scl.partition_changed(1, 3, ("t", 0), before, PartitionState(-1, 4, [3], 3), 7)
    assert len(lines) == 1
    assert re.fullmatch(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] TRACE \[Controller id=1 epoch=3\] Changed "
        r"partition t-0 from OnlinePartition to OfflinePartition with state LeaderAndIsr\("
        r"leader=-1, leaderEpoch=4, isr=\[3\], zkVersion=7\) \(state\.change\.logger\)",
        lines[0],
    )
    scl.partition_changed(1, 3, ("t", 1), None, PartitionState(2, 0, [2, 3], 3), 0)
    assert "from NewPartition to OnlinePartition" in lines[1]


def test_requests_sent_name_each_partition_and_the_role(lines: list[str]) -> None:
    request = LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=3,
        topic_states=[
            LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name="t",
                topic_id=uuid.uuid4(),
                partition_states=[
                    LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                        partition_index=p,
                        leader=p + 1,
                        leader_epoch=4,
                        isr=[1, 2],
                        replicas=[1, 2],
                        partition_epoch=9,
                    )
                    for p in (0, 1)
                ],
            )
        ],
    )
    scl.request_sent(2, request)
    assert [line.split("] ", 2)[2].split(" LeaderAndIsr")[0] for line in lines] == [
        "Sending become-follower",
        "Sending become-leader",
    ]
    assert lines[0].endswith("to broker 2 for partition t-0 (state.change.logger)")
    assert "leaderEpoch=4, isr=[1, 2], zkVersion=9, replicas=[1, 2]" in lines[0]
    stop = StopReplicaRequest(
        controller_id=1,
        controller_epoch=3,
        topic_states=[
            StopReplicaRequest.StopReplicaTopicState(
                topic_name="t",
                partition_states=[
                    StopReplicaRequest.StopReplicaPartitionState(
                        partition_index=5, delete_partition=True, leader_epoch=-2
                    )
                ],
            )
        ],
    )
    scl.request_sent(3, stop)
    assert (
        "Sending StopReplica request (delete=true, leaderEpoch=-2) to broker 3 for "
        "partition t-5" in lines[-1]
    )


def test_isr_changes_say_which_way(lines: list[str]) -> None:
    scl.isr_changed(1, ("t", 2), [1, 2, 3], [1, 3], 5, 11)
    scl.isr_changed(1, ("t", 2), [1, 3], [1, 3, 2], 5, 12)
    assert (
        "[Broker id=1] Shrunk ISR of partition t-2 from [1, 2, 3] to [1, 3] at leader "
        "epoch 5 (zkVersion 11)" in lines[0]
    )
    assert "Expanded ISR of partition t-2 from [1, 3] to [1, 3, 2]" in lines[1]


def test_off_unless_switched_on() -> None:
    """A process that set up no state-change log (a test, a tool) gets no lines from it."""
    handler = Lines()
    logger = logging.getLogger(scl.LOGGER_NAME)
    logger.addHandler(handler)
    try:
        scl.partition_changed(1, 1, ("t", 0), None, PartitionState(1, 0, [1], 1), 0)
        scl.isr_changed(1, ("t", 0), [1], [1, 2], 0, 1)
    finally:
        logger.removeHandler(handler)
    assert handler.lines == []
