"""One partition's log: an ordered list of segments, appends, reads, roll, truncation.

Directory `<data-dir>/<topic>-<partition>/` holds `<base offset, 20 digits>.log|.index|
.timeindex` per segment, producer-state snapshots and the `leader-epoch-checkpoint`.

Concurrency: one writer at a time (appends, roll, truncation, retention, the cleaner's swap
all take `self.lock`); readers take no lock — they read `self.segments`, a tuple replaced (copy
on write) whenever segments are added or removed, so a reader in progress keeps a consistent
view, and a removed segment's descriptor stays open for `file.delete.delay.ms`.

Transactions: the producer state tracks open transactions; a marker (control batch, written
by `append_marker` on the leader, copied by followers) closes one, and an aborted one is
recorded in the `.txnindex` of the segment holding its marker. The last stable offset is the
high watermark or, if lower, the first offset of a transaction still open or whose marker is
not yet replicated (READ_COMMITTED reads stop there).

Offsets: `log_start_offset` ≤ `last_stable_offset` ≤ `high_watermark` ≤ `log_end_offset`.
Reads beyond the end or below the start raise OFFSET_OUT_OF_RANGE. The recovery point is
the offset below which everything has been fsynced; which segments the log opens with
(leftovers, a cleaner's swap, recovery after an unclean shutdown) is decided by
`storage/log_recovery.py`; the log replays its producer state from them. A roll is flushed
by the next housekeeping.
"""

from __future__ import annotations

import errno
import logging
import shutil
import threading
from bisect import bisect_right
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

from riverlog.clock import SYSTEM_CLOCK
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.primitives import FileRegion
from riverlog.protocol.records.batch_header import (
    CONTROL_BIT,
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    BatchHeader,
    place_batch,
)
from riverlog.storage import checkpoint
from riverlog.storage.epoch_cache import LeaderEpochCache
from riverlog.storage.log_config import LogConfig
from riverlog.storage.log_recovery import rebuild_epochs_if_missing, recover_segments
from riverlog.storage.markers import encode_marker, read_marker
from riverlog.storage.producer_state import (
    CompletedTxn,
    ProducerStateManager,
    VerificationGuard,
)
from riverlog.storage.segment import DELETED_SUFFIX, LogSegment
from riverlog.storage.timestamp_search import offset_for_timestamp
from riverlog.storage.txn_index import AbortedTxn
from riverlog.storage.validation import assign_offsets, validate_batches

log = logging.getLogger(__name__)


class AppendResult(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False


_new_tuple = tuple.__new__


class ReadResult(NamedTuple):
    """Record data for a fetch: a file region (or None when there is nothing to return)."""

    records: FileRegion | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.directory = directory
        self.config = config
        self.lock = threading.RLock()
        self._now: Callable[[], int] = clock_ms or SYSTEM_CLOCK.wall_ms
        directory.mkdir(parents=True, exist_ok=True)
        self.epochs = LeaderEpochCache(directory)
        self.producers = ProducerStateManager(directory)
        self._unreplicated_txns: list[CompletedTxn] = []
        self.segments: tuple[LogSegment, ...] = ()
        self.pending_deletes: list[tuple[int, LogSegment]] = []
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.unflushed_messages = 0
        self._full = False  # the last append hit a full disk (warned once)
        self.last_flush_ms = self._now()
        self.flush_due = False  # a segment was rolled: flush soon (as Kafka at every roll)
        self._load(clean_shutdown)
        self.high_watermark = self.log_end_offset

    # --- state -------------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_high_watermark(self, offset: int) -> None:
        # max(log start, min(offset, log end)) without the builtins (~800 instructions a
        # call, parsing keywords: this runs on every acks=all append; issue 29)
        end = self.segments[-1].next_offset
        capped = offset if offset < end else end
        start = self.log_start_offset
        self.high_watermark = capped if capped > start else start

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first offset of a transaction still open or whose
        marker is not replicated yet, whichever is lower."""
        hw = self.high_watermark
        pending = [c for c in self._unreplicated_txns if c.last_offset >= hw]
        if len(pending) != len(self._unreplicated_txns):
            self._unreplicated_txns = pending
        firsts = [c.first_offset for c in pending]
        open_first = self.producers.first_unstable_offset()
        if open_first is not None:
            firsts.append(open_first)
        return max(self.log_start_offset, min(hw, *firsts)) if firsts else hw

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [start, end): marker at or after `start`,
        first offset before `end` (Fetch's `aborted_transactions` for READ_COMMITTED)."""
        found: list[AbortedTxn] = []
        for seg in self.segments:
            if seg.next_offset > start and seg.txn_index.entries:
                found += seg.txn_index.aborted_in(start, end)
        return found

    # --- loading and recovery ----------------------------------------------------------

    def _load(self, clean_shutdown: bool) -> None:
        self.segments, self.recovery_point, self.log_start_offset = recover_segments(
            self.directory,
            self.config,
            recovery_point=self.recovery_point,
            log_start_offset=self.log_start_offset,
            clean_shutdown=clean_shutdown,
        )
        self.epochs.truncate_from_end(self.log_end_offset)
        rebuild_epochs_if_missing(self.epochs, self.segments)
        self._load_producer_state()

    def _load_producer_state(self) -> None:
        end = self.log_end_offset
        start = self.producers.load_latest_snapshot(end)
        if start < 0:
            start = self.segments[0].base_offset
        self._unreplicated_txns = []
        for seg in self.segments:
            if seg.next_offset <= start:
                continue
            seg.txn_index.truncate_to(start)  # rebuilt by the replay below
            for found in seg.batches_from(seg.offset_index.lookup(start)):
                header = found.header
                if header.base_offset >= start:
                    marker = None
                    if header.is_control:
                        raw = memoryview(seg.read_bytes(found.position, header.size))
                        marker = read_marker(raw, 0, header)
                    self._track(self.producers.update(header, marker), seg)

    def _track(self, completed: CompletedTxn | None, seg: LogSegment) -> None:
        """A marker closed a transaction: unstable until replicated; indexed if aborted."""
        if completed is None:
            return
        if completed.aborted:
            # Kafka's: the first offset still open after this transaction, or past its marker.
            lso = min(self.producers.ongoing().values(), default=completed.last_offset + 1)
            seg.txn_index.append(
                AbortedTxn(
                    completed.producer_id, completed.first_offset, completed.last_offset, lso
                )
            )
        self._unreplicated_txns.append(completed)

    # --- appends -----------------------------------------------------------------------

    def append(
        self,
        data: memoryview | bytes | bytearray,
        leader_epoch: int,
        *,
        now_ms: int | None = None,
        from_client: bool = True,
        verification: VerificationGuard | None = None,
    ) -> AppendResult:
        """Validate and append a record set as the leader: a produce request's (every check
        Kafka's LogValidator makes for a client) or a broker component's own
        (`from_client=False`: the coordinators' records, framing and CRC checked only).
        `verification` (KIP-890; None: verification is off): a transactional batch opens a
        transaction only with the guard `start_verification` gave (INVALID_TXN_STATE)."""
        now = self._now() if now_ms is None else now_ms
        view = memoryview(data)
        if view.readonly:
            view = memoryview(bytearray(view))  # offsets are written into the batches
        batches = validate_batches(view, self.config, now, from_client=from_client)
        with self.lock:
            producers = self.producers
            if len(batches) == 1:
                header = batches[0].header
                duplicate = producers.check(header)
                if duplicate is not None:
                    return AppendResult(
                        duplicate.first_offset,
                        duplicate.last_offset,
                        -1,
                        self.log_start_offset,
                        duplicate=True,
                    )
                if verification is not None and header.attributes & TRANSACTIONAL_BIT:
                    producers.check_verified(header, verification)
            else:
                for batch in batches:
                    if producers.check(batch.header) is not None:
                        raise KafkaError(error_codes.DUPLICATE_SEQUENCE_NUMBER)
                    if verification is not None and batch.header.is_transactional:
                        producers.check_verified(batch.header, verification)
            append_time = now if self.config.log_append_time else None
            first = self.segments[-1].next_offset  # the log end offset
            if append_time is None and len(batches) == 1:  # `assign_offsets`, one batch
                position, header = batches[0]
                headers = [place_batch(view, position, header, first, leader_epoch)]
            else:
                headers = assign_offsets(view, batches, first, leader_epoch, append_time)
            self._write(view, headers, now)
            last = headers[-1]
            # tuple.__new__: without the NamedTuple's Python-level __new__ (every append)
            return _new_tuple(
                AppendResult,
                (
                    first,
                    last.base_offset + last.last_offset_delta,
                    -1 if append_time is None else append_time,
                    self.log_start_offset,
                    False,
                ),
            )

    def start_verification(self, producer_id: int, sequence: int, epoch: int) -> VerificationGuard:
        """KIP-890: the guard to append this producer's transactional batch with once its
        coordinator confirmed the partition is in its transaction (NO_GUARD: a transaction
        is open here, nothing to confirm)."""
        with self.lock:
            return self.producers.start_verification(producer_id, sequence, epoch, self._now())

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        leader_epoch: int,
        *,
        now_ms: int | None = None,
    ) -> AppendResult:
        """The leader writes a transaction marker (WriteTxnMarkers): a control batch with
        one record, key (version 0, commit 1 / abort 0), value (version 0, coordinator
        epoch)."""
        now = self._now() if now_ms is None else now_ms
        marker = encode_marker(producer_id, producer_epoch, commit, coordinator_epoch, now)
        view = memoryview(bytearray(marker))
        batches = validate_batches(view, self.config, now, from_client=False)
        with self.lock:
            self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
            first = self.log_end_offset
            headers = assign_offsets(view, batches, first, leader_epoch, None)
            self._write(view, headers, now)
            return AppendResult(first, first, -1, self.log_start_offset)

    def append_as_follower(self, data: memoryview | bytes | bytearray) -> int:
        """Append batches that already carry offsets (replication); returns the new end."""
        view = memoryview(data)
        batches = validate_batches(view, self.config, self._now(), from_client=False)
        with self.lock:
            if batches[0].header.base_offset < self.log_end_offset:
                raise KafkaError(error_codes.INVALID_RECORD, "Out of order follower append.")
            headers = [b.header for b in batches]
            for earlier, later in pairwise(headers):
                if later.base_offset <= earlier.last_offset:
                    raise KafkaError(error_codes.INVALID_RECORD, "Non-increasing offsets.")
            self._write(view, headers, self._now())
            return self.log_end_offset

    def _write(self, view: memoryview, headers: list[BatchHeader], now_ms: int) -> None:
        """Append whole batches; a failed write leaves the log as it was (the segment cuts
        off what it wrote). A full disk (ENOSPC, EDQUOT) is KAFKA_STORAGE_ERROR here, and
        retriable: the writer tries again once there is room, the directory stays online.
        Any other OSError goes up, and the replica manager takes the directory offline
        (KIP-112)."""
        first, last = headers[0], headers[-1]
        try:
            if self._should_roll(len(view), first, last, now_ms):
                self.roll(first.base_offset)
            for header in headers:
                self.epochs.assign(header.partition_leader_epoch, header.base_offset)
            active = self.segments[-1]
            active.append(view, headers)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if not self._full:  # once until an append succeeds: writers retry often
                log.warning("append to %s failed: %s (retriable)", self.directory.name, e)
                self._full = True
            raise KafkaError(
                error_codes.KAFKA_STORAGE_ERROR, f"{self.directory.name}: {e.strerror}"
            ) from None
        if self._full:
            log.info("append to %s succeeded again after a full disk", self.directory.name)
            self._full = False
        position = 0
        records = 0
        for header in headers:
            control = header.attributes & CONTROL_BIT
            marker = read_marker(view, position, header) if control else None
            completed = self.producers.update(header, marker)
            if completed is not None:
                self._track(completed, active)
            position += header.batch_length + LOG_OVERHEAD
            records += header.records_count
        self.unflushed_messages += records
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()

    def _should_roll(self, size: int, first: BatchHeader, last: BatchHeader, now_ms: int) -> bool:
        seg = self.segments[-1]
        if seg.size == 0:
            return False
        if seg.size + size > self.config.segment_bytes:
            return True
        if len(seg.offset_index.offsets) * 8 >= self.config.segment_index_bytes - 8:
            return True
        if last.base_offset + last.last_offset_delta - seg.base_offset > 2**31 - 1:
            return True
        # As Kafka's segment.ms: the new data's timestamp against the segment's first batch's
        # (so data stamped long ago does not roll a segment per append); wall-clock time
        # since creation when the segment has no timestamps.
        if seg.first_batch_timestamp >= 0 and last.max_timestamp >= 0:
            waited = last.max_timestamp - seg.first_batch_timestamp
        else:
            waited = now_ms - seg.created_ms
        return waited > self.config.segment_ms - self.config.segment_jitter_ms

    def roll(self, next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or `next_offset`)."""
        with self.lock:
            base = self.log_end_offset if next_offset is None else next_offset
            old = self.active
            if old.size == 0 and old.base_offset == base:
                return old
            old.flush_indexes()
            seg = LogSegment(self.directory, base, self.config.index_interval_bytes)
            self.segments = (*self.segments, seg)
            self.producers.take_snapshot(base)
            self.flush_due = self.flush_due or old.size > 0
            return seg

    # --- flushing ----------------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment with data above the recovery point; advance it."""
        with self.lock:
            end = self.log_end_offset
            for seg in self.segments:
                if seg.next_offset > self.recovery_point or seg is self.active:
                    seg.flush()
            if any(seg.base_offset >= self.recovery_point for seg in self.segments):
                # a segment created since the last flush: its name is durable only once the
                # directory is fsynced (as Kafka's LocalLog.flush)
                checkpoint.fsync_dir(self.directory)
            self.recovery_point = end
            self.unflushed_messages = 0
            self.flush_due = False
            self.last_flush_ms = self._now()

    def maybe_flush(self, now_ms: int) -> bool:
        """The `flush.ms` policy, and the flush that follows a roll (as Kafka schedules one
        at every roll, so that only the active segment is ever at risk in a machine crash);
        called periodically by the log manager."""
        if self.flush_due or (
            self.unflushed_messages and now_ms - self.last_flush_ms >= self.config.flush_ms
        ):
            self.flush()
            return True
        return False

    # --- reads -------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        """Record data from the batch holding `offset`, up to `max_bytes` (at least one
        whole batch with `min_one_batch`, as KIP-74), never past `max_offset`. Data cut
        short by `max_bytes` ends at the last batch start the offset index knows within it:
        whole batches, so no fetcher receives a partial batch only to fetch it again (Kafka
        sends the partial tail; without an index entry in range, so do we). Without
        `min_one_batch`, a first batch larger than `max_bytes` gives nothing: a later
        partition of a fetch never gets a cut-off batch."""
        segments = self.segments
        end = segments[-1].next_offset
        if offset < self.log_start_offset or offset > end:
            raise KafkaError(
                error_codes.OFFSET_OUT_OF_RANGE,
                f"Offset {offset} is outside [{self.log_start_offset}, {end}].",
            )
        limit = end if max_offset is None else min(max_offset, end)
        result = None
        if offset < limit:
            if offset >= segments[-1].base_offset:  # at the log end: followers, tails
                i = len(segments) - 1
            else:
                i = max(0, bisect_right([s.base_offset for s in segments], offset) - 1)
            for seg in segments[i:]:
                if seg.base_offset >= limit:
                    break
                found = seg.find_offset(offset)
                if found is None:
                    continue  # the offset fell in a gap (compaction) at this segment's end
                stop = seg.size if limit >= seg.next_offset else seg.position_of(limit)
                available = stop - found.position
                if available <= 0:
                    break
                if not min_one_batch and max_bytes < min(found.header.size, available):
                    break  # not even the first batch fits: nothing (no cut-off batch)
                wanted = max(max_bytes, found.header.size) if min_one_batch else max_bytes
                length = min(available, wanted)
                if length < available:  # cut short: end at a batch start the index knows
                    boundary = seg.offset_index.batch_start_at_or_before(found.position + length)
                    if boundary > found.position:
                        length = boundary - found.position
                if length > 0:
                    result = FileRegion(seg.fd, found.position, length)
                break
        return ReadResult(result, self.high_watermark, self.log_start_offset, end)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) of the first record at or after `timestamp`;
        -1 latest, -2 earliest, -3 the record with the largest timestamp
        (`storage/timestamp_search.py`)."""
        return offset_for_timestamp(self, timestamp)

    # --- truncation and deletion -------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything at or after `offset` (a follower diverged from its leader)."""
        with self.lock:
            if offset >= self.log_end_offset:
                return
            keep = [s for s in self.segments if s.base_offset < offset] or [self.segments[0]]
            for seg in self.segments[len(keep) :]:
                self._schedule_delete(seg)
            keep[-1].truncate_to(offset)
            if keep[-1].base_offset >= offset:  # everything went: restart empty at offset
                self._schedule_delete(keep[-1])
                keep[-1] = LogSegment(self.directory, offset, self.config.index_interval_bytes)
            self.segments = tuple(keep)
            self.epochs.truncate_from_end(self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self.high_watermark = min(self.high_watermark, self.log_end_offset)
            self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
            self._load_producer_state()

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up (segments go at the next retention)."""
        with self.lock:
            if offset > self.high_watermark:
                raise KafkaError(
                    error_codes.OFFSET_OUT_OF_RANGE,
                    f"Cannot delete records above the high watermark {self.high_watermark}.",
                )
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                self.epochs.truncate_from_start(offset)
            return self.log_start_offset

    def _schedule_delete(self, seg: LogSegment) -> None:
        seg.rename_suffix(DELETED_SUFFIX)
        self.pending_deletes.append((self._now() + self.config.file_delete_delay_ms, seg))

    def remove_segments(self, doomed: list[LogSegment]) -> None:
        """Drop segments from the front of the log (retention): copy on write, delayed close."""
        with self.lock:
            ids = {id(s) for s in doomed}
            remaining = tuple(s for s in self.segments if id(s) not in ids)
            if not remaining:
                self.roll()
                remaining = (self.segments[-1],)
            self.segments = remaining
            for seg in doomed:
                self._schedule_delete(seg)
            self.log_start_offset = max(self.log_start_offset, remaining[0].base_offset)
            self.epochs.truncate_from_start(self.log_start_offset)
            self.producers.delete_snapshots_below(self.log_start_offset)

    def replace_segments(self, old: list[LogSegment], new: LogSegment) -> None:
        """The cleaner's swap: `new` (a `.swap` file set) takes the place of `old`."""
        with self.lock:
            first = self.segments.index(old[0])
            due = self._now() + self.config.file_delete_delay_ms
            for seg in old:
                if seg.base_offset != new.base_offset:
                    self._schedule_delete(seg)  # renamed to .deleted before the swap lands
                else:
                    self.pending_deletes.append((due, seg))  # its files are replaced below
            new.rename_suffix("")
            self.segments = (*self.segments[:first], new, *self.segments[first + len(old) :])

    def delete_expired_files(self, now_ms: int, *, force: bool = False) -> int:
        """Close and unlink segments whose delete delay has passed."""
        due = [(t, s) for t, s in self.pending_deletes if force or t <= now_ms]
        self.pending_deletes = [(t, s) for t, s in self.pending_deletes if not force and t > now_ms]
        for _, seg in due:
            seg.close()
            if seg.log_path.name.endswith(DELETED_SUFFIX):
                seg.delete_files()
        return len(due)

    def close(self, *, clean: bool = True) -> None:
        with self.lock:
            if clean:
                self.flush()
                self.producers.take_snapshot(self.log_end_offset)
            self.delete_expired_files(0, force=True)
            for seg in self.segments:
                seg.close()

    def delete(self) -> None:
        """Remove the whole partition directory (topic deletion)."""
        with self.lock:
            self.delete_expired_files(0, force=True)
            for seg in self.segments:
                seg.close()
            shutil.rmtree(self.directory, ignore_errors=True)
