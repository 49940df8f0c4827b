"""The records of `__transaction_state`, byte for byte as Kafka 3.9 writes them, and replay.

Key: int16 version 0, then the transactional id (TransactionLogKey). Value: int16 version 0,
then producer id, epoch, timeout, status (`TxnState`), the partitions grouped by topic
(null when none), last update and start timestamps (TransactionLogValue). A null value is a
tombstone (the id expired: Dead). Compaction keeps the latest record per id.

The partition of a transactional id is Kafka's: `Utils.abs(id.hashCode) % partitions`.

Invariant: `decode_value(encode_value(m))` gives `m` back, except `last_producer_epoch`,
which the record does not carry (Kafka's neither).
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable

from riverlog.coordinator.transaction import TxnMetadata, TxnState
from riverlog.protocol.exceptions import DecodeError
from riverlog.protocol.messages import TransactionLogKey, TransactionLogValue

_VERSION = struct.Struct(">h")
KEY_VERSION = 0
VALUE_VERSION = 0


def encode_key(transactional_id: str) -> bytes:
    body = TransactionLogKey(transactional_id=transactional_id)
    return _VERSION.pack(KEY_VERSION) + body.encode(KEY_VERSION)


def encode_value(meta: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(meta.partitions):
        by_topic[topic].append(partition)
    value = TransactionLogValue(
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        transaction_timeout_ms=meta.timeout_ms,
        transaction_status=int(meta.state),
        transaction_partitions=[
            TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps)
            for t, ps in by_topic.items()
        ]
        if by_topic
        else None,
        transaction_last_update_timestamp_ms=meta.last_update_ms,
        transaction_start_timestamp_ms=meta.start_ms,
    )
    return _VERSION.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


def _split(data: bytes, what: str) -> tuple[int, memoryview]:
    if len(data) < 2:
        raise DecodeError(f"{what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    return version, memoryview(data)[2:]


def decode_key(data: bytes) -> str | None:
    """The transactional id; None for key versions this broker does not know."""
    version, body = _split(data, "key")
    if version != KEY_VERSION:
        return None
    return TransactionLogKey.decode(body, version).transactional_id


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    version, body = _split(data, "value")
    if version != VALUE_VERSION:
        # Version 1 is written only with transaction version 2 (KIP-890 part 2).
        raise DecodeError(f"transaction log value version {version} is not supported")
    v = TransactionLogValue.decode(body, version)
    try:
        state = TxnState(v.transaction_status)
    except ValueError as e:
        raise DecodeError(f"unknown transaction status {v.transaction_status}") from e
    partitions = frozenset(
        (p.topic, i) for p in v.transaction_partitions or () for i in p.partition_ids
    )
    return TxnMetadata(
        transactional_id,
        v.producer_id,
        v.producer_epoch,
        v.transaction_timeout_ms,
        state,
        partitions,
        v.transaction_start_timestamp_ms,
        v.transaction_last_update_timestamp_ms,
    )


def replay(
    pairs: Iterable[tuple[bytes | None, bytes | None]], into: dict[str, TxnMetadata]
) -> None:
    """Apply records in log order: the last value per id wins, a tombstone removes it."""
    for key, value in pairs:
        if key is None:
            continue
        transactional_id = decode_key(key)
        if transactional_id is None:
            continue
        if value is None:
            into.pop(transactional_id, None)
        else:
            into[transactional_id] = decode_value(transactional_id, value)
