"""Format conversion between legacy message sets (magic 0/1) and v2 record batches.

Up-conversion (produce from pre-0.11 clients, Produce v0-2): each compressed wrapper becomes
one v2 batch with the same codec, each run of uncompressed messages one uncompressed batch;
offsets restart at 0 in each batch (the broker assigns real ones), timestamps and the
LogAppendTime flag are kept, magic-0 messages get no timestamp (-1), as Kafka does.

Down-conversion (fetch from old clients: Fetch v0-1 read magic 0, v2-3 magic 1): each v2
batch becomes messages at their absolute offsets, compressed batches one wrapper with the
same codec. Headers cannot be carried and are dropped; control batches are skipped; zstd has
no legacy form (the broker answers UNSUPPORTED_COMPRESSION_TYPE instead). This is the one
place the broker copies record data: old clients cannot take v2 batches.
"""

from __future__ import annotations

from collections.abc import Iterator

from riverlog.protocol.exceptions import (
    CorruptRecordError,
    ProtocolError,
    TruncatedError,
    UnsupportedCompressionError,
)
from riverlog.protocol.records import compression
from riverlog.protocol.records.batch_header import TIMESTAMP_LOG_APPEND_TIME, read_batch_header
from riverlog.protocol.records.legacy import (
    COMPRESSION_MASK,
    LOG_OVERHEAD,
    LegacyMessage,
    decode_message_set,
    encode_message_set,
)
from riverlog.protocol.records.v2 import Record, RecordBatch, decode_batch, encode_batch

Buffer = bytes | bytearray | memoryview


def _top_level_codecs(data: memoryview) -> list[tuple[int, int, int]]:
    """(start, end, codec) of each top-level message of a produced message set, which must
    hold whole messages only."""
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < LOG_OVERHEAD + 6:
            raise CorruptRecordError("produced message set ends inside a message header")
        size = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        end = pos + LOG_OVERHEAD + size
        if size < 6 or end > len(data):
            raise CorruptRecordError(f"produced message of size {size} does not fit the set")
        out.append((pos, end, data[pos + LOG_OVERHEAD + 5] & COMPRESSION_MASK))
        pos = end
    return out


def legacy_to_v2(data: Buffer) -> bytes:
    """A produce request's legacy message set as v2 batches (offsets relative, from 0)."""
    view = memoryview(data)
    batches: list[bytes] = []
    run: list[LegacyMessage] = []

    def flush(codec: int) -> None:
        if not run:
            return
        log_append = any(m.timestamp_type == 1 for m in run)
        records = [
            Record(i, m.timestamp if m.magic == 1 else -1, m.key, m.value)
            for i, m in enumerate(run)
        ]
        batches.append(
            encode_batch(
                records,
                compression_type=codec,
                timestamp_type=TIMESTAMP_LOG_APPEND_TIME if log_append else 0,
            )
        )
        run.clear()

    for start, end, codec in _top_level_codecs(view):
        messages = decode_message_set(view[start:end])
        if codec == compression.NONE:
            run.extend(messages)
            continue
        flush(compression.NONE)
        run.extend(messages)
        flush(codec)
    flush(compression.NONE)
    return b"".join(batches)


def readable_batches(data: Buffer) -> Iterator[RecordBatch]:
    """The whole v2 batches of `data` whose records can be read; a batch that fails its CRC or
    whose records do not decode (data corrupted on disk) is skipped, and the walk stops at a
    partial batch or at bytes that hold no batch header."""
    pos = 0
    while len(data) - pos >= LOG_OVERHEAD:
        try:
            header = read_batch_header(data, pos)
        except ProtocolError:
            return
        try:
            batch, _ = decode_batch(data, pos)
        except TruncatedError:
            return
        except CorruptRecordError:
            batch = None
        pos += header.size
        if batch is not None:
            yield batch


def v2_to_legacy(data: Buffer, magic: int) -> bytes:
    """Whole v2 batches as a legacy message set of `magic` (a partial last batch is dropped,
    and so is a batch whose records cannot be read: old clients get the batches around it)."""
    out: list[bytes] = []
    for batch in readable_batches(data):
        header = batch.header
        if header.is_control:
            continue
        if header.compression == compression.ZSTD:
            raise UnsupportedCompressionError("zstd data cannot be down-converted")
        log_append = header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
        messages = [
            LegacyMessage(
                r.offset,
                r.key,
                r.value,
                r.timestamp if magic == 1 else -1,
                1 if log_append else 0,
                magic,
            )
            for r in batch.records
        ]
        out.append(
            encode_message_set(
                messages,
                magic=magic,
                compression_type=header.compression,
                log_append_time=log_append and magic == 1,
            )
        )
    return b"".join(out)
