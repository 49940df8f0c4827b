"""Opening a partition directory: which segments a `PartitionLog` starts with.

Owns what happens to the files on disk before the log takes its first write: leftovers of
deletion and compaction (`.deleted`, `.cleaned`) are removed; a cleaner crash after writing
a `.swap` segment is completed (the swap replaces every segment whose base offset falls in
its range); segments are loaded, and after an unclean shutdown those from the one holding
the recovery point are verified batch by batch and truncated at the first invalid byte (or
before a segment a machine crash left empty); the leader-epoch cache is rebuilt from the
batches when its checkpoint is missing.

Invariants: the segments returned are never empty and start at increasing base offsets
with no overlap; everything after the first truncated segment is deleted; the recovery
point returned is at most the log end (the log end itself after a clean shutdown) and the
log start offset lies in [first segment's base offset, log end]. The producer state is
replayed by `PartitionLog` itself (storage/log.py), from these segments.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from pathlib import Path

from riverlog.storage.epoch_cache import LeaderEpochCache
from riverlog.storage.log_config import LogConfig
from riverlog.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
)

log = logging.getLogger(__name__)


def recover_segments(
    directory: Path,
    config: LogConfig,
    *,
    recovery_point: int,
    log_start_offset: int,
    clean_shutdown: bool,
) -> tuple[tuple[LogSegment, ...], int, int]:
    """The segments of the log in `directory`, its recovery point and its log start offset,
    after removing leftovers, completing swaps and (unclean shutdown) recovering from the
    segment holding `recovery_point`."""
    for leftover in directory.iterdir():
        if leftover.name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX)):
            leftover.unlink()
    complete_swaps(directory, config)
    bases = sorted(
        int(p.name[:20])
        for p in directory.glob(f"*{LOG_SUFFIX}")
        if p.name[:20].isdigit() and len(p.name) == 20 + len(LOG_SUFFIX)
    )
    interval = config.index_interval_bytes
    segments = [LogSegment(directory, base, interval) for base in bases]
    recover_from = len(segments)
    if not clean_shutdown:
        recover_from = max(0, bisect_right(bases, recovery_point) - 1)
    for i, seg in enumerate(segments[:recover_from]):
        if not seg.load():
            log.warning(
                "%s: index of segment %d is unusable, rebuilding",
                directory,
                seg.base_offset,
            )
            recover_from = min(recover_from, i)
            break
    kept: list[LogSegment] = segments[:recover_from]
    for seg in segments[recover_from:]:
        truncated = seg.recover(config.max_message_bytes)
        if kept and seg.base_offset < kept[-1].next_offset:
            truncated = seg.size or 1  # overlaps its predecessor: unusable
        # A segment starts with a batch at its base offset: one past the recovery point
        # left empty by a crash (name durable, data not) lost it, and the log ends there,
        # or its end would jump past offsets that no longer exist. (Empty after a
        # compacted one, it may start past its end, but rolls are flushed.)
        lost = bool(
            kept and seg.size == 0 and seg.base_offset > max(kept[-1].next_offset, recovery_point)
        )
        kept.append(seg)
        if truncated or lost:
            log.warning(
                "%s: truncated %d invalid bytes from segment %d%s",
                directory,
                truncated,
                seg.base_offset,
                ", which lost all its data" if lost else "",
            )
            for later in segments[segments.index(seg) + 1 :]:
                later.close()
                later.delete_files()
            if seg.size == 0 and len(kept) > 1:
                kept.pop()
                seg.close()
                seg.delete_files()
            break
    if not kept:
        start = max(log_start_offset, recovery_point if clean_shutdown else 0)
        kept = [LogSegment(directory, start, interval)]
    end = kept[-1].next_offset
    recovery_point = min(recovery_point, end) if not clean_shutdown else end
    log_start_offset = max(kept[0].base_offset, min(log_start_offset, end))
    return tuple(kept), recovery_point, log_start_offset


def complete_swaps(directory: Path, config: LogConfig) -> None:
    """A cleaner crash after writing a `.swap` segment: finish replacing the segments it
    covers (every segment whose base offset falls in its offset range)."""
    for swap in sorted(directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
        base = int(swap.name[:20])
        seg = LogSegment(directory, base, config.index_interval_bytes, suffix=SWAP_SUFFIX)
        seg.recover(config.max_message_bytes)
        for old in directory.glob(f"*{LOG_SUFFIX}"):
            old_base = int(old.name[:20])
            if base < old_base < seg.next_offset:
                for suffix in (LOG_SUFFIX, ".index", ".timeindex", ".txnindex"):
                    (directory / (old.name[:20] + suffix)).unlink(missing_ok=True)
        seg.rename_suffix("")
        seg.close()


def rebuild_epochs_if_missing(epochs: LeaderEpochCache, segments: tuple[LogSegment, ...]) -> None:
    """A log with data but no leader-epoch checkpoint: the epochs read back from its batches."""
    if epochs.entries or segments[-1].next_offset == segments[0].base_offset:
        return
    for seg in segments:
        for found in seg.batches_from(0):
            epochs.assign(found.header.partition_leader_epoch, found.header.base_offset)
