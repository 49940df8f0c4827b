"""Fetched record batches (magic v2) as one Arrow record batch: the consumer's columnar path.

Owns `batches_to_arrow` and its schemas, whose column names and types are those of Spark's
Kafka source (plain `binary`/`string`, never the large variants: Spark reads only those).

How it stays fast: the batches' record bytes (decompressed where needed) are copied into one
buffer from Arrow's pool. Records are found by following their length prefixes, a step per
record: with numpy in lockstep over the batches while many have records left, else batch by
batch with the record walk's `chase` (C where it is built, else a tight Python loop). Every
field is then decoded for all records at once, by the record walk's `fields` where compiled,
else with numpy (varints of up to two bytes by table lookup); keys and values are copied out
by the walk's `gather` (else Arrow's `take`), never as a Python `bytes` each.
Headers, which are rare, take a per-header Python path.

Invariants: for valid batches the columns hold exactly what `v2.decode_records` returns (a
LogAppendTime batch gives every record its max timestamp; a -1 length is an Arrow null; a
record without headers has an empty list); any record data `decode_records` rejects raises
`CorruptRecordError` here too (as does a timestamp or offset beyond int64), never another
error, whatever the bytes; one call's record bytes stay below 2 GiB (int32 positions and
Arrow offsets), else `ValueError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from riverlog.protocol.exceptions import CorruptRecordError, DecodeError
from riverlog.protocol.records import compression, walk
from riverlog.protocol.records.batch_header import (
    BATCH_HEADER_SIZE,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    Buffer,
    read_batch_header,
)
from riverlog.protocol.varint import read_varint

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[np.signedinteger[Any]]
Bools = npt.NDArray[np.bool_]

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")
SCHEMA_WITHOUT_HEADERS = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
)
SCHEMA = SCHEMA_WITHOUT_HEADERS.append(pa.field("headers", HEADERS_TYPE))

_MIN_RECORD_SIZE = 7  # length prefix, attributes and five one-byte varints
_PADDING = 16  # zeros after the records: the longest varint read from inside stays inside
_MAX_SIZE = (1 << 31) - (1 << 16)  # int32 positions, and room for a short step past the end
_LOCKSTEP_BATCHES = 48  # from this many batches with records left, a numpy step beats Python


def batches_to_arrow(
    topic: str,
    partition: int,
    batches: Sequence[Buffer],
    *,
    min_offset: int = 0,
    max_offset: int | None = None,
    include_headers: bool = True,
) -> pa.RecordBatch:
    """The records of `batches` (whole, CRC-checked, non-control v2 batches) as one Arrow
    batch of `SCHEMA` (`SCHEMA_WITHOUT_HEADERS` without `include_headers`), keeping offsets
    in [min_offset, max_offset)."""
    headers = [_header(raw) for raw in batches]
    buffer, seg_ends = _join(batches, headers)
    counts = np.array([h.records_count for h in headers], np.int64)
    fields = _Fields(buffer, seg_ends, counts)

    offsets = _add([h.base_offset for h in headers], counts, fields.offset_delta, "offset")
    types = np.repeat(np.array([h.timestamp_type for h in headers], np.int32), counts)
    create_time = types != TIMESTAMP_LOG_APPEND_TIME
    base_timestamps = [h.base_timestamp for h in headers]
    created = _add(base_timestamps, counts, fields.timestamp_delta, "timestamp", create_time)
    max_timestamps = np.repeat(np.array([h.max_timestamp for h in headers], np.int64), counts)
    timestamps = np.where(create_time, created, max_timestamps)
    keep = offsets >= min_offset
    if max_offset is not None:
        keep &= offsets < max_offset
    kept = None if keep.all() else np.flatnonzero(keep)

    def pick(values: Ints) -> Ints:
        return values if kept is None else values[kept]

    n = len(offsets) if kept is None else len(kept)
    columns = [
        _binary(buffer, pick(fields.key_start), pick(fields.key_length)),
        _binary(buffer, pick(fields.value_start), pick(fields.value_length)),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(pick(offsets)),
        pa.array(pick(timestamps)).view(TIMESTAMP_TYPE),
        pa.array(pick(types)),
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(columns, schema=SCHEMA_WITHOUT_HEADERS)
    columns.append(fields.headers(keep, kept))
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _header(raw: Buffer) -> BatchHeader:
    try:
        header = read_batch_header(raw)
    except DecodeError as e:
        raise CorruptRecordError(f"not a whole record batch: {e}") from e
    if header.size != len(raw):
        raise CorruptRecordError(f"batch of {header.size} bytes given as {len(raw)} bytes")
    if header.is_control:
        raise ValueError("control batches hold no data records")
    return header


def _join(batches: Sequence[Buffer], headers: list[BatchHeader]) -> tuple[pa.Buffer, I32]:
    """The batches' record bytes, decompressed, in one padded buffer from Arrow's pool (which
    reuses its pages, where a fresh `bytes` pays a page fault every 4 KiB); where each ends."""
    parts: list[Buffer] = []
    seg_ends: list[int] = []
    size = 0
    for raw, header in zip(batches, headers, strict=True):
        body = memoryview(raw)[BATCH_HEADER_SIZE:]
        if header.compression != compression.NONE:
            body = memoryview(compression.decompress(header.compression, body))
        if header.records_count * _MIN_RECORD_SIZE > len(body):
            raise CorruptRecordError(f"{header.records_count} records cannot fit {len(body)} bytes")
        parts.append(body)
        size += len(body)
        seg_ends.append(size)
    if size > _MAX_SIZE:
        raise ValueError(f"{size} bytes of records in one call: at most {_MAX_SIZE} fit")
    buffer = pa.allocate_buffer(size + _PADDING)
    buf = np.frombuffer(buffer, np.uint8)
    pos = 0
    for part in parts:
        buf[pos : pos + len(part)] = np.frombuffer(part, np.uint8)
        pos += len(part)
    buf[size:] = 0
    return buffer, np.array(seg_ends, np.int32)


def _short_varint_tables() -> tuple[npt.NDArray[np.uint8], I32]:
    """By the two bytes at a position (little-endian), the size of the varint there (0 when
    it is longer than two bytes) and its zig-zag value."""
    lo, hi = np.arange(256), np.arange(256)[:, None]
    raw = np.where(lo < 0x80, lo, (lo & 0x7F) | (hi << 7))
    size = np.where(lo < 0x80, 1, np.where(hi < 0x80, 2, 0))
    value = (raw >> 1) ^ -(raw & 1)
    return size.astype(np.uint8).ravel(), value.astype(np.int32).ravel()


_SIZE, _VALUE = _short_varint_tables()
# How far on the next record starts, by its first two bytes; 0: see `_Bytes.varints`.
_ADVANCE = np.where((_SIZE > 0) & (_VALUE > 0), _SIZE + _VALUE, 0).astype(np.int32)


class _Bytes:
    """The joined records as bytes (for Python), as uint8 and as overlapping byte pairs."""

    def __init__(self, buffer: pa.Buffer) -> None:
        self.data = memoryview(buffer).cast("B")
        self.buf = np.frombuffer(buffer, np.uint8)
        self.pairs = np.ndarray((len(buffer) - 1,), "<u2", buffer, strides=(1,))

    def varints(self, pos: I32, limit: I32, *, bits: int = 32) -> tuple[Ints, I32]:
        """The zig-zag varints (`bits` 32) or varlongs (64) at `pos`, and the positions after
        them, which must not pass `limit`. Those of one or two bytes come from tables."""
        pair = np.take(self.buf, pos + 1).astype(np.uint16)  # `take`: faster than [] or `pairs`
        pair <<= 8
        pair |= np.take(self.buf, pos)
        size = np.take(_SIZE, pair)
        value: Ints = np.take(_VALUE, pair)
        if bits == 64:
            value = value.astype(np.int64)
        after = pos + size
        if not size.all():
            longer = np.flatnonzero(size == 0)
            value[longer], after[longer] = self._long_varints(pos[longer], bits)
        if (after > limit).any():
            raise CorruptRecordError("record field runs past the end of its record")
        return value, after

    def _long_varints(self, pos: I32, bits: int) -> tuple[Ints, I32]:
        """`varints` of three bytes or more: one pass per byte, over all of them."""
        unsigned = np.uint32 if bits == 32 else np.uint64
        raw: npt.NDArray[np.unsignedinteger[Any]] = np.zeros(len(pos), unsigned)
        more = np.ones(len(pos), np.bool_)
        after = pos.copy()
        max_bytes = (bits + 6) // 7
        for i in range(max_bytes):
            byte = np.take(self.buf, pos + i)
            payload: npt.NDArray[np.unsignedinteger[Any]] = byte.astype(unsigned)
            payload &= 0x7F
            payload *= more
            if i == max_bytes - 1 and (payload >> (bits - 7 * i)).any():
                raise CorruptRecordError(f"varint does not fit {bits} bits")
            payload <<= 7 * i
            raw |= payload
            after += more
            more &= byte >= 0x80
            if not more.any():
                break
        else:
            raise CorruptRecordError(f"varint longer than {max_bytes} bytes")
        sign = raw & 1
        np.negative(sign, out=sign)
        raw >>= 1
        raw ^= sign
        return raw.view(np.int32 if bits == 32 else np.int64), after


def _chase(raw: _Bytes, ends: I32, counts: I64) -> I32:
    """Where every record begins, following the length prefixes: in lockstep over the batches
    (numpy, one step a record of each) while enough of them have records left, then batch by
    batch in the record walk's `chase` (compiled where built). Only what the steps need is
    checked here; `_Fields` checks the rest."""
    begins = np.empty(int(counts.sum()), np.int32)
    order = np.argsort(-counts, kind="stable")  # those with records left: a prefix of it
    remaining = -counts[order]  # ascending, for searchsorted
    index = (np.cumsum(counts) - counts)[order]  # in `begins`, of each one's next record
    limit = ends[order]
    here = np.concatenate(([0], ends[:-1]))[order].astype(np.int32)  # its next record
    step = 0
    while (active := int(np.searchsorted(remaining, -step))) >= _LOCKSTEP_BATCHES:
        pos = here[:active]
        begins[index[:active]] = pos
        index += 1
        advance = _ADVANCE[raw.pairs[pos]]
        if not advance.all():  # a length prefix of three bytes or more, or a bad one
            length, after = raw.varints(pos, limit[:active])
            if ((length < 1) | (length > limit[:active] - after)).any():
                raise CorruptRecordError("record length does not fit its batch")
            advance = after - pos + length
        pos += advance
        if (pos > limit[:active]).any():
            raise CorruptRecordError("record runs past the end of its batch")
        step += 1
    if (here[active:] != limit[active:]).any():
        raise CorruptRecordError("records do not add up to their batch's size")
    for i, b in enumerate(order[:active].tolist()):
        first, count = int(index[i]), int(counts[b]) - step
        walk.chase(raw.data, int(here[i]), count, int(limit[i]), begins[first : first + count])
    return begins


class _Fields:
    """Every record's field positions and values, checked as `decode_records` checks them."""

    def __init__(self, buffer: pa.Buffer, seg_ends: I32, counts: I64) -> None:
        raw = _Bytes(buffer)
        self.data = raw.data
        begins = _chase(raw, seg_ends, counts)
        # A record must end where the next begins, the last of a batch where the batch ends.
        end = np.empty(len(begins), np.int32)
        end[:-1] = begins[1:]
        nonempty = counts > 0
        end[(np.cumsum(counts) - 1)[nonempty]] = seg_ends[nonempty]
        if walk.fields is not None:  # the compiled walk: one pass, every check
            pos = self._compiled_fields(begins, end)
        else:
            pos = self._numpy_fields(raw, begins, end)
        self.header_keys: list[str] = []
        self.header_values: list[bytes | None] = []
        with_headers = np.flatnonzero(self.header_count)
        self.header_record = np.repeat(with_headers, self.header_count[with_headers])
        for i in with_headers.tolist():
            self._read_headers(int(pos[i]), int(end[i]), int(self.header_count[i]))

    def _compiled_fields(self, begins: I32, end: I32) -> I32:
        assert walk.fields is not None
        n = len(begins)
        self.timestamp_delta = np.empty(n, np.int64)
        self.offset_delta, self.key_start, self.key_length, pos = (
            np.empty(n, np.int32) for _ in range(4)
        )
        self.value_start, self.value_length, self.header_count = (
            np.empty(n, np.int32) for _ in range(3)
        )
        walk.fields(
            self.data,
            begins,
            end,
            self.timestamp_delta,
            self.offset_delta,
            self.key_start,
            self.key_length,
            self.value_start,
            self.value_length,
            self.header_count,
            pos,
        )
        return pos

    def _numpy_fields(self, raw: _Bytes, begins: I32, end: I32) -> I32:
        """The fields of all records at once, a numpy step per field (no compiled walk)."""
        if (begins >= end).any():
            raise CorruptRecordError("record length is not positive")
        length, start = raw.varints(begins, end)
        if (length != end - start).any():
            raise CorruptRecordError("record length does not match its batch")
        self.timestamp_delta, pos = raw.varints(start + 1, end, bits=64)  # after attributes
        self.offset_delta, pos = raw.varints(pos, end)
        if (self.offset_delta < 0).any():
            raise CorruptRecordError("record offset delta is negative")
        self.key_length, self.key_start = raw.varints(pos, end)
        pos = _skip(self.key_start, self.key_length, end)
        self.value_length, self.value_start = raw.varints(pos, end)
        pos = _skip(self.value_start, self.value_length, end)
        self.header_count, pos = raw.varints(pos, end)
        if (self.header_count < 0).any():
            raise CorruptRecordError("negative header count")
        without = self.header_count == 0
        if (pos[without] != end[without]).any():
            raise CorruptRecordError("record holds bytes after its fields")
        return pos

    def _read_headers(self, pos: int, end: int, count: int) -> None:
        data = self.data[:end]
        try:
            for _ in range(count):
                key_length, pos = read_varint(data, pos)
                if key_length < 0 or pos + key_length > end:
                    raise CorruptRecordError(f"record header key length {key_length}")
                self.header_keys.append(str(data[pos : pos + key_length], "utf-8"))
                value_length, pos = read_varint(data, pos + key_length)
                if value_length < -1 or pos + value_length > end:
                    raise CorruptRecordError(f"record header value length {value_length}")
                if value_length == -1:
                    self.header_values.append(None)
                else:
                    self.header_values.append(bytes(data[pos : pos + value_length]))
                    pos += value_length
        except DecodeError as e:
            raise CorruptRecordError(f"malformed record header: {e}") from e
        except UnicodeDecodeError as e:
            raise CorruptRecordError("record header key is not UTF-8") from e
        if pos != end:
            raise CorruptRecordError("record holds bytes after its headers")

    def headers(self, keep: Bools, kept: I64 | None) -> pa.Array:
        """The `headers` column of the kept records."""
        counts = self.header_count if kept is None else self.header_count[kept]
        offsets = np.zeros(len(counts) + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        keys = pa.array(self.header_keys, pa.string())
        values = pa.array(self.header_values, pa.binary())
        if kept is not None:
            mask = pa.array(keep[self.header_record])
            keys, values = keys.filter(mask), values.filter(mask)
        entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADERS_TYPE.value_type))
        return pa.ListArray.from_arrays(pa.array(offsets), entries, type=HEADERS_TYPE)


def _skip(start: I32, length: Ints, end: I32) -> I32:
    """Position after nullable fields of `length` at `start` (-1 is null, nothing follows)."""
    if (length < -1).any() or (length > end - start).any():
        raise CorruptRecordError("record field length below -1 or past the end of its record")
    return start + np.maximum(length, 0)


def _add(bases: list[int], counts: I64, delta: Ints, what: str, where: Bools | None = None) -> I64:
    """Each batch's base plus its records' deltas, which must not overflow int64 (only `where`
    it is True, if given). The exact check runs only when the bounds say it could."""
    base = np.repeat(np.array(bases, np.int64), counts)
    total = base + delta
    if len(delta) and max(map(abs, bases)) + max(-int(delta.min()), int(delta.max())) >= 1 << 63:
        overflow = ((base ^ total) & (delta ^ total)) < 0
        if (overflow if where is None else overflow & where).any():
            raise CorruptRecordError(f"record {what} does not fit 64 bits")
    return total


def _binary(buffer: pa.Buffer, start: I32, length: Ints) -> pa.Array:
    """A binary column of the slices of `buffer` (null where `length` is -1): copied into a
    buffer of their own by the record walk's `gather` (compiled, without the GIL), else by
    `take` from a zero-copy array whose odd items are the slices and even ones the gaps."""
    n = len(start)
    nulls = length < 0
    any_null = bool(nulls.any())
    if walk.gather is not None:
        offsets = np.empty(n + 1, np.int32)
        offsets[0] = 0
        np.cumsum(np.maximum(length, 0), out=offsets[1:])
        data = pa.allocate_buffer(int(offsets[-1]))
        walk.gather(buffer, np.ascontiguousarray(start, np.int32), offsets, data)
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if any_null else None
        return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), data])
    offsets = np.empty(2 * n + 1, np.int32)
    offsets[0] = 0
    offsets[1::2] = start
    offsets[2::2] = start + np.maximum(length, 0)
    validity = None
    if any_null:
        valid = np.ones(2 * n, np.bool_)
        valid[1::2] = ~nulls
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    spans = pa.Array.from_buffers(pa.binary(), 2 * n, [validity, pa.py_buffer(offsets), buffer])
    return pc.take(spans, np.arange(1, 2 * n, 2))
