"""Compression codecs: round trips, xerial snappy framing, KAFKA-3160 lz4, garbage input."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverlog.protocol.exceptions import CorruptRecordError, UnsupportedCompressionError
from riverlog.protocol.records import compression

CODECS = list(compression.NAMES)


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=200_000), codec=st.sampled_from(CODECS))
def test_round_trip(data: bytes, codec: int) -> None:
    assert compression.decompress(codec, compression.compress(codec, data)) == data


def test_names_are_kafkas_compression_type_values() -> None:
    assert [compression.codec_by_name(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert compression.codec_by_name("GZIP") == compression.GZIP
    with pytest.raises(ValueError, match="unknown compression type 'brotli'"):
        compression.codec_by_name("brotli")


def test_xerial_snappy_with_several_blocks() -> None:
    data = bytes(range(256)) * 600  # > 32 KiB: several blocks
    framed = compression.compress_snappy_xerial(data)
    assert framed.startswith(compression.XERIAL_MAGIC)
    assert compression.decompress(compression.SNAPPY, framed) == data
    # Built by hand, the way xerial's SnappyOutputStream lays it out.
    blocks = [bytes(cramjam.snappy.compress_raw(part)) for part in (b"abc" * 10, b"xyz")]
    manual = compression.XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    manual += b"".join(struct.pack(">i", len(b)) + b for b in blocks)
    assert compression.decompress(compression.SNAPPY, manual) == b"abc" * 10 + b"xyz"


def test_lz4_is_the_frame_format_and_legacy_header_checksum_is_accepted() -> None:
    data = b"kafka " * 1000
    frame = bytearray(compression.compress(compression.LZ4, data))
    assert frame[:4] == b"\x04\x22\x4d\x18"
    frame[6] ^= 0x5A  # a wrong header checksum, as magic-0 producers wrote (KAFKA-3160)
    with pytest.raises(CorruptRecordError):
        compression.decompress(compression.LZ4, frame)
    assert compression.decompress(compression.LZ4, frame, legacy_lz4=True) == data


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=300_000), legacy=st.booleans())
def test_lz4_round_trip_both_checksum_variants(data: bytes, legacy: bool) -> None:
    frame = compression.compress(compression.LZ4, data, legacy_lz4=legacy)
    assert compression.decompress(compression.LZ4, frame, legacy_lz4=legacy) == data
    assert compression.decompress(compression.LZ4, frame, legacy_lz4=True) == data


def test_lz4_is_what_cramjams_frame_api_reads_and_writes() -> None:
    data = bytes(range(256)) * 1000  # several 64 KiB blocks
    ours = compression.compress(compression.LZ4, data)
    assert bytes(cramjam.lz4.decompress(ours)) == data
    theirs = bytes(cramjam.lz4.compress(data))  # with a content checksum
    assert theirs[:4] == b"\x04\x22\x4d\x18"
    assert compression.decompress(compression.LZ4, theirs) == data
    assert compression.decompress(compression.LZ4, theirs, legacy_lz4=True) == data


def test_legacy_lz4_writes_kafkas_broken_header_checksum() -> None:
    data = b"old kafka " * 100
    good = compression.compress(compression.LZ4, data)
    broken = compression.compress(compression.LZ4, data, legacy_lz4=True)
    assert good[6] == (compression.xxh32(good[4:6]) >> 8) & 0xFF  # over FLG, BD
    assert broken[6] == (compression.xxh32(broken[:6]) >> 8) & 0xFF  # magic included
    assert broken[:6] == good[:6] and broken[7:] == good[7:] and broken[6] != good[6]
    with pytest.raises(CorruptRecordError):
        compression.decompress(compression.LZ4, broken)


def test_legacy_lz4_skips_optional_descriptor_fields() -> None:
    data = b"sized " * 50
    plain = compression.compress(compression.LZ4, data)
    # The same frame with the optional content size field: FLG bit 3, 8 bytes after BD.
    descriptor = bytes((plain[4] | 0x08, plain[5])) + struct.pack("<q", len(data))
    hc = (compression.xxh32(descriptor) >> 8) & 0xFF
    frame = bytearray(plain[:4] + descriptor + bytes((hc,)) + plain[7:])
    assert compression.decompress(compression.LZ4, frame) == data  # a valid frame
    frame[14] ^= 0xFF  # the header checksum now sits at byte 14
    with pytest.raises(CorruptRecordError):
        compression.decompress(compression.LZ4, frame)
    assert compression.decompress(compression.LZ4, frame, legacy_lz4=True) == data


def test_xxh32_known_answers() -> None:
    assert compression.xxh32(b"") == 0x02CC5D05
    assert compression.xxh32(b"a") == 0x550D7456
    assert compression.xxh32(b"abc") == 0x32D153FF


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=100))
def test_xxh32_matches_lz4_content_checksum(data: bytes) -> None:
    compressor = cramjam.lz4.Compressor(content_checksum=True)
    compressor.compress(data)
    frame = bytes(compressor.finish())
    assert int.from_bytes(frame[-4:], "little") == compression.xxh32(data)


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=100_000))
def test_xerial_round_trip(data: bytes) -> None:
    framed = compression.compress_snappy_xerial(data)
    assert compression.decompress(compression.SNAPPY, framed) == data
    plain = compression.compress(compression.SNAPPY, data)  # default: the bare block
    assert not plain.startswith(compression.XERIAL_MAGIC)
    assert plain == bytes(cramjam.snappy.compress_raw(data))


@pytest.mark.parametrize("cut", [8, 12, 15, 17, 20])
def test_cut_xerial_frame_is_corrupt(cut: int) -> None:
    framed = compression.compress_snappy_xerial(b"abcdefgh" * 10)
    with pytest.raises(CorruptRecordError):
        compression.decompress(compression.SNAPPY, framed[:cut])


@settings(max_examples=300, deadline=None)
@given(
    codec=st.sampled_from([c for c in CODECS if c != compression.NONE]),
    prefix=st.sampled_from(
        [b"", b"\x1f\x8b\x08", b"\x04\x22\x4d\x18", b"\x28\xb5\x2f\xfd", compression.XERIAL_MAGIC]
    ),
    raw=st.binary(max_size=200),
    legacy=st.booleans(),
)
def test_random_input_raises_only_corrupt_record(
    codec: int, prefix: bytes, raw: bytes, legacy: bool
) -> None:
    try:
        compression.decompress(codec, prefix + raw, legacy_lz4=legacy)
    except CorruptRecordError as e:
        assert compression.NAMES[codec] in str(e) or "xerial" in str(e) or "lz4" in str(e)


@pytest.mark.parametrize("codec", [c for c in CODECS if c != compression.NONE])
@pytest.mark.parametrize(
    "garbage", [b"", b"\x05", b"garbage data" * 7, compression.XERIAL_MAGIC + b"\x00" * 8 + b"\xff"]
)
def test_garbage_is_corrupt_record(codec: int, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        compression.decompress(codec, garbage)


def test_unknown_codec() -> None:
    with pytest.raises(UnsupportedCompressionError):
        compression.compress(7, b"x")
    with pytest.raises(UnsupportedCompressionError):
        compression.decompress(5, b"x")
