"""The sink side of `format("riverlog")`: DataFrame rows to records, batch and streaming.

Owns `BatchWriter` and `StreamWriter`. Columns as Spark's Kafka sink takes them: `value`
(binary or string, required; null is a tombstone), `key` (binary or string), `topic`
(string; the `topic` option overrides it), `partition` (int; else the key's murmur2
partition, as the Java client picks), `headers` (array<struct<key string, value binary>>).
Each task writes its rows with one idempotent producer (acks=all, retries without
duplicates or reordering within the task; a transactional one for exactly-once) and succeeds
only once every record is acknowledged.

What the streaming sink guarantees (`deliveryGuarantee=at-least-once`, the default). A
micro-batch is committed by recording its id (as the committed offset `batchId + 1` of the
consumer group `riverlog-spark-sink-<queryId>`, on partition 0 of each topic it wrote) once
all its tasks have succeeded. A task of a batch at or below the recorded id writes nothing:
so a batch Spark replays after a restart — because the query died between the sink's commit
and Spark's own commit log — is not written twice. A batch that failed before its commit is
written again in full when replayed: its records from the failed attempt may appear twice
(at-least-once for that batch), as with Spark's own Kafka sink.

With `deliveryGuarantee=exactly-once` each task writes inside a Kafka transaction that the
driver commits, with the batch's decision recorded first (`exactly_once.py` says how and
what is guaranteed): read_committed readers see each row of each batch exactly once.

Invariants: a row missing a topic, or a column of the wrong type, fails on the driver
before any task runs (schema) or in the task naming the row (null topic).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from riverlog.client.config import common_config
from riverlog.client.sync import Admin, Producer, run_blocking
from riverlog.spark import exactly_once
from riverlog.spark.exactly_once import SINK_GROUP_PREFIX, Prepared, Row
from riverlog.spark.options import SinkOptions

_BATCH_ID = "streaming.sql.batchId"
_QUERY_ID = "sql.streaming.queryId"


@dataclass
class Written(WriterCommitMessage):
    """One task's report: how many records it wrote, to which topics, in which query."""

    records: int = 0
    topics: set[str] = field(default_factory=set)
    query_id: str | None = None
    skipped: bool = False


def _check_schema(options: SinkOptions, schema: StructType) -> None:
    types = {f.name: f.dataType for f in schema.fields}

    def want(name: str, allowed: tuple[type[DataType], ...], what: str) -> None:
        if name in types and not isinstance(types[name], allowed):
            raise ValueError(f"column '{name}' must be {what}, not {types[name].simpleString()}")

    if "value" not in types:
        raise ValueError("the sink needs a 'value' column (binary or string)")
    if options.topic is None and "topic" not in types:
        raise ValueError("the sink needs a 'topic' column or the 'topic' option")
    want("value", (BinaryType, StringType), "binary or string")
    want("key", (BinaryType, StringType), "binary or string")
    want("topic", (StringType,), "string")
    want("partition", (IntegerType,), "int")
    headers = types.get("headers")
    if headers is not None and not (
        isinstance(headers, ArrayType)
        and isinstance(headers.elementType, StructType)
        and [f.name for f in headers.elementType.fields] == ["key", "value"]
    ):
        raise ValueError("column 'headers' must be array<struct<key: string, value: binary>>")


def _as_bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def rows(options: SinkOptions, batch: pa.RecordBatch, first: int) -> Iterator[Row]:
    """The records of `batch`: (topic, value, key, partition, headers); `first` is the
    task's count of rows before this batch (for the error naming a row)."""
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    count = batch.num_rows
    values = columns["value"]
    keys = columns.get("key", [None] * count)
    topics = [options.topic] * count if options.topic else columns["topic"]
    partitions = columns.get("partition", [None] * count)
    headers = columns.get("headers", [None] * count)
    for i in range(count):
        topic = topics[i]
        if topic is None:
            raise ValueError(f"row {first + i} has a null topic")
        yield (
            topic,
            _as_bytes(values[i]),
            _as_bytes(keys[i]),
            partitions[i],
            [(h["key"], h["value"]) for h in headers[i]] if headers[i] else None,
        )


def _write(
    options: SinkOptions, batches: Iterator[pa.RecordBatch], query_id: str | None
) -> Written:
    written = Written(query_id=query_id)
    producer = Producer({**options.client, "acks": "all", "enable.idempotence": "true"})
    try:
        for batch in batches:
            for topic, value, key, partition, headers in rows(options, batch, written.records):
                written.topics.add(topic)
                producer.send(topic, value, key, partition=partition, headers=headers)
            written.records += batch.num_rows
        producer.flush()
    finally:
        producer.close()
    return written


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        _check_schema(options, schema)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return _write(self.options, iterator, None)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        _check_schema(options, schema)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written | Prepared:
        context = TaskContext.get()
        assert context is not None, "write runs in a Spark task"
        batch_id = int(str(context.getLocalProperty(_BATCH_ID)))
        query_id = str(context.getLocalProperty(_QUERY_ID))
        if self.options.exactly_once:
            return exactly_once.write_task(
                self.options, self._rows(iterator), query_id, batch_id, context.partitionId()
            )
        if batch_id < self._next_batch(query_id):
            for _ in iterator:  # already committed: this is a replay
                pass
            return Written(query_id=query_id, skipped=True)
        return _write(self.options, iterator, query_id)

    def _rows(self, batches: Iterator[pa.RecordBatch]) -> Iterator[list[Row]]:
        seen = 0
        for batch in batches:
            yield list(rows(self.options, batch, seen))
            seen += batch.num_rows

    def _next_batch(self, query_id: str) -> int:
        """The id of the first batch not yet committed by this query's sink."""
        with Admin(common_config(self.options.client)) as admin:
            committed = admin.group_offsets(SINK_GROUP_PREFIX + query_id)
        return max(committed.values(), default=0)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        prepared = [m for m in messages if isinstance(m, Prepared)]
        if prepared:
            run_blocking(
                exactly_once.commit_batch(self.options, prepared, batchId, prepared[0].query_id)
            )
            return
        reports = [m for m in messages if isinstance(m, Written)]
        topics = {self.options.topic} if self.options.topic else set()
        for m in reports:
            topics |= m.topics
        query_ids = {m.query_id for m in reports if m.query_id}
        if not topics or not query_ids or all(m.skipped for m in reports):
            return  # nothing written: a replay writes nothing either
        (query_id,) = query_ids
        with Admin(common_config(self.options.client)) as admin:
            admin.reset_group_offsets(
                SINK_GROUP_PREFIX + query_id, {(t, 0): batchId + 1 for t in sorted(topics)}
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At least once: nothing to undo, records written are in the log. Exactly once:
        the prepared transactions of an undecided batch are aborted."""
        prepared = [m for m in messages if isinstance(m, Prepared)]
        handles = {m.partition_id: m.handle for m in prepared if m.handle is not None}
        if handles:
            run_blocking(
                exactly_once.abort_batch(self.options, handles, batchId, prepared[0].query_id)
            )
