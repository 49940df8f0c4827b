"""Spark connector benchmark: rows/s reading a 1,000,000-record topic into a Spark DataFrame
through `format("riverlog")`, next to reading the same rows from Parquet in the same run
(prints numbers, asserts none). Issue 9's target: riverlog ≥ 50% of the Parquet rate.

Setup: an embedded broker in this process; 1,000,000 records (16-byte keys, 100-byte values,
uncompressed) in 4 partitions; Spark local[2] (this machine has 2 cores). Each figure is the
best of `RUNS` runs of one job:
- `count()`: Parquet answers from its footers without reading rows; a Python data source
  produces every column of every row for it (pyspark's Python Data Source API has no column
  pruning or aggregate pushdown);
- `sum(length(value))`: every row's value read — the fair read comparison;
- write to Parquet: the connector's rows (or the Parquet copy's) written out as Parquet.

Each job also runs on `ideal`, a Python data source that does no work at all: it yields one
pre-built Arrow batch of the connector's schema over and over (same rows, same partitions).
Its rate is the ceiling of any Python data source on this machine, the way the client's own
ceiling is printed next to each broker figure in bench_broker.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from riverlog.client import Admin, Producer
from riverlog.embedded import broker
from riverlog.spark.reading import spark_schema
from riverlog.spark.source import RiverlogDataSource

RECORDS = 1_000_000
PARTITIONS = 4
RUNS = 3


def produce(bootstrap: str) -> float:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic("bench", PARTITIONS)
    value = os.urandom(100)
    began = time.perf_counter()
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": "20"}) as producer:
        for i in range(RECORDS):
            producer.send("bench", value, b"%016d" % i)
        producer.flush()
    return time.perf_counter() - began


class IdealSource(DataSource):
    """The connector's schema with no work behind it: one Arrow batch, yielded again and again."""

    @classmethod
    def name(cls) -> str:
        return "ideal"

    def schema(self) -> str:
        return RiverlogDataSource({}).schema()

    def reader(self, schema: object) -> DataSourceReader:
        return IdealReader()


class IdealReader(DataSourceReader):
    ROWS_PER_BATCH = 25_000

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        n = self.ROWS_PER_BATCH
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([b"%016d" % i for i in range(n)], pa.binary()),
                pa.array([os.urandom(100)] * n, pa.binary()),
                pa.array(["bench"] * n),
                pa.array([partition.value] * n, pa.int32()),
                pa.array(range(n), pa.int64()),
                pa.array([0] * n, pa.timestamp("us", tz="UTC")),
                pa.array([0] * n, pa.int32()),
            ],
            schema=spark_schema(False),
        )
        for _ in range(RECORDS // PARTITIONS // n):
            yield batch


def best(job: Callable[[], object]) -> float:
    times = []
    for _ in range(RUNS):
        began = time.perf_counter()
        job()
        times.append(time.perf_counter() - began)
    return min(times)


def main() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="riverlog-bench-spark-"))
    try:
        with broker(data_dir=work / "broker") as b:
            seconds = produce(b.bootstrap_servers)
            print(f"produced {RECORDS:,} records in {seconds:.1f} s")
            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")

            def riverlog() -> DataFrame:
                return (
                    spark.read.format("riverlog")
                    .option("kafka.bootstrap.servers", b.bootstrap_servers)
                    .option("subscribe", "bench")
                    .load()
                )

            copy = work / "copy.parquet"
            riverlog().write.mode("overwrite").parquet(str(copy))  # also warms up the workers

            def parquet() -> DataFrame:
                return spark.read.parquet(str(copy))

            def write(df: Callable[[], DataFrame]) -> Callable[[], None]:
                target = work / "out.parquet"
                return lambda: df().write.mode("overwrite").parquet(str(target))

            def total(df: Callable[[], DataFrame]) -> Callable[[], object]:
                return lambda: df().agg(F.sum(F.length("value"))).collect()

            spark.dataSource.register(IdealSource)

            def ideal() -> DataFrame:
                return spark.read.format("ideal").load()

            print(
                f"{'job':<22}{'riverlog rows/s':>17}{'ideal rows/s':>15}{'parquet rows/s':>17}"
                f"{'riverlog/parquet':>18}{'ideal/parquet':>15}"
            )
            for name, on in (
                ("count()", lambda df: df().count),
                ("sum(length(value))", total),
                ("write to Parquet", write),
            ):
                ours, bound, theirs = best(on(riverlog)), best(on(ideal)), best(on(parquet))
                print(
                    f"{name:<22}{RECORDS / ours:>17,.0f}{RECORDS / bound:>15,.0f}"
                    f"{RECORDS / theirs:>17,.0f}{theirs / ours:>18.2f}{theirs / bound:>15.2f}"
                )
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
