"""Legacy message sets (magic 0/1) and conversion to and from v2, with kafka-python as oracle."""

from __future__ import annotations

import contextlib
import struct
import zlib

import kafka.codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from riverlog.protocol.exceptions import CorruptRecordError, ProtocolError
from riverlog.protocol.records import compression
from riverlog.protocol.records.convert import legacy_to_v2, v2_to_legacy
from riverlog.protocol.records.legacy import (
    LegacyMessage,
    decode_message_set,
    encode_message,
    encode_message_set,
)
from riverlog.protocol.records.v2 import Record, encode_batch, iter_record_batches


class _XxhashShim:
    """The slice of the xxhash package that kafka.codec uses."""

    def __init__(self, data: bytes) -> None:
        self._value = compression.xxh32(data)

    @classmethod
    def xxh32(cls, data: bytes) -> _XxhashShim:
        return cls(data)

    def digest(self) -> bytes:
        return self._value.to_bytes(4, "big")


LEGACY_CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4]
blobs = st.none() | st.binary(max_size=200)


@st.composite
def message_lists(draw: st.DrawFn, magic: int) -> list[LegacyMessage]:
    n = draw(st.integers(1, 15))
    base = draw(st.integers(0, 2**40))
    return [
        LegacyMessage(
            base + i,
            draw(blobs),
            draw(blobs),
            draw(st.integers(0, 2**41)) if magic == 1 else -1,
            0,
            magic,
        )
        for i in range(n)
    ]


@settings(max_examples=60, deadline=None)
@given(magic=st.sampled_from([0, 1]), codec=st.sampled_from(LEGACY_CODECS), data=st.data())
def test_round_trip(magic: int, codec: int, data: st.DataObject) -> None:
    messages = data.draw(message_lists(magic))
    encoded = encode_message_set(messages, magic=magic, compression_type=codec)
    assert decode_message_set(encoded) == messages


def test_one_message_byte_for_byte() -> None:
    body = struct.pack(">bbq", 1, 0, 1234) + struct.pack(">i", 1) + b"k" + struct.pack(">i", 2)
    body += b"vv"
    expected = struct.pack(">qi", 7, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body
    assert encode_message(7, 1, b"k", b"vv", 1234) == expected


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_kafka_python_builds_what_we_read_and_reads_what_we_build(
    magic: int, codec: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The oracle needs xxhash for magic-0 lz4 (KAFKA-3160); ours is checked against known
    # answers and lz4's own checksums in test_compression.
    monkeypatch.setattr(kafka.codec, "xxhash", _XxhashShim, raising=False)
    builder = LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 20)
    sent = [(i, 1_600_000_000_000 + i, b"key%d" % i, b"value %d" % i) for i in range(10)]
    for offset, ts, key, value in sent:
        builder.append(offset, ts, key, value)
    theirs = bytes(builder.build())
    ours = decode_message_set(theirs)
    if magic == 1 and codec != compression.NONE:
        # A producer's magic-1 wrapper carries offset 0 (the broker sets the real one), so
        # the absolute inner offsets only mean something relative to each other.
        for m in ours:
            m.offset += len(sent) - 1
    assert [(m.offset, m.key, m.value) for m in ours] == [(o, k, v) for o, _, k, v in sent]
    if magic == 1:
        assert [m.timestamp for m in ours] == [t for _, t, _, _ in sent]
    if codec == compression.NONE:
        mine = encode_message_set(ours, magic=magic)
        assert mine == theirs
    messages = [LegacyMessage(o, k, v, t if magic else -1, 0, magic) for o, t, k, v in sent]
    built = encode_message_set(messages, magic=magic, compression_type=codec)
    records = MemoryRecords(built)
    read_back = []
    while (batch := records.next_batch()) is not None:
        read_back += [(r.offset, r.key, r.value) for r in batch]
    assert read_back == [(o, k, v) for o, _, k, v in sent]


def test_magic_1_wrapper_has_relative_inner_offsets() -> None:
    messages = [LegacyMessage(100 + i, None, b"x%d" % i, 5, 0, 1) for i in range(3)]
    wrapper = encode_message_set(messages, magic=1, compression_type=compression.GZIP)
    assert struct.unpack_from(">q", wrapper)[0] == 102  # the wrapper names the last offset
    inner = zlib.decompress(decode_raw_value(wrapper), 31)
    assert [struct.unpack_from(">q", inner, p)[0] for p in _positions(inner)] == [0, 1, 2]
    assert [m.offset for m in decode_message_set(wrapper)] == [100, 101, 102]


def decode_raw_value(message: bytes) -> bytes:
    key_len = struct.unpack_from(">i", message, 12 + 4 + 2 + 8)[0]
    pos = 12 + 4 + 2 + 8 + 4 + max(key_len, 0)
    n = struct.unpack_from(">i", message, pos)[0]
    return message[pos + 4 : pos + 4 + n]


def _positions(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return out


def test_bad_crc_and_partial_tail() -> None:
    data = encode_message_set([LegacyMessage(0, b"k", b"v", 1, 0, 1)] * 1, magic=1)
    assert decode_message_set(data + data[:10]) == decode_message_set(data)  # tail ignored
    broken = bytearray(data)
    broken[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        decode_message_set(broken)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=300))
def test_garbage_raises_protocol_errors_only(raw: bytes) -> None:
    with contextlib.suppress(ProtocolError):  # anything else fails the test
        decode_message_set(raw, verify_crc=False)


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_up_conversion_keeps_records_and_codec(codec: int) -> None:
    messages = [LegacyMessage(i, b"k%d" % i, b"v%d" % i, 1000 + i, 0, 1) for i in range(5)]
    legacy = encode_message_set(messages, magic=1, compression_type=codec)
    batches = list(iter_record_batches(legacy_to_v2(legacy)))
    assert len(batches) == 1 and batches[0].header.compression == codec
    assert [(r.offset, r.key, r.value, r.timestamp) for r in batches[0].records] == [
        (i, b"k%d" % i, b"v%d" % i, 1000 + i) for i in range(5)
    ]


def test_up_conversion_rejects_a_cut_message_set() -> None:
    legacy = encode_message_set([LegacyMessage(0, None, b"v", 1, 0, 1)], magic=1)
    with pytest.raises(CorruptRecordError):
        legacy_to_v2(legacy[:-3])


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_down_conversion(magic: int, codec: int) -> None:
    v2 = encode_batch(
        [Record(40 + i, 5000 + i, b"k", b"v%d" % i, [("h", b"x")]) for i in range(4)],
        base_offset=40,
        compression_type=codec,
    )
    legacy = decode_message_set(v2_to_legacy(v2 + v2[:20], magic))
    assert [(m.offset, m.value) for m in legacy] == [(40 + i, b"v%d" % i) for i in range(4)]
    assert [m.timestamp for m in legacy] == ([5000, 5001, 5002, 5003] if magic else [-1] * 4)


@pytest.mark.parametrize("magic", [0, 1])
def test_every_cut_of_a_message_set_yields_its_whole_messages(magic: int) -> None:
    messages = [
        LegacyMessage(i, b"k" * i, b"v" * (3 * i), 10 + i if magic else -1, 0, magic)
        for i in range(4)
    ]
    sizes = [len(encode_message_set([m], magic=magic)) for m in messages]
    data = encode_message_set(messages, magic=magic)
    for cut in range(len(data) + 1):
        complete = sum(1 for i in range(len(sizes)) if sum(sizes[: i + 1]) <= cut)
        assert decode_message_set(data[:cut]) == messages[:complete]


def test_a_cut_compressed_wrapper_is_ignored_too() -> None:
    plain = encode_message_set([LegacyMessage(0, None, b"a", 1, 0, 1)], magic=1)
    wrapped = encode_message_set(
        [LegacyMessage(1 + i, None, b"b", 1, 0, 1) for i in range(3)],
        magic=1,
        compression_type=compression.GZIP,
    )
    assert [m.offset for m in decode_message_set(plain + wrapped[:-1])] == [0]


def _wrapper(
    offset: int, magic: int, inner: bytes, codec: int, timestamp: int, attrs: int = 0
) -> bytes:
    return encode_message(
        offset, magic, None, compression.compress(codec, inner), timestamp, codec | attrs
    )


def test_magic_1_relative_offsets_count_back_from_the_wrapper() -> None:
    # A compacted wrapper: relative offsets 0, 2, 5, the broker stamped the last as 105.
    inner = b"".join(encode_message(rel, 1, None, b"x", 7) for rel in (0, 2, 5))
    data = _wrapper(105, 1, inner, compression.SNAPPY, 7)
    assert [m.offset for m in decode_message_set(data)] == [100, 102, 105]


def test_magic_0_inner_offsets_are_absolute() -> None:
    inner = b"".join(encode_message(off, 0, None, b"x") for off in (40, 41, 43))
    data = _wrapper(43, 0, inner, compression.GZIP, -1)
    decoded = decode_message_set(data)
    assert [m.offset for m in decoded] == [40, 41, 43]
    assert [m.timestamp for m in decoded] == [-1, -1, -1]


def test_log_append_time_wrapper_stamps_its_inner_messages() -> None:
    inner = b"".join(encode_message(rel, 1, None, b"x", 100 + rel) for rel in range(3))
    create = decode_message_set(_wrapper(9, 1, inner, compression.LZ4, 555))
    assert [(m.timestamp, m.timestamp_type) for m in create] == [(100, 0), (101, 0), (102, 0)]
    append = decode_message_set(_wrapper(9, 1, inner, compression.LZ4, 555, attrs=0x08))
    assert [(m.timestamp, m.timestamp_type) for m in append] == [(555, 1)] * 3


def test_wrapper_timestamp_is_the_max_and_offset_the_last() -> None:
    messages = [LegacyMessage(1000 + i, None, b"x", ts, 0, 1) for i, ts in enumerate((30, 90, 60))]
    data = encode_message_set(messages, magic=1, compression_type=compression.LZ4)
    offset, _size, _crc, magic, attrs, timestamp = struct.unpack_from(">qiIbbq", data)
    assert (offset, magic, attrs, timestamp) == (1002, 1, compression.LZ4, 90)
    assert [m.offset for m in decode_message_set(data)] == [1000, 1001, 1002]


def test_magic_0_lz4_wrapper_has_kafkas_broken_header_checksum() -> None:
    data = encode_message_set(
        [LegacyMessage(0, None, b"x", -1, 0, 0)], magic=0, compression_type=compression.LZ4
    )
    frame = decode_raw_value_v0(data)
    assert frame[6] == (compression.xxh32(frame[:6]) >> 8) & 0xFF
    with pytest.raises(CorruptRecordError):  # a strict reader rejects it
        compression.decompress(compression.LZ4, frame)
    assert decode_message_set(data)[0].value == b"x"


def decode_raw_value_v0(message: bytes) -> bytes:
    (n,) = struct.unpack_from(">i", message, 12 + 4 + 2 + 4)  # null key
    return message[12 + 4 + 2 + 8 : 12 + 4 + 2 + 8 + n]


def test_nested_compression_is_corrupt() -> None:
    inner = _wrapper(0, 1, encode_message(0, 1, None, b"x", 1), compression.GZIP, 1)
    with pytest.raises(CorruptRecordError, match="nested"):
        decode_message_set(_wrapper(0, 1, inner, compression.GZIP, 1))


def test_compressed_garbage_and_unknown_codec_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="gzip"):
        decode_message_set(encode_message(0, 1, None, b"not gzip", 1, compression.GZIP))
    with pytest.raises(CorruptRecordError):
        decode_message_set(encode_message(0, 1, None, b"x", 1, 6))


@pytest.mark.parametrize(
    "layout",
    [
        struct.pack(">qi", 0, -5) + b"\x00" * 20,  # negative message size
        struct.pack(">qi", 0, 3) + b"\x00" * 20,  # smaller than any message
    ],
)
def test_impossible_sizes_are_corrupt(layout: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_message_set(layout)


def test_field_overrunning_its_message_is_corrupt_and_magic_2_is_rejected() -> None:
    body = struct.pack(">bbi", 0, 0, 50) + b"k" + struct.pack(">i", -1)  # key claims 50 bytes
    message = struct.pack(">qiI", 0, len(body) + 4, zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError, match="does not fit"):
        decode_message_set(message)
    v2ish = struct.pack(">bbi", 2, 0, -1) + struct.pack(">i", -1)
    with pytest.raises(CorruptRecordError, match="magic"):
        decode_message_set(struct.pack(">qiI", 0, len(v2ish) + 4, zlib.crc32(v2ish)) + v2ish)


def test_byte_exact_magic_0_and_null_fields() -> None:
    body = struct.pack(">bbii", 0, 0, -1, -1)
    expected = struct.pack(">qiI", 3, len(body) + 4, zlib.crc32(body)) + body
    assert encode_message_set([LegacyMessage(3, None, None, -1, 0, 0)], magic=0) == expected
    assert decode_message_set(expected) == [LegacyMessage(3, None, None, -1, 0, 0)]
