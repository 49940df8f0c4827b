"""The console's memory of the cluster over time: consumer lag per group and topic, and each
topic's log end, size and consumed offsets, sampled every few seconds and kept in memory for
the last hours. Pure: samples come in with their time (`at_ms`); nothing here does I/O.

Lag over time is what Kafka keeps nowhere, so the console keeps it itself. Throughput is
derived from the same samples when the cluster offers no metrics: messages in per second from
the growth of the log end offsets, bytes in from the growth of the partitions' sizes, messages
out from the growth of the groups' committed offsets, and bytes out estimated as messages out
times the topic's mean record size (its size over its records in the log).

Invariants: every series holds points in time order, none older than `keep_ms` before the
newest sample; memory is bounded by groups x topics x (keep_ms / interval), not by partitions.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field

from riverlog.model import TopicPartition


@dataclass(frozen=True)
class Sample:
    """What the sampler saw at one moment."""

    at_ms: int
    end_offsets: dict[TopicPartition, int]
    start_offsets: dict[TopicPartition, int]
    sizes: dict[TopicPartition, int]
    committed: dict[str, dict[TopicPartition, int]]
    """Per group, its committed offsets."""
    states: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicPoint:
    at_ms: int
    end: int
    records: int
    size: int
    consumed: int
    """Sum over groups of their committed offsets on this topic."""


@dataclass(frozen=True)
class Rates:
    """Per-second rates between consecutive samples (the first point has none)."""

    at_s: list[float]
    messages_in: list[float]
    bytes_in: list[float]
    messages_out: list[float]
    bytes_out: list[float]


def group_lag(sample: Sample, group: str) -> dict[str, int]:
    """The group's lag per topic in `sample` (end - committed, never below 0)."""
    out: dict[str, int] = {}
    for tp, offset in sample.committed.get(group, {}).items():
        end = sample.end_offsets.get(tp)
        if end is not None:
            out[tp[0]] = out.get(tp[0], 0) + max(end - offset, 0)
    return out


class History:
    def __init__(self, keep_ms: int) -> None:
        self.keep_ms = keep_ms
        self.latest: Sample | None = None
        self.samples = 0
        self._lag: dict[str, deque[tuple[int, dict[str, int]]]] = {}
        self._topics: dict[str, deque[TopicPoint]] = {}

    def add(self, sample: Sample) -> None:
        if self.latest is not None and sample.at_ms <= self.latest.at_ms:
            raise ValueError("samples must arrive in time order")
        self.latest = sample
        self.samples += 1
        for group in sample.committed:
            self._lag.setdefault(group, deque()).append((sample.at_ms, group_lag(sample, group)))
        totals: dict[str, list[int]] = {}
        for tp, end in sample.end_offsets.items():
            t = totals.setdefault(tp[0], [0, 0, 0, 0])
            t[0] += end
            t[1] += end - sample.start_offsets.get(tp, 0)
            t[2] += sample.sizes.get(tp, 0)
        for offsets in sample.committed.values():
            for tp, offset in offsets.items():
                if tp[0] in totals:
                    totals[tp[0]][3] += offset
        for topic, (end, records, size, consumed) in totals.items():
            self._topics.setdefault(topic, deque()).append(
                TopicPoint(sample.at_ms, end, records, size, consumed)
            )
        self._prune(sample.at_ms - self.keep_ms)

    def _prune(self, oldest_ms: int) -> None:
        for series in (self._lag, self._topics):
            for name in list(series):
                points = series[name]
                while points and _at(points[0]) < oldest_ms:
                    points.popleft()
                if not points:
                    del series[name]

    def lag_series(self, group: str) -> tuple[list[float], dict[str, list[int]]]:
        """Times (seconds) and, per topic, the group's lag at each time (0 where absent)."""
        points = self._lag.get(group, deque())
        topics = sorted({t for _, lag in points for t in lag})
        return (
            [at / 1000 for at, _ in points],
            {t: [lag.get(t, 0) for _, lag in points] for t in topics},
        )

    def rates(self, topic: str) -> Rates:
        points = list(self._topics.get(topic, ()))
        out = Rates([], [], [], [], [])
        for before, after in itertools.pairwise(points):
            seconds = (after.at_ms - before.at_ms) / 1000
            mean_record = after.size / after.records if after.records > 0 else 0.0
            consumed = max(after.consumed - before.consumed, 0) / seconds
            out.at_s.append(after.at_ms / 1000)
            out.messages_in.append(max(after.end - before.end, 0) / seconds)
            out.bytes_in.append(max(after.size - before.size, 0) / seconds)
            out.messages_out.append(consumed)
            out.bytes_out.append(consumed * mean_record)
        return out

    def topics(self) -> list[str]:
        return sorted(self._topics)


def _at(point: tuple[int, dict[str, int]] | TopicPoint) -> int:
    return point.at_ms if isinstance(point, TopicPoint) else point[0]
