"""Primitive types of the Kafka protocol, read from and written to buffers.

The generated message module (`riverlog.protocol.messages`) calls these for every field that
is not a fixed-width integer (those it packs in groups with precompiled `struct.Struct`s).
Readers take `(buf, pos)` and return `(value, new_pos)`; `buf` is a `memoryview` so slices
do not copy. They check every length against the bytes left and raise the precise
`DecodeError` subclass — a declared length past the end is `TruncatedError`, a negative one
where null is not allowed is `NegativeLengthError`.

Writers return bytes to append to an output list of chunks. A chunk is bytes-like or a
`FileRegion`: record data the network layer sends with `os.sendfile` straight from a segment
file, which is how a Fetch response avoids copying records through Python.

Classic ("non-flexible") encodings use int16 string lengths and int32 bytes/array lengths
with -1 for null; compact encodings (flexible versions) use an unsigned varint of length + 1
with 0 for null.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Callable, Sized
from dataclasses import dataclass
from itertools import compress, repeat
from types import ModuleType
from typing import Any, NoReturn, TypeVar

from riverlog.protocol.exceptions import (
    EncodeError,
    InvalidStringError,
    NegativeLengthError,
    TruncatedError,
)
from riverlog.protocol.varint import encode_unsigned_varint, read_unsigned_varint

__all__ = [
    "Chunk",
    "FileRegion",
    "chunks_size",
    "encode_unsigned_varint",
    "read_unsigned_varint",
]

_I16 = struct.Struct(">h")
_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))
"""Unsigned varints below 128 (one byte): compact lengths of every string and array, looked
up without a call."""
_I32 = struct.Struct(">i")

ZERO_UUID = uuid.UUID(int=0)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FileRegion:
    """`length` bytes at `offset` of the open file `fileno`, to be sent with `os.sendfile`."""

    fileno: int
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length


Chunk = bytes | bytearray | memoryview | FileRegion
RecordsValue = bytes | bytearray | memoryview | FileRegion | None


def chunks_size(chunks: list[Chunk]) -> int:
    """Total bytes a list of chunks puts on the wire."""
    return sum(len(c) for c in chunks)


def _take(buf: memoryview, pos: int, n: int) -> tuple[memoryview, int]:
    end = pos + n
    if end > len(buf):
        raise TruncatedError(f"need {n} bytes at position {pos}, {len(buf) - pos} left")
    return buf[pos:end], end


def _utf8(raw: memoryview) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as e:
        raise InvalidStringError(f"string is not valid UTF-8: {e.reason}") from None


# --- readers -------------------------------------------------------------------------------


def _classic_length(buf: memoryview, pos: int, wide: bool) -> tuple[int, int]:
    layout = _I32 if wide else _I16
    if pos + layout.size > len(buf):
        raise TruncatedError("buffer ended inside a length prefix")
    (n,) = layout.unpack_from(buf, pos)
    return n, pos + layout.size


def _compact_length(buf: memoryview, pos: int) -> tuple[int, int]:
    if pos < len(buf):
        first = buf[pos]
        if first < 0x80:  # one-byte varint, inlined: this runs for every string and array
            return first - 1, pos + 1
    n, pos = read_unsigned_varint(buf, pos)
    return n - 1, pos


def read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    n, pos = _classic_length(buf, pos, wide=False)
    if n < 0:
        raise NegativeLengthError(f"non-nullable string has length {n}")
    raw, pos = _take(buf, pos, n)
    return _utf8(raw), pos


def read_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n, pos = _classic_length(buf, pos, wide=False)
    if n == -1:
        return None, pos
    if n < 0:
        raise NegativeLengthError(f"string has length {n}")
    raw, pos = _take(buf, pos, n)
    return _utf8(raw), pos


def read_compact_string(buf: memoryview, pos: int) -> tuple[str, int]:
    n, pos = _compact_length(buf, pos)
    if n < 0:
        raise NegativeLengthError("non-nullable compact string is null")
    raw, pos = _take(buf, pos, n)
    return _utf8(raw), pos


def read_compact_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n, pos = _compact_length(buf, pos)
    if n < 0:
        return None, pos
    raw, pos = _take(buf, pos, n)
    return _utf8(raw), pos


def read_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    n, pos = _classic_length(buf, pos, wide=True)
    if n < 0:
        raise NegativeLengthError(f"non-nullable bytes have length {n}")
    raw, pos = _take(buf, pos, n)
    return bytes(raw), pos


def read_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = _classic_length(buf, pos, wide=True)
    if n == -1:
        return None, pos
    if n < 0:
        raise NegativeLengthError(f"bytes have length {n}")
    raw, pos = _take(buf, pos, n)
    return bytes(raw), pos


def read_compact_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    n, pos = _compact_length(buf, pos)
    if n < 0:
        raise NegativeLengthError("non-nullable compact bytes are null")
    raw, pos = _take(buf, pos, n)
    return bytes(raw), pos


def read_compact_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = _compact_length(buf, pos)
    if n < 0:
        return None, pos
    raw, pos = _take(buf, pos, n)
    return bytes(raw), pos


def read_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    """Record data as a zero-copy slice of the request buffer (None for null)."""
    n, pos = _classic_length(buf, pos, wide=True)
    if n == -1:
        return None, pos
    if n < 0:
        raise NegativeLengthError(f"records have length {n}")
    return _take(buf, pos, n)


def read_compact_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    n, pos = _compact_length(buf, pos)
    if n < 0:
        return None, pos
    return _take(buf, pos, n)


def read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    raw, pos = _take(buf, pos, 16)
    return uuid.UUID(bytes=bytes(raw)), pos


def read_array_length(buf: memoryview, pos: int) -> tuple[int, int]:
    """Element count of a classic array: -1 for null; checked against the bytes left."""
    n, pos = _classic_length(buf, pos, wide=True)
    if n < -1:
        raise NegativeLengthError(f"array has length {n}")
    if n > len(buf) - pos:
        raise TruncatedError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
    return n, pos


def read_compact_array_length(buf: memoryview, pos: int) -> tuple[int, int]:
    """Element count of a compact array: -1 for null; checked against the bytes left."""
    n, pos = _compact_length(buf, pos)
    if n > len(buf) - pos:
        raise TruncatedError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
    return n, pos


def read_fixed_array(
    buf: memoryview, pos: int, n: int, code: str, size: int
) -> tuple[list[int], int]:
    """`n` fixed-width integers (struct format `code`, `size` bytes each) in one unpack."""
    raw, pos = _take(buf, pos, n * size)
    return list(struct.unpack(f">{n}{code}", raw)), pos


def read_tagged_field(buf: memoryview, pos: int) -> tuple[int, memoryview, int]:
    """One tagged field: `(tag, value_bytes, new_pos)`."""
    tag, pos = read_unsigned_varint(buf, pos)
    size, pos = read_unsigned_varint(buf, pos)
    raw, pos = _take(buf, pos, size)
    return tag, raw, pos


def check_null_array(name: str) -> NoReturn:
    """Raise for a null array in a version where the array may not be null."""
    raise NegativeLengthError(f"non-nullable array {name} is null")


# --- writers -------------------------------------------------------------------------------


def _encode_str(value: str | None) -> bytes:
    if not isinstance(value, str):
        raise EncodeError(f"expected a string, got {type(value).__name__}")
    return value.encode("utf-8")


def require(value: T | None) -> T:
    """The value of a field that may be null in some versions but not in this one."""
    if value is None:
        raise EncodeError("a field that is not nullable in this version is None")
    return value


def write_string(value: str | None) -> bytes:
    raw = _encode_str(value)
    if len(raw) > 0x7FFF:
        raise EncodeError(f"string of {len(raw)} bytes is longer than 32767")
    return _I16.pack(len(raw)) + raw


def write_nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\xff\xff"
    return write_string(value)


def write_compact_string(value: str | None) -> bytes:
    if not isinstance(value, str):
        raise EncodeError(f"expected a string, got {type(value).__name__}")
    raw = value.encode()
    n = len(raw) + 1
    return (_ONE_BYTE[n] if n < 0x80 else encode_unsigned_varint(n)) + raw


def write_compact_nullable_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    return write_compact_string(value)


def write_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    raw = require(value)
    return _I32.pack(len(raw)) + bytes(raw)


def write_nullable_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    return write_bytes(value)


def write_compact_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    raw = require(value)
    return encode_unsigned_varint(len(raw) + 1) + bytes(raw)


def write_compact_nullable_bytes(value: bytes | bytearray | memoryview | None) -> bytes:
    if value is None:
        return b"\x00"
    return write_compact_bytes(value)


def write_records(out: list[Chunk], value: RecordsValue) -> None:
    """Append a records field: its length, then the data itself as its own chunk (no copy)."""
    if value is None:
        out.append(b"\xff\xff\xff\xff")
        return
    out.append(_I32.pack(len(value)))
    if len(value):
        out.append(value)


def write_compact_records(out: list[Chunk], value: RecordsValue) -> None:
    if value is None:
        out.append(b"\x00")
        return
    out.append(encode_unsigned_varint(len(value) + 1))
    if len(value):
        out.append(value)


def write_uuid(value: uuid.UUID) -> bytes:
    return value.bytes


def write_array_length(value: Sized | None, nullable: bool) -> bytes:
    if value is None:
        if not nullable:
            raise EncodeError("non-nullable array is None")
        return b"\xff\xff\xff\xff"
    return _I32.pack(len(value))


def write_compact_array_length(value: Sized | None, nullable: bool) -> bytes:
    if value is None:
        if not nullable:
            raise EncodeError("non-nullable array is None")
        return b"\x00"
    n = len(value) + 1
    return _ONE_BYTE[n] if n < 0x80 else encode_unsigned_varint(n)


def write_fixed_array(values: list[int], code: str) -> bytes:
    return struct.pack(f">{len(values)}{code}", *values)


def write_tagged_fields(out: list[Chunk], fields: list[tuple[int, bytes]]) -> None:
    """Append the tagged-field section: count, then (tag, size, bytes) in ascending tag order."""
    if not fields:
        out.append(b"\x00")
        return
    fields.sort(key=lambda item: item[0])
    out.append(encode_unsigned_varint(len(fields)))
    for tag, raw in fields:
        out.append(encode_unsigned_varint(tag))
        out.append(encode_unsigned_varint(len(raw)))
        out.append(raw)


def join_chunks(chunks: list[Chunk]) -> bytes:
    """Join chunks into one buffer; a `FileRegion` cannot be joined and raises `EncodeError`."""
    for c in chunks:
        if isinstance(c, FileRegion):
            raise EncodeError("message holds a FileRegion: use encode_chunks() and sendfile")
    return b"".join(chunks)  # type: ignore[arg-type]


_LARGE_CHUNK = 65536


def coalesce_chunks(chunks: list[Chunk]) -> list[Chunk]:
    """Merge runs of small in-memory chunks, keep `FileRegion`s and large buffers as they are.
    The chunks to keep apart are found with C-level iteration: a response is tens of small
    chunks (one per field) around a few big ones, and a Python loop over them was ~360
    bytecodes per fetch response (issue 29)."""
    count = len(chunks)
    apart = sorted(
        {
            *compress(range(count), map(isinstance, chunks, repeat(FileRegion))),
            *compress(range(count), map(_LARGE_CHUNK.__le__, map(len, chunks))),
        }
    )
    merged: list[Chunk] = []
    start = 0
    for i in apart:
        if i > start:
            merged.append(b"".join(chunks[start:i]))  # type: ignore[arg-type]
        merged.append(chunks[i])
        start = i + 1
    if start < count:
        merged.append(b"".join(chunks[start:]))  # type: ignore[arg-type]
    return merged


# --- the compiled fast paths ---------------------------------------------------------------

ACCELERATED = (
    "read_string",
    "read_nullable_string",
    "read_compact_string",
    "read_compact_nullable_string",
    "read_array_length",
    "read_compact_array_length",
    "read_records",
    "read_compact_records",
    "write_compact_string",
    "write_compact_array_length",
    "write_compact_nullable_string",
)
"""The functions `_prim.c` accelerates (in the order its `install` takes them): it answers
their common, well-formed cases itself and hands every other case to the Python function,
so both answer alike for any input (issue 29: ~15 interpreter calls of a one-record Produce
request's ~120)."""

PYTHON: dict[str, Callable[..., Any]] = {name: globals()[name] for name in ACCELERATED}
"""The pure-Python functions, by name."""


def _compiled() -> dict[str, Callable[..., Any]] | None:
    try:
        from riverlog.protocol import _prim  # type: ignore[attr-defined]
    except ImportError:
        return None
    ext: ModuleType = _prim
    ext.install(*PYTHON.values())
    return {name: getattr(ext, name) for name in ACCELERATED}


COMPILED = _compiled()
"""The compiled functions by name, or None where `_prim.c` was not built (then, and with
`RIVERLOG_PURE_PYTHON` set, the module's names stay the Python ones)."""

if COMPILED is not None and not os.environ.get("RIVERLOG_PURE_PYTHON"):
    globals().update(COMPILED)
