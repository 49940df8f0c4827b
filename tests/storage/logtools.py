"""Shared helpers of the partition-log tests: building batches, opening and filling a log,
a hand-set clock, reading a log back, a model."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from riverlog.protocol.records import compression
from riverlog.protocol.records.v2 import Record, RecordBatch, encode_batch, iter_record_batches
from riverlog.storage.log import PartitionLog
from riverlog.storage.log_config import LogConfig

CODECS = (
    compression.NONE,
    compression.GZIP,
    compression.SNAPPY,
    compression.LZ4,
    compression.ZSTD,
)

# (key, value, timestamp) of one record, as appended.
Rec = tuple[bytes | None, bytes | None, int]


def config(**overrides: str | int) -> LogConfig:
    """A LogConfig from Kafka names given with `_` for `.` (segment_bytes=...)."""
    return LogConfig.from_map({k.replace("_", "."): str(v) for k, v in overrides.items()})


def make_batch(
    recs: list[Rec],
    *,
    codec: int = compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    records = [Record(i, ts, k, v, [("h", b"%d" % i)]) for i, (k, v, ts) in enumerate(recs)]
    return encode_batch(
        records,
        compression_type=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def random_recs(
    rng: random.Random, ts: int, *, max_records: int = 5, max_value: int = 300
) -> list[Rec]:
    n = rng.randint(1, max_records)
    return [
        (
            b"k%d" % rng.randrange(1000),
            rng.randbytes(rng.randint(0, max_value)),
            ts + rng.randint(0, 3),
        )
        for _ in range(n)
    ]


@dataclass
class ModelBatch:
    base_offset: int
    recs: list[Rec]

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.recs)


@dataclass
class Model:
    batches: list[ModelBatch] = field(default_factory=list)

    def add(self, base_offset: int, recs: list[Rec]) -> None:
        self.batches.append(ModelBatch(base_offset, recs))

    def truncate_to(self, offset: int) -> None:
        """Drop batches ending at or after `offset` (as truncation removes whole batches)."""
        self.batches = [b for b in self.batches if b.next_offset <= offset]

    def keep_from(self, start: int) -> None:
        self.batches = [b for b in self.batches if b.next_offset > start]

    @property
    def end(self) -> int:
        return self.batches[-1].next_offset if self.batches else 0


def read_region(log: PartitionLog, offset: int, max_bytes: int = 1 << 20, **kw: object) -> bytes:
    result = log.read(offset, max_bytes, **kw)  # type: ignore[arg-type]
    if result.records is None:
        return b""
    region = result.records
    return os.pread(region.fileno, region.length, region.offset)


def read_all(log: PartitionLog, start: int | None = None) -> list[RecordBatch]:
    """Every batch from `start` (default: the log start) to the log end, in order."""
    offset = log.log_start_offset if start is None else start
    out: list[RecordBatch] = []
    while offset < log.log_end_offset:
        batches = list(iter_record_batches(read_region(log, offset)))
        assert batches, f"nothing readable at offset {offset} < end {log.log_end_offset}"
        assert batches[0].header.last_offset >= offset
        out.extend(batches)
        offset = batches[-1].header.next_offset
    return out


def as_model(batches: list[RecordBatch]) -> list[tuple[int, list[Rec]]]:
    return [
        (b.header.base_offset, [(r.key, r.value, r.timestamp) for r in b.records]) for b in batches
    ]


def model_view(model: Model) -> list[tuple[int, list[Rec]]]:
    return [(b.base_offset, list(b.recs)) for b in model.batches]


def assert_matches(log: PartitionLog, model: Model) -> None:
    got = as_model(read_all(log))
    want = [(o, r) for o, r in model_view(model) if o + len(r) > log.log_start_offset]
    assert got == want
    assert log.log_end_offset == model.end or not model.batches


def file_sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()}


def segment_files(directory: Path, suffix: str = ".log") -> list[Path]:
    return sorted(
        p for p in directory.iterdir() if p.name.endswith(suffix) and p.name[:20].isdigit()
    )


def recs(n: int, ts: int = 1_000, size: int = 50, tag: bytes = b"") -> list:
    return [(b"k%d" % i + tag, bytes([i % 256]) * size, ts + i) for i in range(n)]


def open_log(path: Path, **cfg: str | int) -> PartitionLog:
    return PartitionLog(path / "t-0", config(**cfg))


class ManualClock:
    """A log's clock (`clock_ms`) that moves only when the test sets `now`."""

    def __init__(self, now: int = 10_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def filled_log(
    tmp_path: Path, batches: int = 20, clock: ManualClock | None = None
) -> tuple[PartitionLog, Model]:
    """A log of `batches` small batches over at least 4 segments, and its model."""
    log = PartitionLog(
        tmp_path / "t-0",
        config(segment_bytes=600, index_interval_bytes=100, file_delete_delay_ms=1000),
        clock_ms=clock,
    )
    model = Model()
    for i in range(batches):
        r = recs(1 + i % 3, ts=1_000 + 10 * i, tag=b"%d" % i)
        model.add(log.append(make_batch(r), leader_epoch=0, now_ms=1_000).first_offset, r)
    assert len(log.segments) >= 4
    return log, model
