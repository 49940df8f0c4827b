"""Validation on append (Kafka's LogValidator) and reading paths over corrupt data on disk.

Each crafted batch carries a correct CRC, so only the checks behind it can refuse it; a
refused append leaves the log's files untouched. Then batches corrupted *on disk* (planted
in a segment file, as bit rot or a broker of an older version would leave them) are read by
every path that looks inside batches: ListOffsets by time, fetch down-conversion, the
cleaner and riverlog's consumer decoding — each skips or reports, none raises.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverlog.client.fetcher import UnreadableBatchError
from riverlog.client.fetcher import decode_records as consumer_decode
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.records import compression, walk
from riverlog.protocol.records.batch_header import BatchHeader, read_batch_header
from riverlog.protocol.records.convert import v2_to_legacy
from riverlog.protocol.records.legacy import decode_message_set
from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.storage.cleaner import LogCleaner
from riverlog.storage.log import PartitionLog
from riverlog.storage.log_config import LogConfig
from riverlog.storage.validation import (
    ValidatedBatch,
    _one_plain_batch,
    _validate_each,
    assign_offsets,
    validate_batches,
)
from tests.protocol import crafted
from tests.storage.logtools import config, file_sizes, read_region

CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]


WALKS = [pytest.param(walk.PYTHON, id="python-walk")]
if walk.COMPILED is not None:
    WALKS.append(pytest.param(walk.COMPILED, id="compiled-walk"))


@pytest.fixture(autouse=True, params=WALKS)
def each_walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs with the compiled record walk and with its pure-Python twin."""
    monkeypatch.setattr(walk, "scan", request.param.scan)
    monkeypatch.setattr(walk, "decode", request.param.decode)


def open_log(path: Path, **cfg: str | int) -> PartitionLog:
    return PartitionLog(path / "t-0", config(**cfg))


def _refused(log: PartitionLog, data: bytes, code: error_codes.ErrorCode) -> KafkaError:
    sizes, end = file_sizes(log.directory), log.log_end_offset
    with pytest.raises(KafkaError) as e:
        log.append(data, leader_epoch=0)
    assert e.value.error is code, e.value
    assert (file_sizes(log.directory), log.log_end_offset) == (sizes, end)
    return e.value


@pytest.fixture
def plain(tmp_path: Path) -> PartitionLog:
    log = open_log(tmp_path / "plain")
    log.append(crafted.good(2), leader_epoch=0)
    return log


@pytest.fixture
def compacted(tmp_path: Path) -> PartitionLog:
    log = open_log(tmp_path / "compacted", cleanup_policy="compact")
    log.append(crafted.good(2), leader_epoch=0)
    return log


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_compressed_payload_is_corrupt(plain: PartitionLog, codec: int) -> None:
    error = _refused(plain, crafted.garbage(codec), error_codes.CORRUPT_MESSAGE)
    assert "decompress" in error.message or "not an LZ4 frame" in error.message


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_refused(plain: PartitionLog, codec: int) -> None:
    error = _refused(plain, crafted.unknown_codec(codec), error_codes.CORRUPT_MESSAGE)
    assert f"Unknown compression type id: {codec}" in error.message


@pytest.mark.parametrize("count", [2, 4, 1000, 2**31 - 1])
def test_lying_record_count_is_refused(plain: PartitionLog, count: int) -> None:
    _refused(plain, crafted.lying_count(count), error_codes.INVALID_RECORD)


@pytest.mark.parametrize("policy", ["delete", "compact"])
@pytest.mark.parametrize("codec", [compression.ZSTD, compression.GZIP])
def test_a_bomb_is_refused_not_expanded(tmp_path: Path, policy: str, codec: int) -> None:
    log = open_log(tmp_path, cleanup_policy=policy)
    error = _refused(log, crafted.bomb(codec), error_codes.INVALID_RECORD)
    assert "decompresses to more than" in error.message


def test_key_less_records_on_a_compacted_topic_are_named(compacted: PartitionLog) -> None:
    keys: list[bytes | None] = [None if i % 10 == 0 else b"k%d" % i for i in range(100)]
    for codec in (compression.NONE, compression.LZ4):
        error = _refused(compacted, crafted.records(keys, codec=codec), error_codes.INVALID_RECORD)
        assert [i for i, _ in error.record_errors] == list(range(0, 100, 10))
        assert all(
            m == "Compacted topic cannot accept message without key."
            for _, m in error.record_errors
        )
        assert error.message.startswith("One or more records have been rejected due to 10 record")


def test_timestamps_follow_before_and_after_max_ms(tmp_path: Path) -> None:
    log = open_log(
        tmp_path, message_timestamp_before_max_ms=60_000, message_timestamp_after_max_ms=1_000
    )
    now = crafted.now_ms()
    error = _refused(log, crafted.good(2, ts=now - 3_600_000), error_codes.INVALID_TIMESTAMP)
    assert [i for i, _ in error.record_errors] == [0, 1]
    _refused(log, crafted.good(1, ts=now + 60_000), error_codes.INVALID_TIMESTAMP)
    log.append(crafted.good(1, ts=now - 30_000), leader_epoch=0)
    log.append(crafted.good(1, ts=-1), leader_epoch=0)  # no timestamp: never out of range
    assert log.log_end_offset == 2


def test_header_fields_are_checked(plain: PartitionLog) -> None:
    batch = bytearray(crafted.good(2))
    batch[0:8] = (7).to_bytes(8, "big")  # base offset: clients send 0
    _refused(plain, bytes(batch), error_codes.INVALID_RECORD)
    idempotent = bytearray(crafted.good(1))
    idempotent[43:51] = (5).to_bytes(8, "big")  # a producer id without a sequence
    _refused(plain, crafted.fix_crc(idempotent), error_codes.INVALID_RECORD)


def test_followers_are_not_re_walked(tmp_path: Path) -> None:
    """Replication copies what the leader validated: CRCs and framing only."""
    data = memoryview(bytearray(crafted.good(3)))
    assert len(validate_batches(data, config(), crafted.now_ms(), from_client=False)) == 1


# --- corrupt data already on disk ----------------------------------------------------------


def _plant(log: PartitionLog, batch: bytes) -> int:
    """Write `batch` at the log end as if it had always been there; its first offset."""
    view = memoryview(bytearray(batch))
    header = read_batch_header(view)
    first = log.log_end_offset
    headers = assign_offsets(view, [ValidatedBatch(0, header)], first, 0, None)
    log.active.append(view, headers)
    return first


def _log_with_rot(tmp_path: Path, policy: str = "delete") -> tuple[PartitionLog, list[int]]:
    log = open_log(tmp_path, cleanup_policy=policy)
    # The first batch is stamped a second before the planted ones: stamped in the same
    # millisecond, a search for a planted batch's time would rightly stop at offset 0.
    now = crafted.now_ms()
    log.append(crafted.records([b"a", b"b"], ts=now - 1_000), leader_epoch=0)
    bad = [
        _plant(log, crafted.garbage(compression.ZSTD)),
        _plant(log, crafted.bomb(compression.ZSTD)),
        _plant(log, crafted.lying_count(50)),
        _plant(log, crafted.unknown_codec(5)),
    ]
    log.append(crafted.records([b"a", b"c"], ts=now + 60_000), leader_epoch=0)
    return log, bad


def test_list_offsets_by_time_skips_unreadable_batches(tmp_path: Path) -> None:
    log, bad = _log_with_rot(tmp_path)
    found = log.offset_for_timestamp(crafted.now_ms() - 600_000)
    assert found is not None and found[0] == 0
    headers = {h.base_offset: h for h in read_all_headers(log)}
    # The search lands on the unreadable batches first and goes on past them.
    found = log.offset_for_timestamp(headers[bad[0]].max_timestamp)
    assert found is not None and found[0] == log.log_end_offset - 2
    assert log.offset_for_timestamp(-3) == (
        log.log_end_offset - 2,
        headers[log.log_end_offset - 2].max_timestamp,
    )


def read_all_headers(log: PartitionLog) -> list[BatchHeader]:
    return [found.header for seg in log.segments for found in seg.batches_from(0)]


def test_down_conversion_drops_unreadable_batches(tmp_path: Path) -> None:
    log, _ = _log_with_rot(tmp_path)
    raw = read_region(log, 0)
    for magic in (0, 1):
        messages = decode_message_set(v2_to_legacy(raw, magic))
        assert [m.key for m in messages] == [b"a", b"b", b"a", b"c"]


def test_the_consumer_reports_the_unreadable_batch(tmp_path: Path) -> None:
    log, bad = _log_with_rot(tmp_path)
    raw = read_region(log, 0)
    batches, pos = [], 0
    while pos < len(raw):
        size = read_batch_header(raw, pos).size
        batches.append(memoryview(raw)[pos : pos + size])
        pos += size
    assert [r.key for r in consumer_decode(("t", 0), batches[:1], 0)] == [b"a", b"b"]
    assert [r.key for r in consumer_decode(("t", 0), batches[-1:], 0)] == [b"a", b"c"]
    for batch, offset in zip(batches[1:-1], bad, strict=True):
        with pytest.raises(UnreadableBatchError, match=f"offsets {offset}\\.\\.") as e:
            consumer_decode(("t", 0), [batches[0], batch, batches[-1]], 0)
        assert [r.key for r in e.value.records_before] == [b"a", b"b"]
        assert e.value.offset == offset


def test_the_cleaner_keeps_unreadable_batches(tmp_path: Path) -> None:
    log, bad = _log_with_rot(tmp_path, "compact")
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    result = LogCleaner().clean(log, crafted.now_ms() + 120_000)
    assert result.records_removed == 1  # the first "a"
    offsets = [h.base_offset for h in read_all_headers(log)]
    assert all(o in offsets for o in bad)
    assert os.path.getsize(log.segments[0].log_path) > 0


def test_a_legacy_bomb_is_refused_while_up_converting() -> None:
    """Produce v0-2 message sets are converted to v2 first; their wrappers are bounded too."""
    from riverlog.protocol.records.convert import legacy_to_v2
    from riverlog.protocol.records.legacy import LegacyMessage, encode_message_set

    inner = [LegacyMessage(0, b"k", bytes(80 * 1024 * 1024), 1, 0, 1)]
    wrapper = encode_message_set(inner, magic=1, compression_type=compression.GZIP)
    with pytest.raises(compression.DecompressedTooLargeError):
        legacy_to_v2(wrapper)


def _outcome(data: bytes, cfg: LogConfig, now: int) -> object:
    try:
        return validate_batches(memoryview(bytearray(data)), cfg, now)
    except KafkaError as e:
        return (e.error, e.message)


@settings(max_examples=400, deadline=None)
@given(
    flips=st.lists(st.tuples(st.integers(0, 90), st.integers(0, 255)), min_size=1, max_size=3),
    crc_fixed=st.booleans(),
    compact=st.booleans(),
    producer=st.sampled_from([(-1, -1, -1), (7, 0, 0), (7, 0, 5)]),
)
def test_the_one_batch_fast_path_accepts_only_what_every_check_accepts(
    flips: list[tuple[int, int]],
    crc_fixed: bool,
    compact: bool,
    producer: tuple[int, int, int],
) -> None:
    """A client's single uncompressed batch is checked in one pass (`_one_plain_batch`);
    with header and record bytes damaged anywhere (the CRC fixed or not), it accepts a
    batch only when the batch-by-batch checks do, with the same result, and leaves every
    refusal to them."""
    now = crafted.now_ms()
    pid, epoch, seq = producer
    batch = bytearray(
        encode_batch(
            [Record(i, now, b"k", b"v") for i in range(2)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
    )
    for at, value in flips:
        if at < len(batch):
            batch[at] = value
    data = crafted.fix_crc(batch) if crc_fixed and len(batch) >= 61 else bytes(batch)
    cfg = config(cleanup_policy="compact" if compact else "delete", max_message_bytes=120)
    fast = _one_plain_batch(memoryview(bytearray(data)), cfg, now)
    if fast is not None:
        assert fast == _validate_each(memoryview(bytearray(data)), cfg, now, True)
    assert _outcome(data, cfg, now) == _outcome_slow(data, cfg, now)


def _outcome_slow(data: bytes, cfg: LogConfig, now: int) -> object:
    try:
        return _validate_each(memoryview(bytearray(data)), cfg, now, True)
    except KafkaError as e:
        return (e.error, e.message)


def test_the_one_batch_fast_path_takes_the_common_shape() -> None:
    now = crafted.now_ms()
    data = memoryview(bytearray(crafted.good(3, ts=now)))
    fast = _one_plain_batch(data, config(), now)
    assert fast is not None and fast == _validate_each(data, config(), now, True)
    compressed = memoryview(bytearray(crafted.good(3, ts=now, codec=compression.GZIP)))
    assert _one_plain_batch(compressed, config(), now) is None  # the general path decides
