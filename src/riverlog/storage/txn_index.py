"""The aborted-transaction index of one segment: `<base offset>.txnindex`, Kafka's format.

Each entry is 34 bytes, big-endian: version int16 (0), producer id int64, first offset
int64, last offset int64 (the abort marker's offset), last stable offset int64 (the LSO when
the marker was written). An entry lives in the index of the segment holding its marker.
The file is created on the first entry; a segment without aborted transactions has none.

Fetch with READ_COMMITTED asks `aborted_in(start, end)`: every aborted transaction whose
data may fall in [start, end) — its marker at or after `start` and its first offset before
`end` — so the consumer can drop that producer's records between first offset and marker.

Invariants: entries are in marker-offset order; the in-memory list equals the file.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        if path.exists():
            data = path.read_bytes()
            usable = len(data) - len(data) % ENTRY_SIZE
            for pos in range(0, usable, ENTRY_SIZE):
                version, *fields = _ENTRY.unpack_from(data, pos)
                if version != VERSION:
                    break
                self.entries.append(AbortedTxn(*fields))

    def append(self, entry: AbortedTxn) -> None:
        with open(self.path, "ab") as f:
            f.write(_ENTRY.pack(VERSION, *entry))
        self.entries.append(entry)

    def aborted_in(self, start: int, end: int) -> list[AbortedTxn]:
        return [e for e in self.entries if e.last_offset >= start and e.first_offset < end]

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset`."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.entries = kept
        self._rewrite()

    def _rewrite(self) -> None:
        if not self.entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(_ENTRY.pack(VERSION, *e) for e in self.entries))
        os.replace(tmp, self.path)

    def flush(self) -> None:
        if self.entries and self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
