"""`riverlog transactions`: Kafka's `kafka-transactions.sh`, same commands, flags and tables.

    riverlog transactions --bootstrap-server HOST:PORT [--command-config FILE] COMMAND
      list
      describe --transactional-id ID
      describe-producers --topic T --partition P [--broker-id N]
      find-hanging (--topic T [--partition P] | --broker-id N) [--max-transaction-timeout MIN]
      abort --topic T --partition P (--start-offset O |
                                     --producer-id I --producer-epoch E --coordinator-epoch C)

Tables are printed as Kafka's tool prints them: every column padded to its widest value and
followed by a tab. A transaction is hanging (find-hanging) when a partition has it open for
longer than `--max-transaction-timeout` minutes (15) and its coordinator does not know it as
a transaction that includes that partition. Errors print Kafka's message and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from riverlog.client.admin import AsyncAdmin
from riverlog.client.transactions_admin import ProducerState, TransactionsAdmin
from riverlog.properties import load_properties
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError

TopicPartition = tuple[str, int]


class CommandError(Exception):
    """Printed as is; exit status 1."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        metavar="host:port",
        required=True,
        help="hostname and port for the broker to connect to",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="property file containing configs to be passed to admin client",
    )
    sub = parser.add_subparsers(dest="transactions_command", metavar="COMMAND", required=True)
    sub.add_parser("list", help="list transactions")
    describe = sub.add_parser("describe", help="describe the state of an active transactional-id")
    describe.add_argument("--transactional-id", required=True, help="transactional id")
    producers = sub.add_parser(
        "describe-producers", help="describe the states of active producers for a topic partition"
    )
    producers.add_argument("--broker-id", type=int, help="describe the state on this replica")
    producers.add_argument("--topic", required=True, help="topic name")
    producers.add_argument("--partition", type=int, required=True, help="partition number")
    hanging = sub.add_parser("find-hanging", help="find hanging transactions")
    hanging.add_argument("--broker-id", type=int, help="broker id to search")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        help="maximum transaction timeout in minutes",
    )
    hanging.add_argument("--topic", help="topic name to limit search to")
    hanging.add_argument("--partition", type=int, help="partition number")
    abort = sub.add_parser("abort", help="abort a hanging transaction")
    abort.add_argument("--topic", required=True, help="topic name")
    abort.add_argument("--partition", type=int, required=True, help="partition number")
    abort.add_argument("--start-offset", type=int, help="start offset of the transaction")
    abort.add_argument("--producer-id", type=int, help="producer id")
    abort.add_argument("--producer-epoch", type=int, help="producer epoch")
    abort.add_argument("--coordinator-epoch", type=int, help="coordinator epoch")


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Kafka's prettyPrintTable: each value padded to its column's width, then a tab."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    return "\n".join(
        "".join(value.ljust(width) + "\t" for value, width in zip(row, widths, strict=True))
        for row in [headers, *rows]
    )


def _config(args: argparse.Namespace) -> dict[str, str]:
    config: dict[str, str] = {}
    if args.command_config is not None:
        try:
            config.update(load_properties(args.command_config))
        except OSError as e:
            raise CommandError(f"Failed to load admin client properties: {e}") from None
    config["bootstrap.servers"] = args.bootstrap_server
    return config


async def _list(txns: TransactionsAdmin) -> str:
    listed = await txns.list_transactions()
    rows = [[t.transactional_id, str(t.coordinator), str(t.producer_id), t.state] for t in listed]
    return table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)


async def _describe(txns: TransactionsAdmin, transactional_id: str) -> str:
    try:
        d = await txns.describe_transaction(transactional_id)
    except KafkaError as e:
        raise CommandError(
            f"Failed to describe transaction state of transactional-id "
            f"`{transactional_id}`: {e.message}."
        ) from None
    started = d.start_time_ms >= 0
    row = [
        str(d.coordinator),
        transactional_id,
        str(d.producer_id),
        str(d.producer_epoch),
        d.state,
        str(d.timeout_ms),
        str(d.start_time_ms) if started else "None",
        str(int(time.time() * 1000) - d.start_time_ms) if started else "None",
        ",".join(f"{t}-{p}" for t, p in d.partitions),
    ]
    headers = [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    return table(headers, [row])


def _producer_rows(states: list[ProducerState]) -> list[list[str]]:
    return [
        [
            str(s.producer_id),
            str(s.producer_epoch),
            str(s.coordinator_epoch),
            str(s.last_sequence),
            str(s.last_timestamp),
            str(s.txn_start_offset) if s.txn_start_offset >= 0 else "None",
        ]
        for s in states
    ]


async def _describe_producers(txns: TransactionsAdmin, args: argparse.Namespace) -> str:
    tp = (args.topic, args.partition)
    try:
        found = await txns.describe_producers([tp], args.broker_id)
    except KafkaError as e:
        where = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
        raise CommandError(
            f"Failed to describe producers for partition {tp[0]}-{tp[1]} on {where}: {e.message}."
        ) from None
    headers = [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    return table(headers, _producer_rows(found.get(tp, [])))


async def _partitions(admin: AsyncAdmin, args: argparse.Namespace) -> list[TopicPartition]:
    if args.topic is not None and args.partition is not None:
        return [(args.topic, args.partition)]
    names = [args.topic] if args.topic is not None else await admin.list_topics()
    return [
        (t.name, p.partition)
        for t in await admin.describe_topics(names)
        for p in t.partitions
        if args.broker_id is None or args.broker_id in p.replicas
    ]


async def find_hanging(
    admin: AsyncAdmin, txns: TransactionsAdmin, args: argparse.Namespace
) -> list[tuple[TopicPartition, ProducerState]]:
    now = int(time.time() * 1000)
    limit_ms = args.max_transaction_timeout * 60_000
    states = await txns.describe_producers(await _partitions(admin, args), args.broker_id)
    candidates = [
        (tp, s)
        for tp, found in states.items()
        for s in found
        if s.txn_start_offset >= 0 and now - s.last_timestamp > limit_ms
    ]
    if not candidates:
        return []
    listed = await txns.list_transactions({s.producer_id for _, s in candidates})
    ids = {t.producer_id: t.transactional_id for t in listed}
    hanging = []
    for tp, state in candidates:
        transactional_id = ids.get(state.producer_id)
        if transactional_id is None:
            hanging.append((tp, state))
            continue
        try:
            described = await txns.describe_transaction(transactional_id)
        except KafkaError as e:
            if e.error.code != error_codes.TRANSACTIONAL_ID_NOT_FOUND.code:
                raise
            hanging.append((tp, state))
            continue
        if tp not in described.partitions:
            hanging.append((tp, state))
    return hanging


async def _find_hanging(
    admin: AsyncAdmin, txns: TransactionsAdmin, args: argparse.Namespace
) -> str:
    if args.topic is None and args.broker_id is None:
        raise CommandError(
            "The `find-hanging` command requires either --topic or --broker-id "
            "to limit the scope of the search"
        )
    if args.partition is not None and args.topic is None:
        raise CommandError("The --partition argument requires --topic to be provided")
    now = int(time.time() * 1000)
    rows = [
        [
            tp[0],
            str(tp[1]),
            str(s.producer_id),
            str(s.producer_epoch),
            str(s.coordinator_epoch),
            str(s.txn_start_offset),
            str(s.last_timestamp),
            str((now - s.last_timestamp) // 60_000),
        ]
        for tp, s in await find_hanging(admin, txns, args)
    ]
    headers = [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration(min)",
    ]
    return table(headers, rows)


async def _abort(txns: TransactionsAdmin, args: argparse.Namespace) -> str:
    tp = (args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise CommandError(
            "The transaction to abort must be identified either with "
            "--start-offset (for brokers on 3.0 or above) or with --producer-id, "
            "--producer-epoch, and --coordinator-epoch (for older brokers)"
        )
    if args.start_offset is not None:
        found = (await txns.describe_producers([tp])).get(tp, [])
        match = [s for s in found if s.txn_start_offset == args.start_offset]
        if not match:
            raise CommandError(
                f"Could not find any open transactions starting at offset "
                f"{args.start_offset} on partition {tp[0]}-{tp[1]}"
            )
        pid, epoch, coordinator_epoch = (
            match[0].producer_id,
            match[0].producer_epoch,
            max(match[0].coordinator_epoch, 0),
        )
    else:
        if args.producer_epoch is None:
            raise CommandError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise CommandError("Missing required argument --coordinator-epoch")
        pid, epoch = args.producer_id, args.producer_epoch
        coordinator_epoch = max(args.coordinator_epoch, 0)
    try:
        await txns.abort_transaction(tp, pid, epoch, coordinator_epoch)
    except KafkaError as e:
        raise CommandError(
            f"Failed to abort transaction on {tp[0]}-{tp[1]} (producer {pid}, "
            f"epoch {epoch}): {e.message}."
        ) from None
    return ""


async def _run(args: argparse.Namespace) -> int:
    async with AsyncAdmin(_config(args)) as admin:
        txns = TransactionsAdmin(admin.cluster)
        command = args.transactions_command
        if command == "list":
            out = await _list(txns)
        elif command == "describe":
            out = await _describe(txns, args.transactional_id)
        elif command == "describe-producers":
            out = await _describe_producers(txns, args)
        elif command == "find-hanging":
            out = await _find_hanging(admin, txns, args)
        else:
            out = await _abort(txns, args)
    if out:
        print(out)
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except CommandError as e:
        print(e, file=sys.stderr)
    except (KafkaError, ConnectionError) as e:
        print(f"{e}. Enable debug logging for additional detail.", file=sys.stderr)
    return 1
