"""Fetch versions before 10 cannot read zstd (KIP-110): Kafka answers
UNSUPPORTED_COMPRESSION_TYPE; the legacy formats of v0-3 are covered by the old-client tests."""

from __future__ import annotations

import asyncio

from confluent_kafka import Producer

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
