"""Leader epoch cache: for each leader epoch, the first offset written in it (KIP-101).

Replication uses it to answer OffsetForLeaderEpoch and to truncate a follower by epoch rather
than by high watermark. Persisted to `leader-epoch-checkpoint` in the partition directory on
every change (changes are rare: one per leader election).

Invariants: epochs and start offsets strictly increase along the list.
"""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

from riverlog.model import UNDEFINED_EPOCH
from riverlog.storage.checkpoint import (
    LEADER_EPOCH_FILE,
    CorruptCheckpointError,
    read_epochs,
    write_epochs,
)

UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH_FILE
        try:
            self.entries: list[tuple[int, int]] = read_epochs(self.path)
        except CorruptCheckpointError:
            self.entries = []  # rebuilt from the batches' leader epochs by log recovery

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (no-op for a known or older epoch)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        # A new epoch cannot start before an earlier one did: drop any such stale entries.
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch ≤ `epoch`, its end offset), as OffsetForLeaderEpoch answers."""
        if not self.entries or epoch < self.entries[0][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        i = bisect_right([e for e, _ in self.entries], epoch)
        return self.entries[i - 1][0], self.entries[i][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch holding it starts there."""
        i = bisect_right([o for _, o in self.entries], start_offset)
        if i == 0:
            return
        kept = [(self.entries[i - 1][0], start_offset), *self.entries[i:]]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def clear(self) -> None:
        self.entries = []
        self._save()

    def _save(self) -> None:
        write_epochs(self.path, self.entries)
