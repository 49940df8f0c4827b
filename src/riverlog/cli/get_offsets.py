"""`riverlog get-offsets`: Kafka's `kafka-get-offsets.sh` (GetOffsetShell), same flags and
output.

    riverlog get-offsets --bootstrap-server HOST:PORT [--topic REGEX] [--partitions 0,1]
                         [--topic-partitions 't1:1,t2:0-3,t3,t4:5-,t5:-3'] [--time latest]
                         [--exclude-internal-topics] [--command-config FILE]

Prints `topic:partition:offset` per matching partition, sorted as Kafka sorts them (by the
text `topic-partition`); a partition with no offset for the time asked (-1) is left out, one
that fails is reported on stderr ("Skip getting offsets for topic-partition ...") and skipped.
Errors: "Error occurred: <message>", status 1. A partition without a leader is waited for
(up to `request.timeout.ms`), and the wait is announced on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from dataclasses import dataclass

from riverlog.cli.tool_config import add_command_config, admin_config, command_properties
from riverlog.cli.tool_errors import Waiter, exception_text
from riverlog.client import admin_requests as admin
from riverlog.client.cluster import Cluster
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import ListOffsetsResponse

TOPIC_PARTITION_PATTERN = r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?"
_SPECS = {
    "earliest": -2,
    "latest": -1,
    "max-timestamp": -3,
    "earliest-local": -4,
    "latest-tiered": -5,
}
_MALFORMED = (
    "Malformed time argument {}. Please use -1 or latest / -2 or earliest / -3 or "
    "max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a specified long "
    "format timestamp"
)


class CommandError(ValueError):
    """Input the tool refuses (Kafka's TerseException)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST1:PORT1,...,HOST3:PORT3",
        help="REQUIRED. The server(s) to connect to in the form HOST1:PORT1,HOST2:PORT2.",
    )
    parser.add_argument(
        "--broker-list",
        metavar="HOST1:PORT1,...,HOST3:PORT3",
        help="DEPRECATED, use --bootstrap-server instead; ignored if "
        "--bootstrap-server is specified.",
    )
    parser.add_argument(
        "--topic-partitions",
        metavar="topic1:1,topic2:0-3,topic3,topic4:5-",
        help="Comma separated list of topic-partition patterns to get the "
        f"offsets for, with the format of '{TOPIC_PARTITION_PATTERN}'. The "
        "topic part is a regex (omitted: any topic); the partition part a "
        "number, a range N-M (upper exclusive), N- or -M, or omitted (all).",
    )
    parser.add_argument(
        "--topic",
        metavar="topic",
        help="The topic to get the offsets for. It also accepts a regular "
        "expression. If not present, all authorized topics are queried. Cannot "
        "be used if --topic-partitions is present.",
    )
    parser.add_argument(
        "--partitions",
        metavar="partition ids",
        help="Comma separated list of partition ids to get the offsets for. If "
        "not present, all partitions of the authorized topics are queried. "
        "Cannot be used if --topic-partitions is present.",
    )
    parser.add_argument(
        "--time",
        default="latest",
        metavar="<timestamp> / -1 or latest / -2 or earliest / -3 or max-timestamp",
        help="timestamp of the offsets before that. [Note: No offset is "
        "returned, if the timestamp greater than recently committed record "
        "timestamp is given.] (default: latest)",
    )
    parser.add_argument(
        "--exclude-internal-topics",
        action="store_true",
        help="By default, internal topics are included. If specified, internal "
        "topics are excluded.",
    )
    add_command_config(parser)


def parse_time(text: str) -> int:
    if text in _SPECS:
        return _SPECS[text]
    try:
        return int(text)
    except ValueError:
        raise CommandError(_MALFORMED.format(text)) from None


@dataclass(frozen=True)
class Rule:
    """One topic-partition pattern: a topic regex and a partition set or range."""

    topic_regex: str
    exact: frozenset[int] | None = None
    low: int = 0
    high: int = 2**31 - 1

    def topic_allowed(self, topic: str) -> bool:
        return re.fullmatch(self.topic_regex, topic) is not None

    def allowed(self, topic: str, partition: int) -> bool:
        if not self.topic_allowed(topic):
            return False
        if self.exact is not None:
            return not self.exact or partition in self.exact
        return self.low <= partition < self.high


def _topic_regex(raw: str) -> str:
    """Kafka's TopicFilter: commas mean `|`, spaces and surrounding quotes go."""
    regex = raw.strip().replace(",", "|").replace(" ", "")
    regex = re.sub(r"""^["']+|["']+$""", "", regex)
    try:
        re.compile(regex)
    except re.error:
        raise CommandError(f"{regex} is an invalid regex.") from None
    return regex


def parse_rules(topic_partitions: str) -> list[Rule]:
    rules = []
    for spec in topic_partitions.split(","):
        m = re.fullmatch(TOPIC_PARTITION_PATTERN, spec)
        if m is None:
            raise CommandError(f"Invalid rule specification: {spec}")
        topic, single, low, high = (g or None for g in m.groups())
        regex = _topic_regex(topic) if topic else ".*"
        if single is not None:
            rules.append(Rule(regex, frozenset({int(single)})))
        else:
            rules.append(Rule(regex, None, int(low or 0), int(high) if high else 2**31 - 1))
    return rules


def rules_from_args(args: argparse.Namespace) -> list[Rule]:
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise CommandError("--topic-partitions cannot be used with --topic or --partitions")
        return parse_rules(args.topic_partitions)
    ids: frozenset[int] = frozenset()
    if args.partitions:
        try:
            ids = frozenset(int(p) for p in args.partitions.split(","))
        except ValueError:
            raise CommandError(
                "--partitions expects a comma separated list of numeric "
                f"partition ids, but received: {args.partitions}"
            ) from None
    return [Rule(_topic_regex(args.topic) if args.topic else ".*", ids)]


async def _offsets(
    cluster: Cluster, leader: int, tps: list[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int | KafkaError]:
    response = await cluster.send(leader, admin.list_offsets_request(tps, timestamp))
    assert isinstance(response, ListOffsetsResponse)
    out: dict[tuple[str, int], int | KafkaError] = {}
    for answer in response.topics:
        for part in answer.partitions:
            key = (answer.name, part.partition_index)
            if part.error_code:
                out[key] = KafkaError(for_code(part.error_code))
            elif part.old_style_offsets:
                out[key] = part.old_style_offsets[0]
            else:
                out[key] = part.offset
    return out


async def fetch_offsets(args: argparse.Namespace) -> dict[tuple[str, int], int]:
    bootstrap = args.bootstrap_server or args.broker_list
    if not bootstrap:
        raise CommandError('Missing required argument "[bootstrap-server]"')
    rules = rules_from_args(args)
    timestamp = parse_time(args.time)
    config = admin_config(bootstrap, "GetOffsetShell", command_properties(args))
    cluster = Cluster.from_config(config)
    waiter = Waiter()
    try:
        topics = await admin.describe_topics(await cluster.any_connection())
        wanted = [
            (t.name, p.partition)
            for t in topics
            if not (args.exclude_internal_topics and t.is_internal)
            for p in t.partitions
            if any(r.allowed(t.name, p.partition) for r in rules)
        ]
        if not wanted:
            raise CommandError("Could not match any topic-partitions with the specified filters")
        results: dict[tuple[str, int], int | KafkaError] = {}
        deadline = time.monotonic() + config.request_timeout_ms / 1000
        pending = list(wanted)
        while pending:
            await cluster.refresh(sorted({t for t, _ in pending}), allow_auto_create=False)
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for tp in pending:
                by_leader.setdefault(cluster.leaders.get(tp, -1), []).append(tp)
            for leader, tps in by_leader.items():
                if leader < 0 or leader not in cluster.brokers:
                    continue
                results.update(await _offsets(cluster, leader, tps, timestamp))
            pending = [tp for tp in pending if tp not in results or _retriable(results[tp])]
            if pending and time.monotonic() >= deadline:
                for tp in pending:
                    results.setdefault(tp, KafkaError(for_code(5)))
                break
            if pending:
                names = ", ".join(f"{t}-{p}" for t, p in pending[:5])
                waiter.waiting_for(f"a leader of {names}")
                await asyncio.sleep(config.retry_backoff_ms / 1000)
    finally:
        await cluster.close()
    out = {}
    for tp in sorted(wanted, key=lambda tp: f"{tp[0]}-{tp[1]}"):
        value = results[tp]
        if isinstance(value, KafkaError):
            print(
                f"Skip getting offsets for topic-partition {tp[0]}-{tp[1]} due to error: "
                f"{exception_text(value)}",
                file=sys.stderr,
            )
        elif value != -1:
            out[tp] = value
    return out


def _retriable(value: int | KafkaError) -> bool:
    return isinstance(value, KafkaError) and value.retriable


def run(args: argparse.Namespace) -> int:
    try:
        offsets = asyncio.run(fetch_offsets(args))
    except (KafkaError, ValueError, OSError) as e:
        print(f"Error occurred: {e}", file=sys.stderr)
        return 1
    for (topic, partition), offset in offsets.items():
        print(f"{topic}:{partition}:{offset}")
    return 0
