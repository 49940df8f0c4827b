"""The `riverlog` command: one entry point, a subcommand per tool.

Kafka's own tool names (kafka-topics, kafka-console-producer, ...) arrive with the broker as
subcommands and as their own console scripts; what exists today is listed by `riverlog --help`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from riverlog import __version__
from riverlog.cli import acls as cli_acls
from riverlog.cli import cluster as cli_cluster
from riverlog.cli import configs as cli_configs
from riverlog.cli import console as cli_console
from riverlog.cli import consumer_groups as cli_groups
from riverlog.cli import leader_election as cli_leader_election
from riverlog.cli import mirror_maker as cli_mirror_maker
from riverlog.cli import perf as cli_perf
from riverlog.cli import reassign_partitions as cli_reassign
from riverlog.cli import replica_verification as cli_replica_verification
from riverlog.cli import server as cli_server
from riverlog.cli import state_change_log_merger as cli_merger
from riverlog.cli import topics as cli_topics
from riverlog.cli import transactions as cli_transactions
from riverlog.cli import verifiable as cli_verifiable
from riverlog.cli import web_console as cli_web_console


def _decode_request(args: argparse.Namespace) -> int:
    from riverlog.protocol.exceptions import ProtocolError
    from riverlog.protocol.framing import decode_request

    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    if args.size_prefixed:
        data = data[4:]
    try:
        request = decode_request(data)
    except ProtocolError as e:
        print(f"riverlog: cannot decode: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"{request.header!r}\n{request.body!r}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from riverlog.demo import main as demo_main

    return demo_main()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="riverlog", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"riverlog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    decode = sub.add_parser("decode-request", help="decode one Kafka request frame from a file")
    decode.add_argument("file", help="file holding the frame ('-' for standard input)")
    decode.add_argument(
        "--size-prefixed", action="store_true", help="the frame starts with its 4-byte size"
    )
    decode.set_defaults(run=_decode_request)
    demo = sub.add_parser("demo", help="run the demo that `./dev run` runs")
    demo.set_defaults(run=_demo)
    server = sub.add_parser(
        "server", help="run a broker (single node, or --zookeeper to join a cluster)"
    )
    cli_server.add_arguments(server)
    server.set_defaults(run=cli_server.run)
    topics = sub.add_parser(
        "topics", help="create, list, describe, alter, delete topics (kafka-topics.sh)"
    )
    cli_topics.add_arguments(topics)
    topics.set_defaults(run=cli_topics.run)
    producer = sub.add_parser(
        "console-producer", help="lines from stdin to a topic (kafka-console-producer.sh)"
    )
    cli_console.add_producer_arguments(producer)
    producer.set_defaults(run=cli_console.run_producer)
    consumer = sub.add_parser(
        "console-consumer", help="a topic's records to stdout (kafka-console-consumer.sh)"
    )
    cli_console.add_consumer_arguments(consumer)
    consumer.set_defaults(run=cli_console.run_consumer)
    pperf = sub.add_parser(
        "producer-perf-test", help="producer throughput and latency (kafka-producer-perf-test.sh)"
    )
    cli_perf.add_producer_arguments(pperf)
    pperf.set_defaults(run=cli_perf.run_producer)
    cperf = sub.add_parser(
        "consumer-perf-test", help="consumer throughput (kafka-consumer-perf-test.sh)"
    )
    cli_perf.add_consumer_arguments(cperf)
    cperf.set_defaults(run=cli_perf.run_consumer)
    groups = sub.add_parser(
        "consumer-groups",
        help="list, describe, reset offsets of, delete groups (kafka-consumer-groups.sh)",
    )
    cli_groups.add_arguments(groups)
    groups.set_defaults(run=cli_groups.run)
    reassign = sub.add_parser(
        "reassign-partitions",
        help="move partitions to other brokers, change replication factors "
        "(kafka-reassign-partitions.sh)",
    )
    cli_reassign.add_arguments(reassign)
    reassign.set_defaults(run=cli_reassign.run)

    configs = sub.add_parser(
        "configs", help="describe and alter topic and broker configs (kafka-configs.sh)"
    )
    cli_configs.add_arguments(configs)
    configs.set_defaults(run=cli_configs.run)
    acls = sub.add_parser("acls", help="add, remove and list ACLs (kafka-acls.sh)")
    cli_acls.add_arguments(acls)
    acls.set_defaults(run=cli_acls.run)
    verification = sub.add_parser(
        "replica-verification",
        help="check that all replicas hold the same data (kafka-replica-verification.sh)",
    )
    cli_replica_verification.add_arguments(verification)
    verification.set_defaults(run=cli_replica_verification.run)
    merger = sub.add_parser(
        "state-change-log-merger",
        help="merge brokers' state-change logs in time order (kafka.tools.StateChangeLogMerger)",
    )
    cli_merger.add_arguments(merger)
    merger.set_defaults(run=cli_merger.run)

    election = sub.add_parser(
        "leader-election", help="elect preferred or unclean leaders (kafka-leader-election.sh)"
    )
    cli_leader_election.add_arguments(election)
    election.set_defaults(run=cli_leader_election.run)

    vproducer = sub.add_parser(
        "verifiable-producer",
        help="produce increasing integers, a JSON event per send and ack "
        "(kafka-verifiable-producer.sh)",
    )
    cli_verifiable.add_producer_arguments(vproducer)
    vproducer.set_defaults(run=cli_verifiable.run_producer)
    vconsumer = sub.add_parser(
        "verifiable-consumer",
        help="consume in a group, a JSON event per poll, commit and rebalance "
        "(kafka-verifiable-consumer.sh)",
    )
    cli_verifiable.add_consumer_arguments(vconsumer)
    vconsumer.set_defaults(run=cli_verifiable.run_consumer)

    mirror = sub.add_parser(
        "mirror-maker", help="mirror topics between clusters (kafka-mirror-maker.sh, MM1)"
    )
    cli_mirror_maker.add_mm1_arguments(mirror)
    mirror.set_defaults(run=cli_mirror_maker.run_mm1)
    mirror2 = sub.add_parser(
        "connect-mirror-maker",
        help="MirrorMaker 2 flows from one properties file (connect-mirror-maker.sh)",
    )
    cli_mirror_maker.add_mm2_arguments(mirror2)
    mirror2.set_defaults(run=cli_mirror_maker.run_mm2)

    web_console = sub.add_parser(
        "console", help="the web console: brokers, topics, groups with lag over time, messages"
    )
    cli_web_console.add_arguments(web_console)
    web_console.set_defaults(run=cli_web_console.run)

    transactions = sub.add_parser(
        "transactions", help="list, describe, find and abort transactions (kafka-transactions.sh)"
    )
    cli_transactions.add_arguments(transactions)
    transactions.set_defaults(run=cli_transactions.run)

    cluster = sub.add_parser(
        "cluster", help="start or stop ZooKeeper + N brokers on loopback; describe a cluster"
    )
    cli_cluster.add_arguments(cluster)
    cluster.set_defaults(run=cli_cluster.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
