"""ListOffsets' search by time over a partition log's segments
(`PartitionLog.offset_for_timestamp`).

Owns the timestamp sentinels' answers (-1 latest: the log end; -2 earliest: the log start;
-3: the first record holding the largest timestamp) and the search for the first record at
or after a timestamp: segments by their largest timestamp, then the time index, then the
records of each batch from there.

Invariants: no record below the log start offset is ever answered (a batch reaching the
timestamp may hold only such records: the search goes on past it); a batch whose records
cannot be read (corrupted on disk) is skipped with a warning, never raised; it takes no lock
and reads the log as any reader does (its `segments` tuple, replaced on write).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from riverlog.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.records.v2 import Record, decode_records
from riverlog.storage.segment import BatchPosition, LogSegment

log = logging.getLogger(__name__)

MAX_TIMESTAMP = -3


class SearchedLog(Protocol):
    """What the search reads of a `PartitionLog` (storage/log.py)."""

    directory: Path
    segments: tuple[LogSegment, ...]
    log_start_offset: int

    @property
    def log_end_offset(self) -> int: ...


def offset_for_timestamp(plog: SearchedLog, timestamp: int) -> tuple[int, int] | None:
    """ListOffsets: (offset, timestamp) of the first record at or after `timestamp`;
    -1 latest, -2 earliest, -3 the record with the largest timestamp."""
    segments = plog.segments
    if timestamp == LATEST_TIMESTAMP:
        return plog.log_end_offset, -1
    if timestamp == EARLIEST_TIMESTAMP:
        return plog.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        best = max(segments, key=lambda s: s.max_timestamp)
        if best.max_timestamp < 0:
            return None
        target = best.max_timestamp
        records = _records_at(plog, best, best.find_timestamp(target))
        for r in records:
            if r.timestamp == target:
                return r.offset, target
        return None
    for seg in segments:
        if seg.max_timestamp < timestamp or seg.next_offset <= plog.log_start_offset:
            continue
        found = seg.find_timestamp(timestamp)
        if found is None:
            continue
        # The first batch reaching `timestamp` may hold only records below the log
        # start offset (DeleteRecords): keep looking in the batches after it.
        for batch in seg.batches_from(found.position):
            if batch.header.last_offset < plog.log_start_offset:
                continue
            if batch.header.max_timestamp < timestamp:
                continue
            for r in _records_at(plog, seg, batch):
                if r.timestamp >= timestamp and r.offset >= plog.log_start_offset:
                    return r.offset, r.timestamp
    return None


def _records_at(plog: SearchedLog, seg: LogSegment, found: BatchPosition | None) -> list[Record]:
    """The records of a batch; none (and a warning) for one whose records cannot be read
    (corrupted on disk): the search goes on past it."""
    if found is None:
        return []
    raw = seg.read_bytes(found.position, found.header.size)
    try:
        return decode_records(found.header, memoryview(raw)[61:])
    except ProtocolError as e:
        log.warning(
            "%s: batch at offset %d cannot be read, skipped: %s",
            plog.directory,
            found.header.base_offset,
            e,
        )
        return []
