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
import random
import sys
import time
from datetime import datetime
from pathlib import Path

from riverlog.client.consumer import AsyncConsumer
from riverlog.client.producer import AsyncProducer, RecordMetadata
from riverlog.client.transactional_producer import AsyncTransactionalProducer
from riverlog.properties import load_properties
from riverlog.protocol.error_codes import KafkaError

REPORT_EVERY_S = 5.0
DEFAULT_TRANSACTIONAL_ID = "performance-producer-default-transactional-id"
DEFAULT_TRANSACTION_DURATION_MS = 3000


def add_producer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True, help="produce messages to this topic")
    parser.add_argument(
        "--num-records", type=int, required=True, help="number of messages to produce"
    )
    payload = parser.add_mutually_exclusive_group(required=True)
    payload.add_argument(
        "--record-size",
        type=int,
        help="message size in bytes. Note that you must provide exactly one of "
        "--record-size or --payload-file or --payload-monotonic.",
    )
    payload.add_argument(
        "--payload-file",
        help="file to read the message payloads from. This works only for "
        "UTF-8 encoded text files. Payloads will be read from this file and a "
        "payload will be randomly selected when sending messages.",
    )
    payload.add_argument(
        "--payload-monotonic",
        action="store_true",
        help="payload is monotonically increasing integer.",
    )
    parser.add_argument(
        "--payload-delimiter",
        default="\\n",
        help="provides delimiter to be used when --payload-file is provided. "
        "Defaults to new line. Note that this parameter will be ignored if "
        "--payload-file is not provided. (default: \\n)",
    )
    parser.add_argument(
        "--throughput",
        type=int,
        required=True,
        help="throttle maximum message throughput to *approximately* THROUGHPUT "
        "messages/sec. Set this to -1 to disable throttling.",
    )
    parser.add_argument(
        "--producer-props",
        nargs="+",
        metavar="PROP-NAME=PROP-VALUE",
        help="kafka producer related configuration properties like "
        "bootstrap.servers,client.id etc. These configs take precedence over "
        "those passed via --producer.config.",
    )
    parser.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="CONFIG-FILE",
        help="producer config properties file.",
    )
    parser.add_argument("--transactional-id", help="produce in transactions with this id")
    parser.add_argument(
        "--transaction-duration-ms", type=int, help="commit every this many ms (default 3000)"
    )


def read_payloads(path: str, delimiter: str) -> list[bytes]:
    """Kafka's --payload-file: UTF-8 text split at the delimiter; announces what it read."""
    file = Path(path)
    if not file.exists() or file.stat().st_size == 0:
        raise ValueError("File does not exist or empty file provided.")
    print(f"Reading payloads from: {file.absolute()}")
    pieces = file.read_text(encoding="utf-8").split("\n" if delimiter == "\\n" else delimiter)
    while pieces and pieces[-1] == "":  # Java's String.split drops trailing empty strings
        pieces.pop()
    print(f"Number of messages read: {len(pieces)}")
    return [p.encode() for p in pieces]


def producer_props(args: argparse.Namespace) -> dict[str, object]:
    if args.producer_props is None and args.producer_config is None:
        raise ValueError("Either --producer-props or --producer.config must be specified.")
    props: dict[str, object] = {"client.id": "perf-producer-client"}
    if args.producer_config is not None:
        props.update(load_properties(args.producer_config))
    for item in args.producer_props or []:
        pieces = item.split("=")
        if len(pieces) != 2:
            raise ValueError(f"Invalid property: {item}")
        props[pieces[0]] = pieces[1]
    if "bootstrap.servers" not in props:
        raise ValueError("the producer properties must include bootstrap.servers")
    return props


class _Stats:
    def __init__(self) -> None:
        self.bytes = 0
        self.window_bytes = 0
        self.latencies_ms: list[float] = []
        self.start = self.window_start = time.monotonic()
        self.window_count = 0
        self.window_latency = 0.0
        self.window_max = 0.0

    def record(self, count: int, latency_ms: float, size: int) -> None:
        self.bytes += size
        self.window_bytes += size
        self.latencies_ms += [latency_ms] * count
        self.window_count += count
        self.window_latency += latency_ms * count
        self.window_max = max(self.window_max, latency_ms)
        now = time.monotonic()
        if now - self.window_start >= REPORT_EVERY_S:
            rate = self.window_count / (now - self.window_start)
            print(
                f"{self.window_count} records sent, {rate:.1f} records/sec "
                f"({self.window_bytes / (now - self.window_start) / 1024 / 1024:.2f} MB/sec), "
                f"{self.window_latency / max(self.window_count, 1):.1f} ms avg latency, "
                f"{self.window_max:.1f} ms max latency.",
                flush=True,
            )
            self.window_start, self.window_count, self.window_bytes = now, 0, 0
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
            f"({(self.bytes / elapsed if elapsed > 0 else 0.0) / 1024 / 1024:.2f} MB/sec), "
            f"{sum(ordered) / len(ordered):.2f} ms avg latency, {ordered[-1]:.2f} ms max "
            f"latency, {pct(0.5)} ms 50th, {pct(0.95)} ms 95th, {pct(0.99)} ms 99th, "
            f"{pct(0.999)} ms 99.9th."
        )


async def _produce(args: argparse.Namespace) -> None:
    props = producer_props(args)
    payloads = read_payloads(args.payload_file, args.payload_delimiter) if args.payload_file else []
    fixed = os.urandom(args.record_size) if args.record_size is not None else b""
    chooser = random.Random(0)
    stats = _Stats()
    failures: list[BaseException] = []

    def on_done(began: float, size: int, future: asyncio.Future[RecordMetadata]) -> None:
        if future.exception() is not None:
            failures.append(future.exception())  # type: ignore[arg-type]
        else:
            stats.record(1, (time.monotonic() - began) * 1000, size)

    start = time.monotonic()
    transactional = args.transactional_id is not None or args.transaction_duration_ms is not None
    config = dict(props)
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
            if payloads:
                payload = payloads[chooser.randrange(len(payloads))]
            elif args.payload_monotonic:
                payload = str(sent).encode()
            else:
                payload = fixed
            if isinstance(producer, AsyncTransactionalProducer) and txn_started is None:
                await producer.begin_transaction()
                txn_started = time.monotonic()
            future = await producer.send(args.topic, payload)
            future.add_done_callback(functools.partial(on_done, time.monotonic(), len(payload)))
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
    except (KafkaError, ValueError, OSError) as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    return 0


def add_consumer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT",
        help="REQUIRED: The server(s) to connect to.",
    )
    parser.add_argument("--topic", required=True, help="REQUIRED: The topic to consume from.")
    parser.add_argument(
        "--messages",
        type=int,
        required=True,
        help="REQUIRED: The number of messages to send or consume",
    )
    parser.add_argument(
        "--group",
        default=f"perf-consumer-{random.randrange(100_000)}",
        help="The group id to consume on. (default: perf-consumer-NNNNN)",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=10_000,
        help="The maximum allowed time in milliseconds between returned records. (default: 10000)",
    )
    parser.add_argument(
        "--from-latest",
        action="store_true",
        help="If the consumer does not already have an established offset to "
        "consume from, start with the latest message present in the log rather "
        "than the earliest message.",
    )
    parser.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="config file",
        help="Consumer config properties file.",
    )
    parser.add_argument(
        "--show-detailed-stats",
        action="store_true",
        help="If set, stats are reported for each reporting interval as "
        "configured by reporting-interval",
    )
    parser.add_argument(
        "--reporting-interval",
        type=int,
        default=5_000,
        metavar="interval_ms",
        help="Interval in milliseconds at which to print progress info. (default: 5000)",
    )
    parser.add_argument(
        "--hide-header", action="store_true", help="If set, skips printing the header for the stats"
    )


HEADER_TAIL = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"


def _stamp(ms: float) -> str:
    """Kafka's default date format, yyyy-MM-dd HH:mm:ss:SSS."""
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S:%f")[:-3]


def progress_line(
    now_ms: float, last_ms: float, read: tuple[int, int], last: tuple[int, int], join_ms: int
) -> str:
    """One --show-detailed-stats line: (messages, bytes) now and at the last report."""
    messages, size = read
    elapsed = now_ms - last_ms
    interval_mb = (size - last[1]) / 1024 / 1024
    fetch_ms = int(elapsed - join_ms)
    fetch_mb_s = 0.0 if fetch_ms <= 0 else 1000 * interval_mb / fetch_ms
    fetch_n_s = 0.0 if fetch_ms <= 0 else 1000 * (messages - last[0]) / fetch_ms
    return (
        f"{_stamp(now_ms)}, 0, {size / 1024 / 1024:.4f}, {1000 * interval_mb / elapsed:.4f}, "
        f"{messages}, {(messages - last[0]) / elapsed * 1000:.4f}, {join_ms}, {fetch_ms}, "
        f"{fetch_mb_s:.4f}, {fetch_n_s:.4f}"
    )


async def _consume(args: argparse.Namespace) -> None:
    config: dict[str, object] = {
        **(load_properties(args.consumer_config) if args.consumer_config else {}),
        "bootstrap.servers": args.bootstrap_server,
        "group.id": args.group,
        "client.id": "perf-consumer-client",
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
        "enable.auto.commit": False,
    }
    if not args.hide_header:
        first = "time, threadId" if args.show_detailed_stats else "start.time, end.time"
        print(
            f"{first}, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec" + HEADER_TAIL,
            flush=True,
        )
    start_ms = time.time() * 1000
    joined_ms: list[float] = []
    messages = size = 0
    async with AsyncConsumer(config) as consumer:

        def assigned(_: object) -> None:
            if not joined_ms:
                joined_ms.append(time.time() * 1000)

        consumer.subscribe([args.topic], on_assign=assigned)
        now_ms = last_report_ms = last_consumed_ms = time.time() * 1000
        last = (0, 0)
        while messages < args.messages and now_ms - last_consumed_ms <= args.timeout:
            records = await consumer.poll(100)
            now_ms = time.time() * 1000
            if records:
                last_consumed_ms = now_ms
            for r in records:
                messages += 1
                size += len(r.key or b"") + len(r.value or b"")
                if now_ms - last_report_ms >= args.reporting_interval:
                    if args.show_detailed_stats:
                        join = int(joined_ms[0] - start_ms) if joined_ms and last == (0, 0) else 0
                        print(
                            progress_line(now_ms, last_report_ms, (messages, size), last, join),
                            flush=True,
                        )
                    last_report_ms, last = now_ms, (messages, size)
    if messages < args.messages:
        print(
            f"WARNING: Exiting before consuming the expected number of messages: timeout "
            f"({args.timeout} ms) exceeded. You can use the --timeout option to increase the "
            "timeout."
        )
    end_ms = time.time() * 1000
    if not args.show_detailed_stats:
        join = int(joined_ms[0] - start_ms) if joined_ms else 0
        elapsed_s = (end_ms - start_ms) / 1000
        fetch_ms = int(end_ms - start_ms) - join
        mb = size / 1024 / 1024
        print(
            f"{_stamp(start_ms)}, {_stamp(end_ms)}, {mb:.4f}, {mb / elapsed_s:.4f}, {messages}, "
            f"{messages / elapsed_s:.4f}, {join}, {fetch_ms}, {mb / (fetch_ms / 1000):.4f}, "
            f"{messages / (fetch_ms / 1000):.4f}"
        )


def run_consumer(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_consume(args))
    except (KafkaError, ValueError, OSError) as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    return 0
