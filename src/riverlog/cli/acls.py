"""`riverlog acls`: Kafka's `kafka-acls.sh` — flags and output.

    riverlog acls --bootstrap-server HOST:PORT [--command-config FILE]
        (--add | --remove | --list)
        [--topic T | --group G | --cluster | --transactional-id ID]...
        [--resource-pattern-type literal|prefixed|any|match]
        [--allow-principal P]... [--deny-principal P]... [--allow-host H]... [--deny-host H]...
        [--operation OP]... [--producer [--idempotent]] [--consumer] [--principal P] [--force]

Output as Kafka's AclCommand prints it: "Adding ACLs for resource `ResourcePattern(...)`:"
then each "(principal=..., host=..., operation=..., permissionType=...)", and after every
change the resource's current ACLs. `--producer` grants Write, Describe and Create on the
topics (Write and Describe on the transactional ids; IdempotentWrite on the cluster with
`--idempotent`), `--consumer` Read and Describe on the topics and Read on the groups.
`--remove` asks for confirmation unless `--force`. Errors exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Iterable

from riverlog.cli import command_config
from riverlog.client.connection import Connection, connect_any
from riverlog.protocol import messages as m
from riverlog.security import acl

TYPE_NAMES = {
    acl.TOPIC: "TOPIC",
    acl.GROUP: "GROUP",
    acl.CLUSTER: "CLUSTER",
    acl.TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
    "DelegationToken": "DELEGATION_TOKEN",
    "User": "USER",
}


class CommandError(ValueError):
    """Flags the command cannot run with, or an error from the broker."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT",
        help="REQUIRED: The server(s) to connect to.",
    )
    command_config.add_argument(parser)
    for action, text in (
        ("--add", "Indicates you are trying to add ACLs."),
        ("--remove", "Indicates you are trying to remove ACLs."),
        (
            "--list",
            "List ACLs for the specified resource, use --topic <topic> "
            "or --group <group> or --cluster to specify a resource.",
        ),
    ):
        parser.add_argument(action, action="store_true", help=text)
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        help="topic to which ACLs should be added or removed.",
    )
    parser.add_argument(
        "--group",
        action="append",
        default=[],
        help="Consumer Group to which the ACLs should be added or removed.",
    )
    parser.add_argument(
        "--transactional-id",
        action="append",
        default=[],
        help="The transactionalId to which ACLs should be added or removed.",
    )
    parser.add_argument("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    parser.add_argument(
        "--resource-pattern-type",
        default=None,
        choices=["literal", "prefixed", "any", "match", "ANY", "MATCH", "LITERAL", "PREFIXED"],
        help="The type of the resource pattern or pattern filter.",
    )
    for flag, text in (
        ("--allow-principal", "principal is in principalType:name format; allowed"),
        ("--deny-principal", "principal is in principalType:name format; denied"),
        (
            "--allow-host",
            "Host from which principals listed in --allow-principal will have access.",
        ),
        (
            "--deny-host",
            "Host from which principals listed in --deny-principal will be denied access.",
        ),
        ("--operation", "Operation that is being allowed or denied."),
    ):
        parser.add_argument(flag, action="append", default=[], help=text)
    parser.add_argument("--principal", help="with --list: only ACLs of this principal")
    parser.add_argument(
        "--producer",
        action="store_true",
        help="Convenience option to add/remove ACLs for producer role.",
    )
    parser.add_argument(
        "--consumer",
        action="store_true",
        help="Convenience option to add/remove ACLs for consumer role.",
    )
    parser.add_argument(
        "--idempotent", action="store_true", help="Enable idempotence for the producer."
    )
    parser.add_argument(
        "--force", action="store_true", help="Assume Yes to all queries and do not prompt."
    )


def operation_name(text: str) -> str:
    """Kafka's operation from `Read`, `READ`, `ClusterAction`, `cluster_action`, ..."""
    wanted = re.sub(r"[_\s]", "", text).lower()
    for name in acl.OPERATIONS.values():
        if name.lower() == wanted and name not in ("Unknown", "Any"):
            return name
    raise CommandError(f"Invalid operation: {text}")


def _upper(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def pattern_text(pattern: acl.Pattern) -> str:
    return (
        f"ResourcePattern(resourceType={TYPE_NAMES[pattern.resource_type]}, "
        f"name={pattern.name}, patternType={pattern.pattern_type})"
    )


def entry_text(entry: acl.Entry) -> str:
    return (
        f"(principal={entry.principal}, host={entry.host}, "
        f"operation={_upper(entry.operation)}, "
        f"permissionType={entry.permission.upper()})"
    )


def block(title: str, pattern: str, entries: Iterable[acl.Entry]) -> str:
    lines = "\n".join("\t" + entry_text(e) for e in entries)
    return f"{title} `{pattern}`: \n {lines} \n"


def _resources(args: argparse.Namespace, pattern_type: str) -> list[acl.Pattern]:
    found = [acl.Pattern(acl.TOPIC, t, pattern_type) for t in args.topic]
    found += [acl.Pattern(acl.GROUP, g, pattern_type) for g in args.group]
    found += [acl.Pattern(acl.TRANSACTIONAL_ID, t, pattern_type) for t in args.transactional_id]
    if args.cluster:
        found.append(acl.Pattern(acl.CLUSTER, acl.CLUSTER_NAME, acl.LITERAL))
    return found


def _entries(args: argparse.Namespace, operations: list[str]) -> list[acl.Entry]:
    out = []
    for permission, principals, hosts in (
        (acl.ALLOW, args.allow_principal, args.allow_host),
        (acl.DENY, args.deny_principal, args.deny_host),
    ):
        for principal in principals:
            if ":" not in principal:
                raise CommandError(
                    f"Could not parse principal from `{principal}` (no colon is "
                    "found between principalType and name)"
                )
            for host in hosts or ["*"]:
                out += [acl.Entry(principal, host, op, permission) for op in operations]
    return out


def bindings(args: argparse.Namespace) -> dict[acl.Pattern, list[acl.Entry]]:
    """What `--add` creates, by resource (Kafka's --producer/--consumer expansion)."""
    pattern_type = (args.resource_pattern_type or "literal").upper()
    if pattern_type not in (acl.LITERAL, acl.PREFIXED):
        raise CommandError(
            "A '--resource-pattern-type' value of 'ANY' or 'MATCH' is not valid when adding acls."
        )
    if not args.allow_principal and not args.deny_principal:
        raise CommandError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    out: dict[acl.Pattern, list[acl.Entry]] = {}
    if args.producer or args.consumer:
        if args.producer:
            for t in args.topic:
                out[acl.Pattern(acl.TOPIC, t, pattern_type)] = _entries(
                    args, [acl.WRITE, acl.DESCRIBE, acl.CREATE]
                )
            for t in args.transactional_id:
                out[acl.Pattern(acl.TRANSACTIONAL_ID, t, pattern_type)] = _entries(
                    args, [acl.WRITE, acl.DESCRIBE]
                )
            if args.idempotent:
                out[acl.Pattern(acl.CLUSTER, acl.CLUSTER_NAME)] = _entries(
                    args, [acl.IDEMPOTENT_WRITE]
                )
        if args.consumer:
            if not args.group:
                raise CommandError("With --consumer you must specify a --group")
            for t in args.topic:
                pattern = acl.Pattern(acl.TOPIC, t, pattern_type)
                out[pattern] = out.get(pattern, []) + _entries(args, [acl.READ, acl.DESCRIBE])
            for g in args.group:
                out[acl.Pattern(acl.GROUP, g, pattern_type)] = _entries(args, [acl.READ])
        return out
    operations = [operation_name(o) for o in args.operation] or [acl.ALL_OPERATION]
    resources = _resources(args, pattern_type)
    if not resources:
        raise CommandError(
            "You must provide at least one resource: --topic <topic> or "
            "--cluster or --group <group> or --transactional-id <id>"
        )
    return {r: _entries(args, operations) for r in resources}


async def _describe(conn: Connection, flt: acl.Filter) -> dict[acl.Pattern, list[acl.Entry]]:
    request = m.DescribeAclsRequest(
        resource_type_filter=acl.RESOURCE_TYPE_IDS[flt.resource_type or "Any"],
        resource_name_filter=flt.name,
        pattern_type_filter=acl.PATTERN_TYPE_IDS[flt.pattern_type],
        principal_filter=flt.principal,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    response = await conn.send(request)
    assert isinstance(response, m.DescribeAclsResponse)
    if response.error_code:
        raise CommandError(response.error_message or f"error {response.error_code}")
    out: dict[acl.Pattern, list[acl.Entry]] = {}
    for r in response.resources:
        pattern = acl.Pattern(
            acl.RESOURCE_TYPES[r.resource_type], r.resource_name, acl.PATTERN_TYPES[r.pattern_type]
        )
        out[pattern] = [
            acl.Entry(
                a.principal, a.host, acl.OPERATIONS[a.operation], acl.PERMISSIONS[a.permission_type]
            )
            for a in r.acls
        ]
    return out


async def _list(conn: Connection, filters: list[acl.Filter]) -> None:
    for flt in filters:
        for pattern, entries in (await _describe(conn, flt)).items():
            print(block("Current ACLs for resource", pattern_text(pattern), entries))


def _filters(args: argparse.Namespace) -> list[acl.Filter]:
    pattern_type = (args.resource_pattern_type or "literal").upper()
    resources = _resources(args, pattern_type)
    if not resources:
        return [acl.Filter(pattern_type="ANY", principal=args.principal)]
    return [
        acl.Filter(r.resource_type, r.name, r.pattern_type, principal=args.principal)
        for r in resources
    ]


async def _add(conn: Connection, args: argparse.Namespace) -> None:
    wanted = bindings(args)
    for pattern, entries in wanted.items():
        print(block("Adding ACLs for resource", pattern_text(pattern), entries))
        creations = [
            m.CreateAclsRequest.AclCreation(
                resource_type=acl.RESOURCE_TYPE_IDS[pattern.resource_type],
                resource_name=pattern.name,
                resource_pattern_type=acl.PATTERN_TYPE_IDS[pattern.pattern_type],
                principal=e.principal,
                host=e.host,
                operation=acl.OPERATION_IDS[e.operation],
                permission_type=acl.PERMISSION_IDS[e.permission],
            )
            for e in entries
        ]
        response = await conn.send(m.CreateAclsRequest(creations=creations))
        assert isinstance(response, m.CreateAclsResponse)
        for result in response.results:
            if result.error_code:
                raise CommandError(result.error_message or f"error {result.error_code}")
    await _list(conn, [acl.Filter(p.resource_type, p.name, p.pattern_type) for p in wanted])


async def _remove(conn: Connection, args: argparse.Namespace) -> None:
    filters = [f for f in _filters(args) if f.resource_type is not None]
    if not filters:
        raise CommandError(
            "You must provide at least one resource: --topic <topic> or "
            "--cluster or --group <group> or --transactional-id <id>"
        )
    operations: list[str | None] = [operation_name(o) for o in args.operation] or [None]
    principals: list[tuple[str | None, str | None]] = [
        *((acl.ALLOW, p) for p in args.allow_principal),
        *((acl.DENY, p) for p in args.deny_principal),
    ] or [(None, None)]
    for flt in filters:
        pattern = acl.Pattern(flt.resource_type or "", flt.name or "", flt.pattern_type)
        if not args.force:
            answer = input(
                f"Are you sure you want to delete all ACLs for resource filter "
                f"`{pattern_text(pattern)}`? (y/n)"
            )
            if answer.strip().lower() != "y":
                continue
        delete = [
            m.DeleteAclsRequest.DeleteAclsFilter(
                resource_type_filter=acl.RESOURCE_TYPE_IDS[flt.resource_type or "Any"],
                resource_name_filter=flt.name,
                pattern_type_filter=acl.PATTERN_TYPE_IDS[flt.pattern_type],
                principal_filter=principal,
                host_filter=None,
                operation=acl.OPERATION_IDS[op] if op else 1,
                permission_type=acl.PERMISSION_IDS[permission] if permission else 1,
            )
            for permission, principal in principals
            for op in operations
        ]
        response = await conn.send(m.DeleteAclsRequest(filters=delete))
        assert isinstance(response, m.DeleteAclsResponse)
        for result in response.filter_results:
            if result.error_code:
                raise CommandError(result.error_message or f"error {result.error_code}")
    await _list(conn, filters)


async def _run(args: argparse.Namespace) -> None:
    conn = await connect_any(args.bootstrap_server, "riverlog-acls", command_config.security(args))
    try:
        if args.add:
            await _add(conn, args)
        elif args.remove:
            await _remove(conn, args)
        else:
            await _list(conn, _filters(args))
    finally:
        await conn.close()


def run(args: argparse.Namespace) -> int:
    if sum((args.add, args.remove, args.list)) != 1:
        print("Command must include exactly one action: --list, --add, --remove.", file=sys.stderr)
        return 1
    try:
        asyncio.run(_run(args))
    except (CommandError, ValueError, OSError, ConnectionError) as e:
        print(f"Error while executing ACL command: {e}", file=sys.stderr)
        return 1
    return 0
