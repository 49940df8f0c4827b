"""The time-lag estimate (pure): interpolated from the end offsets seen at scrapes."""

from __future__ import annotations

import pytest

from riverlog.server.metrics.lag import EndOffsetHistory

TP = ("t", 0)


def test_seconds_behind_interpolates_between_scrapes() -> None:
    ends = EndOffsetHistory()
    ends.observe(TP, 10_000, 100)
    ends.observe(TP, 20_000, 200)  # offsets 100..199 written between t=10 s and t=20 s
    ends.observe(TP, 30_000, 200)  # quiet: no new point
    assert ends.seconds_behind(TP, 200, 30_000) == 0.0  # caught up
    # the record at offset 149 is the 50th of 100 written in those 10 s: at t=15 s
    assert ends.seconds_behind(TP, 149, 30_000) == pytest.approx(15.0)
    # older than every point: at least as old as the oldest point
    assert ends.seconds_behind(TP, 20, 30_000) == pytest.approx(20.0)
    assert ends.seconds_behind(("t", 1), 5, 30_000) == 0.0  # never seen


def test_a_truncated_log_starts_again_and_unwatched_partitions_are_dropped() -> None:
    ends = EndOffsetHistory(keep=3)
    for i in range(5):
        ends.observe(TP, i * 1_000, (i + 1) * 10)
    ends.observe(TP, 9_000, 5)  # recreated: earlier points no longer describe it
    assert ends.seconds_behind(TP, 0, 10_000) == pytest.approx(1.0)
    ends.forget_except(set())
    assert ends.seconds_behind(TP, 0, 10_000) == 0.0
