"""Pure logic of the client: config parsing, murmur2, the accumulator, the producer's flow
control, read_committed filtering."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from riverlog.client.accumulator import ProducerBatch, RecordAccumulator
from riverlog.client.config import ConsumerConfig, ProducerConfig
from riverlog.client.fetcher import data_batches, decode_records
from riverlog.client.partitioner import DefaultPartitioner, key_partition, murmur2
from riverlog.client.producer import AsyncProducer
from riverlog.model import TopicPartition
from riverlog.protocol import error_codes
from riverlog.protocol.records import compression
from riverlog.protocol.records.v2 import (
    Record,
    decode_batch,
    encode_batch,
    encode_record,
)

BS = {"bootstrap.servers": "127.0.0.1:9092"}


def test_config_takes_kafka_keys_and_refuses_mistakes() -> None:
    c = ProducerConfig.parse({**BS, "linger.ms": "20", "acks": "1", "compression.type": "zstd"})
    assert (c.linger_ms, c.acks, c.compression_type) == (20, 1, compression.ZSTD)
    assert not c.enable_idempotence  # acks=1 turns the default idempotence off, as in Java
    assert ProducerConfig.parse(BS).enable_idempotence
    with pytest.raises(ValueError, match=r"enable\.idempotence=true needs acks=all"):
        ProducerConfig.parse({**BS, "acks": "1", "enable.idempotence": "true"})
    with pytest.raises(ValueError, match="unknown config key 'linger'"):
        ProducerConfig.parse({**BS, "linger": 5})
    with pytest.raises(ValueError, match=r"batch\.size: expected an integer"):
        ProducerConfig.parse({**BS, "batch.size": "big"})
    with pytest.raises(ValueError, match=r"bootstrap\.servers is required"):
        ConsumerConfig.parse({"group.id": "g"})
    with pytest.raises(ValueError, match="unknown assignor 'sticky'"):
        ConsumerConfig.parse({**BS, "partition.assignment.strategy": "range,sticky"})
    c2 = ConsumerConfig.parse({**BS, "partition.assignment.strategy": "roundrobin, range"})
    assert c2.assignment_strategies == ("roundrobin", "range")


def test_murmur2_matches_kafkas_test_vectors() -> None:
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


@given(st.binary(max_size=64), st.integers(1, 1000))
def test_key_partition_agrees_with_kafka_python(key: bytes, partitions: int) -> None:
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    assert key_partition(key, partitions) == expected


def test_keyless_records_stick_to_a_partition_until_its_batch_closes() -> None:
    p = DefaultPartitioner()
    first = p.partition("t", None, 6, [0, 1, 2, 3, 4, 5])
    assert all(p.partition("t", None, 6, [0, 1, 2, 3, 4, 5]) == first for _ in range(20))
    p.on_new_batch("t", first)
    assert p.partition("t", None, 6, [0, 1, 2, 3, 4, 5]) != first
    assert p.partition("t", None, 6, [3]) in range(6)


records_strategy = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
        st.integers(-10_000, 10_000),
    ),
    min_size=1,
    max_size=60,
)


@given(records_strategy, st.integers(100, 3000))
def test_the_accumulator_builds_batches_that_decode_to_what_was_added(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    batch_size: int,
) -> None:
    acc = RecordAccumulator(batch_size, linger_ms=5)
    base = 1_700_000_000_000
    for key, value, headers, delta in records:
        acc.append("t", 0, base + delta, key, value, headers, now_ms=0)
    assert acc.ready(now_ms=5, muted=lambda tp: False) == [("t", 0)]  # linger passed
    decoded = []
    while acc.has_waiting():
        batch = acc.pop(("t", 0))
        assert batch.size <= max(batch_size, batch.size if batch.count == 1 else 0)
        data = batch.encode(compression.LZ4)
        for r in decode_batch(data)[0].records:
            decoded.append((r.key, r.value, r.headers, r.timestamp - base))
        acc.release(batch)
    assert decoded == [(k, v, h, d) for k, v, h, d in records]
    assert acc.buffered_bytes == 0


@given(
    st.lists(st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=300))),
    st.lists(st.integers(1, 40), min_size=1),
    st.integers(100, 3000),
)
def test_runs_of_plain_records_batch_as_single_appends_do(
    records: list[tuple[bytes | None, bytes | None]], run_lengths: list[int], batch_size: int
) -> None:
    """`append_plain` (the blocking producer's runs) against `append` one record at a time:
    the same batches byte for byte, each record's waiter in its batch, the buffer accounted."""
    timestamp = 1_700_000_000_000
    one_by_one = RecordAccumulator(batch_size, linger_ms=0)
    for key, value in records:
        one_by_one.append("t", 0, timestamp, key, value, (), now_ms=0)
    in_runs = RecordAccumulator(batch_size, linger_ms=0)
    start, lengths = 0, itertools.cycle(run_lengths)
    while start < len(records):
        run = records[start : start + next(lengths)]
        in_runs.append_plain("t", 0, timestamp, run, range(start, start + len(run)), now_ms=0)
        start += len(run)
    assert in_runs.buffered_bytes == one_by_one.buffered_bytes

    def drain(acc: RecordAccumulator) -> list[ProducerBatch]:
        batches = []
        while acc.has_waiting():
            batches.append(acc.pop(("t", 0)))
            acc.release(batches[-1])
        assert acc.buffered_bytes == 0
        return batches

    expected, got = drain(one_by_one), drain(in_runs)
    assert [b.encode(compression.NONE) for b in got] == [
        b.encode(compression.NONE) for b in expected
    ]
    assert [b.timestamps for b in got] == [b.timestamps for b in expected]
    assert [w for b in got for w in b.futures] == list(range(len(records)))


def test_a_full_batch_is_ready_before_its_linger_and_lingering_ones_after() -> None:
    acc = RecordAccumulator(batch_size=500, linger_ms=50)
    acc.append("t", 0, 1, None, b"x" * 100, (), now_ms=0)
    acc.append("t", 1, 1, None, b"x" * 100, (), now_ms=0)
    assert acc.ready(10, lambda tp: False) == []
    assert acc.next_linger_deadline() == 50
    for _ in range(5):
        acc.append("t", 0, 1, None, b"x" * 100, (), now_ms=10)
    assert acc.ready(10, lambda tp: False) == [("t", 0)]  # a second batch exists
    assert sorted(acc.ready(50, lambda tp: False)) == [("t", 0), ("t", 1)]
    assert acc.ready(50, lambda tp: tp == ("t", 0)) == [("t", 1)]


def test_an_idempotent_partitions_first_batch_travels_alone() -> None:
    """A leader accepts an unknown producer at any sequence, so while a partition's first
    batch under a producer id is unanswered no second one may go (it could be written ahead
    of a first one refused with a retriable error). Flow control only: no I/O happens."""

    async def run(idempotent: bool) -> list[list[TopicPartition]]:
        producer = AsyncProducer({**BS, "enable.idempotence": idempotent, "linger.ms": 0})
        producer._producer_id, producer._producer_epoch = 7, 0
        acc = producer._accumulator

        def add(partition: int) -> None:  # what `enqueue` does, with nobody to tell
            batch, _ = acc.append("t", partition, 1, None, b"x", (), now_ms=0)
            batch.futures.append(None)

        add(0)
        add(1)
        seen = []
        first = acc.pop(("t", 0))
        producer._prepare(first)  # sent: in flight, unanswered
        add(0)
        seen.append(sorted(acc.ready(10, producer._held)))
        producer._handle(first, 0, 0, -1, None)  # answered: the leader knows the producer
        seen.append(sorted(acc.ready(10, producer._held)))
        return seen

    assert asyncio.run(run(True)) == [[("t", 1)], [("t", 0), ("t", 1)]]
    assert asyncio.run(run(False)) == [[("t", 0), ("t", 1)], [("t", 0), ("t", 1)]]


def test_an_out_of_order_refusal_is_a_gap_only_behind_settled_batches() -> None:
    """A refusal as out of order takes a new producer id only for a batch sent when every
    earlier batch of its partition was answered, and still refused so: otherwise the leader
    had merely not seen the earlier batch yet (it was in flight elsewhere, or its answer came
    on another connection), and a new id would re-send under new sequences batches a leader
    may have written (finding 1 of docs/fault-suite.md). No I/O happens."""
    ooo = error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER.code

    async def run(answers: list[tuple[int, int]], *, resend_last: bool = False) -> bool:
        """Three batches sent back to back after an acknowledged one; `answers`: (which,
        error code) in the order they come back; with `resend_last`, batch 3 is retried once
        the others are answered and refused again. Whether a new producer id is wanted."""
        producer = AsyncProducer({**BS, "enable.idempotence": True, "linger.ms": 0})
        producer._producer_id, producer._producer_epoch = 7, 0
        producer._need_producer_id = False
        acc = producer._accumulator
        batches = []
        for _ in range(4):
            batch, _ = acc.append("t", 0, 1, None, b"x", (), now_ms=0)
            batch.futures.append(None)
            batches.append(acc.pop(("t", 0)))  # closed: the next record starts a new batch
        producer._prepare(batches[0])
        producer._handle(batches[0], 0, 0, -1, None)
        for batch in batches[1:]:
            producer._prepare(batch)
        for which, code in answers:
            producer._handle(batches[which], code, 1 if code == 0 else -1, -1, None)
        if resend_last:  # what the retry does: back from `failed`, sent again, refused
            producer._partitions[("t", 0)].failed.remove(batches[3])
            producer._prepare(batches[3])
            producer._handle(batches[3], ooo, -1, -1, None)
        return producer._need_producer_id

    assert not asyncio.run(run([(3, ooo)]))  # batches 1 and 2 still unanswered
    assert not asyncio.run(run([(1, 0), (2, 0), (3, ooo)]))  # it overtook them, answered later
    assert asyncio.run(run([(1, 0), (2, 0), (3, ooo)], resend_last=True))  # a real gap
    assert not asyncio.run(run([(1, 0), (2, 0), (3, 0)]))


def test_a_batch_refused_as_out_of_order_behind_an_acknowledged_later_one_was_written() -> None:
    """Batch 1 is in flight to a broker that no longer leads while batches 2 and 3 are taken
    by the new leader (which has batch 1, replicated) and acknowledged; batch 1, retried to the
    leader, is older than the five batches it remembers and is refused as out of order. A later
    batch taken in sequence means batch 1 is in the log: it succeeds (offset unknown), and no
    new producer id re-sends it (seen in the long run, seed 3001: 40 values twice)."""
    ooo = error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER.code

    async def run() -> tuple[bool, int, list[int]]:
        producer = AsyncProducer({**BS, "enable.idempotence": True, "linger.ms": 0})
        producer._producer_id, producer._producer_epoch = 7, 0
        producer._need_producer_id = False
        acc = producer._accumulator
        batches = []
        offsets: list[int] = []
        for _ in range(4):
            batch, _ = acc.append("t", 0, 1, None, b"x", (), now_ms=0)
            batch.futures.append(lambda _error, meta: offsets.append(meta.offset))
            batches.append(acc.pop(("t", 0)))
        producer._prepare(batches[0])
        producer._handle(batches[0], 0, 0, -1, None)
        for batch in batches[1:]:
            producer._prepare(batch)
        producer._handle(batches[2], 0, 5, -1, None)
        producer._handle(batches[3], 0, 6, -1, None)
        producer._handle(batches[1], ooo, -1, -1, None)
        return producer._need_producer_id, len(producer._partitions[("t", 0)].failed), offsets

    assert asyncio.run(run()) == (False, 0, [0, 5, 6, -1])


def _txn(base: int, pid: int, values: list[bytes], *, control: int | None = None) -> bytes:
    if control is not None:
        key = (0).to_bytes(2, "big") + control.to_bytes(2, "big")
        return encode_batch(
            [Record(base, 0, key, b"\x00\x00\x00\x00\x00\x00")],
            base_offset=base,
            producer_id=pid,
            producer_epoch=0,
            is_transactional=True,
            is_control=True,
        )
    return encode_batch(
        [Record(base + i, 0, None, v) for i, v in enumerate(values)],
        base_offset=base,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=pid >= 0,
    )


def test_read_committed_skips_aborted_transactions_and_markers() -> None:
    # pid 7 aborts its first transaction and commits its second; pid 8 commits; pid -1 is not
    # transactional.
    log = b"".join(
        [
            _txn(0, 7, [b"a0", b"a1"]),
            _txn(2, 8, [b"c0"]),
            _txn(3, -1, [b"plain"]),
            _txn(4, 7, [], control=0),  # ABORT of pid 7
            _txn(5, 8, [], control=1),  # COMMIT of pid 8
            _txn(6, 7, [b"a2"]),
            _txn(7, 7, [], control=1),  # COMMIT of pid 7
        ]
    )
    partial = _txn(8, -1, [b"cut"])[:30]
    view = memoryview(log + partial)
    committed, next_offset = data_batches(view, [(7, 0)])
    values = [r.value for r in decode_records(("t", 0), committed, 0)]
    assert values == [b"c0", b"plain", b"a2"]
    assert next_offset == 8  # past the markers, not into the partial batch
    everything, _ = data_batches(view, None)
    assert [r.value for r in decode_records(("t", 0), everything, 1)] == [
        b"a1",
        b"c0",
        b"plain",
        b"a2",
    ]  # read_uncommitted: markers dropped, min offset respected


def test_a_record_with_headers_encodes_as_the_codec_does() -> None:
    acc = RecordAccumulator(10_000, 0)
    batch, started = acc.append("t", 0, 5, b"k", b"v", [("h", b"1")], now_ms=0)
    assert started
    assert batch.parts == [encode_record(0, 0, b"k", b"v", [("h", b"1")])]
