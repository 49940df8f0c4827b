"""`riverlog verifiable-producer` and `riverlog verifiable-consumer`: Kafka's verification tools
(kafka-verifiable-producer.sh / kafka-verifiable-consumer.sh) on riverlog's own client.

Both print one JSON object per line on stdout, each with `timestamp` (ms) and `name` first, as
Kafka's tools do, so the same harness can drive them against riverlog or any Kafka:

producer: `startup_complete`; `producer_send_success` {key, value, topic, partition, offset};
`producer_send_error` {key, value, topic, exception, message}; at the end (max messages sent,
or SIGTERM/SIGINT) `shutdown_complete` after the producer's close, then `tool_data`
{sent, acked, target_throughput, avg_throughput}. Values are increasing integers "N" (or
"P.N" with `--value-prefix P`); keys are None or cycle 0..K-1 with `--repeating-keys K`.
As in Kafka, the tool sets `retries=0` unless the config file says otherwise (and with it
idempotence off, as the Java client does when retries is 0 and idempotence was not asked for).

consumer: `startup_complete`; `partitions_assigned` / `partitions_revoked` {partitions:
[{topic, partition}]}; `records_consumed` {count, partitions: [{topic, partition, count,
minOffset, maxOffset}]} per poll; `record_data` {key, value, topic, partition, offset} with
`--verbose`; without `--enable-autocommit`, a synchronous commit of max+1 after every poll that
returned records and its `offsets_committed` {offsets: [{topic, partition, offset}], success,
error if it failed}; `shutdown_complete` after the consumer's close.

Invariant: every event line is written whole and flushed before the next one starts, so a
reader (the fault suite's history) never sees a torn line even when the tool is SIGKILLed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from riverlog.client.consumer import AsyncConsumer, ConsumerRecord
from riverlog.client.producer import AsyncProducer, RecordMetadata
from riverlog.properties import parse_properties
from riverlog.protocol.error_codes import KafkaError

ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    "range": "range",
    "roundrobin": "roundrobin",
    "cooperative-sticky": "cooperative-sticky",
}


def emit(name: str, **fields: object) -> None:
    """One event line: {"timestamp": ms, "name": name, ...fields}, flushed."""
    line = json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields})
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _connection_arguments(parser: argparse.ArgumentParser) -> None:
    connection = parser.add_mutually_exclusive_group(required=True)
    connection.add_argument(
        "--bootstrap-server",
        metavar="HOST1:PORT1[,HOST2:PORT2[...]]",
        help="the server(s) to connect to",
    )
    connection.add_argument(
        "--broker-list", metavar="HOST1:PORT1[,HOST2:PORT2[...]]", help="DEPRECATED"
    )
    parser.add_argument("--topic", required=True, metavar="TOPIC", help="the topic to use")
    parser.add_argument("--command-config", metavar="CONFIG-FILE", help="client properties file")


def _client_config(args: argparse.Namespace, file_option: str) -> dict[str, str]:
    files = [f for f in (getattr(args, file_option), args.command_config) if f is not None]
    if len(files) > 1:
        raise SystemExit(
            f"Options --{file_option.replace('_', '.')} and --command-config are "
            "mutually exclusive."
        )
    config: dict[str, str] = {}
    for name in files:
        config.update(parse_properties(Path(name).read_text()))
    return config


def _stop_on_signals(stop: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


# -- verifiable-producer ---------------------------------------------------------------------


def add_producer_arguments(parser: argparse.ArgumentParser) -> None:
    _connection_arguments(parser)
    parser.add_argument(
        "--max-messages",
        type=int,
        default=-1,
        metavar="MAX-MESSAGES",
        help="produce this many messages; -1: until killed",
    )
    parser.add_argument(
        "--throughput",
        type=int,
        default=-1,
        metavar="THROUGHPUT",
        help="if >= 0, about THROUGHPUT messages/sec at most",
    )
    parser.add_argument(
        "--acks",
        type=int,
        default=-1,
        choices=(0, 1, -1),
        metavar="ACKS",
        help="acks the producer asks for (-1: all)",
    )
    parser.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="CONFIG-FILE",
        help="(DEPRECATED) producer properties file",
    )
    parser.add_argument(
        "--message-create-time",
        type=int,
        default=-1,
        metavar="CREATE-TIME",
        help="the first message's timestamp in ms, advancing by 1 ms per message",
    )
    parser.add_argument(
        "--value-prefix",
        type=int,
        metavar="VALUE-PREFIX",
        help="prefix every value with VALUE-PREFIX and a period",
    )
    parser.add_argument(
        "--repeating-keys",
        type=int,
        metavar="REPEATING-KEYS",
        help="keys 0 to REPEATING-KEYS-1, repeated (no keys when unset)",
    )


def producer_config(args: argparse.Namespace) -> dict[str, str]:
    config = {
        "bootstrap.servers": args.bootstrap_server or args.broker_list,
        "acks": str(args.acks),
        "retries": "0",
    }
    config.update(_client_config(args, "producer_config"))
    if config["retries"].strip() == "0" and "enable.idempotence" not in config:
        config["enable.idempotence"] = "false"
    return config


class _ProducerRun:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.sent = 0
        self.acked = 0
        self.stopping = asyncio.Event()

    def value(self, i: int) -> str:
        prefix = self.args.value_prefix
        return f"{prefix}.{i}" if prefix is not None else str(i)

    def key(self, i: int) -> str | None:
        repeating = self.args.repeating_keys
        return str(i % repeating) if repeating else None

    def completion(self, key: str | None, value: str) -> Callable[[asyncio.Future[Any]], None]:
        def done(future: asyncio.Future[RecordMetadata]) -> None:
            error = future.exception()
            if error is None:
                meta = future.result()
                self.acked += 1
                emit(
                    "producer_send_success",
                    key=key,
                    value=value,
                    topic=meta.topic,
                    partition=meta.partition,
                    offset=meta.offset,
                )
            else:
                self.error(key, value, error)

        return done

    def error(self, key: str | None, value: str, error: BaseException) -> None:
        emit(
            "producer_send_error",
            key=key,
            value=value,
            topic=self.args.topic,
            exception=f"class {type(error).__name__}",
            message=str(error),
        )

    async def run(self) -> int:
        args = self.args
        try:
            producer = AsyncProducer(producer_config(args))
        except ValueError as e:
            print(f"verifiable-producer: {e}", file=sys.stderr)
            return 1
        _stop_on_signals(self.stopping.set)
        start = time.monotonic()
        create_time = None if args.message_create_time < 0 else args.message_create_time
        emit("startup_complete")
        i = 0
        while (args.max_messages < 0 or i < args.max_messages) and not self.stopping.is_set():
            key, value = self.key(i), self.value(i)
            self.sent += 1
            try:
                future = await producer.send(
                    args.topic,
                    value.encode(),
                    key.encode() if key is not None else None,
                    timestamp_ms=create_time,
                )
            except (KafkaError, ConnectionError, OSError, TimeoutError, RuntimeError) as e:
                self.error(key, value, e)
            else:
                future.add_done_callback(self.completion(key, value))
            i += 1
            if args.throughput >= 0:
                ahead = i / max(args.throughput, 1e-9) - (time.monotonic() - start)
                if ahead > 0:
                    await _wait_or_stop(self.stopping, ahead)
        await producer.close()
        emit("shutdown_complete")
        elapsed_ms = max((time.monotonic() - start) * 1000, 1.0)
        emit(
            "tool_data",
            sent=self.sent,
            acked=self.acked,
            target_throughput=args.throughput,
            avg_throughput=1000 * self.acked / elapsed_ms,
        )
        return 0


async def _wait_or_stop(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)


def run_producer(args: argparse.Namespace) -> int:
    return asyncio.run(_ProducerRun(args).run())


# -- verifiable-consumer ---------------------------------------------------------------------


def add_consumer_arguments(parser: argparse.ArgumentParser) -> None:
    _connection_arguments(parser)
    parser.add_argument(
        "--group-protocol",
        default="classic",
        choices=("classic",),
        help="only the classic protocol is served",
    )
    parser.add_argument("--group-id", required=True, metavar="GROUP_ID", help="the group id")
    parser.add_argument(
        "--group-instance-id", metavar="GROUP_INSTANCE_ID", help="a static member's id"
    )
    parser.add_argument(
        "--max-messages",
        type=int,
        default=-1,
        metavar="MAX-MESSAGES",
        help="consume this many messages; -1: until killed",
    )
    parser.add_argument(
        "--session-timeout",
        type=int,
        default=30000,
        metavar="TIMEOUT_MS",
        help="the group session timeout in ms",
    )
    parser.add_argument("--verbose", action="store_true", help="a record_data event per record")
    parser.add_argument(
        "--enable-autocommit", action="store_true", help="commit offsets automatically"
    )
    parser.add_argument(
        "--reset-policy",
        default="earliest",
        choices=("earliest", "latest", "none"),
        help="where to start without a committed offset",
    )
    parser.add_argument(
        "--assignment-strategy",
        default="org.apache.kafka.clients.consumer.RangeAssignor",
        help="the assignor's class name(s), comma-separated",
    )
    parser.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="CONFIG-FILE",
        help="(DEPRECATED) consumer properties file",
    )


def consumer_config(args: argparse.Namespace) -> dict[str, str]:
    strategies = [ASSIGNORS.get(s.strip(), s.strip()) for s in args.assignment_strategy.split(",")]
    config = {
        "bootstrap.servers": args.bootstrap_server or args.broker_list,
        "group.id": args.group_id,
        "session.timeout.ms": str(args.session_timeout),
        "enable.auto.commit": str(args.enable_autocommit).lower(),
        "auto.offset.reset": args.reset_policy,
        "partition.assignment.strategy": ",".join(strategies),
    }
    if args.group_instance_id:
        config["group.instance.id"] = args.group_instance_id
    config.update(_client_config(args, "consumer_config"))
    return config


def _partitions(tps: set[tuple[str, int]]) -> list[dict[str, object]]:
    return [{"topic": t, "partition": p} for t, p in sorted(tps)]


class _ConsumerRun:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.consumed = 0
        self.stopping = asyncio.Event()

    def finished(self) -> bool:
        limit: int = self.args.max_messages
        return 0 <= limit <= self.consumed

    def received(self, records: list[ConsumerRecord]) -> dict[tuple[str, int], int]:
        """Kafka's onRecordsReceived: a summary line, the offsets to commit (max + 1)."""
        by_partition: dict[tuple[str, int], list[ConsumerRecord]] = {}
        for record in records:
            by_partition.setdefault((record.topic, record.partition), []).append(record)
        offsets: dict[tuple[str, int], int] = {}
        summaries = []
        for tp, taken in by_partition.items():
            if self.args.max_messages >= 0:
                taken = taken[: self.args.max_messages - self.consumed]
            if not taken:
                continue
            offsets[tp] = taken[-1].offset + 1
            summaries.append(
                {
                    "topic": tp[0],
                    "partition": tp[1],
                    "count": len(taken),
                    "minOffset": taken[0].offset,
                    "maxOffset": taken[-1].offset,
                }
            )
            if self.args.verbose:
                for r in taken:
                    emit(
                        "record_data",
                        key=_text(r.key),
                        value=_text(r.value),
                        topic=r.topic,
                        partition=r.partition,
                        offset=r.offset,
                    )
            self.consumed += len(taken)
            if self.finished():
                break
        emit("records_consumed", count=len(records), partitions=summaries)
        return offsets

    async def commit(self, consumer: AsyncConsumer, offsets: dict[tuple[str, int], int]) -> None:
        listed = [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()]
        try:
            await consumer.commit(offsets)
        except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
            emit(
                "offsets_committed", offsets=listed, error=str(e) or type(e).__name__, success=False
            )
        else:
            emit("offsets_committed", offsets=listed, success=True)

    async def run(self) -> int:
        try:
            consumer = AsyncConsumer(consumer_config(self.args))
        except ValueError as e:
            print(f"verifiable-consumer: {e}", file=sys.stderr)
            return 1
        _stop_on_signals(self.stopping.set)
        emit("startup_complete")
        consumer.subscribe(
            [self.args.topic],
            on_assign=lambda tps: emit("partitions_assigned", partitions=_partitions(tps)),
            on_revoke=lambda tps: emit("partitions_revoked", partitions=_partitions(tps)),
        )
        try:
            while not self.finished() and not self.stopping.is_set():
                try:
                    records = await consumer.poll(200)
                except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
                    print(f"verifiable-consumer: poll failed: {e!r}", file=sys.stderr)
                    await _wait_or_stop(self.stopping, 0.2)
                    continue
                if not records:
                    continue
                offsets = self.received(records)
                if not self.args.enable_autocommit and offsets:
                    await self.commit(consumer, offsets)
        finally:
            try:
                await asyncio.wait_for(consumer.close(), 30)
            except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
                print(f"verifiable-consumer: close failed: {e!r}", file=sys.stderr)
            emit("shutdown_complete")
        return 0


def _text(data: bytes | None) -> str | None:
    return data.decode(errors="replace") if data is not None else None


def run_consumer(args: argparse.Namespace) -> int:
    return asyncio.run(_ConsumerRun(args).run())
