"""Fetch versions before 10 cannot read zstd (KIP-110): Kafka answers
UNSUPPORTED_COMPRESSION_TYPE; the legacy formats of v0-3 are covered by the old-client tests."""

from __future__ import annotations

import asyncio

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.client.connection import Connection, parse_bootstrap
from riverlog.embedded import EmbeddedBroker
from riverlog.protocol import error_codes
from riverlog.protocol.messages import FetchRequest, FetchResponse


def _fetch(bootstrap: str, version: int) -> FetchResponse.PartitionData:
    async def run() -> FetchResponse.PartitionData:
        host, port = parse_bootstrap(bootstrap)[0]
        conn = await Connection.open(host, port)
        try:
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                topics=[
                    FetchRequest.FetchTopic(
                        topic="z",
                        partitions=[
                            FetchRequest.FetchPartition(
                                partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                ],
            )
            response = await conn.send(request, version)
            assert isinstance(response, FetchResponse)
            return response.responses[0].partitions[0]
        finally:
            await conn.close()

    return asyncio.run(run())


def test_zstd_is_refused_to_fetchers_below_v10(
    riverlog_broker: EmbeddedBroker,
) -> None:
    bootstrap = riverlog_broker.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd"})
    producer.produce("z", value=b"compressible " * 50)
    assert producer.flush(15) == 0
    assert _fetch(bootstrap, 9).error_code == error_codes.UNSUPPORTED_COMPRESSION_TYPE.code
    assert _fetch(bootstrap, 3).error_code == error_codes.UNSUPPORTED_COMPRESSION_TYPE.code
    modern = _fetch(bootstrap, 10)
    assert modern.error_code == 0 and isinstance(modern.records, bytes | memoryview)


def test_a_later_partition_whose_first_batch_does_not_fit_gets_nothing(
    riverlog_broker: EmbeddedBroker,
) -> None:
    """KIP-74 gives the first partition with data a whole batch; a later one whose first
    batch exceeds what is left of `max_bytes` gets no data, never a cut-off batch (which
    kafka-python's max_bytes test saw: 222 bytes of a 2.2 KB batch)."""
    bootstrap = riverlog_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("cut", 2, 1)])["cut"].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for partition in (0, 1):
        for i in range(20):
            producer.produce("cut", value=b"%03d" % i * 30, partition=partition)
    assert producer.flush(15) == 0

    async def fetch(max_bytes: int) -> list[FetchResponse.PartitionData]:
        host, port = parse_bootstrap(bootstrap)[0]
        conn = await Connection.open(host, port)
        try:
            partitions = [
                FetchRequest.FetchPartition(
                    partition=p, fetch_offset=0, partition_max_bytes=1 << 20
                )
                for p in (0, 1)
            ]
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=max_bytes,
                topics=[FetchRequest.FetchTopic(topic="cut", partitions=partitions)],
            )
            response = await conn.send(request, 12)
            assert isinstance(response, FetchResponse)
            return sorted(response.responses[0].partitions, key=lambda d: d.partition_index)
        finally:
            await conn.close()

    whole = asyncio.run(fetch(1 << 20))
    first_size = len(whole[0].records)
    assert first_size > 2000 and len(whole[1].records) == first_size  # one batch each
    first, second = asyncio.run(fetch(first_size + 222))
    assert len(first.records) == first_size
    assert (second.error_code, len(second.records)) == (0, 0)
