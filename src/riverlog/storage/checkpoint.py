"""Checkpoint files in Kafka's text format, written atomically.

    <version>            0
    <entry count>
    <entry>              one per line: "topic partition offset" or "epoch start_offset"

Writing goes to `<name>.tmp`, is fsynced, renamed over the old file, and the directory fsynced:
a crash leaves either the old or the new checkpoint, never a torn one. A file that does not
parse raises `CorruptCheckpointError` (the caller decides to fall back, e.g. to a full scan).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

VERSION = 0

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"


class CorruptCheckpointError(ValueError):
    """A checkpoint file exists but is not in the expected format."""


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data`; on failure (a full disk, say) `path` is as it was and no
    temporary file is left taking space."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some filesystems refuse fsync on directories
            os.fsync(fd)
    finally:
        os.close(fd)


def _write_entries(path: Path, entries: list[str]) -> None:
    text = f"{VERSION}\n{len(entries)}\n" + "".join(e + "\n" for e in entries)
    write_atomically(path, text.encode())


def _read_entries(path: Path, fields: int) -> list[list[str]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(f"{path}: not text") from e
    if len(lines) < 2 or lines[0].strip() != str(VERSION) or not lines[1].strip().isdigit():
        raise CorruptCheckpointError(f"{path}: bad header")
    count = int(lines[1])
    rows = [line.split() for line in lines[2:] if line.strip()]
    if len(rows) != count or any(len(r) != fields for r in rows):
        raise CorruptCheckpointError(f"{path}: expected {count} entries of {fields} fields")
    return rows


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    """Write a (topic, partition) → offset checkpoint."""
    _write_entries(path, [f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())])


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """Read a (topic, partition) → offset checkpoint; a missing file is empty."""
    try:
        return {(t, int(p)): int(o) for t, p, o in _read_entries(path, 3)}
    except ValueError as e:
        if isinstance(e, CorruptCheckpointError):
            raise
        raise CorruptCheckpointError(f"{path}: {e}") from e


def write_epochs(path: Path, epochs: list[tuple[int, int]]) -> None:
    """Write a leader epoch checkpoint: (epoch, start offset) in increasing order."""
    _write_entries(path, [f"{e} {o}" for e, o in epochs])


def read_epochs(path: Path) -> list[tuple[int, int]]:
    try:
        return [(int(e), int(o)) for e, o in _read_entries(path, 2)]
    except ValueError as e:
        if isinstance(e, CorruptCheckpointError):
            raise
        raise CorruptCheckpointError(f"{path}: {e}") from e
