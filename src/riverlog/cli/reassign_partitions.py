"""`riverlog reassign-partitions`: Kafka's `kafka-reassign-partitions.sh`, same flags, JSON
formats and output.

    riverlog reassign-partitions --bootstrap-server HOST:PORT --generate
        --topics-to-move-json-file FILE --broker-list 4,5,6 [--disable-rack-aware]
    riverlog reassign-partitions --bootstrap-server HOST:PORT --execute
        --reassignment-json-file FILE [--throttle BYTES_PER_S] [--additional]
    riverlog reassign-partitions --bootstrap-server HOST:PORT --verify
        --reassignment-json-file FILE [--preserve-throttles]
    riverlog reassign-partitions --bootstrap-server HOST:PORT --cancel
        --reassignment-json-file FILE [--preserve-throttles]
    riverlog reassign-partitions --bootstrap-server HOST:PORT --list

Files: topics to move `{"version":1,"topics":[{"topic":"t"}]}`; plans
`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[4,5,6]}]}` (Kafka's
`log_dirs` is accepted; only "any" is supported). `--generate` proposes a balanced plan with
Kafka's replica assignment over the given brokers (rack-aware when they have racks) and
changes nothing; `--execute` starts the moves (AlterPartitionReassignments) and prints the
current assignment to keep for a rollback; `--verify` shows each partition's state — and the
progress of those still moving — and exits with status 1 while any move is in progress or
failed, clearing the throttles once all are done, as Kafka does; `--cancel` reverts the moves.

Throttling (`--throttle`): the moving partitions' topics get `leader.replication.throttled
.replicas` (their current replicas) and `follower.replication.throttled.replicas` (the new
ones); the brokers' `leader/follower.replication.throttled.rate` are set as dynamic broker
configs (`/config/brokers/N`), effective at once. Errors print as "Error: ..." with exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Iterable
from pathlib import Path

from riverlog.cli.tool_config import add_command_config, command_properties
from riverlog.client import admin_requests as admin
from riverlog.client.admin import BROKER, TOPIC, AsyncAdmin
from riverlog.controller.assignment import AssignmentError, assign
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError

Plan = dict[TopicPartition, list[int]]
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
SETTLE_ATTEMPTS, SETTLE_PAUSE_S = 10, 0.3  # --verify re-reading Metadata behind a finished move


class ReassignError(Exception):
    """Bad input or a refused request: printed as "Error: ..." (exit status 1)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT",
        help="REQUIRED: The server(s) to connect to.",
    )
    add_command_config(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    for name, text in (
        (
            "--generate",
            "propose a plan moving the topics of --topics-to-move-json-file to "
            "--broker-list (changes nothing)",
        ),
        ("--execute", "start the moves of --reassignment-json-file"),
        (
            "--verify",
            "show how the moves of --reassignment-json-file are going; status 1 "
            "while any is in progress or failed",
        ),
        ("--cancel", "cancel the moves of --reassignment-json-file"),
        ("--list", "list the moves in progress"),
    ):
        action.add_argument(name, action="store_true", help=text)
    parser.add_argument(
        "--topics-to-move-json-file", metavar="FILE", help='{"version":1,"topics":[{"topic":"t"}]}'
    )
    parser.add_argument(
        "--broker-list", metavar="ID,ID,...", help="with --generate: the brokers to move to"
    )
    parser.add_argument(
        "--reassignment-json-file",
        metavar="FILE",
        help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}',
    )
    parser.add_argument(
        "--throttle",
        type=int,
        default=-1,
        metavar="BYTES_PER_S",
        help="with --execute: replication throttle of the moves",
    )
    parser.add_argument(
        "--additional",
        action="store_true",
        help="with --execute: start these moves while others run",
    )
    parser.add_argument(
        "--preserve-throttles",
        action="store_true",
        help="with --verify/--cancel: leave the throttles in place",
    )
    parser.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="with --generate: ignore the brokers' racks",
    )


# --- formats (pure) -------------------------------------------------------------------------


def _load_json(path: str | None, flag: str) -> object:
    if path is None:
        raise ReassignError(f"{flag} is required for this action")
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise ReassignError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise ReassignError(f"{path} is not JSON: {e}") from None


def parse_topics_to_move(raw: object) -> list[str]:
    try:
        assert isinstance(raw, dict)
        topics = [str(t["topic"]) for t in raw["topics"]]
    except (AssertionError, KeyError, TypeError):
        raise ReassignError('expected {"version":1,"topics":[{"topic":"t"},...]}') from None
    if not topics:
        raise ReassignError("List of topics to reassign contains no topics")
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise ReassignError(
            f"List of topics to reassign contains duplicate entries: {','.join(duplicates)}"
        )
    return topics


def parse_plan(raw: object) -> Plan:
    """A reassignment plan in Kafka's JSON, checked as Kafka's tool checks it."""
    try:
        assert isinstance(raw, dict)
        entries = [
            (
                str(e["topic"]),
                int(e["partition"]),
                [int(r) for r in e["replicas"]],
                e.get("log_dirs"),
            )
            for e in raw["partitions"]
        ]
    except (AssertionError, KeyError, TypeError, ValueError, AttributeError):
        raise ReassignError(
            'expected {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]},...]}'
        ) from None
    if not entries:
        raise ReassignError("Partition reassignment list cannot be empty")
    plan: Plan = {}
    for topic, partition, replicas, log_dirs in entries:
        tp = (topic, partition)
        if tp in plan:
            raise ReassignError(
                f"Partition reassignment contains duplicate topic partitions: {topic}-{partition}"
            )
        if not replicas:
            raise ReassignError(f"Partition replica list cannot be empty: {topic}-{partition}")
        if len(set(replicas)) != len(replicas):
            raise ReassignError(
                f"Partition replica lists may not contain duplicate entries: "
                f"{topic}-{partition} contains {replicas}"
            )
        if log_dirs is not None and (
            not isinstance(log_dirs, list)
            or len(log_dirs) != len(replicas)
            or any(d != "any" for d in log_dirs)
        ):
            raise ReassignError(f'{topic}-{partition}: only "any" log directories are supported')
        plan[tp] = replicas
    return plan


def plan_json(plan: Plan) -> str:
    """Kafka's compact JSON of a plan (with `log_dirs` "any", as Kafka's tool writes it)."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                for (t, p), r in sorted(plan.items())
            ],
        },
        separators=(",", ":"),
    )


def parse_broker_list(text: str | None) -> list[int]:
    if not text:
        raise ReassignError("--broker-list is required with --generate")
    try:
        brokers = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise ReassignError(
            f"--broker-list must be broker ids separated by commas: {text}"
        ) from None
    if len(set(brokers)) != len(brokers):
        raise ReassignError(f"Duplicate brokers in --broker-list: {text}")
    return brokers


def propose(current: Plan, racks: dict[int, str | None], rng: random.Random) -> Plan:
    """Kafka's replica assignment of each topic's partitions over `racks`' brokers, keeping
    its partition count and replication factor."""
    proposed: Plan = {}
    for topic in sorted({t for t, _ in current}):
        partitions = sorted(p for t, p in current if t == topic)
        factor = len(current[(topic, partitions[0])])
        try:
            placed = assign(
                racks,
                len(partitions),
                factor,
                start_index=rng.randrange(len(racks)),
                initial_shift=rng.randrange(len(racks)),
            )
        except AssignmentError as e:
            raise ReassignError(str(e)) from None
        proposed.update({(topic, p): placed[p] for p in partitions})
    return proposed


def throttle_configs(current: Plan, plan: Plan) -> dict[str, dict[str, str]]:
    """Per topic, Kafka's throttled replica lists for the moves of `plan`: leaders may be
    any current replica, followers are the new ones."""
    leaders: dict[str, list[str]] = {}
    followers: dict[str, list[str]] = {}
    for (topic, p), target in sorted(plan.items()):
        now = current.get((topic, p), [])
        if now == target:
            continue
        leaders.setdefault(topic, []).extend(f"{p}:{b}" for b in now)
        followers.setdefault(topic, []).extend(f"{p}:{b}" for b in target if b not in now)
    return {
        topic: {
            LEADER_REPLICAS: ",".join(leaders[topic]),
            FOLLOWER_REPLICAS: ",".join(followers.get(topic, [])),
        }
        for topic in leaders
    }


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(partitions))


def _ids(brokers: Iterable[int]) -> str:
    return ",".join(str(b) for b in sorted(brokers))


# --- actions ----------------------------------------------------------------------------------


async def _current(client: AsyncAdmin, topics: Iterable[str]) -> Plan:
    try:
        found = await client.describe_topics(sorted(set(topics)))
    except KafkaError as e:
        raise ReassignError(e.message or e.error.name) from None
    return {(t.name, p.partition): p.replicas for t in found for p in t.partitions}


async def _generate(client: AsyncAdmin, args: argparse.Namespace) -> None:
    topics = parse_topics_to_move(
        _load_json(args.topics_to_move_json_file, "--topics-to-move-json-file")
    )
    brokers = parse_broker_list(args.broker_list)
    racks = await admin.broker_racks(await client.cluster.any_connection())
    unknown = sorted(set(brokers) - set(racks))
    if unknown:
        raise ReassignError(f"The following brokers are not registered: {_ids(unknown)}")
    chosen = {b: None if args.disable_rack_aware else racks[b] for b in brokers}
    current = await _current(client, topics)
    print(f"Current partition replica assignment\n{plan_json(current)}\n")
    print(
        "Proposed partition reassignment configuration\n"
        f"{plan_json(propose(current, chosen, random.Random()))}"
    )


async def _execute(client: AsyncAdmin, args: argparse.Namespace) -> None:
    plan = parse_plan(_load_json(args.reassignment_json_file, "--reassignment-json-file"))
    if not args.additional and await client.list_partition_reassignments():
        raise ReassignError(
            "Cannot execute because there is an existing partition assignment.  Use "
            "--additional to override this and create a new partition assignment in addition "
            "to the existing one. The --additional flag can also be used to change the "
            "throttle by resubmitting the current reassignment."
        )
    current = await _current(client, {t for t, _ in plan})
    missing = sorted(set(plan) - set(current))
    if missing:
        raise ReassignError(f"Unable to find partitions: {_names(missing)}")
    print(
        "Current partition replica assignment\n\n"
        f"{plan_json({tp: current[tp] for tp in plan})}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback"
    )
    if args.throttle >= 0:
        await _set_throttles(client, current, plan, args.throttle)
    errors = await client.alter_partition_reassignments(dict(plan))
    _raise_failures(errors, "reassign")
    started = sorted(plan)
    plural = "" if len(started) == 1 else "s"
    print(f"Successfully started partition reassignment{plural} for {_names(started)}")


def _raise_failures(errors: dict[TopicPartition, KafkaError | None], what: str) -> None:
    failed = {tp: e for tp, e in errors.items() if e is not None}
    if failed:
        lines = [f"{t}-{p}: {e.message or e.error.name}" for (t, p), e in sorted(failed.items())]
        raise ReassignError(f"Error {what}ing partition reassignments:\n" + "\n".join(lines))


async def _set_throttles(client: AsyncAdmin, current: Plan, plan: Plan, rate: int) -> None:
    print(
        "Warning: You must run --verify periodically, until the reassignment completes, "
        "to ensure the throttle is removed."
    )
    for topic, configs in sorted(throttle_configs(current, plan).items()):
        await client.alter_configs(TOPIC, topic, set=configs)
    brokers = {b for tp, target in plan.items() for b in [*target, *current.get(tp, [])]}
    for broker_id in sorted(brokers):
        rates = {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)}
        await client.alter_configs(BROKER, str(broker_id), set=rates)
    print(f"The inter-broker throttle limit was set to {rate} B/s")


async def _clear_throttles(client: AsyncAdmin, topics: Iterable[str]) -> None:
    await client.cluster.refresh()
    brokers = sorted(client.cluster.brokers)
    print(f"Clearing broker-level throttles on brokers {_ids(brokers)}")
    for broker_id in brokers:
        await client.alter_configs(BROKER, str(broker_id), delete=[LEADER_RATE, FOLLOWER_RATE])
    for topic in sorted(set(topics)):
        print(f"Clearing topic-level throttles on topic {topic}")
        await client.alter_configs(TOPIC, topic, delete=[LEADER_REPLICAS, FOLLOWER_REPLICAS])


async def _verify(client: AsyncAdmin, args: argparse.Namespace) -> bool:
    """Whether every move of the plan is complete."""
    plan = parse_plan(_load_json(args.reassignment_json_file, "--reassignment-json-file"))
    moving = await client.list_partition_reassignments(list(plan))
    current = await _current(client, {t for t, _ in plan})
    for _ in range(SETTLE_ATTEMPTS):  # a move just finished: Metadata may not show it yet
        if all(tp in moving or current.get(tp) == target for tp, target in plan.items()):
            break
        await asyncio.sleep(SETTLE_PAUSE_S)
        current = await _current(client, {t for t, _ in plan})
    isr = {
        (t.name, p.partition): p.isr
        for t in await client.describe_topics(sorted({t for t, _ in plan}))
        for p in t.partitions
    }
    print("Status of partition reassignment:")
    complete = True
    for tp, target in sorted(plan.items()):
        name = f"{tp[0]}-{tp[1]}"
        if tp in moving:
            complete = False
            adding = moving[tp].adding
            synced = [r for r in adding if r in isr.get(tp, [])]
            print(f"Reassignment of partition {name} is still in progress.")
            print(
                f"  in sync: {len(synced)} of {len(adding)} new replicas "
                f"({_ids(synced) or '-'} of {_ids(adding) or '-'})"
            )
        elif current.get(tp) == target:
            print(f"Reassignment of partition {name} is completed.")
        else:
            complete = False
            now = ",".join(map(str, current.get(tp, [])))
            print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{now} rather than {','.join(map(str, target))}."
            )
    if complete and not args.preserve_throttles:
        print()
        await _clear_throttles(client, {t for t, _ in plan})
    return complete


async def _cancel(client: AsyncAdmin, args: argparse.Namespace) -> None:
    plan = parse_plan(_load_json(args.reassignment_json_file, "--reassignment-json-file"))
    errors = await client.alter_partition_reassignments(dict.fromkeys(plan))
    inactive = error_codes.NO_REASSIGNMENT_IN_PROGRESS.code
    _raise_failures(
        {tp: e for tp, e in errors.items() if e is None or e.error.code != inactive}, "cancell"
    )
    cancelled = sorted(tp for tp, e in errors.items() if e is None)
    if cancelled:
        plural = "" if len(cancelled) == 1 else "s"
        print(f"Successfully cancelled partition reassignment{plural} for: {_names(cancelled)}")
    else:
        print("None of the specified partition reassignments are active.")
    if not args.preserve_throttles:
        await _clear_throttles(client, {t for t, _ in plan})


async def _list(client: AsyncAdmin) -> None:
    moving = await client.list_partition_reassignments()
    if not moving:
        print("No partition reassignments found.")
        return
    print("Current partition reassignments:")
    for (topic, p), m in sorted(moving.items()):
        print(
            f"{topic}-{p}: replicas: {_ids_in_order(m.replicas)}. adding: "
            f"{_ids_in_order(m.adding)}. removing: {_ids_in_order(m.removing)}."
        )


def _ids_in_order(brokers: list[int]) -> str:
    return ",".join(map(str, brokers))


async def _run(args: argparse.Namespace) -> bool:
    config = {**command_properties(args), "bootstrap.servers": args.bootstrap_server}
    async with AsyncAdmin(config) as client:
        if args.generate:
            await _generate(client, args)
        elif args.execute:
            await _execute(client, args)
        elif args.verify:
            return await _verify(client, args)
        elif args.cancel:
            await _cancel(client, args)
        else:
            await _list(client)
    return True


def run(args: argparse.Namespace) -> int:
    try:
        return 0 if asyncio.run(_run(args)) else 1
    except ReassignError as e:
        print(f"Error: {e}", file=sys.stderr)
    except KafkaError as e:
        print(f"Error: {e.message or e.error.name}", file=sys.stderr)
    except (ConnectionError, OSError, TimeoutError) as e:
        print(f"Error: cannot reach the cluster at {args.bootstrap_server}: {e}", file=sys.stderr)
    return 1
