"""Compression codecs of Kafka record data, through cramjam (C/Rust, releases the GIL).

Codec ids are the attribute bits of batches and messages: 0 none, 1 gzip, 2 snappy, 3 lz4,
4 zstd; names are the values of Kafka's `compression.type`.

Wire formats, as Kafka clients write them:
- gzip: a gzip member (RFC 1952).
- snappy: librdkafka writes a bare snappy block; Java clients write xerial's framing
  (`\\x82SNAPPY\\x00`, version, compatible version, then [int32 length, block]*). Both are read;
  `compress` writes the bare block, `compress_snappy_xerial` the framing.
- lz4: the LZ4 frame format, 64 KiB independent blocks. Kafka before 0.10 (magic 0) computed
  the frame header checksum wrongly (KAFKA-3160); `decompress(..., legacy_lz4=True)` accepts it.
- zstd: a zstd frame.

Invariants: `decompress(c, compress(c, x)) == x` for every codec; any malformed input raises
`CorruptRecordError` (never a cramjam error); an unknown id raises
`UnsupportedCompressionError`.
"""

from __future__ import annotations

import struct

import cramjam

from riverlog.protocol.exceptions import CorruptRecordError, UnsupportedCompressionError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_BY_NAME = {name: codec for codec, name in NAMES.items()}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")
_XERIAL_BLOCK_SIZE = 32 * 1024  # what xerial's SnappyOutputStream uses by default
_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"

Data = bytes | bytearray | memoryview


def codec_by_name(name: str) -> int:
    """The id of a `compression.type` value; ValueError for anything else."""
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown compression type {name!r}; expected one of {', '.join(_BY_NAME)}"
        ) from None


def compress(codec: int, data: Data) -> bytes:
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == NONE:
        return bytes(data)
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def compress_snappy_xerial(data: Data) -> bytes:
    """Snappy in xerial's framing, as Java producers send it."""
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_XERIAL_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def decompress(codec: int, data: Data, *, legacy_lz4: bool = False) -> bytes:
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _decompress_snappy(data)
        if codec == LZ4:
            return _decompress_lz4(data, legacy_lz4)
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"{NAMES[codec]} data does not decompress: {e}") from e
    if codec == NONE:
        return bytes(data)
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def _decompress_snappy(data: Data) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    pos = _XERIAL_HEADER.size
    if len(view) < pos:
        raise CorruptRecordError("xerial snappy header is truncated")
    out = []
    while pos < len(view):
        if len(view) - pos < 4:
            raise CorruptRecordError("xerial snappy block length is truncated")
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError(f"xerial snappy block of {length} bytes does not fit")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(out)


def _decompress_lz4(data: Data, legacy: bool) -> bytes:
    view = memoryview(data)
    if bytes(view[:4]) != _LZ4_FRAME_MAGIC:
        raise CorruptRecordError("lz4 data is not an LZ4 frame")
    try:
        return bytes(cramjam.lz4.decompress(view))
    except cramjam.DecompressionError:
        if not legacy or len(view) < 7:
            raise
    # KAFKA-3160: magic-0 producers hashed the frame header wrongly. The header checksum is
    # the byte after FLG and BD (no content size is ever set by them); try every value.
    patched = bytearray(view)
    for checksum in range(256):
        patched[6] = checksum
        try:
            return bytes(cramjam.lz4.decompress(patched))
        except cramjam.DecompressionError:
            continue
    raise CorruptRecordError("lz4 frame does not decompress")
