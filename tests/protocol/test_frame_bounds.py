"""FrameReader's bounds: memory grows with bytes received, never with a size announced, and a
request memory budget is reserved per frame and can hold the reader."""

from __future__ import annotations

import struct

from riverlog.protocol.framing import BIG_FRAME_FIRST_BYTES, FrameReader


class Budget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0

    def try_reserve(self, nbytes: int) -> bool:
        if self.used >= self.capacity:
            return False
        self.used += nbytes
        return True


def test_an_announced_size_allocates_only_what_arrives() -> None:
    reader = FrameReader(max_frame_bytes=100 << 20)
    assert reader.feed(struct.pack(">i", 100 << 20) + b"x" * 1000) == []
    held = len(reader._shared) + len(reader._big or b"")
    assert held <= 2 * BIG_FRAME_FIRST_BYTES  # not 100 MiB
    reader.feed(b"y" * (1 << 20))
    assert len(reader._big or b"") <= 4 << 20  # doubling with what arrived


def test_a_big_frame_still_arrives_whole() -> None:
    payload = bytes(range(256)) * 20_000  # ~5 MiB, grown through several doublings
    stream = struct.pack(">i", len(payload)) + payload + struct.pack(">i", 2) + b"ok"
    reader = FrameReader()
    frames = []
    for i in range(0, len(stream), 70_000):
        frames += reader.feed(stream[i : i + 70_000])
    assert frames == [payload, b"ok"]


def test_a_refused_reservation_holds_the_reader_until_resumed() -> None:
    budget = Budget(100)
    reader = FrameReader(memory=budget)
    frames = reader.feed(b"".join(struct.pack(">i", 60) + bytes([n]) * 60 for n in range(3)))
    assert [f[0] for f in frames] == [0, 1] and reader.blocked and budget.used == 120
    assert reader.resume() == [] and reader.blocked  # still no budget
    budget.used = 0  # the two answered
    frames = reader.resume()
    assert [f[0] for f in frames] == [2] and not reader.blocked and budget.used == 60
    assert reader.reserved == 0


def test_the_frame_in_progress_keeps_its_reservation() -> None:
    budget = Budget(1 << 30)
    reader = FrameReader(memory=budget)
    reader.feed(struct.pack(">i", 1 << 20) + b"z" * 100)
    assert reader.reserved == 1 << 20 and budget.used == 1 << 20
    (frame,) = reader.feed(b"z" * ((1 << 20) - 100))
    assert len(frame) == 1 << 20 and reader.reserved == 0


def test_a_trusted_reader_allocates_a_big_frame_whole_and_reuses_its_buffer() -> None:
    reader = FrameReader(trusted=True)
    size = 1 << 20
    reader.feed(struct.pack(">i", size) + b"a" * 100)
    assert reader._big is not None and len(reader._big) == size  # whole at once
    (first,) = reader.feed(b"a" * (size - 100))
    assert bytes(first) == b"a" * size
    held = memoryview(first)[:10]  # a decoded record set still viewing the frame
    del first
    (second,) = reader.feed(struct.pack(">i", size) + b"b" * size)
    assert bytes(held) == b"a" * 10  # not overwritten: the second frame got a new buffer
    assert bytes(second) == b"b" * size
    second_buffer = id(second)
    del held, second
    (third,) = reader.feed(struct.pack(">i", size - 1) + b"c" * (size - 1))
    assert bytes(third) == b"c" * (size - 1)
    assert isinstance(third, memoryview) and id(third.obj) == second_buffer  # reused
    del third
    frames = reader.feed(struct.pack(">i", size) + b"d" * size + struct.pack(">i", 2) + b"ok")
    assert [bytes(f) for f in frames] == [b"d" * size, b"ok"]
