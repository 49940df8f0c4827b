"""The record walk (compiled and pure Python) and bounded decompression, as pure functions.

Both walk implementations run every test; they must answer identically for any bytes
(hypothesis mutates real batches). Where a C compiler exists (CI, every dev machine: ./dev
installs gcc), the compiled walk must have been built.
"""

from __future__ import annotations

import shutil
import time
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverlog.client.fetcher import ConsumerRecord
from riverlog.protocol.exceptions import CorruptRecordError
from riverlog.protocol.records import compression, walk
from riverlog.protocol.records.batch_header import read_batch_header
from riverlog.protocol.records.v2 import Record, decode_records, encode_batch
from tests.protocol import crafted

IMPLEMENTATIONS = [pytest.param(walk.PYTHON, id="python")]
if walk.COMPILED is not None:
    IMPLEMENTATIONS.append(pytest.param(walk.COMPILED, id="compiled"))
OPEN = (-(1 << 63), (1 << 63) - 1)


def test_the_compiled_walk_is_built_where_a_compiler_exists() -> None:
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler here: the pure-Python walk serves")
    assert walk.COMPILED is not None, "pip install -e . did not build records/_walk.c"


def _body(batch: bytes) -> tuple[Any, memoryview]:
    header = read_batch_header(batch)
    body = memoryview(batch)[61:]
    if header.compression:
        body = memoryview(compression.decompress(header.compression, body))
    return header, body


def _decode(impl: walk.Implementation, batch: bytes, min_offset: int = 0) -> list[Any]:
    header, body = _body(batch)
    out: list[Any] = []
    append_time = header.max_timestamp if header.timestamp_type else -1
    impl.decode(
        out,
        body,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        append_time,
        min_offset,
        "t",
        3,
        header.timestamp_type,
        ConsumerRecord,
    )
    return out


def _scan(
    impl: walk.Implementation, batch: bytes, low_high: tuple[int, int] = OPEN, keys: bool = False
) -> walk.ScanResult:
    header, body = _body(batch)
    return impl.scan(body, header.records_count, header.base_timestamp, *low_high, keys)


records_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=40)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(
            st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=2
        ),
        st.integers(-(1 << 40), 1 << 40),
    ),
    min_size=1,
    max_size=30,
)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@settings(max_examples=60, deadline=None)
@given(records_strategy, st.sampled_from([0, 1, 2, 3, 4]), st.integers(0, 1 << 40))
def test_decode_matches_the_reference_decoder(
    impl: walk.Implementation, recs: list[Any], codec: int, base: int
) -> None:
    batch = encode_batch(
        [Record(base + i, t, k, v, h) for i, (k, v, h, t) in enumerate(recs)],
        base_offset=base,
        compression_type=codec,
    )
    header = read_batch_header(batch)
    expected = [
        ConsumerRecord("t", 3, r.offset, r.timestamp, 0, r.key, r.value, r.headers)
        for r in decode_records(header, memoryview(batch)[61:])
    ]
    assert _decode(impl, batch) == expected
    assert _decode(impl, batch, base + 2) == expected[2:]
    assert _scan(impl, batch) == (None, [])


@pytest.mark.skipif(walk.COMPILED is None, reason="the compiled walk is not built")
@settings(max_examples=300, deadline=None)
@given(
    records_strategy,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_both_walks_agree_on_damaged_records(recs: list[Any], flips: list[Any]) -> None:
    assert walk.COMPILED is not None
    batch = bytearray(encode_batch([Record(i, t, k, v, h) for i, (k, v, h, t) in enumerate(recs)]))
    for at, value in flips:
        batch[61 + at % (len(batch) - 61)] = value
    header, body = _body(bytes(batch))
    args = (body, header.records_count, header.base_timestamp, -5, 1 << 41, True)
    assert walk.PYTHON.scan(*args) == walk.COMPILED.scan(*args)
    results = []
    for impl in (walk.PYTHON, walk.COMPILED):
        try:
            results.append(_decode(impl, bytes(batch)))
        except CorruptRecordError:
            results.append("corrupt")
    assert results[0] == results[1]


@pytest.mark.skipif(walk.COMPILED is None, reason="the compiled walk is not built")
@settings(max_examples=300, deadline=None)
@given(
    records_strategy,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    st.integers(-2, 2),
)
def test_both_chases_agree(recs: list[Any], flips: list[Any], extra: int) -> None:
    """Where each record begins: the same answer from both, or CorruptRecordError from both."""
    assert walk.COMPILED is not None
    batch = bytearray(encode_batch([Record(i, t, k, v, h) for i, (k, v, h, t) in enumerate(recs)]))
    for at, value in flips:
        batch[61 + at % (len(batch) - 61)] = value
    header, body = _body(bytes(batch))
    count = max(header.records_count + extra, 0)
    results = []
    for impl in (walk.PYTHON, walk.COMPILED):
        out = array("i", [-1] * count)
        try:
            impl.chase(body, 0, count, len(body), out)
            results.append(out.tolist())
        except CorruptRecordError:
            results.append("corrupt")
    assert results[0] == results[1]
    if not flips and extra == 0:
        assert results[0] != "corrupt" and len(results[0]) == len(recs)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_scan_names_exactly_the_bad_records(impl: walk.Implementation) -> None:
    keys: list[bytes | None] = [None if i % 10 == 0 else b"k%d" % i for i in range(100)]
    problem, errors = _scan(impl, crafted.records(keys), keys=True)
    assert problem is None
    assert errors == [(i, walk.KEY) for i in range(0, 100, 10)]
    # Timestamps: only those outside the window; -1 (no timestamp) never is.
    batch = encode_batch(
        [
            Record(0, 1_000, b"k", b"v"),
            Record(1, 5_000, b"k", b"v"),
            Record(2, -1, b"k", b"v"),
            Record(3, 9_000, b"k", b"v"),
        ]
    )
    assert _scan(impl, batch, (2_000, 8_000)) == (None, [(0, walk.TIMESTAMP), (3, walk.TIMESTAMP)])
    # Offset deltas must count 0..n-1.
    gappy = encode_batch([Record(0, 1, b"k", b"v"), Record(2, 1, b"k", b"v")])
    assert _scan(impl, gappy) == (None, [(1, walk.OFFSET)])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_scan_reports_framing_and_count_faults(impl: walk.Implementation) -> None:
    _, body = _body(crafted.good(3))
    assert impl.scan(body, 2**31 - 1, 0, *OPEN, False)[0] == (
        "the batch declares 2147483647 records but holds 3"
    )
    assert impl.scan(body, 2, 0, *OPEN, False)[0] is not None  # bytes left over
    damaged = bytearray(body)
    damaged[0] = 0x7E  # the first record's length: 63, past its end
    assert impl.scan(bytes(damaged), 3, 0, *OPEN, False) == (None, [(0, walk.FRAMING)])
    with pytest.raises(CorruptRecordError):
        impl.decode([], bytes(damaged), 3, 0, 0, -1, 0, "t", 0, 0, ConsumerRecord)


@pytest.mark.parametrize(
    "codec", [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
)
def test_a_bomb_stops_at_the_limit(codec: int) -> None:
    payload = compression.compress(codec, bytes(32 * 1024 * 1024))
    began = time.perf_counter()
    with pytest.raises(compression.DecompressedTooLargeError):
        compression.decompress(codec, payload, limit=1024 * 1024)
    with pytest.raises(compression.DecompressedTooLargeError):
        compression.decompress_scratch(codec, payload, limit=1024 * 1024)
    assert len(compression.decompress(codec, payload, limit=32 * 1024 * 1024)) == 32 * 1024 * 1024
    assert time.perf_counter() - began < 30  # a bound against hangs, not a benchmark


@pytest.mark.parametrize(
    "codec", [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
)
@settings(max_examples=20, deadline=None)
@given(data=st.binary(max_size=300_000))
def test_bounded_decompression_round_trips(codec: int, data: bytes) -> None:
    packed = compression.compress(codec, data)
    assert bytes(compression.decompress(codec, packed)) == data
    assert bytes(compression.decompress_scratch(codec, packed)) == data
    if codec == compression.SNAPPY:
        xerial = compression.compress_snappy_xerial(data)
        assert bytes(compression.decompress_scratch(codec, xerial)) == data


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_varints_beyond_their_width_are_malformed(impl: walk.Implementation) -> None:
    def record(timestamp_delta: bytes, offset_delta: bytes = b"\x00") -> bytes:
        body = b"\x00" + timestamp_delta + offset_delta + b"\x01\x01\x00"  # null key, value
        return bytes([len(body) * 2]) + body

    widest = bytes([0xFE] + [0xFF] * 8 + [0x01])  # 2**64 - 2 zig-zagged: 2**63 - 1
    assert impl.scan(record(widest), 1, 0, 1, 0, False) == (None, [])
    out: list[Any] = []
    impl.decode(out, record(widest), 1, 0, 0, -1, 0, "t", 0, 0, ConsumerRecord)
    assert out[0].timestamp == (1 << 63) - 1
    too_wide = bytes([0xFF] * 9 + [0x7F])  # 70 bits
    assert impl.scan(record(too_wide), 1, 0, 1, 0, False) == (None, [(0, walk.FRAMING)])
    offset_33_bits = bytes([0xFF] * 4 + [0x1F])
    assert impl.scan(record(b"\x00", offset_33_bits), 1, 0, 1, 0, False) == (
        None,
        [(0, walk.FRAMING)],
    )
