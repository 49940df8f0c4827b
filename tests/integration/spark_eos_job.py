"""A streaming copy with the exactly-once sink, for test_spark_exactly_once.py: reads every
partition of `--input` and writes each record to the same partition of `--output`
(`deliveryGuarantee=exactly-once`, Trigger.AvailableNow), then exits.

While the file `--gate` does not exist, the task of input partition 1 stops before its first
record (a Python UDF waits for the file), so the task of partition 0 has written its records
in its open transaction and the driver's commit of the batch cannot happen: the moment the
test SIGKILLs the job."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))

from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from tests.spark_harness import start_spark


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--input", "--output", "--checkpoint", "--gate", "--prefix"):
        parser.add_argument(name, required=True)
    args = parser.parse_args()
    gate = args.gate

    spark = start_spark()

    @F.udf(BinaryType())
    def wait_at_gate(value: bytes, partition: int) -> bytes:
        deadline = time.monotonic() + 600
        while partition == 1 and not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)  # held here until the test kills the job or opens the gate
        return value

    query = (
        spark.readStream.format("riverlog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .load()
        .select(wait_at_gate("value", "partition").alias("value"), "partition")
        .writeStream.format("riverlog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", args.prefix)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
