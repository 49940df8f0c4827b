"""`riverlog log-dirs`: Kafka's `kafka-log-dirs.sh --describe`, same flags and output.

    riverlog log-dirs --bootstrap-server HOST:PORT --describe [--broker-list 0,1]
                      [--topic-list t1,t2] [--command-config FILE]

Prints "Querying brokers for log directories information", "Received log directory
information from brokers 0,1" and one line of JSON, keys and lists in the order Kafka's tool
writes them (its HashMaps'): `{"brokers":[{"broker":0,"logDirs":[{"partitions":[{"partition":
"t-0","size":0,"offsetLag":0,"isFuture":false}],"error":null,"logDir":"/data"}]}],
"version":1}`. A broker in --broker-list that is not in the cluster is an error, worded as
Kafka words it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from riverlog.cli.java_order import hash_map_order, string_hash, topic_partition_hash
from riverlog.cli.tool_config import add_command_config, admin_config, command_properties
from riverlog.cli.tool_errors import exception_name
from riverlog.client.cluster import Cluster
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse


class CommandError(ValueError):
    """Flags the tool refuses."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="The server(s) to use for bootstrapping",
        help="REQUIRED: the server(s) to use for bootstrapping",
    )
    parser.add_argument(
        "--describe",
        action="store_true",
        required=True,
        help="Describe the specified log directories on the specified brokers.",
    )
    parser.add_argument(
        "--topic-list",
        default="",
        metavar="Topic list",
        help='The list of topics to be queried in the form "topic1,topic2,'
        'topic3". All topics will be queried if no topic list is specified',
    )
    parser.add_argument(
        "--broker-list",
        default="",
        metavar="Broker list",
        help='The list of brokers to be queried in the form "0,1,2". All '
        "brokers in the cluster will be queried if no broker list is "
        "specified",
    )
    add_command_config(parser)


def _ordered(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: obj[k] for k in hash_map_order(obj, string_hash)}


def describe_json(
    results: dict[int, list[DescribeLogDirsResponse.DescribeLogDirsResult]], topics: set[str]
) -> str:
    """Kafka's JSON for the brokers' DescribeLogDirs results."""
    brokers = []
    for broker in hash_map_order(results, lambda b: b):
        dirs = []
        by_dir = {r.log_dir: r for r in results[broker]}
        for log_dir in hash_map_order(by_dir, string_hash):
            r = by_dir[log_dir]
            replicas = {
                (t.name, p.partition_index): p
                for t in r.topics
                for p in t.partitions
                if not topics or t.name in topics
            }
            partitions = [
                _ordered(
                    {
                        "partition": f"{tp[0]}-{tp[1]}",
                        "size": p.partition_size,
                        "offsetLag": p.offset_lag,
                        "isFuture": p.is_future_key,
                    }
                )
                for tp, p in (
                    (tp, replicas[tp])
                    for tp in hash_map_order(replicas, lambda tp: topic_partition_hash(*tp))
                )
            ]
            error = None
            if r.error_code:
                error = "org.apache.kafka.common.errors." + exception_name(
                    KafkaError(for_code(r.error_code))
                )
            dirs.append(_ordered({"logDir": log_dir, "error": error, "partitions": partitions}))
        brokers.append(_ordered({"broker": broker, "logDirs": dirs}))
    return json.dumps(_ordered({"version": 1, "brokers": brokers}), separators=(",", ":"))


async def _describe(args: argparse.Namespace) -> int:
    topics = {t for t in args.topic_list.split(",") if t}
    try:
        wanted = {int(b) for b in args.broker_list.split(",") if b}
    except ValueError:
        raise CommandError(f"Invalid broker list: {args.broker_list}") from None
    cluster = Cluster.from_config(
        admin_config(args.bootstrap_server, "log-dirs-tool", command_properties(args))
    )
    try:
        await cluster.refresh(allow_auto_create=False)
        known = set(cluster.brokers)
        missing = wanted - known
        if missing:
            raise CommandError(
                "ERROR: The given brokers do not exist from --broker-list: "
                f"{','.join(map(str, sorted(missing)))}. Current existent brokers: "
                f"{','.join(map(str, sorted(known)))}"
            )
        brokers = sorted(wanted or known)
        print("Querying brokers for log directories information", flush=True)
        results = {}
        for b in brokers:
            response = await cluster.send(b, DescribeLogDirsRequest(topics=None))
            assert isinstance(response, DescribeLogDirsResponse)
            results[b] = response.results
    finally:
        await cluster.close()
    print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
    print(describe_json(results, topics))
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_describe(args))
    except (KafkaError, ValueError, OSError) as e:
        print(e, file=sys.stderr)
        return 1
