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
        0, 1, 2, 3, 4
    ]  # fmt: skip
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
