"""Bad clients and crashes: a live broker keeps serving and loses nothing acknowledged."""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.protocol import messages
from riverlog.protocol.framing import encode_request
from riverlog.protocol.records.v2 import Record, encode_batch, iter_record_batches
from tests.integration.conftest import BrokerProcess, start_broker


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def _valid_frames(topic: str) -> list[bytes]:
    """Well-formed requests of several APIs and versions, to mutate."""
    # Stamped now: records stamped in 1970 would be (rightly) deleted by time retention.
    batch = encode_batch([Record(0, int(time.time() * 1000), b"k", b"v" * 40)])
    produce = messages.ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            messages.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    messages.ProduceRequest.PartitionProduceData(index=0, records=batch)
                ],
            )
        ],
    )
    fetch = messages.FetchRequest(
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            messages.FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    messages.FetchRequest.FetchPartition(
                        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )
    meta = messages.MetadataRequest(
        topics=[messages.MetadataRequest.MetadataRequestTopic(name=topic)]
    )
    frames = []
    for version in (0, 3, 7, 9):
        frames.append(encode_request(produce, version, 1, "fuzz"))
    for version in (4, 11, 12):
        frames.append(encode_request(fetch, version, 2, "fuzz"))
    for version in (1, 9, 12):
        frames.append(encode_request(meta, version, 3, "fuzz"))
    frames.append(encode_request(messages.ApiVersionsRequest(), 3, 4, "fuzz"))
    return frames


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    kind = rng.randrange(5)
    if kind == 0:  # flip bytes anywhere, size prefix included
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:  # truncate the body but keep the declared size consistent
        cut = rng.randrange(4, len(data))
        data = bytearray(struct.pack(">i", cut - 4)) + data[4:cut]
    elif kind == 2:  # random bytes after a plausible header
        body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        data = data[:14] + body
        data[0:4] = struct.pack(">i", len(data) - 4)
    elif kind == 3:  # a random size prefix
        data[0:4] = struct.pack(">i", rng.choice([-1, 0, 1, 7, 2**31 - 1, rng.randrange(2**31)]))
    else:  # pure noise
        data = bytearray(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return bytes(data)


def _fire(bootstrap: str, payloads: list[bytes]) -> None:
    host, port = bootstrap.split(":")
    for payload in payloads:
        try:
            with socket.create_connection((host, int(port)), timeout=2) as sock:
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(0.5)
                while sock.recv(65536):
                    pass
        except OSError:
            pass  # the broker closing a bad connection is the expected outcome


def test_fuzzed_frames_never_stop_the_broker(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    topic = "fuzzed"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    rng = random.Random(20261123)
    frames = _valid_frames(topic)
    payloads = [_mutate(rng, rng.choice(frames)) for _ in range(3000)]
    stop = threading.Event()
    acked: list[int] = []

    def well_behaved() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        i = 0
        while not stop.is_set():
            producer.produce(
                topic,
                value=b"good-%d" % i,
                on_delivery=lambda err, msg: acked.append(0) if err is None else None,
            )
            producer.flush(5)
            i += 1
        producer.flush(10)

    good = threading.Thread(target=well_behaved)
    good.start()
    _wait_for(lambda: len(acked) >= 1, 30)  # the producer is set up (id, metadata)
    workers = [threading.Thread(target=_fire, args=(bootstrap, payloads[i::4])) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=240)
    # Served meanwhile and after: a short fuzz run may end before 10 more records went by.
    _wait_for(lambda: len(acked) > 10, 30)
    stop.set()
    good.join(timeout=30)
    assert broker_process.proc.poll() is None, "the broker died"
    assert len(acked) > 10, "the well-behaved producer was starved"
    # The log stays valid: every batch decodes, CRCs check, offsets increase without gaps.
    offsets = []
    for log_file in sorted((broker_process.data_dir / f"{topic}-0").glob("*.log")):
        for batch in iter_record_batches(log_file.read_bytes()):
            offsets += [r.offset for r in batch.records]
    assert offsets == list(range(len(offsets)))
    good_values = _read_values(bootstrap, topic, len(offsets))
    assert sum(v.startswith(b"good-") for v in good_values) >= len(acked)


def _read_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is None:
                values.append(msg.value() or b"")
    consumer.close()
    return values


def test_kill_9_loses_no_acknowledged_record(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    running = start_broker(data_dir)
    topic = "crash"
    admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    del admin
    acked: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            with lock:
                acked.append((msg.offset(), msg.value()))  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": running.bootstrap_servers,
            "linger.ms": 2,
            "enable.idempotence": True,
            "message.timeout.ms": 3000,
        }
    )
    deadline = time.monotonic() + 1.5
    i = 0
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, value=b"record-%08d" % i, on_delivery=on_delivery)
        except BufferError:  # the client's queue is full: let deliveries drain
            producer.poll(0.01)
            continue
        producer.poll(0)
        i += 1
    os.kill(running.proc.pid, signal.SIGKILL)  # mid-load
    running.proc.wait(timeout=10)
    producer.flush(5)  # deliveries now fail; only acknowledged records count
    del producer
    assert acked, "nothing was acknowledged before the crash"

    restarted = start_broker(data_dir)
    try:
        values = _read_values(restarted.bootstrap_servers, topic, len(acked))
        assert values[: len(acked)] == [v for _, v in sorted(acked)]
        assert [o for o, _ in sorted(acked)] == list(range(len(acked)))
        after = Producer({"bootstrap.servers": restarted.bootstrap_servers})
        offsets: list[int] = []
        after.produce(topic, value=b"after", on_delivery=lambda e, m: offsets.append(m.offset()))
        after.flush(10)
        assert offsets and offsets[0] >= len(acked)
        stored = b"".join(p.read_bytes() for p in sorted((data_dir / f"{topic}-0").glob("*.log")))
        assert [b.header.base_offset for b in iter_record_batches(stored)] == sorted(
            {b.header.base_offset for b in iter_record_batches(stored)}
        )
    finally:
        restarted.stop()
