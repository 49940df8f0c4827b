"""`riverlog topics`: Kafka's `kafka-topics.sh`, same flags and output.

    riverlog topics --bootstrap-server HOST:PORT --list
    riverlog topics --bootstrap-server HOST:PORT --create --topic T [--partitions N]
                    [--replication-factor R | --replica-assignment 0:1,1:2] [--config k=v ...]
                    [--if-not-exists]
    riverlog topics --bootstrap-server HOST:PORT --describe [--topic T]
                    [--under-replicated-partitions | --unavailable-partitions |
                     --under-min-isr-partitions | --at-min-isr-partitions |
                     --topics-with-overrides]
    riverlog topics --bootstrap-server HOST:PORT --alter --topic T --partitions N
                    [--replica-assignment 0:1,1:2,2:0]
    riverlog topics --bootstrap-server HOST:PORT --delete --topic T [--if-exists]

Every action takes `--command-config FILE` (Kafka client properties). Partition lines end
in "Elr: N/A\tLastKnownElr: N/A" as Kafka 3.9's tool prints them for a broker without
DescribeTopicPartitions (riverlog has no eligible leader replicas). A topic name with '.' or
'_' gets Kafka's metric-name collision warning. Errors print as Kafka's tool prints them
("Error while executing topic command : ...") and exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
from collections.abc import Awaitable

from riverlog.cli import command_config
from riverlog.cli.tool_config import admin_config, command_properties
from riverlog.client import admin_requests as admin
from riverlog.client.cluster import Cluster
from riverlog.client.connection import Connection
from riverlog.protocol.error_codes import KafkaError

INT32_MAX = 2**31 - 1
INT16_MAX = 2**15 - 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker(s) to connect to"
    )
    command_config.add_argument(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name, text in (
        ("--list", "list all topics"),
        ("--create", "create a topic"),
        ("--describe", "describe topics"),
        ("--alter", "add partitions"),
        ("--delete", "delete a topic"),
    ):
        action.add_argument(name, action="store_true", help=text)
    parser.add_argument("--topic", help="the topic")
    parser.add_argument("--partitions", type=int, help="number of partitions")
    parser.add_argument("--replication-factor", type=int, help="replicas per partition")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config override (repeatable)",
    )
    parser.add_argument(
        "--if-not-exists", action="store_true", help="with --create: no error if the topic exists"
    )
    parser.add_argument(
        "--if-exists",
        action="store_true",
        help="with --alter/--delete/--describe: no error if it does not",
    )
    parser.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="with --describe: only partitions whose ISR is smaller than their replicas",
    )
    parser.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="with --describe: only partitions without a leader",
    )
    parser.add_argument(
        "--exclude-internal",
        action="store_true",
        help="leave out internal topics from --list and --describe",
    )
    parser.add_argument(
        "--replica-assignment",
        metavar="broker_id_for_part1_replica1:broker_id_for_part1_replica2,...",
        help=(
            "A list of manual partition-to-broker assignments for the topic being created or "
            "altered."
        ),
    )
    parser.add_argument(
        "--under-min-isr-partitions",
        action="store_true",
        help="with --describe: only partitions whose isr count is less than the configured minimum",
    )
    parser.add_argument(
        "--at-min-isr-partitions",
        action="store_true",
        help="with --describe: only partitions whose isr count is equal to the configured minimum",
    )
    parser.add_argument(
        "--topics-with-overrides",
        action="store_true",
        help="with --describe: only topics that have overridden configs",
    )


COLLISION_WARNING = (
    "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore "
    "('_') could collide. To avoid issues it is best to use either, but not both."
)
NO_ELR = "\tElr: N/A\tLastKnownElr: N/A"


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """Kafka's `--replica-assignment`: partitions separated by ',', replicas by ':'."""
    out: dict[int, list[int]] = {}
    for i, item in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in item.split(":")]
        except ValueError:
            raise ValueError(f"Invalid replica assignment {text!r}") from None
        duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
        if duplicates:
            raise ValueError(
                "Partition replica lists may not contain duplicate entries: "
                + ",".join(map(str, duplicates))
            )
        if out and len(brokers) != len(out[0]):
            raise ValueError(f"Partition {i} has different replication factor: {brokers}")
        out[i] = brokers
    return out


def _configs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--config expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


async def _run(args: argparse.Namespace) -> None:
    config = admin_config(args.bootstrap_server, "riverlog-topics", command_properties(args))
    cluster = Cluster.from_config(config)
    try:
        conn = await cluster.any_connection()
        if args.list:
            for t in await admin.describe_topics(conn):
                if not (args.exclude_internal and t.is_internal):
                    print(t.name)
        elif args.create:
            await _create(conn, args)
        elif args.describe:
            await _describe(conn, args)
        elif args.alter:
            if args.partitions is None:
                raise ValueError("--alter needs --partitions")
            await _maybe_missing(_alter(conn, args), args.if_exists)
        elif args.delete:
            await _maybe_missing(admin.delete_topic(conn, _topic(args)), args.if_exists)
    finally:
        await cluster.close()


def _topic(args: argparse.Namespace) -> str:
    if not args.topic:
        raise ValueError("this action needs --topic")
    return str(args.topic)


async def _create(conn: Connection, args: argparse.Namespace) -> None:
    name = _topic(args)
    factor, partitions = args.replication_factor, args.partitions
    if factor is not None and not 1 <= factor <= 32767:
        raise ValueError("The replication factor must be between 1 and 32767 inclusive")
    if partitions is not None and partitions < 1:
        raise ValueError("The partitions must be greater than 0")
    if partitions is not None and partitions > INT32_MAX:
        raise ValueError(f"The partitions must be at most {INT32_MAX}")
    assignment = None
    if args.replica_assignment is not None:
        if factor is not None or partitions is not None:
            raise ValueError(
                'Option "[replica-assignment]" can\'t be used with option '
                '"[partitions],[replication-factor]"'
            )
        assignment = parse_replica_assignment(args.replica_assignment)
    if "." in name or "_" in name:
        print(COLLISION_WARNING)
    try:
        await admin.create_topic(
            conn,
            name,
            -1 if partitions is None else partitions,
            -1 if factor is None else factor,
            _configs(args.config),
            assignment=assignment,
        )
    except KafkaError as e:
        if args.if_not_exists and e.error.name == "TOPIC_ALREADY_EXISTS":
            return
        raise
    print(f"Created topic {name}.")


async def _alter(conn: Connection, args: argparse.Namespace) -> None:
    """Kafka's alterTopic: more partitions; with `--replica-assignment` (listing every
    partition, as for a new topic) the entries past the current partitions are the new
    partitions' replicas."""
    name = _topic(args)
    assignments = None
    if args.replica_assignment is not None:
        given = parse_replica_assignment(args.replica_assignment)
        [described] = await admin.describe_topics(conn, [name])
        current = len(described.partitions)
        assignments = [replicas for index, replicas in sorted(given.items()) if index >= current]
    await admin.create_partitions(conn, name, args.partitions, assignments)


async def _maybe_missing(operation: Awaitable[None], if_exists: bool) -> None:
    try:
        await operation
    except KafkaError as e:
        if not (if_exists and e.error.name == "UNKNOWN_TOPIC_OR_PARTITION"):
            raise


async def _describe(conn: Connection, args: argparse.Namespace) -> None:
    try:
        topics = await admin.describe_topics(conn, [args.topic] if args.topic else None)
    except KafkaError as e:
        if args.if_exists and e.error.name == "UNKNOWN_TOPIC_OR_PARTITION":
            return
        raise
    filters = (
        args.under_replicated_partitions,
        args.unavailable_partitions,
        args.under_min_isr_partitions,
        args.at_min_isr_partitions,
    )
    only_some = any(filters)
    for t in topics:
        if args.exclude_internal and t.is_internal:
            continue
        overrides = await admin.topic_config_overrides(conn, t.name)
        if args.topics_with_overrides and not overrides:
            continue
        min_isr = 1
        if args.under_min_isr_partitions or args.at_min_isr_partitions:
            min_isr = await _min_isr(conn, t.name)
        if not only_some:
            factor = len(t.partitions[0].replicas) if t.partitions else 0
            configs = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
            print(
                f"Topic: {t.name}\tTopicId: {_topic_id(t)}\tPartitionCount: {len(t.partitions)}"
                f"\tReplicationFactor: {factor}\tConfigs: {configs}"
            )
        if args.topics_with_overrides:
            continue  # Kafka's tool prints only the topics' lines then
        for p in t.partitions:
            wanted = (
                len(p.isr) < len(p.replicas),
                p.leader < 0,
                p.leader < 0 or len(p.isr) < min_isr,
                len(p.isr) == min_isr,
            )
            if only_some and not any(f and w for f, w in zip(filters, wanted, strict=True)):
                continue
            leader = p.leader if p.leader >= 0 else "none"
            print(
                f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {leader}"
                f"\tReplicas: {','.join(map(str, p.replicas))}"
                f"\tIsr: {','.join(map(str, p.isr))}{NO_ELR}"
            )


async def _min_isr(conn: Connection, topic: str) -> int:
    """The topic's effective `min.insync.replicas`."""
    for entry in await admin.describe_configs(conn, admin.TOPIC_RESOURCE, topic):
        if entry.name == "min.insync.replicas" and entry.value is not None:
            return int(entry.value)
    return 1


def _topic_id(t: admin.TopicInfo) -> str:
    return base64.urlsafe_b64encode(t.topic_id.bytes).decode().rstrip("=")


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_run(args))
    except (KafkaError, ValueError, OSError) as e:
        print(f"Error while executing topic command : {e}", file=sys.stderr)
        return 1
    return 0
