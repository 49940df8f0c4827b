"""`dump-log --offsets-decoder`: `__consumer_offsets` records as Kafka 3.9's
DumpLogSegments prints them.

A key prints as `{"type":"<key version>","data":{...}}`, a value as
`{"version":"<value version>","data":{...}}` and a tombstone as `<DELETE>`, each `data` the
JSON of the record's struct with the fields of that version only, named as Kafka's generated
JSON converters name them (camelCase), bytes as base64. A group's member subscriptions and
assignments of protocol type "consumer" are decoded into their own JSON, as Kafka does (the
raw base64 is kept when they do not decode). Keys of versions riverlog does not write (3+:
Kafka 4's consumer-group records) print "Unknown record type N at offset O, skipping.".

Pure: bytes in, text out.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

from riverlog.protocol.api import Struct
from riverlog.protocol.exceptions import DecodeError
from riverlog.protocol.messages import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)

_VERSION = struct.Struct(">h")
_ALL = (0, 99)

# struct name -> [(Kafka's JSON name, python attribute, (lowest, highest version))]
_FIELDS: dict[str, list[tuple[str, str, tuple[int, int]]]] = {
    "OffsetCommitKey": [
        ("group", "group", _ALL),
        ("topic", "topic", _ALL),
        ("partition", "partition", _ALL),
    ],
    "GroupMetadataKey": [("group", "group", _ALL)],
    "OffsetCommitValue": [
        ("offset", "offset", _ALL),
        ("leaderEpoch", "leader_epoch", (3, 99)),
        ("metadata", "metadata", _ALL),
        ("commitTimestamp", "commit_timestamp", _ALL),
        ("expireTimestamp", "expire_timestamp", (1, 1)),
    ],
    "GroupMetadataValue": [
        ("protocolType", "protocol_type", _ALL),
        ("generation", "generation", _ALL),
        ("protocol", "protocol", _ALL),
        ("leader", "leader", _ALL),
        ("currentStateTimestamp", "current_state_timestamp", (2, 99)),
        ("members", "members", _ALL),
    ],
    "GroupMetadataValue.MemberMetadata": [
        ("memberId", "member_id", _ALL),
        ("groupInstanceId", "group_instance_id", (3, 99)),
        ("clientId", "client_id", _ALL),
        ("clientHost", "client_host", _ALL),
        ("rebalanceTimeout", "rebalance_timeout", (1, 99)),
        ("sessionTimeout", "session_timeout", _ALL),
        ("subscription", "subscription", _ALL),
        ("assignment", "assignment", _ALL),
    ],
    "ConsumerProtocolSubscription": [
        ("topics", "topics", _ALL),
        ("userData", "user_data", _ALL),
        ("ownedPartitions", "owned_partitions", (1, 99)),
        ("generationId", "generation_id", (2, 99)),
        ("rackId", "rack_id", (3, 99)),
    ],
    "ConsumerProtocolSubscription.TopicPartition": [
        ("topic", "topic", _ALL),
        ("partitions", "partitions", _ALL),
    ],
    "ConsumerProtocolAssignment": [
        ("assignedPartitions", "assigned_partitions", _ALL),
        ("userData", "user_data", _ALL),
    ],
    "ConsumerProtocolAssignment.TopicPartition": [
        ("topic", "topic", _ALL),
        ("partitions", "partitions", _ALL),
    ],
}


def _json_value(value: Any, version: int) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Struct):
        return to_json(value, version)
    if isinstance(value, list):
        return [_json_value(v, version) for v in value]
    return value


def to_json(obj: Struct, version: int) -> dict[str, Any]:
    """The struct's fields of `version`, as Kafka's JSON converter writes them."""
    out: dict[str, Any] = {}
    for name, attr, (low, high) in _FIELDS[obj.NAME]:
        if low <= version <= high:
            out[name] = _json_value(getattr(obj, attr), version)
    return out


def _embedded(raw: str, cls: type[Struct]) -> Any:
    """A member's subscription or assignment (base64 of version + struct) decoded, or the
    base64 text when it does not decode (Kafka keeps the original bytes then)."""
    data = base64.b64decode(raw)
    try:
        (version,) = _VERSION.unpack_from(data)
        return to_json(cls.decode(memoryview(data)[2:], version), version)
    except (DecodeError, struct.error, ValueError, IndexError):
        return raw


def _group_value(value: GroupMetadataValue, version: int) -> dict[str, Any]:
    out = to_json(value, version)
    if value.protocol_type == "consumer":
        for member in out["members"]:
            member["subscription"] = _embedded(member["subscription"], ConsumerProtocolSubscription)
            member["assignment"] = _embedded(member["assignment"], ConsumerProtocolAssignment)
    return out


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def parse(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """(key text, payload text) for one `__consumer_offsets` record at `offset`."""
    if key is None:
        raise ValueError(
            f"Failed to decode message at offset {offset} using offset topic "
            "decoder (message had a missing key)"
        )
    try:
        (key_version,) = _VERSION.unpack_from(key)
        body = memoryview(key)[2:]
        if key_version in (0, 1):
            key_text = _dumps(
                {
                    "type": str(key_version),
                    "data": to_json(OffsetCommitKey.decode(body, key_version), key_version),
                }
            )
        elif key_version == 2:
            key_text = _dumps({"type": "2", "data": to_json(GroupMetadataKey.decode(body, 2), 2)})
        else:
            return f"Unknown record type {key_version} at offset {offset}, skipping.", None
        if value is None:
            return key_text, "<DELETE>"
        (version,) = _VERSION.unpack_from(value)
        vbody = memoryview(value)[2:]
        if key_version in (0, 1):
            data = to_json(OffsetCommitValue.decode(vbody, version), version)
        else:
            data = _group_value(GroupMetadataValue.decode(vbody, version), version)
        return key_text, _dumps({"version": str(version), "data": data})
    except (DecodeError, struct.error, ValueError, IndexError) as e:
        return f"Error at offset {offset}, skipping. {e}", None
