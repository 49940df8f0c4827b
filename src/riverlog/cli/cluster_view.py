"""`riverlog cluster describe`: the cluster at a glance, from one Metadata answer.

    riverlog cluster describe --bootstrap-server HOST:PORT

Prints the cluster id, the controller, the live brokers (id, host:port, rack), the
under-replicated partitions (ISR smaller than the replicas) and the offline ones (no leader),
each in `kafka-topics.sh --describe`'s partition format, and the leader balance: per broker,
how many partitions it leads, how many it is the preferred replica (first replica) of, and
its leader imbalance as the controller measures it for `leader.imbalance.per.broker.percentage`
— the share of its preferred partitions that it does not lead. Brokers that hold replicas
but are not alive are listed there too, marked so. Exits with status 1 when the cluster
cannot be asked.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from riverlog.cli import command_config
from riverlog.client import admin_requests as admin
from riverlog.client.connection import connect_any
from riverlog.protocol.error_codes import KafkaError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker(s) to connect to"
    )
    command_config.add_argument(parser)


def _partition_line(topic: str, p: admin.PartitionInfo) -> str:
    leader = p.leader if p.leader >= 0 else "none"
    return (
        f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}"
        f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
    )


def describe_lines(view: admin.ClusterView) -> list[str]:
    """The report, line by line."""
    controller = view.controller if view.controller >= 0 else "none"
    lines = [
        f"Cluster: {view.cluster_id or 'unknown'}",
        f"Controller: {controller}",
        f"Brokers: {len(view.brokers)}",
    ]
    lines += [
        f"\tBroker: {b.node_id}\tHost: {b.host}:{b.port}\tRack: {b.rack or 'none'}"
        for b in view.brokers
    ]
    partitions = [(t.name, p) for t in view.topics for p in t.partitions]
    under = [_partition_line(t, p) for t, p in partitions if len(p.isr) < len(p.replicas)]
    offline = [_partition_line(t, p) for t, p in partitions if p.leader < 0]
    lines += [f"Under-replicated partitions: {len(under)}", *under]
    lines += [f"Offline partitions: {len(offline)}", *offline]
    lines.append("Leader balance (leaders / preferred leaderships):")
    alive = {b.node_id for b in view.brokers}
    leads = dict.fromkeys(alive, 0)
    preferred = dict.fromkeys(alive, 0)
    preferred_not_led = dict.fromkeys(alive, 0)
    for _, p in partitions:
        if p.leader >= 0:
            leads[p.leader] = leads.get(p.leader, 0) + 1
        if p.replicas:
            first = p.replicas[0]
            preferred[first] = preferred.get(first, 0) + 1
            if p.leader != first:
                preferred_not_led[first] = preferred_not_led.get(first, 0) + 1
    for broker in sorted(set(leads) | set(preferred)):
        count = preferred.get(broker, 0)
        ratio = f"{100 * preferred_not_led.get(broker, 0) // count}%" if count else "-"
        state = "" if broker in alive else "\t(not alive)"
        lines.append(
            f"\tBroker: {broker}\tLeaders: {leads.get(broker, 0)}\tPreferred: {count}"
            f"\tImbalance: {ratio}{state}"
        )
    return lines


async def _run(args: argparse.Namespace) -> None:
    conn = await connect_any(
        args.bootstrap_server, client_id="riverlog-cluster", security=command_config.security(args)
    )
    try:
        view = await admin.describe_cluster(conn)
    finally:
        await conn.close()
    print("\n".join(describe_lines(view)))


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_run(args))
    except (KafkaError, ConnectionError) as e:
        print(f"riverlog cluster describe: {e}", file=sys.stderr)
        return 1
    return 0
