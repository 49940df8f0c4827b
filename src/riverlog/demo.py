"""A tour of the parts (`./dev tour`; the main job `./dev run` is the Spark pipeline).

1. Storage on its own: record batches with every compression codec appended to a partition
   log; the log's tail torn the way a crash would, garbage appended; recovery keeps exactly
   the whole, valid batches; every batch read back through `os.sendfile`.
2. The embedded broker with unmodified clients: confluent-kafka creates a topic, produces a
   stream of activity events (idempotent, zstd) and consumes them back; kcat lists the
   topic. confluent-kafka is a dev dependency (`./dev setup` installs it).
3. The first request kcat sends, decoded by riverlog's protocol codec.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from riverlog.protocol.framing import FrameReader, decode_request
from riverlog.protocol.records import compression
from riverlog.protocol.records.v2 import Record, encode_batch, iter_record_batches
from riverlog.storage.log import PartitionLog
from riverlog.storage.log_config import LogConfig


def _say(text: str) -> None:
    print(text, flush=True)


def _sendfile_all(log: PartitionLog) -> bytes:
    """Everything in the log, fetched the way the broker serves it: sendfile to a socket."""
    left, right = socket.socketpair()
    chunks: list[bytes] = []
    try:
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            region = log.read(offset, 64 * 1024).records
            if region is None:
                break
            sent = 0
            while sent < region.length:
                sent += os.sendfile(
                    left.fileno(), region.fileno, region.offset + sent, region.length - sent
                )
                chunks.append(right.recv(1 << 20))
            batches = list(iter_record_batches(b"".join(chunks)))
            offset = batches[-1].header.next_offset if batches else log.log_end_offset
        return b"".join(chunks)
    finally:
        left.close()
        right.close()


def storage_demo(directory: Path) -> None:
    config = LogConfig.from_map({"segment.bytes": "65536"})
    log = PartitionLog(directory / "activity-0", config)
    now = int(time.time() * 1000)
    for round_ in range(40):
        for codec, name in compression.NAMES.items():
            records = [
                Record(i, now + i, f"user-{i % 7}".encode(), f"{name} {round_}.{i}".encode() * 3)
                for i in range(20)
            ]
            log.append(encode_batch(records, compression_type=codec), leader_epoch=0)
    end = log.log_end_offset
    _say(
        f"appended {end} records in {len(log.segments)} segments "
        f"({log.size_bytes} bytes; codecs: {', '.join(compression.NAMES.values())})"
    )
    last = log.active.log_path
    log.close(clean=False)

    size = last.stat().st_size
    os.truncate(last, size - 25)  # a crash in the middle of the last batch
    with open(last, "ab") as f:
        f.write(os.urandom(300))  # and garbage after it
    _say("tore the last segment: cut 25 bytes, appended 300 random bytes")

    log = PartitionLog(directory / "activity-0", config, recovery_point=0)
    _say(f"recovered: log end offset {log.log_end_offset} (the torn batch of 20 is gone)")
    log.update_high_watermark(log.log_end_offset)

    data = _sendfile_all(log)
    batches = list(iter_record_batches(data))
    count = sum(len(b.records) for b in batches)
    codecs = sorted({compression.NAMES[b.header.compression] for b in batches})
    _say(f"read back {count} records in {len(batches)} batches via sendfile; codecs {codecs}")
    assert count == log.log_end_offset == end - 20, "recovery or reads lost data"
    offset, ts = log.offset_for_timestamp(now + 10) or (-1, -1)
    _say(f"first record at or after timestamp now+10: offset {offset} (timestamp {ts})")
    log.close()


def kcat_demo() -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        _say("kcat is not installed: skipping the client capture")
        return
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(10)
    port = server.getsockname()[1]
    proc = subprocess.Popen(
        [kcat, "-b", f"127.0.0.1:{port}", "-L", "-m", "3"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        conn, _ = server.accept()
        conn.settimeout(10)
        reader = FrameReader()
        frames: list[bytes | bytearray | memoryview] = []
        while not frames:
            data = conn.recv(65536)
            if not data:
                break
            frames = reader.feed(data)
        conn.close()
        if frames:
            request = decode_request(frames[0])
            _say(
                f"kcat's first request: {type(request.body).__name__} "
                f"v{request.api_version}, client_id={request.header.client_id!r}"
            )
            _say(f"  {request.body!r}")
    finally:
        proc.kill()
        proc.wait()
        server.close()


def broker_demo() -> None:
    try:
        from confluent_kafka import Consumer, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
    except ImportError:
        _say("confluent-kafka is not installed (./dev setup installs it): skipping the broker")
        return
    from riverlog.embedded import broker

    started = time.monotonic()
    with broker() as running:
        bootstrap = running.bootstrap_servers
        _say(f"embedded broker up in {(time.monotonic() - started) * 1000:.0f} ms at {bootstrap}")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("page-views", 3, 1)])["page-views"].result(10)
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "compression.type": "zstd",
                "linger.ms": 5,
            }
        )
        count = 20_000
        begin = time.monotonic()
        for i in range(count):
            user = f"user-{i % 97}"
            event = f'{{"user":"{user}","page":"/item/{i % 1000}","n":{i}}}'
            producer.produce("page-views", key=user.encode(), value=event.encode())
            if i % 5000 == 0:
                producer.poll(0)
        producer.flush(30)
        took = time.monotonic() - begin
        _say(f"produced {count} page views in {took:.2f} s ({count / took:,.0f} records/s)")
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "demo",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition("page-views", p, 0) for p in range(3)])
        got = 0
        users: set[bytes] = set()
        deadline = time.monotonic() + 30
        while got < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    got += 1
                    users.add(msg.key() or b"")
        consumer.close()
        del producer, admin  # librdkafka handles close here, before the broker stops
        _say(f"consumed {got} page views back from 3 partitions ({len(users)} users)")
        if shutil.which("kcat"):
            listing = subprocess.run(
                ["kcat", "-L", "-b", bootstrap, "-t", "page-views"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            _say("kcat -L -t page-views:\n  " + "\n  ".join(listing.stdout.strip().splitlines()))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="  [%(name)s] %(message)s", stream=sys.stdout)
    with tempfile.TemporaryDirectory(prefix="riverlog-demo-") as tmp:
        storage_demo(Path(tmp))
    broker_demo()
    kcat_demo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
