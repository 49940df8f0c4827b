"""A confluent-kafka group member as its own process, for tests that kill members.

    python group_member.py BOOTSTRAP GROUP TOPIC ASSIGNOR [INSTANCE_ID]

It subscribes, commits synchronously after every record, and prints one line per event on
stdout, flushed: `assign P,P`, `revoke P,P` (incremental lists for cooperative assignors,
full ones otherwise), `got P OFFSET`, `committed P OFFSET` (the next offset to read),
`uncommitted P OFFSET REASON` (the commit after that record was refused, as during a
rebalance). SIGTERM closes the consumer cleanly (a LeaveGroup unless it is a static member)
and exits.
"""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Consumer, TopicPartition


def main() -> int:
    bootstrap, group, topic, assignor = sys.argv[1:5]
    instance = sys.argv[5] if len(sys.argv) > 5 else None
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "partition.assignment.strategy": assignor,
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 500,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if instance is not None:
        config["group.instance.id"] = instance
    consumer = Consumer(config)
    cooperative = assignor == "cooperative-sticky"
    stopping = False

    def say(line: str) -> None:
        print(line, flush=True)

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        say("assign " + ",".join(str(p.partition) for p in parts))
        if cooperative:
            c.incremental_assign(parts)
        else:
            c.assign(parts)

    def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
        say("revoke " + ",".join(str(p.partition) for p in parts))
        if cooperative:
            c.incremental_unassign(parts)
        else:
            c.unassign()

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    say("started")
    while not stopping:
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error() is not None:
            say(f"error {msg.error()}")
            continue
        partition, offset = msg.partition(), msg.offset()
        say(f"got {partition} {offset}")
        try:
            consumer.commit(msg, asynchronous=False)
        except Exception as e:  # a commit refused during a rebalance: the record comes again
            say(f"uncommitted {partition} {offset} {e}")
            continue
        say(f"committed {partition} {offset + 1}")
    consumer.close()
    say("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
