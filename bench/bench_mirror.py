"""Mirroring throughput and end-to-end latency next to plain produce/consume (prints numbers).

Two single-node brokers (`riverlog server` processes: source and target) on this machine, in
one run:

- baseline: riverlog's AsyncProducer writes N 1 KiB records (4 partitions, acks=all,
  idempotent, linger.ms 5) to the source; an AsyncConsumer reads them back.
- `riverlog mirror-maker` (MM1) at-least-once and exactly-once
  (`--exactly.once.source.support enabled`, a transaction per partition every
  EOS_COMMIT_MS), `riverlog connect-mirror-maker` (MM2, with offset syncs) at-least-once
  and exactly-once (`exactly.once.source.support`, a transaction per partition per poll),
  as processes, copy the N records to the target (at-least-once first; `--exactly-once-first`
  swaps): records/s from the first record a read_committed consumer sees on the target to
  the N-th (start-up and group join excluded), and the mirror process's CPU seconds.
- latency: records carrying their send time, 1 KiB, at a steady RATE/s for a few seconds;
  produce -> consume on the source (baseline) and produce on the source -> consume on the
  target through the running MM1 processes (exactly-once: read_committed); p50 / p99.

CPU seconds are per 100k records: the client process for the baselines, the mirror process
for mirroring, and the two brokers' for each phase. About 2-3 minutes on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypeVar

from bench_harness import broker_process, cpu_seconds

from riverlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer

N = 60_000
SIZE = 1024
PARTITIONS = 4
RATE = 400  # records/s for the latency runs
EOS_COMMIT_MS = 100  # the exactly-once mirror's --offset.commit.interval.ms
_Run = TypeVar("_Run")
LATENCY_SECONDS = 5


async def create(bootstrap: str, *topics: str) -> None:
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        for topic in topics:
            await admin.create_topic(topic, PARTITIONS, 1)


async def produce(bootstrap: str, topic: str) -> float:
    payload = b"x" * SIZE
    async with AsyncProducer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as producer:
        began = time.perf_counter()
        for i in range(N):
            await producer.send(topic, payload, key=str(i % 100).encode())
        await producer.flush()
        return time.perf_counter() - began


async def consume(bootstrap: str, topic: str) -> float:
    consumer = AsyncConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    consumer.assign([(topic, p) for p in range(PARTITIONS)])
    seen = 0
    async with consumer:
        began = time.perf_counter()
        while seen < N:
            seen += len(await consumer.poll(1000))
        return time.perf_counter() - began


async def mirrored_in(target: str, topic: str, pid: int) -> tuple[float, float]:
    """Seconds from the first record a read_committed consumer sees on the target to the
    N-th, and the mirror process's CPU seconds over the same span."""
    consumer = AsyncConsumer(
        {
            "bootstrap.servers": target,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    async with AsyncAdmin({"bootstrap.servers": target}) as admin:
        while topic not in await admin.list_topics():
            await asyncio.sleep(0.05)
    consumer.assign([(topic, p) for p in range(PARTITIONS)])
    seen = 0
    async with consumer:
        while not (seen := len(await consumer.poll(100))):
            pass
        began, cpu = time.perf_counter(), cpu_seconds(pid)
        while seen < N:
            seen += len(await consumer.poll(100))
        return time.perf_counter() - began, cpu_seconds(pid) - cpu


async def latency(source: str, read_from: str, topic: str, read_topic: str) -> list[float]:
    """Milliseconds from send (on `source`) to poll (on `read_from`, read_committed), RATE
    records/s."""
    consumer = AsyncConsumer(
        {
            "bootstrap.servers": read_from,
            "auto.offset.reset": "latest",
            "fetch.max.wait.ms": 100,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([(read_topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_end()
    delays: list[float] = []
    total = RATE * LATENCY_SECONDS
    async with consumer, AsyncProducer({"bootstrap.servers": source, "linger.ms": 1}) as producer:
        await consumer.position((read_topic, 0))
        not_before = time.time_ns()  # records of an earlier run may still be mirrored: skip

        async def send() -> None:
            began = time.perf_counter()
            for i in range(total):
                stamp = time.time_ns().to_bytes(8, "big")
                await producer.send(topic, stamp + b"x" * (SIZE - 8), key=str(i).encode())
                await asyncio.sleep(max(0.0, began + (i + 1) / RATE - time.perf_counter()))

        sending = asyncio.create_task(send())
        async with asyncio.timeout(60):
            while len(delays) < total:
                for r in await consumer.poll(100):
                    sent = int.from_bytes((r.value or b"")[:8], "big")
                    if sent >= not_before:
                        delays.append((time.time_ns() - sent) / 1e6)
        await sending
    return delays


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def start_mirror(args: list[str], directory: Path) -> subprocess.Popen[bytes]:
    log = open(directory / "mirror.log", "ab")  # noqa: SIM115 (the process keeps it)
    return subprocess.Popen(
        [sys.executable, "-m", "riverlog", *args], stdout=log, stderr=subprocess.STDOUT
    )


def row(label: str, seconds: float, cpu: float) -> None:
    rate = N / seconds
    print(
        f"{label:<48} {rate:>9.0f} records/s {rate * SIZE / 1e6:>7.1f} MB/s "
        f"{cpu * 100_000 / N:>7.2f} CPU s/100k"
    )


def mm1_args(directory: Path, source: str, group: str, topics: str, *extra: str) -> list[str]:
    (directory / f"{group}.properties").write_text(
        f"bootstrap.servers={source}\ngroup.id={group}\nauto.offset.reset=earliest\n"
    )
    return [
        "mirror-maker",
        *("--consumer.config", str(directory / f"{group}.properties")),
        *("--producer.config", str(directory / "p.properties")),
        *("--include", topics, *extra),
    ]


def order(runs: list[_Run], exactly_once_first: bool) -> list[_Run]:
    """At-least-once first, unless asked otherwise (first runs pay for fresh memory)."""
    return list(reversed(runs)) if exactly_once_first else runs


async def main(exactly_once_first: bool) -> None:
    with broker_process() as (source, source_pid), broker_process() as (target, target_pid):

        def brokers() -> float:
            return cpu_seconds(source_pid) + cpu_seconds(target_pid)

        mirrored_topics = ("bench-mm1", "bench-eos", "bench-latency", "bench-latency-eos")
        await create(source, "bench-mm2", "bench-mm2-eos", *mirrored_topics)
        await create(target, *mirrored_topics)
        print(f"{N} records of {SIZE} B, {PARTITIONS} partitions, single-node source and target")

        cpu, b0 = time.process_time(), brokers()
        seconds = await produce(source, "bench-mm1")
        row("produce (AsyncProducer, client CPU)", seconds, time.process_time() - cpu)
        print(f"{'':<48} brokers' CPU s/100k: {(brokers() - b0) * 100_000 / N:.2f}")
        cpu, b0 = time.process_time(), brokers()
        seconds = await consume(source, "bench-mm1")
        row("consume (AsyncConsumer, client CPU)", seconds, time.process_time() - cpu)
        print(f"{'':<48} brokers' CPU s/100k: {(brokers() - b0) * 100_000 / N:.2f}")
        for topic in ("bench-mm2", "bench-mm2-eos", "bench-eos"):
            await produce(source, topic)

        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch)
            (directory / "p.properties").write_text(f"bootstrap.servers={target}\n")
            eos = ("--exactly.once.source.support", "enabled")
            runs = [
                ("mirror-maker (MM1 process CPU)", "bench-mm1", "bench-latency", ()),
                (
                    f"mirror-maker exactly-once, {EOS_COMMIT_MS} ms txns",
                    "bench-eos",
                    "bench-latency-eos",
                    (*eos, "--offset.commit.interval.ms", str(EOS_COMMIT_MS)),
                ),
            ]
            delays: dict[str, list[float]] = {}
            for label, topic, latency_topic, extra in order(runs, exactly_once_first):
                group = f"bench-{topic}"
                args = mm1_args(directory, source, group, f"{topic},{latency_topic}", *extra)
                mm1 = start_mirror(args, directory)
                try:
                    b0 = brokers()
                    seconds, cpu = await mirrored_in(target, topic, mm1.pid)
                    row(label, seconds, cpu)
                    print(f"{'':<48} brokers' CPU s/100k: {(brokers() - b0) * 100_000 / N:.2f}")
                    if not delays:
                        delays["produce -> consume, one cluster"] = await latency(
                            source, source, latency_topic, latency_topic
                        )
                    how = "exactly-once " if extra else ""
                    delays[f"produce -> {how}mirror-maker -> consume"] = await latency(
                        source, target, latency_topic, latency_topic
                    )
                finally:
                    mm1.terminate()
                    mm1.wait(30)
            mm2_runs = [
                ("connect-mirror-maker (MM2 process CPU)", "a", "b", "bench-mm2", ""),
                (
                    "connect-mirror-maker exactly-once, txn/poll",
                    "e",
                    "f",
                    "bench-mm2-eos",
                    "f.exactly.once.source.support = enabled\n",
                ),
            ]
            for label, a, b, topic, extra_line in order(mm2_runs, exactly_once_first):
                config = directory / f"{a}{b}.properties"
                config.write_text(
                    f"clusters = {a}, {b}\n{a}.bootstrap.servers = {source}\n"
                    f"{b}.bootstrap.servers = {target}\n{a}->{b}.enabled = true\n"
                    f"{a}->{b}.topics = {topic}\nreplication.factor = 1\n"
                    "offset-syncs.topic.replication.factor = 1\n"
                    f"checkpoints.topic.replication.factor = 1\n{extra_line}"
                )
                mm2 = start_mirror(["connect-mirror-maker", str(config)], directory)
                try:
                    b0 = brokers()
                    seconds, cpu = await mirrored_in(target, f"{a}.{topic}", mm2.pid)
                    row(label, seconds, cpu)
                    print(f"{'':<48} brokers' CPU s/100k: {(brokers() - b0) * 100_000 / N:.2f}")
                finally:
                    mm2.terminate()
                    mm2.wait(30)
        for label, measured in delays.items():
            print(
                f"latency {label:<52} p50 {percentile(measured, 50):7.1f} ms  "
                f"p99 {percentile(measured, 99):7.1f} ms  ({len(measured)} records at {RATE}/s)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--exactly-once-first",
        action="store_true",
        help="run the exactly-once mirrors before the at-least-once ones",
    )
    asyncio.run(main(parser.parse_args().exactly_once_first))
