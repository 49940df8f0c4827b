"""Broker benchmark with confluent-kafka as the load client (prints numbers, asserts none).

Each figure is printed next to the client's own ceiling measured in the same run against
librdkafka's in-memory mock broker (`test.mock.num.brokers`), which does no real work — but
for consuming, where the ceiling is the client reading records it has already fetched.
Consuming is also measured with `kcat` (librdkafka in C, the library under confluent-kafka,
without Python's per-record `Message` objects), which shows what the broker serves when
the Python client's own ceiling is below the target.

- produce throughput, 100 B and 1 KiB records (MB/s of record values)
- consume throughput, same records
- end-to-end latency at 1,000 records/s, client defaults (p50/p99)
- single-record acks=all request rate (one record per request): pipelined without an
  in-flight limit (a producer without idempotence sends each record as its own request as
  soon as it is produced), pipelined by the idempotent producer (at most 5 in flight), and
  serial (each request awaited before the next; with the broker's CPU per request, target
  <= 45 µs, issue 29). librdkafka's broker thread polls in a tight
  loop while the idempotent producer sits at its in-flight limit (perf: its time goes to
  `poll` and `clock_gettime`), so on a 2-core machine that row measures the CPU the spin
  takes from the broker as much as the broker

The broker runs as its own process (`riverlog server`), as it would in production: in the
benchmark's process its event loop would share the interpreter lock with the client's
Python code and measure the contention instead.

Targets (issue 4): >= 150 MB/s produce and >= 250 MB/s consume of 1 KiB records, p99
end-to-end <= 10 ms, >= 10,000 acks=all single-record requests/s.
"""

from __future__ import annotations

import math
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

from bench_harness import broker_process, cpu_seconds
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PRODUCE_BYTES = 256 * 1024 * 1024


def _mock_bootstrap() -> tuple[Producer, str]:
    """A producer that owns librdkafka's mock cluster, and the cluster's bootstrap address."""
    holder = Producer({"test.mock.num.brokers": 1, "bootstrap.servers": ""})
    md = holder.list_topics(timeout=10)
    b = next(iter(md.brokers.values()))
    return holder, f"{b.host}:{b.port}"


def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce_throughput(bootstrap: str, topic: str, size: int) -> float:
    count = PRODUCE_BYTES // size
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
            "acks": 1,
        }
    )
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush(120)
    return count * size / (time.perf_counter() - start) / 1e6


def _consumer(bootstrap: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
            "queued.max.messages.kbytes": 1 << 20,
            "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 10 << 20,
            # librdkafka (>= 2.2) postpones a partition's next fetch by this much whenever its
            # local queue holds queued.min.messages (100,000): with 100 B records one 10 MiB
            # fetch does, and at the default (1 s) that pause, not the broker, set the rate.
            "fetch.queue.backoff.ms": 1,
            **extra,
        }
    )


def _consume_all(consumer: Consumer, count: int) -> tuple[int, float]:
    """Records consumed (up to `count`, within 120 s) and the seconds it took."""
    got = 0
    start = time.perf_counter()
    deadline = start + 120
    while got < count and time.perf_counter() < deadline:
        got += sum(1 for m in consumer.consume(10000, 1.0) if m.error() is None)
    return got, time.perf_counter() - start


def consume_throughput(bootstrap: str, topic: str, size: int) -> float:
    """Read everything the partition holds, from its low watermark."""
    consumer = _consumer(bootstrap)
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)
    consumer.assign([TopicPartition(topic, 0, low)])
    got, elapsed = _consume_all(consumer, high - low)
    consumer.close()
    return got * size / elapsed / 1e6


def consume_ceiling(bootstrap: str, topic: str, size: int, settle_s: float) -> float:
    """The client's own consume ceiling: the same read, timed only once the client has
    fetched the whole partition into its local queue (after `settle_s`), so the broker does
    no work while the clock runs. (librdkafka's mock cluster keeps only a short tail of each
    partition, so it cannot give this ceiling.)"""
    consumer = _consumer(
        bootstrap, **{"queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 2_000_000}
    )
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)
    consumer.assign([TopicPartition(topic, 0, low)])
    time.sleep(settle_s)
    got, elapsed = _consume_all(consumer, high - low)
    consumer.close()
    return got * size / elapsed / 1e6


def consume_with_kcat(bootstrap: str, topic: str, size: int) -> float:
    """The partition read from its beginning by kcat (writing each record's size to a pipe);
    NaN when kcat is not installed."""
    kcat = shutil.which("kcat")
    if kcat is None:
        return float("nan")
    start = time.perf_counter()
    done = subprocess.run(
        [
            kcat,
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-X",
            "fetch.max.bytes=52428800",
            "-X",
            "max.partition.fetch.bytes=10485760",
            "-X",
            "queued.max.messages.kbytes=1048576",
            "-f",
            "%S\n",
        ],
        capture_output=True,
        timeout=300,
        check=True,
    )
    return done.stdout.count(b"\n") * size / (time.perf_counter() - start) / 1e6


def end_to_end_latency(
    bootstrap: str, topic: str, rate: int = 1000, seconds: int = 5
) -> list[float]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-e2e",
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, -1)])
    consumer.poll(1.0)
    producer = Producer({"bootstrap.servers": bootstrap})
    latencies: list[float] = []
    interval = 1 / rate
    next_send = time.perf_counter()
    end = next_send + seconds
    while time.perf_counter() < end:
        now = time.perf_counter()
        if now >= next_send:
            producer.produce(topic, str(now).encode(), partition=0)
            producer.poll(0)
            next_send += interval
        for msg in consumer.consume(100, 0):
            if msg.error() is None:
                latencies.append(time.perf_counter() - float(msg.value() or b"0"))
    producer.flush(10)
    deadline = time.perf_counter() + 2
    while time.perf_counter() < deadline:
        for msg in consumer.consume(100, 0.1):
            if msg.error() is None:
                latencies.append(time.perf_counter() - float(msg.value() or b"0"))
    consumer.close()
    return latencies


def _acks_all_producer(bootstrap: str, idempotent: bool = True) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "batch.num.messages": 1,
            "enable.idempotence": idempotent,
        }
    )


def acks_all_serial(
    bootstrap: str, topic: str, seconds: float = 3.0, latencies: list[float] | None = None
) -> tuple[int, float]:
    """Requests answered, one in flight, and the seconds they took; each request's seconds
    appended to `latencies` when given (a slow run shows whether every request is slow or
    a few stall)."""
    producer = _acks_all_producer(bootstrap)
    done = 0
    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while (sent := time.perf_counter()) < end:
        producer.produce(topic, b"x", partition=0)
        producer.flush(5)
        done += 1
        if latencies is not None:
            latencies.append(time.perf_counter() - sent)
    return done, time.perf_counter() - start


def acks_all_pipelined_rate(
    bootstrap: str, topic: str, idempotent: bool, seconds: float = 3.0
) -> float:
    """One record per request, as many requests in flight as the client allows (5 when
    idempotent), up to 1,000 records waiting for their acknowledgement."""
    producer = _acks_all_producer(bootstrap, idempotent)
    delivered = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered
        delivered += err is None

    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        for _ in range(500):
            producer.produce(topic, b"x", partition=0, on_delivery=on_delivery)
        producer.poll(0)
        while len(producer) > 1000:
            producer.poll(0.001)
    producer.flush(10)
    return delivered / (time.perf_counter() - start)


def _row(label: str, ours: float, ceiling: float, unit: str, target: str) -> None:
    shown = "n/a" if math.isnan(ceiling) else f"{ceiling:.1f}"
    print(f"{label:<42} riverlog {ours:10.1f} {unit:<10} client ceiling {shown:>10}  {target}")


def run(
    name: str,
    bootstrap: str,
    results: dict[str, float],
    create: Callable[[str], None],
    broker_pid: int | None = None,
) -> None:
    for size in (100, 1024):
        topic = f"bench-{size}-{uuid.uuid4().hex[:6]}"
        create(topic)
        results[f"produce {size}"] = produce_throughput(bootstrap, topic, size)
        if name != "mock":  # the mock keeps only a short tail: no consume ceiling from it
            results[f"consume {size}"] = rate = consume_throughput(bootstrap, topic, size)
            # Settle for three times the live read's duration (at least 3 s): the prefetch
            # runs alone, so it is faster than the live read.
            settle = max(3.0, 3 * PRODUCE_BYTES / 1e6 / rate)
            results[f"consume {size} ceiling"] = consume_ceiling(bootstrap, topic, size, settle)
            results[f"consume {size} kcat"] = consume_with_kcat(bootstrap, topic, size)
    topic = f"bench-e2e-{uuid.uuid4().hex[:6]}"
    create(topic)
    lat = sorted(end_to_end_latency(bootstrap, topic))
    results["e2e p50"] = lat[len(lat) // 2] * 1000 if lat else float("nan")
    results["e2e p99"] = lat[int(len(lat) * 0.99)] * 1000 if lat else float("nan")
    results["acks=all pipelined"] = acks_all_pipelined_rate(bootstrap, topic, False)
    results["acks=all idempotent"] = acks_all_pipelined_rate(bootstrap, topic, True)
    before = cpu_seconds(broker_pid) if broker_pid is not None else 0.0
    each: list[float] = []
    done, seconds = acks_all_serial(bootstrap, topic, latencies=each)
    each.sort()
    results["acks=all serial"] = done / seconds
    results["acks=all serial p50"] = each[len(each) // 2] * 1e6
    results["acks=all serial p99"] = each[int(len(each) * 0.99)] * 1e6
    if broker_pid is not None:
        results["acks=all serial cpu"] = (cpu_seconds(broker_pid) - before) / done * 1e6
    print(
        f"  ({name} done: {len(lat)} latency samples, median of them "
        f"{statistics.median(lat) * 1000 if lat else float('nan'):.2f} ms)",
        flush=True,
    )


def main() -> int:
    mock_holder, mock = _mock_bootstrap()
    ceiling: dict[str, float] = {}
    run("mock", mock, ceiling, lambda t: None)  # the mock cluster creates topics on use
    del mock_holder
    ours: dict[str, float] = {}
    with broker_process() as (bootstrap, pid):
        run("riverlog", bootstrap, ours, lambda t: _create(bootstrap, t), pid)
    print()
    for size in (100, 1024):
        _row(
            f"produce {size} B records",
            ours[f"produce {size}"],
            ceiling[f"produce {size}"],
            "MB/s",
            "(target >= 150 MB/s for 1 KiB)" if size == 1024 else "",
        )
        _row(
            f"consume {size} B records",
            ours[f"consume {size}"],
            ours[f"consume {size} ceiling"],
            "MB/s",
            "(target >= 250 MB/s for 1 KiB)" if size == 1024 else "",
        )
        _row(
            f"consume {size} B records, kcat",
            ours[f"consume {size} kcat"],
            float("nan"),
            "MB/s",
            "(librdkafka in C; target >= 250 MB/s for 1 KiB)" if size == 1024 else "",
        )
    _row("end-to-end latency p50, 1,000 rec/s", ours["e2e p50"], ceiling["e2e p50"], "ms", "")
    _row(
        "end-to-end latency p99, 1,000 rec/s",
        ours["e2e p99"],
        ceiling["e2e p99"],
        "ms",
        "(target <= 10 ms)",
    )
    _row(
        "acks=all 1-record requests, pipelined",
        ours["acks=all pipelined"],
        ceiling["acks=all pipelined"],
        "req/s",
        "(target >= 10,000/s)",
    )
    _row(
        "acks=all 1-record requests, idempotent",
        ours["acks=all idempotent"],
        ceiling["acks=all idempotent"],
        "req/s",
        "(5 in flight; client busy-polls)",
    )
    _row(
        "acks=all 1-record requests, 1 in flight",
        ours["acks=all serial"],
        ceiling["acks=all serial"],
        "req/s",
        "(within 90% of the mock's where the client is the limit)",
    )
    _row(
        "  1-in-flight request p50",
        ours["acks=all serial p50"],
        ceiling["acks=all serial p50"],
        "µs",
        "",
    )
    _row(
        "  1-in-flight request p99",
        ours["acks=all serial p99"],
        ceiling["acks=all serial p99"],
        "µs",
        "",
    )
    _row(
        "  broker CPU per 1-in-flight request",
        ours["acks=all serial cpu"],
        float("nan"),
        "µs",
        "(target <= 45 µs)",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
