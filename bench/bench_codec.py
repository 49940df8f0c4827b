"""Codec benchmark: µs per operation on the broker's hot paths (prints numbers, asserts none).

Targets (issue 2): ProduceRequest v9 decode of one 1 MiB batch ≤ 20 µs (records are not
copied), FetchResponse encode of 10 x 1 MiB as chunks ≤ 100 µs.
"""

from __future__ import annotations

import os
import sys
import tempfile
import timeit
from collections.abc import Callable

from riverlog.protocol.framing import decode_request, encode_request, encode_response
from riverlog.protocol.messages import FetchResponse, MetadataResponse, ProduceRequest
from riverlog.protocol.primitives import FileRegion
from riverlog.protocol.records.v2 import Record, encode_batch

MiB = 1 << 20


def _batch(size: int) -> bytes:
    return encode_batch([Record(0, 1_700_000_000_000, None, os.urandom(size - 80))])


def _produce_frame(batches: list[bytes], partitions: int) -> bytes:
    per_partition = [b"".join(batches[i::partitions]) for i in range(partitions)]
    topic = ProduceRequest.TopicProduceData(
        name="bench",
        partition_data=[
            ProduceRequest.PartitionProduceData(index=i, records=data)
            for i, data in enumerate(per_partition)
        ],
    )
    body = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[topic])
    return encode_request(body, 9, 1, "bench")[4:]


def _fetch_response(fd: int) -> FetchResponse:
    partitions = [
        FetchResponse.PartitionData(
            partition_index=i,
            high_watermark=1000,
            last_stable_offset=1000,
            log_start_offset=0,
            records=FileRegion(fd, i * MiB, MiB),
        )
        for i in range(10)
    ]
    return FetchResponse(
        responses=[FetchResponse.FetchableTopicResponse(topic="bench", partitions=partitions)]
    )


def _metadata_response() -> MetadataResponse:
    topics = [
        MetadataResponse.MetadataResponseTopic(
            name=f"topic-{t}",
            partitions=[
                MetadataResponse.MetadataResponsePartition(
                    partition_index=p, leader_id=p % 3, replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2]
                )
                for p in range(10)
            ],
        )
        for t in range(100)
    ]
    brokers = [
        MetadataResponse.MetadataResponseBroker(node_id=i, host="127.0.0.1", port=9092 + i)
        for i in range(3)
    ]
    return MetadataResponse(brokers=brokers, cluster_id="bench", controller_id=0, topics=topics)


def _time(label: str, op: Callable[[], object], target_us: float | None = None) -> None:
    op()
    runs, _ = timeit.Timer(op).autorange()
    best = min(timeit.Timer(op).repeat(repeat=5, number=runs)) / runs * 1e6
    verdict = "" if target_us is None else (" ok" if best <= target_us else " OVER TARGET")
    target = "" if target_us is None else f"  (target ≤ {target_us:g} µs{verdict})"
    print(f"{label:<55} {best:10.1f} µs/op{target}")


def main() -> int:
    one_big = _produce_frame([_batch(MiB)], 1)
    many_small = _produce_frame([_batch(10 * 1024) for _ in range(100)], 10)
    decoded = decode_request(one_big).body
    assert isinstance(decoded, ProduceRequest)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview), "produce decode must not copy records"

    _time("ProduceRequest v9 decode, 1 x 1 MiB batch", lambda: decode_request(one_big), 20)
    _time(
        "ProduceRequest v9 decode, 100 x 10 KiB (10 partitions)", lambda: decode_request(many_small)
    )

    with tempfile.TemporaryFile() as segment:
        segment.truncate(10 * MiB)
        fetch = _fetch_response(segment.fileno())
        _time(
            "FetchResponse v16 encode as chunks, 10 x 1 MiB",
            lambda: encode_response(fetch, 16, 1),
            100,
        )
        in_memory = _fetch_response(segment.fileno())
        blob = memoryview(os.urandom(MiB))
        for p in in_memory.responses[0].partitions:
            p.records = blob
        _time(
            "FetchResponse v16 encode as chunks, 10 x 1 MiB memoryviews",
            lambda: encode_response(in_memory, 16, 1),
        )

    metadata = _metadata_response()
    _time(
        "MetadataResponse v12 encode, 100 topics x 10 partitions",
        lambda: encode_response(metadata, 12, 1),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
