"""The `.lock` file of a log directory: one broker process per directory, as Kafka's FileLock.

A broker takes an exclusive `fcntl` record lock (what Java's `FileChannel.tryLock` takes on
Linux) on `<dir>/.lock` in every log directory before it reads or writes anything there,
and holds it until it stops; the kernel drops it when the process dies, so a crashed broker
never leaves a stale lock. A second process on the same directory fails at once with
`LogDirLockedError` and Kafka's message. A directory that cannot be locked for another
reason (an I/O error: it is unusable) is skipped, as Kafka does: the log manager then finds
it offline and says so (KIP-112). Record locks belong to the process: a second lock
from the same process succeeds (in-process brokers of one test may restart on a directory).

Invariant: while a `LogDirLock` is held, its descriptor stays open; closing any other
descriptor of the same file in this process would drop the lock, so nothing else opens it.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class LogDirLockedError(RuntimeError):
    """Another process holds the directory's lock."""


class LogDirLock:
    """Exclusive locks on `.lock` in each of `dirs` (created if missing)."""

    def __init__(self, dirs: list[Path]) -> None:
        self._fds: list[int] = []
        try:
            for directory in dirs:
                try:
                    self._lock(directory)
                except LogDirLockedError:
                    raise
                except OSError as e:
                    log.debug("cannot lock log directory %s: %s", directory, e)
        except BaseException:
            self.release()
            raise

    def _lock(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirLockedError(
                f"Failed to acquire lock on file .lock in {directory}. A Kafka instance in "
                "another process or thread is using this directory."
            ) from None
        self._fds.append(fd)

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)  # closing the descriptor drops its lock
