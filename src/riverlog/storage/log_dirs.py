"""Several log directories (JBOD): where a new log goes, and moving a log between them.

- `canonical`: a directory as riverlog names it everywhere (DescribeLogDirs, AlterReplicaLogDirs,
  `dir_of`): its absolute path, as Kafka's `File.getAbsolutePath` (symlinks kept).
- `least_loaded`: Kafka's placement: the online directory holding the fewest logs, the first
  in `log.dirs` order on a tie.
- `move_log` (AlterReplicaLogDirs). Kafka copies through a `-future` replica fed by a
  fetcher while the current one keeps serving, then swaps. riverlog's scheme is simpler and
  does not run concurrently with writes: the caller (on the event loop, holding the log
  manager's housekeeping lock) gets the log flushed, then
  * same filesystem: one `rename` of the partition directory — atomic, instant;
  * another filesystem: a copy to `<dest>/<name>.<id>-future`, every file fsynced, renamed
    to `<dest>/<name>`; the source is then renamed to `<name>.<id>-delete` and removed.
  The partition stays readable throughout (nothing else runs meanwhile; reads already
  handed to the network keep their open descriptors: the old segments are closed only after
  `file.delete.delay.ms`), and nothing acknowledged is lost: the new log is loaded from
  the flushed files. The cost: appends to the partition (and everything else on the event
  loop) wait for the copy — seconds per GB across filesystems.
- `complete_moves`: at load, the leftovers of a move a crash interrupted: `-future`
  directories (the source is still whole) and `-delete` ones (the destination is whole) go.

Invariant: at any moment a partition's data is whole in exactly one `<dir>/<topic>-<p>`.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from riverlog.storage import checkpoint
from riverlog.storage.log import PartitionLog

log = logging.getLogger(__name__)

FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"


def canonical(directory: Path | str) -> Path:
    return Path(os.path.abspath(directory))


def least_loaded(online: list[Path], placed: list[Path]) -> Path:
    """The directory of `online` with the fewest logs (`placed`: each log's directory)."""
    return min(online, key=lambda d: (placed.count(d), online.index(d)))


def _fsync_tree(root: Path) -> None:
    for here, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(here, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        checkpoint.fsync_dir(Path(here))


def move_log(old: PartitionLog, destination: Path, clock_ms: Callable[[], int]) -> PartitionLog:
    """Move `old`'s directory into `destination` (see the module docstring); the log
    loaded from there."""
    source = old.directory
    name = source.name
    final = destination / name
    with old.lock:
        old.flush()
        old.producers.take_snapshot(old.log_end_offset)
        old.delete_expired_files(0, force=True)
        end, start, high_watermark = old.log_end_offset, old.log_start_offset, old.high_watermark
        if final.exists():
            raise FileExistsError(f"{final} exists already")
        if os.stat(source).st_dev == os.stat(destination).st_dev:
            os.rename(source, final)
        else:
            token = uuid.uuid4().hex
            future = destination / f"{name}.{token}{FUTURE_SUFFIX}"
            shutil.copytree(source, future)
            _fsync_tree(future)
            os.rename(future, final)
            checkpoint.fsync_dir(destination)
            doomed = source.with_name(f"{name}.{token}{DELETE_SUFFIX}")
            os.rename(source, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        checkpoint.fsync_dir(destination)
        checkpoint.fsync_dir(source.parent)
        moved = PartitionLog(
            final,
            old.config,
            recovery_point=end,
            log_start_offset=start,
            clean_shutdown=True,
            clock_ms=clock_ms,
        )
        moved.update_high_watermark(high_watermark)
        # Reads in flight may still use the old descriptors: close them later.
        close_at = clock_ms() + old.config.file_delete_delay_ms
        moved.pending_deletes.extend((close_at, seg) for seg in old.segments)
    log.info("moved %s from %s to %s (log end offset %d)", name, source.parent, destination, end)
    return moved


def complete_moves(data_dir: Path) -> None:
    """Remove what a crash in the middle of `move_log` left in `data_dir`."""
    for entry in data_dir.iterdir():
        if entry.is_dir() and entry.name.endswith((FUTURE_SUFFIX, DELETE_SUFFIX)):
            log.info("removing %s, left by an interrupted log directory move", entry)
            shutil.rmtree(entry, ignore_errors=True)
