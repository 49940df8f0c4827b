"""The `riverlog` command: one entry point, a subcommand per tool.

Kafka's own tool names (kafka-topics, kafka-console-producer, ...) arrive with the broker as
subcommands and as their own console scripts; what exists today is listed by `riverlog --help`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riverlog import __version__
from riverlog.cli import acls as cli_acls
from riverlog.cli import broker_api_versions as cli_broker_api_versions
from riverlog.cli import cluster as cli_cluster
from riverlog.cli import configs as cli_configs
from riverlog.cli import console as cli_console
from riverlog.cli import consumer_groups as cli_groups
from riverlog.cli import delete_records as cli_delete_records
from riverlog.cli import dump_log as cli_dump_log
from riverlog.cli import get_offsets as cli_get_offsets
from riverlog.cli import leader_election as cli_leader_election
from riverlog.cli import log_dirs as cli_log_dirs
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


@dataclass(frozen=True)
class Tool:
    """One subcommand: its name, one line of help, how it adds its flags, what runs it."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommand takes no flags."""


def _decode_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="file holding the frame ('-' for standard input)")
    parser.add_argument(
        "--size-prefixed", action="store_true", help="the frame starts with its 4-byte size"
    )


TOOLS: tuple[Tool, ...] = (
    Tool(
        "decode-request",
        "decode one Kafka request frame from a file",
        _decode_arguments,
        _decode_request,
    ),
    Tool("demo", "run the demo that `./dev run` runs", _no_arguments, _demo),
    Tool(
        "server",
        "run a broker (single node, or --zookeeper to join a cluster)",
        cli_server.add_arguments,
        cli_server.run,
    ),
    Tool(
        "topics",
        "create, list, describe, alter, delete topics (kafka-topics.sh)",
        cli_topics.add_arguments,
        cli_topics.run,
    ),
    Tool(
        "console-producer",
        "lines from stdin to a topic (kafka-console-producer.sh)",
        cli_console.add_producer_arguments,
        cli_console.run_producer,
    ),
    Tool(
        "console-consumer",
        "a topic's records to stdout (kafka-console-consumer.sh)",
        cli_console.add_consumer_arguments,
        cli_console.run_consumer,
    ),
    Tool(
        "producer-perf-test",
        "producer throughput and latency (kafka-producer-perf-test.sh)",
        cli_perf.add_producer_arguments,
        cli_perf.run_producer,
    ),
    Tool(
        "consumer-perf-test",
        "consumer throughput (kafka-consumer-perf-test.sh)",
        cli_perf.add_consumer_arguments,
        cli_perf.run_consumer,
    ),
    Tool(
        "consumer-groups",
        "list, describe, reset offsets of, delete groups (kafka-consumer-groups.sh)",
        cli_groups.add_arguments,
        cli_groups.run,
    ),
    Tool(
        "reassign-partitions",
        "move partitions to other brokers, change replication "
        "factors (kafka-reassign-partitions.sh)",
        cli_reassign.add_arguments,
        cli_reassign.run,
    ),
    Tool(
        "configs",
        "describe and alter topic and broker configs (kafka-configs.sh)",
        cli_configs.add_arguments,
        cli_configs.run,
    ),
    Tool("acls", "add, remove and list ACLs (kafka-acls.sh)", cli_acls.add_arguments, cli_acls.run),
    Tool(
        "replica-verification",
        "check that all replicas hold the same data (kafka-replica-verification.sh)",
        cli_replica_verification.add_arguments,
        cli_replica_verification.run,
    ),
    Tool(
        "state-change-log-merger",
        "merge brokers' state-change logs in time order (kafka.tools.StateChangeLogMerger)",
        cli_merger.add_arguments,
        cli_merger.run,
    ),
    Tool(
        "leader-election",
        "elect preferred or unclean leaders (kafka-leader-election.sh)",
        cli_leader_election.add_arguments,
        cli_leader_election.run,
    ),
    Tool(
        "get-offsets",
        "partitions' offsets by time (kafka-get-offsets.sh)",
        cli_get_offsets.add_arguments,
        cli_get_offsets.run,
    ),
    Tool(
        "delete-records",
        "delete records up to an offset (kafka-delete-records.sh)",
        cli_delete_records.add_arguments,
        cli_delete_records.run,
    ),
    Tool(
        "log-dirs",
        "brokers' log directories and replica sizes (kafka-log-dirs.sh)",
        cli_log_dirs.add_arguments,
        cli_log_dirs.run,
    ),
    Tool(
        "dump-log",
        "print segment, index and snapshot files (kafka-dump-log.sh)",
        cli_dump_log.add_arguments,
        cli_dump_log.run,
    ),
    Tool(
        "broker-api-versions",
        "each broker's API versions (kafka-broker-api-versions.sh)",
        cli_broker_api_versions.add_arguments,
        cli_broker_api_versions.run,
    ),
    Tool(
        "mirror-maker",
        "mirror topics between clusters (kafka-mirror-maker.sh, MM1)",
        cli_mirror_maker.add_mm1_arguments,
        cli_mirror_maker.run_mm1,
    ),
    Tool(
        "connect-mirror-maker",
        "MirrorMaker 2 flows from one properties file (connect-mirror-maker.sh)",
        cli_mirror_maker.add_mm2_arguments,
        cli_mirror_maker.run_mm2,
    ),
    Tool(
        "console",
        "the web console: brokers, topics, groups with lag over time, messages",
        cli_web_console.add_arguments,
        cli_web_console.run,
    ),
    Tool(
        "transactions",
        "list, describe, find and abort transactions (kafka-transactions.sh)",
        cli_transactions.add_arguments,
        cli_transactions.run,
    ),
    Tool(
        "verifiable-producer",
        "produce increasing integers, a JSON event per send and ack (kafka-verifiable-producer.sh)",
        cli_verifiable.add_producer_arguments,
        cli_verifiable.run_producer,
    ),
    Tool(
        "verifiable-consumer",
        "consume in a group, a JSON event per poll, commit and "
        "rebalance (kafka-verifiable-consumer.sh)",
        cli_verifiable.add_consumer_arguments,
        cli_verifiable.run_consumer,
    ),
    Tool(
        "cluster",
        "start or stop ZooKeeper + N brokers on loopback; describe a cluster",
        cli_cluster.add_arguments,
        cli_cluster.run,
    ),
)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser, and each tool's own parser by name."""
    parser = argparse.ArgumentParser(prog="riverlog", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"riverlog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    tools = {}
    for tool in TOOLS:
        tool_parser = sub.add_parser(tool.name, help=tool.help, description=tool.help)
        tool.add_arguments(tool_parser)
        tool_parser.set_defaults(run=tool.run)
        tools[tool.name] = tool_parser
    return parser, tools


class StdoutClosed(BaseException):
    """The reader of stdout went away. A BaseException, so that no tool's own error
    handling (which catches OSError, and BrokenPipeError is one) reports it as a failure."""


class _GuardedStream:
    """stdout (or its binary buffer) whose writes raise StdoutClosed on a closed pipe."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, data: Any) -> int:
        try:
            return int(self._stream.write(data))
        except BrokenPipeError:
            raise StdoutClosed from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise StdoutClosed from None

    @property
    def buffer(self) -> _GuardedStream:
        return _GuardedStream(self._stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away (`riverlog ... | head`): stop quietly, as a program
    killed by SIGPIPE does, and keep Python from complaining while it flushes at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of `parser` and of its subcommands' parsers."""
    out: set[str] = set()
    for action in parser._actions:
        out.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                out |= _flags(child)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser, tools = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    if given and given[0] in tools:  # an unknown flag first, before missing ones, as Kafka
        tool = tools[given[0]]
        known = _flags(tool)
        unknown = [
            a
            for a in given[1:]
            if a.startswith("--")
            and a != "--"
            and not any(k.startswith(a.split("=")[0]) for k in known)
        ]
        if unknown:
            tool.error(f"unrecognized arguments: {' '.join(unknown)}")
    args, extra = parser.parse_known_args(given)
    if extra:  # the tool's own usage, not riverlog's, as Kafka's tools print theirs
        tools[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    real_stdout = sys.stdout
    sys.stdout = _GuardedStream(real_stdout)
    try:
        result: int = args.run(args)
        sys.stdout.flush()
    except (BrokenPipeError, StdoutClosed):
        return _quiet_broken_pipe()
    finally:
        sys.stdout = real_stdout
    return result


if __name__ == "__main__":
    sys.exit(main())
