"""A local Spark session for tests: loopback only, no UI, our virtualenv's Python for the
workers, retried when Spark's helper processes time out at start on a loaded machine."""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
}


def spark_env() -> dict[str, str]:
    """The environment a Spark driver process needs here (also for subprocesses)."""
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


def start_spark(master: str = "local[2]", attempts: int = 3) -> SparkSession:
    os.environ.update({k: v for k, v in spark_env().items() if k.startswith(("SPARK", "PYSPARK"))})
    for attempt in range(attempts):
        try:
            builder = SparkSession.builder.master(master).appName("riverlog-tests")
            for key, value in SPARK_CONF.items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            spark.range(1).count()  # the first job starts the Python workers' machinery
            return spark
        except Exception:
            if attempt == attempts - 1:
                raise
            time.sleep(2)
    raise AssertionError("unreachable")
