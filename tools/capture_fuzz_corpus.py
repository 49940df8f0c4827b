#!/usr/bin/env python3
"""Capture the requests real clients send to a riverlog broker: the protocol fuzzer's seeds.

Starts an embedded broker and a recording proxy in front of it (both on 127.0.0.1, ephemeral
ports), then runs real clients through the proxy — confluent-kafka (producer with every
codec, consumer group with commits, admin), kafka-python, aiokafka, kcat and riverlog's
own client — and writes every distinct client → broker frame (size prefix removed) to

    bench/fuzz_corpus/<client>-<NNN>-<ApiName>-v<version>.bin

`bench/bench_fuzz.py` mutates these. Re-running replaces the directory's contents.

    .venv/bin/python tools/capture_fuzz_corpus.py
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from riverlog.embedded import broker as embedded_broker
from riverlog.protocol.framing import FrameReader, peek_request_header
from riverlog.protocol.messages import REQUESTS

ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = ROOT / "bench" / "fuzz_corpus"
TOPIC = "corpus"


class RecordingProxy:
    """Forwards connections to the broker, recording the client → broker frames, tagged with
    the client that runs now (`tag`)."""

    def __init__(self) -> None:
        self.upstream: tuple[str, int] | None = None
        """Set once the broker listens (it advertises the proxy, so it starts after)."""
        self.tag = "none"
        self.frames: list[tuple[str, bytes]] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(3000):  # the broker's own first connections come before `upstream`
            if self.upstream is not None:
                break
            await asyncio.sleep(0.01)
        try:
            assert self.upstream is not None
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:  # the broker stopped
            writer.close()
            return
        frames = FrameReader()

        async def client_to_broker() -> None:
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    self.frames.append((self.tag, bytes(frame)))
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def broker_to_client() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        await asyncio.gather(client_to_broker(), broker_to_client(), return_exceptions=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ConfigResource,
        NewPartitions,
        NewTopic,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("c-admin", 2, 1, config={"cleanup.policy": "compact"})])[
        "c-admin"
    ].result(10)
    admin.create_partitions([NewPartitions("c-admin", 3)])["c-admin"].result(10)
    for future in admin.describe_configs([ConfigResource("topic", "c-admin")]).values():
        future.result(10)
    admin.list_topics(timeout=10)
    admin.list_groups(timeout=10)
    admin.delete_topics(["c-admin"])["c-admin"].result(10)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "enable.idempotence": codec == "zstd",
                "linger.ms": 5,
            }
        )
        for i in range(20):
            producer.produce(
                TOPIC,
                key=b"k%d" % i,
                value=b"confluent %s %d " % (codec.encode(), i) * 4,
                headers=[("h", b"v")],
            )
        producer.flush(10)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "c-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    got = 0
    for _ in range(40):
        msgs = consumer.consume(50, 0.3)
        got += len(msgs)
        if msgs:
            consumer.commit(asynchronous=False)
        if got >= 100:
            break
    consumer.close()


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kp-admin", 1, 1)])
    admin.list_consumer_groups()
    admin.list_consumer_group_offsets("c-group")
    admin.delete_topics(["kp-admin"])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    for i in range(10):
        producer.send(TOPIC, key=b"kp", value=b"kafka-python %d" % i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id="kp-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    for i, _ in enumerate(consumer):
        if i > 50:
            break
    consumer.commit()
    consumer.close()


def _aiokafka(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4")
        await producer.start()
        for i in range(10):
            await producer.send_and_wait(TOPIC, b"aiokafka %d" % i, key=b"a")
        await producer.stop()
        consumer = AIOKafkaConsumer(
            TOPIC, bootstrap_servers=bootstrap, group_id="ak-group", auto_offset_reset="earliest"
        )
        await consumer.start()
        await consumer.getmany(timeout_ms=3000)
        await consumer.commit()
        await consumer.stop()

    asyncio.run(run())


def _kcat(bootstrap: str) -> None:
    if shutil.which("kcat") is None:
        return
    subprocess.run(
        ["kcat", "-b", bootstrap, "-P", "-t", TOPIC, "-z", "snappy"],
        input=b"kcat one\nkcat two\n",
        timeout=30,
        check=True,
    )
    subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", TOPIC, "-o", "beginning", "-e", "-c", "20"],
        capture_output=True,
        timeout=30,
        check=True,
    )
    subprocess.run(["kcat", "-b", bootstrap, "-L"], capture_output=True, timeout=30, check=True)


def _riverlog(bootstrap: str) -> None:
    from riverlog.client import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd"})
    for i in range(10):
        producer.send(TOPIC, b"riverlog %d" % i, key=b"r")
    producer.flush()
    producer.close()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "rl-group", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([TOPIC])
    consumer.poll(3000)
    consumer.commit()
    consumer.close()


CLIENTS: dict[str, Callable[[str], None]] = {
    "confluent": _confluent,
    "kafka-python": _kafka_python,
    "aiokafka": _aiokafka,
    "kcat": _kcat,
    "riverlog": _riverlog,
}


def main() -> int:
    proxy = RecordingProxy()
    proxy.tag = "controller"  # its own requests to this broker go through the proxy too
    overrides = {
        "group.initial.rebalance.delay.ms": "0",
        "advertised.listeners": f"PLAINTEXT://{proxy.bootstrap}",
    }
    with embedded_broker(overrides=overrides) as running:
        assert running.broker is not None
        host, port = running.broker.network.host, running.broker.network.port
        proxy.upstream = (host, port)
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(10)
        for name, run in CLIENTS.items():
            proxy.tag = name
            try:
                run(proxy.bootstrap)
            except Exception as e:  # a client missing or failing: keep the others' frames
                print(f"{name}: {type(e).__name__}: {e}")
    if CORPUS_DIR.exists():
        shutil.rmtree(CORPUS_DIR)
    CORPUS_DIR.mkdir(parents=True)
    seen: set[str] = set()
    counts: dict[str, int] = {}
    for tag, frame in proxy.frames:
        digest = hashlib.sha1(frame).hexdigest()
        if digest in seen or len(frame) < 8:
            continue
        seen.add(digest)
        api_key, version, _ = peek_request_header(frame)
        cls = REQUESTS.get(api_key)
        api = cls.NAME.removesuffix("Request") if cls is not None else f"Api{api_key}"
        counts[tag] = counts.get(tag, 0) + 1
        (CORPUS_DIR / f"{tag}-{counts[tag]:03d}-{api}-v{version}.bin").write_bytes(frame)
    print(f"{len(seen)} distinct frames: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
