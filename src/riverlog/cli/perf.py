"""`riverlog producer-perf-test` and `riverlog consumer-perf-test`: Kafka's perf tools.

producer-perf-test (kafka-producer-perf-test.sh): `--topic`, `--num-records`, `--record-size`,
`--throughput` (records/s, -1 for unlimited), `--producer-props k=v ...` (any producer
config: bootstrap.servers, acks, linger.ms, batch.size, compression.type, ...),
`--transactional-id` / `--transaction-duration-ms` (either turns transactions on: a commit
every duration, 3000 ms by default, as Kafka's tool). Latency is per
record, from `send` to its acknowledgement, as Kafka's tool measures it. Prints a progress
line every 5 s and Kafka's summary:
"N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency, p50 ms 50th,
p95 ms 95th, p99 ms 99th, p999 ms 99.9th."

consumer-perf-test (kafka-consumer-perf-test.sh): `--bootstrap-server`, `--topic`,
`--messages`, `--timeout`; prints Kafka's CSV header and one result line.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
import time
from datetime import datetime

from riverlog.client.consumer import AsyncConsumer
from riverlog.client.producer import AsyncProducer, RecordMetadata
from riverlog.client.transactional_producer import AsyncTransactionalProducer
from riverlog.protocol.error_codes import KafkaError

REPORT_EVERY_S = 5.0
DEFAULT_TRANSACTIONAL_ID = "performance-producer-default-transactional-id"
DEFAULT_TRANSACTION_DURATION_MS = 3000


def add_producer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True)
    parser.add_argument("--num-records", type=int, required=True)
    parser.add_argument("--record-size", type=int, required=True)
    parser.add_argument("--throughput", type=int, required=True, help="records/s, -1: unlimited")
    parser.add_argument("--producer-props", nargs="+", required=True, metavar="KEY=VALUE")
    parser.add_argument("--transactional-id", help="produce in transactions with this id")
    parser.add_argument(
        "--transaction-duration-ms", type=int, help="commit every this many ms (default 3000)"
    )


class _Stats:
    def __init__(self, record_size: int) -> None:
        self.record_size = record_size
        self.latencies_ms: list[float] = []
        self.start = self.window_start = time.monotonic()
        self.window_count = 0
        self.window_latency = 0.0
        self.window_max = 0.0

    def record(self, count: int, latency_ms: float) -> None:
        self.latencies_ms += [latency_ms] * count
        self.window_count += count
        self.window_latency += latency_ms * count
        self.window_max = max(self.window_max, latency_ms)
        now = time.monotonic()
        if now - self.window_start >= REPORT_EVERY_S:
            rate = self.window_count / (now - self.window_start)
            print(
                f"{self.window_count} records sent, {rate:.1f} records/sec "
                f"({rate * self.record_size / 1024 / 1024:.2f} MB/sec), "
                f"{self.window_latency / max(self.window_count, 1):.1f} ms avg latency, "
                f"{self.window_max:.1f} ms max latency.",
                flush=True,
            )
            self.window_start, self.window_count = now, 0
            self.window_latency = self.window_max = 0.0

    def summary(self) -> str:
        n = len(self.latencies_ms)
        elapsed = time.monotonic() - self.start
        ordered = sorted(self.latencies_ms) or [0.0]

        def pct(p: float) -> int:
            return int(ordered[min(len(ordered) - 1, int(p * len(ordered)))])

        rate = n / elapsed if elapsed > 0 else 0.0
        return (
            f"{n} records sent, {rate:.1f} records/sec "
            f"({rate * self.record_size / 1024 / 1024:.2f} MB/sec), "
            f"{sum(ordered) / len(ordered):.2f} ms avg latency, {ordered[-1]:.2f} ms max "
            f"latency, {pct(0.5)} ms 50th, {pct(0.95)} ms 95th, {pct(0.99)} ms 99th, "
            f"{pct(0.999)} ms 99.9th."
        )


async def _produce(args: argparse.Namespace) -> None:
    props: dict[str, object] = dict(item.split("=", 1) for item in args.producer_props)
    if "bootstrap.servers" not in props:
        raise ValueError("--producer-props must include bootstrap.servers")
    payload = os.urandom(args.record_size)
    stats = _Stats(args.record_size)
    failures: list[BaseException] = []

    def on_done(began: float, future: asyncio.Future[RecordMetadata]) -> None:
        if future.exception() is not None:
            failures.append(future.exception())  # type: ignore[arg-type]
        else:
            stats.record(1, (time.monotonic() - began) * 1000)

    start = time.monotonic()
    transactional = args.transactional_id is not None or args.transaction_duration_ms is not None
    config = {"client.id": "producer-perf-test", **props}
    producer: AsyncProducer
    if transactional:
        config["transactional.id"] = args.transactional_id or DEFAULT_TRANSACTIONAL_ID
        producer = AsyncTransactionalProducer(config)
    else:
        producer = AsyncProducer(config)
    duration_s = (args.transaction_duration_ms or DEFAULT_TRANSACTION_DURATION_MS) / 1000
    async with producer:
        txn_started = None
        if isinstance(producer, AsyncTransactionalProducer):
            await producer.init_transactions()
        for sent in range(args.num_records):
            if args.throughput > 0:
                due = start + sent / args.throughput
                if due > time.monotonic():
                    await asyncio.sleep(due - time.monotonic())
            if isinstance(producer, AsyncTransactionalProducer) and txn_started is None:
                await producer.begin_transaction()
                txn_started = time.monotonic()
            future = await producer.send(args.topic, payload)
            future.add_done_callback(functools.partial(on_done, time.monotonic()))
            if failures:
                raise failures[0]
            if txn_started is not None and time.monotonic() - txn_started >= duration_s:
                assert isinstance(producer, AsyncTransactionalProducer)
                await producer.commit_transaction()
                txn_started = None
        if txn_started is not None:
            assert isinstance(producer, AsyncTransactionalProducer)
            await producer.commit_transaction()
        await producer.flush()
    if failures:
        raise failures[0]
    print(stats.summary(), flush=True)


def run_producer(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_produce(args))
    except (KafkaError, ValueError, ConnectionError) as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    return 0


def add_consumer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--timeout", type=int, default=10_000, help="ms without data to give up")


async def _consume(args: argparse.Namespace) -> str:
    count = size = 0
    started = datetime.now()
    config = {"bootstrap.servers": args.bootstrap_server, "client.id": "consumer-perf-test"}
    async with AsyncConsumer(config) as consumer:
        partitions = await consumer.cluster.partitions_of(args.topic, allow_auto_create=False)
        consumer.assign((args.topic, p) for p in range(partitions))
        consumer.seek_to_beginning()
        fetch_start = time.monotonic()
        last = fetch_start
        while count < args.messages and (time.monotonic() - last) * 1000 < args.timeout:
            records = await consumer.poll(100)
            if records:
                last = time.monotonic()
            for r in records[: args.messages - count]:
                size += len(r.value or b"") + len(r.key or b"")
                count += 1
        elapsed = max(time.monotonic() - fetch_start, 1e-9)
    mb = size / 1024 / 1024
    ended = datetime.now()
    fmt = "%Y-%m-%d %H:%M:%S:%f"
    return (
        f"{started.strftime(fmt)[:-3]}, {ended.strftime(fmt)[:-3]}, {mb:.4f}, "
        f"{mb / elapsed:.4f}, {count}, {count / elapsed:.4f}, 0, {elapsed * 1000:.0f}, "
        f"{mb / elapsed:.4f}, {count / elapsed:.4f}"
    )


def run_consumer(args: argparse.Namespace) -> int:
    try:
        line = asyncio.run(_consume(args))
    except (KafkaError, ValueError, ConnectionError) as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    print(
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
        "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    print(line)
    return 0
