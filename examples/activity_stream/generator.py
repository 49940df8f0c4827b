"""Produce activity events to the pipeline's topics (creating them if needed).

    python generator.py --bootstrap-server 127.0.0.1:9092 --events 20000 [--start-ms MS]

Events are keyed by user id, so one user's events stay in order on one partition; each
record's timestamp is the event's time. `--close` adds the closing event that lets the
streaming job's watermark pass every real minute.
"""

from __future__ import annotations

import argparse
import time

from events import COUNTS, TOPICS, Event, closing_event, generate

from riverlog.client import Admin, Producer


def ensure_topics(bootstrap: str, partitions: int = 3) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        existing = set(admin.list_topics())
        for topic in (*TOPICS, COUNTS):
            if topic not in existing:
                admin.create_topic(topic, 1 if topic == COUNTS else partitions)


def produce(bootstrap: str, events: list[Event]) -> None:
    with Producer(
        {"bootstrap.servers": bootstrap, "compression.type": "zstd", "linger.ms": "20"}
    ) as producer:
        for e in events:
            producer.send(e.topic, e.value(), e.user_id.encode(), timestamp_ms=e.ts)
        producer.flush()


def recent_start_ms(hours: int = 3) -> int:
    """The top of the hour `hours` ago: recent enough that retention keeps the records."""
    now = int(time.time() * 1000)
    return (now // 3_600_000 - hours) * 3_600_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--start-ms", type=int, default=None)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--close", action="store_true", help="add the closing event")
    args = parser.parse_args()
    start = args.start_ms if args.start_ms is not None else recent_start_ms()
    events = list(generate(args.events, start, args.seed))
    if args.close:
        events.append(closing_event(max(e.ts for e in events)))
    ensure_topics(args.bootstrap_server)
    produce(args.bootstrap_server, events)
    print(f"produced {len(events)} events from {start}")


if __name__ == "__main__":
    main()
