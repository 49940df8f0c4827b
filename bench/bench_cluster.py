"""Cluster benchmark: a real ZooKeeper and three broker processes on loopback (prints numbers).

- acks=all produce throughput of 1 KiB records to an RF=3 topic (3 partitions, one led by
  each broker), next to the same load on a single broker without ZooKeeper in the same run
  (target, issue 6: the cluster at least 50% of the single broker). The two run alternately,
  ROUNDS times, with the CPU seconds the brokers and the load generator spent. Before each
  measured run the benchmark touches and frees WARM_BYTES of memory: this VM returns free
  memory to the hypervisor within ~2-3 s (virtio-balloon free page reporting), and a page
  written there for the first time costs ~10x a recycled one (~3-4.5 ms per MiB against
  ~0.3) — a cost a broker whose memory is full of page cache does not pay, which falls three
  times on RF=3 (three copies on one machine): left to chance, it put the brokers' CPU per
  RF=3 round anywhere from 0.7 to 2.6 s (docs/field-notes.md). Rounds still vary (2 cores
  shared by 4 processes), so the median is the figure. Both with librdkafka's
  idempotent producer, whose broker threads poll in a tight loop while its 5 requests per
  broker are in flight (on 2 cores that CPU is taken from the brokers), and without
  idempotence (no in-flight limit). With every core busy in both runs (here: 2 cores, three
  brokers and the load generator), throughput goes as 1 / (all CPU per byte), so the ratio
  follows the runs' CPU, brokers plus load generator: (B1 + G) / (B3 + G). It reaches 50%
  only when the generator's G is at least one broker's B1 plus what replication adds beyond
  three leaders' work. The median CPU of each run, and the share of the cores it kept busy,
  are printed with the ratio (the idempotent single-broker run waits on its 5 requests in
  flight and leaves cores idle: there the CPU ratio says nothing). Beside them, the brokers'
  own CPU per acknowledged GiB, RF=3 (three brokers together) against one broker, and their
  ratio (target, issue 29: at most 3.5x — three copies and little more).
- the time to create a topic of 1,000 partitions x 3 replicas, until every partition has a
  leader and a full ISR in Metadata
- the time to fail over 1,000 leaders (all on one broker): after a controlled shutdown of that
  broker, and after SIGKILL (which includes the ZooKeeper session timeout that detects it)

Load client: confluent-kafka. Everything runs under a temporary directory and stops by PID.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import NamedTuple

from bench_harness import CLOCK_TICKS, cpu_seconds
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.devcluster import BrokerProcess, ZooKeeperServer, free_port

PRODUCE_BYTES = 128 * 1024 * 1024
RECORD = 1024
SESSION_TIMEOUT_MS = 6000
PARTITIONS = 1000
ROUNDS = 5
WARM_BYTES = 1536 << 20
PRODUCERS = {
    True: "idempotent producer (5 requests in flight per broker)",
    False: "producer without idempotence (unbounded in flight)",
}


def warm_memory() -> None:
    """Touch and free WARM_BYTES of memory: the next page-cache pages are recycled ones."""
    chunk = b"\1" * (1 << 20)
    with mmap.mmap(-1, WARM_BYTES) as memory:
        for offset in range(0, WARM_BYTES, len(chunk)):
            memory[offset : offset + len(chunk)] = chunk


class Run(NamedTuple):
    mb_per_s: float
    brokers_cpu_s: float
    generator_cpu_s: float

    @property
    def cpu_s(self) -> float:
        return self.brokers_cpu_s + self.generator_cpu_s

    @property
    def cores_busy(self) -> float:
        """The share of the machine's cores the run kept busy."""
        seconds = PRODUCE_BYTES / 1e6 / self.mb_per_s
        return self.cpu_s / (seconds * (os.cpu_count() or 1))

    @property
    def brokers_cpu_per_gib(self) -> float:
        """The brokers' CPU seconds per acknowledged GiB."""
        return self.brokers_cpu_s * (1 << 30) / PRODUCE_BYTES

    def __str__(self) -> str:
        return (
            f"{self.mb_per_s:6.1f} MB/s (CPU: brokers {self.brokers_cpu_s:.2f} s, "
            f"{self.brokers_cpu_per_gib:.2f} s per GiB; load generator "
            f"{self.generator_cpu_s:.2f} s)"
        )


def measured_produce(bootstrap: str, topic: str, broker_pids: list[int], idempotent: bool) -> Run:
    """MB/s, and the CPU seconds the brokers and the load generator spent on it."""
    warm_memory()
    before = [cpu_seconds(p) for p in broker_pids], cpu_seconds(os.getpid())
    mb_per_s = produce_acks_all(bootstrap, topic, 3, idempotent)
    brokers = sum(cpu_seconds(p) for p in broker_pids) - sum(before[0])
    generator = cpu_seconds(os.getpid()) - before[1]
    return Run(mb_per_s, brokers, generator)


def produce_acks_all(bootstrap: str, topic: str, partitions: int, idempotent: bool) -> float:
    """MB/s of record values, acks=all, records spread over the partitions."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": idempotent,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    value = b"x" * RECORD
    count = PRODUCE_BYTES // RECORD
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.001)
    assert producer.flush(300) == 0
    return count * RECORD / (time.perf_counter() - start) / 1e6


def create(bootstrap: str, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([topic], operation_timeout=120)[topic.topic].result(180)


def partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition → (leader, ISR size)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_topics(topic, timeout=30).topics[topic].partitions
    return {p: (m.leader, len(m.isrs)) for p, m in found.items()}


def wait_for(check: object, timeout_s: float) -> float:
    start = time.perf_counter()
    while not check():  # type: ignore[operator]
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError
        time.sleep(0.05)
    return time.perf_counter() - start


@contextlib.contextmanager
def single_broker(directory: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "riverlog",
            "server",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(directory / "single"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if b"listening on" in line:
                break
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(60)


def compare_with_single_broker(directory: Path, cluster: str, cluster_pids: list[int]) -> None:
    runs: dict[bool, list[tuple[Run, Run]]] = {True: [], False: []}
    with single_broker(directory) as (single, single_pid):
        create(single, NewTopic("single", 3, 1))
        for round_ in range(1, ROUNDS + 1):
            for idempotent in (True, False):
                alone = measured_produce(single, "single", [single_pid], idempotent)
                rf3 = measured_produce(cluster, "rf3", cluster_pids, idempotent)
                runs[idempotent].append((alone, rf3))
                print(
                    f"acks=all, 1 KiB records, {PRODUCERS[idempotent]}, round {round_}: "
                    f"single broker {alone}; RF=3 on 3 brokers {rf3}: "
                    f"{100 * rf3.mb_per_s / alone.mb_per_s:.0f}%"
                )
    for idempotent, pairs in runs.items():
        ratio = median([rf3.mb_per_s / alone.mb_per_s for alone, rf3 in pairs])
        print(
            f"RF=3 / single broker, {PRODUCERS[idempotent]}, median of {ROUNDS} rounds: "
            f"{100 * ratio:.0f}% (target >= 50%)"
        )
        # With every core busy in both runs, throughput goes as 1 / (all CPU per byte).
        alone_cpu, rf3_cpu = (median([run[i].cpu_s for run in pairs]) for i in (0, 1))
        alone_busy, rf3_busy = (median([run[i].cores_busy for run in pairs]) for i in (0, 1))
        print(
            f"  median CPU per {PRODUCE_BYTES >> 20} MiB, brokers + load generator: single "
            f"broker {alone_cpu:.2f} s ({100 * alone_busy:.0f}% of {os.cpu_count()} cores "
            f"busy), RF=3 {rf3_cpu:.2f} s ({100 * rf3_busy:.0f}% busy); CPU ratio "
            f"{100 * alone_cpu / rf3_cpu:.0f}%"
        )
        # The brokers' own CPU per acknowledged byte: what replication costs beyond copies.
        alone_gib, rf3_gib = (median([run[i].brokers_cpu_per_gib for run in pairs]) for i in (0, 1))
        print(
            f"  median brokers' CPU per acknowledged GiB: single broker {alone_gib:.3f} s, "
            f"RF=3 (3 brokers) {rf3_gib:.3f} s: {rf3_gib / alone_gib:.2f}x (target <= 3.5x; "
            f"clock ticks of {1000 // CLOCK_TICKS} ms)"
        )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="riverlog-bench-cluster-") as tmp:
        directory = Path(tmp)
        zookeeper = ZooKeeperServer(directory / "zookeeper").start()
        settings = {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
        brokers = {i: BrokerProcess(i, directory, zookeeper.connect, settings) for i in (1, 2, 3)}
        try:
            for b in brokers.values():
                b.start(60)
            bootstrap = ",".join(b.address for b in brokers.values())
            create(
                bootstrap, NewTopic("rf3", 3, replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
            )
            pids = [b.proc.pid for b in brokers.values() if b.proc is not None]
            compare_with_single_broker(directory, bootstrap, pids)

            def all_led(topic: str, avoid: int = -1) -> bool:
                parts = partitions(bootstrap, topic)
                return len(parts) == PARTITIONS and all(
                    leader >= 0 and leader != avoid for leader, _ in parts.values()
                )

            def all_in_sync(topic: str) -> bool:
                return all_led(topic) and all(
                    isr == 3 for _, isr in partitions(bootstrap, topic).values()
                )

            start = time.perf_counter()
            create(bootstrap, NewTopic("wide", PARTITIONS, 3))
            wait_for(lambda: all_in_sync("wide"), 180)
            print(
                f"create {PARTITIONS} partitions x 3 replicas: {time.perf_counter() - start:.2f} s"
            )

            for how in ("controlled shutdown", "SIGKILL"):
                topic = f"led-by-1-{uuid.uuid4().hex[:4]}"
                on_one = [[1, 2, 3]] * PARTITIONS
                create(bootstrap, NewTopic(topic, PARTITIONS, replica_assignment=on_one))
                wait_for(lambda t=topic: all_in_sync(t), 180)
                victim = brokers[1].proc
                assert victim is not None
                start = time.perf_counter()
                victim.send_signal(signal.SIGKILL if how == "SIGKILL" else signal.SIGTERM)
                wait_for(lambda t=topic: all_led(t, avoid=1), 180)
                failover_s = time.perf_counter() - start
                brokers[1].stop(120)  # reaps it (a clean stop goes on to close its logs)
                timeout_s = SESSION_TIMEOUT_MS / 1000
                note = f" (the session timeout is {timeout_s:.0f} s)" if how == "SIGKILL" else ""
                print(f"fail over {PARTITIONS} leaders after {how}: {failover_s:.2f} s{note}")
                brokers[1].start(60)
        finally:
            for b in brokers.values():
                with contextlib.suppress(Exception):
                    b.stop(60)
            zookeeper.stop()


if __name__ == "__main__":
    main()
