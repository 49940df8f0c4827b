"""The reference pipeline (examples/activity_stream) end to end on local[2] against a broker
process: the streaming job is killed after a micro-batch committed and before the next one
finished, restarted from its checkpoints, and its output must hold every event's contribution
exactly once; the load job run twice gives identical output."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from riverlog.client import Consumer
from tests.integration.conftest import BrokerProcess
from tests.spark_harness import spark_env

EXAMPLE = Path(__file__).parents[2] / "examples" / "activity_stream"
sys.path.insert(0, str(EXAMPLE))

from events import CLOSING_USER, COUNTS, PAGE_VIEWS, closing_event, generate  # noqa: E402
from generator import ensure_topics, produce, recent_start_ms  # noqa: E402
from jobs import committed_parquet_files, load_range  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
EVENTS = 6000
PER_TRIGGER = 1500


def streaming_job(bootstrap: str, work: Path, *extra: str) -> subprocess.Popen[bytes]:
    log = open(work / "streaming.log", "ab")  # noqa: SIM115
    return subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE / "streaming_job.py"),
            "--bootstrap-server",
            bootstrap,
            "--output",
            str(work / "out"),
            "--checkpoints",
            str(work / "ck"),
            "--max-offsets-per-trigger",
            str(PER_TRIGGER),
            "--master",
            "local[2]",
            *extra,
        ],
        env=spark_env(),
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the job's process group: its Python driver, JVM and Python workers."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def diagnostics(work: Path, done_before_kill: list[int]) -> str:
    """What a failure needs: the batches' offsets, what ran before the kill, the job's log."""
    folder = work / "ck" / "pageview_counts" / "offsets"
    batches = [
        f"{p.name}: {p.read_text().splitlines()[-1]}"
        for p in sorted(folder.iterdir())
        if p.name.isdigit()
    ]
    log = (work / "streaming.log").read_text()[-4000:]
    return f"committed before the kill: {done_before_kill}\n" + "\n".join(batches) + "\n" + log


def commits(work: Path) -> list[int]:
    folder = work / "ck" / "pageview_counts" / "commits"
    return sorted(int(p.name) for p in folder.glob("[0-9]*")) if folder.exists() else []


def test_killed_streaming_job_resumes_exactly_once_and_load_job_is_idempotent(
    spark: Any, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap_servers
    start = recent_start_ms()
    events = list(generate(EVENTS, start))
    ensure_topics(bootstrap)
    produce(bootstrap, [*events, closing_event(max(e.ts for e in events))])

    job = streaming_job(bootstrap, tmp_path, "--continuous")
    try:
        deadline = time.monotonic() + 240
        while 1 not in commits(tmp_path):
            assert job.poll() is None, (tmp_path / "streaming.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no micro-batch committed in time"
            time.sleep(0.1)
    finally:
        kill_group(job)
    done_before_kill = commits(tmp_path)
    assert len(done_before_kill) < EVENTS // PER_TRIGGER, "the job finished before the kill"

    for attempt in range(3):  # Spark's helpers may time out at start on a loaded machine
        job = streaming_job(bootstrap, tmp_path)
        try:
            if job.wait(timeout=600) == 0:
                break
        finally:
            if job.poll() is None:
                kill_group(job)
        assert attempt < 2, (tmp_path / "streaming.log").read_text()[-3000:]

    want: collections.Counter[int] = collections.Counter(
        e.ts // 60_000 * 60 for e in events if e.topic == PAGE_VIEWS
    )
    got: dict[int, int] = {}
    for f in committed_parquet_files(tmp_path / "out" / "pageview_counts"):
        table = pq.read_table(f, columns=["minute", "page_views"])
        for minute, views in zip(*(table[c].to_pylist() for c in table.column_names), strict=True):
            assert int(minute.timestamp()) not in got, f"minute {minute} written twice"
            got[int(minute.timestamp())] = views
    assert got == dict(want), diagnostics(tmp_path, done_before_kill)

    per_user: collections.Counter[str] = collections.Counter()
    for f in committed_parquet_files(tmp_path / "out" / "sessions"):
        table = pq.read_table(f, columns=["user_id", "page_views", "clicks"]).to_pylist()
        for row in table:
            per_user[row["user_id"]] += row["page_views"] + row["clicks"]
    assert CLOSING_USER not in per_user
    assert per_user == collections.Counter(e.user_id for e in events)

    latest: dict[int, int] = {}
    with Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": "false"}) as consumer:
        consumer.assign([(COUNTS, 0)])
        consumer.seek_to_beginning()
        for _ in range(5):
            for r in consumer.poll(1000):
                body = json.loads(r.value or b"{}")
                latest[body["minute"]] = body["page_views"]
    assert latest == dict(want)

    hour = start  # the events cover most of their first hour
    loaded = tmp_path / "loaded"
    first_count = load_range(spark, bootstrap, hour, hour + 3_600_000, loaded)
    first = sorted(tuple(r) for r in spark.read.parquet(str(loaded)).collect())
    second_count = load_range(spark, bootstrap, hour, hour + 3_600_000, loaded)
    second = sorted(tuple(r) for r in spark.read.parquet(str(loaded)).collect())
    assert first_count == second_count == len(first) > 0
    assert first_count == sum(1 for e in events if hour <= e.ts < hour + 3_600_000)
    assert first == second
