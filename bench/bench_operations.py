"""Operating riverlog: the web console's page load times on a big cluster, and what the
Prometheus metrics cost the broker (prints numbers, asserts none). About two minutes.

1. Console pages against one broker (`riverlog server`, its own process) holding 1,000
   partitions (10 topics x 100) and 100 consumer groups with committed offsets on every
   partition of their topic; the console runs as `riverlog console` (its own process,
   sampling every 5 s). Each page is fetched 5 times after a warm-up: median wall time and
   the console process's CPU per page (its sampler's rounds in that time included).
   Baseline, same run: one Metadata request for every topic through riverlog's client (the
   floor of any page). Target: < 1 s per page.
2. Metrics off vs on: two brokers, one with `metrics.listener`, measured alternately (two
   rounds each): produce throughput of 100-byte records (confluent-kafka, acks=1) and the
   rate of small requests (Metadata for no topics, 32 in flight, riverlog's client), with
   the broker's CPU seconds per MB / per 1,000 requests. The metrics broker is scraped once
   per run. Target: <= 3% apart.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
import timeit
import urllib.request

from bench_harness import broker_process, cpu_seconds
from confluent_kafka import Producer

from riverlog.client.admin import AsyncAdmin
from riverlog.client.connection import connect_any
from riverlog.devcluster import free_port
from riverlog.protocol.messages import MetadataRequest
from riverlog.server.metrics.requests import RequestMetrics

TOPICS, PARTITIONS, GROUPS = 10, 100, 100


# -- 1. console pages ----------------------------------------------------------------------


async def populate(bootstrap: str) -> None:
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        for t in range(TOPICS):
            await admin.create_topic(f"topic-{t}", PARTITIONS, 1)
        for g in range(GROUPS):
            topic = f"topic-{g % TOPICS}"
            await admin.reset_group_offsets(
                f"group-{g}", {(topic, p): 0 for p in range(PARTITIONS)}
            )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for t in range(TOPICS):
        for p in range(PARTITIONS):
            for i in range(5):
                producer.produce(f"topic-{t}", b'{"n": %d}' % i, key=b"k%d" % i, partition=p)
    producer.flush(60)


async def metadata_floor(bootstrap: str) -> float:
    conn = await connect_any(bootstrap)
    try:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            await conn.send(MetadataRequest(topics=None, allow_auto_topic_creation=False))
            times.append(time.perf_counter() - started)
        return statistics.median(times)
    finally:
        await conn.close()


def wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def console_pages() -> None:
    pages = [
        "/",
        "/topics",
        "/topics/topic-3",
        "/topics/topic-3/messages?partition=7",
        "/groups",
        "/groups/group-42",
        "/throughput?topic=topic-3",
        "/reassignments",
    ]
    with broker_process() as (bootstrap, _):
        asyncio.run(populate(bootstrap))
        floor = asyncio.run(metadata_floor(bootstrap))
        port = free_port()
        console = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "riverlog",
                "console",
                "--bootstrap-server",
                bootstrap,
                "--listen",
                f"127.0.0.1:{port}",
                "--sample-interval-seconds",
                "5",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_http(base + "/reassignments", 60)
            print(
                f"cluster: {TOPICS * PARTITIONS} partitions, {GROUPS} groups; baseline: "
                f"Metadata for all topics {floor * 1000:.1f} ms"
            )
            for page in pages:
                urllib.request.urlopen(base + page, timeout=60).read()  # warm-up
                times = []
                cpu_before = cpu_seconds(console.pid)
                for _ in range(5):
                    started = time.perf_counter()
                    urllib.request.urlopen(base + page, timeout=60).read()
                    times.append(time.perf_counter() - started)
                cpu_ms = (cpu_seconds(console.pid) - cpu_before) / 5 * 1000  # 10 ms ticks / 5
                print(
                    f"  {page:<40} {statistics.median(times) * 1000:8.1f} ms   console CPU "
                    f"{cpu_ms:5.0f} ms/page   (target < 1000 ms)"
                )
        finally:
            console.terminate()
            console.wait(30)


# -- 2. metrics off vs on --------------------------------------------------------------------


def produce_rate(bootstrap: str, pid: int, topic: str, count: int = 200_000) -> tuple[float, float]:
    """(MB/s of 100-byte values, broker CPU seconds per MB)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": 1,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    value = b"x" * 100
    before, started = cpu_seconds(pid), time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    elapsed, mb = time.perf_counter() - started, count * 100 / 1e6
    return mb / elapsed, (cpu_seconds(pid) - before) / mb


async def small_requests(bootstrap: str, pid: int, count: int = 20_000) -> tuple[float, float]:
    """(Metadata requests/s with 32 in flight, broker CPU seconds per 1,000 requests)."""
    conn = await connect_any(bootstrap)
    request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    try:
        before, started = cpu_seconds(pid), time.perf_counter()
        for _ in range(count // 32):
            await asyncio.gather(*(conn.send(request) for _ in range(32)))
        elapsed = time.perf_counter() - started
        return count / elapsed, (cpu_seconds(pid) - before) / (count / 1000)
    finally:
        await conn.close()


def metrics_cost() -> None:
    port = free_port()
    listener = f"metrics.listener=http://127.0.0.1:{port}"
    with broker_process() as (off, off_pid), broker_process(listener) as (on, on_pid):
        for b in (off, on):
            asyncio.run(_create(b))
        rows: dict[str, list[tuple[float, float]]] = {
            "off produce": [],
            "on produce": [],
            "off small": [],
            "on small": [],
        }
        for _ in range(2):
            for label, bootstrap, pid in (("off", off, off_pid), ("on", on, on_pid)):
                rows[f"{label} produce"].append(produce_rate(bootstrap, pid, "load"))
                rows[f"{label} small"].append(asyncio.run(small_requests(bootstrap, pid)))
                if label == "on":
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
        for kind, unit, cpu_unit in (
            ("produce", "MB/s", "CPU s/MB"),
            ("small", "requests/s", "CPU s/1k requests"),
        ):
            off_rate = statistics.median(r for r, _ in rows[f"off {kind}"])
            on_rate = statistics.median(r for r, _ in rows[f"on {kind}"])
            off_cpu = statistics.median(c for _, c in rows[f"off {kind}"])
            on_cpu = statistics.median(c for _, c in rows[f"on {kind}"])
            print(
                f"  {kind:<8} metrics off {off_rate:9.1f} {unit:<11} ({off_cpu:.4f} {cpu_unit})"
                f"   on {on_rate:9.1f} ({on_cpu:.4f})   on/off {on_rate / off_rate:6.1%}"
                f"   (target >= 97%)"
            )
            if kind == "small":
                per_request_us = off_cpu * 1000  # CPU s per 1,000 requests -> µs per request
                counting_us = counting_cost_ns() / 1000
                share = counting_us / per_request_us
                print(
                    f"  counting one request (append + its share of settle, in-process): "
                    f"{counting_us:.2f} µs = {share:.1%} of the broker's CPU per small "
                    f"request without metrics ({per_request_us:.1f} µs)"
                )


def counting_cost_ns() -> float:
    """What metrics add to a small request: the dispatcher's append of its API key and its
    share of the read's `begin`/`settle` (32 requests per read, as sent here); the best of 7
    runs of 100,000 requests, minus the same loop without metrics."""
    metrics = RequestMetrics({3: "Metadata"}, str)
    answered = metrics.answered

    def counted() -> None:
        metrics.begin()
        for _ in range(32):
            answered.append(3)
        metrics.settle()

    def bare() -> None:
        for _ in range(32):
            pass

    with_metrics = timeit.repeat(counted, number=3125, repeat=7)
    without = timeit.repeat(bare, number=3125, repeat=7)
    return (min(with_metrics) - min(without)) / 100_000 * 1e9


async def _create(bootstrap: str) -> None:
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        await admin.create_topic("load", 1, 1)


def main() -> None:
    print("== console page loads")
    console_pages()
    print("== metrics off vs on (alternating runs, medians of 2)")
    metrics_cost()


if __name__ == "__main__":
    main()
