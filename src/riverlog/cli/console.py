"""`riverlog console-producer` and `riverlog console-consumer`: Kafka's console tools.

Producer (kafka-console-producer.sh): one record per standard-input line; `--property
parse.key=true` with `key.separator` (default tab) splits key and value; `--property
parse.headers=true` reads `k:v,k2:v2<TAB>` before the key; `--request-required-acks`,
`--compression-codec`, `--producer-property acks=...`, `--batch-size` (lines per request).

Consumer (kafka-console-consumer.sh), without a group: `--from-beginning`, `--partition`,
`--offset earliest|latest|N`, `--max-messages`, `--timeout-ms`; Kafka's default formatter with
`print.timestamp`, `print.partition`, `print.offset`, `print.headers`, `print.key`,
`print.value`, `key.separator`, `line.separator`. It ends with "Processed a total of N
messages" on standard error, as Kafka's does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from riverlog.client.cluster import Cluster
from riverlog.client.consumer import EARLIEST, LATEST, ConsumedRecord, Consumer
from riverlog.client.producer import OutgoingRecord, Producer
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
    parser.add_argument("--request-required-acks", default="-1")
    parser.add_argument(
        "--compression-codec",
        nargs="?",
        const="gzip",
        default="none",
        choices=list(compression.NAMES.values()),
    )
    parser.add_argument("--batch-size", type=int, default=200, help="lines per request")
    parser.add_argument("--sync", action="store_true", help="send each line on its own")


def _parse_line(line: str, props: dict[str, str]) -> OutgoingRecord:
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
    return OutgoingRecord(key, line.encode(), headers)


async def _produce(args: argparse.Namespace) -> None:
    props = _properties(args.property)
    producer_props = _properties(args.producer_property)
    acks = int(producer_props.get("acks", args.request_required_acks).replace("all", "-1"))
    cluster = Cluster(args.bootstrap_server, "console-producer")
    producer = Producer(
        cluster, acks=acks, compression_type=compression.codec_by_name(args.compression_codec)
    )
    batch_size = 1 if args.sync else max(1, args.batch_size)
    pending: list[OutgoingRecord] = []
    try:
        for line in sys.stdin:
            pending.append(_parse_line(line.rstrip("\n"), props))
            if len(pending) >= batch_size:
                await producer.send(args.topic, pending)
                pending = []
        if pending:
            await producer.send(args.topic, pending)
    finally:
        await cluster.close()


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
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")


def format_record(r: ConsumedRecord, props: dict[str, str]) -> bytes:
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
    cluster = Cluster(args.bootstrap_server, "console-consumer")
    consumer = Consumer(cluster, auto_offset_reset=EARLIEST if args.from_beginning else LATEST)
    start = EARLIEST if args.from_beginning else LATEST
    if args.offset not in ("latest", "earliest"):
        start = int(args.offset)
    elif args.offset == "earliest":
        start = EARLIEST
    partitions = None if args.partition is None else [args.partition]
    try:
        await consumer.assign(args.topic, partitions, start)
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
    finally:
        await cluster.close()


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
