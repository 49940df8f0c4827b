"""MirrorMaker 2 between a plaintext cluster and a SASL_SSL one (TLS + SCRAM-SHA-512).

One MM2 process (in-process here) runs both flows: a->b writes to the secured cluster, in
transactions (`b.exactly.once.source.support = enabled`), b->a reads from it. Every client
of cluster b — consumers, producers (transactional ones too), admin clients — takes the
`b.security.protocol`, `b.ssl.*` and `b.sasl.*` settings; a wrong password stops the mirror
with the broker's refusal instead of mirroring nothing quietly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from riverlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer
from riverlog.embedded import broker
from riverlog.mirror import mm2, mm2_config
from tests.security.conftest import SecuredBroker

pytestmark = pytest.mark.timeout(90)
COUNT = 100


def secured_client(secured: SecuredBroker, password: str = "bob-secret") -> dict[str, str]:
    return {
        "bootstrap.servers": secured.address("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(secured.certs.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="bob" password="{password}";',
    }


def mm2_properties(plain: str, secured: Mapping[str, str]) -> dict[str, str]:
    return {
        "clusters": "a, b",
        "a.bootstrap.servers": plain,
        **{f"b.{key}": value for key, value in secured.items()},
        "a->b.enabled": "true",
        "a->b.topics": "to-b",
        "b->a.enabled": "true",
        "b->a.topics": "to-a",
        "b.exactly.once.source.support": "enabled",
        "replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "offset.storage.partitions": "3",
        "offset.flush.interval.ms": "200",
        "refresh.topics.interval.seconds": "1",
    }


async def values(config: Mapping[str, object], topic: str, count: int) -> list[bytes]:
    """The first `count` values of a one-partition topic, read_committed (waits for the
    topic and the records)."""
    async with AsyncAdmin(config) as admin:
        async with asyncio.timeout(30):
            while topic not in await admin.list_topics():
                await asyncio.sleep(0.1)
    consumer = AsyncConsumer(
        {**config, "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
    )
    consumer.assign([(topic, 0)])
    out: list[bytes] = []
    async with consumer:
        async with asyncio.timeout(30):
            while len(out) < count:
                out += [r.value or b"" for r in await consumer.poll(200)]
    return out


async def test_mirroring_to_and_from_a_sasl_ssl_cluster(secured: SecuredBroker) -> None:
    b = secured_client(secured)
    with broker() as plain:
        a = {"bootstrap.servers": plain.bootstrap_servers}
        expected = [f"r{i}".encode() for i in range(COUNT)]
        async with AsyncProducer(a) as producer:
            for value in expected:
                await producer.send("to-b", value)
        async with AsyncProducer(b) as producer:
            for value in expected:
                await producer.send("to-a", value)
        flows = mm2_config.parse(mm2_properties(plain.bootstrap_servers, b))
        stop = asyncio.Event()
        task = asyncio.create_task(mm2.run(flows, stop))
        try:
            assert await values(b, "a.to-b", COUNT) == expected  # written over SASL_SSL
            assert await values(a, "b.to-a", COUNT) == expected  # read over SASL_SSL
        finally:
            stop.set()
            await task
        async with AsyncAdmin(b) as admin:  # the exactly-once flow's offsets, on b
            assert "mm2-offsets.a.internal" in await admin.list_topics()

        # A wrong password: the mirror stops with the broker's refusal.
        wrong = mm2_config.parse(
            mm2_properties(plain.bootstrap_servers, secured_client(secured, "x"))
        )
        with pytest.raises(ConnectionError, match="invalid credentials"):
            async with asyncio.timeout(30):
                await mm2.run(wrong, asyncio.Event())
