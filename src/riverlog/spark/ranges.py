"""Offset ranges: what one Spark task reads, and how a query's work is cut into them.

Owns `OffsetRange` (one topic-partition's offsets [start, until)), `split_ranges` (one range
per partition, or more when `minPartitions` asks for more tasks than there are partitions:
Spark's KafkaOffsetRangeCalculator rule) and `rate_limit` (`maxOffsetsPerTrigger` spread
over partitions in proportion to their backlog, Spark's rule: a partition's share is rounded
down, but up to 1 when below 1 so no partition starves). Pure functions of offsets.

Invariants: ranges never overlap and together cover exactly the offsets asked for; a limited
end never passes the latest offset nor goes below the start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from riverlog.model import TopicPartition


@dataclass(frozen=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    until: int

    @property
    def size(self) -> int:
        return self.until - self.start


def ranges_between(
    start: Mapping[TopicPartition, int], until: Mapping[TopicPartition, int]
) -> list[OffsetRange]:
    """The non-empty ranges from `start` to `until`, sorted (partitions missing from `start`
    are the caller's to resolve first)."""
    return sorted(
        OffsetRange(tp[0], tp[1], start[tp], end) for tp, end in until.items() if end > start[tp]
    )


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """`ranges` as Spark tasks: unchanged unless `min_partitions` exceeds their number, then
    each range is cut into parts in proportion to its share of all offsets (at least one)."""
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(round(r.size / total * min_partitions), 1)
        step, extra = divmod(r.size, parts)
        begin = r.start
        for i in range(parts):
            end = begin + step + (1 if i < extra else 0)
            if end > begin:
                out.append(OffsetRange(r.topic, r.partition, begin, end))
            begin = end
    return out


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """The end offsets of a micro-batch reading at most about `limit` offsets from `start`
    towards `latest` (every partition in `latest` must be in `start`)."""
    sizes = {tp: end - start[tp] for tp, end in latest.items() if end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        size = sizes.get(tp)
        if size is None:
            out[tp] = end
            continue
        share = limit * size / total
        step = int(share) if share >= 1 else 1
        out[tp] = min(end, start[tp] + step)
    return out
