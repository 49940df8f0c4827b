"""Spark connector benchmark: rows/s reading a 1,000,000-record topic into a Spark DataFrame
through `format("riverlog")`, next to reading the same rows from Parquet in the same run
(prints numbers, asserts none). Issue 9's target: riverlog ≥ 50% of the Parquet rate.

Setup: an embedded broker in this process; 1,000,000 records (16-byte keys, 100-byte values,
uncompressed) in 4 partitions; Spark local[2] (this machine has 2 cores). Each figure is the
best of `RUNS` runs of one job:
- `count()`: Parquet answers from its footers without reading rows, so it is shown but not
  the comparison; a Python data source produces every column of every row for it;
- `sum(length(value))`: every row's value read — the fair read comparison;
- write to Parquet: the connector's rows (or the Parquet copy's) written out as Parquet.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from riverlog.client import Admin, Producer
from riverlog.embedded import broker

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

            print(f"{'job':<28}{'riverlog rows/s':>18}{'parquet rows/s':>18}{'ratio':>8}")
            for name, on in (
                ("count()", lambda df: df().count),
                ("sum(length(value))", total),
                ("write to Parquet", write),
            ):
                ours, theirs = best(on(riverlog)), best(on(parquet))
                print(
                    f"{name:<28}{RECORDS / ours:>18,.0f}{RECORDS / theirs:>18,.0f}"
                    f"{theirs / ours:>8.2f}"
                )
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
