"""The crash file system's bookkeeping (`riverlog.testing.crash_overlay`), pure: which bytes
and names a machine crash loses, what reads see meanwhile, what fsync writes through."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from riverlog.testing.crash_overlay import PAGE, CrashOverlay, Flush


def apply(disk: bytearray, flush: Flush | None) -> bytearray:
    """What the glue does with a Flush on a backing file."""
    if flush is None:
        return disk
    for offset, data in flush.writes:
        if len(disk) < offset:
            disk.extend(bytes(offset - len(disk)))
        disk[offset : offset + len(data)] = data
    if len(disk) < flush.size:
        disk.extend(bytes(flush.size - len(disk)))
    return disk


def test_reads_see_unsynced_writes_over_the_durable_bytes() -> None:
    o = CrashOverlay()
    disk = b"0123456789"
    o.write(1, len(disk), 4, b"ab")
    o.write(1, len(disk), 12, b"XY")  # past the end: a gap of zeros
    assert o.size(1, len(disk)) == 14
    assert o.read(1, 0, 100, disk) == b"0123ab6789\0\0XY"
    assert o.read(1, 5, 3, disk[5:8]) == b"b67"
    assert o.read(1, 14, 10, b"") == b""
    assert o.read(2, 0, 4, b"abcd") == b"abcd"  # a file with nothing pending


def test_fsync_writes_everything_through_and_leaves_nothing_pending() -> None:
    o = CrashOverlay()
    o.write(1, 0, 0, b"hello ")
    o.write(1, 0, 6, b"world")  # adjacent: merged
    assert len(o.files[1].extents) == 1
    disk = apply(bytearray(), o.sync(1))
    assert disk == b"hello world"
    assert o.sync(1) is None
    assert o.pending_bytes() == 0


def test_a_crash_loses_what_was_not_synced() -> None:
    o = CrashOverlay()
    disk = apply(bytearray(), None)
    o.write(1, 0, 0, b"synced")
    disk = apply(disk, o.sync(1))
    o.write(1, len(disk), len(disk), b"-lost")
    plan = o.crash()
    assert plan.writeback == {}
    assert plan.lost_bytes == 5
    assert bytes(disk) == b"synced"
    assert o.pending_bytes() == 0 and not o.new_names


def test_a_truncate_is_durable_at_once_and_cuts_pending_bytes() -> None:
    o = CrashOverlay()
    o.write(1, 10, 10, b"abcdef")
    assert o.truncate(1, 10, 12) is None  # above the durable size: nothing to cut yet
    assert o.read(1, 8, 10, b"89") == b"89ab"
    assert o.truncate(1, 10, 4) == 4  # below it: the backing file is cut now
    assert o.files[1].extents == []
    assert o.sync(1) == Flush((), 4)
    o.truncate(2, 0, 100)  # an extension is pending like data
    assert o.sync(2) == Flush((), 100)


def test_overlapping_writes_merge_and_the_last_one_wins() -> None:
    o = CrashOverlay()
    o.write(1, 0, 10, b"aaaa")
    o.write(1, 0, 20, b"bbbb")
    o.write(1, 0, 12, b"XXXXXXXXXX")  # spans both and the gap
    assert [(s, bytes(b)) for s, b in o.files[1].extents] == [(10, b"aaXXXXXXXXXXbb")]
    o.write(1, 0, 0, b"zz")
    assert [s for s, _ in o.files[1].extents] == [0, 10]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3 * PAGE), st.binary(min_size=1, max_size=PAGE + 100)),
        max_size=12,
    ),
    st.integers(0, 2 * PAGE),
)
def test_reads_are_those_of_a_plain_file(writes: list[tuple[int, bytes]], durable: int) -> None:
    """Any writes over any durable file read back as on a file written in place, and
    fsync leaves exactly those bytes on the backing file."""
    disk = bytearray(random.Random(durable).randbytes(durable))
    model = bytearray(disk)
    o = CrashOverlay()
    for offset, data in writes:
        o.write(1, len(disk), offset, data)
        if len(model) < offset:
            model.extend(bytes(offset - len(model)))
        model[offset : offset + len(data)] = data
    assert o.size(1, len(disk)) == len(model)
    assert o.read(1, 0, len(model) + 10, bytes(disk)) == model
    assert apply(disk, o.sync(1)) == model


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5 * PAGE), st.integers(0, 2**32), st.floats(0.0, 1.0))
def test_a_crash_writes_back_whole_pages_or_nothing(length: int, seed: int, p: float) -> None:
    """Each dirty page is on the disk after the crash entirely (new bytes) or not at all
    (zeros past the old end): never part of a page, never a byte that was not written."""
    o = CrashOverlay()
    data = bytes(random.Random(seed).randbytes(length))
    o.write(1, 0, 0, data)
    plan = o.crash(p, seed)
    disk = apply(bytearray(), plan.writeback.get(1))
    assert plan.kept_bytes + plan.lost_bytes == length
    for page in range(0, length, PAGE):
        got = bytes(disk[page : page + PAGE])
        want = data[page : page + PAGE]
        assert got in (want, bytes(len(got))), page
    assert plan.writeback.get(1) is None or plan.writeback[1].size == len(disk)


def test_a_crash_repeats_whatever_the_order_of_the_writes() -> None:
    def dirty(order: list[int]) -> CrashOverlay:
        o = CrashOverlay()
        for inode in order:
            o.write(inode, 0, 0, bytes(8 * PAGE))
        return o

    names = {1: "/a", 2: "/b", 3: "/c"}
    first = dirty([1, 2, 3]).crash(0.5, 7, names)
    assert first == dirty([3, 1, 2]).crash(0.5, 7, names)
    assert first != dirty([1, 2, 3]).crash(0.5, 8, names)


def test_a_created_name_is_lost_unless_its_directory_was_fsynced() -> None:
    o = CrashOverlay()
    o.created("/t-0")
    o.created("/t-0/0.log")
    o.dir_synced("/t-0")  # the segment's name is durable, its directory's name is not
    assert o.crash().undo == (("/t-0", None),)
    o.created("/t-0")
    o.dir_synced("/")
    assert o.crash().undo == ()


def test_write_tmp_fsync_rename_without_a_directory_fsync_leaves_the_old_file() -> None:
    o = CrashOverlay()
    o.created("/ckpt.tmp")
    o.renamed("/ckpt.tmp", "/ckpt", target_existed=True)  # over a durable checkpoint
    assert o.crash().undo == ()  # atomic replace: the new file under the old name
    o.created("/ckpt.tmp")
    o.renamed("/ckpt.tmp", "/ckpt", target_existed=False)  # the first checkpoint ever
    assert o.crash().undo == (("/ckpt", None),)


def test_a_durable_name_renamed_to_a_new_one_goes_back_at_the_crash() -> None:
    o = CrashOverlay()
    o.created("/d/x.new")  # a new name inside the directory that moves
    o.renamed("/d", "/e", target_existed=False)
    assert o.new_names == {"/e": "/d", "/e/x.new": None}
    assert o.crash().undo == (("/e/x.new", None), ("/e", "/d"))  # deepest first
    o.renamed("/a.log", "/a.log.deleted", target_existed=False)
    o.dir_synced("/")
    assert o.crash().undo == ()


def test_a_removed_name_leaves_nothing_to_undo() -> None:
    o = CrashOverlay()
    o.created("/t-0")
    o.created("/t-0/0.log")
    o.removed("/t-0")
    assert o.crash().undo == ()
