"""The bookkeeping of the crash file system (`crashfs.py`): what a machine crash would lose.
Pure: no I/O, no clock; the FUSE glue reads and writes the backing directory and asks this
module what to show and what to persist.

The model (a page cache that a power cut empties, with POSIX's durability rules taken
literally, as LazyFS does for data and ALICE-style checkers do for names):

- File data. Bytes written but not yet fsynced live here, per file (keyed by the backing
  file's inode number, so renames and open descriptors need no bookkeeping), as
  non-overlapping extents over the durable bytes of the backing file; reads see them.
  `fsync`/`fdatasync` of the file hands them to the glue to write through (`sync`). A
  truncate is durable at once (the backing file is cut; unsynced extents past it go), and so
  is a removal. A rename does not write anything through: a file written, renamed over
  another and never fsynced is empty (or short) after the crash, as on file systems without
  ext4's `auto_da_alloc` heuristic.
- Names. A name that did not exist when its directory was last fsynced (a created file or
  directory, the target of a rename that replaced nothing) is not durable until its parent
  directory is fsynced (`fsyncdir`), as the fsync(2) man page says: "an explicit fsync() on a
  file descriptor for the directory is also needed". At the crash such a name goes: a created
  one is removed (with everything below it), a renamed one goes back to the durable name it
  came from. A rename over an existing name is atomic and durable at once (the crash shows
  the new file under it). Removals (unlink, rmdir) are durable at once.
- The crash. Everything not synced is lost, except that before the power went the kernel
  may have written back any subset of the dirty pages: `crash(writeback, seed)` persists each
  dirty 4 KiB page with probability `writeback` (a page past the durable end grows the file,
  leaving zeros in any page between that was not written back). writeback=0 is LazyFS's
  "clear-cache"; 0 < writeback < 1 makes torn tails, holes and indexes longer than their logs.

Invariants: a file's extents are sorted, disjoint, non-empty and lie below its `size`;
`durable_size` ≤ the backing file's size as the glue keeps it; after `crash` nothing is
pending (the object can be dropped or reused).
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field

PAGE = 4096


@dataclass
class FileState:
    """A file with unsynced changes: `size` is what readers see, `durable_size` the backing's."""

    durable_size: int
    size: int
    extents: list[tuple[int, bytearray]] = field(default_factory=list)

    @property
    def pending_bytes(self) -> int:
        return sum(len(data) for _, data in self.extents)


@dataclass(frozen=True)
class Flush:
    """What the glue writes to the backing file: these bytes at these offsets, then the
    file's size (extended with zeros if larger than the data reaches)."""

    writes: tuple[tuple[int, bytes], ...]
    size: int


@dataclass(frozen=True)
class CrashPlan:
    """What the glue does to the backing directory to make it what a disk holds after the
    power cut: write back these pages (by inode), then undo these names, in order (deepest
    first)."""

    writeback: dict[int, Flush]
    undo: tuple[tuple[str, str | None], ...]
    """(path, None): created and never made durable: remove it (a directory with everything
    in it); (path, origin): renamed from the durable name `origin`: rename it back."""
    lost_bytes: int
    kept_bytes: int


def parent(path: str) -> str:
    head = path.rstrip("/").rpartition("/")[0]
    return head or "/"


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


class CrashOverlay:
    def __init__(self) -> None:
        self.files: dict[int, FileState] = {}
        self.new_names: dict[str, str | None] = {}
        """Names not durable yet -> the durable name they were renamed from (None: created)."""

    # --- data ---------------------------------------------------------------------------

    def size(self, inode: int, backing_size: int) -> int:
        state = self.files.get(inode)
        return backing_size if state is None else state.size

    def pending_bytes(self) -> int:
        return sum(s.pending_bytes for s in self.files.values())

    def _state(self, inode: int, backing_size: int) -> FileState:
        state = self.files.get(inode)
        if state is None:
            state = self.files[inode] = FileState(backing_size, backing_size)
        return state

    def write(self, inode: int, backing_size: int, offset: int, data: bytes) -> None:
        """`data` written at `offset`, not synced."""
        if not data:
            return
        state = self._state(inode, backing_size)
        end = offset + len(data)
        extents = state.extents
        # extents touching [offset, end] (adjacent ones merge, so appends grow one extent)
        first = bisect_left(extents, offset, key=lambda e: e[0] + len(e[1]))
        last = first
        while last < len(extents) and extents[last][0] <= end:
            last += 1
        if first == last:
            extents.insert(first, (offset, bytearray(data)))
        elif last - first == 1 and extents[first][0] <= offset:
            start, buf = extents[first]
            buf[offset - start : end - start] = data
        else:
            start = min(offset, extents[first][0])
            stop = max(end, extents[last - 1][0] + len(extents[last - 1][1]))
            merged = bytearray(stop - start)
            for s, buf in extents[first:last]:
                merged[s - start : s - start + len(buf)] = buf
            merged[offset - start : end - start] = data
            extents[first:last] = [(start, merged)]
        state.size = max(state.size, end)

    def read(self, inode: int, offset: int, length: int, backing: bytes) -> bytes:
        """What a reader sees at [offset, offset+length): `backing` (the backing file's
        bytes there, short at its end) under the unsynced extents, up to the file's size."""
        state = self.files.get(inode)
        if state is None:
            return backing
        stop = min(offset + length, state.size)
        if stop <= offset:
            return b""
        out = bytearray(backing[: stop - offset])
        if len(out) < stop - offset:
            out.extend(bytes(stop - offset - len(out)))
        for start, buf in state.extents:
            lo, hi = max(start, offset), min(start + len(buf), stop)
            if lo < hi:
                out[lo - offset : hi - offset] = buf[lo - start : hi - start]
        return bytes(out)

    def truncate(self, inode: int, backing_size: int, length: int) -> int | None:
        """The file's size set to `length`; the size to cut the backing file to now (a
        shrink below the durable size is durable at once), or None."""
        state = self._state(inode, backing_size)
        kept = []
        for start, buf in state.extents:
            if start < length:
                kept.append((start, buf[: length - start]))
        state.extents = kept
        state.size = length
        if length < state.durable_size:
            state.durable_size = length
            return length
        return None

    def sync(self, inode: int) -> Flush | None:
        """fsync of the file: what to write through (None: nothing pending)."""
        state = self.files.pop(inode, None)
        if state is None:
            return None
        writes = tuple((start, bytes(buf)) for start, buf in state.extents)
        return Flush(writes, state.size)

    def forget(self, inode: int) -> None:
        """A new file took this inode number (the old file is gone): nothing pending."""
        self.files.pop(inode, None)

    # --- names --------------------------------------------------------------------------

    def created(self, path: str) -> None:
        """A file or directory created at `path` (a name that did not exist)."""
        self.new_names.setdefault(path, None)

    def removed(self, path: str) -> None:
        """`path` unlinked or removed (durable at once)."""
        for name in [n for n in self.new_names if _under(n, path)]:
            del self.new_names[name]

    def renamed(self, old: str, new: str, target_existed: bool) -> None:
        """`old` renamed to `new` (`target_existed`: it replaced a file there)."""
        replaced = target_existed and new not in self.new_names
        origin = self.new_names.pop(old, old)
        self.removed(new)
        moved = {n: o for n, o in self.new_names.items() if _under(n, old)}
        for name, came_from in moved.items():
            del self.new_names[name]
            self.new_names[new + name[len(old) :]] = came_from
        if not replaced:
            self.new_names[new] = origin

    def dir_synced(self, directory: str) -> None:
        """fsync of a directory: the names in it are durable."""
        for name in [n for n in self.new_names if parent(n) == directory]:
            del self.new_names[name]

    # --- the crash ----------------------------------------------------------------------

    def crash(
        self, writeback: float = 0.0, seed: int = 0, names: Mapping[int, str] | None = None
    ) -> CrashPlan:
        """The power goes: each dirty page was written back with probability `writeback`;
        the rest is lost. Clears everything. Whether a page was written back depends only on
        `seed`, the file's name in `names` (inode -> path; else its inode) and the page's
        offset, so a crash repeats exactly however the writes were ordered."""
        names = names or {}
        plan: dict[int, Flush] = {}
        lost = kept = 0
        for inode, state in self.files.items():
            writes: list[tuple[int, bytes]] = []
            for start, buf in state.extents:
                page = start - start % PAGE
                while page < start + len(buf):
                    lo, hi = max(page, start), min(page + PAGE, start + len(buf))
                    chance = random.Random(f"{seed}:{names.get(inode, inode)}:{page}")
                    if writeback > 0 and chance.random() < writeback:
                        writes.append((lo, bytes(buf[lo - start : hi - start])))
                        kept += hi - lo
                    else:
                        lost += hi - lo
                    page += PAGE
            if writes:
                end = max(state.durable_size, max(o + len(d) for o, d in writes))
                plan[inode] = Flush(tuple(writes), end)
        undo = tuple(sorted(self.new_names.items(), key=lambda item: -item[0].count("/")))
        self.files.clear()
        self.new_names.clear()
        return CrashPlan(plan, undo, lost, kept)
