"""Record batches of magic v2: building them and reading their records.

This is the client and tool side of the format (the producer, the consumer, the console tools,
format conversion, log compaction). The broker's append path does not come here: it treats
batches as opaque bytes through `batch_header`.

A record inside a batch (all integers zigzag varints except `attributes`):

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    [headerKeyLength varint | headerKey utf-8 | headerValueLength varint | headerValue]*

A length of -1 means null. Everything from `attributes` on is compressed as one block when the
batch attributes name a codec; the 61-byte header never is.

Invariants: `encode_batch` output always passes `verify_crc` and reads back through
`decode_batch` as the same records; `decode_batch` raises only `ProtocolError` subclasses
(`CorruptRecordError` for a bad CRC or records that do not add up, `TruncatedError` for a batch
cut short), whatever the input.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from riverlog.protocol.exceptions import CorruptRecordError, DecodeError, TruncatedError
from riverlog.protocol.records import compression
from riverlog.protocol.records.batch_header import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_BIT,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Buffer,
    read_batch_header,
    verify_crc,
)
from riverlog.protocol.varint import encode_varint, encode_varlong, read_varint, read_varlong

MAGIC = 2

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_CRC = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")

CONTROL_ABORT = 0
CONTROL_COMMIT = 1


@dataclass(slots=True)
class Record:
    """One record with absolute offset and timestamp (deltas are a wire detail)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class RecordBatch:
    """A decoded batch: its header and its records."""

    header: BatchHeader
    records: list[Record]


def _nullable(value: bytes | None) -> bytes:
    if value is None:
        return encode_varint(-1)
    return encode_varint(len(value)) + value


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    """One record's bytes, its length prefix included."""
    parts = [
        b"\x00",  # record attributes: unused
        encode_varlong(timestamp_delta),
        encode_varint(offset_delta),
        _nullable(key),
        _nullable(value),
        encode_varint(len(headers)),
    ]
    for header_key, header_value in headers:
        raw_key = header_key.encode()
        parts.append(encode_varint(len(raw_key)) + raw_key)
        parts.append(_nullable(header_value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression_type: int = compression.NONE,
    timestamp_type: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    last_offset_delta: int | None = None,
    empty_timestamp: int = -1,
) -> bytes:
    """A complete v2 batch. Record offsets must be ≥ `base_offset`, in increasing order.

    Kafka producers number records 0..n-1 from the batch's base; compacted logs keep gaps, so
    any increasing offsets are accepted, and the cleaner keeps a batch's original
    `last_offset_delta` (so its producer's last sequence stays) even when its last records
    are gone. An empty batch (compaction keeps some, to preserve producer state) carries
    `empty_timestamp` as its base and max timestamp.
    """
    if records:
        base_timestamp = records[0].timestamp
        max_timestamp = max(r.timestamp for r in records)
        last_delta = records[-1].offset - base_offset
    else:
        base_timestamp = max_timestamp = empty_timestamp
        last_delta = 0
    if last_offset_delta is not None:
        last_delta = last_offset_delta
    body = b"".join(
        encode_record(
            r.offset - base_offset, r.timestamp - base_timestamp, r.key, r.value, r.headers
        )
        for r in records
    )
    return assemble_batch(
        body,
        len(records),
        base_offset=base_offset,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        last_offset_delta=last_delta,
        compression_type=compression_type,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
    )


def assemble_batch(
    records: Buffer,
    records_count: int,
    *,
    base_offset: int,
    base_timestamp: int,
    max_timestamp: int,
    last_offset_delta: int,
    compression_type: int = compression.NONE,
    timestamp_type: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A complete v2 batch around already encoded records (`encode_record` output, joined);
    the producer encodes records as they arrive and assembles the batch when it sends it."""
    body = records
    if compression_type != compression.NONE:
        body = compression.compress(compression_type, records)
    attributes = compression_type & COMPRESSION_MASK
    if timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    after_crc = (
        _HEADER_AFTER_CRC.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
        + body
    )
    batch_length = len(after_crc) + 4 + 1 + 4  # partitionLeaderEpoch + magic + crc
    prefix = _PREFIX.pack(base_offset, batch_length, partition_leader_epoch, MAGIC)
    return prefix + _CRC.pack(crc32c(after_crc)) + after_crc


def _read_nullable(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"invalid record field length {length}")
        return None, pos
    end = pos + length
    if end > len(buf):
        raise CorruptRecordError("record field runs past the end of the batch")
    return bytes(buf[pos:end]), end


def _read_record(
    buf: memoryview, pos: int, base_offset: int, base_timestamp: int
) -> tuple[Record, int]:
    length, pos = read_varint(buf, pos)
    end = pos + length
    if length < 1 or end > len(buf):
        raise CorruptRecordError(f"record length {length} does not fit the batch")
    view = buf[:end]
    pos += 1  # attributes
    timestamp_delta, pos = read_varlong(view, pos)
    offset_delta, pos = read_varint(view, pos)
    if offset_delta < 0:  # offsets only grow inside a batch; a negative delta is damage
        raise CorruptRecordError(f"negative record offset delta {offset_delta}")
    key, pos = _read_nullable(view, pos)
    value, pos = _read_nullable(view, pos)
    count, pos = read_varint(view, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        raw_key, pos = _read_nullable(view, pos)
        if raw_key is None:
            raise CorruptRecordError("record header key is null")
        header_value, pos = _read_nullable(view, pos)
        try:
            headers.append((raw_key.decode(), header_value))
        except UnicodeDecodeError as e:
            raise CorruptRecordError("record header key is not UTF-8") from e
    if pos != end:
        raise CorruptRecordError(f"record declares {length} bytes but holds {length + end - pos}")
    record = Record(
        base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, headers
    )
    return record, end


def decode_records(header: BatchHeader, body: Buffer) -> list[Record]:
    """The records of a batch given its header and the bytes after the header."""
    data = memoryview(body)
    if header.compression != compression.NONE:
        data = memoryview(compression.decompress(header.compression, data))
    log_append = header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    records: list[Record] = []
    pos = 0
    try:
        for _ in range(header.records_count):
            record, pos = _read_record(data, pos, header.base_offset, header.base_timestamp)
            if log_append:
                record.timestamp = header.max_timestamp
            records.append(record)
    except DecodeError as e:
        if isinstance(e, CorruptRecordError):
            raise
        raise CorruptRecordError(f"malformed record: {e}") from e
    if pos != len(data):
        raise CorruptRecordError(
            f"batch holds {len(data) - pos} bytes after its {header.records_count} records"
        )
    return records


def decode_batch(buf: Buffer, pos: int = 0, *, verify: bool = True) -> tuple[RecordBatch, int]:
    """The batch at `pos` and the position after it."""
    header = read_batch_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise TruncatedError(f"batch of {header.size} bytes is cut at {len(buf) - pos}")
    if verify:
        verify_crc(buf, pos, header)
    body = memoryview(buf)[pos + BATCH_HEADER_SIZE : end]
    return RecordBatch(header, decode_records(header, body)), end


def iter_record_batches(buf: Buffer, *, verify: bool = True) -> Iterator[RecordBatch]:
    """Every complete batch of a record set; a partial batch at the end is ignored."""
    pos = 0
    while len(buf) - pos >= LOG_OVERHEAD:
        try:
            batch, pos = decode_batch(buf, pos, verify=verify)
        except TruncatedError:
            return
        yield batch


def control_record_type(record: Record) -> int:
    """CONTROL_ABORT or CONTROL_COMMIT for a record of a control batch."""
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        raise CorruptRecordError("control record key is missing or short")
    _version, kind = _CONTROL_KEY.unpack_from(record.key)
    return int(kind)
