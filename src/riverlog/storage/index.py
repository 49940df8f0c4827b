"""Sparse indexes of one segment: offset → file position, and timestamp → offset.

File formats are Kafka's: the offset index (`.index`) holds 8-byte entries (offset relative
to the segment's base offset: int32, position in the `.log`: int32); the time index
(`.timeindex`) 12-byte entries (timestamp: int64, relative offset: int32). An offset entry
names the *last* offset of a batch and where that batch starts; a time entry names the largest
timestamp seen so far in the segment and the last offset of the batch that carried it.

Entries are added at most every `index.interval.bytes` of log. They are kept in memory (two
arrays per index, searched with bisect) and appended to the file; the file is not
preallocated, so a crash can only leave a torn last entry, which `load` drops.

Invariants: offsets strictly increase along both indexes, positions and timestamps strictly
increase; `load` returns False (the caller rebuilds from the log) rather than trusting an
index that breaks them.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    """Append-only entry file: buffered in memory, written on `flush`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._unwritten: list[bytes] = []

    def append(self, entry: bytes) -> None:
        self._unwritten.append(entry)

    def flush(self, fsync: bool) -> None:
        if not self._unwritten and not fsync:
            return
        with open(self.path, "ab") as f:
            f.write(b"".join(self._unwritten))
            self._unwritten.clear()
            if fsync:
                f.flush()
                os.fsync(f.fileno())

    def rewrite(self, data: bytes) -> None:
        self._unwritten.clear()
        with open(self.path, "wb") as f:
            f.write(data)

    def read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return b""

    def delete(self) -> None:
        self._unwritten.clear()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.file = _IndexFile(path)
        self.offsets = array("q")  # absolute last offsets of indexed batches
        self.positions = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, last_offset: int, position: int) -> None:
        if self.offsets and (last_offset <= self.offsets[-1] or position <= self.positions[-1]):
            return  # never out of order; the caller's next entry will be further on
        self.offsets.append(last_offset)
        self.positions.append(position)
        self.file.append(_OFFSET_ENTRY.pack(last_offset - self.base_offset, position))

    def lookup(self, offset: int) -> int:
        """A position at or before the batch holding `offset`: scan forward from it."""
        # The last entry whose batch ends at or before `offset`: that batch, or one after it,
        # holds `offset` (as Kafka's OffsetIndex.lookup).
        i = bisect_right(self.offsets, offset)
        return self.positions[i - 1] if i > 0 else 0

    def batch_start_at_or_before(self, position: int) -> int:
        """The last indexed batch start at or before `position` (0 when none is)."""
        i = bisect_right(self.positions, position)
        return self.positions[i - 1] if i > 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Drop entries of batches that end at or after `offset`."""
        keep = bisect_right(self.offsets, offset - 1)
        if keep == len(self.offsets):
            return
        del self.offsets[keep:]
        del self.positions[keep:]
        self.file.rewrite(
            b"".join(
                _OFFSET_ENTRY.pack(o - self.base_offset, p)
                for o, p in zip(self.offsets, self.positions, strict=True)
            )
        )

    def load(self, log_size: int) -> bool:
        data = self.file.read()
        usable = len(data) - len(data) % _OFFSET_ENTRY.size
        self.offsets = array("q")
        self.positions = array("q")
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data[:usable]):
            offset = self.base_offset + rel
            if (
                rel < 0
                or pos < 0
                or pos >= max(log_size, 1)
                or (self.offsets and (offset <= self.offsets[-1] or pos <= self.positions[-1]))
            ):
                return False
            self.offsets.append(offset)
            self.positions.append(pos)
        if usable != len(data):
            self.file.rewrite(data[:usable])
        return True


class TimeIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.file = _IndexFile(path)
        self.timestamps = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def append(self, timestamp: int, last_offset: int) -> None:
        if self.timestamps and (
            timestamp <= self.timestamps[-1] or last_offset <= self.offsets[-1]
        ):
            return
        self.timestamps.append(timestamp)
        self.offsets.append(last_offset)
        self.file.append(_TIME_ENTRY.pack(timestamp, last_offset - self.base_offset))

    def lookup(self, timestamp: int) -> int:
        """An offset at or before the first batch whose max timestamp is ≥ `timestamp`."""
        i = bisect_right(self.timestamps, timestamp - 1)
        # Entry i-1 has a smaller timestamp; everything up to its offset can be skipped.
        return self.offsets[i - 1] + 1 if i > 0 else self.base_offset

    def truncate_to(self, offset: int) -> None:
        keep = bisect_right(self.offsets, offset - 1)
        if keep == len(self.offsets):
            return
        del self.timestamps[keep:]
        del self.offsets[keep:]
        self.file.rewrite(
            b"".join(
                _TIME_ENTRY.pack(t, o - self.base_offset)
                for t, o in zip(self.timestamps, self.offsets, strict=True)
            )
        )

    def load(self) -> bool:
        data = self.file.read()
        usable = len(data) - len(data) % _TIME_ENTRY.size
        self.timestamps = array("q")
        self.offsets = array("q")
        for ts, rel in _TIME_ENTRY.iter_unpack(data[:usable]):
            offset = self.base_offset + rel
            if rel < 0 or (
                self.timestamps and (ts <= self.timestamps[-1] or offset <= self.offsets[-1])
            ):
                return False
            self.timestamps.append(ts)
            self.offsets.append(offset)
        if usable != len(data):
            self.file.rewrite(data[:usable])
        return True
