"""Reading one offset range on an executor: Fetch requests in, Arrow record batches out.

Owns `read_range(options, offset_range)`, the body of every Spark task of the source. It
opens its own connections (a task may run in any Python worker), fetches the range from the
partition's leader — the next Fetch already in flight on the client's loop thread while this
thread turns the previous answer into columns (`client/arrow.py`, no Python step per field)
— and yields batches with the schema of Spark's Kafka source.

Invariants: every record with an offset in [start, until) that the log still holds is
yielded exactly once, in offset order, and nothing outside the range; offsets the log no
longer holds (deleted by retention, or truncated away) are data loss: with failOnDataLoss
(the default) the task fails saying so, else it logs a warning and reads what exists. A
range whose end the partition does not reach within kafkaConsumer.pollTimeoutMs is data loss
too, never a hang.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from riverlog.client import admin_requests as admin
from riverlog.client import arrow, fetcher
from riverlog.client.cluster import Cluster
from riverlog.client.sync import run_blocking
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.spark.offsets import consumer_config
from riverlog.spark.options import EARLIEST, LATEST, SourceOptions
from riverlog.spark.ranges import OffsetRange

log = logging.getLogger(__name__)

SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")
DATA_LOSS_ADVICE = (
    "Some data may have been lost because they are not available any more; either the data "
    "was aged out by retention or the topic may have been deleted before all the data in the "
    "topic was processed. If you don't want your query to fail on such cases, set the source "
    'option "failOnDataLoss" to "false".'
)


class DataLossError(RuntimeError):
    """Offsets a query must read are gone (raised only with failOnDataLoss=true)."""


def spark_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects from the source (its timestamps are microseconds)."""
    schema = arrow.SCHEMA if include_headers else arrow.SCHEMA_WITHOUT_HEADERS
    return schema.set(schema.get_field_index("timestamp"), pa.field("timestamp", SPARK_TIMESTAMP))


def to_spark(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A client batch as Spark's Kafka source gives it: microsecond timestamps, and a null
    `headers` for a record without headers (the client gives an empty list)."""
    columns = list(batch.columns)
    names = batch.schema.names
    at = names.index("timestamp")
    columns[at] = columns[at].cast(SPARK_TIMESTAMP)
    if "headers" in names:
        i = names.index("headers")
        headers = columns[i]
        empty = pc.equal(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False)
        if empty.any():
            assert isinstance(headers, pa.ListArray)
            columns[i] = pa.ListArray.from_arrays(
                headers.offsets, headers.values, type=headers.type, mask=pa.array(empty)
            )
    return pa.RecordBatch.from_arrays(columns, schema=spark_schema("headers" in names))


class _RangeFetcher:
    """The asyncio side: fetches of one range, one answer ahead. Lives on the loop thread."""

    def __init__(self, options: SourceOptions, offset_range: OffsetRange) -> None:
        self.options = options
        self.range = offset_range
        self.tp = (offset_range.topic, offset_range.partition)
        self.config = consumer_config(options)
        self.cluster = Cluster.from_config(self.config)
        self.position = offset_range.start
        self._ahead: asyncio.Task[fetcher.FetchedPartition] | None = None

    async def close(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()
        await self.cluster.close()

    async def _fetch(self, position: int) -> fetcher.FetchedPartition:
        leader = await self.cluster.leader_of(*self.tp)
        answers = await fetcher.fetch_from(self.cluster, leader, {self.tp: position}, self.config)
        return answers[0]

    def _lost(self, what: str) -> None:
        message = f"{self.tp[0]}-{self.tp[1]}: {what}. {DATA_LOSS_ADVICE}"
        if self.options.fail_on_data_loss:
            raise DataLossError(message)
        log.warning("%s", message)

    async def next_batches(self) -> tuple[list[memoryview], int] | None:
        """The next data batches of the range and the position they were fetched from;
        None once the range is done."""
        waited_since = time.monotonic()
        while self.position < self.range.until:
            ahead, self._ahead = self._ahead, None
            try:
                fetched = await (ahead if ahead is not None else self._fetch(self.position))
            except (ConnectionError, OSError, KafkaError) as e:
                if isinstance(e, KafkaError) and not e.retriable:
                    raise
                fetched = fetcher.FetchedPartition(self.tp, self.position, -1)
            if fetched.fetch_offset != self.position:
                continue
            code = fetched.error_code
            if code == error_codes.OFFSET_OUT_OF_RANGE.code:
                await self._out_of_range()
                continue
            if (
                code in fetcher.STALE_METADATA_ERRORS
                or code == -1
                or (code and for_code(code).retriable)
            ):
                self._give_up_after(waited_since, f"cannot fetch (error {code})")
                self.cluster.mark_stale(self.tp)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
                continue
            if code:
                raise KafkaError(for_code(code), f"fetching {self.tp[0]}-{self.tp[1]} failed")
            start = self.position
            if fetched.next_offset > start:
                self.position = fetched.next_offset
                waited_since = time.monotonic()
            if fetched.batches:
                if self.position < self.range.until:
                    self._ahead = asyncio.get_running_loop().create_task(self._fetch(self.position))
                return fetched.batches, start
            # Nothing new: the partition ends before `until`, for now or for good.
            waited = time.monotonic() - waited_since
            if fetched.next_offset <= start and waited > self.options.poll_timeout_ms / 1000:
                self._lost(
                    f"offsets {start} to {self.range.until} were not available within "
                    f"kafkaConsumer.pollTimeoutMs (high watermark {fetched.high_watermark})"
                )
                return None
        return None

    def _give_up_after(self, since: float, what: str) -> None:
        if time.monotonic() - since > self.options.poll_timeout_ms / 1000:
            raise KafkaError(error_codes.REQUEST_TIMED_OUT, f"{self.tp[0]}-{self.tp[1]}: {what}")

    async def _out_of_range(self) -> None:
        async def offset(which: int) -> int:
            retry_ms = self.config.retry_backoff_ms
            return (await admin.leader_offsets(self.cluster, [self.tp], which, retry_ms))[self.tp]

        earliest, latest = await offset(EARLIEST), await offset(LATEST)
        if self.position < earliest:
            self._lost(
                f"offsets {self.position} to {earliest - 1} are gone (log starts at {earliest})"
            )
            self.position = earliest
        elif self.position > latest:
            self._lost(f"offset {self.position} is past the log's end {latest} (truncated)")
            self.position = self.range.until


def read_range(options: SourceOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of `offset_range` as Arrow batches in Spark's Kafka source schema."""
    reader: _RangeFetcher = run_blocking(_construct(options, offset_range))
    try:
        while True:
            got = run_blocking(reader.next_batches())
            if got is None:
                return
            batches, start = got
            batch = arrow.batches_to_arrow(
                offset_range.topic,
                offset_range.partition,
                batches,
                min_offset=start,
                max_offset=offset_range.until,
                include_headers=options.include_headers,
            )
            if batch.num_rows:
                yield to_spark(batch)
    finally:
        run_blocking(reader.close())


async def _construct(options: SourceOptions, offset_range: OffsetRange) -> _RangeFetcher:
    return _RangeFetcher(options, offset_range)  # asyncio objects are made on the loop thread
