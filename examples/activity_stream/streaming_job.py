"""The streaming job: per-minute page-view counts and per-user sessions to Parquet, and the
counts back to the `pageview_counts` topic (see jobs.py).

    python streaming_job.py --bootstrap-server 127.0.0.1:9092 --output out --checkpoints ck \
        [--max-offsets-per-trigger 5000] [--continuous] [--master local[*]]

By default it processes what the topics hold and stops (Trigger.AvailableNow); with
`--continuous` it keeps running every 2 s until interrupted. Run it again with the same
`--checkpoints` and it resumes where it stopped.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs import spark_session, start_streaming


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--checkpoints", type=Path, required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument("--continuous", action="store_true")
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    spark = spark_session(args.master, "activity-stream-streaming")
    queries = start_streaming(
        spark,
        args.bootstrap_server,
        args.output,
        args.checkpoints,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=not args.continuous,
    )
    for query in queries:
        query.awaitTermination()
    print("streaming job done:", ", ".join(q.name for q in queries))
    spark.stop()


if __name__ == "__main__":
    main()
