"""The exactly-once Spark sink (`deliveryGuarantee=exactly-once`) against a real broker.

First its two-phase commit without Spark (the task and driver functions themselves, against
an embedded broker, fast): a replay of an undecided batch fences and aborts the earlier
run's transactions; a driver that died after the decision and part of the commits is
finished by the replay, and repeating the commit is harmless; a transaction its
coordinator aborted after the decision stops the query instead of vanishing. Then the whole
thing on local Spark: the streaming query is SIGKILLed between a task's write and the
driver's commit, restarted from its checkpoint, and read_committed sees every input record
exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from riverlog.client import Admin, Producer
from riverlog.client.sync import run_blocking
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.spark import exactly_once as eo
from riverlog.spark.options import parse_sink
from tests.integration.conftest import BrokerProcess
from tests.spark_harness import spark_env

DEADLINE_S = 20


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    overrides = {
        "transaction.state.log.num.partitions": "3",
        "offsets.topic.num.partitions": "3",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    }
    with broker(overrides=overrides) as running:
        assert isinstance(running, EmbeddedBroker)
        yield running.bootstrap_servers


def _topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"eos-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(name, partitions)
    return name


def _read(bootstrap: str, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    """Every value up to the end a consumer of `isolation` may read (LSO or high watermark)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
    )
    tps = [KTopicPartition(topic, p) for p in range(partitions)]
    got: list[bytes] = []
    try:
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        consumer.seek_to_beginning()
        deadline = time.monotonic() + DEADLINE_S
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "the consumer did not reach the end"
            for records in consumer.poll(timeout_ms=100).values():
                got += [r.value for r in records]
    finally:
        consumer.close()
    return got


def _rows(topic: str, partition: int, values: list[bytes]) -> list[list[eo.Row]]:
    return [[(topic, v, None, partition, None) for v in values]]


def test_a_replay_of_an_undecided_batch_fences_the_earlier_run(bootstrap: str) -> None:
    out = _topic(bootstrap)
    options = parse_sink({"kafka.bootstrap.servers": bootstrap, "topic": out})
    values = [b"a", b"b", b"c"]
    first = eo.write_task(options, _rows(out, 0, values), "q1", 0, 0)
    assert first.handle is not None and first.records == 3
    assert _read(bootstrap, out, "read_committed") == []  # prepared, not committed
    # The query died before the driver's commit; its replay writes the batch again.
    replay = eo.write_task(options, _rows(out, 0, values), "q1", 0, 0)
    assert replay.handle is not None
    assert replay.handle.producer_epoch > first.handle.producer_epoch
    run_blocking(eo.commit_batch(options, [replay], 0, "q1"))
    assert _read(bootstrap, out, "read_committed") == values
    assert sorted(_read(bootstrap, out, "read_uncommitted")) == sorted(values * 2)
    with pytest.raises(eo.TransactionLostError):  # the zombie's transaction is gone
        run_blocking(eo.commit_batch(options, [first], 1, "q1"))


def test_a_decided_batch_is_finished_by_its_replay_and_commits_are_idempotent(
    bootstrap: str,
) -> None:
    out = _topic(bootstrap)
    options = parse_sink({"kafka.bootstrap.servers": bootstrap, "topic": out})
    parts = {0: [b"x0", b"x1"], 1: [b"y0"]}
    prepared = [eo.write_task(options, _rows(out, p, v), "q2", 4, p) for p, v in parts.items()]
    handles = [p.handle for p in prepared]
    assert all(handles)
    # The driver decides batch 4, commits task 0's transaction and dies.
    run_blocking(eo._record_decision(options, "q2", 4, {out}, {0, 1}))
    assert handles[0] is not None
    run_blocking(eo.end(options, handles[0]))
    assert _read(bootstrap, out, "read_committed") == parts[0]  # task 1's is still open
    # The restarted query replays batch 4: its tasks write nothing and finish the commit.
    replayed = [eo.write_task(options, _rows(out, p, v), "q2", 4, p) for p, v in parts.items()]
    assert all(r.skipped and r.handle is None for r in replayed)
    run_blocking(eo.commit_batch(options, replayed, 4, "q2"))
    run_blocking(eo.commit_batch(options, prepared, 4, "q2"))  # a repeated commit: no-op
    for handle in handles:  # EndTxn repeated on a completed commit is answered NONE
        assert handle is not None
        run_blocking(eo.end(options, handle))
    assert sorted(_read(bootstrap, out, "read_committed")) == sorted(parts[0] + parts[1])
    assert run_blocking(eo.decision(options, "q2")) == (5, {0, 1})


def test_an_aborted_transaction_of_a_decided_batch_stops_the_query(bootstrap: str) -> None:
    out = _topic(bootstrap)
    options = parse_sink(
        {"kafka.bootstrap.servers": bootstrap, "topic": out, "kafka.transaction.timeout.ms": "500"}
    )
    prepared = eo.write_task(options, _rows(out, 0, [b"late"]), "q3", 0, 0)
    deadline = time.monotonic() + DEADLINE_S
    while _state(bootstrap, eo.transactional_id(options, "q3", 0)) != "CompleteAbort":
        assert time.monotonic() < deadline, "the coordinator did not abort the transaction"
        time.sleep(0.1)
    with pytest.raises(eo.TransactionLostError, match=r"transaction\.timeout\.ms"):
        run_blocking(eo.commit_batch(options, [prepared], 0, "q3"))
    with pytest.raises(eo.TransactionLostError, match="aborted by its coordinator"):
        eo.write_task(options, _rows(out, 0, [b"late"]), "q3", 0, 0)
    assert _read(bootstrap, out, "read_committed") == []


def _state(bootstrap: str, txn_id: str) -> str:
    from riverlog.client.admin import AsyncAdmin
    from riverlog.client.transactions_admin import TransactionsAdmin

    async def ask() -> str:
        admin = AsyncAdmin({"bootstrap.servers": bootstrap})
        try:
            return (await TransactionsAdmin(admin.cluster).describe_transaction(txn_id)).state
        finally:
            await admin.close()

    return run_blocking(ask())


# -- the whole thing on Spark ----------------------------------------------------------------


JOB = Path(__file__).parent / "spark_eos_job.py"
PER_PARTITION = 200


def _job(bootstrap: str, work: Path, inp: str, out: str) -> subprocess.Popen[bytes]:
    log = open(work / "job.log", "ab")  # noqa: SIM115
    return subprocess.Popen(
        [
            *(sys.executable, str(JOB), "--bootstrap", bootstrap, "--input", inp),
            *("--output", out, "--checkpoint", str(work / "ck"), "--gate", str(work / "gate")),
            *("--prefix", f"eos-{out}-"),
        ],
        env=spark_env(),
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def _end_offsets(bootstrap: str, topic: str, isolation: str) -> list[int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    try:
        ends = consumer.end_offsets([KTopicPartition(topic, p) for p in range(2)])
        return [ends[KTopicPartition(topic, p)] for p in range(2)]
    finally:
        consumer.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_killed_between_write_and_commit_restarts_exactly_once(
    broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap_servers
    inp, out = _topic(bootstrap), _topic(bootstrap)
    sent = {f"{p}-{i}".encode() for p in range(2) for i in range(PER_PARTITION)}
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for value in sorted(sent):
            producer.send(inp, value, partition=int(value[:1]))
    log = tmp_path / "job.log"

    job = _job(bootstrap, tmp_path, inp, out)
    try:  # task 0 has written all its records in its open transaction; task 1 waits
        deadline = time.monotonic() + 300
        while _end_offsets(bootstrap, out, "read_uncommitted")[0] < PER_PARTITION:
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "task 0 did not write in time"
            time.sleep(0.2)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)  # the driver, its JVM and Python workers
        job.wait(timeout=30)
    assert _end_offsets(bootstrap, out, "read_committed") == [0, 0]

    (tmp_path / "gate").touch()
    for attempt in range(3):  # Spark's helpers may time out at start on a loaded machine
        job = _job(bootstrap, tmp_path, inp, out)
        try:
            if job.wait(timeout=600) == 0:
                break
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
        assert attempt < 2, log.read_text()[-3000:]

    got = _read(bootstrap, out, "read_committed")
    assert len(got) == len(sent) and set(got) == sent, log.read_text()[-3000:]
    written = _read(bootstrap, out, "read_uncommitted")  # the killed run's writes are there,
    assert len(written) == len(sent) + PER_PARTITION  # aborted
