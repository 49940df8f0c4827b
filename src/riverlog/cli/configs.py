"""`riverlog configs`: Kafka's `kafka-configs.sh` for topics, brokers, broker loggers, users
(SCRAM credentials, cli/user_configs.py; quotas) and clients (quotas, cli/quota_configs.py),
same flags and output; `--command-config` for security.

    riverlog configs --bootstrap-server HOST:PORT --entity-type topics|brokers
                     [--entity-name NAME | --entity-default] --describe [--all]
    riverlog configs --bootstrap-server HOST:PORT --entity-type topics|brokers
                     (--entity-name NAME | --entity-default) --alter
                     [--add-config k1=v1,k2=[v2,v3]] [--delete-config k1,k2]

(`--topic T`, `--broker N` and `--broker-defaults` are Kafka's shorthands.) `--describe`
prints the dynamic configs of each entity — without a name, of every topic, or of every
broker and the brokers' cluster default — or with `--all` every config, each as
"  name=value sensitive=false synonyms={SOURCE:name=value, ...}". `--alter` sets and deletes
dynamic configs; a broker's own configs are changed through that broker, the cluster
default through any. `--entity-type broker-loggers --entity-name ID` describes a broker's
log levels (`root=INFO`, `riverlog.server.network=DEBUG`, ...) and alters them at run time
(`--add-config riverlog.server.network=DEBUG`, `--delete-config` to inherit again).
Errors print as Kafka's tool prints them and exit with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys

from riverlog.cli import command_config, quota_configs, user_configs
from riverlog.cli.tool_config import admin_config, command_properties
from riverlog.client import admin_requests as admin
from riverlog.client.cluster import Cluster
from riverlog.client.connection import Connection
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import DescribeConfigsResponse

SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
DEFAULT = "<default>"
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


class CommandError(ValueError):
    """Flags the command cannot run with."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker(s) to connect to"
    )
    parser.add_argument(
        "--entity-type",
        choices=["topics", "brokers", "broker-loggers", "users", "clients"],
        help="type of entity (topics/brokers/broker-loggers/users/clients)",
    )
    command_config.add_argument(parser)
    parser.add_argument(
        "--entity-name", metavar="NAME", help="name of entity (topic name or broker id)"
    )
    parser.add_argument(
        "--entity-default",
        action="store_true",
        help="the default config of all brokers, users or clients",
    )
    parser.add_argument("--topic", help="shorthand: --entity-type topics --entity-name TOPIC")
    parser.add_argument("--broker", help="shorthand: --entity-type brokers --entity-name ID")
    parser.add_argument(
        "--broker-defaults",
        action="store_true",
        help="shorthand: --entity-type brokers --entity-default",
    )
    parser.add_argument("--describe", action="store_true", help="list configs")
    parser.add_argument(
        "--all", action="store_true", help="with --describe: every config, not only dynamic ones"
    )
    parser.add_argument("--alter", action="store_true", help="alter configs")
    parser.add_argument(
        "--add-config",
        metavar="k1=v1,k2=[v1,v2]",
        help="configs to set (a list value in square brackets)",
    )
    parser.add_argument("--delete-config", metavar="k1,k2", help="configs to remove")


def parse_add_config(text: str) -> dict[str, str]:
    """Kafka's `--add-config`: commas separate pairs except inside [...], which holds a list
    value (its brackets dropped)."""
    out = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        pair = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item)
        if len(pair) != 2:
            raise CommandError(
                'Invalid entity config: all configs to be added must be in the format "key=val".'
            )
        out[pair[0].strip()] = re.sub(r"[\[\]]", "", pair[1]).strip()
    return out


def parse_delete_config(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, name); name None: every entity, `DEFAULT`: the brokers' default."""
    kind, name = args.entity_type, args.entity_name
    default = args.entity_default
    for shorthand, kind_of in ((args.topic, "topics"), (args.broker, "brokers")):
        if shorthand is not None:
            kind, name = kind_of, shorthand
    if args.broker_defaults:
        kind, default = "brokers", True
    if kind is None:
        raise CommandError("--entity-type must be specified")
    if default and kind not in ("brokers", "users", "clients"):
        raise CommandError("--entity-default is only valid for brokers, users and clients")
    if default and name is not None:
        raise CommandError("only one of --entity-name and --entity-default may be given")
    if kind in ("brokers", "broker-loggers") and name is not None and not name.isdigit():
        raise CommandError(
            f"The entity name for {kind} must be a valid integer broker id, found: {name}"
        )
    return kind, DEFAULT if default else name


def _check_action(args: argparse.Namespace, name: str | None) -> None:
    if args.describe == args.alter:
        raise CommandError("Command must include exactly one action: --describe, --alter")
    if args.all and not args.describe:
        raise CommandError("--all is only valid with --describe")
    if args.alter:
        if args.add_config is None and args.delete_config is None:
            raise CommandError(
                "At least one of --add-config or --delete-config must be specified with --alter"
            )
        if name is None:
            raise CommandError(
                "an entity name (or --entity-default for brokers) must be specified with --alter"
            )
    elif args.add_config is not None or args.delete_config is not None:
        raise CommandError("--add-config and --delete-config are only valid with --alter")


Entry = DescribeConfigsResponse.DescribeConfigsResourceResult


def entry_line(entry: Entry) -> str:
    synonyms = ", ".join(
        f"{SOURCES.get(s.source, 'UNKNOWN')}:{s.name}={s.value}" for s in entry.synonyms
    )
    value = "null" if entry.is_sensitive or entry.value is None else entry.value
    return (
        f"  {entry.name}={value} sensitive={str(entry.is_sensitive).lower()} "
        f"synonyms={{{synonyms}}}"
    )


RESOURCES = {
    "topics": admin.TOPIC_RESOURCE,
    "brokers": admin.BROKER_RESOURCE,
    "broker-loggers": admin.BROKER_LOGGER_RESOURCE,
}


def dynamic_source(kind: str, name: str) -> int:
    if kind == "topics":
        return admin.DYNAMIC_TOPIC_CONFIG
    if kind == "broker-loggers":
        return 6  # DYNAMIC_BROKER_LOGGER_CONFIG
    return 3 if name == DEFAULT else 2  # DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_BROKER_CONFIG


class Configs:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def _connection(self, kind: str, name: str) -> Connection:
        """A broker's own configs are answered (and changed) by that broker only."""
        if kind != "topics" and name != DEFAULT:
            return await self.cluster.connection(int(name))
        return await self.cluster.any_connection()

    async def entries(self, kind: str, name: str, *, every: bool) -> list[Entry]:
        resource = RESOURCES[kind]
        conn = await self._connection(kind, name)
        found = await admin.describe_configs(
            conn, resource, "" if name == DEFAULT else name, include_synonyms=True
        )
        source = dynamic_source(kind, name)
        return sorted(
            (e for e in found if every or e.config_source == source), key=lambda e: e.name
        )

    async def describe(self, kind: str, name: str | None, every: bool) -> None:
        await self.cluster.refresh()
        if name is not None:
            names = [name]
        elif kind == "topics":
            names = [
                t.name for t in await admin.describe_topics(await self.cluster.any_connection())
            ]
        else:
            names = [str(b) for b in sorted(self.cluster.brokers)]
            names += [DEFAULT] if kind == "brokers" else []
        for entity in names:
            if entity == DEFAULT:
                print("Default configs for brokers in the cluster are:")
            else:
                print(f"{'All' if every else 'Dynamic'} configs for {kind[:-1]} {entity} are:")
            for entry in await self.entries(kind, entity, every=every):
                print(entry_line(entry))

    async def alter(self, kind: str, name: str, add: dict[str, str], delete: list[str]) -> None:
        await self.cluster.refresh()
        current = {e.name for e in await self.entries(kind, name, every=False)}
        if kind == "broker-loggers":  # every logger is described: setting one needs it to exist
            invalid = [k for k in [*delete, *add] if k not in current]
            if invalid:
                raise CommandError(f"Invalid broker logger(s): {','.join(invalid)}")
        invalid = [k for k in delete if k not in current]
        if invalid:
            raise CommandError(f"Invalid config(s): {','.join(invalid)}")
        resource = RESOURCES[kind]
        await admin.alter_configs(
            await self._connection(kind, name),
            resource,
            "" if name == DEFAULT else name,
            add,
            delete,
        )
        if name == DEFAULT:
            print("Completed updating default config for brokers in the cluster.")
        else:
            print(f"Completed updating config for {kind[:-1]} {name}.")


async def _run(args: argparse.Namespace, kind: str, name: str | None) -> None:
    cluster = Cluster.from_config(
        admin_config(args.bootstrap_server, "riverlog-configs", command_properties(args))
    )
    try:
        if kind in ("users", "clients"):  # quotas; users' SCRAM credentials
            await _users_or_clients(args, await cluster.any_connection(), kind, name)
            return
        configs = Configs(cluster)
        if args.describe:
            await configs.describe(kind, name, args.all)
        else:
            assert name is not None
            add = {} if args.add_config is None else parse_add_config(args.add_config)
            delete = [] if args.delete_config is None else parse_delete_config(args.delete_config)
            await configs.alter(kind, name, add, delete)
    finally:
        await cluster.close()


async def _users_or_clients(
    args: argparse.Namespace, conn: Connection, kind: str, name: str | None
) -> None:
    """Quotas (cli/quota_configs.py) and, for a named user, SCRAM credentials
    (cli/user_configs.py), split by key as kafka-configs.sh splits them."""
    scram = kind == "users" and name != DEFAULT
    if args.describe:
        await quota_configs.describe(conn, kind, name)
        if scram:
            await user_configs.describe(conn, name)
        return
    assert name is not None
    add = {} if args.add_config is None else parse_add_config(args.add_config)
    delete = [] if args.delete_config is None else parse_delete_config(args.delete_config)
    quota_add = {k: v for k, v in add.items() if k in quota_configs.QUOTA_KEYS}
    quota_delete = [k for k in delete if k in quota_configs.QUOTA_KEYS]
    other_add = {k: v for k, v in add.items() if k not in quota_add}
    other_delete = [k for k in delete if k not in quota_delete]
    if (other_add or other_delete) and not scram:
        raise CommandError(f"Invalid config(s): {','.join([*other_add, *other_delete])}")
    if quota_add or quota_delete:
        await quota_configs.alter(conn, kind, name, quota_add, quota_delete)
    if other_add or other_delete:
        await user_configs.alter(conn, name, other_add, other_delete)


def run(args: argparse.Namespace) -> int:
    try:
        kind, name = _entity(args)
        _check_action(args, name)
        asyncio.run(_run(args, kind, name))
    except (CommandError, KafkaError, ConnectionError, ValueError, OSError) as e:
        print(
            f"Error while executing config command with args '{' '.join(sys.argv[1:])}'",
            file=sys.stderr,
        )
        print(f"{e.error.name}: {e}" if isinstance(e, KafkaError) else e, file=sys.stderr)
        return 1
    return 0
