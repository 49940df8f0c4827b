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
ceiling is printed next to each broker figure in bench_broker. Issue 24's target: riverlog's
`count()` ≥ 80% of `ideal`'s in the same run (column riverlog/ideal).

`py-walk` is the connector with the record walk's Python `chase`, arrow.py's numpy decode
of the fields and Arrow's `take` in its workers instead of the compiled `chase`, `fields` and
`gather` (the read path before they existed): the A/B of that change.
The sources take turns within each round (the machine is shared: alternating spreads the
noise over all of them alike). Arguments name the jobs to run (default: all), e.g.
`python bench/bench_spark.py "count()"`.
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
from pyspark.sql.types import StructType

from riverlog.client import Admin, Producer
from riverlog.embedded import broker
from riverlog.protocol.records import walk
from riverlog.spark.options import parse_source
from riverlog.spark.reading import spark_schema
from riverlog.spark.source import BatchReader, RiverlogDataSource

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


class PythonWalkSource(RiverlogDataSource):
    """`riverlog` without the compiled `chase`, `fields` and `gather` in the workers (the A/B)."""

    @classmethod
    def name(cls) -> str:
        return "riverlog_py_walk"

    def reader(self, schema: StructType) -> DataSourceReader:
        return PythonWalkReader(parse_source(self.options, streaming=False))


class PythonWalkReader(BatchReader):
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        compiled = walk.chase, walk.fields, walk.gather  # Python workers are reused: the
        walk.chase, walk.fields, walk.gather = walk.PYTHON.chase, None, None  # other sources
        try:  # must find them again
            yield from super().read(partition)
        finally:
            walk.chase, walk.fields, walk.gather = compiled


def best_of_alternating(jobs: list[Callable[[], object]]) -> list[float]:
    """The best time of each job over `RUNS` rounds, the jobs taking turns in each round."""
    times: list[list[float]] = [[] for _ in jobs]
    for _ in range(RUNS):
        for job, spent in zip(jobs, times, strict=True):
            began = time.perf_counter()
            job()
            spent.append(time.perf_counter() - began)
    return [min(t) for t in times]


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
            spark.dataSource.register(PythonWalkSource)

            def ideal() -> DataFrame:
                return spark.read.format("ideal").load()

            def py_walk() -> DataFrame:
                return (
                    spark.read.format("riverlog_py_walk")
                    .option("kafka.bootstrap.servers", b.bootstrap_servers)
                    .option("subscribe", "bench")
                    .load()
                )

            print(
                f"{'job':<20}{'riverlog/s':>12}{'py-walk/s':>12}{'ideal/s':>12}{'parquet/s':>12}"
                f"{'riverlog/ideal':>16}{'py-walk/ideal':>16}{'riverlog/parquet':>18}"
                f"{'ideal/parquet':>15}"
            )
            jobs = {
                "count()": lambda df: df().count,
                "sum(length(value))": total,
                "write to Parquet": write,
            }
            wanted = sys.argv[1:] or list(jobs)  # e.g. `bench_spark.py "count()"`
            for name, on in ((n, j) for n, j in jobs.items() if n in wanted):
                ours, before, bound, theirs = best_of_alternating(
                    [on(riverlog), on(py_walk), on(ideal), on(parquet)]
                )
                print(
                    f"{name:<20}{RECORDS / ours:>12,.0f}{RECORDS / before:>12,.0f}"
                    f"{RECORDS / bound:>12,.0f}{RECORDS / theirs:>12,.0f}{bound / ours:>16.2f}"
                    f"{bound / before:>16.2f}{theirs / ours:>18.2f}{theirs / bound:>15.2f}",
                    flush=True,
                )
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
