"""Transaction markers: the control batches that commit or abort a producer's transaction.

A marker is a control, transactional batch of the producer (its id and epoch, no sequence)
holding one record: key = int16 version 0, int16 type (0 abort, 1 commit); value = int16
version 0, int32 coordinator epoch (Kafka's EndTransactionMarker).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from riverlog.protocol.exceptions import CorruptRecordError
from riverlog.protocol.records.batch_header import BATCH_HEADER_SIZE, BatchHeader
from riverlog.protocol.records.v2 import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    control_record_type,
    decode_records,
    encode_batch,
)

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class Marker(NamedTuple):
    aborted: bool
    coordinator_epoch: int


def encode_marker(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, now_ms: int
) -> bytes:
    kind = CONTROL_COMMIT if commit else CONTROL_ABORT
    record = Record(0, now_ms, _KEY.pack(0, kind), _VALUE.pack(0, coordinator_epoch))
    return encode_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def read_marker(view: memoryview, position: int, header: BatchHeader) -> Marker:
    """The marker of the control batch at `position` of `view`."""
    records = decode_records(header, view[position + BATCH_HEADER_SIZE : position + header.size])
    if not records:
        raise CorruptRecordError("a control batch without a record")
    value = records[0].value
    epoch = _VALUE.unpack_from(value)[1] if value is not None and len(value) >= 6 else -1
    return Marker(control_record_type(records[0]) == CONTROL_ABORT, epoch)
