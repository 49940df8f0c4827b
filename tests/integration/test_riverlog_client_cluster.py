"""riverlog's client on a three-broker cluster: a leader killed mid-produce (issue 8).

The idempotent producer keeps writing 0, 1, 2, ... to each partition while the leader of one
partition is SIGKILLed and later restarted: every record must be acknowledged (retries
succeed), and reading back with riverlog's consumer must show each partition's values
exactly once and in order (idempotence: a retried batch that had been written is not
written again).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from riverlog.client import AsyncConsumer, AsyncProducer
from tests.cluster_harness import Cluster, create_topic, isr_full, partitions_of, wait_until

pytestmark = pytest.mark.timeout(240)


async def test_a_leader_killed_mid_produce_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    topic = create_topic(cluster, partitions=3, **{"min.insync.replicas": "2"})
    wait_until(lambda: isr_full(cluster, topic), 60, "a full ISR")
    acked: dict[int, list[int]] = {0: [], 1: [], 2: []}
    errors: list[BaseException] = []
    stop = asyncio.Event()

    async def produce() -> None:
        config = {
            "bootstrap.servers": cluster.bootstrap_servers,
            "linger.ms": 5,
            "retry.backoff.ms": 200,
            "request.timeout.ms": 5000,
        }
        async with AsyncProducer(config) as producer:
            n = 0
            while not stop.is_set():
                partition = n % 3
                future = await producer.send(topic, str(n).encode(), partition=partition)
                future.add_done_callback(
                    lambda f, p=partition, v=n: (
                        errors.append(f.exception())  # type: ignore[misc]
                        if f.exception()
                        else acked[p].append(v)
                    )
                )
                n += 1
                if n % 50 == 0:
                    await asyncio.sleep(0.01)
            await producer.flush(90)

    loop = asyncio.get_running_loop()
    task = loop.create_task(produce())

    async def progress(at_least: int) -> None:
        deadline = time.monotonic() + 60
        while sum(map(len, acked.values())) < at_least:
            assert time.monotonic() < deadline and not task.done(), "no progress"
            await asyncio.sleep(0.05)

    await progress(2000)
    victim = partitions_of(cluster, topic)[0][0]
    await loop.run_in_executor(None, cluster.brokers[victim].kill)
    await progress(sum(map(len, acked.values())) + 3000)
    await loop.run_in_executor(None, cluster.brokers[victim].start)
    await progress(sum(map(len, acked.values())) + 2000)
    stop.set()
    await task
    assert errors == []

    consumer = AsyncConsumer({"bootstrap.servers": cluster.bootstrap_servers})
    consumer.assign((topic, p) for p in range(3))
    consumer.seek_to_beginning()
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}
    total = sum(map(len, acked.values()))
    async with consumer:
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < total and time.monotonic() < deadline:
            for r in await consumer.poll(500):
                got[r.partition].append(int(r.value or b"-1"))
    for p in range(3):
        assert got[p] == sorted(acked[p]), f"partition {p}: lost, duplicated or reordered"
