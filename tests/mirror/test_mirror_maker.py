"""`riverlog mirror-maker` (MirrorMaker 1) between two embedded brokers: records keep their
key, value, headers, timestamp and partition; the group's committed offsets cover exactly
what the target holds after a clean stop; a second run resumes; bad flags exit 2."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.cli.main import main
from riverlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer, ConsumerRecord
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.mirror import mm1
from riverlog.mirror.flow import SendFailed

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[EmbeddedBroker, EmbeddedBroker]]:
    with (
        broker(overrides={"broker.id": "1"}) as source,
        broker(overrides={"broker.id": "2"}) as target,
    ):
        yield source, target


async def read_all(bootstrap: str, topic: str, expected: int) -> list[ConsumerRecord]:
    """Every record of `topic` from the beginning, once `expected` arrived (the topic may
    not exist yet); the rest of a short poll after that too."""
    consumer = AsyncConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "none"})
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        async with asyncio.timeout(20):
            while topic not in await admin.list_topics():
                await asyncio.sleep(0.1)
        count = len((await admin.describe_topics([topic]))[0].partitions)
    consumer.assign([(topic, p) for p in range(count)])
    consumer.seek_to_beginning()
    records: list[ConsumerRecord] = []
    async with consumer:
        async with asyncio.timeout(20):
            while len(records) < expected:
                records += await consumer.poll(500)
        records += await consumer.poll(200)  # nothing more should come
    return records


async def test_records_keep_key_value_headers_timestamp_and_partition(
    clusters: tuple[EmbeddedBroker, EmbeddedBroker],
) -> None:
    source, target = clusters
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        await admin.create_topic("mm1-events", 3, 1)
    async with AsyncAdmin({"bootstrap.servers": target.bootstrap_servers}) as admin:
        await admin.create_topic("mm1-events", 3, 1)
    an_hour_ago = int(time.time() * 1000) - 3_600_000  # older ones would meet retention
    async with AsyncProducer({"bootstrap.servers": source.bootstrap_servers}) as producer:
        for i in range(300):
            await producer.send(
                "mm1-events",
                f"v{i}".encode(),
                key=None if i % 7 == 0 else f"k{i}".encode(),
                partition=i % 3,
                timestamp_ms=an_hour_ago + i,
                headers=[("h", f"{i}".encode()), ("empty", None)],
            )
        await producer.flush()
    options = mm1.MirrorMakerOptions(
        consumer={
            "bootstrap.servers": source.bootstrap_servers,
            "group.id": "mm1-a",
            "auto.offset.reset": "earliest",
        },
        producer={"bootstrap.servers": target.bootstrap_servers, "linger.ms": "1"},
        include="mm1-ev.*, other",
        num_streams=2,
        offset_commit_interval_ms=200,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(mm1.run(options, stop))
    mirrored = await read_all(target.bootstrap_servers, "mm1-events", 300)
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        async with asyncio.timeout(20):  # --num.streams 2: two members share the partitions
            while True:
                members = (await admin.describe_group("mm1-a")).members
                shared = sorted(p for m in members for p in m.assignment.get("mm1-events", []))
                if len(members) == 2 and shared == [0, 1, 2]:
                    break
                await asyncio.sleep(0.1)
    assert sorted(m.client_id for m in members) == ["mm1-a-0", "mm1-a-1"]
    stop.set()
    await task
    original = await read_all(source.bootstrap_servers, "mm1-events", 300)
    assert len(mirrored) == 300
    strip = lambda r: (r.partition, r.offset, r.key, r.value, r.timestamp, r.headers)  # noqa: E731
    assert sorted(map(strip, mirrored)) == sorted(map(strip, original))
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        committed = await admin.group_offsets("mm1-a")
    assert committed == {("mm1-events", p): 100 for p in range(3)}

    # A second run resumes from the group's offsets: only the new records are mirrored.
    async with AsyncProducer({"bootstrap.servers": source.bootstrap_servers}) as producer:
        for i in range(300, 330):
            await producer.send("mm1-events", f"v{i}".encode(), partition=i % 3)
    stop = asyncio.Event()
    task = asyncio.create_task(mm1.run(options, stop))
    mirrored = await read_all(target.bootstrap_servers, "mm1-events", 330)
    stop.set()
    await task
    assert len(mirrored) == 330


def test_bad_flags_and_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    consumer = tmp_path / "c.properties"
    producer = tmp_path / "p.properties"
    consumer.write_text("bootstrap.servers=127.0.0.1:1\n")  # no group.id
    producer.write_text("bootstrap.servers=127.0.0.1:1\nno.such.key=1\n")
    args = [
        "mirror-maker",
        "--consumer.config",
        str(consumer),
        "--producer.config",
        str(producer),
        "--whitelist",
        "x",
    ]
    assert main(args) == 2
    assert "group.id" in capsys.readouterr().err
    consumer.write_text("bootstrap.servers=127.0.0.1:1\ngroup.id=g\n")
    assert main(args) == 2
    assert "no.such.key" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(
            ["mirror-maker", "--consumer.config", str(consumer), "--producer.config", str(producer)]
        )


@pytest.mark.parametrize("abort", [True, False])
async def test_a_record_the_target_refuses(
    clusters: tuple[EmbeddedBroker, EmbeddedBroker], abort: bool
) -> None:
    """--abort.on.send.failure true: the mirror stops and commits nothing more; false: the
    record is skipped (logged, counted) and mirroring goes on, as in MM1."""
    source, target = clusters
    topic = f"mm1-refused-{abort}".lower()
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        await admin.create_topic(topic, 2, 1)
    async with AsyncAdmin({"bootstrap.servers": target.bootstrap_servers}) as admin:
        await admin.create_topic(topic, 2, 1, {"max.message.bytes": "2000"})
    async with AsyncProducer({"bootstrap.servers": source.bootstrap_servers}) as producer:
        await producer.send(topic, b"small", partition=0)
        await producer.send(topic, b"x" * 5000, partition=1)  # too big for the target
        await producer.send(topic, b"after", partition=0)
    group = f"mm1-refused-{abort}"
    options = mm1.MirrorMakerOptions(
        consumer={
            "bootstrap.servers": source.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
        },
        producer={"bootstrap.servers": target.bootstrap_servers, "linger.ms": "0"},
        include=topic,
        offset_commit_interval_ms=100,
        abort_on_send_failure=abort,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(mm1.run(options, stop))
    if abort:
        with pytest.raises(SendFailed):
            async with asyncio.timeout(20):
                await task
    else:
        values = [r.value for r in await read_all(target.bootstrap_servers, topic, 2)]
        assert values == [b"small", b"after"]
        stop.set()
        await task
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        committed = await admin.group_offsets(group)
    if abort:  # never past the refused record
        assert committed.get((topic, 1), 0) == 0
    else:
        assert committed == {(topic, 0): 2, (topic, 1): 1}


async def test_the_command_mirrors_until_sigterm_then_commits(
    clusters: tuple[EmbeddedBroker, EmbeddedBroker], tmp_path: Path
) -> None:
    """`riverlog mirror-maker` as a process: SIGTERM flushes, commits and exits 0."""
    source, target = clusters
    topic = "mm1-process"
    for b in (source, target):
        async with AsyncAdmin({"bootstrap.servers": b.bootstrap_servers}) as admin:
            await admin.create_topic(topic, 2, 1)
    async with AsyncProducer({"bootstrap.servers": source.bootstrap_servers}) as producer:
        for i in range(50):
            await producer.send(topic, f"r{i}".encode(), partition=i % 2)
    consumer = tmp_path / "consumer.properties"
    consumer.write_text(
        f"bootstrap.servers={source.bootstrap_servers}\ngroup.id=mm1-process\n"
        "auto.offset.reset=earliest\n"
        "key.deserializer=org.apache.kafka.common.serialization.ByteArrayDeserializer\n"
    )
    producer_file = tmp_path / "producer.properties"
    producer_file.write_text(f"bootstrap.servers={target.bootstrap_servers}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "riverlog",
        "mirror-maker",
        "--consumer.config",
        str(consumer),
        "--producer.config",
        str(producer_file),
        "--whitelist",
        topic,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert len(await read_all(target.bootstrap_servers, topic, 50)) == 50
    finally:
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    async with AsyncAdmin({"bootstrap.servers": source.bootstrap_servers}) as admin:
        assert await admin.group_offsets("mm1-process") == {(topic, 0): 25, (topic, 1): 25}
