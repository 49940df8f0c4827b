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
import random
import sys
import time

from riverlog.cli.message_formatter import FORMATTERS, DefaultMessageFormatter
from riverlog.cli.tool_config import parse_property_flags
from riverlog.client.consumer import AsyncConsumer
from riverlog.client.producer import AsyncProducer, RecordMetadata
from riverlog.properties import load_properties
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
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT",
        help="REQUIRED: The server(s) to connect to.",
    )
    parser.add_argument(
        "--topic", required=True, help="REQUIRED: The topic id to produce messages to."
    )
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A mechanism to pass user-defined properties in the form key=value "
        "to the message reader: parse.key, key.separator, parse.headers, "
        "headers.delimiter, headers.separator, headers.key.separator",
    )
    parser.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A mechanism to pass user-defined properties in the form key=value to the producer.",
    )
    parser.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="FILE",
        help="Producer config properties file. Note that "
        "[producer-property] takes precedence over this config.",
    )
    parser.add_argument(
        "--request-required-acks",
        default="-1",
        help="The required acks of the producer requests (default: -1)",
    )
    parser.add_argument(
        "--compression-codec",
        nargs="?",
        const="gzip",
        default="none",
        choices=list(compression.NAMES.values()),
        help="The compression codec: either 'none', 'gzip', 'snappy', 'lz4', or 'zstd'. If "
        "specified without value, then it defaults to 'gzip'",
    )
    parser.add_argument("--sync", action="store_true", help="send each line on its own")


def client_properties(config_file: str | None, flags: list[str], flag: str) -> dict[str, str]:
    """A client's properties: the config file's, then `--X-property` flags over them (Kafka's
    precedence)."""
    out = load_properties(config_file) if config_file else {}
    out.update(parse_property_flags(flags, flag))
    return out


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
        **client_properties(args.producer_config, args.producer_property, "--producer-property"),
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
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT",
        help="REQUIRED: The server(s) to connect to.",
    )
    parser.add_argument("--topic", help="The topic to consume on.")
    parser.add_argument(
        "--include",
        metavar="Java regex (String)",
        help="Regular expression specifying list of topics to include for consumption.",
    )
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="If the consumer does not already have an established offset to "
        "consume from, start with the earliest message present in the log "
        "rather than the latest message.",
    )
    parser.add_argument(
        "--partition",
        type=int,
        help="The partition to consume from. Consumption starts from the end of "
        "the partition unless '--offset' is specified.",
    )
    parser.add_argument(
        "--offset",
        default="latest",
        help="The offset to consume from (a non-negative number), or 'earliest' "
        "which means from beginning, or 'latest' which means from end",
    )
    parser.add_argument(
        "--max-messages",
        type=int,
        help="The maximum number of messages to consume before exiting. If not "
        "set, consumption is continual.",
    )
    parser.add_argument(
        "--timeout-ms",
        type=int,
        help="If specified, exit if no message is available for consumption for "
        "the specified interval.",
    )
    parser.add_argument("--group", help="The consumer group id of the consumer.")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="The properties to initialize the message formatter: "
        "print.timestamp, print.key, print.offset, print.partition, "
        "print.headers, print.value, key.separator, line.separator, "
        "headers.separator, null.literal, key.deserializer, "
        "value.deserializer, headers.deserializer",
    )
    parser.add_argument(
        "--formatter",
        default=FORMATTERS[1],
        help="The name of a class to use for formatting kafka messages for "
        "display. (default: org.apache.kafka.tools.consumer."
        "DefaultMessageFormatter)",
    )
    parser.add_argument(
        "--key-deserializer",
        metavar="deserializer for key",
        help="A Kafka deserializer class for keys (the formatter's "
        "key.deserializer; --property takes precedence)",
    )
    parser.add_argument(
        "--value-deserializer",
        metavar="deserializer for values",
        help="A Kafka deserializer class for values (the formatter's "
        "value.deserializer; --property takes precedence)",
    )
    parser.add_argument(
        "--formatter-config",
        metavar="FILE",
        help="Config properties file to initialize the message formatter. Note "
        "that [property] takes precedence over this config.",
    )
    parser.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A mechanism to pass user-defined properties in the form key=value to the consumer.",
    )
    parser.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="FILE",
        help="Consumer config properties file. Note that [consumer-property] "
        "takes precedence over this config.",
    )
    parser.add_argument(
        "--isolation-level",
        choices=["read_committed", "read_uncommitted"],
        default="read_uncommitted",
        help="read_committed: only committed transactional records (and non-transactional ones)",
    )


def formatter_for(args: argparse.Namespace) -> DefaultMessageFormatter:
    if args.formatter not in FORMATTERS:
        raise ValueError(
            f"The formatter {args.formatter} is not available in riverlog; use {FORMATTERS[1]}"
        )
    props = load_properties(args.formatter_config) if args.formatter_config else {}
    if args.key_deserializer:
        props["key.deserializer"] = args.key_deserializer
    if args.value_deserializer:
        props["value.deserializer"] = args.value_deserializer
    props.update(_properties(args.property))
    return DefaultMessageFormatter.configure(props)


async def _consume(args: argparse.Namespace, counted: list[int]) -> None:
    if (args.topic is None) == (args.include is None):
        raise ValueError("Exactly one of --include/--topic is required.")
    formatter = formatter_for(args)
    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "console-consumer",
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.auto.commit": args.group is not None,
        "isolation.level": args.isolation_level,
        **({"group.id": args.group} if args.group else {}),
        # a pattern needs a group; Kafka's tool makes one up likewise
        **(
            {"group.id": f"console-consumer-{random.randrange(100000)}"}
            if args.include is not None and not args.group
            else {}
        ),
        **client_properties(args.consumer_config, args.consumer_property, "--consumer-property"),
    }
    async with AsyncConsumer(config) as consumer:
        if args.include is not None:
            if args.partition is not None:
                raise ValueError("The topic is required when partition is specified.")
            consumer.subscribe(pattern=args.include)
        elif args.group is not None and args.partition is None:
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
                sys.stdout.buffer.write(formatter.format(r))
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
