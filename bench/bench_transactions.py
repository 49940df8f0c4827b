"""Transactions benchmark with confluent-kafka as the load client (prints numbers, asserts none).

Measured in one run against one `riverlog server` process:

- produce throughput of 1 KiB records to 3 partitions, acks=all: idempotent (the baseline)
  and transactional, committing a transaction every 100 ms (issue 24's target: >= 80% of
  the idempotent rate), each with the broker's CPU seconds per 100 MB of records. The two
  take turns for `--rounds` rounds, the first of each round alternating (whichever runs
  later pays more for the page cache's fresh pages on this VM: docs/field-notes.md), and
  each figure sums its rounds;
- end-to-end latency at 1,000 records/s (p50/p99): a read_committed consumer of a producer
  committing every 100 ms, beside a read_uncommitted consumer of an idempotent producer
  (the baseline). A record waits for its transaction's commit, so read_committed latency is
  about half the transaction interval more, by design. Records sent in the first
  `WARM_UP_S` are not counted: while the consumer's first fetches settle they waited up to
  ~0.5 s, enough of a 5-s run's samples to make its p99 (docs/field-notes.md).

    PYTHONPATH=src python bench/bench_transactions.py [--seconds 10] [--rounds 2]
        [--override KEY=VALUE ...]

The transactional run includes the leaders' KIP-890 verification (on by default): one
AddPartitionsToTxn round trip per partition per transaction, before its first batch;
`--override transaction.partition.verification.enable=false` measures without it.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from bench_harness import add_override_argument, broker_process, cpu_seconds
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

SIZE = 1024
PARTITIONS = 3
TXN_INTERVAL_S = 0.1
WARM_UP_S = 1.5


def create(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = f"bench-txn-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _producer(bootstrap: str, transactional: bool) -> Producer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.kbytes": 1 << 18,
    }
    if transactional:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:6]}"
    producer = Producer(config)
    if transactional:
        producer.init_transactions(30)
    return producer


def produce_rate(
    bootstrap: str, pid: int, transactional: bool, seconds: float
) -> tuple[int, float, float]:
    """(records acknowledged, seconds, broker CPU seconds)."""
    topic = create(bootstrap)
    producer = _producer(bootstrap, transactional)
    value = b"x" * SIZE
    acked = 0

    def delivered(err: object, _msg: object) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    cpu0, start = cpu_seconds(pid), time.perf_counter()
    end = start + seconds
    i = 0
    while time.perf_counter() < end:
        if transactional:
            producer.begin_transaction()
        txn_end = time.perf_counter() + TXN_INTERVAL_S
        while time.perf_counter() < min(txn_end, end):
            try:
                producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=delivered)
                i += 1
            except BufferError:
                producer.poll(0.001)
        if transactional:
            producer.commit_transaction(30)  # flushes: every record acknowledged
    producer.flush(30)
    return acked, time.perf_counter() - start, cpu_seconds(pid) - cpu0


def latency(bootstrap: str, transactional: bool, seconds: float, rate: int = 1000) -> list[float]:
    topic = create(bootstrap, 1)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-txn-e2e",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if transactional else "read_uncommitted",
        }
    )
    producer = _producer(bootstrap, transactional)
    # Warm up (producer id, connections, the consumer's first fetch) before measuring.
    if transactional:
        producer.begin_transaction()
    producer.produce(topic, b"warm-up", partition=0)
    if transactional:
        producer.commit_transaction(30)
    producer.flush(30)
    consumer.assign([TopicPartition(topic, 0, 1)])
    consumer.poll(0.5)
    samples: list[float] = []
    interval = 1 / rate
    start = time.perf_counter()
    counted = start + WARM_UP_S  # records sent from then on are measured
    next_send, end = start, start + WARM_UP_S + seconds

    def sample(msg: Message) -> None:
        if msg.error() is None and (sent := float(msg.value() or b"0")) >= counted:
            samples.append(time.perf_counter() - sent)

    if transactional:
        producer.begin_transaction()
    txn_end = start + TXN_INTERVAL_S
    while time.perf_counter() < end:
        now = time.perf_counter()
        if now >= next_send:
            producer.produce(topic, str(now).encode(), partition=0)
            producer.poll(0)
            next_send += interval
        if transactional and now >= txn_end:
            producer.commit_transaction(30)
            producer.begin_transaction()
            txn_end = time.perf_counter() + TXN_INTERVAL_S
        for msg in consumer.consume(100, 0):
            sample(msg)
    if transactional:
        producer.commit_transaction(30)
    producer.flush(10)
    drain_end = time.perf_counter() + 2
    while time.perf_counter() < drain_end:
        for msg in consumer.consume(100, 0.1):
            sample(msg)
    consumer.close()
    return sorted(samples)


def _pct(samples: list[float], q: float) -> float:
    return samples[min(len(samples) - 1, int(len(samples) * q))] * 1000 if samples else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    parser.add_argument("--rounds", type=int, default=2, help="produce runs of each kind")
    add_override_argument(parser, "transaction.partition.verification.enable=false")
    args = parser.parse_args()
    totals = {False: [0.0, 0.0, 0.0], True: [0.0, 0.0, 0.0]}  # records, seconds, broker CPU
    with broker_process(*args.override) as (bootstrap, pid):
        for r in range(args.rounds):
            for transactional in (False, True) if r % 2 == 0 else (True, False):
                measured = produce_rate(bootstrap, pid, transactional, args.seconds)
                total = totals[transactional]
                for i, part in enumerate(measured):
                    total[i] += part
        base = latency(bootstrap, False, args.seconds / 2)
        committed = latency(bootstrap, True, args.seconds / 2)
    (idem_n, idem_s, idem_c), (txn_n, txn_s, txn_c) = totals[False], totals[True]
    idem_rate, txn_rate = idem_n / idem_s, txn_n / txn_s
    mb = SIZE / 1e6
    idem_cpu, txn_cpu = idem_c / (idem_n * mb) * 100, txn_c / (txn_n * mb) * 100
    print(
        f"produce 1 KiB, acks=all, {PARTITIONS} partitions, {args.rounds} x {args.seconds:.0f} s"
        " each, alternating:"
    )
    print(
        f"  idempotent (baseline)        {idem_rate:9.0f} rec/s {idem_rate * mb:7.1f} MB/s "
        f"broker CPU {idem_cpu:5.2f} s/100 MB"
    )
    print(
        f"  transactional, 100 ms txns   {txn_rate:9.0f} rec/s {txn_rate * mb:7.1f} MB/s "
        f"broker CPU {txn_cpu:5.2f} s/100 MB   "
        f"{txn_rate / idem_rate:.0%} of idempotent (target >= 80%)"
    )
    print("end-to-end latency at 1,000 rec/s:")
    print(
        f"  read_uncommitted, idempotent (baseline)  p50 {_pct(base, 0.5):7.2f} ms  "
        f"p99 {_pct(base, 0.99):7.2f} ms  ({len(base)} samples)"
    )
    print(
        f"  read_committed, 100 ms transactions      p50 {_pct(committed, 0.5):7.2f} ms  "
        f"p99 {_pct(committed, 0.99):7.2f} ms  ({len(committed)} samples)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
