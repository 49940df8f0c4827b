"""`riverlog console-producer` and `riverlog console-consumer`: Kafka's console tools.

Producer (kafka-console-producer.sh): one record per standard-input line; `--property
parse.key=true` with `key.separator` (default tab) splits key and value; `--property
parse.headers=true` reads `k:v,k2:v2<TAB>` before the key; `--request-required-acks`,
`--compression-codec`, `--producer-property key=value` (any producer config), `--sync` (wait
for each line's acknowledgement before reading the next).

Consumer (kafka-console-consumer.sh): `--group` (joins it and commits; without one it reads
every partition, or `--partition`, without a group), `--from-beginning`,
`--offset earliest|latest|N`, `--isolation-level read_committed|read_uncommitted`,
`--consumer-property key=value`, `--max-messages`,
`--timeout-ms`; Kafka's default formatter with `print.timestamp`, `print.partition`,
`print.offset`, `print.headers`, `print.key`, `print.value`, `key.separator`,
`line.separator`. It ends with "Processed a total of N
messages" on standard error, as Kafka's does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from riverlog.cli import command_config
from riverlog.client.consumer import AsyncConsumer, ConsumerRecord
from riverlog.client.producer import AsyncProducer, RecordMetadata
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.records import compression


def _properties(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--property expects key=value, got {item!r}")
        out[key.strip()] = value.encode().decode("unicode_escape")  # "\t" as Kafka accepts
    return out


def add_producer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--producer-property", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--producer.config", dest="producer_config", type=Path, metavar="FILE",
                        help="security settings: security.protocol, ssl.*, sasl.*")  # fmt: skip
    parser.add_argument("--request-required-acks", default="-1")
    parser.add_argument(
        "--compression-codec",
        nargs="?",
        const="gzip",
        default="none",
        choices=list(compression.NAMES.values()),
    )
    parser.add_argument("--sync", action="store_true", help="send each line on its own")


Line = tuple[bytes | None, bytes, list[tuple[str, bytes | None]]]


def _parse_line(line: str, props: dict[str, str]) -> Line:
    headers: list[tuple[str, bytes | None]] = []
    if props.get("parse.headers", "false") == "true":
        delimiter = props.get("headers.delimiter", "\t")
        head, _, line = line.partition(delimiter)
        for item in head.split(props.get("headers.separator", ",")):
            if item:
                k, _, v = item.partition(props.get("headers.key.separator", ":"))
                headers.append((k, v.encode()))
    key: bytes | None = None
    if props.get("parse.key", "false") == "true":
        separator = props.get("key.separator", "\t")
        raw_key, sep, line = line.partition(separator)
        if not sep:
            raise ValueError(f"No key separator found on line: {raw_key}")
        key = raw_key.encode()
    return key, line.encode(), headers


async def _produce(args: argparse.Namespace) -> None:
    props = _properties(args.property)
    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "console-producer",
        "acks": args.request_required_acks,
        "compression.type": args.compression_codec,
        **command_config.security_properties(args.producer_config),
        **_properties(args.producer_property),
    }
    pending: list[asyncio.Future[RecordMetadata]] = []
    async with AsyncProducer(config) as producer:
        for line in sys.stdin:
            key, value, headers = _parse_line(line.rstrip("\n"), props)
            future = await producer.send(args.topic, value, key, headers=headers)
            if args.sync:
                await future
            else:
                pending.append(future)
                if len(pending) >= 1000:
                    await asyncio.gather(*pending)
                    pending = []
        await producer.flush()
        await asyncio.gather(*pending)


def run_producer(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_produce(args))
    except (KafkaError, ValueError, ConnectionError) as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    return 0


def add_consumer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--from-beginning", action="store_true")
    parser.add_argument("--partition", type=int)
    parser.add_argument("--offset", default="latest", help="earliest, latest or an offset")
    parser.add_argument("--max-messages", type=int)
    parser.add_argument("--timeout-ms", type=int, help="exit after this long without records")
    parser.add_argument("--group")
    parser.add_argument(
        "--isolation-level",
        choices=["read_committed", "read_uncommitted"],
        default="read_uncommitted",
        help="read_committed: only committed transactional records (and non-transactional ones)",
    )
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--consumer.config", dest="consumer_config", type=Path, metavar="FILE",
                        help="security settings: security.protocol, ssl.*, sasl.*")  # fmt: skip


def format_record(r: ConsumerRecord, props: dict[str, str]) -> bytes:
    """Kafka's DefaultMessageFormatter."""
    on = {
        k: props.get(k, d) == "true"
        for k, d in (
            ("print.timestamp", "false"),
            ("print.partition", "false"),
            ("print.offset", "false"),
            ("print.headers", "false"),
            ("print.key", "false"),
            ("print.value", "true"),
        )
    }
    separator = props.get("key.separator", "\t").encode()
    out: list[bytes] = []
    if on["print.timestamp"]:
        kind = "LogAppendTime" if r.timestamp_type else "CreateTime"
        out += [f"{kind}:{r.timestamp}".encode(), separator]
    if on["print.partition"]:
        out += [f"Partition:{r.partition}".encode(), separator]
    if on["print.offset"]:
        out += [f"Offset:{r.offset}".encode(), separator]
    if on["print.headers"]:
        text = (
            ",".join(
                f"{k}:{'null' if v is None else v.decode(errors='replace')}" for k, v in r.headers
            )
            or "NO_HEADERS"
        )
        out += [text.encode(), separator]
    if on["print.key"]:
        out += [b"null" if r.key is None else r.key, separator]
    if on["print.value"]:
        out.append(b"null" if r.value is None else r.value)
    out.append(props.get("line.separator", "\n").encode())
    return b"".join(out)


async def _consume(args: argparse.Namespace, counted: list[int]) -> None:
    props = _properties(args.property)
    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "console-consumer",
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.auto.commit": args.group is not None,
        "isolation.level": args.isolation_level,
        **({"group.id": args.group} if args.group else {}),
        **command_config.security_properties(args.consumer_config),
        **_properties(args.consumer_property),
    }
    async with AsyncConsumer(config) as consumer:
        if args.group is not None and args.partition is None:
            consumer.subscribe([args.topic])
        else:
            count = await consumer.cluster.partitions_of(args.topic, allow_auto_create=False)
            partitions = range(count) if args.partition is None else [args.partition]
            if any(not 0 <= p < count for p in partitions):
                raise ValueError(f"partition {args.partition} of {args.topic} does not exist")
            consumer.assign((args.topic, p) for p in partitions)
            if args.offset not in ("latest", "earliest"):
                for p in partitions:
                    consumer.seek((args.topic, p), int(args.offset))
            elif args.offset == "earliest" or args.from_beginning:
                consumer.seek_to_beginning()
            else:
                consumer.seek_to_end()
        last_record = time.monotonic()
        while args.max_messages is None or counted[0] < args.max_messages:
            records = await consumer.poll(500)
            for r in records:
                sys.stdout.buffer.write(format_record(r, props))
                counted[0] += 1
                if args.max_messages is not None and counted[0] >= args.max_messages:
                    break
            sys.stdout.buffer.flush()
            if records:
                last_record = time.monotonic()
            elif (
                args.timeout_ms is not None
                and (time.monotonic() - last_record) * 1000 >= args.timeout_ms
            ):
                break


def run_consumer(args: argparse.Namespace) -> int:
    counted = [0]  # survives Ctrl-C, so the total is still printed
    try:
        asyncio.run(_consume(args, counted))
    except KeyboardInterrupt:
        pass
    except (KafkaError, ValueError, ConnectionError) as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1
    print(f"Processed a total of {counted[0]} messages", file=sys.stderr)
    return 0
