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

Decompression is bounded: output goes into a buffer of at most `limit` bytes (by default
`MAX_DECOMPRESSED_BYTES`) through cramjam's `decompress_into`, which stops when the buffer is
full, so a bomb costs at most `limit` bytes and the time to fill them, never its whole
expansion. The buffer starts at the size the format announces (snappy's length, zstd's frame
content size, lz4's content size; an announcement above the limit is refused at once) or a
guess, and grows 4x up to the limit when the data needs more.
`decompress_scratch` decompresses into a per-thread buffer that is reused (no allocation, no
zeroing) for callers that only look at the records (the broker's validation).

Invariants: `decompress(c, compress(c, x)) == x` and
`decompress(LZ4, compress(LZ4, x, legacy_lz4=True), legacy_lz4=True) == x`; any malformed
input raises `CorruptRecordError` (never a cramjam error), more than `limit` bytes of output
`DecompressedTooLargeError` (a `CorruptRecordError`) before more than `limit` bytes are
written; an unknown id raises `UnsupportedCompressionError`.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable

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

MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
"""Default bound on what one compressed batch or message may expand to (Kafka has none; a
batch of max.message.bytes, 1 MiB by default, would need a ratio above 64 to reach it)."""
_FIRST_GUESS = 64 * 1024
_GROWTH = 4


class DecompressedTooLargeError(CorruptRecordError):
    """The data decompresses to more than the allowed number of bytes."""

    def __init__(self, codec: int, limit: int) -> None:
        super().__init__(f"{NAMES.get(codec, codec)} data decompresses to more than {limit} bytes")
        self.limit = limit


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


def decompress(
    codec: int, data: Data, *, legacy_lz4: bool = False, limit: int = MAX_DECOMPRESSED_BYTES
) -> bytes | bytearray:
    """`data` decompressed, at most `limit` bytes (else `DecompressedTooLargeError`)."""
    if codec == NONE:
        return bytes(data)
    into = _into_function(codec, data, legacy_lz4)
    size = _first_size(codec, data, limit)
    while True:
        out = bytearray(size)
        written = _run(codec, into, out, limit)
        if written is not None:
            del out[written:]
            return out
        size = min(limit + 1, size * _GROWTH)


_scratch = threading.local()


def decompress_scratch(
    codec: int, data: Data, *, limit: int = MAX_DECOMPRESSED_BYTES
) -> memoryview:
    """`data` decompressed into this thread's reusable buffer: the view is valid until the
    thread's next call. Bounded as `decompress`; the buffer keeps the largest size needed
    (at most `limit` + 1 bytes; one larger than 4 MiB is dropped after use)."""
    if codec == NONE:
        return memoryview(data)
    into = _into_function(codec, data, False)
    buffer: bytearray = getattr(_scratch, "buffer", None) or bytearray(_FIRST_GUESS)
    size = min(limit + 1, max(len(buffer), _first_size(codec, data, limit)))
    while True:
        if len(buffer) < size:
            buffer = bytearray(size)
        written = _run(codec, into, memoryview(buffer)[:size], limit)
        if written is not None:
            break
        size = min(limit + 1, size * _GROWTH)
    _scratch.buffer = buffer if len(buffer) <= 4 * 1024 * 1024 else None
    return memoryview(buffer)[:written]


Into = Callable[[memoryview | bytearray], int]


def _run(codec: int, into: Into, out: memoryview | bytearray, limit: int) -> int | None:
    """Bytes written by `into(out)`, or None when `out` was too small and may grow."""
    try:
        written = into(out)
    except cramjam.DecompressionError as e:
        text = str(e)
        if "failed to write whole buffer" not in text and "smaller than required" not in text:
            raise CorruptRecordError(f"{NAMES[codec]} data does not decompress: {e}") from e
        if len(out) > limit:
            raise DecompressedTooLargeError(codec, limit) from None
        return None
    if written > limit:
        raise DecompressedTooLargeError(codec, limit)
    return written


def _into_function(codec: int, data: Data, legacy_lz4: bool) -> Into:
    view = memoryview(data)
    if codec == GZIP:
        return lambda out: int(cramjam.gzip.decompress_into(view, out))
    if codec == ZSTD:
        return lambda out: int(cramjam.zstd.decompress_into(view, out))
    if codec == SNAPPY:
        if bytes(view[:8]) == XERIAL_MAGIC:
            return lambda out: _xerial_into(view, out)
        return lambda out: int(cramjam.snappy.decompress_raw_into(view, out))
    if codec == LZ4:
        if bytes(view[:4]) != _LZ4_FRAME_MAGIC:
            raise CorruptRecordError("lz4 data is not an LZ4 frame")
        if legacy_lz4:
            # KAFKA-3160: ignore the header checksum, as Kafka does for magic 0, by writing
            # the correct one (a hash of the frame descriptor) over what the producer wrote.
            hc_pos = _lz4_header_checksum_position(view)
            patched = bytearray(view)
            patched[hc_pos] = (xxh32(view[4:hc_pos]) >> 8) & 0xFF
            view = memoryview(patched)
        return lambda out: int(cramjam.lz4.decompress_into(view, out))
    raise UnsupportedCompressionError(f"Unknown compression type id: {codec}")


def _xerial_into(view: memoryview, out: memoryview | bytearray) -> int:
    target = memoryview(out)
    pos = _XERIAL_HEADER.size
    if len(view) < pos:
        raise CorruptRecordError("xerial snappy header is truncated")
    written = 0
    while pos < len(view):
        if len(view) - pos < 4:
            raise CorruptRecordError("xerial snappy block length is truncated")
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError(f"xerial snappy block of {length} bytes does not fit")
        written += int(
            cramjam.snappy.decompress_raw_into(view[pos : pos + length], target[written:])
        )
        pos += length
    return written


def _first_size(codec: int, data: Data, limit: int) -> int:
    """The output buffer to start with: what the data announces (refused above `limit`), else
    a guess; never above `limit` + 1 (one byte more tells "too large" from "just fits")."""
    announced = _announced_size(codec, memoryview(data))
    if announced is not None:
        if announced > limit:
            raise DecompressedTooLargeError(codec, limit)
        return max(announced, 1)
    return min(limit + 1, max(_FIRST_GUESS, 16 * len(data)))


def _announced_size(codec: int, view: memoryview) -> int | None:
    try:
        if codec == SNAPPY and bytes(view[:8]) != XERIAL_MAGIC:
            size = shift = 0
            for i in range(5):
                byte = view[i]
                size |= (byte & 0x7F) << shift
                if byte < 0x80:
                    return size
                shift += 7
            return None
        if codec == ZSTD and bytes(view[:4]) == b"\x28\xb5\x2f\xfd":
            descriptor = view[4]
            fcs_flag, single = descriptor >> 6, descriptor & 0x20
            fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
            if not fcs_size:
                return None
            pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[descriptor & 3]
            size = int.from_bytes(view[pos : pos + fcs_size], "little")
            return size + 256 if fcs_size == 2 else size
        if codec == LZ4 and len(view) > 14 and view[4] & _LZ4_FLG_CONTENT_SIZE:
            return int.from_bytes(view[6:14], "little")
    except IndexError:
        return None
    return None


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
