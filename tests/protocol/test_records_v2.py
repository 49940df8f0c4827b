"""v2 record batches: round trips, kafka-python as an independent oracle, corruption."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from riverlog.protocol.exceptions import CorruptRecordError, ProtocolError, TruncatedError
from riverlog.protocol.records import compression
from riverlog.protocol.records.batch_header import (
    TIMESTAMP_LOG_APPEND_TIME,
    iter_batches,
    read_batch_header,
    set_log_append_time,
    verify_crc,
)
from riverlog.protocol.records.v2 import (
    CONTROL_COMMIT,
    Record,
    control_record_type,
    decode_batch,
    encode_batch,
    iter_record_batches,
)

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]

blobs = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=10), blobs), max_size=3)


@st.composite
def record_lists(draw: st.DrawFn, base_offset: int = 0) -> list[Record]:
    n = draw(st.integers(1, 20))
    base_ts = draw(st.integers(0, 2**41))
    gaps = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    offsets = [base_offset + sum(gaps[:i]) - gaps[0] for i in range(1, n + 1)]
    return [
        Record(
            offset=o,
            timestamp=base_ts + draw(st.integers(-1000, 10**6)),
            key=draw(blobs),
            value=draw(blobs),
            headers=draw(headers),
        )
        for o in offsets
    ]


@settings(max_examples=60, deadline=None)
@given(records=record_lists(), codec=st.sampled_from(CODECS), base=st.integers(0, 2**40))
def test_round_trip_every_codec(records: list[Record], codec: int, base: int) -> None:
    for r in records:
        r.offset += base
    raw = encode_batch(
        records,
        base_offset=base,
        compression_type=codec,
        producer_id=7,
        producer_epoch=1,
        base_sequence=3,
    )
    batch, end = decode_batch(raw)
    assert end == len(raw)
    assert batch.records == records
    h = batch.header
    assert (h.base_offset, h.compression, h.records_count) == (base, codec, len(records))
    assert h.last_offset == records[-1].offset
    assert h.max_timestamp == max(r.timestamp for r in records)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 3)


@settings(max_examples=40, deadline=None)
@given(
    items=st.lists(
        st.tuples(blobs, blobs, headers, st.integers(0, 2**40)), min_size=1, max_size=10
    ),
)
def test_bytes_equal_kafka_pythons_builder(
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
) -> None:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, batch_size=1 << 30)
    for i, (key, value, hs, ts) in enumerate(items):
        assert builder.append(i, ts, key, value, hs) is not None
    theirs = bytes(builder.build())
    records = [Record(i, ts, k, v, hs) for i, (k, v, hs, ts) in enumerate(items)]
    ours = encode_batch(records, partition_leader_epoch=0)
    assert ours == theirs
    assert decode_batch(theirs)[0].records == records
    oracle = DefaultRecordBatch(ours)
    assert oracle.validate_crc()
    assert [(r.offset, r.key, r.value) for r in oracle] == [
        (r.offset, r.key, r.value) for r in records
    ]


def test_flags_and_control_records() -> None:
    key = struct.pack(">hh", 0, CONTROL_COMMIT)
    marker = [Record(5, 1000, key, struct.pack(">hi", 0, 3))]
    raw = encode_batch(
        marker,
        base_offset=5,
        producer_id=9,
        producer_epoch=2,
        is_transactional=True,
        is_control=True,
    )
    batch, _ = decode_batch(raw)
    assert batch.header.is_transactional and batch.header.is_control
    assert control_record_type(batch.records[0]) == CONTROL_COMMIT
    assert DefaultRecordBatch(raw).is_control_batch


def test_log_append_time_applies_to_every_record() -> None:
    raw = bytearray(encode_batch([Record(0, 10, None, b"a"), Record(1, 20, None, b"b")]))
    set_log_append_time(raw, 0, 99_000)
    verify_crc(raw, 0, read_batch_header(raw))
    batch, _ = decode_batch(raw)
    assert batch.header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records] == [99_000, 99_000]


def test_record_set_iteration_ignores_a_partial_tail() -> None:
    one = encode_batch([Record(0, 1, b"k", b"v")])
    two = encode_batch([Record(1, 2, b"k", b"w")], base_offset=1)
    data = one + two + two[:30]
    assert [b.header.base_offset for b in iter_record_batches(data)] == [0, 1]
    with pytest.raises(TruncatedError):  # the broker's validation takes whole batches only
        list(iter_batches(data))
    assert len(list(iter_batches(one + two))) == 2


def test_bad_crc_is_corrupt_record() -> None:
    raw = bytearray(encode_batch([Record(0, 1, b"k", b"value")]))
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_batch(raw)
    # Without the CRC check the damage (a header count turned into a runaway varint) is
    # still found, and still reported as a corrupt record.
    with pytest.raises(CorruptRecordError):
        decode_batch(raw, verify=False)


def test_truncated_batch_raises_truncated() -> None:
    raw = encode_batch([Record(0, 1, b"k", b"value")])
    for cut in range(len(raw)):
        with pytest.raises(ProtocolError):
            decode_batch(raw[:cut])
    with pytest.raises(TruncatedError):
        decode_batch(raw[:-1])


@settings(max_examples=300, deadline=None)
@given(
    records=record_lists(),
    codec=st.sampled_from(CODECS),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_damaged_records_raise_protocol_errors_only(
    records: list[Record], codec: int, flips: list[tuple[int, int]]
) -> None:
    raw = bytearray(encode_batch(records, compression_type=codec))
    for where, mask in flips:
        raw[where % len(raw)] ^= mask
    with contextlib.suppress(ProtocolError):  # anything else fails the test
        decode_batch(raw, verify=False)
