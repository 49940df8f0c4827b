"""Validation of produced record data and offset assignment, batch by batch, records untouched.

`validate_batches` checks a produce request's record set for one partition before anything is
written: whole v2 batches, CRC, size limits, offsets and counts that add up, timestamps in the
allowed window, no control batches from clients, keys present on compacted topics. Any failure
raises `KafkaError` with the code Kafka answers for it, and the log is untouched, because the
whole record set is rejected (Kafka's per-request atomicity for one partition).

`assign_offsets` rewrites base offset and partition leader epoch in place (neither is covered
by the CRC) and, for LogAppendTime topics, the timestamps (recomputing the CRC).

Per-record work happens only where Kafka's semantics require looking inside (the null-key
check of compacted topics); everything else reads the 61-byte batch headers.
"""

from __future__ import annotations

from typing import NamedTuple

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.exceptions import CorruptRecordError, ProtocolError
from riverlog.protocol.records.batch_header import (
    LOG_OVERHEAD,
    BatchHeader,
    peek_magic,
    read_batch_header,
    read_entry_size,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    verify_crc,
)
from riverlog.protocol.records.v2 import decode_records
from riverlog.storage.log_config import LogConfig

# Kafka's limit: offsets within a segment are stored relative to its base as int32.
MAX_OFFSET_DELTA = 2**31 - 1


class ValidatedBatch(NamedTuple):
    position: int
    header: BatchHeader


def validate_batches(
    data: memoryview, config: LogConfig, now_ms: int, *, from_client: bool = True
) -> list[ValidatedBatch]:
    """Check every batch of a produce record set; raise `KafkaError` on the first problem."""
    if len(data) == 0:
        raise KafkaError(error_codes.INVALID_RECORD, "The record set is empty.")
    batches: list[ValidatedBatch] = []
    pos = 0
    while pos < len(data):
        try:
            size = read_entry_size(data, pos)
            magic = peek_magic(data, pos) if len(data) - pos > 16 else -1
        except ProtocolError as e:
            raise KafkaError(error_codes.CORRUPT_MESSAGE, f"Bad record batch: {e}") from e
        if magic != 2:
            raise KafkaError(
                error_codes.UNSUPPORTED_FOR_MESSAGE_FORMAT
                if magic in (0, 1)
                else error_codes.CORRUPT_MESSAGE,
                f"Record batch magic {magic} at position {pos} is not supported here; "
                "legacy message sets are converted before validation.",
            )
        if size > config.max_message_bytes + LOG_OVERHEAD:
            raise KafkaError(
                error_codes.MESSAGE_TOO_LARGE,
                f"The record batch of {size} bytes is larger than max.message.bytes "
                f"({config.max_message_bytes}).",
            )
        if size > config.segment_bytes:
            raise KafkaError(
                error_codes.RECORD_LIST_TOO_LARGE,
                f"The record batch of {size} bytes is larger than segment.bytes.",
            )
        try:
            header = read_batch_header(data, pos)
            verify_crc(data, pos, header)
        except ProtocolError as e:
            raise KafkaError(error_codes.CORRUPT_MESSAGE, f"Corrupt record batch: {e}") from e
        _check_header(header, config, now_ms, from_client)
        if config.compact and not header.is_control:
            _check_keys(data, pos, header)
        batches.append(ValidatedBatch(pos, header))
        pos += size
    return batches


def _check_header(header: BatchHeader, config: LogConfig, now_ms: int, from_client: bool) -> None:
    if from_client and (
        header.records_count == 0 or header.records_count != header.last_offset_delta + 1
    ):
        raise KafkaError(
            error_codes.INVALID_RECORD,
            f"Record count {header.records_count} does not match the offset range "
            f"0..{header.last_offset_delta} of the batch.",
        )
    if header.last_offset_delta > MAX_OFFSET_DELTA:
        raise KafkaError(error_codes.INVALID_RECORD, "The batch spans too many offsets.")
    if from_client and header.is_control:
        raise KafkaError(error_codes.INVALID_RECORD, "Clients may not send control batches.")
    if header.is_transactional and not header.has_producer_id:
        raise KafkaError(
            error_codes.INVALID_RECORD, "A transactional batch must carry a producer id."
        )
    if not config.log_append_time and from_client:
        ts = header.max_timestamp
        if ts >= 0 and (
            now_ms - ts
            > min(
                config.message_timestamp_before_max_ms, config.message_timestamp_difference_max_ms
            )
            or ts - now_ms
            > min(config.message_timestamp_after_max_ms, config.message_timestamp_difference_max_ms)
        ):
            raise KafkaError(
                error_codes.INVALID_TIMESTAMP,
                f"Timestamp {ts} of the batch is out of range (now {now_ms}).",
            )


def _check_keys(data: memoryview, pos: int, header: BatchHeader) -> None:
    body = data[pos + 61 : pos + header.size]
    try:
        records = decode_records(header, body)
    except CorruptRecordError as e:
        raise KafkaError(error_codes.CORRUPT_MESSAGE, f"Corrupt records: {e}") from e
    if any(r.key is None for r in records):
        raise KafkaError(
            error_codes.INVALID_RECORD, "Compacted topic cannot accept message without key."
        )


def assign_offsets(
    data: memoryview,
    batches: list[ValidatedBatch],
    first_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None,
) -> list[BatchHeader]:
    """Give the batches consecutive offsets from `first_offset`; return their new headers."""
    headers: list[BatchHeader] = []
    next_offset = first_offset
    for batch in batches:
        set_base_offset(data, batch.position, next_offset)
        set_partition_leader_epoch(data, batch.position, leader_epoch)
        if log_append_time_ms is not None:
            set_log_append_time(data, batch.position, log_append_time_ms)
        header = read_batch_header(data, batch.position)
        headers.append(header)
        next_offset = header.next_offset
    return headers
