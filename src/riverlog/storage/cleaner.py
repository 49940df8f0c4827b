"""Log compaction (`cleanup.policy=compact`): keep the latest record per key in a partition log.

Owns: the per-partition first dirty offset (`LogCleaner.offsets`, (topic, partition) → offset,
Kafka's `cleaner-offset-checkpoint`; the owner of the data directory persists it with
`write_checkpoint`), and the cleaned segment files until they are swapped into the log.

One pass over a log (`clean`):
1. The cleanable range is [first dirty offset, end): `end` is the next offset of the last
   segment of the longest prefix of non-active segments that lie wholly below the high
   watermark and the last stable offset and whose newest record is older than
   `min.compaction.lag.ms`. The active segment is never touched.
2. An offset map key → latest offset is built over the dirty part [first dirty, end).
3. The segments of [log start, end) are rewritten, in groups of consecutive segments whose
   total size fits `segment.bytes`, keeping a record iff it has a key and no later offset in
   the map (records without a key go, as Kafka's cleaner drops them). Each group is written
   to `<base>.log.cleaned`, fsynced, renamed to `.swap`, then swapped in by
   `PartitionLog.replace_segments` (a crash after the `.swap` rename is completed on load by
   `storage/log_recovery.py`: `complete_swaps`; `.cleaned` leftovers are deleted on load).
4. The first dirty offset becomes `end`.

Rules and invariants:
- Offsets never change: a rewritten batch keeps its base offset, last offset delta (so the
  producer's last sequence), producer id/epoch/base sequence, partition leader epoch,
  compression and timestamp type; only its records are filtered.
- Tombstones (value None) that are the latest for their key are dropped once
  `now - mtime(segment) > delete.retention.ms`; a cleaned segment takes the newest mtime of
  the segments it replaces, so rewriting does not restart the clock (Kafka's legacy rule, on
  the wall clock).
- A batch whose records all go is dropped, except (as an empty header-only batch) the last
  batch of a group — so the cleaned segment's next offset covers the whole group and a
  `.swap` found after a crash replaces exactly the right segments — and the last data batch
  of each producer known to the log's producer state (Kafka keeps it for producer state).
  An empty batch no longer needed (by either rule) goes in a later pass.
- Transactions, as Kafka's cleaner: every transaction in the cleanable range is decided
  (it lies below the last stable offset). Batches of aborted transactions (the log's
  `.txnindex`) are removed and never enter the offset map; committed transactional data is
  compacted like any other. A marker (control batch) goes once no data of its transaction
  is left before it and its segment is older than `delete.retention.ms`, as tombstones do.
  A cleaned segment carries the `.txnindex` entries of the segments it replaces.
- Appends are never blocked by the expensive part: the offset map and the cleaned files are
  built without `log.lock`; the lock is held only to snapshot the segment list and for the
  swap, which is abandoned if any segment of the group left the log or changed meanwhile.
- A batch whose records cannot be read (corrupted on disk; decompression is bounded) is
  copied verbatim with a warning and its records shadow nothing: cleaning never raises on it.
- The offset map is an unbounded dict (Kafka's is bounded, cleaning in several passes).
- One `LogCleaner` is used by one thread at a time.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from riverlog.model import TopicPartition
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.records.batch_header import (
    BatchHeader,
    read_batch_header,
)
from riverlog.protocol.records.v2 import Record, decode_batch, encode_batch
from riverlog.storage import checkpoint
from riverlog.storage.log import PartitionLog
from riverlog.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    BatchPosition,
    LogSegment,
    segment_name,
)
from riverlog.storage.txn_index import TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)


_MAX_GROUP_OFFSETS = 2**31 - 1


@dataclass(slots=True)
class CleanResult:
    """What one pass did; `end_offset` is the new first dirty offset (the end of the
    cleanable range, or the base of the first group whose swap was abandoned)."""

    first_dirty_offset: int
    end_offset: int
    segments_replaced: int = 0
    groups_aborted: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    keys: int = 0


@dataclass(slots=True)
class _Writer:  # batches buffered for a cleaned segment
    segment: LogSegment
    limit: int
    chunks: list[bytes] = field(default_factory=list)
    headers: list[BatchHeader] = field(default_factory=list)
    buffered: int = 0
    written: int = 0

    def add(self, data: bytes, header: BatchHeader) -> None:
        self.chunks.append(data)
        self.headers.append(header)
        self.buffered += len(data)
        if self.buffered >= self.limit:
            self.drain()

    def drain(self) -> None:
        if self.chunks:
            self.segment.append(b"".join(self.chunks), self.headers)
            self.written += self.buffered
            self.chunks, self.headers, self.buffered = [], [], 0


def topic_partition(partition_log: PartitionLog) -> TopicPartition:
    """(topic, partition) from the log's directory name `<topic>-<partition>`."""
    topic, _, partition = partition_log.directory.name.rpartition("-")
    if not topic or not partition.isdigit():
        raise ValueError(f"{partition_log.directory} is not a <topic>-<partition> directory")
    return topic, int(partition)


class LogCleaner:
    """Compacts partition logs; `clean_if_needed` fits `LogManager.cleaner`."""

    def __init__(
        self,
        offsets: dict[TopicPartition, int] | None = None,
        *,
        io_buffer_bytes: int = 1 << 20,
    ) -> None:
        self.offsets: dict[TopicPartition, int] = {} if offsets is None else offsets
        self.io_buffer_bytes = io_buffer_bytes

    # --- checkpoint ----------------------------------------------------------------------

    @classmethod
    def from_checkpoint(cls, data_dir: Path) -> LogCleaner:
        """A cleaner resuming from `<data_dir>/cleaner-offset-checkpoint` (empty if unreadable)."""
        try:
            offsets = checkpoint.read_offsets(data_dir / checkpoint.CLEANER_OFFSET_FILE)
        except checkpoint.CorruptCheckpointError as e:
            log.warning("ignoring the cleaner checkpoint: %s", e)
            offsets = {}
        return cls(offsets)

    def write_checkpoint(self, data_dir: Path, keys: list[TopicPartition] | None = None) -> None:
        """Write the offsets of `keys` (the logs in `data_dir`; default all)."""
        offsets = dict(self.offsets)
        if keys is not None:
            offsets = {tp: offsets[tp] for tp in keys if tp in offsets}
        checkpoint.write_offsets(data_dir / checkpoint.CLEANER_OFFSET_FILE, offsets)

    def forget(self, tp: TopicPartition) -> None:
        self.offsets.pop(tp, None)  # the partition was deleted

    # --- what is dirty -------------------------------------------------------------------

    def first_dirty_offset(self, partition_log: PartitionLog) -> int:
        """The checkpointed first dirty offset, or the log start when unknown or out of range
        (e.g. after truncation or retention)."""
        start = partition_log.log_start_offset
        offset = self.offsets.get(topic_partition(partition_log), start)
        if offset < start or offset > partition_log.log_end_offset:
            return start
        return offset

    def dirty_ratio(self, partition_log: PartitionLog) -> float:
        """Bytes of non-active segments at or after the first dirty offset / all their bytes."""
        first = self.first_dirty_offset(partition_log)
        total = dirty = 0
        for seg in partition_log.segments[:-1]:
            total += seg.size
            if seg.next_offset <= first:
                continue
            dirty += seg.size - (seg.position_of(first) if seg.base_offset < first else 0)
        return dirty / total if total else 0.0

    @staticmethod
    def cleanable_segments(partition_log: PartitionLog, now_ms: int) -> list[LogSegment]:
        """The prefix of non-active segments below the high watermark and the compaction lag."""
        lag_horizon = now_ms - partition_log.config.min_compaction_lag_ms
        out: list[LogSegment] = []
        for seg in partition_log.segments[:-1]:
            newest = seg.max_timestamp if seg.max_timestamp >= 0 else seg.last_modified_ms()
            if (
                seg.next_offset > partition_log.high_watermark
                or seg.next_offset > partition_log.last_stable_offset
                or newest > lag_horizon
            ):
                break
            out.append(seg)
        return out

    def clean_if_needed(self, partition_log: PartitionLog, now_ms: int) -> CleanResult | None:
        """Clean when the log compacts, has a cleanable dirty range and its dirty ratio reaches
        `min.cleanable.dirty.ratio` (or dirty data is older than `max.compaction.lag.ms`)."""
        config = partition_log.config
        if not config.compact:
            return None
        first = self.first_dirty_offset(partition_log)
        cleanable = self.cleanable_segments(partition_log, now_ms)
        dirty = [s for s in cleanable if s.next_offset > first and s.size]
        if not dirty:
            return None
        overdue = any(
            0 <= s.first_batch_timestamp < now_ms - config.max_compaction_lag_ms for s in dirty
        )
        if not overdue and self.dirty_ratio(partition_log) < config.min_cleanable_dirty_ratio:
            return None
        return self.clean(partition_log, now_ms)

    # --- cleaning ------------------------------------------------------------------------

    def clean(self, partition_log: PartitionLog, now_ms: int) -> CleanResult:
        """One compaction pass (see the module docstring); updates `offsets`."""
        with partition_log.lock:
            first = self.first_dirty_offset(partition_log)
            cleanable = self.cleanable_segments(partition_log, now_ms)
            sizes = {id(s): s.size for s in cleanable}
            producer_last = {
                pid: entry.batches[-1].last_offset
                for pid, entry in partition_log.producers.producers.items()
                if entry.batches
            }
        end = cleanable[-1].next_offset if cleanable else first
        result = CleanResult(first, max(first, end))
        if end <= first:
            return result
        aborted = _Aborted(partition_log, cleanable[0].base_offset, end)
        offset_map = self._build_offset_map(cleanable, first, aborted)
        result.keys = len(offset_map)
        txn_data: dict[int, bool] = {}  # producer id -> data of its transaction kept
        for group in _group_by_size(cleanable, partition_log.config.segment_bytes):
            if not self._clean_group(
                partition_log,
                group,
                sizes,
                offset_map,
                producer_last,
                now_ms,
                result,
                aborted,
                txn_data,
            ):
                # The group stays as it was: it is dirty again (the log moved under us).
                result.end_offset = min(result.end_offset, group[0].base_offset)
        self.offsets[topic_partition(partition_log)] = result.end_offset
        log.info("%s: cleaned [%d, %d): %s", partition_log.directory.name, first, end, result)
        return result

    @staticmethod
    def _build_offset_map(
        segments: list[LogSegment], first: int, aborted: _Aborted
    ) -> dict[bytes, int]:
        offset_map: dict[bytes, int] = {}
        for seg in segments:
            if seg.next_offset <= first:
                continue
            start = seg.offset_index.lookup(first) if seg.base_offset < first else 0
            for found in seg.batches_from(start, seg.size):
                header = found.header
                if header.last_offset < first or header.is_control or aborted.holds(header):
                    continue
                for record in _records(seg, found):
                    if record.key is not None and record.offset >= first:
                        offset_map[record.key] = record.offset
        return offset_map

    def _clean_group(
        self,
        partition_log: PartitionLog,
        group: list[LogSegment],
        sizes: dict[int, int],
        offset_map: dict[bytes, int],
        producer_last: dict[int, int],
        now_ms: int,
        result: CleanResult,
        aborted: _Aborted,
        txn_data: dict[int, bool],
    ) -> bool:
        """Clean one group of segments; False if the log changed and the swap was skipped."""
        config = partition_log.config
        directory = partition_log.directory
        base = group[0].base_offset
        name = segment_name(base)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            (directory / (name + suffix + CLEANED_SUFFIX)).unlink(missing_ok=True)
        cleaned = LogSegment(directory, base, config.index_interval_bytes, suffix=CLEANED_SUFFIX)
        writer = _Writer(cleaned, self.io_buffer_bytes)
        changed = len(group) > 1
        removed = 0
        try:
            for seg in group:
                retain_deletes = now_ms - seg.last_modified_ms() <= config.delete_retention_ms
                for found in seg.batches_from(0, sizes[id(seg)]):
                    header = found.header
                    result.bytes_read += header.size
                    raw = seg.read_bytes(found.position, header.size)
                    last_of_group = (
                        seg is group[-1] and found.position + header.size == sizes[id(seg)]
                    )
                    if header.is_control:
                        if (
                            txn_data.pop(header.producer_id, False)
                            or retain_deletes
                            or last_of_group
                        ):
                            writer.add(raw, header)
                        else:
                            changed = True
                            removed += header.records_count
                        continue
                    try:
                        records = decode_batch(raw)[0].records
                    except ProtocolError as e:  # corrupted on disk: keep it as it is
                        log.warning(
                            "%s: batch at offset %d cannot be read, kept uncleaned: %s",
                            directory.name,
                            header.base_offset,
                            e,
                        )
                        writer.add(raw, header)
                        continue
                    dropped = aborted.holds(header)
                    kept = [
                        r
                        for r in records
                        if r.key is not None
                        and not dropped
                        and offset_map.get(r.key, r.offset) <= r.offset
                        and (r.value is not None or retain_deletes)
                    ]
                    if kept and header.is_transactional:
                        txn_data[header.producer_id] = True
                    producers_last = producer_last.get(header.producer_id) == header.last_offset
                    keep_empty = last_of_group or (header.has_producer_id and producers_last)
                    if len(kept) == len(records) and (kept or keep_empty):
                        writer.add(raw, header)
                        continue
                    changed = True
                    removed += len(records) - len(kept)
                    if kept or keep_empty:
                        data = _rebuild(header, kept)
                        writer.add(data, read_batch_header(data))
            writer.drain()
            for seg in group:
                for entry in seg.txn_index.entries:
                    cleaned.txn_index.append(entry)
            if not changed:
                _discard(cleaned)
                return True
            mtime = max(s.last_modified_ms() for s in group)
            os.utime(cleaned.log_path, ns=(mtime * 1_000_000, mtime * 1_000_000))
            cleaned.flush()
            cleaned.rename_suffix(SWAP_SUFFIX)
            checkpoint.fsync_dir(directory)
        except BaseException:
            _discard(cleaned)
            raise
        with partition_log.lock:
            current = [id(s) for s in partition_log.segments[:-1]]  # never the active one
            at = current.index(id(group[0])) if id(group[0]) in current else len(current)
            swappable = current[at : at + len(group)] == [id(s) for s in group] and all(
                seg.size == sizes[id(seg)] for seg in group
            )
            if swappable:
                partition_log.replace_segments(group, cleaned)
        if not swappable:
            log.info("%s: segments %d.. changed during cleaning, skipped", directory.name, base)
            result.groups_aborted += 1
            _discard(cleaned)
            return False
        checkpoint.fsync_dir(directory)
        result.segments_replaced += len(group)
        result.bytes_written += writer.written
        result.records_removed += removed
        return True


class _Aborted:
    """Which transactional batches belong to aborted transactions (from the `.txnindex`)."""

    def __init__(self, partition_log: PartitionLog, start: int, end: int) -> None:
        self.ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in partition_log.aborted_transactions(start, end):
            self.ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))

    def holds(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        return any(
            first <= header.base_offset <= last
            for first, last in self.ranges.get(header.producer_id, ())
        )


def _records(seg: LogSegment, found: BatchPosition) -> list[Record]:
    """The batch's records; none for a batch that cannot be read (cleaning keeps it whole)."""
    try:
        return decode_batch(seg.read_bytes(found.position, found.header.size))[0].records
    except ProtocolError:
        return []


def _rebuild(header: BatchHeader, records: list[Record]) -> bytes:
    """The batch with only `records`, every header field kept but the timestamps and CRC
    (the last offset delta is kept as Kafka does, so the producer's last sequence stays)."""
    return encode_batch(
        records,
        base_offset=header.base_offset,
        compression_type=header.compression,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        last_offset_delta=header.last_offset_delta,
        empty_timestamp=header.max_timestamp,
    )


def _group_by_size(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments whose total size fits `max_bytes` (and offsets an int32 range)."""
    groups: list[list[LogSegment]] = []
    size = 0
    for seg in segments:
        current = groups[-1] if groups else None
        if (
            current is None
            or size + seg.size > max_bytes
            or seg.next_offset - current[0].base_offset > _MAX_GROUP_OFFSETS
        ):
            groups.append([seg])
            size = seg.size
        else:
            current.append(seg)
            size += seg.size
    return groups


def _discard(seg: LogSegment) -> None:
    seg.close()
    seg.delete_files()
