"""riverlog's client vs confluent-kafka against the same broker in the same run (prints numbers).

- produce: records/s and MB/s of values, 100 B and 1 KiB, acks=all idempotent (both clients'
  defaults), keyed by 100 distinct keys, each client with its defaults but `linger.ms` 5;
  riverlog's asyncio producer on uvloop (the loop its blocking facade uses) and its blocking
  `Producer` facade (records handed to the loop thread in bulk, delivery to callbacks).
- consume: the same records back from the start, as Python records (confluent `consume`,
  riverlog `poll`) and into Arrow (confluent `consume` + `pyarrow` tables of the key, value,
  partition, offset and timestamp columns, riverlog `poll_arrow`).

The broker is its own process (`riverlog server`), each client alternates with the other over
ROUNDS rounds, and the median is printed. Targets (issue 8): produce within 2x of
confluent-kafka; consuming into Arrow at least as fast as confluent-kafka.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import uvloop
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).parent))
from bench_harness import broker_process

from riverlog.client import AsyncConsumer, AsyncProducer
from riverlog.client import Producer as BlockingProducer

ROUNDS = 3
BYTES = 64 * 1024 * 1024
KEYS = [f"user-{i}".encode() for i in range(100)]


def _topic(bootstrap: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 4, 1)])[name].result(30)
    return name


def produce_confluent(bootstrap: str, topic: str, size: int, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    payload = b"x" * size
    began = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, key=KEYS[i % 100])
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - began


def produce_riverlog(bootstrap: str, topic: str, size: int, count: int) -> float:
    async def run() -> float:
        payload = b"x" * size
        async with AsyncProducer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
            began = time.perf_counter()
            last = None
            for i in range(count):
                last = await producer.send(topic, payload, KEYS[i % 100])
            await producer.flush()
            assert last is not None and last.result().offset >= 0
            return time.perf_counter() - began

    return uvloop.run(run())


def produce_riverlog_blocking(bootstrap: str, topic: str, size: int, count: int) -> float:
    payload = b"x" * size
    producer = BlockingProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    began = time.perf_counter()
    for i in range(count):
        producer.send(topic, payload, KEYS[i % 100])
    producer.flush()
    elapsed = time.perf_counter() - began
    producer.close()
    return elapsed


def consume_confluent(bootstrap: str, topic: str, count: int, arrow: bool) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "enable.auto.commit": False,
            # librdkafka (>= 2.2) waits this long before fetching again whenever its local
            # queue holds queued.min.messages; at the default (1 s) that wait set its rate.
            "fetch.queue.backoff.ms": 1,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
    got = 0
    began = time.perf_counter()
    while got < count:
        messages = consumer.consume(10_000, 1.0)
        messages = [m for m in messages if m.error() is None]
        got += len(messages)
        if arrow and messages:
            pa.table(
                {
                    "key": pa.array([m.key() for m in messages], pa.binary()),
                    "value": pa.array([m.value() for m in messages], pa.binary()),
                    "partition": pa.array([m.partition() for m in messages], pa.int32()),
                    "offset": pa.array([m.offset() for m in messages], pa.int64()),
                    "timestamp": pa.array([m.timestamp()[1] for m in messages], pa.int64()),
                }
            )
    elapsed = time.perf_counter() - began
    consumer.close()
    return elapsed


def consume_riverlog(bootstrap: str, topic: str, count: int, arrow: bool) -> float:
    async def run() -> float:
        consumer = AsyncConsumer({"bootstrap.servers": bootstrap})
        consumer.assign((topic, p) for p in range(4))
        consumer.seek_to_beginning()
        got = 0
        async with consumer:
            began = time.perf_counter()
            while got < count:
                if arrow:
                    got += (await consumer.poll_arrow(1000)).num_rows
                else:
                    got += len(await consumer.poll(1000))
            return time.perf_counter() - began

    return uvloop.run(run())


def median_of(runs: list[float]) -> float:
    return statistics.median(runs)


def compare(
    label: str,
    size: int,
    count: int,
    theirs: Callable[[], float],
    ours: dict[str, Callable[[], float]],
) -> None:
    times: dict[str, list[float]] = {"confluent-kafka": [], **{name: [] for name in ours}}
    for _ in range(ROUNDS):
        times["confluent-kafka"].append(theirs())
        for name, run in ours.items():
            times[name].append(run())
    base = count / median_of(times["confluent-kafka"])
    for name, runs in times.items():
        rate = count / median_of(runs)
        print(
            f"{label:<28} {size:>5} B  {name:<24} {rate:>10,.0f} rec/s "
            f"{rate * size / 1e6:>7.1f} MB/s  {rate / base:5.2f}x",
            flush=True,
        )


def main() -> int:
    with broker_process() as bootstrap:
        for size in (100, 1024):
            bench_size(bootstrap, size)
    return 0


def bench_size(bootstrap: str, size: int) -> None:
    count = BYTES // size
    topics: list[str] = []

    def fresh() -> str:
        topics.append(_topic(bootstrap))
        return topics[-1]

    compare(
        "produce (acks=all, idem.)",
        size,
        count,
        lambda: produce_confluent(bootstrap, fresh(), size, count),
        {
            "riverlog asyncio+uvloop": lambda: produce_riverlog(bootstrap, fresh(), size, count),
            "riverlog blocking": lambda: produce_riverlog_blocking(bootstrap, fresh(), size, count),
        },
    )
    topic = topics[0]
    compare(
        "consume records",
        size,
        count,
        lambda: consume_confluent(bootstrap, topic, count, arrow=False),
        {"riverlog poll": lambda: consume_riverlog(bootstrap, topic, count, arrow=False)},
    )
    compare(
        "consume into Arrow",
        size,
        count,
        lambda: consume_confluent(bootstrap, topic, count, arrow=True),
        {"riverlog poll_arrow": lambda: consume_riverlog(bootstrap, topic, count, arrow=True)},
    )


if __name__ == "__main__":
    sys.exit(main())
