"""Golden decode tests: request frames real clients sent, decoded with our codec.

The fixtures under `golden/<client>-<codec>/NN-<ApiName>-v<version>.bin` are raw request
frames (size prefix removed) captured by `tools/capture_client_requests.py` from kcat
(librdkafka 2.0.2) and confluent-kafka (librdkafka 2.x) producing two messages to topic
"golden" with each compression codec. Re-run that tool to refresh them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from riverlog.protocol.framing import decode_request, request_header_version
from riverlog.protocol.messages import (
    REQUESTS,
    ApiVersionsRequest,
    MetadataRequest,
    ProduceRequest,
)
from riverlog.protocol.primitives import Chunk, join_chunks
from riverlog.protocol.records.batch_header import iter_batches, read_batch_header, verify_crc
from riverlog.protocol.records.v2 import iter_record_batches
from tests.protocol.both_primitives import each_primitives  # noqa: F401 (autouse: both readers)

GOLDEN_DIR = Path(__file__).parent / "golden"
FIXTURES = sorted(GOLDEN_DIR.glob("*-*/*.bin"))
NAME_RE = re.compile(r"^(\d{2})-([A-Za-z]+)-v(\d+)\.bin$")

TOPIC = "golden"
CLIENT_IDS = {"kcat": "golden-kcat", "confluent": "golden-confluent"}
SOFTWARE_NAMES = {"kcat": "librdkafka", "confluent": "confluent-kafka-python"}
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
MESSAGES = [b"hello golden one " * 8, b"hello golden two " * 8]  # as the capture tool sends
FIXTURE_DIRS = sorted({f.parent for f in FIXTURES})


def _fixture_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _expected(path: Path) -> tuple[str, str, int, str, int]:
    """(client, codec, sequence, api name, api version) from the fixture's path."""
    client, _, codec = path.parent.name.partition("-")
    match = NAME_RE.match(path.name)
    assert match is not None, f"unexpected fixture name {path.name}"
    return client, codec, int(match[1]), match[2], int(match[3])


def test_fixtures_present() -> None:
    assert FIXTURES, f"no golden fixtures under {GOLDEN_DIR}: run tools/capture_client_requests.py"
    for client in CLIENT_IDS:
        for codec in CODEC_IDS:
            assert (GOLDEN_DIR / f"{client}-{codec}").is_dir(), f"missing {client}-{codec}"
    total = sum(f.stat().st_size for f in FIXTURES)
    assert total < 200 * 1024


@pytest.mark.parametrize("path", FIXTURES, ids=_fixture_id)
def test_decode_header(path: Path) -> None:
    client, codec, _, api_name, api_version = _expected(path)
    assert client in CLIENT_IDS and codec in CODEC_IDS
    frame = path.read_bytes()
    request = decode_request(frame)
    assert f"{api_name}Request" == type(request.body).NAME
    assert request.api_key == REQUESTS[request.api_key].API_KEY == type(request.body).API_KEY
    assert request.api_version == api_version
    assert request.header.client_id == CLIENT_IDS[client]


@pytest.mark.parametrize("path", FIXTURES, ids=_fixture_id)
def test_reencode_is_identical(path: Path) -> None:
    frame = path.read_bytes()
    request = decode_request(frame)
    out: list[Chunk] = []
    request.header.write_to(out, request_header_version(request.api_key, request.api_version))
    header_len = len(join_chunks(out))
    assert join_chunks(out) == frame[:header_len], "request header re-encodes differently"
    body = request.body.encode(request.api_version)
    assert body == frame[header_len:], "request body re-encodes differently"
    # And the body decodes strictly (no trailing bytes) on its own.
    assert type(request.body).decode(frame[header_len:], request.api_version) == request.body


@pytest.mark.parametrize(
    "path", [f for f in FIXTURES if "-ApiVersions-" in f.name], ids=_fixture_id
)
def test_api_versions(path: Path) -> None:
    client = _expected(path)[0]
    body = decode_request(path.read_bytes()).body
    assert isinstance(body, ApiVersionsRequest)
    assert body.client_software_name == SOFTWARE_NAMES[client]
    assert body.client_software_version.startswith("2.")


@pytest.mark.parametrize("path", [f for f in FIXTURES if "-Metadata-" in f.name], ids=_fixture_id)
def test_metadata_asks_for_golden(path: Path) -> None:
    body = decode_request(path.read_bytes()).body
    assert isinstance(body, MetadataRequest)
    assert body.topics is not None, "a request for all topics"
    if not body.topics:
        # librdkafka's brokers-only refresh (rd_kafka_metadata_refresh_brokers) sometimes
        # races ahead of the topic request: an empty list asks for no topics at all.
        assert body.allow_auto_topic_creation is False
        return
    assert [t.name for t in body.topics] == [TOPIC]


@pytest.mark.parametrize("directory", FIXTURE_DIRS, ids=lambda d: d.name)
def test_each_capture_asks_metadata_for_golden_then_produces(directory: Path) -> None:
    requests = [decode_request(f.read_bytes()) for f in sorted(directory.glob("*.bin"))]
    kinds = [type(r.body) for r in requests]
    assert kinds[0] is ApiVersionsRequest
    asked = [
        r
        for r in requests
        if isinstance(r.body, MetadataRequest) and [t.name for t in r.body.topics or []] == [TOPIC]
    ]
    assert asked, "no Metadata request for topic 'golden'"
    assert ProduceRequest in kinds
    assert kinds.index(MetadataRequest) < kinds.index(ProduceRequest)


@pytest.mark.parametrize("path", [f for f in FIXTURES if "-Produce-" in f.name], ids=_fixture_id)
def test_produce_batches(path: Path) -> None:
    _, codec, _, _, _ = _expected(path)
    body = decode_request(path.read_bytes()).body
    assert isinstance(body, ProduceRequest)
    assert body.acks == -1
    assert body.transactional_id is None
    assert [t.name for t in body.topic_data] == [TOPIC]
    (topic,) = body.topic_data
    assert [p.index for p in topic.partition_data] == [0]
    records = topic.partition_data[0].records
    assert isinstance(records, bytes | bytearray | memoryview)
    assert len(records) > 0

    batches = list(iter_batches(records))
    assert batches
    values: list[bytes | None] = []
    for pos, header in batches:
        again = read_batch_header(records, pos)
        assert again == header
        assert header.magic == 2
        verify_crc(records, pos, header)
        assert header.attributes & 7 == CODEC_IDS[codec]
        assert header.compression == CODEC_IDS[codec]
        assert not header.is_transactional and not header.is_control
    for batch in iter_record_batches(records):
        values += [r.value for r in batch.records]
    assert values == MESSAGES
