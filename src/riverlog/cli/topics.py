"""`riverlog topics`: Kafka's `kafka-topics.sh`, same flags and output.

    riverlog topics --bootstrap-server HOST:PORT --list
    riverlog topics --bootstrap-server HOST:PORT --create --topic T [--partitions N]
                    [--replication-factor R] [--config k=v ...] [--if-not-exists]
    riverlog topics --bootstrap-server HOST:PORT --describe [--topic T]
                    [--under-replicated-partitions | --unavailable-partitions]
    riverlog topics --bootstrap-server HOST:PORT --alter --topic T --partitions N
    riverlog topics --bootstrap-server HOST:PORT --delete --topic T [--if-exists]

Errors print as Kafka's tool prints them ("Error while executing topic command : ...") and
exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
from collections.abc import Awaitable

from riverlog.client import admin_requests as admin
from riverlog.client.connection import Connection, connect_any
from riverlog.protocol.error_codes import KafkaError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker(s) to connect to"
    )
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


def _configs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--config expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


async def _run(args: argparse.Namespace) -> None:
    conn = await connect_any(args.bootstrap_server, client_id="riverlog-topics")
    try:
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
            await _maybe_missing(
                admin.create_partitions(conn, _topic(args), args.partitions), args.if_exists
            )
        elif args.delete:
            await _maybe_missing(admin.delete_topic(conn, _topic(args)), args.if_exists)
    finally:
        await conn.close()


def _topic(args: argparse.Namespace) -> str:
    if not args.topic:
        raise ValueError("this action needs --topic")
    return str(args.topic)


async def _create(conn: Connection, args: argparse.Namespace) -> None:
    name = _topic(args)
    try:
        await admin.create_topic(
            conn, name, args.partitions or -1, args.replication_factor or -1, _configs(args.config)
        )
    except KafkaError as e:
        if args.if_not_exists and e.error.name == "TOPIC_ALREADY_EXISTS":
            return
        raise
    print(f"Created topic {name}.")


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
    only_some = args.under_replicated_partitions or args.unavailable_partitions
    for t in topics:
        if args.exclude_internal and t.is_internal:
            continue
        if not only_some:
            overrides = await admin.topic_config_overrides(conn, t.name)
            factor = len(t.partitions[0].replicas) if t.partitions else 0
            configs = ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))
            print(
                f"Topic: {t.name}\tTopicId: {_topic_id(t)}\tPartitionCount: {len(t.partitions)}"
                f"\tReplicationFactor: {factor}\tConfigs: {configs}"
            )
        for p in t.partitions:
            if args.under_replicated_partitions and len(p.isr) >= len(p.replicas):
                continue
            if args.unavailable_partitions and p.leader >= 0:
                continue
            leader = p.leader if p.leader >= 0 else "none"
            print(
                f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {leader}"
                f"\tReplicas: {','.join(map(str, p.replicas))}"
                f"\tIsr: {','.join(map(str, p.isr))}"
            )


def _topic_id(t: admin.TopicInfo) -> str:
    return base64.urlsafe_b64encode(t.topic_id.bytes).decode().rstrip("=")


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_run(args))
    except (KafkaError, ValueError, ConnectionError) as e:
        print(f"Error while executing topic command : {e}", file=sys.stderr)
        return 1
    return 0
