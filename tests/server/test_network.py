"""The network layer on a real loopback socket: framing, ordering, sendfile, bad clients."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from riverlog.protocol import error_codes
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.framing import decode_response, encode_request
from riverlog.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)
from riverlog.protocol.primitives import FileRegion
from riverlog.server import network
from riverlog.server.dispatch import Dispatcher, RequestContext
from riverlog.server.listener import NetworkServer


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    async def send(self, body: ApiMessage, version: int) -> int:
        self.correlation += 1
        self.writer.write(encode_request(body, version, self.correlation, "test"))
        await self.writer.drain()
        return self.correlation

    async def receive(self, api_key: int, version: int) -> tuple[int, ApiMessage]:
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        return decode_response(await self.reader.readexactly(size), api_key, version)

    async def call(self, body: ApiMessage, version: int) -> ApiMessage:
        sent = await self.send(body, version)
        correlation, response = await self.receive(body.API_KEY, version)
        assert correlation == sent
        return response


async def _heartbeat_after_delay(context: RequestContext) -> HeartbeatResponse:
    body = context.request.body
    assert isinstance(body, HeartbeatRequest)
    await asyncio.sleep(body.generation_id / 1000)  # later requests may finish first
    return HeartbeatResponse(error_code=body.generation_id)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[NetworkServer]:
    dispatcher = Dispatcher()
    dispatcher.register(HeartbeatRequest, _heartbeat_after_delay)
    records = tmp_path / "segment.log"
    records.write_bytes(b"0123456789" * 1000)
    fd = os.open(records, os.O_RDONLY)

    def fetch_from_file(context: RequestContext) -> FetchResponse:
        part = FetchResponse.PartitionData(
            partition_index=0, high_watermark=1, records=FileRegion(fd, 5, 9000)
        )
        topic = FetchResponse.FetchableTopicResponse(topic="t", partitions=[part])
        return FetchResponse(responses=[topic])

    dispatcher.register(FetchRequest, fetch_from_file)
    srv = NetworkServer(dispatcher, "127.0.0.1", 0, max_request_bytes=1 << 20, max_idle_ms=60000)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop_accepting()
        await srv.drain(1.0)
        os.close(fd)


async def _connect(srv: NetworkServer) -> Client:
    return Client(*await asyncio.open_connection("127.0.0.1", srv.port))


async def test_api_versions_lists_registered_apis(server: NetworkServer) -> None:
    client = await _connect(server)
    response = await client.call(ApiVersionsRequest(client_software_name="t"), 3)
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == 0
    keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert keys == {18: (0, 4), 12: (0, 4), 1: (0, 17)}


async def test_unknown_api_versions_version_gets_v0_answer(server: NetworkServer) -> None:
    client = await _connect(server)
    header = struct.pack(">hhih", 18, 99, 7, 1) + b"x"
    client.writer.write(struct.pack(">i", len(header) + 2) + header + b"\x00\x00")
    correlation, response = await client.receive(18, 0)
    assert correlation == 7
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == error_codes.UNSUPPORTED_VERSION.code
    assert {k.api_key for k in response.api_keys} == {1, 12, 18}


async def test_pipelined_responses_come_back_in_request_order(server: NetworkServer) -> None:
    client = await _connect(server)
    delays = [40, 1, 20, 0, 5]
    for d in delays:
        await client.send(HeartbeatRequest(group_id="g", generation_id=d, member_id="m"), 3)
    got = [await client.receive(HeartbeatRequest.API_KEY, 3) for _ in delays]
    assert [c for c, _ in got] == [1, 2, 3, 4, 5]
    assert [r.error_code for _, r in got] == delays  # type: ignore[attr-defined]


async def test_records_from_a_file_region_arrive_intact(server: NetworkServer) -> None:
    client = await _connect(server)
    response = await client.call(FetchRequest(max_wait_ms=0, min_bytes=0), 11)
    assert isinstance(response, FetchResponse)
    records = response.responses[0].partitions[0].records
    assert records is not None and bytes(records) == (b"0123456789" * 1000)[5:9005]


async def test_record_data_larger_than_the_socket_takes_arrives_intact_and_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A slow reader: the server's direct sendfile stops when the socket is full and
    # loop.sendfile sends the rest; later responses wait their turn.
    data = random.Random(7).randbytes(6 << 20)
    (tmp_path / "big.log").write_bytes(data)
    fd = os.open(tmp_path / "big.log", os.O_RDONLY)
    regions = [(0, len(data)), (1000, 3 << 20), (17, 5 << 20)]
    served = iter(regions)
    partial: list[tuple[int, int]] = []
    original = network.sendfile_now

    def sendfile_now(sock: socket.socket, region: FileRegion) -> int:
        sent = original(sock, region)
        if sent < region.length:
            partial.append((sent, region.length))
        return sent

    monkeypatch.setattr(network, "sendfile_now", sendfile_now)

    def fetch(context: RequestContext) -> FetchResponse:
        offset, length = next(served)
        part = FetchResponse.PartitionData(records=FileRegion(fd, offset, length))
        return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(partitions=[part])])

    dispatcher = Dispatcher()
    dispatcher.register(FetchRequest, fetch)
    srv = NetworkServer(dispatcher, "127.0.0.1", 0, max_request_bytes=1 << 20, max_idle_ms=60000)
    await srv.start()
    try:
        client = await _connect(srv)
        for _ in regions:
            await client.send(FetchRequest(max_wait_ms=0, min_bytes=0), 11)
        await asyncio.sleep(0.3)  # let the server fill the socket
        for sent, (offset, length) in enumerate(regions, start=1):
            correlation, response = await client.receive(FetchRequest.API_KEY, 11)
            assert correlation == sent
            assert isinstance(response, FetchResponse)
            records = response.responses[0].partitions[0].records
            assert records is not None and bytes(records) == data[offset : offset + length]
        assert partial  # the fallback was taken
    finally:
        await srv.stop_accepting()
        await srv.drain(1.0)
        os.close(fd)


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 2 << 20),  # above socket.request.max.bytes
        struct.pack(">i", 8) + struct.pack(">hhi", 999, 0, 1),  # unknown API key
        struct.pack(">i", 8) + struct.pack(">hhi", 12, 0, 1),  # truncated heartbeat
    ],
)
async def test_bad_client_is_closed_and_others_keep_working(
    server: NetworkServer, garbage: bytes
) -> None:
    bad = await _connect(server)
    good = await _connect(server)
    bad.writer.write(garbage)
    assert await asyncio.wait_for(bad.reader.read(), 5) == b""  # closed by the broker
    response = await good.call(ApiVersionsRequest(), 0)
    assert isinstance(response, ApiVersionsResponse) and response.error_code == 0


async def test_idle_connections_are_reaped(tmp_path: Path) -> None:
    srv = NetworkServer(Dispatcher(), "127.0.0.1", 0, max_request_bytes=1024, max_idle_ms=100)
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await srv.stop_accepting()
        await srv.drain(1.0)
