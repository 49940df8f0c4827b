"""The record walk of v2 batches: one codec for the broker's validation and the consumer.

Two operations over the *uncompressed* records of one batch (`data`, `count` records):

- `scan(data, count, base_timestamp, ts_low, ts_high, require_keys)` is the broker's check on
  append, as Kafka's LogValidator walks records: every record's framing (length, varints,
  key/value/header lengths inside the record, header keys UTF-8, nothing left over), and it
  returns `(problem, errors)`: `problem` names a batch-level fault (fewer records than
  declared, bytes after the last one) or is None; `errors` lists `(index, kind)` for the
  records at fault — `FRAMING` (the walk stops there: nothing after it can be read),
  `OFFSET` (offset delta is not the record's index), `KEY` (null key where `require_keys`),
  `TIMESTAMP` (base + delta outside `[ts_low, ts_high]`, except -1, "no timestamp";
  `ts_low > ts_high` skips the check).
  It creates no Python object per record.
- `decode(out, data, count, base_offset, base_timestamp, append_time, min_offset, topic,
  partition, timestamp_type, record_type)` appends one `record_type` tuple (topic, partition,
  offset, timestamp, timestamp_type, key, value, headers) per record at or after
  `min_offset` to `out`; `append_time` ≥ 0 (LogAppendTime) is every record's timestamp.
  Malformed records raise `CorruptRecordError`.
- `chase(data, pos, count, end, out)` writes where the next `count` records from `pos` begin
  into `out` (a writable int32 buffer), following only their length prefixes (each a
  positive varint); the last must end at `end`, else `CorruptRecordError`. The consumer's
  columnar path (`client/arrow.py`) decodes the fields of all records at once from these.

The compiled walk has two more for `client/arrow.py`, which uses them where built: `fields`,
the columnar decode of chased records into int buffers (its twin is arrow.py's numpy code),
and `gather`, which copies keys or values into an Arrow binary column's data buffer (its twin
is Arrow's `take`).

Both exist twice: compiled (`_walk.c`, built by `pip install -e .` where a C compiler is
present) and here in Python. `scan` and `decode` are the compiled ones when the extension
loaded (and `RIVERLOG_PURE_PYTHON` is unset), else the Python ones; `PYTHON` and `COMPILED`
name each set so tests run both. Invariant: both answer identically for any bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from riverlog.protocol.exceptions import CorruptRecordError

FRAMING = 1
OFFSET = 2
KEY = 3
TIMESTAMP = 4

Buffer = bytes | bytearray | memoryview
ScanResult = tuple[str | None, list[tuple[int, int]]]
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class _Bad(Exception):
    """Internal: the record at hand is malformed."""


def _varint(data: Buffer, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """A zig-zag varint (`max_bytes` 5) or varlong (10) at `pos`, not reading past `end`."""
    raw = shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            raise _Bad
        byte = data[pos + i]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            if raw > (0xFFFFFFFF if max_bytes == 5 else 0xFFFFFFFFFFFFFFFF):
                raise _Bad
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
        shift += 7
    raise _Bad


class _Record(NamedTuple):
    end: int
    timestamp_delta: int
    offset_delta: int
    key_pos: int
    key_len: int
    value_pos: int
    value_len: int
    headers: list[tuple[str, bytes | None]]


def _record(data: bytes, pos: int, n: int, want_headers: bool) -> _Record:
    """The record at `pos` (of `data[:n]`); `_Bad` when malformed."""
    b = data[pos] if pos < n else 0x80
    if b < 0x80:
        length, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        length, pos = _varint(data, pos, n, 5)
    end = pos + length
    if length < 1 or end > n:
        raise _Bad
    q = pos + 1  # attributes
    b = data[q] if q < end else 0x80
    if b < 0x80:
        ts_delta, q = (b >> 1) ^ -(b & 1), q + 1
    else:
        ts_delta, q = _varint(data, q, end, 10)
    b = data[q] if q < end else 0x80
    if b < 0x80:
        offset_delta, q = (b >> 1) ^ -(b & 1), q + 1
    else:
        offset_delta, q = _varint(data, q, end, 5)
    if offset_delta < 0:
        raise _Bad
    key_len, q = _varint(data, q, end, 5)
    if key_len < -1 or key_len > end - q:
        raise _Bad
    key_pos = q
    q += max(key_len, 0)
    value_len, q = _varint(data, q, end, 5)
    if value_len < -1 or value_len > end - q:
        raise _Bad
    value_pos = q
    q += max(value_len, 0)
    header_count, q = _varint(data, q, end, 5)
    if header_count < 0:
        raise _Bad
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(header_count):
        klen, q = _varint(data, q, end, 5)
        if klen < 0 or klen > end - q:
            raise _Bad
        try:
            key = str(data[q : q + klen], "utf-8")
        except UnicodeDecodeError:
            raise _Bad from None
        q += klen
        vlen, q = _varint(data, q, end, 5)
        if vlen < -1 or vlen > end - q:
            raise _Bad
        if want_headers:
            headers.append((key, None if vlen < 0 else data[q : q + vlen]))
        q += max(vlen, 0)
    if q != end:
        raise _Bad
    return _Record(end, ts_delta, offset_delta, key_pos, key_len, value_pos, value_len, headers)


def python_scan(
    data: Buffer, count: int, base_timestamp: int, ts_low: int, ts_high: int, require_keys: bool
) -> ScanResult:
    raw = bytes(data)
    n = len(raw)
    errors: list[tuple[int, int]] = []
    check_ts = ts_low <= ts_high
    pos = 0
    for i in range(count):
        if pos >= n:
            return f"the batch declares {count} records but holds {i}", errors
        try:  # `_record` without building one; one-byte varints inline
            b = raw[pos]
            length, q = ((b >> 1) ^ -(b & 1), pos + 1) if b < 0x80 else _varint(raw, pos, n, 5)
            end = q + length
            if length < 1 or end > n:
                raise _Bad
            q += 1  # attributes
            b = raw[q] if q < end else 0x80
            ts_delta, q = ((b >> 1) ^ -(b & 1), q + 1) if b < 0x80 else _varint(raw, q, end, 10)
            b = raw[q] if q < end else 0x80
            offset_delta, q = ((b >> 1) ^ -(b & 1), q + 1) if b < 0x80 else _varint(raw, q, end, 5)
            b = raw[q] if q < end else 0x80
            key_len, q = ((b >> 1) ^ -(b & 1), q + 1) if b < 0x80 else _varint(raw, q, end, 5)
            if offset_delta < 0 or key_len < -1 or key_len > end - q:
                raise _Bad
            q += max(key_len, 0)
            b = raw[q] if q < end else 0x80
            value_len, q = ((b >> 1) ^ -(b & 1), q + 1) if b < 0x80 else _varint(raw, q, end, 5)
            if value_len < -1 or value_len > end - q:
                raise _Bad
            q += max(value_len, 0)
            if q + 1 != end or raw[q] != 0:  # headers (or damage): the full reading
                _record(raw, pos, n, False)
        except _Bad:
            errors.append((i, FRAMING))
            return None, errors
        pos = end
        if offset_delta != i:
            errors.append((i, OFFSET))
        if require_keys and key_len < 0:
            errors.append((i, KEY))
        if check_ts:
            ts = base_timestamp + ts_delta
            if ts != -1 and not (ts_low <= ts <= ts_high and INT64_MIN <= ts <= INT64_MAX):
                errors.append((i, TIMESTAMP))
    if pos != n and not errors:
        return f"the batch holds {n - pos} bytes after its {count} records", errors
    return None, errors


def python_decode(
    out: list[Any],
    data: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int,
    min_offset: int,
    topic: str,
    partition: int,
    timestamp_type: int,
    record_type: type[tuple[Any, ...]],
) -> None:
    raw = bytes(data)
    n = len(raw)
    new = tuple.__new__
    pos = 0
    try:
        for _ in range(count):
            if pos >= n:
                raise CorruptRecordError("the batch holds fewer records than it declares")
            r = _record(raw, pos, n, True)
            pos = r.end
            offset = base_offset + r.offset_delta
            ts = append_time if append_time >= 0 else base_timestamp + r.timestamp_delta
            if not (INT64_MIN <= offset <= INT64_MAX and INT64_MIN <= ts <= INT64_MAX):
                raise CorruptRecordError("record offset or timestamp does not fit 64 bits")
            if offset < min_offset:
                continue
            kl, vl = r.key_len, r.value_len
            key = None if kl < 0 else raw[r.key_pos : r.key_pos + kl]
            value = None if vl < 0 else raw[r.value_pos : r.value_pos + vl]
            out.append(
                new(
                    record_type,
                    (topic, partition, offset, ts, timestamp_type, key, value, r.headers),
                )
            )
    except _Bad:
        raise CorruptRecordError("malformed record") from None
    if pos != n:
        raise CorruptRecordError("the batch holds bytes after its records")


def python_chase(data: Buffer, pos: int, count: int, end: int, out: Any) -> None:
    begins = memoryview(out).cast("B").cast("i")
    n = len(data)
    try:
        for i in range(count):
            if not 0 <= pos < n:
                raise _Bad
            begins[i] = pos
            b = data[pos]
            if b < 0x80 and b > 1 and not b & 1:  # a short positive length, inline
                pos += 1 + (b >> 1)
                continue
            length, pos = _varint(data, pos, n, 5)
            if length < 1:
                raise _Bad
            pos += length
    except _Bad:
        raise CorruptRecordError("malformed record framing: bad record length") from None
    if pos != end:
        raise CorruptRecordError("records do not add up to their batch's size")


class Implementation(NamedTuple):
    scan: Callable[[Buffer, int, int, int, int, bool], ScanResult]
    decode: Callable[..., None]
    chase: Callable[[Buffer, int, int, int, Any], None]


PYTHON = Implementation(python_scan, python_decode, python_chase)


def _compiled() -> Implementation | None:
    try:
        from riverlog.protocol.records import _walk  # type: ignore[attr-defined]
    except ImportError:
        return None
    ext: ModuleType = _walk

    def decode(*args: Any) -> None:
        try:
            ext.decode(*args)
        except ValueError as e:
            raise CorruptRecordError(str(e)) from None

    def chase(*args: Any) -> None:
        try:
            ext.chase(*args)
        except ValueError as e:
            raise CorruptRecordError(str(e)) from None

    return Implementation(ext.scan, decode, chase)


COMPILED = _compiled()
"""The compiled walk, or None where the extension was not built."""

_ACTIVE = PYTHON if COMPILED is None or os.environ.get("RIVERLOG_PURE_PYTHON") else COMPILED
ACCELERATED = _ACTIVE is not PYTHON
scan = _ACTIVE.scan
decode = _ACTIVE.decode
chase = _ACTIVE.chase


def _compiled_fields() -> Callable[..., None] | None:
    if not ACCELERATED:
        return None
    from riverlog.protocol.records import _walk  # type: ignore[attr-defined]

    ext: ModuleType = _walk

    def fields(*args: Any) -> None:
        try:
            ext.fields(*args)
        except ValueError as e:
            raise CorruptRecordError(str(e)) from None

    return fields


fields = _compiled_fields()
"""The compiled columnar decode (see `client/arrow.py`), or None: arrow.py's numpy code."""


def _compiled_gather() -> Callable[..., None] | None:
    if not ACCELERATED:
        return None
    from riverlog.protocol.records import _walk  # type: ignore[attr-defined]

    ext: ModuleType = _walk
    # An extension built before `gather` existed has none: arrow.py then uses `take`.
    return getattr(ext, "gather", None)


gather = _compiled_gather()
"""The compiled copy of slices into one buffer (see `client/arrow.py`), or None: Arrow's
`take` (no extension, or one built before `gather`). Its arguments come from arrow.py, never
from record bytes: a ValueError is a bug."""
