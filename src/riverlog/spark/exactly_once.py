"""The streaming sink's exactly-once mode (`deliveryGuarantee=exactly-once`): a two-phase
commit of Kafka transactions keyed by query id, batch id and task, as Flink's KafkaSink does.

Phase one, in each task of micro-batch N (`write_task`): a transactional producer with the
id `<transactionalIdPrefix><queryId>-<partitionId>` — the same for every attempt of that task
and across restarts of the query, so a new attempt's InitProducerId fences the old one and
aborts its open transaction — begins a transaction, writes the task's rows and prepares it
(every record acknowledged) without committing. The task returns the transaction's handle
(id, producer id, epoch) to the driver.

Phase two, on the driver (`commit_batch`): first the decision — N is recorded, with the set
of tasks that hold a transaction, as the committed offset N + 1 of the consumer group
`riverlog-spark-sink-<queryId>` (one OffsetCommit: all or nothing) — then every handle is
committed (EndTxn, `AsyncTransactionalProducer.resume_transaction`). Spark writes N to its
commit log only after that, so a crash anywhere before leaves N to be replayed:

- no decision for N (the query died before or while its tasks wrote, or before the record):
  the replay's tasks take the same transactional ids, which fences and aborts every
  transaction of the earlier run; the batch is written again and committed. Nothing of the
  earlier run becomes visible to read_committed readers.
- a decision for N (the query died during or after the commits): a replayed task writes
  nothing; if the decision lists it, it finishes its own earlier transaction — asks the
  coordinator (DescribeTransactions) and commits it if it is still Ongoing (EndTxn repeated
  on a completed commit is answered NONE, so this is idempotent). Every transaction of N is
  thus committed exactly once, whatever the interleaving of crashes.
- a transaction of a decided batch that its coordinator aborted (it stayed open longer than
  `transaction.timeout.ms`, 15 min by default here, e.g. because the query stayed down that
  long between decision and commit) cannot be committed any more: the task raises
  `TransactionLostError` naming it, and the query stops; nothing is silently dropped.

`abort_batch` (Spark calls it when a task or the commit failed) aborts the handles of an
undecided batch, so read_committed readers are not held back until the timeout; a decided
batch is left for its replay to finish.

Invariant: a transaction of this sink is committed only after the decision for its batch is
durable, and a batch with a decision is never written again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyspark.sql.datasource import WriterCommitMessage

from riverlog.client.admin import AsyncAdmin
from riverlog.client.config import common_config
from riverlog.client.sync import run_blocking
from riverlog.client.transactional_producer import AsyncTransactionalProducer, TransactionHandle
from riverlog.client.transactions_admin import TransactionsAdmin
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.spark.options import SinkOptions

SINK_GROUP_PREFIX = "riverlog-spark-sink-"
DECISION = "exactly-once "
"""The decision's metadata: this prefix, then the tasks holding a transaction as a hex mask."""
MAX_DECISION_CHARS = 4000  # Kafka's offset.metadata.max.bytes is 4096 by default
TRANSACTION_TIMEOUT_MS = "900000"  # Kafka's transaction.max.timeout.ms default
_CONCURRENT_COMMITS = 8
_LOST = {
    error_codes.PRODUCER_FENCED.code,
    error_codes.INVALID_PRODUCER_EPOCH.code,
    error_codes.INVALID_PRODUCER_ID_MAPPING.code,
}

Row = tuple[str, bytes | None, bytes | None, int | None, list[tuple[str, bytes]] | None]
"""A record to write: topic, value, key, partition (None: the partitioner's), headers."""


class TransactionLostError(RuntimeError):
    """A transaction of a decided batch was aborted by its coordinator before its commit."""


@dataclass
class Prepared(WriterCommitMessage):
    """One task's report in exactly-once mode."""

    query_id: str
    partition_id: int
    records: int = 0
    handle: TransactionHandle | None = None
    """The prepared transaction; None when the task wrote nothing (or was a replay)."""
    topics: set[str] = field(default_factory=set)
    skipped: bool = False
    """A replay of a decided batch: nothing written."""


def transactional_id(options: SinkOptions, query_id: str, partition_id: int) -> str:
    return f"{options.transactional_id_prefix}{query_id}-{partition_id}"


def _producer_config(options: SinkOptions, txn_id: str) -> dict[str, str]:
    return {
        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        **options.client,
        "acks": "all",
        "enable.idempotence": "true",
        "transactional.id": txn_id,
    }


# -- the decision record -------------------------------------------------------------------


async def decision(options: SinkOptions, query_id: str) -> tuple[int, set[int]]:
    """The first batch id with no decision, and the tasks holding a transaction in the
    batch before it (empty when no decision or an at-least-once record)."""
    admin = AsyncAdmin(common_config(options.client))
    try:
        found = await admin.groups.fetch_offsets_and_metadata(SINK_GROUP_PREFIX + query_id)
    finally:
        await admin.close()
    next_batch, metadata = max(found.values(), default=(0, ""))
    if not metadata.startswith(DECISION):
        return next_batch, set()
    mask = int(metadata[len(DECISION) :], 16)
    return next_batch, {i for i in range(mask.bit_length()) if mask >> i & 1}


async def _record_decision(
    options: SinkOptions, query_id: str, batch_id: int, topics: set[str], tasks: set[int]
) -> None:
    metadata = DECISION + format(sum(1 << t for t in tasks), "x")
    if len(metadata) > MAX_DECISION_CHARS:
        raise ValueError(f"exactly-once supports up to {4 * MAX_DECISION_CHARS - 64} write tasks")
    admin = AsyncAdmin(common_config(options.client))
    try:
        await admin.groups.commit_offsets(
            SINK_GROUP_PREFIX + query_id,
            {(t, 0): batch_id + 1 for t in sorted(topics)},
            metadata=metadata,
        )
    finally:
        await admin.close()


# -- phase one: the tasks ------------------------------------------------------------------


def write_task(
    options: SinkOptions,
    batches: Iterable[list[Row]],
    query_id: str,
    batch_id: int,
    partition_id: int,
) -> Prepared:
    """Write the task's records in a transaction left open, or finish a decided batch.
    Runs on the task's thread; the client's work on its loop thread (`run_blocking`)."""
    txn_id = transactional_id(options, query_id, partition_id)
    prepared = Prepared(query_id, partition_id)
    next_batch, tasks = run_blocking(decision(options, query_id))
    if batch_id < next_batch:  # a replay of a decided batch: finish, write nothing
        for _ in batches:
            pass
        if batch_id == next_batch - 1 and partition_id in tasks:
            run_blocking(finish(options, txn_id, batch_id))
        prepared.skipped = True
        return prepared
    producer: AsyncTransactionalProducer = run_blocking(
        _construct(_producer_config(options, txn_id))
    )
    try:
        run_blocking(producer.init_transactions())  # fences earlier attempts, aborts them
        run_blocking(producer.begin_transaction())
        for records in batches:
            run_blocking(_send_all(producer, records))
            prepared.records += len(records)
            prepared.topics.update(r[0] for r in records)
        handle = run_blocking(producer.prepare_transaction())
        prepared.handle = handle if handle.partitions else None
    except BaseException:
        with contextlib.suppress(Exception):
            run_blocking(producer.abort_transaction())
        raise
    finally:
        run_blocking(producer.close())  # leaves a prepared transaction open
    return prepared


async def _construct(config: dict[str, str]) -> AsyncTransactionalProducer:
    return AsyncTransactionalProducer(config)  # asyncio objects are made on the loop thread


async def _send_all(producer: AsyncTransactionalProducer, records: list[Row]) -> None:
    for topic, value, key, partition, headers in records:
        await producer.send(topic, value, key, partition=partition, headers=headers)


async def finish(options: SinkOptions, txn_id: str, batch_id: int) -> None:
    """Commit the transaction `txn_id` left open by decided batch `batch_id`, if it still
    is; raise `TransactionLostError` if its coordinator aborted it."""
    admin = AsyncAdmin(common_config(options.client))
    try:
        found = await TransactionsAdmin(admin.cluster).describe_transaction(txn_id)
    finally:
        await admin.close()
    if found.state in ("Ongoing", "PrepareCommit"):
        await end(options, TransactionHandle(txn_id, found.producer_id, found.producer_epoch))
    elif found.state != "CompleteCommit":
        raise TransactionLostError(
            f"the transaction {txn_id} of micro-batch {batch_id} was aborted by its "
            f"coordinator ({found.state}) after the batch was decided: it stayed open longer "
            "than its transaction.timeout.ms, and its records are lost"
        )


async def end(options: SinkOptions, handle: TransactionHandle, *, commit: bool = True) -> None:
    """EndTxn for a prepared transaction (idempotent: repeating a completed end is fine)."""
    producer = AsyncTransactionalProducer(_producer_config(options, handle.transactional_id))
    try:
        await producer.resume_transaction(handle)
        if commit:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
    finally:
        await producer.close()


# -- phase two: the driver -----------------------------------------------------------------


async def _end_all(
    options: SinkOptions, handles: list[TransactionHandle], *, commit: bool
) -> list[BaseException | None]:
    limit = asyncio.Semaphore(_CONCURRENT_COMMITS)

    async def one(handle: TransactionHandle) -> None:
        async with limit:
            await end(options, handle, commit=commit)

    return await asyncio.gather(*(one(h) for h in handles), return_exceptions=True)


async def commit_batch(
    options: SinkOptions, reports: list[Prepared], batch_id: int, query_id: str
) -> None:
    """Record the decision for `batch_id`, then commit every prepared transaction."""
    next_batch, _ = await decision(options, query_id)
    if batch_id < next_batch:
        return  # a replay of a decided batch: its tasks finished their own transactions
    prepared = {r.partition_id: r.handle for r in reports if r.handle is not None}
    if not prepared:
        return  # nothing written: a replay writes nothing either
    topics = {tp[0] for h in prepared.values() for tp in h.partitions}
    await _record_decision(options, query_id, batch_id, topics, set(prepared))
    errors = await _end_all(options, list(prepared.values()), commit=True)
    failed = [(h, e) for h, e in zip(prepared.values(), errors, strict=True) if e is not None]
    if failed:
        handle, error = failed[0]
        if isinstance(error, KafkaError) and error.error.code in _LOST:
            raise TransactionLostError(
                f"the transaction {handle.transactional_id} of micro-batch {batch_id} was "
                f"aborted before its commit ({error.error.name}): it stayed open longer than "
                "its transaction.timeout.ms, and its records are lost"
            ) from error
        raise error  # the replay of this batch commits what is left


async def abort_batch(
    options: SinkOptions, reports: Mapping[int, TransactionHandle], batch_id: int, query_id: str
) -> None:
    """Abort the prepared transactions of an undecided batch (best effort: a replay's
    tasks fence whatever is left); a decided batch is its replay's to finish."""
    next_batch, _ = await decision(options, query_id)
    if batch_id < next_batch:
        return
    await _end_all(options, list(reports.values()), commit=False)
