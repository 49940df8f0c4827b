"""`riverlog leader-election`: Kafka's `kafka-leader-election.sh`, same flags and output.

    riverlog leader-election --bootstrap-server HOST:PORT --election-type PREFERRED|UNCLEAN
                             (--all-topic-partitions | --topic T --partition P |
                              --path-to-json-file FILE) [--admin.config FILE]

The JSON file is Kafka's: `{"partitions": [{"topic": "t", "partition": 0}, ...]}`. The
election type is case-insensitive. The controller holds the elections (ElectLeaders); the
tool prints, as Kafka's does,

    Successfully completed leader election (PREFERRED) for partitions t-0, t-2
    Valid replica already elected for partitions t-1
    Error completing leader election (PREFERRED) for partition: t-3: <error>

and exits with status 1, naming how many replicas could not be elected, when any failed.
With `--all-topic-partitions` the controller leaves out partitions that needed no election.
Bad flags or input print an error and exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from riverlog.client.admin import AsyncAdmin
from riverlog.client.admin_requests import PREFERRED_ELECTION, UNCLEAN_ELECTION
from riverlog.model import TopicPartition
from riverlog.properties import load_properties
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError

ELECTION_TYPES = {"PREFERRED": PREFERRED_ELECTION, "UNCLEAN": UNCLEAN_ELECTION}

# Kafka's exception class names, as its tool prints them.
EXCEPTIONS = {
    error_codes.PREFERRED_LEADER_NOT_AVAILABLE.code: "PreferredLeaderNotAvailableException",
    error_codes.ELIGIBLE_LEADERS_NOT_AVAILABLE.code: "EligibleLeadersNotAvailableException",
    error_codes.UNKNOWN_TOPIC_OR_PARTITION.code: "UnknownTopicOrPartitionException",
    error_codes.INVALID_TOPIC_EXCEPTION.code: "InvalidTopicException",
    error_codes.NOT_CONTROLLER.code: "NotControllerException",
    error_codes.REQUEST_TIMED_OUT.code: "TimeoutException",
}


class CommandError(Exception):
    """Bad flags or input: the message is printed as is."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", metavar="HOST:PORT", help="the broker(s) to connect to"
    )
    parser.add_argument(
        "--election-type",
        metavar="PREFERRED|UNCLEAN",
        help="type of election to attempt (case-insensitive)",
    )
    parser.add_argument(
        "--all-topic-partitions", action="store_true", help="elect leaders for all partitions"
    )
    parser.add_argument("--topic", help="the topic of the one partition to elect for")
    parser.add_argument("--partition", type=int, help="with --topic: the partition")
    parser.add_argument(
        "--path-to-json-file",
        metavar="FILE",
        help='the partitions: {"partitions": [{"topic": "t", "partition": 0}]}',
    )
    parser.add_argument(
        "--admin.config",
        dest="admin_config",
        metavar="FILE",
        help="admin client settings (a properties file)",
    )


def _validate(args: argparse.Namespace) -> int:
    """The election type, after Kafka's checks of the flags."""
    missing = [
        n
        for n, v in (
            ("bootstrap-server", args.bootstrap_server),
            ("election-type", args.election_type),
        )
        if v is None
    ]
    if missing:
        raise CommandError(f"Missing required option(s): {', '.join(missing)}")
    chosen = [args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise CommandError(
            "One and only one of the following options is required: "
            "topic, all-topic-partitions, path-to-json-file"
        )
    if args.topic is not None and args.partition is None:
        raise CommandError("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise CommandError("Option partition is only allowed if topic is used")
    election = ELECTION_TYPES.get(args.election_type.upper())
    if election is None:
        raise CommandError(
            f"Invalid election type {args.election_type!r}: expected PREFERRED or UNCLEAN"
        )
    return election


def parse_election_json(text: str) -> list[TopicPartition]:
    """Kafka's replica election JSON; duplicates are an error, as in Kafka's tool."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise CommandError(f"Invalid JSON: {e}") from None
    if not isinstance(raw, dict) or "partitions" not in raw:
        raise CommandError('Replica election data is missing "partitions" field')
    found: list[TopicPartition] = []
    try:
        for entry in raw["partitions"]:
            found.append((str(entry["topic"]), int(entry["partition"])))
    except (TypeError, KeyError, ValueError):
        raise CommandError(f"Invalid replica election data: {raw['partitions']!r}") from None
    duplicates = sorted({tp for tp in found if found.count(tp) > 1})
    if duplicates:
        raise CommandError(
            "Replica election data contains duplicate partitions: "
            + ",".join(_name(tp) for tp in duplicates)
        )
    return found


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    if args.all_topic_partitions:
        return None
    if args.topic is not None:
        return [(args.topic, args.partition)]
    try:
        text = Path(args.path_to_json_file).read_text()
    except OSError as e:
        raise CommandError(f"Cannot read {args.path_to_json_file}: {e.strerror}") from None
    return parse_election_json(text)


def _config(args: argparse.Namespace) -> dict[str, object]:
    config: dict[str, object] = {}
    if args.admin_config is not None:
        try:
            config.update(load_properties(args.admin_config))
        except OSError as e:
            raise CommandError(f"Cannot read {args.admin_config}: {e}") from None
    config["bootstrap.servers"] = args.bootstrap_server
    config.setdefault("client.id", "riverlog-leader-election")
    return config


def describe_error(error: KafkaError) -> str:
    name = EXCEPTIONS.get(error.error.code, f"KafkaException({error.error.name})")
    message = error.message or error.error.message
    return f"org.apache.kafka.common.errors.{name}: {message}"


def report(election: str, results: dict[TopicPartition, KafkaError | None]) -> int:
    """Print the results as Kafka's tool does; the number of partitions that failed."""
    succeeded = sorted(tp for tp, e in results.items() if e is None)
    noop = sorted(
        tp
        for tp, e in results.items()
        if e is not None and e.error.code == error_codes.ELECTION_NOT_NEEDED.code
    )
    failed = sorted(
        (tp, e)
        for tp, e in results.items()
        if e is not None and e.error.code != error_codes.ELECTION_NOT_NEEDED.code
    )
    if succeeded:
        print(
            f"Successfully completed leader election ({election}) for partitions "
            + ", ".join(map(_name, succeeded))
        )
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(map(_name, noop)))
    for tp, error in failed:
        print(
            f"Error completing leader election ({election}) for partition: {_name(tp)}: "
            f"{describe_error(error)}"
        )
    return len(failed)


async def _run(args: argparse.Namespace) -> int:
    election = _validate(args)
    partitions = _partitions(args)
    async with AsyncAdmin(_config(args)) as admin:
        results = await admin.elect_leaders(election, partitions)
    failed = report(args.election_type.upper(), results)
    if failed:
        print(f"{failed} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except CommandError as e:
        print(e, file=sys.stderr)
    except (KafkaError, ValueError, ConnectionError) as e:
        print(f"Error while making request: {e}", file=sys.stderr)
    return 1
