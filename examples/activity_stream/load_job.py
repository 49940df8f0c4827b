"""The batch load job: events of an event-time range from the topics into Parquet
partitioned by date/hour, idempotently (a re-run replaces the range's partitions with the
same rows).

    python load_job.py --bootstrap-server 127.0.0.1:9092 --output loaded \
        --from 2026-11-23T10:00:00Z --to 2026-11-23T12:00:00Z [--master local[*]]
"""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path

from jobs import load_range, spark_session


def epoch_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--from", dest="start", type=epoch_ms, required=True)
    parser.add_argument("--to", dest="end", type=epoch_ms, required=True)
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    spark = spark_session(args.master, "activity-stream-load")
    rows = load_range(spark, args.bootstrap_server, args.start, args.end, args.output)
    print(f"loaded {rows} events into {args.output}")
    spark.stop()


if __name__ == "__main__":
    main()
