"""The crash file system: a FUSE passthrough over a backing directory that keeps every
write that was not fsynced in its own memory, as a page cache does, and on command loses
it as a machine crash would (riverlog's LazyFS). The rules of what is durable are
`crash_overlay.py`'s; this module is the FUSE glue (mfusepy over Debian's libfuse3) and the
process that serves one mount:

    python -m riverlog.testing.crashfs BACKING MOUNTPOINT

Commands, one per line on standard input, each answered by one JSON line on standard out:

    pending                    {"pending_bytes": N, "new_names": [...]}
    crash WRITEBACK SEED       writes back each dirty page with probability WRITEBACK
                               (seeded), drops the rest, undoes names never made durable;
                               {"lost_bytes": N, "kept_bytes": N, "undone": [...]}

After `crash` every operation on the mount fails with EIO (the machine is off) until the
mount is gone; the process ends when it is unmounted (`crash_mount.py` does that and starts
a fresh process on the same backing directory: the reboot). End of input unmounts.

Invariants: the backing directory holds exactly the durable state at every moment (unsynced
bytes never reach it before `fsync`, except through a crash's write-back); every operation
and command runs under one lock; FUSE runs single-threaded in the foreground.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import mfusepy

from riverlog.testing.crash_overlay import CrashOverlay, CrashPlan, Flush

F = TypeVar("F", bound=Callable[..., Any])

_STAT_FIELDS = (
    "st_mode",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_size",
    "st_ino",
    "st_atime",
    "st_mtime",
    "st_ctime",
    "st_blocks",
    "st_blksize",
)


def _guarded(op: F) -> F:
    """Run `op` under the file system's lock; EIO once the machine has crashed."""

    def run(self: CrashFS, *args: Any) -> Any:
        with self.mutex:
            if self.crashed:
                raise mfusepy.FuseOSError(errno.EIO)
            return op(self, *args)

    run.__name__ = op.__name__
    run.__doc__ = op.__doc__
    return run  # type: ignore[return-value]


class CrashFS(mfusepy.Operations):  # type: ignore[misc]  # mfusepy is untyped
    use_ns = True

    def __init__(self, backing: Path) -> None:
        self.root = str(backing.resolve())
        self.overlay = CrashOverlay()
        self.mutex = threading.Lock()
        self.crashed = False
        self.inodes: dict[int, int] = {}
        """open backing descriptor -> its inode number"""

    def _full(self, path: str) -> str:
        return self.root + path

    def _inode(self, path: str, fh: int | None) -> int:
        if fh is not None and fh in self.inodes:
            return self.inodes[fh]
        return os.lstat(self._full(path)).st_ino

    def _open(self, full: str, flags: int, mode: int = 0o644) -> int:
        # the backing file is written only by `fsync`, at explicit offsets: never O_APPEND;
        # O_TRUNC goes through the overlay (a truncate is durable at once)
        fd = os.open(full, flags & ~(os.O_APPEND | os.O_TRUNC), mode)
        self.inodes[fd] = os.fstat(fd).st_ino
        if flags & os.O_TRUNC:
            self._truncate(self.inodes[fd], fd, 0)
        return fd

    def _truncate(self, inode: int, fd_or_path: int | str, length: int) -> None:
        backing_size = os.stat(fd_or_path).st_size
        cut = self.overlay.truncate(inode, backing_size, length)
        if cut is not None:
            os.truncate(fd_or_path, cut)

    # --- data ---------------------------------------------------------------------------

    @_guarded
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.fstat(fh) if fh is not None and fh in self.inodes else os.lstat(self._full(path))
        attrs = {key: getattr(st, key) for key in _STAT_FIELDS}
        for key in ("st_atime", "st_mtime", "st_ctime"):
            attrs[key] = getattr(st, key + "_ns")
        if stat.S_ISREG(st.st_mode):
            attrs["st_size"] = self.overlay.size(st.st_ino, st.st_size)
        return attrs

    @_guarded
    def open(self, path: str, flags: int) -> int:
        return self._open(self._full(path), flags)

    @_guarded
    def create(self, path: str, mode: int, flags: int) -> int:
        full = self._full(path)
        existed = os.path.lexists(full)
        fd = self._open(full, flags | os.O_CREAT, mode)
        if not existed:
            self.overlay.forget(self.inodes[fd])
            self.overlay.created(path)
        return fd

    @_guarded
    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return self.overlay.read(self.inodes[fh], offset, size, os.pread(fh, size, offset))

    @_guarded
    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        inode = self.inodes[fh]
        backing = self.overlay.files.get(inode)
        backing_size = os.fstat(fh).st_size if backing is None else backing.durable_size
        self.overlay.write(inode, backing_size, offset, data)
        return len(data)

    @_guarded
    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        target: int | str = fh if fh is not None and fh in self.inodes else self._full(path)
        self._truncate(self._inode(path, fh), target, length)
        return 0

    @_guarded
    def fsync(self, path: str, datasync: int, fh: int) -> int:
        flush = self.overlay.sync(self.inodes[fh])
        if flush is not None:  # written by another descriptor, maybe a writable one
            fd = os.open(f"/proc/self/fd/{fh}", os.O_WRONLY)
            try:
                _write_through(fd, flush)
                os.fsync(fd)
            finally:
                os.close(fd)
        os.fsync(fh)
        return 0

    @_guarded
    def flush(self, path: str, fh: int) -> int:
        return 0  # close(2) does not make anything durable

    @_guarded
    def release(self, path: str, fh: int) -> int:
        self.inodes.pop(fh, None)
        os.close(fh)
        return 0

    # --- names --------------------------------------------------------------------------

    @_guarded
    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        fd = os.open(self._full(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.overlay.dir_synced(path)
        return 0

    @_guarded
    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._full(path))]

    @_guarded
    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._full(path), mode)
        self.overlay.created(path)
        return 0

    @_guarded
    def unlink(self, path: str) -> int:
        os.unlink(self._full(path))
        self.overlay.removed(path)
        return 0

    @_guarded
    def rmdir(self, path: str) -> int:
        os.rmdir(self._full(path))
        self.overlay.removed(path)
        return 0

    @_guarded
    def rename(self, old: str, new: str) -> int:
        existed = os.path.lexists(self._full(new))
        os.rename(self._full(old), self._full(new))
        self.overlay.renamed(old, new, existed)
        return 0

    @_guarded
    def symlink(self, target: str, source: str) -> int:
        os.symlink(source, self._full(target))
        self.overlay.created(target)
        return 0

    @_guarded
    def readlink(self, path: str) -> str:
        return os.readlink(self._full(path))

    @_guarded
    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._full(path), mode)
        return 0

    @_guarded
    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._full(path), uid, gid, follow_symlinks=False)
        return 0

    @_guarded
    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self._full(path), follow_symlinks=False)
        else:
            os.utime(self._full(path), ns=times, follow_symlinks=False)
        return 0

    @_guarded
    def access(self, path: str, amode: int) -> int:
        if not os.access(self._full(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    @_guarded
    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._full(path))
        names = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files")
        return {key: getattr(st, key) for key in (*names, "f_ffree", "f_favail", "f_namemax")}

    # --- commands -----------------------------------------------------------------------

    def command(self, line: str) -> dict[str, Any]:
        words = line.split()
        with self.mutex:
            if words == ["pending"]:
                return {
                    "pending_bytes": self.overlay.pending_bytes(),
                    "new_names": sorted(self.overlay.new_names),
                }
            if len(words) == 3 and words[0] == "crash" and not self.crashed:
                self.crashed = True
                paths = self._paths()
                names = {inode: path[len(self.root) :] for inode, path in paths.items()}
                plan = self.overlay.crash(float(words[1]), int(words[2]), names)
                return self._apply(plan, paths)
        return {"error": f"unknown command {line.strip()!r}"}

    def _paths(self) -> dict[int, str]:
        """inode -> a backing path of every file."""
        paths: dict[int, str] = {}
        for directory, _, names in os.walk(self.root):
            for name in names:
                full = os.path.join(directory, name)
                paths.setdefault(os.lstat(full).st_ino, full)
        return paths

    def _apply(self, plan: CrashPlan, paths: dict[int, str]) -> dict[str, Any]:
        """Make the backing directory what the disk holds after the power cut."""
        for inode, flush in plan.writeback.items():
            if inode in paths:  # else: removed since (its data went with it)
                fd = os.open(paths[inode], os.O_WRONLY)
                try:
                    _write_through(fd, flush)
                    os.fsync(fd)
                finally:
                    os.close(fd)
        undone = []
        for path, origin in plan.undo:
            full = self._full(path)
            if not os.path.lexists(full):
                continue
            if origin is None:
                _remove_tree(full)
            else:
                os.replace(full, self._full(origin))
            undone.append([path, origin])
        return {"lost_bytes": plan.lost_bytes, "kept_bytes": plan.kept_bytes, "undone": undone}


def _write_through(fd: int, flush: Flush | None) -> None:
    if flush is None:
        return
    for offset, data in flush.writes:
        written = 0
        while written < len(data):
            written += os.pwrite(fd, data[written:], offset + written)
    if os.fstat(fd).st_size < flush.size:
        os.ftruncate(fd, flush.size)


def _remove_tree(full: str) -> None:
    if os.path.isdir(full) and not os.path.islink(full):
        for directory, dirs, files in os.walk(full, topdown=False):
            for name in files:
                os.unlink(os.path.join(directory, name))
            for name in dirs:
                os.rmdir(os.path.join(directory, name))
        os.rmdir(full)
    else:
        os.unlink(full)


def _serve_commands(fs: CrashFS, mountpoint: str) -> None:
    for line in sys.stdin:
        print(json.dumps(fs.command(line)), flush=True)
    # our owner is gone: leave no mount behind
    subprocess.run(["umount", "-l", mountpoint], capture_output=True, timeout=30, check=False)


def main(argv: list[str] | None = None) -> int:
    backing, mountpoint = argv or sys.argv[1:]
    fs = CrashFS(Path(backing))
    threading.Thread(target=_serve_commands, args=(fs, mountpoint), daemon=True).start()
    mfusepy.FUSE(fs, mountpoint, foreground=True, nothreads=True, fsname="crashfs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
