"""The network layer's bounds on a real loopback socket: connection quotas, the request
memory pool, and a client that leaves while being answered."""

from __future__ import annotations

import asyncio
import os
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from riverlog.protocol.framing import encode_request
from riverlog.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
)
from riverlog.protocol.primitives import FileRegion
from riverlog.server.admission import ConnectionQuotas, MemoryPool
from riverlog.server.dispatch import Dispatcher, RequestContext
from riverlog.server.listener import NetworkServer


async def _wait_for(check: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 5) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
async def quota_server() -> AsyncIterator[NetworkServer]:
    quotas = ConnectionQuotas(3, 2, {"127.0.0.2": 5})
    srv = NetworkServer(
        Dispatcher(), "127.0.0.1", 0, max_request_bytes=1 << 20, max_idle_ms=60000, quotas=quotas
    )
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop_accepting()
        await srv.drain(1.0)


async def test_connections_over_the_per_ip_limit_are_closed(quota_server: NetworkServer) -> None:
    first = await asyncio.open_connection("127.0.0.1", quota_server.port)
    second = await asyncio.open_connection("127.0.0.1", quota_server.port)
    third = await asyncio.open_connection("127.0.0.1", quota_server.port)
    assert await _closed(third[0])
    await _wait_for(lambda: len(quota_server.connections) == 2)
    first[1].close()
    await _wait_for(lambda: quota_server.quotas.total == 1)
    fourth = await asyncio.open_connection("127.0.0.1", quota_server.port)
    await _wait_for(lambda: len(quota_server.connections) == 2)
    assert quota_server.quotas.by_ip["127.0.0.1"] == 2
    for _, writer in (second, fourth):
        writer.close()


def test_connection_quotas_count_overrides_and_the_total() -> None:
    quotas = ConnectionQuotas(3, 1, {"10.0.0.9": 0, "10.0.0.2": 5})
    assert quotas.admit("10.0.0.1") is None
    refused = quotas.admit("10.0.0.1")
    assert refused is not None and "maximum of 1 connections" in refused
    assert quotas.admit("10.0.0.9") is not None  # 0: that address is refused
    assert quotas.admit("10.0.0.2") is None and quotas.admit("10.0.0.2") is None
    total = quotas.admit("10.0.0.2")
    assert total is not None and "maximum of 3 connections" in total
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.2") is None


async def test_the_memory_pool_holds_reading_until_requests_are_answered() -> None:
    """Budget 100 bytes; each request ~60: two are read (the pool is not strict, as Kafka's),
    the third waits until one is answered."""
    started: list[int] = []
    gate = asyncio.Event()

    async def held(context: RequestContext) -> HeartbeatResponse:
        body = context.request.body
        assert isinstance(body, HeartbeatRequest)
        started.append(body.generation_id)
        if body.generation_id < 3:
            await gate.wait()
        return HeartbeatResponse(error_code=0)

    dispatcher = Dispatcher()
    dispatcher.register(HeartbeatRequest, held)
    srv = NetworkServer(
        dispatcher,
        "127.0.0.1",
        0,
        max_request_bytes=1 << 20,
        max_idle_ms=60000,
        memory=MemoryPool(100),
    )
    await srv.start()
    try:
        clients = [await asyncio.open_connection("127.0.0.1", srv.port) for _ in range(3)]
        for generation, (_, writer) in enumerate(clients, 1):
            request = HeartbeatRequest(group_id="g" * 40, generation_id=generation, member_id="m")
            writer.write(encode_request(request, 3, generation, "pool"))
            await _wait_for(lambda g=generation: len(started) >= min(g, 2))  # type: ignore[misc]
        await _wait_for(lambda: any(c.reader.blocked for c in srv.connections))
        assert started == [1, 2] and srv.memory.used >= 100
        gate.set()
        await _wait_for(lambda: started == [1, 2, 3])
        for reader, _ in clients:
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
            await reader.readexactly(size)
        await _wait_for(lambda: srv.memory.used == 0)  # every reservation given back
        for _, writer in clients:
            writer.close()
    finally:
        await srv.stop_accepting()
        await srv.drain(1.0)


async def test_record_data_for_a_closing_connection_is_dropped_quietly(tmp_path: Path) -> None:
    """Regression (found by the fuzzer): record data sent after the client closed, before
    the loop reported the connection lost, raised 'Transport is closing' from
    `loop.sendfile`, logged as a broker failure with a traceback."""
    (tmp_path / "records.log").write_bytes(os.urandom(1 << 20))
    fd = os.open(tmp_path / "records.log", os.O_RDONLY)
    srv = NetworkServer(Dispatcher(), "127.0.0.1", 0, max_request_bytes=1 << 20, max_idle_ms=60000)
    await srv.start()
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        await _wait_for(lambda: bool(srv.connections))
        (connection,) = srv.connections
        assert connection.transport is not None
        connection.transport.close()  # closing; connection_lost comes on a later turn
        await connection._send([b"header", FileRegion(fd, 0, 1 << 20)])  # no RuntimeError
        writer.close()
    finally:
        await srv.stop_accepting()
        await srv.drain(1.0)
        os.close(fd)
