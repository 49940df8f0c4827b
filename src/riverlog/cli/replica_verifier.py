"""Comparing the replicas of a partition, as Kafka's ReplicaVerificationTool does (pure).

Each round the tool fetches every replica of a partition from the same offset. The fetched
record batches are walked in lock step, one batch per replica at a time, as long as every
replica has a batch wholly below its own high watermark: the batches must end at the same
offset (else the replicas disagree on the log's shape — Kafka's tool stops there) and carry
the same checksum (the batch CRC; a mismatch is reported and the walk goes on). The offset
after the last batch all replicas agreed on is where the next round fetches from. A
partition's lag is the highest high watermark among its replicas minus that offset; the
tool reports the largest lag over all partitions.

A replica whose fetch failed (its broker is down, or the offset is past its log) brings no
batches and a high watermark of -1: its partition makes no progress and its lag grows, which
is what the report shows.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from riverlog.model import TopicPartition
from riverlog.protocol.exceptions import ProtocolError
from riverlog.protocol.records import convert
from riverlog.protocol.records.batch_header import (
    LOG_OVERHEAD,
    BatchHeader,
    peek_magic,
    read_batch_header,
)

INVALID_HIGH_WATERMARK = -1


@dataclass(frozen=True)
class ReplicaData:
    """One replica's answer: its high watermark and the whole batches it sent."""

    high_watermark: int = INVALID_HIGH_WATERMARK
    batches: list[BatchHeader] = field(default_factory=list)


@dataclass(frozen=True)
class OffsetMismatch:
    """Replicas whose batches end at different offsets: the logs have different shapes."""

    first_replica: int
    first_offset: int
    replica: int
    offset: int


@dataclass(frozen=True)
class ChecksumMismatch:
    """Replicas with different batches over the same offsets."""

    offset: int
    first_replica: int
    first_checksum: int
    replica: int
    checksum: int


@dataclass(frozen=True)
class Verified:
    next_offset: int
    lag: int
    checksum_mismatches: list[ChecksumMismatch]
    offset_mismatch: OffsetMismatch | None = None


def batch_headers(records: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """The headers of the whole batches of a fetched record set (a trailing partial batch,
    cut by the size limit, is left out; old message formats are converted to v2 first)."""
    raw = memoryview(records)
    if len(raw) >= LOG_OVERHEAD and peek_magic(raw) < 2:
        raw = memoryview(convert.legacy_to_v2(raw))
    out = []
    pos = 0
    while len(raw) - pos >= LOG_OVERHEAD:
        try:
            header = read_batch_header(raw, pos)
        except ProtocolError:
            break
        if pos + header.size > len(raw):
            break
        out.append(header)
        pos += header.size
    return out


def verify_partition(fetch_offset: int, replicas: Mapping[int, ReplicaData]) -> Verified:
    """Walk the replicas' batches from `fetch_offset` (see the module docstring)."""
    pending = {r: list(data.batches) for r, data in sorted(replicas.items())}
    offset = fetch_offset
    mismatches: list[ChecksumMismatch] = []
    in_all = True
    while in_all:
        first: tuple[int, BatchHeader] | None = None
        for replica, batches in pending.items():
            if not batches:
                in_all = False
                continue
            batch = batches.pop(0)
            if batch.last_offset >= replicas[replica].high_watermark:
                in_all = False  # only verify below each replica's high watermark
                continue
            if first is None:
                first = (replica, batch)
                continue
            first_replica, first_batch = first
            if first_batch.last_offset != batch.last_offset:
                mismatch = OffsetMismatch(
                    first_replica, first_batch.last_offset, replica, batch.last_offset
                )
                return Verified(offset, _lag(offset, replicas), mismatches, mismatch)
            if first_batch.crc != batch.crc:
                mismatches.append(
                    ChecksumMismatch(
                        batch.last_offset, first_replica, first_batch.crc, replica, batch.crc
                    )
                )
        if in_all and first is not None:
            offset = first[1].next_offset
        elif first is None:
            in_all = False
    return Verified(offset, _lag(offset, replicas), mismatches)


def _lag(offset: int, replicas: Mapping[int, ReplicaData]) -> int:
    return max((d.high_watermark for d in replicas.values()), default=offset) - offset


# --- what the tool prints --------------------------------------------------------------------


def now_text(now_s: float | None = None) -> str:
    """Kafka's tool timestamps: `yyyy-MM-dd HH:mm:ss,SSS`, local time."""
    now = time.time() if now_s is None else now_s
    millis = int(now * 1000) % 1000
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{millis:03d}"


def tp_text(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def offset_mismatch_line(tp: TopicPartition, m: OffsetMismatch, now: str) -> str:
    return (
        f"{now}: partition {tp_text(tp)}: replica {m.first_replica}'s offset "
        f"{m.first_offset} doesn't match replica {m.replica}'s offset {m.offset}"
    )


def checksum_mismatch_line(tp: TopicPartition, m: ChecksumMismatch, now: str) -> str:
    return (
        f"{now}: partition {tp_text(tp)} has unmatched checksum at offset {m.offset}; "
        f"replica {m.first_replica}'s checksum {m.first_checksum}; replica {m.replica}'s "
        f"checksum {m.checksum}"
    )


def lag_line(lag: int, tp: TopicPartition | None, offset: int, partitions: int, now: str) -> str:
    where = "null" if tp is None else tp_text(tp)
    return (
        f"{now}: max lag is {lag} for partition {where} at offset {offset} among "
        f"{partitions} partitions"
    )


def include_pattern(text: str) -> re.Pattern[str]:
    """Kafka's topic include list: commas mean "or", spaces and surrounding quotes go;
    a topic is included when the whole name matches."""
    cleaned = text.strip().replace(",", "|").replace(" ", "").strip("\"'")
    return re.compile(cleaned)
