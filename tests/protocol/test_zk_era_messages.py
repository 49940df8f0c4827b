"""Byte-exact tests for the ZooKeeper-era inter-broker messages (API keys 4-7).

Their schemas live in `tools/schemas/` (Kafka 4 no longer ships them). The expected bytes here
are assembled by hand with `struct.pack`, following the Kafka protocol layout, independently
of the generator: classic strings are int16 length + UTF-8, classic arrays int32 count;
flexible versions use compact strings/arrays (unsigned varint length + 1) and end every struct
with a tagged-field section (an unsigned varint count, here almost always 0).
"""

from __future__ import annotations

import struct
import uuid

from riverlog.protocol.framing import (
    decode_request,
    encode_request,
    request_header_version,
    response_header_version,
)
from riverlog.protocol.messages import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    UpdateMetadataRequest,
)

# --- hand-assembly helpers --------------------------------------------------------------------


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(*vs: int) -> bytes:
    return struct.pack(f">{len(vs)}i", *vs)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def boolean(v: bool) -> bytes:
    return b"\x01" if v else b"\x00"


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    raw = s.encode()
    return i16(len(raw)) + raw


def cstring(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def int32_array(*vs: int) -> bytes:
    return i32(len(vs)) + (i32(*vs) if vs else b"")


def cint32_array(*vs: int) -> bytes:
    return uvarint(len(vs) + 1) + (i32(*vs) if vs else b"")


NO_TAGS = b"\x00"
TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


# --- LeaderAndIsr -----------------------------------------------------------------------------

PS = LeaderAndIsrRequest.LeaderAndIsrPartitionState
LL = LeaderAndIsrRequest.LeaderAndIsrLiveLeader
TS = LeaderAndIsrRequest.LeaderAndIsrTopicState


def test_leader_and_isr_request_v0() -> None:
    msg = LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=2,
        ungrouped_partition_states=[
            PS(
                topic_name="t",
                partition_index=0,
                controller_epoch=2,
                leader=1,
                leader_epoch=5,
                isr=[1, 2],
                partition_epoch=7,
                replicas=[1, 2, 3],
            ),
        ],
        live_leaders=[LL(broker_id=1, host_name="h1", port=9092)],
    )
    expected = (
        i32(1, 2)
        + i32(1)  # ungrouped partition states
        + string("t")
        + i32(0, 2, 1, 5)
        + int32_array(1, 2)
        + i32(7)
        + int32_array(1, 2, 3)
        + i32(1)  # live leaders
        + i32(1)
        + string("h1")
        + i32(9092)
    )
    assert msg.encode(0) == expected
    assert LeaderAndIsrRequest.decode(expected, 0) == msg


def test_leader_and_isr_request_v2_groups_by_topic() -> None:
    msg = LeaderAndIsrRequest(
        controller_id=1,
        controller_epoch=2,
        broker_epoch=100,
        topic_states=[
            TS(
                topic_name="orders",
                partition_states=[
                    PS(
                        partition_index=3,
                        controller_epoch=2,
                        leader=2,
                        leader_epoch=9,
                        isr=[2],
                        partition_epoch=4,
                        replicas=[2, 1],
                        is_new=True,
                    ),
                ],
            ),
        ],
        live_leaders=[LL(broker_id=2, host_name="b2", port=9093)],
    )
    expected = (
        i32(1, 2)
        + i64(100)
        + i32(1)  # topic states
        + string("orders")
        + i32(1)  # partition states (no topic name from v2 on)
        + i32(3, 2, 2, 9)
        + int32_array(2)
        + i32(4)
        + int32_array(2, 1)
        + boolean(True)
        + i32(1)
        + i32(2)
        + string("b2")
        + i32(9093)
    )
    assert msg.encode(2) == expected
    assert LeaderAndIsrRequest.decode(expected, 2) == msg


def _leader_and_isr_v5_plus(version: int) -> tuple[LeaderAndIsrRequest, bytes]:
    msg = LeaderAndIsrRequest(
        controller_id=1,
        is_k_raft_controller=version >= 7,
        controller_epoch=2,
        broker_epoch=100,
        type=1,
        topic_states=[
            TS(
                topic_name="orders",
                topic_id=TOPIC_ID,
                partition_states=[
                    PS(
                        partition_index=0,
                        controller_epoch=2,
                        leader=1,
                        leader_epoch=3,
                        isr=[1, 2],
                        partition_epoch=5,
                        replicas=[1, 2],
                        adding_replicas=[3],
                        removing_replicas=[],
                        is_new=False,
                        leader_recovery_state=1 if version >= 6 else 0,
                    ),
                ],
            ),
        ],
        live_leaders=[LL(broker_id=1, host_name="h1", port=9092)],
    )
    partition = (
        i32(0, 2, 1, 3)
        + cint32_array(1, 2)
        + i32(5)
        + cint32_array(1, 2)
        + cint32_array(3)
        + cint32_array()
        + boolean(False)
        + (i8(1) if version >= 6 else b"")
        + NO_TAGS
    )
    expected = (
        i32(1)
        + (boolean(True) if version >= 7 else b"")
        + i32(2)
        + i64(100)
        + i8(1)
        + uvarint(2)  # one topic state
        + cstring("orders")
        + TOPIC_ID.bytes
        + uvarint(2)
        + partition
        + NO_TAGS
        + uvarint(2)
        + i32(1)
        + cstring("h1")
        + i32(9092)
        + NO_TAGS
        + NO_TAGS
    )
    return msg, expected


def test_leader_and_isr_request_v5_v6_v7_flexible() -> None:
    for version in (5, 6, 7):
        msg, expected = _leader_and_isr_v5_plus(version)
        assert msg.encode(version) == expected, version
        assert LeaderAndIsrRequest.decode(expected, version) == msg


def test_leader_and_isr_response_v0_and_v5() -> None:
    PE = LeaderAndIsrResponse.LeaderAndIsrPartitionError
    v0 = LeaderAndIsrResponse(
        error_code=0,
        partition_errors=[
            PE(topic_name="t", partition_index=1, error_code=6),
        ],
    )
    v0_bytes = i16(0) + i32(1) + string("t") + i32(1) + i16(6)
    assert v0.encode(0) == v0_bytes
    assert LeaderAndIsrResponse.decode(v0_bytes, 0) == v0

    v5 = LeaderAndIsrResponse(
        error_code=0,
        topics=[
            LeaderAndIsrResponse.LeaderAndIsrTopicError(
                topic_id=TOPIC_ID,
                partition_errors=[
                    PE(partition_index=1, error_code=6),
                ],
            ),
        ],
    )
    v5_bytes = (
        i16(0)
        + uvarint(2)
        + TOPIC_ID.bytes
        + uvarint(2)
        + i32(1)
        + i16(6)
        + NO_TAGS
        + NO_TAGS
        + NO_TAGS
    )
    assert v5.encode(5) == v5_bytes
    assert LeaderAndIsrResponse.decode(v5_bytes, 5) == v5


# --- UpdateMetadata ---------------------------------------------------------------------------

UPS = UpdateMetadataRequest.UpdateMetadataPartitionState
UB = UpdateMetadataRequest.UpdateMetadataBroker
UE = UpdateMetadataRequest.UpdateMetadataEndpoint
UTS = UpdateMetadataRequest.UpdateMetadataTopicState


def test_update_metadata_request_v0_single_host_port() -> None:
    msg = UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=4,
        ungrouped_partition_states=[
            UPS(
                topic_name="t",
                partition_index=2,
                controller_epoch=4,
                leader=1,
                leader_epoch=8,
                isr=[1],
                zk_version=11,
                replicas=[1, 2],
            ),
        ],
        live_brokers=[UB(id=1, v0_host="h1", v0_port=9092)],
    )
    expected = (
        i32(1, 4)
        + i32(1)
        + string("t")
        + i32(2, 4, 1, 8)
        + int32_array(1)
        + i32(11)
        + int32_array(1, 2)
        + i32(1)
        + i32(1)
        + string("h1")
        + i32(9092)
    )
    assert msg.encode(0) == expected
    assert UpdateMetadataRequest.decode(expected, 0) == msg


def test_update_metadata_request_v5_grouped_by_topic() -> None:
    msg = UpdateMetadataRequest(
        controller_id=1,
        controller_epoch=4,
        broker_epoch=77,
        topic_states=[
            UTS(
                topic_name="orders",
                partition_states=[
                    UPS(
                        partition_index=0,
                        controller_epoch=4,
                        leader=2,
                        leader_epoch=1,
                        isr=[2, 1],
                        zk_version=3,
                        replicas=[2, 1],
                        offline_replicas=[1],
                    ),
                ],
            ),
        ],
        live_brokers=[
            UB(
                id=1,
                endpoints=[UE(port=9092, host="h1", listener="PLAINTEXT", security_protocol=0)],
                rack=None,
            ),
            UB(
                id=2,
                endpoints=[UE(port=9093, host="h2", listener="SSL", security_protocol=1)],
                rack="r2",
            ),
        ],
    )
    expected = (
        i32(1, 4)
        + i64(77)
        + i32(1)
        + string("orders")
        + i32(1)
        + i32(0, 4, 2, 1)
        + int32_array(2, 1)
        + i32(3)
        + int32_array(2, 1)
        + int32_array(1)
        + i32(2)
        + i32(1)
        + i32(1)
        + i32(9092)
        + string("h1")
        + string("PLAINTEXT")
        + i16(0)
        + string(None)
        + i32(2)
        + i32(1)
        + i32(9093)
        + string("h2")
        + string("SSL")
        + i16(1)
        + string("r2")
    )
    assert msg.encode(5) == expected
    assert UpdateMetadataRequest.decode(expected, 5) == msg


def test_update_metadata_request_v8_kraft_controller_and_tagged_type() -> None:
    msg = UpdateMetadataRequest(
        controller_id=3000,
        is_k_raft_controller=True,
        type=2,
        controller_epoch=1,
        broker_epoch=5,
        topic_states=[UTS(topic_name="t", topic_id=TOPIC_ID, partition_states=[])],
        live_brokers=[],
    )
    expected = (
        i32(3000)
        + boolean(True)
        + i32(1)
        + i64(5)
        + uvarint(2)
        + cstring("t")
        + TOPIC_ID.bytes
        + uvarint(1)
        + NO_TAGS
        + uvarint(1)
        + uvarint(1)
        + uvarint(0)
        + uvarint(1)
        + i8(2)  # tagged field 0 (Type), 1 byte
    )
    assert msg.encode(8) == expected
    assert UpdateMetadataRequest.decode(expected, 8) == msg
    # Type at its default is not written at all.
    msg.type = 0
    assert msg.encode(8) == expected[:-4] + NO_TAGS


# --- StopReplica ------------------------------------------------------------------------------


def test_stop_replica_request_v0() -> None:
    msg = StopReplicaRequest(
        controller_id=1,
        controller_epoch=2,
        delete_partitions=True,
        ungrouped_partitions=[
            StopReplicaRequest.StopReplicaPartitionV0(topic_name="t", partition_index=0),
            StopReplicaRequest.StopReplicaPartitionV0(topic_name="u", partition_index=4),
        ],
    )
    expected = i32(1, 2) + boolean(True) + i32(2) + string("t") + i32(0) + string("u") + i32(4)
    assert msg.encode(0) == expected
    assert StopReplicaRequest.decode(expected, 0) == msg


def test_stop_replica_request_v1_topics() -> None:
    msg = StopReplicaRequest(
        controller_id=1,
        controller_epoch=2,
        broker_epoch=9,
        delete_partitions=False,
        topics=[StopReplicaRequest.StopReplicaTopicV1(name="t", partition_indexes=[0, 1])],
    )
    expected = i32(1, 2) + i64(9) + boolean(False) + i32(1) + string("t") + int32_array(0, 1)
    assert msg.encode(1) == expected
    assert StopReplicaRequest.decode(expected, 1) == msg


def test_stop_replica_request_v3_partition_states() -> None:
    SPS = StopReplicaRequest.StopReplicaPartitionState
    msg = StopReplicaRequest(
        controller_id=1,
        controller_epoch=2,
        broker_epoch=9,
        topic_states=[
            StopReplicaRequest.StopReplicaTopicState(
                topic_name="t",
                partition_states=[
                    SPS(partition_index=0, leader_epoch=6, delete_partition=True),
                    SPS(partition_index=1, leader_epoch=-1, delete_partition=False),
                ],
            ),
        ],
    )
    expected = (
        i32(1, 2)
        + i64(9)
        + uvarint(2)
        + cstring("t")
        + uvarint(3)
        + i32(0, 6)
        + boolean(True)
        + NO_TAGS
        + i32(1, -1)
        + boolean(False)
        + NO_TAGS
        + NO_TAGS
        + NO_TAGS
    )
    assert msg.encode(3) == expected
    assert StopReplicaRequest.decode(expected, 3) == msg
    # v4 only adds isKRaftController after ControllerId.
    msg.is_k_raft_controller = True
    assert msg.encode(4) == i32(1) + boolean(True) + expected[4:]
    assert StopReplicaRequest.decode(msg.encode(4), 4) == msg


# --- ControlledShutdown -----------------------------------------------------------------------


def test_controlled_shutdown_request_v0_and_v2() -> None:
    v0 = ControlledShutdownRequest(broker_id=3)
    assert v0.encode(0) == i32(3)
    assert ControlledShutdownRequest.decode(i32(3), 0) == v0

    v2 = ControlledShutdownRequest(broker_id=3, broker_epoch=42)
    assert v2.encode(2) == i32(3) + i64(42)
    assert ControlledShutdownRequest.decode(i32(3) + i64(42), 2) == v2
    assert v2.encode(3) == i32(3) + i64(42) + NO_TAGS


def test_controlled_shutdown_response_v0() -> None:
    RP = ControlledShutdownResponse.RemainingPartition
    msg = ControlledShutdownResponse(
        error_code=0,
        remaining_partitions=[
            RP(topic_name="t", partition_index=1),
        ],
    )
    expected = i16(0) + i32(1) + string("t") + i32(1)
    assert msg.encode(0) == expected
    assert ControlledShutdownResponse.decode(expected, 0) == msg


def test_controlled_shutdown_v0_uses_request_header_v0() -> None:
    assert request_header_version(7, 0) == 0
    assert request_header_version(7, 1) == 1
    assert request_header_version(7, 2) == 1
    assert request_header_version(7, 3) == 2
    assert response_header_version(7, 0) == 0
    assert response_header_version(7, 3) == 1

    frame = encode_request(ControlledShutdownRequest(broker_id=3), 0, 9, "ignored")
    payload = i16(7) + i16(0) + i32(9) + i32(3)  # no client id in header v0
    assert frame == i32(len(payload)) + payload
    request = decode_request(frame[4:])
    assert request.api_key == 7 and request.api_version == 0 and request.correlation_id == 9
    assert request.body == ControlledShutdownRequest(broker_id=3)

    frame = encode_request(ControlledShutdownRequest(broker_id=3), 1, 9, "c")
    payload = i16(7) + i16(1) + i32(9) + string("c") + i32(3)
    assert frame == i32(len(payload)) + payload
    assert decode_request(frame[4:]).body == ControlledShutdownRequest(broker_id=3)


def test_other_zk_era_requests_use_standard_headers() -> None:
    for api_key, first_flexible in ((4, 4), (5, 2), (6, 6)):
        assert request_header_version(api_key, 0) == 1
        assert request_header_version(api_key, first_flexible - 1) == 1
        assert request_header_version(api_key, first_flexible) == 2
        assert response_header_version(api_key, first_flexible - 1) == 0
        assert response_header_version(api_key, first_flexible) == 1
