"""The Spark data source `riverlog`: `spark.read` / `spark.readStream` / `write` / `writeStream`
on PySpark's Python Data Source API, with the schema and option names of Spark's Kafka
connector and no JVM jars.

Owns `RiverlogDataSource` and its readers. Batch reads plan on the driver (resolve the
subscription and the starting/ending offsets, cut the ranges: `offsets.py`, `ranges.py`)
and read one range per task (`reading.py`). The streaming reader keeps no offsets of its
own: they live only in Spark's checkpoint, in Spark's Kafka JSON form
(`{"topic": {"0": 42}}`), so a restarted query resumes from it and a replayed micro-batch —
planned from the same checkpointed start and end — reads exactly the same records.

Invariants: partitions that appear later (new topics matching a pattern, added partitions)
are read from their earliest offset; a micro-batch never ends past the latest offset the
driver saw, nor (with `maxOffsetsPerTrigger`) spans more than Spark's share-out of the limit;
under `Trigger.AvailableNow` nothing written after the query started is read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from riverlog.client.sync import run_blocking
from riverlog.model import TopicPartition
from riverlog.spark import sink
from riverlog.spark.offsets import OffsetLookup
from riverlog.spark.options import (
    EARLIEST,
    LATEST,
    SourceOptions,
    offsets_from_json,
    offsets_json,
    parse_sink,
    parse_source,
)
from riverlog.spark.ranges import OffsetRange, ranges_between, rate_limit, split_ranges
from riverlog.spark.reading import DATA_LOSS_ADVICE, DataLossError, read_range

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)
HEADERS_COLUMN = "headers array<struct<key: string, value: binary>>"
Offsets = dict[str, dict[str, int]]
log = logging.getLogger(__name__)


class RiverlogDataSource(DataSource):
    """`format("riverlog")`: read and write riverlog (or any Kafka) topics."""

    @classmethod
    def name(cls) -> str:
        return "riverlog"

    def schema(self) -> str:
        headers = str(self.options.get("includeheaders", "false")).strip().lower() == "true"
        return f"{KAFKA_SCHEMA}, {HEADERS_COLUMN}" if headers else KAFKA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_source(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_source(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return sink.BatchWriter(parse_sink(self.options, streaming=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return sink.StreamWriter(parse_sink(self.options), schema)


def _tasks(options: SourceOptions, ranges: list[OffsetRange]) -> list[InputPartition]:
    return [InputPartition(r) for r in split_ranges(ranges, options.min_partitions)]


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    offset_range = partition.value
    assert isinstance(offset_range, OffsetRange)
    return read_range(options, offset_range)


class BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return _tasks(self.options, run_blocking(self._plan()))

    async def _plan(self) -> list[OffsetRange]:
        lookup = OffsetLookup(self.options)
        try:
            partitions = await lookup.partitions()
            start = await lookup.resolve(self.options.starting, partitions, ending=False)
            end = await lookup.resolve(self.options.ending, partitions, ending=True)
        finally:
            await lookup.close()
        backwards = [tp for tp in partitions if end[tp] < start[tp]]
        if backwards:
            t, p = backwards[0]
            raise ValueError(
                f"the ending offset {end[(t, p)]} of {t}-{p} is before its starting offset "
                f"{start[(t, p)]}"
            )
        return ranges_between(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges; the offsets themselves live in Spark's checkpoint."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: dict[TopicPartition, int] | None = None

    def _ask(self, question: Any) -> Any:
        """Run `question(lookup)` with a fresh lookup (the reader is pickled to executors,
        so it keeps no connections)."""

        async def asking() -> Any:
            lookup = OffsetLookup(self.options)
            try:
                return await question(lookup)
            finally:
                await lookup.close()

        return run_blocking(asking())

    def initialOffset(self) -> Offsets:
        async def initial(lookup: OffsetLookup) -> dict[TopicPartition, int]:
            partitions = await lookup.partitions()
            return await lookup.resolve(self.options.starting, partitions, ending=False)

        return offsets_json(self._ask(initial))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        async def latest(lookup: OffsetLookup) -> dict[TopicPartition, int]:
            return await lookup.list_offsets(await lookup.partitions(), LATEST)

        self._target = self._ask(latest)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = offsets_from_json(start)

        async def latest(lookup: OffsetLookup) -> tuple[dict[TopicPartition, int], ...]:
            partitions = await lookup.partitions()
            new = [tp for tp in partitions if tp not in begin]
            return (
                await lookup.list_offsets(partitions, LATEST),
                await lookup.list_offsets(new, EARLIEST) if new else {},
            )

        newest, new_starts = self._ask(latest)
        gone = sorted(set(begin) - set(newest))
        if gone:
            self._lost(f"partitions {gone} are gone")
        begin.update(new_starts)
        if self._target is not None:
            newest = {tp: min(o, self._target.get(tp, begin[tp])) for tp, o in newest.items()}
        for tp, offset in newest.items():
            if offset < begin[tp]:  # topic re-created, or truncated by an unclean election
                self._lost(f"{tp[0]}-{tp[1]}'s latest offset {offset} is below {begin[tp]}")
                newest[tp] = begin[tp]
        if isinstance(limit, ReadMaxRows):
            newest = rate_limit(begin, newest, limit.max_rows)
        return offsets_json(newest)

    def _lost(self, what: str) -> None:
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{what}. {DATA_LOSS_ADVICE}")
        log.warning("%s (failOnDataLoss=false: going on)", what)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self._ask(lambda lookup: lookup.list_offsets(new, EARLIEST)))
        return _tasks(self.options, ranges_between(begin, until))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets."""
