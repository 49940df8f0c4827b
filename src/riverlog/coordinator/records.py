"""The records of `__consumer_offsets`, byte for byte as Kafka 3.9 writes them, and replay.

Every record's key and value start with an int16 version, then the struct of that version
(generated from `tools/schemas/`). Key version 0 or 1 is an offset commit (group, topic,
partition); key version 2 a group's metadata (group). Later key versions belong to Kafka 4's
new consumer protocol and are skipped by a loader. A null value is a tombstone: compaction
keeps only the latest record per key, and the tombstone itself for a while.

Written versions: offset values v3 (with leader epoch), or v1 when the commit carries an
explicit expiry (OffsetCommit v2-v4 retention time); group values v3 (static members).

The partition of a group is Kafka's: `abs(groupId.hashCode) % partitions`, with Java's
String.hashCode over UTF-16 code units, so a group lands where a Kafka broker would put it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from riverlog.protocol.exceptions import DecodeError
from riverlog.protocol.messages import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)

_VERSION = struct.Struct(">h")
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, as an int32."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partition_count: int) -> int:
    """The internal-topic partition of a group id or transactional id, as Kafka computes it
    for both (`Utils.abs(key.hashCode) % count`: Java's hash, |MIN_VALUE| taken as 0)."""
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % partition_count


@dataclass(frozen=True, slots=True)
class StoredOffset:
    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp: int
    expire_timestamp: int  # -1: none


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    protocol_type: str
    generation: int
    protocol_name: str | None
    leader: str | None
    current_state_timestamp: int  # -1: none
    members: tuple[StoredMember, ...]


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


def _split(data: bytes, what: str) -> tuple[int, memoryview]:
    if len(data) < 2:
        raise DecodeError(f"{what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    return version, memoryview(data)[2:]


def encode_offset_key(key: OffsetKey) -> bytes:
    body = OffsetCommitKey(group=key.group, topic=key.topic, partition=key.partition)
    return _VERSION.pack(OFFSET_KEY_VERSION) + body.encode(OFFSET_KEY_VERSION)


def encode_group_key(key: GroupKey) -> bytes:
    return _VERSION.pack(GROUP_KEY_VERSION) + GroupMetadataKey(group=key.group).encode(
        GROUP_KEY_VERSION
    )


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a record; None for key versions of record types riverlog does not use."""
    version, body = _split(data, "key")
    if version in (0, 1):
        k = OffsetCommitKey.decode(body, version)
        return OffsetKey(k.group, k.topic, k.partition)
    if version == GROUP_KEY_VERSION:
        return GroupKey(GroupMetadataKey.decode(body, version).group)
    return None


def encode_offset_value(value: StoredOffset) -> bytes:
    version = OFFSET_VALUE_WITH_EXPIRY if value.expire_timestamp >= 0 else OFFSET_VALUE_VERSION
    body = OffsetCommitValue(
        offset=value.offset,
        leader_epoch=value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp=value.commit_timestamp,
        expire_timestamp=value.expire_timestamp,
    )
    return _VERSION.pack(version) + body.encode(version)


def decode_offset_value(data: bytes) -> StoredOffset:
    version, body = _split(data, "offset commit value")
    v = OffsetCommitValue.decode(body, version)
    return StoredOffset(
        v.offset,
        v.leader_epoch if version >= 3 else -1,
        v.metadata,
        v.commit_timestamp,
        v.expire_timestamp if version == 1 else -1,
    )


def encode_group_value(value: StoredGroup) -> bytes:
    body = GroupMetadataValue(
        protocol_type=value.protocol_type,
        generation=value.generation,
        protocol=value.protocol_name,
        leader=value.leader,
        current_state_timestamp=value.current_state_timestamp,
        members=[
            GroupMetadataValue.MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.subscription,
                assignment=m.assignment,
            )
            for m in value.members
        ],
    )
    return _VERSION.pack(GROUP_VALUE_VERSION) + body.encode(GROUP_VALUE_VERSION)


def decode_group_value(data: bytes) -> StoredGroup:
    """A group value of any version; fields older versions lack get Kafka's defaults (a v0
    member's rebalance timeout is its session timeout)."""
    version, body = _split(data, "group metadata value")
    v = GroupMetadataValue.decode(body, version)
    return StoredGroup(
        v.protocol_type,
        v.generation,
        v.protocol,
        v.leader,
        v.current_state_timestamp if version >= 2 else -1,
        tuple(
            StoredMember(
                m.member_id,
                m.group_instance_id if version >= 3 else None,
                m.client_id,
                m.client_host,
                m.rebalance_timeout if version >= 1 else m.session_timeout,
                m.session_timeout,
                bytes(m.subscription),
                bytes(m.assignment),
            )
            for m in v.members
        ),
    )


@dataclass
class Replayed:
    """What a `__consumer_offsets` partition holds after replay: latest state per key."""

    groups: dict[str, StoredGroup]
    offsets: dict[str, dict[tuple[str, int], StoredOffset]]


def replay(
    records: Iterable[tuple[bytes | None, bytes | None]], into: Replayed | None = None
) -> Replayed:
    """Apply (key, value) pairs in log order: the latest record per key wins, a tombstone
    deletes. Records with a null key or a key version riverlog does not use are skipped; a
    malformed key or value raises `ProtocolError`."""
    state = into if into is not None else Replayed({}, {})
    for key_bytes, value in records:
        if key_bytes is None:
            continue
        key = decode_key(key_bytes)
        if isinstance(key, OffsetKey):
            tp = (key.topic, key.partition)
            if value is None:
                group_offsets = state.offsets.get(key.group)
                if group_offsets is not None:
                    group_offsets.pop(tp, None)
                    if not group_offsets:
                        del state.offsets[key.group]
            else:
                state.offsets.setdefault(key.group, {})[tp] = decode_offset_value(value)
        elif isinstance(key, GroupKey):
            if value is None:
                state.groups.pop(key.group, None)
            else:
                state.groups[key.group] = decode_group_value(value)
    return state
