"""Compression codecs of Kafka record data, through cramjam (C/Rust, releases the GIL).

Codec ids are the attribute bits of batches and messages: 0 none, 1 gzip, 2 snappy, 3 lz4,
4 zstd; names are the values of Kafka's `compression.type`.

Wire formats, as Kafka clients write them:
- gzip: a gzip member (RFC 1952).
- snappy: librdkafka writes a bare snappy block; Java clients write xerial's framing
  (`\\x82SNAPPY\\x00`, version, compatible version, then [int32 length, block]*). Both are read;
  `compress` writes the bare block, `compress_snappy_xerial` the framing.
- lz4: the LZ4 frame format, 64 KiB independent blocks, no content size or checksum. Kafka
  before 0.10 (magic 0) computed the frame header checksum (HC) over the magic number too
  (KAFKA-3160). As Kafka does for magic 0, `compress(..., legacy_lz4=True)` writes that broken
  HC and `decompress(..., legacy_lz4=True)` ignores the HC (it is recomputed, then the frame is
  decompressed once), so both the broken and the correct variant are read.
- zstd: a zstd frame.

There is no cap on the decompressed size: cramjam's one-shot calls cannot stop early, so a
cap could only be checked after the whole output exists. Callers bound the *compressed*
input (frame and batch size limits).

Invariants: `decompress(c, compress(c, x)) == x` and
`decompress(LZ4, compress(LZ4, x, legacy_lz4=True), legacy_lz4=True) == x`; any malformed
input raises `CorruptRecordError` (never a cramjam error); an unknown id raises
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
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_DICT_ID = 0x01

Data = bytes | bytearray | memoryview


def codec_by_name(name: str) -> int:
    """The id of a `compression.type` value; ValueError for anything else."""
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown compression type {name!r}; expected one of {', '.join(_BY_NAME)}"
        ) from None


def compress(codec: int, data: Data, *, legacy_lz4: bool = False) -> bytes:
    """`data` compressed as Kafka clients expect it for `codec` (snappy: the bare block).

    `legacy_lz4` writes the broken lz4 header checksum that magic-0 readers verify."""
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        compressor.compress(data)
        frame = bytes(compressor.finish())
        if not legacy_lz4:
            return frame
        hc_pos = _lz4_header_checksum_position(frame)
        broken = (xxh32(frame[:hc_pos]) >> 8) & 0xFF  # KAFKA-3160: hashes the magic too
        return frame[:hc_pos] + bytes((broken,)) + frame[hc_pos + 1 :]
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
    if not legacy:
        return bytes(cramjam.lz4.decompress(view))
    # KAFKA-3160: ignore the header checksum, as Kafka does for magic 0, by writing the
    # correct one (a hash of the frame descriptor) over whatever the producer wrote.
    hc_pos = _lz4_header_checksum_position(view)
    patched = bytearray(view)
    patched[hc_pos] = (xxh32(view[4:hc_pos]) >> 8) & 0xFF
    return bytes(cramjam.lz4.decompress(patched))


def _lz4_header_checksum_position(frame: Data) -> int:
    """Index of the header checksum byte: after magic, FLG, BD and the optional fields."""
    if len(frame) < 7:
        raise CorruptRecordError("lz4 frame header is truncated")
    flg = frame[4]
    pos = 6 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0) + (4 if flg & _LZ4_FLG_DICT_ID else 0)
    if pos >= len(frame):
        raise CorruptRecordError("lz4 frame header is truncated")
    return pos


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_MASK32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def xxh32(data: Data, seed: int = 0) -> int:
    """XXH32 (what LZ4 frames checksum with), in Python: it only ever hashes the few bytes
    of a frame descriptor, so no dependency is worth it."""
    b = bytes(data)
    n, pos = len(b), 0
    if n >= 16:
        v = [
            (seed + _P1 + _P2) & _MASK32,
            (seed + _P2) & _MASK32,
            seed & _MASK32,
            (seed - _P1) & _MASK32,
        ]
        while pos + 16 <= n:
            for lane in range(4):
                word = int.from_bytes(b[pos : pos + 4], "little")
                v[lane] = (_rotl((v[lane] + word * _P2) & _MASK32, 13) * _P1) & _MASK32
                pos += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK32
    else:
        h = (seed + _P5) & _MASK32
    h = (h + n) & _MASK32
    while pos + 4 <= n:
        word = int.from_bytes(b[pos : pos + 4], "little")
        h = (_rotl((h + word * _P3) & _MASK32, 17) * _P4) & _MASK32
        pos += 4
    while pos < n:
        h = (_rotl((h + b[pos] * _P5) & _MASK32, 11) * _P1) & _MASK32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _MASK32
    h ^= h >> 13
    h = (h * _P3) & _MASK32
    h ^= h >> 16
    return h
