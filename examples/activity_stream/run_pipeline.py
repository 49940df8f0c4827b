"""The reference pipeline end to end — the main job of `./dev run`.

1. An embedded riverlog broker (in this process, no ZooKeeper) in a fresh data directory.
2. The generator produces page views and clicks (JSON keyed by user id) to `page_views` and
   `clicks`, plus the closing event.
3. The streaming job runs on Spark (local[*]) in micro-batches of at most
   `--max-offsets-per-trigger` records: per-minute page-view counts and per-user sessions to
   Parquet partitioned by date/hour, the counts back to the `pageview_counts` topic.
4. Checks: the Parquet counts, the counts read back from the topic with riverlog's client,
   and counts computed directly from the generated events are the same.
5. The load job re-loads one hour of events into Parquet, twice: the same rows both times.

    python run_pipeline.py [--events 20000] [--workdir DIR] [--master local[*]]
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from events import COUNTS, PAGE_VIEWS, Event, closing_event, generate
from generator import ensure_topics, produce, recent_start_ms
from jobs import committed_parquet_files, load_range, spark_session, start_streaming

from riverlog.client import Consumer
from riverlog.embedded import broker


def expected_counts(events: list[Event]) -> dict[int, int]:
    """Page views per minute (epoch seconds of the minute), straight from the events."""
    counts: collections.Counter[int] = collections.Counter()
    for e in events:
        if e.topic == PAGE_VIEWS:
            counts[e.ts // 60_000 * 60] += 1
    return dict(counts)


def parquet_counts(path: Path) -> dict[int, int]:
    out: dict[int, int] = {}
    for f in committed_parquet_files(path):
        table = pq.read_table(f, columns=["minute", "page_views"])
        for minute, views in zip(
            table["minute"].to_pylist(), table["page_views"].to_pylist(), strict=True
        ):
            key = int(minute.timestamp())
            assert key not in out, f"minute {minute} written twice"
            out[key] = views
    return out


def topic_counts(bootstrap: str) -> dict[int, int]:
    out: dict[int, int] = {}
    with Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": "false"}) as consumer:
        consumer.assign([(COUNTS, 0)])
        consumer.seek_to_beginning()
        idle = 0
        while idle < 3:
            records = consumer.poll(1000)
            idle = 0 if records else idle + 1
            for r in records:
                body = json.loads(r.value or b"{}")
                out[body["minute"]] = body["page_views"]
    return out


def run(events_wanted: int, workdir: Path, master: str, max_offsets: int) -> None:
    started = time.monotonic()

    def step(text: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {text}", flush=True)

    with broker(data_dir=workdir / "broker") as b:
        bootstrap = b.bootstrap_servers
        step(f"embedded broker up at {bootstrap}")
        start = recent_start_ms()
        events = list(generate(events_wanted, start))
        ensure_topics(bootstrap)
        produce(bootstrap, [*events, closing_event(max(e.ts for e in events))])
        step(
            f"generator: {len(events)} events (+1 closing event) over "
            f"{(max(e.ts for e in events) - start) / 3_600_000:.1f} h of event time"
        )

        spark = spark_session(master, "activity-stream")
        step("spark session up")
        output, checkpoints = workdir / "output", workdir / "checkpoints"
        queries = start_streaming(
            spark, bootstrap, output, checkpoints, max_offsets_per_trigger=max_offsets
        )
        for q in queries:
            q.awaitTermination()
        batches = {q.name: len(q.recentProgress) for q in queries}
        step(f"streaming job done: micro-batches per query {batches}")

        want = expected_counts(events)
        got_parquet = parquet_counts(output / "pageview_counts")
        got_topic = topic_counts(bootstrap)
        sessions = sum(
            pq.read_table(f).num_rows for f in committed_parquet_files(output / "sessions")
        )
        step(
            f"{len(got_parquet)} minutes in Parquet, {len(got_topic)} on topic {COUNTS}, "
            f"{len(want)} computed from the events; {sessions} sessions in Parquet"
        )
        assert got_parquet == want, "Parquet counts differ from the events"
        assert got_topic == want, "topic counts differ from the events"
        step("counts match: Parquet == topic == computed from the events")

        hour_from = start  # the first hour: the events cover most of it
        loaded = workdir / "loaded"
        first = load_range(spark, bootstrap, hour_from, hour_from + 3_600_000, loaded)
        rows_first = sorted(spark.read.parquet(str(loaded)).collect())
        second = load_range(spark, bootstrap, hour_from, hour_from + 3_600_000, loaded)
        rows_second = sorted(spark.read.parquet(str(loaded)).collect())
        in_hour = sum(1 for e in events if hour_from <= e.ts < hour_from + 3_600_000)
        assert first == second == in_hour == len(rows_first)
        assert rows_first == rows_second, "the load job is not idempotent"
        step(f"load job: {first} events of one hour loaded twice, identical rows")
        spark.stop()
    step("pipeline done")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=10_000)
    args = parser.parse_args()
    if args.workdir is not None:
        run(args.events, args.workdir, args.master, args.max_offsets_per_trigger)
        return
    with tempfile.TemporaryDirectory(prefix="riverlog-pipeline-") as tmp:
        run(args.events, Path(tmp), args.master, args.max_offsets_per_trigger)


if __name__ == "__main__":
    main()
