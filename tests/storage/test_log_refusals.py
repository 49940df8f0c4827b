"""Appends a partition log refuses (Kafka's LogValidator checks: CRC, size, keys on a compacted
topic, record count, timestamps): the right error code, and the log's end offset, files and
leader epochs exactly as before; a request with one bad batch appends none of them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.records import compression
from riverlog.storage.log import PartitionLog
from tests.storage.logtools import (
    file_sizes,
    make_batch,
    open_log,
    recs,
)


def _set_records_count(batch: bytes, count: int) -> bytes:
    data = bytearray(batch)
    struct.pack_into(">i", data, 57, count)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def _flip(batch: bytes, pos: int) -> bytes:
    data = bytearray(batch)
    data[pos] ^= 0x01
    return bytes(data)


def _reject(
    log: PartitionLog, data: bytes, code: error_codes.ErrorCode, now_ms: int = 1_000
) -> None:
    end = log.log_end_offset
    sizes = file_sizes(log.directory)
    epochs = list(log.epochs.entries)
    with pytest.raises(KafkaError) as e:
        log.append(data, leader_epoch=5, now_ms=now_ms)
    assert e.value.error is code, e.value
    assert e.value.code == code.code
    assert log.log_end_offset == end
    assert file_sizes(log.directory) == sizes
    assert log.epochs.entries == epochs


def _prefilled(tmp_path: Path, **cfg: str | int) -> PartitionLog:
    log = open_log(tmp_path, **cfg)
    log.append(make_batch(recs(2)), leader_epoch=0, now_ms=1_000)
    log.flush()
    return log


GOOD = make_batch(recs(2))


@pytest.mark.parametrize("pos", [17, 30, 70, len(GOOD) - 1])
def test_bad_crc_is_corrupt_message(tmp_path: Path, pos: int) -> None:
    log = _prefilled(tmp_path)
    _reject(log, _flip(GOOD, pos), error_codes.CORRUPT_MESSAGE)


def test_truncated_and_empty_record_sets(tmp_path: Path) -> None:
    log = _prefilled(tmp_path)
    with pytest.raises(KafkaError):
        log.append(GOOD[:-3], leader_epoch=0)
    with pytest.raises(KafkaError):
        log.append(b"", leader_epoch=0)
    assert log.log_end_offset == 2


def test_batch_over_max_message_bytes(tmp_path: Path) -> None:
    log = _prefilled(tmp_path, max_message_bytes=500)
    _reject(log, make_batch([(b"k", b"x" * 600, 1_000)]), error_codes.MESSAGE_TOO_LARGE)
    # Compression counts: the compressed batch fits.
    log.append(make_batch([(b"k", b"x" * 600, 1_000)], codec=compression.GZIP), leader_epoch=0)


def test_compacted_topic_rejects_null_key(tmp_path: Path) -> None:
    log = _prefilled(tmp_path, cleanup_policy="compact")
    _reject(log, make_batch([(b"k", b"v", 1_000), (None, b"v", 1_000)]), error_codes.INVALID_RECORD)
    _reject(
        log,
        make_batch([(None, b"v", 1_000)], codec=compression.LZ4),
        error_codes.INVALID_RECORD,
    )


def test_record_count_mismatch(tmp_path: Path) -> None:
    log = _prefilled(tmp_path)
    _reject(log, _set_records_count(make_batch(recs(3)), 2), error_codes.INVALID_RECORD)
    _reject(log, _set_records_count(make_batch(recs(3)), 4), error_codes.INVALID_RECORD)


def test_timestamp_out_of_range(tmp_path: Path) -> None:
    log = _prefilled(
        tmp_path, message_timestamp_after_max_ms=1000, message_timestamp_before_max_ms=5000
    )
    _reject(log, make_batch([(b"k", b"v", 3_001)]), error_codes.INVALID_TIMESTAMP, now_ms=2_000)
    _reject(log, make_batch([(b"k", b"v", 10_000)]), error_codes.INVALID_TIMESTAMP, now_ms=20_000)
    log.append(make_batch([(b"k", b"v", 3_000)]), leader_epoch=0, now_ms=2_000)
    log.append(make_batch([(b"k", b"v", 15_000)]), leader_epoch=0, now_ms=20_000)
    assert log.log_end_offset == 4


@pytest.mark.parametrize("bad_index", [0, 1, 2])
def test_multi_batch_request_with_one_bad_batch_appends_nothing(
    tmp_path: Path, bad_index: int
) -> None:
    log = _prefilled(tmp_path, max_message_bytes=400)
    batches = [make_batch(recs(2, tag=b"%d" % i)) for i in range(3)]
    for bad, code in [
        (_flip(batches[bad_index], 80), error_codes.CORRUPT_MESSAGE),
        (make_batch([(b"k", b"x" * 500, 1_000)]), error_codes.MESSAGE_TOO_LARGE),
        (_set_records_count(batches[bad_index], 1), error_codes.INVALID_RECORD),
    ]:
        parts = list(batches)
        parts[bad_index] = bad
        _reject(log, b"".join(parts), code)
    result = log.append(b"".join(batches), leader_epoch=0)
    assert (result.first_offset, result.last_offset) == (2, 7)
