"""One log segment: `<base offset>.log` with its offset, time and aborted-transaction indexes.

The `.log` file holds record batches back to back, exactly as appended. The segment knows its
size (the append position), the largest timestamp in it and the offsets it covers; it
translates an offset or a timestamp to a file position by an index lookup followed by a scan
of batch headers (`os.pread` of 61 bytes each, never the records). The batches appended since
the last offset index entry are also remembered in memory (`_tail`, at most TAIL_BATCHES):
fetches at the log end — followers, caught-up consumers — find their batch there without
reading headers back (with small batches that scan was ~30 preads per fetch).

Ownership: a segment owns its file descriptors. Only the partition log appends (one writer);
readers may read concurrently, and may hold a `FileRegion` on the descriptor after the segment
has been deleted from the log: `close` is called only after `file.delete.delay.ms`.

Invariants: `size` is the end of the last whole batch; every index entry points inside
[0, size); `next_offset` is one past the last offset of the last batch (or the base offset
when empty); `_tail` holds consecutive batches ending at `size` (or nothing).
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from riverlog.protocol.exceptions import CorruptRecordError, TruncatedError
from riverlog.protocol.records.batch_header import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    read_batch_header,
    verify_crc,
)
from riverlog.storage.index import OffsetIndex, TimeIndex
from riverlog.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


WRITE_CHUNK = 1 << 20
"""Appends go to the file in writes of at most this size. Given a write of 2 MiB or more,
the kernel (6.x, ext4 large folios) fills the page cache with 2 MiB folios, and on our VM
(whose balloon hands freed 2 MiB blocks back to the host) those writes cost ~13x the system
time of the same bytes written 1 MiB at a time (docs/field-notes.md)."""


TAIL_BATCHES = 512
"""Batches at the end of a segment remembered in memory (past the last index entry)."""


class BatchPosition(NamedTuple):
    """Where a batch is: its header and its start position in the segment file."""

    position: int
    header: BatchHeader


_new_position = tuple.__new__
"""Builds a `BatchPosition` without the NamedTuple's Python-level `__new__` (every append)."""


class LogSegment:
    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, suffix: str = ""
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        name = segment_name(base_offset)
        self.log_path = directory / (name + LOG_SUFFIX + suffix)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        self.offset_index = OffsetIndex(directory / (name + INDEX_SUFFIX + suffix), base_offset)
        self.time_index = TimeIndex(directory / (name + TIME_INDEX_SUFFIX + suffix), base_offset)
        self.txn_index = TransactionIndex(directory / (name + TXN_INDEX_SUFFIX + suffix))
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.created_ms = int(os.stat(self.log_path).st_mtime * 1000)
        self.first_batch_timestamp = -1
        self._bytes_since_index = 0
        self._tail: list[BatchPosition] = []
        self._tail_last: list[int] = []
        """The last offsets of the `_tail` batches, for bisection."""
        self.closed = False

    # --- appends -----------------------------------------------------------------------

    def append(self, data: memoryview | bytes, headers: list[BatchHeader]) -> int:
        """Write whole batches (already validated, offsets assigned); return their position.
        A write that fails (ENOSPC, EIO) leaves the file as it was: the part written is cut
        off again before the error is raised, so no torn batch stays at the end."""
        position = self.size
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.write(self.fd, view[written : written + WRITE_CHUNK])
        except OSError:
            os.ftruncate(self.fd, position)
            raise
        pos = position
        for header in headers:
            self._index_batch(pos, header)
            pos += header.batch_length + LOG_OVERHEAD  # `header.size`, without a call
        self.size += len(data)
        return position

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        # The header's derived values computed here, not through its properties (calls).
        last_offset = header.base_offset + header.last_offset_delta
        if self.first_batch_timestamp < 0:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
        if self._bytes_since_index >= self.index_interval_bytes or not self.offset_index.offsets:
            self.offset_index.append(last_offset, position)
            if self.max_timestamp >= 0:
                self.time_index.append(self.max_timestamp, last_offset)
            self._bytes_since_index = 0
            self._forget_tail()
        elif len(self._tail) >= TAIL_BATCHES:
            del self._tail[: TAIL_BATCHES // 2], self._tail_last[: TAIL_BATCHES // 2]
        self._tail.append(_new_position(BatchPosition, (position, header)))
        self._tail_last.append(last_offset)
        self._bytes_since_index += header.batch_length + LOG_OVERHEAD
        self.next_offset = last_offset + 1

    def _forget_tail(self) -> None:
        self._tail = []
        self._tail_last = []

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.file.flush(fsync=True)
        self.time_index.file.flush(fsync=True)
        self.txn_index.flush()

    def flush_indexes(self) -> None:
        self.offset_index.file.flush(fsync=False)
        self.time_index.file.flush(fsync=False)

    # --- reading -----------------------------------------------------------------------

    def batches_from(self, position: int = 0, end: int | None = None) -> Iterator[BatchPosition]:
        """Headers of the batches from `position` (a batch start) up to `end`."""
        stop = self.size if end is None else end
        while position < stop:
            raw = os.pread(self.fd, BATCH_HEADER_SIZE, position)
            if len(raw) < BATCH_HEADER_SIZE:
                return
            header = _header_or_none(raw)
            if header is None or position + header.size > stop:
                return
            yield BatchPosition(position, header)
            position += header.size

    def find_offset(self, offset: int) -> BatchPosition | None:
        """The first batch whose last offset is ≥ `offset`, or None past the end."""
        tail = self._tail
        if tail and offset >= tail[0].header.base_offset:
            # Every earlier batch ends before `offset`; the tail runs to the end.
            i = bisect_left(self._tail_last, offset)
            return tail[i] if i < len(tail) else None
        for found in self.batches_from(self.offset_index.lookup(offset)):
            if found.header.last_offset >= offset:
                return found
        return None

    def position_of(self, offset: int) -> int:
        """File position where the batch holding `offset` (or the next one) starts."""
        found = self.find_offset(offset)
        return self.size if found is None else found.position

    def find_timestamp(self, timestamp: int) -> BatchPosition | None:
        """The first batch whose max timestamp is ≥ `timestamp`."""
        start = self.offset_index.lookup(self.time_index.lookup(timestamp))
        for found in self.batches_from(start):
            if found.header.max_timestamp >= timestamp:
                return found
        return None

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    # --- recovery and truncation -------------------------------------------------------

    def recover(self, max_message_bytes: int) -> int:
        """Verify every batch, truncate at the first invalid byte, rebuild the indexes.

        Returns the number of bytes truncated.
        """
        self.offset_index.file.rewrite(b"")
        self.time_index.file.rewrite(b"")
        self.offset_index.load(0)
        self.time_index.load()
        self.max_timestamp = -1
        self.first_batch_timestamp = -1
        self.next_offset = self.base_offset
        self._bytes_since_index = 0
        self._forget_tail()
        position = 0
        file_size = os.fstat(self.fd).st_size
        while position < file_size:
            header_bytes = os.pread(self.fd, BATCH_HEADER_SIZE, position)
            header = _header_or_none(header_bytes)
            if (
                header is None
                or header.size > max(max_message_bytes, 1) + BATCH_HEADER_SIZE
                or position + header.size > file_size
                or header.base_offset < self.next_offset
            ):
                break
            batch = os.pread(self.fd, header.size, position)
            try:
                verify_crc(batch, 0, header)
            except CorruptRecordError:
                break
            self._index_batch(position, header)
            position += header.size
        truncated = file_size - position
        if truncated:
            os.ftruncate(self.fd, position)
        self.size = position
        self.flush_indexes()
        return truncated

    def load(self) -> bool:
        """Load indexes and derived state after a clean shutdown; False if they look wrong."""
        if not (self.offset_index.load(self.size) and self.time_index.load()):
            return False
        start = self.offset_index.positions[-1] if len(self.offset_index) else 0
        last: BatchPosition | None = None
        tail_max_timestamp = -1
        for found in self.batches_from(start):
            if (
                last is None
                and len(self.offset_index)
                and (found.header.max_timestamp > self.time_index.last_timestamp)
            ):
                # Every indexed batch got a time entry for the running maximum, so the last
                # indexed batch cannot be newer than the time index: entries were lost.
                return False
            last = found
            tail_max_timestamp = max(tail_max_timestamp, found.header.max_timestamp)
        if self.size and last is None:
            return False
        if last is not None:
            if last.position + last.header.size != self.size:
                return False
            self.next_offset = last.header.next_offset
            self._bytes_since_index = self.size - start
        if len(self.time_index) and self.time_index.offsets[-1] >= self.next_offset:
            return False
        self.max_timestamp = max(self.time_index.last_timestamp, tail_max_timestamp)
        first = next(self.batches_from(0), None)
        self.first_batch_timestamp = -1 if first is None else first.header.max_timestamp
        return True

    def truncate_to(self, offset: int) -> int:
        """Remove every batch ending at or after `offset`; returns bytes removed."""
        found = self.find_offset(offset)
        if found is None:
            return 0
        position = found.position
        removed = self.size - position
        self._forget_tail()
        os.ftruncate(self.fd, position)
        self.size = position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.next_offset = found.header.base_offset if position else self.base_offset
        self.max_timestamp = -1
        for batch in self.batches_from(0):
            self.max_timestamp = max(self.max_timestamp, batch.header.max_timestamp)
        if position == 0:
            self.first_batch_timestamp = -1
        self._bytes_since_index = self.index_interval_bytes
        return removed

    # --- lifecycle ---------------------------------------------------------------------

    def last_modified_ms(self) -> int:
        return int(os.fstat(self.fd).st_mtime * 1000)

    def rename_suffix(self, suffix: str) -> None:
        """Rename the three files, e.g. to `.deleted` before removal."""
        name = segment_name(self.base_offset)
        log_path = self.directory / (name + LOG_SUFFIX + suffix)
        os.replace(self.log_path, log_path)
        self.log_path = log_path
        self.offset_index.file.flush(fsync=False)
        self.time_index.file.flush(fsync=False)
        self.offset_index.file.rename(self.directory / (name + INDEX_SUFFIX + suffix))
        self.time_index.file.rename(self.directory / (name + TIME_INDEX_SUFFIX + suffix))
        self.txn_index.rename(self.directory / (name + TXN_INDEX_SUFFIX + suffix))

    def delete_files(self) -> None:
        self.log_path.unlink(missing_ok=True)
        self.offset_index.file.delete()
        self.time_index.file.delete()
        self.txn_index.delete()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.flush_indexes()
            os.close(self.fd)


def _header_or_none(raw: bytes) -> BatchHeader | None:
    """The header in `raw` (61 bytes read from a file), or None if it is not one."""
    try:
        return read_batch_header(raw, 0, whole=False)
    except (TruncatedError, CorruptRecordError):
        return None
