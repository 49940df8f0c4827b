"""The Spark jobs of the reference pipeline, as functions the command-line scripts (and the
tests) call: the streaming job, the batch load job, and the Spark session they share.

Streaming job (three queries over `format("riverlog")`, each with its own checkpoint):
- `pageview_counts`: page views per event-time minute, with a watermark, appended to Parquet
  partitioned by date/hour once the watermark has passed the minute (so each minute is
  written once, final);
- `sessions`: per-user sessions (session windows with a `SESSION_GAP` gap) with their page
  views and clicks, to Parquet partitioned by date/hour of the session start;
- `counts_to_topic`: the same per-minute counts published back to the `pageview_counts` topic
  (key: the minute, value: JSON).
Parquet and state are exactly-once through Spark's checkpoints and the file sink's log; a
restarted job resumes from the checkpoints.

Load job: re-loads a time range of events from the topics into Parquet partitioned by
date/hour, with each record's topic, partition and offset (doc 003: offsets kept with the
output). It overwrites exactly the date/hour partitions of the range (dynamic partition
overwrite) with rows sorted by (topic, partition, offset): re-running it gives the same rows.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from events import COUNTS, EVENT_SCHEMA, SESSION_GAP, TOPICS, WATERMARK
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

SLACK_MS = 5 * 60_000  # how far outside a load range the job looks for late/early records


def spark_session(master: str = "local[*]", app: str = "activity-stream") -> SparkSession:
    """A session for the pipeline: UTC, quiet, no UI, on loopback when local."""
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def events(raw: DataFrame) -> DataFrame:
    """Parsed events with `event_time`, `date` and `hour` (UTC), and where they came from."""
    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"),
        "topic",
        "partition",
        "offset",
    ).select("e.*", "topic", "partition", "offset")
    return parsed.withColumn("event_time", F.timestamp_millis("ts"))


def _date_hour(df: DataFrame, column: str) -> DataFrame:
    return df.withColumn("date", F.date_format(column, "yyyy-MM-dd")).withColumn(
        "hour", F.hour(column)
    )


def start_streaming(
    spark: SparkSession,
    bootstrap: str,
    output: Path,
    checkpoints: Path,
    *,
    max_offsets_per_trigger: int | None = None,
    available_now: bool = True,
) -> list[StreamingQuery]:
    """Start the three queries; with `available_now` they stop once they processed what
    the topics held when they started."""
    reader = (
        spark.readStream.format("riverlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(TOPICS))
        .option("startingOffsets", "earliest")
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    stream = events(reader.load()).withWatermark("event_time", WATERMARK)

    counts = (
        stream.where(F.col("event") == "page_view")
        .groupBy(F.window("event_time", "1 minute"))
        .agg(F.count("*").alias("page_views"))
        .select(F.col("window.start").alias("minute"), "page_views")
    )
    sessions = (
        stream.groupBy(F.session_window("event_time", SESSION_GAP), "user_id")
        .agg(
            F.sum(F.when(F.col("event") == "page_view", 1).otherwise(0)).alias("page_views"),
            F.sum(F.when(F.col("event") == "click", 1).otherwise(0)).alias("clicks"),
        )
        .select(
            "user_id",
            F.col("session_window.start").alias("session_start"),
            F.col("session_window.end").alias("session_end"),
            "page_views",
            "clicks",
        )
    )

    def trigger(writer: DataStreamWriter) -> DataStreamWriter:
        return (
            writer.trigger(availableNow=True)
            if available_now
            else writer.trigger(processingTime="2 seconds")
        )

    queries = [
        trigger(
            _date_hour(counts, "minute")
            .writeStream.queryName("pageview_counts")
            .format("parquet")
            .partitionBy("date", "hour")
            .outputMode("append")
            .option("path", str(output / "pageview_counts"))
            .option("checkpointLocation", str(checkpoints / "pageview_counts"))
        ).start(),
        trigger(
            _date_hour(sessions, "session_start")
            .writeStream.queryName("sessions")
            .format("parquet")
            .partitionBy("date", "hour")
            .outputMode("append")
            .option("path", str(output / "sessions"))
            .option("checkpointLocation", str(checkpoints / "sessions"))
        ).start(),
        trigger(
            counts.select(
                F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'").alias("key"),
                F.to_json(
                    F.struct(F.col("minute").cast("long").alias("minute"), "page_views")
                ).alias("value"),
            )
            .writeStream.queryName("counts_to_topic")
            .format("riverlog")
            .outputMode("append")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", COUNTS)
            .option("checkpointLocation", str(checkpoints / "counts_to_topic"))
        ).start(),
    ]
    return queries


def load_range(spark: SparkSession, bootstrap: str, from_ms: int, to_ms: int, output: Path) -> int:
    """Load the events with event time in [from_ms, to_ms) into `output`; returns the row
    count. Record timestamps are event times, so the topics are read from SLACK_MS before the
    range to SLACK_MS after it (records arrive a little out of order) and cut by event time."""
    raw = (
        spark.read.format("riverlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(TOPICS))
        .option("startingTimestamp", str(from_ms - SLACK_MS))
        .option("startingOffsetsByTimestampStrategy", "latest")
        .option("endingTimestamp", str(to_ms + SLACK_MS))
        .load()
    )
    rows = _date_hour(
        events(raw).where((F.col("ts") >= from_ms) & (F.col("ts") < to_ms)), "event_time"
    )
    rows = rows.repartition("date", "hour").sortWithinPartitions("topic", "partition", "offset")
    rows.cache()
    count = rows.count()
    rows.write.mode("overwrite").partitionBy("date", "hour").parquet(str(output))
    rows.unpersist()
    return count


def committed_parquet_files(path: Path) -> list[Path]:
    """The files a streaming file sink committed (its `_spark_metadata` log): what Spark
    reads back, leaving out files of a batch that never committed."""
    log = path / "_spark_metadata"
    entries = sorted(
        (int(p.name.split(".")[0]), p) for p in log.iterdir() if p.name.split(".")[0].isdigit()
    )
    compacts = [i for i, (_, p) in enumerate(entries) if p.name.endswith(".compact")]
    files: set[str] = set()
    for _, entry in entries[compacts[-1] if compacts else 0 :]:
        for line in entry.read_text().splitlines()[1:]:
            record = json.loads(line)
            target = record["path"].removeprefix("file://")
            if record["action"] == "add":
                files.add(target)
            else:
                files.discard(target)
    return sorted(Path(f) for f in files)
