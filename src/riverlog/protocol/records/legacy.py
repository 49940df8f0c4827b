"""Legacy message sets: magic 0 (Kafka 0.8-0.9) and magic 1 (0.10), with nested compression.

One message on the wire (big-endian):

    offset int64 | messageSize int32 | crc uint32 | magic int8 | attributes int8 |
    [timestamp int64, magic 1 only] | key bytes (int32 length, -1 null) | value bytes

The CRC is CRC-32 (zlib's) of everything after it. Attribute bits 0-2 name a codec; a
compressed message is a *wrapper* whose value is a whole compressed message set. Inner
offsets of a magic-0 wrapper are absolute; those of a magic-1 wrapper are relative (0..n-1)
and the wrapper carries the absolute offset of the *last* inner message. Magic-1 attribute
bit 3 is LogAppendTime: then the wrapper's timestamp applies to every inner message.

Invariants: `decode_message_set` raises only `ProtocolError`s (`CorruptRecordError` for a bad
CRC, magic, size or nesting; a partial message at the end of the buffer is ignored, as Kafka
fetch responses may end mid-message; a message whose fields overrun its declared size is
corrupt, not truncated); `encode_message_set` output decodes back to the same messages with
the offsets it assigned. Magic-0 lz4 is read leniently and written with the broken header
checksum, as Kafka does (see `compression`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from riverlog.protocol.exceptions import CorruptRecordError
from riverlog.protocol.records import compression

_PREFIX = struct.Struct(">qi")  # offset, messageSize
_CRC = struct.Struct(">I")
_MAGIC_ATTRIBUTES = struct.Struct(">bb")
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")

LOG_OVERHEAD = 12
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
NO_TIMESTAMP = -1


@dataclass(slots=True)
class LegacyMessage:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = NO_TIMESTAMP
    timestamp_type: int = 0  # 0 CreateTime, 1 LogAppendTime (magic 1 only)
    magic: int = 1


def _read_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError("message ends inside a length field")
    (n,) = _LENGTH.unpack_from(buf, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or pos + n > end:
        raise CorruptRecordError(f"message field length {n} does not fit the message")
    return bytes(buf[pos : pos + n]), pos + n


def _decode_one(
    buf: memoryview, pos: int, verify_crc: bool, depth: int
) -> tuple[list[LegacyMessage], int] | None:
    """The message(s) at `pos` (a wrapper yields its inner messages), or None when the
    buffer ends inside it."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    offset, size = _PREFIX.unpack_from(buf, pos)
    if size < 4 + 2 + 8:  # crc, magic+attributes, two lengths
        raise CorruptRecordError(f"message size {size} is too small")
    end = pos + LOG_OVERHEAD + size
    if end > len(buf):
        return None
    body = pos + LOG_OVERHEAD
    (crc,) = _CRC.unpack_from(buf, body)
    if verify_crc and zlib.crc32(buf[body + 4 : end]) != crc:
        raise CorruptRecordError(f"message at offset {offset} fails its CRC")
    magic, attributes = _MAGIC_ATTRIBUTES.unpack_from(buf, body + 4)
    if magic not in (0, 1):
        raise CorruptRecordError(f"message magic {magic} is not 0 or 1")
    p = body + 6
    timestamp = NO_TIMESTAMP
    if magic == 1:
        if p + 8 > end:
            raise CorruptRecordError("message ends inside its timestamp")
        (timestamp,) = _TIMESTAMP.unpack_from(buf, p)
        p += 8
    key, p = _read_bytes(buf, p, end)
    value, p = _read_bytes(buf, p, end)
    if p != end:
        raise CorruptRecordError(f"message at offset {offset} has {end - p} stray bytes")
    timestamp_type = 1 if magic == 1 and attributes & TIMESTAMP_TYPE_BIT else 0
    codec = attributes & COMPRESSION_MASK
    if codec == compression.NONE:
        return [LegacyMessage(offset, key, value, timestamp, timestamp_type, magic)], end
    if depth > 0:
        raise CorruptRecordError("compressed message nested inside a compressed message")
    if value is None:
        raise CorruptRecordError("compressed wrapper message has no value")
    inner_data = compression.decompress(codec, value, legacy_lz4=magic == 0)
    inner = _decode_all(memoryview(inner_data), verify_crc, depth + 1)
    if magic == 1 and inner:
        base = offset - inner[-1].offset  # relative inner offsets: the wrapper has the last
        for m in inner:
            m.offset += base
            if timestamp_type == 1:
                m.timestamp, m.timestamp_type = timestamp, 1
    return inner, end


def _decode_all(buf: memoryview, verify_crc: bool, depth: int) -> list[LegacyMessage]:
    out: list[LegacyMessage] = []
    pos = 0
    while pos < len(buf):
        decoded = _decode_one(buf, pos, verify_crc, depth)
        if decoded is None:
            break
        messages, pos = decoded
        out += messages
    return out


def decode_message_set(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> list[LegacyMessage]:
    """Every whole message of a legacy message set, wrappers flattened."""
    try:
        return _decode_all(memoryview(data), verify_crc, 0)
    except struct.error as e:  # defensive: every read above is bounds-checked
        raise CorruptRecordError(f"malformed message set: {e}") from e


def encode_message(
    offset: int,
    magic: int,
    key: bytes | None,
    value: bytes | None,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
) -> bytes:
    parts = [_MAGIC_ATTRIBUTES.pack(magic, attributes)]
    if magic == 1:
        parts.append(_TIMESTAMP.pack(timestamp))
    for field in (key, value):
        parts.append(_LENGTH.pack(-1) if field is None else _LENGTH.pack(len(field)) + field)
    body = b"".join(parts)
    crc = zlib.crc32(body)
    return _PREFIX.pack(offset, len(body) + 4) + _CRC.pack(crc) + body


def encode_message_set(
    messages: Sequence[LegacyMessage],
    *,
    magic: int,
    compression_type: int = compression.NONE,
    log_append_time: bool = False,
) -> bytes:
    """Messages at their own offsets; compressed: one wrapper holding them all. Magic-0 lz4
    gets Kafka's broken header checksum (KAFKA-3160), which is what 0.8/0.9 readers verify."""
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    if compression_type == compression.ZSTD:
        raise ValueError("zstd does not exist in the legacy formats")
    time_bit = TIMESTAMP_TYPE_BIT if magic == 1 and log_append_time else 0
    if compression_type == compression.NONE:
        return b"".join(
            encode_message(m.offset, magic, m.key, m.value, m.timestamp, time_bit) for m in messages
        )
    if not messages:
        return b""
    first = messages[0].offset
    inner = b"".join(
        encode_message(
            m.offset - first if magic == 1 else m.offset, magic, m.key, m.value, m.timestamp
        )
        for m in messages
    )
    if compression_type == compression.SNAPPY:
        wrapped = compression.compress_snappy_xerial(inner)  # what Java clients expect
    else:
        wrapped = compression.compress(compression_type, inner, legacy_lz4=magic == 0)
    wrapper_offset = messages[-1].offset  # magic 1: the last inner offset; magic 0: any
    timestamp = max((m.timestamp for m in messages), default=NO_TIMESTAMP)
    return encode_message(
        wrapper_offset, magic, None, wrapped, timestamp, compression_type | time_bit
    )
