"""riverlog's own client against a broker process, next to confluent-kafka (issue 8).

Round trips with every codec (records and Arrow), murmur2 placement identical to librdkafka's
both ways, a riverlog consumer and a confluent-kafka consumer sharing one group, commits
resumed by the next member, the blocking facade and the admin client.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer

from riverlog.client import Admin, AsyncAdmin, AsyncConsumer, AsyncProducer, Consumer, Producer
from riverlog.client.admin import TOPIC
from riverlog.client.partitioner import key_partition
from riverlog.protocol.error_codes import KafkaError
from tests.integration.conftest import BrokerProcess, start_broker

pytestmark = pytest.mark.timeout(120)
OVERRIDES = (
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=1000",
    "num.partitions=1",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    running = start_broker(tmp_path_factory.mktemp("client") / "data", *OVERRIDES)
    try:
        yield running
    finally:
        running.stop()


async def new_topic(bootstrap: str, partitions: int, **configs: str) -> str:
    name = f"c-{uuid.uuid4().hex[:8]}"
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        await admin.create_topic(name, partitions, 1, configs)
    return name


async def read_all(
    bootstrap: str, topic: str, partitions: int, count: int, timeout_s: float = 20
) -> list:  # type: ignore[type-arg]
    consumer = AsyncConsumer({"bootstrap.servers": bootstrap})
    consumer.assign((topic, p) for p in range(partitions))
    consumer.seek_to_beginning()
    out: list = []  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout_s
    async with consumer:
        while len(out) < count and time.monotonic() < deadline:
            out += await consumer.poll(500)
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_round_trip_with_every_codec(broker: BrokerProcess, codec: str) -> None:
    bs = broker.bootstrap_servers
    topic = await new_topic(bs, 3)
    sent = []
    # Recent timestamps: records older than log.retention.ms would be deleted under the test.
    base = int(time.time() * 1000) - 10_000
    async with AsyncProducer(
        {"bootstrap.servers": bs, "compression.type": codec, "linger.ms": 20}
    ) as producer:
        futures = []
        for i in range(3000):
            key = None if i % 7 == 0 else f"k{i % 50}".encode()
            headers = [("n", str(i).encode()), ("none", None)] if i % 5 == 0 else None
            futures.append(
                await producer.send(
                    topic,
                    f"v{i}".encode() * (i % 9),
                    key,
                    headers=headers,
                    timestamp_ms=base + i,
                )
            )
            sent.append((key, f"v{i}".encode() * (i % 9), headers or [], base + i))
        metadata = await asyncio.gather(*futures)
    assert len({(m.partition, m.offset) for m in metadata}) == 3000
    got = await read_all(bs, topic, 3, 3000)
    by_position = {(r.partition, r.offset): r for r in got}
    assert len(by_position) == 3000
    for (key, value, headers, ts), m in zip(sent, metadata, strict=True):
        r = by_position[(m.partition, m.offset)]
        assert (r.key, r.value, r.headers, r.timestamp) == (key, value, list(headers), ts)
        if key is not None:
            assert m.partition == key_partition(key, 3)

    consumer = AsyncConsumer({"bootstrap.servers": bs})
    consumer.assign((topic, p) for p in range(3))
    consumer.seek_to_beginning()
    rows = 0
    async with consumer:
        deadline = time.monotonic() + 20
        while rows < 3000 and time.monotonic() < deadline:
            table = await consumer.poll_arrow(500)
            rows += table.num_rows
            for row in table.slice(0, min(5, table.num_rows)).to_pylist():
                r = by_position[(row["partition"], row["offset"])]
                assert (row["key"], row["value"], row["topic"]) == (r.key, r.value, topic)
    assert rows == 3000


async def test_keys_land_where_librdkafka_puts_them_and_back(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    theirs, ours = await new_topic(bs, 7), await new_topic(bs, 7)
    keys = [f"user-{i}".encode() for i in range(300)] + [b"", b"\x00\xff" * 9]
    ck = CKProducer({"bootstrap.servers": bs, "partitioner": "murmur2_random"})
    for k in keys:
        ck.produce(theirs, k, key=k)
    assert ck.flush(20) == 0
    async with AsyncProducer({"bootstrap.servers": bs}) as producer:
        for k in keys:
            await producer.send(ours, k, key=k)
    blocking = await new_topic(bs, 7)
    with Producer({"bootstrap.servers": bs}) as blocking_producer:  # its own path for keys
        for k in keys:
            blocking_producer.send(blocking, k, k)
    placed_by_them = {r.key: r.partition for r in await read_all(bs, theirs, 7, len(keys))}
    placed_by_us = {r.key: r.partition for r in await read_all(bs, ours, 7, len(keys))}
    assert placed_by_them == placed_by_us
    assert {r.key: r.partition for r in await read_all(bs, blocking, 7, len(keys))} == placed_by_us
    assert len(set(placed_by_us.values())) == 7


async def test_a_riverlog_and_a_confluent_consumer_share_one_group(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    topic = await new_topic(bs, 6)
    group = f"g-{uuid.uuid4().hex[:6]}"
    ck = CKConsumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    ck.subscribe([topic])
    ours = AsyncConsumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    ours.subscribe([topic])
    theirs_got: dict[int, list[int]] = {}
    ours_got: dict[int, list[int]] = {}
    loop = asyncio.get_running_loop()

    async def consume_both() -> tuple[set[int], set[int]]:
        for msg in await loop.run_in_executor(None, ck.consume, 100, 0.1):
            if msg.error() is None:
                theirs_got.setdefault(msg.partition(), []).append(int(msg.value()))
        for r in await ours.poll(100):
            ours_got.setdefault(r.partition, []).append(int(r.value))
        return {tp.partition for tp in ck.assignment()}, {p for _, p in ours.assignment()}

    try:
        deadline = time.monotonic() + 40
        while True:  # until the group has settled with both members
            theirs, mine = await consume_both()
            if theirs | mine == set(range(6)) and not theirs & mine and theirs and mine:
                break
            assert time.monotonic() < deadline, f"group never settled: {theirs} {mine}"
        async with AsyncProducer({"bootstrap.servers": bs}) as producer:
            for i in range(600):
                await producer.send(topic, str(i).encode(), partition=i % 6)
        while sum(map(len, theirs_got.values())) + sum(map(len, ours_got.values())) < 600:
            assert await consume_both() == (theirs, mine), "the group rebalanced"
            assert time.monotonic() < deadline, "records missing"
        assert len(theirs) == len(mine) == 3  # range: 3 and 3
        for p in mine:
            assert ours_got[p] == list(range(p, 600, 6))
        for p in theirs:
            assert theirs_got[p] == list(range(p, 600, 6))
    finally:
        await loop.run_in_executor(None, ck.close)
        await ours.close()


async def test_commits_resume_in_the_next_member_and_rebalance_callbacks_run(
    broker: BrokerProcess,
) -> None:
    bs = broker.bootstrap_servers
    topic = await new_topic(bs, 4)
    group = f"g-{uuid.uuid4().hex[:6]}"
    async with AsyncProducer({"bootstrap.servers": bs}) as producer:
        for i in range(400):
            await producer.send(topic, str(i).encode(), partition=i % 4)
    config = {
        "bootstrap.servers": bs,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": "cooperative-sticky",
        "max.poll.records": 50,
    }
    events: list[tuple[str, set[tuple[str, int]]]] = []
    first = AsyncConsumer(config)
    first.subscribe(
        [topic],
        on_assign=lambda ps: events.append(("assigned", ps)),
        on_revoke=lambda ps: events.append(("revoked", ps)),
    )
    got: list[int] = []
    async with first:
        while len(got) < 200:
            got += [int(r.value) for r in await first.poll(500)]
        # Commit exactly what was handed out: the positions after the last record per partition.
        positions = {tp: await first.position(tp) for tp in first.assignment()}
        await first.commit()
        assert await first.committed(list(positions)) == positions
    assert events[0] == ("assigned", {(topic, p) for p in range(4)})
    assert events[-1] == ("revoked", {(topic, p) for p in range(4)})
    second = AsyncConsumer(config)
    second.subscribe([topic])
    rest: list[int] = []
    async with second:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(got) + len(rest) < 400:
            rest += [int(r.value) for r in await second.poll(500)]
    assert sorted(got + rest) == list(range(400))  # nothing twice, nothing skipped


def test_the_blocking_facade(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    topic = f"b-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_topic(topic, 2, 1, {"retention.ms": "3600000"})
        assert topic in admin.list_topics()
        admin.alter_configs(TOPIC, topic, set={"retention.ms": "7200000"})
        assert admin.describe_configs(TOPIC, topic)["retention.ms"] == "7200000"
        with pytest.raises(KafkaError, match="already exists"):
            admin.create_topic(topic, 2, 1)
    delivered: list[tuple[int, int]] = []
    with Producer({"bootstrap.servers": bs, "linger.ms": 1}) as producer:
        for i in range(5000):
            producer.send(
                topic,
                str(i).encode(),
                partition=i % 2,
                on_delivery=lambda e, m: delivered.append((m.partition, m.offset)),
            )
        producer.flush(30)
        assert sorted(delivered) == [(p, i) for p in (0, 1) for i in range(2500)]
        producer.send(topic, b"x", partition=7)  # no such partition, and no callback:
        with pytest.raises(KafkaError, match="Partition 7"):
            producer.flush(30)  # the failure is raised here
    with Consumer(
        {"bootstrap.servers": bs, "group.id": "blocking", "auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.subscribe([topic])
        values: list[int] = []
        deadline = time.monotonic() + 20
        while len(values) < 5000 and time.monotonic() < deadline:
            values += [int(r.value) for r in consumer.poll(500)]
    assert sorted(values) == list(range(5000))
    with Admin({"bootstrap.servers": bs}) as admin:
        assert admin.group_offsets("blocking") == {(topic, 0): 2500, (topic, 1): 2500}
        low = admin.delete_records({(topic, 0): 1000})
        assert low == {(topic, 0): 1000}
        assert "blocking" in {g.group_id for g in admin.list_groups()}
        admin.reset_group_offsets("blocking", {(topic, 0): 1000, (topic, 1): 0})
        assert admin.group_offsets("blocking") == {(topic, 0): 1000, (topic, 1): 0}
        admin.delete_group("blocking")
        admin.delete_topic(topic)


async def test_the_blocking_producer_keeps_each_partitions_order(broker: BrokerProcess) -> None:
    """The facade adds plain keyed records in runs per partition; records of other kinds
    (headers, a timestamp) queued between them must neither pass them nor be passed."""
    bs = broker.bootstrap_servers
    topic = await new_topic(bs, 3)
    now = int(time.time() * 1000)
    with Producer({"bootstrap.servers": bs, "linger.ms": 5}) as producer:
        for i in range(20_000):
            key, value = f"k{i % 7}".encode(), str(i).encode()
            if i % 11 == 0:
                producer.send(topic, value, key, headers=[("n", b"1")])
            elif i % 13 == 0:
                producer.send(topic, value, key, timestamp_ms=now)
            else:
                producer.send(topic, value, key)
    by_key: dict[bytes, list[int]] = {}
    for r in await read_all(bs, topic, 3, 20_000):  # each partition in offset order
        by_key.setdefault(r.key, []).append(int(r.value))
    assert sum(map(len, by_key.values())) == 20_000
    assert all(sent == sorted(sent) for sent in by_key.values())


async def test_a_silent_broker_fails_admin_calls_in_time(tmp_path: Path) -> None:
    """A frozen broker (SIGSTOP) answers nothing: admin calls — through the group coordinator
    or straight to a broker — fail with a ConnectionError once `request.timeout.ms` passes,
    instead of waiting forever, and work again on a new connection once it answers."""
    frozen = start_broker(tmp_path / "data", *OVERRIDES)
    pid = frozen.proc.pid
    try:
        async with AsyncAdmin(
            {"bootstrap.servers": frozen.bootstrap_servers, "request.timeout.ms": 1000}
        ) as admin:
            deadline = time.monotonic() + 60
            while True:  # the coordinator known and connected: the first FindCoordinator
                try:  # creates __consumer_offsets, which can take over 1 s on a loaded machine
                    await admin.describe_group("g")
                    break
                except ConnectionError:
                    if time.monotonic() > deadline:
                        raise
            calls = (lambda: admin.group_offsets("g"), lambda: admin.describe_topics())
            for call in calls:
                os.kill(pid, signal.SIGSTOP)
                started = time.monotonic()
                with pytest.raises(ConnectionError, match="within 1 s"):
                    await call()
                assert time.monotonic() - started < 10
                os.kill(pid, signal.SIGCONT)
                await call()
    finally:
        os.kill(pid, signal.SIGCONT)
        frozen.stop()


async def test_a_pattern_subscription_picks_up_new_topics(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    prefix = f"p{uuid.uuid4().hex[:6]}"
    first = await new_topic_named(bs, f"{prefix}-a")
    consumer = AsyncConsumer(
        {
            "bootstrap.servers": bs,
            "group.id": prefix,
            "auto.offset.reset": "earliest",
            "metadata.max.age.ms": 500,
        }
    )
    consumer.subscribe(pattern=f"{prefix}-.*")
    async with consumer, AsyncProducer({"bootstrap.servers": bs}) as producer:
        await producer.send_and_wait(first, b"1")
        got: list[tuple[str, bytes | None]] = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got += [(r.topic, r.value) for r in await consumer.poll(300)]
        second = await new_topic_named(bs, f"{prefix}-b")
        await producer.send_and_wait(second, b"2")
        await producer.send_and_wait(f"other-{prefix}", b"not matched")
        while len(got) < 2 and time.monotonic() < deadline:
            got += [(r.topic, r.value) for r in await consumer.poll(300)]
        assert got == [(first, b"1"), (second, b"2")]
        assert consumer.assignment() == {(first, 0), (second, 0)}


async def test_seek_by_timestamp_and_pause(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    topic = await new_topic(bs, 2)
    base = int(time.time() * 1000) - 10_000  # recent: older records may be retention's
    async with AsyncProducer({"bootstrap.servers": bs}) as producer:
        for i in range(100):
            await producer.send(topic, str(i).encode(), partition=i % 2, timestamp_ms=base + i)
    consumer = AsyncConsumer({"bootstrap.servers": bs})
    consumer.assign([(topic, 0), (topic, 1)])
    async with consumer:
        await consumer.seek_to_timestamp(base + 50)
        assert await consumer.position((topic, 0)) == 25
        consumer.pause([(topic, 1)])
        values: list[int] = []
        deadline = time.monotonic() + 10
        while len(values) < 25 and time.monotonic() < deadline:
            values += [int(r.value or b"") for r in await consumer.poll(200)]
        assert values == list(range(50, 100, 2))  # only the unpaused partition
        consumer.resume([(topic, 1)])
        while len(values) < 50 and time.monotonic() < deadline:
            values += [int(r.value or b"") for r in await consumer.poll(200)]
        assert sorted(values[25:]) == list(range(51, 100, 2))


@pytest.mark.parametrize("group", [False, True])
async def test_a_seek_while_the_position_is_looked_up_wins(
    broker: BrokerProcess, group: bool
) -> None:
    """A seek made while the consumer still looks up where a new partition starts (the
    group's committed offset, then auto.offset.reset) is where it reads from. The exactly-once
    mirror seeks to its stored offset from its on_assign listener while a poll looks the
    position up; the lookup's answer used to overwrite the seek — or, taking the sought
    offset for a timestamp, find 0 — and the mirror copied the partition again from 0
    (CI on 6862eb8: "partition 0: exactly-once copy differs")."""
    bs = broker.bootstrap_servers
    topic = await new_topic(bs, 1)
    async with AsyncProducer({"bootstrap.servers": bs}) as producer:
        for i in range(10):
            await producer.send(topic, str(i).encode())
    config = {"bootstrap.servers": bs, "auto.offset.reset": "earliest"}
    if group:  # nothing committed: the lookup asks the group, then resets to earliest
        config["group.id"] = f"g-{uuid.uuid4().hex[:8]}"
    consumer = AsyncConsumer(config)
    consumer.assign([(topic, 0)])
    async with consumer:
        looking_up = asyncio.ensure_future(consumer.position((topic, 0)))
        await asyncio.sleep(0)  # the lookup's first request is on its way
        assert not looking_up.done()
        consumer.seek((topic, 0), 7)
        assert await looking_up == 7
        assert await consumer.position((topic, 0)) == 7
        async with asyncio.timeout(20):
            while not (records := await consumer.poll(500)):
                pass
        assert records[0].value == b"7"


async def test_a_partition_unassigned_while_its_position_is_looked_up_stays_out(
    broker: BrokerProcess,
) -> None:
    topic = await new_topic(broker.bootstrap_servers, 1)
    consumer = AsyncConsumer({"bootstrap.servers": broker.bootstrap_servers})
    consumer.assign([(topic, 0)])
    async with consumer:
        polling = asyncio.ensure_future(consumer.poll(0))  # looks the position up first
        await asyncio.sleep(0)
        assert not polling.done()
        consumer.assign([])
        assert await polling == []
        assert consumer.assignment() == set()


async def new_topic_named(bootstrap: str, name: str) -> str:
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        await admin.create_topic(name, 1, 1)
    return name


async def test_current_lag_counts_from_the_position_to_the_end(broker: BrokerProcess) -> None:
    topic = await new_topic(broker.bootstrap_servers, 1)
    async with AsyncProducer({"bootstrap.servers": broker.bootstrap_servers}) as producer:
        for i in range(100):
            await producer.send(topic, f"{i}".encode())
    consumer = AsyncConsumer(
        {"bootstrap.servers": broker.bootstrap_servers, "max.poll.records": 10}
    )
    consumer.assign([(topic, 0)])
    consumer.seek_to_beginning()
    async with consumer:
        assert consumer.current_lag((topic, 0)) is None  # no fetch answered yet
        taken = []
        async with asyncio.timeout(20):
            while not taken:
                taken = await consumer.poll(500)
        assert len(taken) == 10
        assert consumer.current_lag((topic, 0)) == 90
        async with asyncio.timeout(20):
            while len(taken) < 100:
                taken += await consumer.poll(500)
        assert consumer.current_lag((topic, 0)) == 0
