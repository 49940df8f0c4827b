"""What validating every record on append costs, and riverlog's consumer next to the others.

1. Produce: the same confluent-kafka producer load (acks=1, linger.ms 5, one partition) against
   two broker processes started side by side in this run — one running this tree's code (full
   record walk on append), one running the baseline commit's code (`--baseline`, by default
   the parent of the commit that added the record walk, exported with `git archive`: header
   checks only) — for 100 B and 1 KiB records with compression none, lz4 and zstd,
   alternating over ROUNDS rounds; medians of MB/s and the broker's CPU seconds per GB of
   record values appended (from /proc schedstat). Target: with validation >= 85% of the
   baseline's throughput.
2. Consume: on this tree's broker, the same records read from the start by riverlog's
   blocking `Consumer.poll` (max.poll.records 10000, Python records), aiokafka's `getmany`
   and confluent-kafka's `consume(10000)`; records/s and the client's CPU seconds per million
   records. Target: riverlog >= aiokafka at 100 B and 1 KiB.

Short by design (about two minutes on a 2-core machine): PRODUCE_BYTES per produce run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
PRODUCE_BYTES = 64 * 1024 * 1024
CONSUME_BYTES = 48 * 1024 * 1024
ROUNDS = 3
CODECS = ("none", "lz4", "zstd")
SIZES = (100, 1024)


def cpu_seconds(pid: int) -> float:
    """CPU seconds of every thread of process `pid` so far (schedstat: nanoseconds, where
    /proc/pid/stat counts 10 ms ticks, too coarse for a run of a few seconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


@contextlib.contextmanager
def broker(src: Path) -> Iterator[tuple[str, int]]:
    """`riverlog server` from the sources in `src`; its bootstrap address and pid."""
    with tempfile.TemporaryDirectory() as data_dir:
        env = {**os.environ, "PYTHONPATH": str(src)}
        args = [sys.executable, "-m", "riverlog", "server", "--listen", "127.0.0.1:0"]
        args += ["--data-dir", data_dir]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                found = re.search(rb"listening on (127\.0\.0\.1:\d+)", line)
                if found:
                    yield found.group(1).decode(), proc.pid
                    break
            else:
                raise RuntimeError(f"the broker from {src} did not start")
        finally:
            proc.terminate()
            proc.wait(30)


def export_baseline(ref: str, into: Path) -> Path:
    """The baseline commit's `src/` tree, extracted under `into`."""
    archive = into / "baseline.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def create(bootstrap: str, partitions: int = 1) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def produce(bootstrap: str, topic: str, size: int, codec: str, total: int) -> float:
    """Seconds to produce `total` bytes of `size`-byte values (keyed) and have them acked."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
            "compression.type": codec,
            "acks": 1,
        }
    )
    value = b"x" * (size - 8) + os.urandom(8)  # compressible, as real payloads are
    keys = [b"user-%d" % i for i in range(100)]
    began = time.perf_counter()
    for i in range(total // size):
        while True:
            try:
                producer.produce(topic, value, key=keys[i % 100], partition=0)
                break
            except BufferError:
                producer.poll(0.001)
    assert producer.flush(120) == 0
    return time.perf_counter() - began


def bench_produce(brokers: dict[str, tuple[str, int]]) -> None:
    print(
        f"produce: {PRODUCE_BYTES >> 20} MiB per run, median of {ROUNDS} rounds, "
        "confluent-kafka acks=1 linger.ms=5",
        flush=True,
    )
    for size in SIZES:
        for codec in CODECS:
            rates: dict[str, list[float]] = {name: [] for name in brokers}
            cpu: dict[str, list[float]] = {name: [] for name in brokers}
            for _ in range(ROUNDS):
                for name, (bootstrap, pid) in brokers.items():
                    topic = create(bootstrap)
                    before = cpu_seconds(pid)
                    seconds = produce(bootstrap, topic, size, codec, PRODUCE_BYTES)
                    cpu[name].append((cpu_seconds(pid) - before) / (PRODUCE_BYTES / 1e9))
                    rates[name].append(PRODUCE_BYTES / seconds / 1e6)
            base = statistics.median(rates["baseline"])
            for name in brokers:
                rate = statistics.median(rates[name])
                print(
                    f"  {size:>5} B {codec:<5} {name:<16} {rate:7.1f} MB/s "
                    f"{rate * 1e6 / size:>10,.0f} rec/s  broker CPU "
                    f"{statistics.median(cpu[name]):6.2f} s/GB  {rate / base:6.1%} of baseline",
                    flush=True,
                )


def fill(bootstrap: str, size: int) -> tuple[str, int]:
    topic = create(bootstrap)
    produce(bootstrap, topic, size, "none", CONSUME_BYTES)
    return topic, CONSUME_BYTES // size


def read_riverlog(bootstrap: str, topic: str, count: int) -> None:
    from riverlog.client import Consumer as RiverlogConsumer

    consumer = RiverlogConsumer(
        {
            "bootstrap.servers": bootstrap,
            "max.poll.records": 10_000,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([(topic, 0)])
    got = 0
    while got < count:
        got += len(consumer.poll(1000))
    consumer.close()


def read_aiokafka(bootstrap: str, topic: str, count: int) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    async def run() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        consumer.assign([ATopicPartition(topic, 0)])
        got = 0
        while got < count:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            got += sum(len(records) for records in batch.values())
        await consumer.stop()

    asyncio.run(run())


def read_confluent(bootstrap: str, topic: str, count: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 1,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    while got < count:
        got += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    consumer.close()


def bench_consume(bootstrap: str) -> None:
    from riverlog.protocol.records import walk

    print(
        f"consume: {CONSUME_BYTES >> 20} MiB from the start, median of {ROUNDS} rounds; "
        f"riverlog's record walk compiled: {walk.ACCELERATED}",
        flush=True,
    )
    readers: dict[str, Callable[[str, str, int], None]] = {
        "riverlog poll": read_riverlog,
        "aiokafka getmany": read_aiokafka,
        "confluent consume": read_confluent,
    }
    for size in SIZES:
        topic, count = fill(bootstrap, size)
        rates: dict[str, list[float]] = {name: [] for name in readers}
        cpu: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(ROUNDS):
            for name, read in readers.items():
                began, began_cpu = time.perf_counter(), time.process_time()
                read(bootstrap, topic, count)
                rates[name].append(count / (time.perf_counter() - began))
                cpu[name].append((time.process_time() - began_cpu) / (count / 1e6))
        base = statistics.median(rates["aiokafka getmany"])
        for name in readers:
            rate = statistics.median(rates[name])
            print(
                f"  {size:>5} B {name:<18} {rate:>10,.0f} rec/s  client CPU "
                f"{statistics.median(cpu[name]):5.2f} s per M records  "
                f"{rate / base:5.2f}x aiokafka",
                flush=True,
            )


def before_validation() -> str:
    """The parent of the commit that added `records/walk.py`: the broker before validation."""
    added = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "log",
            "--diff-filter=A",
            "--format=%H",
            "--",
            "src/riverlog/protocol/records/walk.py",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise SystemExit("no commit adds records/walk.py here (a shallow clone?): pass --baseline")
    return f"{added[-1]}^"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--baseline",
        default=None,
        help="git ref (default: the parent of the commit that added the record walk, i.e. the "
        "broker before record validation)",
    )
    parser.add_argument("--skip-produce", action="store_true")
    args = parser.parse_args()
    ref = args.baseline or before_validation()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        ours = stack.enter_context(broker(ROOT / "src"))
        if not args.skip_produce:
            print(f"baseline: {ref} (header checks only); validated: this tree", flush=True)
            baseline = stack.enter_context(broker(export_baseline(ref, Path(tmp))))
            bench_produce({"baseline": baseline, "validated": ours})
        bench_consume(ours[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
