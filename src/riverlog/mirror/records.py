"""MirrorMaker 2's record formats and the translation of offsets (pure logic).

Offset syncs (topic `mm2-offset-syncs.<target>.internal` on the source cluster) say "the record
at `upstream_offset` of this source partition was written at `downstream_offset` of its remote
partition". Checkpoints (topic `<source>.checkpoints.internal` on the target) say "group G had
committed `upstream_offset` on the source, which is `downstream_offset` on the target". Both
use Kafka's layouts (`connect/mirror-client`'s OffsetSync and Checkpoint): big-endian
structs, strings as an int16 length and UTF-8 bytes; a checkpoint's value starts with an int16
version (0), an offset sync has none.

Translation (`OffsetSyncStore.translate`): a group that committed U needs every record from U
on. For each known sync (Us, Ds) with Us ≤ U: the record Us is at Ds, and every later source
record has a copy after Ds (one writer per partition at a time, records in order), so the
target offset Ds (when Us == U) or Ds + 1 (when Us < U) loses nothing. The store takes the
most recent such sync (largest Ds). Invariant: a translated offset never skips a record that
was not yet consumed on the source; it may re-read up to the records between the sync and U.

Source offsets (exactly-once mirroring: the offsets topic on the target, written in the same
transaction as the records) use Kafka Connect's JSON layout for MirrorSourceConnector: key
`["<name>",{"cluster":"a","partition":0,"topic":"t"}]` (MirrorMaker 1: `{"group":...}` instead of
`"cluster"`), value `{"offset":N}`, N the offset of the last record mirrored (resume at N + 1).
"""

from __future__ import annotations

import json
import struct
from collections import deque
from dataclasses import dataclass

CHECKPOINT_VERSION = 0
MAX_SYNCS_PER_PARTITION = 1024
"""Older syncs are forgotten: a group further behind than that cannot be translated."""


def offset_syncs_topic(target_alias: str) -> str:
    return f"mm2-offset-syncs.{target_alias}.internal"


def checkpoints_topic(source_alias: str) -> str:
    return f"{source_alias}.checkpoints.internal"


def source_offset_key(name: str, where: dict[str, str | int]) -> bytes:
    """The offsets-topic key of one source partition (`where`: cluster or group, topic,
    partition); compact and key-sorted, so the same partition always has the same bytes."""
    return json.dumps([name, where], separators=(",", ":"), sort_keys=True).encode()


def source_offset_value(last_offset: int) -> bytes:
    return json.dumps({"offset": last_offset}, separators=(",", ":")).encode()


def decode_source_offset(value: bytes) -> int:
    """The last mirrored offset a stored value holds; ValueError if it is not one."""
    try:
        offset = json.loads(value)["offset"]
    except (ValueError, TypeError, KeyError):
        raise ValueError("not a source offset record") from None
    if not isinstance(offset, int) or offset < -1:
        raise ValueError(f"bad source offset {offset!r}")
    return offset


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ValueError("record too short")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return int(value)

    def string(self) -> str:
        length = self.take(">h")
        if length < 0 or self.at + length > len(self.data):
            raise ValueError("bad string length")
        text = self.data[self.at : self.at + length].decode()
        self.at += length
        return text


@dataclass(frozen=True)
class OffsetSync:
    topic: str
    """The source topic (its name on the source cluster)."""
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">qq", self.upstream_offset, self.downstream_offset)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        k, v = _Reader(key), _Reader(value)
        topic, partition = k.string(), k.take(">i")
        return cls(topic, partition, v.take(">q"), v.take(">q"))


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    """The remote topic (its name on the target cluster)."""
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        offsets = struct.pack(
            ">hqq", CHECKPOINT_VERSION, self.upstream_offset, self.downstream_offset
        )
        return offsets + _string(self.metadata)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        k, v = _Reader(key), _Reader(value)
        group, topic, partition = k.string(), k.string(), k.take(">i")
        version = v.take(">h")
        if version != CHECKPOINT_VERSION:
            raise ValueError(f"unknown checkpoint version {version}")
        upstream, downstream = v.take(">q"), v.take(">q")
        return cls(group, topic, partition, upstream, downstream, v.string())


class OffsetSyncStore:
    """The latest offset syncs per source partition, for translating committed offsets."""

    def __init__(self) -> None:
        self._syncs: dict[tuple[str, int], deque[tuple[int, int]]] = {}

    def add(self, sync: OffsetSync) -> None:
        syncs = self._syncs.setdefault(
            (sync.topic, sync.partition), deque(maxlen=MAX_SYNCS_PER_PARTITION)
        )
        if syncs and syncs[-1][1] >= sync.downstream_offset:
            return  # replayed or out of date: the downstream offsets only grow
        syncs.append((sync.upstream_offset, sync.downstream_offset))

    def translate(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        """The target offset from which a group committed at `upstream_offset` misses
        nothing; None without a sync at or below it."""
        for upstream, downstream in reversed(self._syncs.get((topic, partition), ())):
            if upstream <= upstream_offset:
                return downstream if upstream == upstream_offset else downstream + 1
        return None

    def partitions(self) -> set[tuple[str, int]]:
        return set(self._syncs)
