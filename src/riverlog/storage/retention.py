"""Retention: which whole segments a partition log may delete now.

Kafka's three rules, applied to a prefix of the segment list (a segment is deleted only if
every older one is too):
- time (`retention.ms` ≥ 0, `cleanup.policy` has `delete`): the segment's largest timestamp
  (its file's mtime when it has none) is older than `retention.ms`;
- size (`retention.bytes` ≥ 0, `delete` policy): deleting it keeps the log at or above
  `retention.bytes`;
- log start offset (any policy): the whole segment lies below the log start offset, which
  DeleteRecords moves.
Only data below the high watermark goes. When every segment is expired, the log rolls a new
empty segment at its end first, so the log end offset survives.
"""

from __future__ import annotations

from riverlog.storage.log import PartitionLog
from riverlog.storage.segment import LogSegment


def _largest_timestamp(seg: LogSegment) -> int:
    return seg.max_timestamp if seg.max_timestamp >= 0 else seg.last_modified_ms()


def deletable_segments(log: PartitionLog, now_ms: int) -> list[LogSegment]:
    config = log.config
    segments = log.segments
    total = sum(s.size for s in segments)
    doomed: list[LogSegment] = []
    for seg in segments:
        if seg.size == 0 or seg.next_offset > log.high_watermark:
            break
        below_start = seg.next_offset <= log.log_start_offset
        expired = (
            config.delete
            and config.retention_ms >= 0
            and now_ms - _largest_timestamp(seg) > config.retention_ms
        )
        too_big = (
            config.delete
            and config.retention_bytes >= 0
            and (total - seg.size >= config.retention_bytes)
        )
        if not (below_start or expired or too_big):
            break
        doomed.append(seg)
        total -= seg.size
    return doomed


def apply_retention(log: PartitionLog, now_ms: int) -> int:
    """Delete what retention allows; returns the number of segments deleted."""
    with log.lock:
        doomed = deletable_segments(log, now_ms)
        if doomed:
            log.remove_segments(doomed)
        return len(doomed)
