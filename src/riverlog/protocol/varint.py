"""Variable-length integers of the Kafka protocol.

Unsigned varints (7 bits a byte, low groups first, high bit = "more") carry compact lengths and
tag numbers in flexible message versions; signed varints/varlongs are zig-zag encoded
(0, -1, 1, -2, ... → 0, 1, 2, 3, ...) and carry the fields of v2 records.

Decoders take `(buffer, position)` and return `(value, new_position)`; they raise
`TruncatedError` when the buffer ends mid-varint and `InvalidVarintError` when a varint runs
past the 5 (varint) or 10 (varlong) bytes its type allows — never an `IndexError`.
"""

from __future__ import annotations

from riverlog.protocol.exceptions import InvalidVarintError, TruncatedError

Buffer = bytes | bytearray | memoryview

_MAX_VARINT_BYTES = 5
_MAX_VARLONG_BYTES = 10


def _read_unsigned(buf: Buffer, pos: int, max_bytes: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise TruncatedError("buffer ended inside a varint")
        byte = buf[pos + i]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos + i + 1
        shift += 7
    raise InvalidVarintError(f"varint longer than {max_bytes} bytes")


def read_unsigned_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read an unsigned 32-bit varint."""
    if pos < len(buf):
        first = buf[pos]
        if first < 0x80:  # the common case: lengths and tag counts below 128
            return first, pos + 1
    value, pos = _read_unsigned(buf, pos, _MAX_VARINT_BYTES)
    if value > 0xFFFFFFFF:
        raise InvalidVarintError(f"unsigned varint {value} does not fit 32 bits")
    return value, pos


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zig-zag signed 32-bit varint."""
    raw, pos = _read_unsigned(buf, pos, _MAX_VARINT_BYTES)
    if raw > 0xFFFFFFFF:
        raise InvalidVarintError(f"varint {raw} does not fit 32 bits")
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zig-zag signed 64-bit varlong."""
    raw, pos = _read_unsigned(buf, pos, _MAX_VARLONG_BYTES)
    if raw > 0xFFFFFFFFFFFFFFFF:
        raise InvalidVarintError(f"varlong {raw} does not fit 64 bits")
    return (raw >> 1) ^ -(raw & 1), pos


# Precomputed encodings of small values: lengths and tag counts are nearly always tiny.
_SMALL_UNSIGNED = [bytes([i]) for i in range(128)]


def encode_unsigned_varint(value: int) -> bytes:
    """Encode a non-negative integer below 2**32 as an unsigned varint."""
    if 0 <= value < 128:
        return _SMALL_UNSIGNED[value]
    if value < 0 or value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_zigzag(zigzag: int) -> bytes:
    if zigzag < 128:
        return _SMALL_UNSIGNED[zigzag]
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Encode a signed 32-bit integer as a zig-zag varint."""
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError(f"varint out of range: {value}")
    return _encode_zigzag(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Encode a signed 64-bit integer as a zig-zag varlong."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varlong out of range: {value}")
    return _encode_zigzag(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)
