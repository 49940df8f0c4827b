#!/usr/bin/env python3
"""Capture the first requests real Kafka clients send, as golden fixtures for codec tests.

Runs a tiny fake broker on 127.0.0.1 (ephemeral port) that answers with riverlog's own codec:

- ApiVersions: a small advertised set (ApiVersions 0-3, Metadata 0-12, Produce 0-9, plus
  Fetch 0-12 and FindCoordinator 0-4, which librdkafka needs to enable magic v2 batches and
  the lz4/zstd codecs; see ADVERTISED);
- Metadata: one broker (itself, node 0) and every requested topic (or "golden" when all
  topics are asked for, none for an empty list) with one partition led by broker 0;
- Produce: success with base offset 0 for every partition.

Every raw request frame (the bytes after the 4-byte size prefix) is recorded. For each client
(`kcat` and `confluent-kafka` in a child interpreter) and each compression codec the client is
run once, producing a couple of messages to topic "golden", and the frames are written to

    tests/protocol/golden/<client>-<codec>/NN-<ApiName>-v<version>.bin

The clients run as child processes with a timeout; only those children (by PID) are killed.

    .venv/bin/python tools/capture_client_requests.py [--clients kcat,confluent]
                                                      [--codecs none,gzip,...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from riverlog.protocol.api import ApiMessage
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.framing import FrameReader, decode_request, encode_response
from riverlog.protocol.messages import (
    REQUESTS,
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from riverlog.protocol.primitives import join_chunks

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "tests" / "protocol" / "golden"

TOPIC = "golden"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CLIENTS = ("kcat", "confluent")
CLIENT_IDS = {"kcat": "golden-kcat", "confluent": "golden-confluent"}
# Repetitive enough to compress well: librdkafka sends a batch uncompressed (attributes 0)
# when compressing does not make it smaller, which two short messages would not.
MESSAGES = (b"hello golden one " * 8, b"hello golden two " * 8)

FETCH_API_KEY = 1
FIND_COORDINATOR_API_KEY = 10

ADVERTISED: dict[int, tuple[int, int]] = {
    ApiVersionsRequest.API_KEY: (0, 3),
    MetadataRequest.API_KEY: (0, 12),
    ProduceRequest.API_KEY: (0, 9),
    # Never sent by a producer, but librdkafka derives its features from them
    # (rdkafka_feature.c): without Fetch >= 4 it writes magic 0 message sets (MsgVer2 needs
    # Produce 3 + Fetch 4), without Fetch >= 10 it silently drops zstd to no compression,
    # and without FindCoordinator it silently drops lz4 (the "LZ4" feature).
    FETCH_API_KEY: (0, 12),
    FIND_COORDINATOR_API_KEY: (0, 4),
}

CLIENT_TIMEOUT_S = 30.0
MAX_FRAMES_PER_RUN = 40

CONFLUENT_PRODUCER = """
import sys
from confluent_kafka import Producer

bootstrap, codec, client_id, topic = sys.argv[1:5]
producer = Producer({
    "bootstrap.servers": bootstrap,
    "client.id": client_id,
    "compression.type": codec,
    "linger.ms": 50,
    "socket.timeout.ms": 10000,
    "message.timeout.ms": 15000,
})
for value in sys.argv[5:]:
    producer.produce(topic, value.encode())
left = producer.flush(20)
sys.exit(1 if left else 0)
"""


@dataclass
class Capture:
    """Frames received during one client run, in arrival order over all connections."""

    frames: list[bytes] = field(default_factory=list)
    produce_answered: int = 0


class FakeBroker:
    def __init__(self) -> None:
        self.port = 0
        self.capture = Capture()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameReader()
        try:
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    reply = self._handle(bytes(frame))
                    if reply:
                        writer.write(reply)
                await writer.drain()
        except (ConnectionError, ProtocolError) as e:
            print(f"  connection ended: {e!r}", file=sys.stderr)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _handle(self, frame: bytes) -> bytes:
        capture = self.capture
        if len(capture.frames) < MAX_FRAMES_PER_RUN:
            capture.frames.append(frame)
        try:
            request = decode_request(frame)
        except ProtocolError as e:
            # Recorded anyway: the test will show the decode failure precisely.
            print(f"  cannot decode a request frame: {e!r}", file=sys.stderr)
            return b""
        version = request.api_version
        body = request.body
        response: ApiMessage
        if isinstance(body, ApiVersionsRequest):
            response = ApiVersionsResponse(
                api_keys=[
                    ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in sorted(ADVERTISED.items())
                ]
            )
        elif isinstance(body, MetadataRequest):
            response = self._metadata(body)
        elif isinstance(body, ProduceRequest):
            if body.acks == 0:
                capture.produce_answered += 1
                return b""
            response = ProduceResponse(
                responses=[
                    ProduceResponse.TopicProduceResponse(
                        name=topic.name,
                        partition_responses=[
                            ProduceResponse.PartitionProduceResponse(
                                index=p.index, error_code=0, base_offset=0
                            )
                            for p in topic.partition_data
                        ],
                    )
                    for topic in body.topic_data
                ]
            )
            capture.produce_answered += 1
        else:
            print(f"  unanswered request {body.NAME} v{version}", file=sys.stderr)
            return b""
        return join_chunks(encode_response(response, version, request.correlation_id))

    def _metadata(self, body: MetadataRequest) -> MetadataResponse:
        # Null asks for all topics (only "golden" exists); an empty list asks for none: that is
        # librdkafka's brokers-only refresh, and answering it with "golden" would spare the
        # client its Metadata request for the topic.
        if body.topics is None:
            names = [TOPIC]
        else:
            names = [t.name for t in body.topics if t.name is not None]
        return MetadataResponse(
            brokers=[
                MetadataResponse.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=self.port)
            ],
            cluster_id="riverlog-golden",
            controller_id=0,
            topics=[
                MetadataResponse.MetadataResponseTopic(
                    name=name,
                    partitions=[
                        MetadataResponse.MetadataResponsePartition(
                            partition_index=0,
                            leader_id=0,
                            leader_epoch=0,
                            replica_nodes=[0],
                            isr_nodes=[0],
                        )
                    ],
                )
                for name in names
            ],
        )


def client_command(client: str, codec: str, bootstrap: str) -> tuple[list[str], bytes | None]:
    """The child's argv and its stdin."""
    if client == "kcat":
        kcat = shutil.which("kcat")
        if kcat is None:
            raise SystemExit("kcat not found: sudo apt-get install -y kcat")
        argv = [
            kcat,
            "-P",
            "-b",
            bootstrap,
            "-t",
            TOPIC,
            "-z",
            codec,
            "-X",
            "api.version.request=true",
            "-X",
            f"client.id={CLIENT_IDS[client]}",
            "-X",
            "linger.ms=50",
        ]
        return argv, b"".join(m + b"\n" for m in MESSAGES)
    argv = [
        sys.executable,
        "-c",
        CONFLUENT_PRODUCER,
        bootstrap,
        codec,
        CLIENT_IDS[client],
        TOPIC,
        *(m.decode() for m in MESSAGES),
    ]
    return argv, None


async def run_client(argv: list[str], stdin: bytes | None) -> int | None:
    """Run a child; on timeout (or cancellation by the overall deadline) kill it by its PID."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # a terminal's Ctrl-C goes to this script only
    )
    err = b""
    try:
        _, err = await asyncio.wait_for(proc.communicate(stdin), CLIENT_TIMEOUT_S)
    except TimeoutError:
        print(f"  timeout after {CLIENT_TIMEOUT_S}s", file=sys.stderr)
    finally:
        if proc.returncode is None:
            print(f"  killing PID {proc.pid}", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()  # SIGKILL to the child we started, by its PID
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(proc.wait())
    if proc.returncode != 0:
        print(f"  exit {proc.returncode}: {err.decode(errors='replace')[-2000:]}", file=sys.stderr)
    return proc.returncode


def api_name(frame: bytes) -> tuple[str, int]:
    api_key = int.from_bytes(frame[0:2], "big", signed=True)
    version = int.from_bytes(frame[2:4], "big", signed=True)
    cls = REQUESTS.get(api_key)
    name = cls.NAME.removesuffix("Request") if cls is not None else f"ApiKey{api_key}"
    return name, version


def save(client: str, codec: str, frames: list[bytes]) -> Path:
    out = GOLDEN_DIR / f"{client}-{codec}"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.bin"):
        old.unlink()
    for i, frame in enumerate(frames, start=1):
        name, version = api_name(frame)
        (out / f"{i:02d}-{name}-v{version}.bin").write_bytes(frame)
    return out


async def capture_one(client: str, codec: str) -> bool:
    broker = FakeBroker()
    await broker.start()
    try:
        argv, stdin = client_command(client, codec, f"127.0.0.1:{broker.port}")
        rc = await run_client(argv, stdin)
    finally:
        await broker.stop()
    frames = broker.capture.frames
    summary = ", ".join("{}-v{}".format(*api_name(f)) for f in frames)
    ok = rc == 0 and broker.capture.produce_answered > 0
    print(f"{client}-{codec}: rc={rc} frames: {summary}")
    if ok:
        print(f"  saved to {save(client, codec, frames).relative_to(ROOT)}")
    else:
        print("  NOT saved (client failed or sent no Produce)", file=sys.stderr)
    return ok


async def main_async(clients: list[str], codecs: list[str]) -> int:
    failures = 0
    for client in clients:
        for codec in codecs:
            if not await capture_one(client, codec):
                failures += 1
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--codecs", default=",".join(CODECS))
    parser.add_argument("--deadline", type=float, default=600.0, help="overall timeout (s)")
    args = parser.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    codecs = [c for c in args.codecs.split(",") if c]
    for c in clients:
        if c not in CLIENTS:
            parser.error(f"unknown client {c!r}")
    for c in codecs:
        if c not in CODECS:
            parser.error(f"unknown codec {c!r}")

    async def bounded() -> int:
        return await asyncio.wait_for(main_async(clients, codecs), args.deadline)

    return asyncio.run(bounded())


if __name__ == "__main__":
    sys.exit(main())
