"""A client connection's big responses wake the event loop once, not once per TCP segment
(SO_RCVLOWAT while the rest of a big frame is awaited, issue 29) — and the frames after
it, and a peer hanging up mid-frame, are still seen at once.

A real loopback TCP server sends frames in paced 64 KiB pieces to the connection's own
protocol (`_Socket`); its reads are counted. On asyncio's loop and on uvloop (the blocking
clients' loop).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
import uvloop

from riverlog.client import connection
from riverlog.client.connection import _Socket

PIECE = 64 * 1024
BIG = 1 << 20
T = TypeVar("T")
Run = Callable[[Coroutine[Any, Any, T]], T]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run[Any]:
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def running(coroutine: Coroutine[Any, Any, T]) -> T:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coroutine)

    return running


class _Counting(_Socket):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.got: list[int] = []
        self.arrived = asyncio.Event()
        self.on_frame = self._frame

    def _frame(self, frame: bytes | bytearray | memoryview) -> None:
        self.got.append(len(frame))
        self.arrived.set()

    def buffer_updated(self, nbytes: int) -> None:
        self.reads += 1
        super().buffer_updated(nbytes)


async def _serve(script: list[bytes | None]) -> tuple[asyncio.Server, int]:
    """A server that writes `script` to its client piece by piece (None: hang up)."""

    async def handle(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for piece in script:
            if piece is None:
                writer.transport.abort()
                return
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.003)  # pacing, so that pieces arrive apart
        await asyncio.sleep(30)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _pieces(data: bytes) -> list[bytes | None]:
    return [data[i : i + PIECE] for i in range(0, len(data), PIECE)]


async def _connect(port: int) -> _Counting:
    _, protocol = await asyncio.get_running_loop().create_connection(_Counting, "127.0.0.1", port)
    return protocol


async def _until(protocol: _Counting, count: int) -> None:
    async with asyncio.timeout(10):
        while len(protocol.got) < count and not protocol.lost.done():
            protocol.arrived.clear()
            await asyncio.wait(
                [asyncio.ensure_future(protocol.arrived.wait()), protocol.lost],
                return_when=asyncio.FIRST_COMPLETED,
            )


def test_a_big_response_wakes_the_reader_about_once(run: Run[Any]) -> None:
    async def go() -> tuple[int, list[int]]:
        big = struct.pack(">i", BIG) + bytes(BIG)
        small = struct.pack(">i", 10) + bytes(10)
        server, port = await _serve([*_pieces(big), small])
        try:
            protocol = await _connect(port)
            await _until(protocol, 2)
            assert protocol.transport is not None
            protocol.transport.close()
            return protocol.reads, protocol.got
        finally:
            server.close()

    reads, got = run(go())
    assert got == [BIG, 10]  # the small frame after it came too (the mark went back to 1)
    # 17 pieces: without the low-water mark each is a wake-up of its own.
    assert reads <= 5, reads


def test_without_the_mark_each_piece_wakes_it(
    monkeypatch: pytest.MonkeyPatch, run: Run[Any]
) -> None:
    """The counterpart: what the test above would see without SO_RCVLOWAT."""
    monkeypatch.setattr(connection, "LOWAT_MIN_BYTES", 1 << 40)

    async def go() -> int:
        server, port = await _serve(_pieces(struct.pack(">i", BIG) + bytes(BIG)))
        try:
            protocol = await _connect(port)
            await _until(protocol, 1)
            assert protocol.transport is not None
            protocol.transport.close()
            return protocol.reads
        finally:
            server.close()

    assert run(go()) >= 8


def test_a_peer_hanging_up_mid_frame_is_seen_at_once(run: Run[Any]) -> None:
    async def go() -> _Counting:
        data = struct.pack(">i", BIG) + bytes(BIG // 2)
        server, port = await _serve([*_pieces(data), None])
        try:
            protocol = await _connect(port)
            async with asyncio.timeout(5):  # not after the frame's missing half
                await protocol.lost
            return protocol
        finally:
            server.close()

    protocol = run(go())
    assert protocol.got == []
