"""`riverlog broker-api-versions`: Kafka's `kafka-broker-api-versions.sh`, same flags and
output.

    riverlog broker-api-versions --bootstrap-server HOST:PORT [--command-config FILE]

For every broker in the cluster's metadata, one block:

    127.0.0.1:9092 (id: 0 rack: null) -> (
    \tProduce(0): 0 to 11 [usable: 11],
    \t...
    )

as Kafka 3.9's NodeApiVersions prints it: keys in ascending order, "N" alone when the broker
has one version, "[usable: V]" (V: the lower of the broker's highest and Kafka 3.9's latest),
"[unusable: node too old/new]", "UNKNOWN(k)" for keys Kafka 3.9 does not know, and
"Name(k): UNSUPPORTED" for the client APIs the broker does not list. A broker that cannot be
reached prints "host:port (id: N rack: R) -> ERROR: <exception>".
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from riverlog.cli.kafka_api_keys import API_KEYS
from riverlog.cli.tool_config import add_command_config, admin_config, command_properties
from riverlog.cli.tool_errors import Waiter
from riverlog.client.cluster import Cluster
from riverlog.client.connection import Connection
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import MetadataRequest, MetadataResponse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="server(s) to use for bootstrapping",
        help="REQUIRED: The server to connect to.",
    )
    add_command_config(parser)


def _version_text(api_key: int, low: int, high: int) -> str:
    known = API_KEYS.get(api_key)
    name = f"{known[0]}({api_key})" if known else f"UNKNOWN({api_key})"
    text = f"{name}: {low}" if low == high else f"{name}: {low} to {high}"
    if known is None:
        return text
    _, oldest, latest, _ = known
    if latest < low:
        return text + " [unusable: node too new]"
    if high < oldest:
        return text + " [unusable: node too old]"
    return text + f" [usable: {min(latest, high)}]"


def versions_text(versions: dict[int, tuple[int, int]]) -> str:
    """NodeApiVersions.toString(true) for a broker's ApiVersions answer."""
    lines = {k: _version_text(k, low, high) for k, (low, high) in versions.items()}
    for k, (name, _, _, client_api) in API_KEYS.items():
        if client_api and k not in lines:
            lines[k] = f"{name}({k}): UNSUPPORTED"
    return "(\n\t" + ",\n\t".join(lines[k] for k in sorted(lines)) + "\n)"


async def _run(args: argparse.Namespace) -> list[str]:
    cluster = Cluster.from_config(
        admin_config(args.bootstrap_server, "broker-api-versions", command_properties(args))
    )
    waiter = Waiter()
    out = []
    try:
        while True:  # Kafka's tool waits until the metadata lists a broker
            conn = await cluster.any_connection()
            response = await conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
            assert isinstance(response, MetadataResponse)
            if response.brokers:
                break
            waiter.waiting_for("the cluster's metadata to list a broker")
            await asyncio.sleep(0.05)
        for b in response.brokers:
            node = f"{b.host}:{b.port} (id: {b.node_id} rack: {b.rack or 'null'})"
            try:
                broker = await Connection.open(b.host, b.port, client_id=cluster.client_id)
            except (OSError, TimeoutError, ConnectionError) as e:
                out.append(
                    f"{node} -> ERROR: org.apache.kafka.common.errors.DisconnectException: {e}\n"
                )
                continue
            try:
                out.append(f"{node} -> {versions_text(broker.broker_versions)}\n")
            finally:
                await broker.close()
    finally:
        await cluster.close()
    return out


def run(args: argparse.Namespace) -> int:
    try:
        blocks = asyncio.run(_run(args))
    except (KafkaError, ValueError, OSError) as e:
        print(e, file=sys.stderr)
        return 1
    sys.stdout.write("".join(blocks))
    return 0
