"""`riverlog consumer-groups`: Kafka's `kafka-consumer-groups.sh`, same flags and output.

    riverlog consumer-groups --bootstrap-server HOST:PORT --list [--state [STATES]]
    riverlog consumer-groups --bootstrap-server HOST:PORT --describe (--group G ... | --all-groups)
                             [--offsets | --members [--verbose] | --state]
    riverlog consumer-groups --bootstrap-server HOST:PORT --reset-offsets --group G
                             (--topic T[:P,P] ... | --all-topics)
                             (--to-earliest | --to-latest | --to-current | --to-offset N |
                              --shift-by N | --to-datetime T | --by-duration D |
                              --from-checkpoints SOURCE_ALIAS)
                             [--dry-run | --execute]
    riverlog consumer-groups --bootstrap-server HOST:PORT --delete --group G ...
    riverlog consumer-groups --bootstrap-server HOST:PORT --delete-offsets --group G --topic T[:P]

As in Kafka's tool, notices about a group's state ("has no active members", "does not exist",
"is rebalancing") go to standard error and do not change the exit status; bad flags and
failed requests exit with status 1. Offsets are reset only for inactive groups (Empty or
Dead); without `--execute` the plan is printed and nothing changes.

riverlog's one addition, for consumers moving between mirrored clusters: `--from-checkpoints
SOURCE_ALIAS` resets a group on this cluster to the offsets MirrorMaker 2 translated from
cluster SOURCE_ALIAS (the latest checkpoints in `SOURCE_ALIAS.checkpoints.internal`; with
`--all-topics`, every checkpointed partition of the group). See `riverlog.mirror`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from riverlog.cli.group_tables import (
    MISSING,
    OffsetRow,
    Scenario,
    assignment_text,
    export_csv,
    offsets_table,
    parse_datetime,
    parse_duration,
    parse_reset_csv,
    plan_reset,
    reset_table,
    table,
)
from riverlog.cli.tool_config import add_command_config, admin_config, command_properties
from riverlog.client import admin_requests as admin
from riverlog.client.cluster import Cluster
from riverlog.client.group_admin import GroupAdmin, GroupDescription
from riverlog.mirror.checkpoints import read_checkpoints
from riverlog.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TopicPartition
from riverlog.protocol.error_codes import KafkaError

ACTIONS = ("list", "describe", "reset_offsets", "delete", "delete_offsets")
SCENARIOS = (
    "to_earliest",
    "to_latest",
    "to_current",
    "to_offset",
    "shift_by",
    "to_datetime",
    "by_duration",
    "from_checkpoints",
)
INACTIVE = ("Empty", "Dead")
RETRY_BACKOFF_MS = 100  # between ListOffsets attempts that met a leader change
T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT",
        help="REQUIRED: The server(s) to connect to.",
    )
    add_command_config(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list all consumer groups")
    action.add_argument("--describe", action="store_true", help="describe groups")
    action.add_argument("--reset-offsets", action="store_true", help="reset committed offsets")
    action.add_argument("--delete", action="store_true", help="delete groups")
    action.add_argument("--delete-offsets", action="store_true", help="delete some offsets")
    parser.add_argument("--group", action="append", default=[], help="a group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every group")
    parser.add_argument(
        "--topic", action="append", default=[], metavar="T[:P,P]", help="a topic (repeatable)"
    )
    parser.add_argument("--all-topics", action="store_true", help="every committed topic")
    parser.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="STATES",
        help="--list: show (or filter by) state; --describe: show the group's state",
    )
    parser.add_argument("--members", action="store_true", help="--describe: the members")
    parser.add_argument("--offsets", action="store_true", help="--describe: offsets (default)")
    parser.add_argument("--verbose", action="store_true", help="--members: assignments too")
    scenario = parser.add_mutually_exclusive_group()
    scenario.add_argument(
        "--to-earliest",
        action="store_true",
        help="Reset offsets to earliest offset.",
    )
    scenario.add_argument(
        "--to-latest",
        action="store_true",
        help="Reset offsets to latest offset.",
    )
    scenario.add_argument(
        "--to-current",
        action="store_true",
        help="Reset offsets to current offset.",
    )
    scenario.add_argument(
        "--to-offset",
        type=int,
        metavar="N",
        help="Reset offsets to a specific offset.",
    )
    scenario.add_argument(
        "--shift-by",
        type=int,
        metavar="N",
        help="Reset offsets shifting current offset by 'n', where 'n' can be positive or negative.",
    )
    scenario.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDTHH:mm:SS.sss'",
    )
    scenario.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="Reset offsets to offset by duration from current timestamp. Format: 'PnDTnHnMnS'",
    )
    scenario.add_argument(
        "--from-file",
        metavar="PATH TO CSV FILE",
        help="Reset offsets to values defined in CSV file "
        "(topic,partition,offset; group,topic,partition,offset for several "
        "groups).",
    )
    parser.add_argument(
        "--export",
        action="store_true",
        help="Export operation execution to a CSV file. Supported operations: reset-offsets.",
    )
    scenario.add_argument(
        "--from-checkpoints",
        metavar="SOURCE_ALIAS",
        help="MirrorMaker 2's translated offsets from cluster SOURCE_ALIAS (riverlog only)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan only (default)")
    mode.add_argument("--execute", action="store_true", help="reset the offsets")
    parser.add_argument("--timeout", type=int, default=5000, help="ms to wait (accepted)")


def _error(text: str) -> None:
    print(f"Error: {text}", file=sys.stderr)


class Command:
    def __init__(self, args: argparse.Namespace, cluster: Cluster, groups: GroupAdmin) -> None:
        self.args = args
        self.cluster = cluster
        self.groups = groups
        self.file_plan: dict[str, dict[TopicPartition, int]] = {}

    async def group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [g.group_id for g in await self.groups.list_groups()]
        if not self.args.group:
            raise ValueError("Option --group or --all-groups is required")
        return list(self.args.group)

    async def topic_partitions(self, group: str) -> list[TopicPartition]:
        if self.args.all_topics:
            return sorted(await self.groups.fetch_offsets(group))
        if not self.args.topic:
            raise ValueError("One of the reset scopes should be defined: --all-topics, --topic.")
        out: list[TopicPartition] = []
        for spec in self.args.topic:
            topic, _, parts = spec.partition(":")
            if parts:
                out += [(topic, int(p)) for p in parts.split(",") if p.strip()]
            else:
                count = await self.cluster.partitions_of(topic, allow_auto_create=False)
                out += [(topic, p) for p in range(count)]
        return out

    async def log_offsets(
        self, partitions: list[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        return await admin.leader_offsets(self.cluster, partitions, timestamp, RETRY_BACKOFF_MS)

    # --- actions ---------------------------------------------------------------------

    async def list(self) -> None:
        listings = await self.groups.list_groups()
        if self.args.state is None:
            for g in listings:
                print(g.group_id)
            return
        wanted = {s.strip().lower() for s in self.args.state.split(",") if s.strip()}
        rows = [[g.group_id, g.state] for g in listings if not wanted or g.state.lower() in wanted]
        print(table(["GROUP", "STATE"], rows, [15, 0]))

    def _announce(self, group: str, state: str) -> bool:
        """Kafka's notices for a group's state; whether to print its table."""
        if state == "Dead":
            _error(f"Consumer group '{group}' does not exist.")
            return False
        if state == "Empty":
            print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
        elif state in ("PreparingRebalance", "CompletingRebalance"):
            print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
        return True

    async def describe(self) -> None:
        for group in await self.group_ids():
            description = await self.groups.describe_group(group)
            if self.args.members:
                self.print_members(description)
            elif self.args.state is not None:
                await self.print_state(description)
            else:
                await self.print_offsets(description)

    async def print_offsets(self, description: GroupDescription) -> None:
        group = description.group_id
        committed = await self.groups.fetch_offsets(group)
        owners = {
            (topic, p): member
            for member in description.members
            for topic, parts in member.assignment.items()
            for p in parts
        }
        partitions = sorted(set(committed) | set(owners))
        log_end = await self.log_offsets(partitions, LATEST_TIMESTAMP) if partitions else {}
        rows = []
        for tp in partitions:
            member = owners.get(tp)
            rows.append(
                OffsetRow(
                    group,
                    tp[0],
                    tp[1],
                    committed.get(tp),
                    log_end.get(tp),
                    member.member_id if member else MISSING,
                    member.client_host if member else MISSING,
                    member.client_id if member else MISSING,
                )
            )
        if self._announce(group, description.state) and rows:
            print("\n" + offsets_table(rows))

    def print_members(self, description: GroupDescription) -> None:
        if not self._announce(description.group_id, description.state):
            return
        if not description.members:
            return
        static = any(m.group_instance_id for m in description.members)
        header = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if static else [])
        header += ["HOST", "CLIENT-ID", "#PARTITIONS"] + (
            ["ASSIGNMENT"] if self.args.verbose else []
        )
        rows = []
        for m in sorted(description.members, key=lambda m: m.member_id):
            row: list[object] = [description.group_id, m.member_id]
            row += [m.group_instance_id or MISSING] if static else []
            row += [m.client_host, m.client_id, sum(len(ps) for ps in m.assignment.values())]
            row += [assignment_text(m.assignment)] if self.args.verbose else []
            rows.append(row)
        minimum = [15, 15] + ([17] if static else []) + [15, 15, 11] + [0]
        print("\n" + table(header, rows, minimum[: len(header)]))

    async def print_state(self, description: GroupDescription) -> None:
        group = description.group_id
        if not self._announce(group, description.state):
            return
        node, host, port = await self.groups.find_coordinator(group)
        coordinator = f"{host}:{port}  ({node})"
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        row = [group, coordinator, description.protocol, description.state]
        print("\n" + table(header, [[*row, len(description.members)]], [15, 25, 20, 15, 0]))

    def scenario(self) -> Scenario:
        a = self.args
        if a.to_earliest:
            return Scenario("earliest")
        if a.to_latest:
            return Scenario("latest")
        if a.to_current:
            return Scenario("current")
        if a.to_offset is not None:
            return Scenario("offset", a.to_offset)
        if a.shift_by is not None:
            return Scenario("shift", a.shift_by)
        if a.to_datetime is not None:
            return Scenario("timestamp", parse_datetime(a.to_datetime))
        if a.by_duration is not None:
            return Scenario("timestamp", int(time.time() * 1000) - parse_duration(a.by_duration))
        if a.from_file is not None:
            return Scenario("file")
        raise ValueError(
            "One of the reset scenarios should be defined: --to-datetime, --by-duration, "
            "--to-earliest, --to-latest, --shift-by, --to-current, --to-offset"
        )

    async def reset_offsets(self) -> None:
        if self.args.from_checkpoints is not None:
            await self.reset_from_checkpoints(self.args.from_checkpoints)
            return
        scenario = self.scenario()
        if not (self.args.execute or self.args.dry_run):
            print(
                "WARN: No action will be performed as the --execute option is missing. You "
                "should add the --dry-run option explicitly if you are scripting this command "
                "and want to keep the current default behavior without prompting.",
                file=sys.stderr,
            )
        exported: list[str] = []
        if scenario.kind == "file":
            with open(self.args.from_file, encoding="utf-8") as f:
                self.file_plan = parse_reset_csv(f.read(), self.args.group)
        for group in await self.group_ids():
            description = await self.groups.describe_group(group)
            if description.state not in INACTIVE:
                _error(
                    f"Assignments can only be reset if the group '{group}' is inactive, but "
                    f"the current state is {description.state}."
                )
                continue
            from_file = None
            if scenario.kind == "file":
                from_file = self.file_plan.get(group)
                if from_file is None:
                    _error(f"No reset plan for group {group} found")
                    continue
            partitions = sorted(from_file) if from_file else await self.topic_partitions(group)
            committed = await self.groups.fetch_offsets(group, partitions)
            earliest = await self.log_offsets(partitions, EARLIEST_TIMESTAMP)
            latest = await self.log_offsets(partitions, LATEST_TIMESTAMP)
            by_time = None
            if scenario.kind == "timestamp":
                by_time = await self.log_offsets(partitions, scenario.value)
            plan = plan_reset(
                scenario, partitions, committed, earliest, latest, by_time or from_file
            )
            if self.args.execute:
                await self.groups.commit_offsets(group, plan)
            if self.args.export:
                exported.append(export_csv(group, plan, len(self.args.group) == 1))
            else:
                print("\n" + reset_table(group, plan) + "\n")
        if self.args.export:
            print("".join(exported))

    async def reset_from_checkpoints(self, source_alias: str) -> None:
        """--reset-offsets --from-checkpoints: the translated offsets, within the scope."""
        client = {**command_properties(self.args), "bootstrap.servers": self.args.bootstrap_server}
        translated = await read_checkpoints(client, source_alias)
        for group in await self.group_ids():
            description = await self._retrying(group, partial(self.groups.describe_group, group))
            if description.state not in INACTIVE:
                _error(
                    f"Assignments can only be reset if the group '{group}' is inactive, but "
                    f"the current state is {description.state}."
                )
                continue
            offsets = translated.get(group, {})
            if not self.args.all_topics:
                scope = set(await self.topic_partitions(group))
                offsets = {tp: o for tp, o in offsets.items() if tp in scope}
            if self.args.execute and offsets:
                await self._retrying(group, partial(self.groups.commit_offsets, group, offsets))
            if offsets:
                print("\n" + reset_table(group, dict(sorted(offsets.items()))) + "\n")

    async def _retrying(self, group: str, call: Callable[[], Awaitable[T]]) -> T:
        """`call` on the group's coordinator, found again while it moves (a broker
        restarted) — for --from-checkpoints, used right after a cluster changed."""
        for attempt in range(10):
            try:
                return await call()
            except KafkaError as e:
                if not e.retriable or attempt == 9:
                    raise
                self.groups.forget(group)
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000 * (attempt + 1))
        raise AssertionError("unreachable")

    async def delete(self) -> None:
        failed: dict[str, KafkaError] = {}
        deleted = []
        for group in await self.group_ids():
            try:
                await self.groups.delete_group(group)
                deleted.append(group)
            except KafkaError as e:
                failed[group] = e
        names = ", ".join(f"'{g}'" for g in deleted)
        if not failed:
            print(f"Deletion of requested consumer groups ({names}) was successful.")
            return
        _error("Deletion of some consumer groups failed:")
        for group, why in failed.items():
            print(f"* Group '{group}' could not be deleted due to: {why.error.name}: {why.message}")
        if deleted:
            print(f"\nThese consumer groups were deleted successfully: {names}")

    async def delete_offsets(self) -> None:
        groups = await self.group_ids()
        if len(groups) != 1:
            raise ValueError("Option --delete-offsets takes exactly one --group")
        group = groups[0]
        if not self.args.topic:
            raise ValueError("Option --delete-offsets needs --topic")
        partitions = await self.topic_partitions(group)
        try:
            results = await self.groups.delete_offsets(group, partitions)
        except KafkaError as e:
            messages = {
                "GROUP_ID_NOT_FOUND": f"'{group}' does not exist.",
                "NON_EMPTY_GROUP": f"Deleting offsets of a consumer group '{group}' is "
                "forbidden if the group is not empty.",
            }
            _error(messages.get(e.error.name, str(e)))
            return
        topics = ", ".join(sorted({t for t, _ in partitions}))
        if any(results.values()):
            _error("Encounter some partition level error, see the follow-up details:")
        else:
            print(f"Request succeed for deleting offsets with topic {topics} group {group}")
        rows = [
            [t, p, f"Error: {e.message}" if e else "Successful"]
            for (t, p), e in sorted(results.items())
        ]
        print("\n" + table(["TOPIC", "PARTITION", "STATUS"], rows, [30, 15, 15]))


async def _run(args: argparse.Namespace) -> None:
    cluster = Cluster.from_config(
        admin_config(args.bootstrap_server, "riverlog-consumer-groups", command_properties(args))
    )
    groups = GroupAdmin(await cluster.any_connection())
    command = Command(args, cluster, groups)
    try:
        action = next(a for a in ACTIONS if getattr(args, a))
        await getattr(command, action)()
    finally:
        await groups.close()
        await cluster.close()


def run(args: argparse.Namespace) -> int:
    scenarios = [s for s in SCENARIOS if getattr(args, s) not in (None, False)]
    if scenarios and not args.reset_offsets:
        print(f"Error: --{scenarios[0].replace('_', '-')} needs --reset-offsets", file=sys.stderr)
        return 1
    try:
        asyncio.run(_run(args))
    except (KafkaError, ValueError, ConnectionError) as e:
        print(f"Error: Executing consumer group command failed due to {e}", file=sys.stderr)
        return 1
    return 0
