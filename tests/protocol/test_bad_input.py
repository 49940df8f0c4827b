"""Bad input never escapes the codec as anything but a documented `ProtocolError`.

Truncations at every cut point, mutated bytes, negative sizes, invalid varints, unknown API
keys and versions: each raises its precise exception — never IndexError, struct.error,
UnicodeDecodeError, MemoryError — and never hangs (arrays whose declared count cannot fit in
the bytes left are rejected before any loop runs).
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverlog.protocol import messages
from riverlog.protocol.exceptions import (
    DecodeError,
    FrameError,
    FrameTooLargeError,
    InvalidStringError,
    InvalidVarintError,
    NegativeLengthError,
    ProtocolError,
    TrailingBytesError,
    TruncatedError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from riverlog.protocol.framing import FrameReader, decode_request, encode_request
from tests.protocol.both_primitives import each_primitives  # noqa: F401 (autouse: both readers)
from tests.protocol.schema_strategies import cases, generated_class, message_strategy

# A representative spread: classic and flexible, requests and responses, deep nesting.
SAMPLES = [
    (m, v)
    for (m, v) in cases()
    if (m.name, v)
    in {
        ("ProduceRequest", 3),
        ("ProduceRequest", 9),
        ("FetchResponse", 4),
        ("FetchResponse", 16),
        ("MetadataResponse", 1),
        ("MetadataResponse", 12),
        ("JoinGroupRequest", 5),
        ("ApiVersionsResponse", 3),
        ("DescribeConfigsResponse", 4),
        ("RequestHeader", 2),
    }
]


@pytest.mark.parametrize("case", SAMPLES, ids=[f"{m.name}-v{v}" for m, v in SAMPLES])
def test_every_truncation_raises_truncated(case: tuple[Any, int]) -> None:
    msg, version = case
    cls = generated_class(msg.name)

    @settings(max_examples=5, deadline=None, database=None)
    @given(message_strategy(msg, version))
    def check(instance: Any) -> None:
        encoded = instance.encode(version)
        for cut in range(len(encoded)):
            with pytest.raises(TruncatedError):
                cls.decode(encoded[:cut], version)

    check()


@pytest.mark.parametrize("case", SAMPLES, ids=[f"{m.name}-v{v}" for m, v in SAMPLES])
def test_mutated_bytes_raise_only_protocol_errors(case: tuple[Any, int]) -> None:
    msg, version = case
    cls = generated_class(msg.name)

    @settings(max_examples=40, deadline=None, database=None)
    @given(message_strategy(msg, version), st.data())
    def check(instance: Any, data: st.DataObject) -> None:
        encoded = bytearray(instance.encode(version))
        if not encoded:
            return
        for _ in range(data.draw(st.integers(1, 4))):
            pos = data.draw(st.integers(0, len(encoded) - 1))
            encoded[pos] = data.draw(st.integers(0, 255))
        with contextlib.suppress(ProtocolError):
            cls.decode(bytes(encoded), version)

    check()


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_random_frames_raise_only_protocol_errors(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_request(frame)


def test_trailing_bytes() -> None:
    encoded = messages.ApiVersionsRequest().encode(0)
    with pytest.raises(TrailingBytesError):
        messages.ApiVersionsRequest.decode(encoded + b"\x00", 0)


def test_negative_string_length() -> None:
    # MetadataRequest v1: topics array of one, topic name with length -2.
    with pytest.raises(NegativeLengthError):
        messages.MetadataRequest.decode(b"\x00\x00\x00\x01\xff\xfe", 1)
    # Length -1 is null, which a non-nullable topic name may not be either.
    with pytest.raises(NegativeLengthError):
        messages.MetadataRequest.decode(b"\x00\x00\x00\x01\xff\xff", 1)


def test_negative_array_length() -> None:
    with pytest.raises(NegativeLengthError):
        messages.MetadataRequest.decode(b"\xff\xff\xff\xfe", 1)
    # -1 is null, which Metadata v0 topics may not be (nullable from v1).
    with pytest.raises(NegativeLengthError):
        messages.MetadataRequest.decode(b"\xff\xff\xff\xff", 0)
    assert messages.MetadataRequest.decode(b"\xff\xff\xff\xff", 1).topics is None


def test_huge_array_count_is_rejected_without_looping() -> None:
    with pytest.raises(TruncatedError):
        messages.MetadataRequest.decode(b"\x7f\xff\xff\xff" + b"\x00" * 10, 1)


def test_invalid_varint() -> None:
    # ApiVersionsRequest v3: compact string length as a varint that never ends.
    with pytest.raises(InvalidVarintError):
        messages.ApiVersionsRequest.decode(b"\xff" * 8, 3)


def test_invalid_utf8() -> None:
    with pytest.raises(InvalidStringError):
        messages.MetadataRequest.decode(b"\x00\x00\x00\x01\x00\x02\xff\xfe", 1)


def test_unknown_api_key_keeps_correlation_id() -> None:
    frame = struct.pack(">hhi", 999, 0, 1234) + b"\x00\x00"
    with pytest.raises(UnknownApiKeyError) as info:
        decode_request(frame)
    assert info.value.api_key == 999
    assert info.value.correlation_id == 1234


def test_unsupported_version_keeps_correlation_id() -> None:
    frame = struct.pack(">hhi", 18, 99, 77) + b"\x00\x00"
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(frame)
    assert (info.value.api_key, info.value.version, info.value.correlation_id) == (18, 99, 77)


def test_encode_rejects_values_out_of_range() -> None:
    from riverlog.protocol.exceptions import EncodeError

    with pytest.raises(EncodeError):
        messages.ProduceRequest(acks=70000).encode(9)
    with pytest.raises(EncodeError):
        messages.MetadataRequest(topics=None).encode(0)
    with pytest.raises(UnsupportedVersionError):
        messages.ProduceRequest().encode(99)


def test_request_frame_round_trip_through_reader() -> None:
    topic = messages.MetadataRequest.MetadataRequestTopic(name="a")
    body = messages.MetadataRequest(topics=[topic])
    frames = [encode_request(body, v, correlation_id=v, client_id="me") for v in (0, 4, 9, 12)]
    stream = b"".join(frames)
    for split in (1, 3, 5, 17, len(stream)):
        reader = FrameReader(buffer_bytes=64)
        got: list[bytes | bytearray] = []
        for i in range(0, len(stream), split):
            got += reader.feed(stream[i : i + split])
        decoded = [decode_request(f) for f in got]
        assert [d.correlation_id for d in decoded] == [0, 4, 9, 12]
        assert all(d.body.topics[0].name == "a" for d in decoded)  # type: ignore[attr-defined]
        assert all(d.header.client_id == "me" for d in decoded)


def test_large_frame_is_received_in_place() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = struct.pack(">i", len(payload)) + payload + struct.pack(">i", 2) + b"hi"
    reader = FrameReader(buffer_bytes=4096)
    frames: list[bytes | bytearray] = []
    for i in range(0, len(stream), 1000):
        frames += reader.feed(stream[i : i + 1000])
    assert frames == [payload, b"hi"]
    assert isinstance(frames[0], bytearray)  # its own allocation, filled by the receive


def test_frame_limits() -> None:
    with pytest.raises(FrameTooLargeError):
        FrameReader(max_frame_bytes=100).feed(struct.pack(">i", 101))
    with pytest.raises(FrameError):
        FrameReader().feed(struct.pack(">i", -5))


def test_decode_errors_are_one_family() -> None:
    for exc in (TruncatedError, NegativeLengthError, InvalidVarintError, InvalidStringError):
        assert issubclass(exc, DecodeError)


def test_request_trailing_bytes_are_ignored_like_kafka() -> None:
    # librdkafka 2.16's Metadata v12 request for all topics, captured: three stray bytes
    # follow the body. Kafka's parser ignores them, and so does ours (only for requests).
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    request = decode_request(frame)
    assert isinstance(request.body, messages.MetadataRequest)
    assert request.body.topics is None and request.header.client_id == "rdkafka"
