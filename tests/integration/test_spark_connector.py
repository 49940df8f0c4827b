"""`format("riverlog")` on a local[2] Spark against a broker process: batch and streaming
reads with Spark's Kafka option names return exactly the expected rows; writes round-trip;
a replayed streaming micro-batch is not written twice."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from riverlog.client import Admin, Producer
from tests.integration.conftest import BrokerProcess

pytestmark = pytest.mark.slow
PARTITIONS, PER_PARTITION = 3, 600
SCHEMA = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
]


class Known:
    """A topic whose record at (partition p, offset i) has value f"{p}-{i}" and timestamp
    base_ms + i * 1000."""

    def __init__(self, bootstrap: str, topic: str, base_ms: int) -> None:
        self.bootstrap, self.topic, self.base_ms = bootstrap, topic, base_ms

    def expected(self, ranges: dict[int, tuple[int, int]]) -> set[tuple[int, int, bytes]]:
        return {(p, i, f"{p}-{i}".encode()) for p, (a, b) in ranges.items() for i in range(a, b)}


def produce_known(bootstrap: str, topic: str, partitions: int, count: int, base_ms: int) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for p in range(partitions):
            for i in range(count):
                producer.send(
                    topic,
                    f"{p}-{i}".encode(),
                    f"k{i}".encode(),
                    partition=p,
                    timestamp_ms=base_ms + i * 1000,
                )
        producer.flush()


@pytest.fixture(scope="module")
def known(broker_process: BrokerProcess) -> Known:
    base = (int(time.time()) - 3600) * 1000
    produce_known(broker_process.bootstrap_servers, "known", PARTITIONS, PER_PARTITION, base)
    return Known(broker_process.bootstrap_servers, "known", base)


def read(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("riverlog").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def triples(df: Any) -> set[tuple[int, int, bytes]]:
    rows = df.select("partition", "offset", "value").collect()
    out = {(r.partition, r.offset, bytes(r.value)) for r in rows}
    assert len(out) == len(rows), "a record was read twice"
    return out


def test_batch_read_has_kafkas_schema_and_every_row(spark: Any, known: Known) -> None:
    df = read(spark, known.bootstrap, subscribe=known.topic)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == SCHEMA
    assert triples(df) == known.expected({p: (0, PER_PARTITION) for p in range(PARTITIONS)})
    first = df.where("partition = 1 AND offset = 7").collect()[0]
    assert bytes(first.key) == b"k7" and first.topic == "known" and first.timestampType == 0
    assert int(first.timestamp.timestamp() * 1000) == known.base_ms + 7000


def test_batch_read_with_per_partition_json_offsets(spark: Any, known: Known) -> None:
    df = read(
        spark,
        known.bootstrap,
        subscribe=known.topic,
        startingOffsets='{"known":{"0":10,"1":-2,"2":599}}',
        endingOffsets='{"known":{"0":20,"1":5,"2":-1}}',
    )
    assert triples(df) == known.expected({0: (10, 20), 1: (0, 5), 2: (599, 600)})
    assigned = read(
        spark,
        known.bootstrap,
        assign='{"known":[2]}',
        startingOffsets='{"known":{"2":100}}',
        endingOffsets='{"known":{"2":103}}',
    )
    assert triples(assigned) == known.expected({2: (100, 103)})


def test_batch_read_by_timestamp(spark: Any, known: Known) -> None:
    at = known.base_ms
    df = read(
        spark,
        known.bootstrap,
        subscribe=known.topic,
        startingOffsetsByTimestamp=f'{{"known":{{"0":{at + 100_000},"1":{at},"2":{at + 10}}}}}',
        endingOffsetsByTimestamp=f'{{"known":{{"0":{at + 250_500},"1":{at + 3000},'
        f'"2":{at + 10**9}}}}}',
    )
    assert triples(df) == known.expected({0: (100, 251), 1: (0, 3), 2: (1, 600)})
    everywhere = read(
        spark,
        known.bootstrap,
        subscribe=known.topic,
        startingTimestamp=str(at + 590_000),
        endingTimestamp=str(at + 595_000),
    )
    assert triples(everywhere) == known.expected({p: (590, 595) for p in range(PARTITIONS)})
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        read(
            spark, known.bootstrap, subscribe=known.topic, startingTimestamp=str(at + 10**9)
        ).count()


def test_min_partitions_splits_the_work(spark: Any, known: Known) -> None:
    df = read(spark, known.bootstrap, subscribe=known.topic, minPartitions="12")
    assert df.rdd.getNumPartitions() >= 12
    assert triples(df) == known.expected({p: (0, PER_PARTITION) for p in range(PARTITIONS)})


def test_headers_and_null_keys(spark: Any, broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        producer.send("headed", b"plain", None, partition=0)
        producer.send("headed", None, b"tomb", partition=0, headers=[("a", b"1"), ("b", None)])
        producer.flush()
    rows = read(spark, bootstrap, subscribe="headed", includeHeaders="true").orderBy("offset")
    got = [(r.key, r.value, r.headers) for r in rows.collect()]
    assert got[0] == (None, bytearray(b"plain"), None)
    assert got[1][:2] == (bytearray(b"tomb"), None)
    assert [(h.key, h.value) for h in got[1][2]] == [("a", bytearray(b"1")), ("b", None)]


def test_data_loss_is_reported_per_fail_on_data_loss(
    spark: Any, broker_process: BrokerProcess
) -> None:
    bootstrap = broker_process.bootstrap_servers
    produce_known(bootstrap, "lossy", 1, 100, int(time.time() * 1000))
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.delete_records({("lossy", 0): 50})
    options = {"subscribe": "lossy", "startingOffsets": '{"lossy":{"0":10}}'}
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, bootstrap, **options).count()
    df = read(spark, bootstrap, failOnDataLoss="false", **options)
    assert {r.offset for r in df.select("offset").collect()} == set(range(50, 100))


def test_batch_write_round_trips(spark: Any, broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap_servers
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic("written", 2)
    rows = [(f"k{i}", f"v{i}".encode(), i % 2, [("n", str(i).encode())]) for i in range(500)]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    df.write.mode("append").format("riverlog").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", "written"
    ).save()
    back = read(spark, bootstrap, subscribe="written", includeHeaders="true").collect()
    assert sorted(
        (
            bytes(r.key).decode(),
            bytes(r.value),
            r.partition,
            [(h.key, bytes(h.value)) for h in r.headers],
        )
        for r in back
    ) == sorted((k, v, p, h) for k, v, p, h in rows)
    with pytest.raises(Exception, match="'value' column"):
        spark.range(3).write.mode("append").format("riverlog").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", "written").save()


def stream_known(spark: Any, known: Known, **options: str) -> Any:
    reader = (
        spark.readStream.format("riverlog")
        .option("kafka.bootstrap.servers", known.bootstrap)
        .option("subscribe", known.topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_max_offsets_per_trigger_bounds_each_micro_batch(
    spark: Any, known: Known, tmp_path: Path
) -> None:
    query = (
        stream_known(spark, known, maxOffsetsPerTrigger="300")
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [300] * (PARTITIONS * PER_PARTITION // 300)
    assert triples(spark.read.parquet(str(tmp_path / "out"))) == known.expected(
        {p: (0, PER_PARTITION) for p in range(PARTITIONS)}
    )


def test_restart_resumes_from_the_checkpoint(
    spark: Any, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap_servers
    produce_known(bootstrap, "resumed", 2, 100, int(time.time() * 1000))
    known = Known(bootstrap, "resumed", 0)

    def run() -> Any:
        query = (
            stream_known(spark, known)
            .select("partition", "offset", "value")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(240)
        return query

    first = run()
    assert sum(p["numInputRows"] for p in first.recentProgress) == 200
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(100, 130):
            producer.send("resumed", f"1-{i}".encode(), partition=1)
    second = run()
    assert sum(p["numInputRows"] for p in second.recentProgress) == 30
    assert triples(spark.read.parquet(str(tmp_path / "out"))) == known.expected(
        {0: (0, 100), 1: (0, 130)}
    )


def test_a_replayed_micro_batch_is_not_written_twice(
    spark: Any, known: Known, tmp_path: Path
) -> None:
    """The query dies after the sink committed batch 2 but before Spark's commit log has it:
    Spark replays batch 2 and the sink must skip it."""
    checkpoint = tmp_path / "ck"

    def run() -> Any:
        query = (
            stream_known(spark, known, maxOffsetsPerTrigger="600")
            .selectExpr("value", "CAST(partition AS INT) AS partition")
            .writeStream.format("riverlog")
            .option("kafka.bootstrap.servers", known.bootstrap)
            .option("topic", "copied")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(240)
        return query

    with Admin({"bootstrap.servers": known.bootstrap}) as admin:
        admin.create_topic("copied", PARTITIONS)
    first = run()
    last = max(p["batchId"] for p in first.recentProgress)
    assert last == 2
    (checkpoint / "commits" / str(last)).unlink()
    shutil.rmtree(checkpoint / "commits" / f".{last}.crc", ignore_errors=True)
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    replay = run()
    assert [p["batchId"] for p in replay.recentProgress if p["numInputRows"]] == [last]
    copied = read(spark, known.bootstrap, subscribe="copied")
    assert triples(copied) == {
        (p, i, f"{p}-{i}".encode()) for p in range(PARTITIONS) for i in range(PER_PARTITION)
    }
