"""Round-trip property tests: every generated message, every version.

For each (message, version) hypothesis builds instances holding arbitrary values in exactly the
fields that exist at that version; encoding then decoding must give the instance back, and
re-encoding must give the same bytes. Tagged fields the decoder does not know are kept and
written back.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from riverlog.protocol import messages
from riverlog.protocol.primitives import FileRegion, write_tagged_fields
from tests.protocol.both_primitives import each_primitives  # noqa: F401 (autouse: both readers)
from tests.protocol.schema_strategies import all_messages, cases, generated_class, message_strategy

CASES = cases()


def _case_id(case: tuple[Any, int]) -> str:
    return f"{case[0].name}-v{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_round_trip(case: tuple[Any, int]) -> None:
    msg, version = case
    cls = generated_class(msg.name)

    @settings(
        max_examples=8,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(message_strategy(msg, version))
    def check(instance: Any) -> None:
        encoded = instance.encode(version)
        decoded = cls.decode(encoded, version)
        assert decoded == instance
        assert decoded.encode(version) == encoded

    check()


def test_every_api_key_has_request_and_response() -> None:
    assert set(messages.REQUESTS) == set(messages.RESPONSES)
    for key, cls in messages.REQUESTS.items():
        assert key == cls.API_KEY and cls.IS_REQUEST
        assert messages.RESPONSES[key].MAX_VERSION == cls.MAX_VERSION


def test_all_versions_start_at_zero() -> None:
    for msg in all_messages():
        if msg.kind in ("request", "response"):
            assert generated_class(msg.name).MIN_VERSION == 0


def test_old_versions_below_the_schema_minimum_follow_field_ranges() -> None:
    # Produce v0-v2 were dropped from Kafka 4's schema but exist on the wire: no
    # transactional id, topic names, and a message set in the records field.
    req = messages.ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            messages.ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    messages.ProduceRequest.PartitionProduceData(index=0, records=b"xyz")
                ],
            )
        ],
    )
    assert messages.ProduceRequest.SCHEMA_MIN_VERSION == 3
    assert req.encode(0) == (
        b"\x00\x01"  # acks
        b"\x00\x00\x03\xe8"  # timeout
        b"\x00\x00\x00\x01"
        b"\x00\x01t"  # one topic "t"
        b"\x00\x00\x00\x01"
        b"\x00\x00\x00\x00"  # one partition, index 0
        b"\x00\x00\x00\x03xyz"  # records
    )


def test_unknown_tagged_fields_are_kept_and_written_back() -> None:
    base = messages.ApiVersionsRequest(client_software_name="c", client_software_version="1")
    encoded = base.encode(3)
    assert encoded.endswith(b"\x00")  # no tagged fields
    tagged: list[Any] = []
    write_tagged_fields(tagged, [(7, b"\x01\x02"), (100, b"")])
    with_unknown = encoded[:-1] + b"".join(tagged)
    decoded = messages.ApiVersionsRequest.decode(with_unknown, 3)
    assert decoded.unknown_tagged_fields == {7: b"\x01\x02", 100: b""}
    assert decoded.client_software_name == "c"
    assert decoded.encode(3) == with_unknown


def test_tagged_fields_at_their_default_are_not_written() -> None:
    # librdkafka 2.0.2 (Debian's kcat) misreads tagged fields that are present at their
    # default; SupportedFeatures etc. of ApiVersionsResponse v3 must not appear when empty.
    resp = messages.ApiVersionsResponse(error_code=0, api_keys=[])
    encoded = resp.encode(3)
    assert encoded == b"\x00\x00\x01\x00\x00\x00\x00\x00"
    with_features = messages.ApiVersionsResponse(finalized_features_epoch=5)
    assert len(with_features.encode(3)) > len(encoded)


def test_known_tagged_field_round_trip() -> None:
    req = messages.FetchRequest(
        cluster_id="abc",
        replica_state=messages.FetchRequest.ReplicaState(replica_id=2, replica_epoch=9),
    )
    decoded = messages.FetchRequest.decode(req.encode(15), 15)
    assert decoded.cluster_id == "abc"
    assert decoded.replica_state == req.replica_state
    # Below v15 the replica state is not a field; below v12 there are no tagged fields.
    assert messages.FetchRequest.decode(req.encode(11), 11).cluster_id is None


def test_topic_ids_replace_names_from_fetch_v13() -> None:
    topic_id = uuid.uuid4()
    req = messages.FetchRequest(
        topics=[messages.FetchRequest.FetchTopic(topic="t", topic_id=topic_id)]
    )
    assert messages.FetchRequest.decode(req.encode(13), 13).topics[0].topic_id == topic_id
    assert messages.FetchRequest.decode(req.encode(13), 13).topics[0].topic == ""
    assert messages.FetchRequest.decode(req.encode(12), 12).topics[0].topic == "t"


def test_records_decode_as_zero_copy_slices() -> None:
    payload = bytes(range(256)) * 64
    req = messages.ProduceRequest(
        topic_data=[
            messages.ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    messages.ProduceRequest.PartitionProduceData(index=0, records=payload)
                ],
            )
        ],
    )
    frame = bytearray(req.encode(9))
    decoded = messages.ProduceRequest.decode(frame, 9)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is frame  # a view into the request buffer, not a copy
    assert records == payload


@given(st.lists(st.integers(0, 3000), min_size=1, max_size=4))
@settings(max_examples=20, deadline=None)
def test_fetch_response_chunks_keep_file_regions(lengths: list[int]) -> None:
    regions = [FileRegion(fileno=99, offset=i * 10, length=n) for i, n in enumerate(lengths)]
    resp = messages.FetchResponse(
        responses=[
            messages.FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[
                    messages.FetchResponse.PartitionData(partition_index=i, records=r)
                    for i, r in enumerate(regions)
                ],
            )
        ]
    )
    chunks = resp.encode_chunks(12)
    assert [c for c in chunks if isinstance(c, FileRegion)] == [r for r in regions if r.length]
    # With the regions' bytes filled in, the result equals an in-memory encoding.
    fill = {r: bytes([r.offset % 256]) * r.length for r in regions}
    in_memory = messages.FetchResponse(
        responses=[
            messages.FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[
                    messages.FetchResponse.PartitionData(partition_index=i, records=fill[r])
                    for i, r in enumerate(regions)
                ],
            )
        ]
    ).encode(12)
    joined = b"".join(fill[c] if isinstance(c, FileRegion) else bytes(c) for c in chunks)
    assert joined == in_memory
