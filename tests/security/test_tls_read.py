"""The broker's TLS read loop both ways: the compiled drain (`server/_tls_drain.c` through
`server/tls_read.py`) and asyncio's own per-record loop (the pure-Python path). In memory the
drain must hand out exactly what OpenSSL's reads do; end to end, librdkafka (~2 KiB TLS
records) produces to a TLS listener and every record comes back, whichever loop read it."""

from __future__ import annotations

import contextlib
import ssl
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from riverlog.security.dev_certs import DevCerts, write_dev_certs
from riverlog.server import tls_read
from tests.security.conftest import SecuredBroker

COMPILED = tls_read.available()


def _pair(certs: DevCerts) -> tuple[ssl.SSLObject, ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    """A handshaken client and server in memory: (client, server, client out, server in)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(certs.broker))
    client_ctx = ssl.create_default_context(cafile=str(certs.ca))
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return client, server, c_out, s_in


@pytest.mark.skipif(not COMPILED, reason="no compiled TLS drain here")
def test_the_drain_hands_out_what_openssl_reads(tmp_path: Path) -> None:
    drain = tls_read._drain_module().drain
    client, server, wire, incoming = _pair(write_dev_certs(tmp_path))
    sent = b"".join(i.to_bytes(4, "big") * 500 for i in range(300))  # 300 records of 2,000 B
    for offset in range(0, len(sent), 2000):
        client.write(sent[offset : offset + 2000])
    incoming.write(wire.read())
    received = bytearray()
    buffer = bytearray(256 * 1024 + 123)  # not a multiple of a record: a record spans calls
    while True:
        count, status = drain(server._sslobj, memoryview(buffer))
        received += buffer[:count]
        if status != 0:
            break
    assert status == 1  # wants more input
    assert bytes(received) == sent
    with pytest.raises(ssl.SSLWantReadError):  # OpenSSL agrees: nothing left
        server.read(1)
    with contextlib.suppress(ssl.SSLWantReadError):  # close_notify written, no reply awaited
        client.unwrap()
    incoming.write(wire.read())
    count, status = drain(server._sslobj, memoryview(buffer))
    assert (count, status) == (0, 2)  # close_notify


@pytest.mark.parametrize("compiled", [True, False], ids=["drain", "asyncio-loop"])
def test_librdkafka_records_arrive_whole_either_way(
    secured: SecuredBroker, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if compiled and not COMPILED:
        pytest.skip("no compiled TLS drain here")
    monkeypatch.setattr(tls_read, "ENABLED", compiled)
    conf = {
        "bootstrap.servers": secured.address("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(secured.certs.ca),
    }
    topic = f"tls-read-{uuid.uuid4().hex[:8]}"
    values = [i.to_bytes(4, "big") * 256 for i in range(3000)]  # 1 KiB each, ~3 MB
    producer = Producer({**conf, "linger.ms": 20, "batch.size": 1 << 20, "acks": 1})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(60) == 0
    broker = secured.embedded.broker
    assert broker is not None
    ssl_network = next(n for n in broker.networks if n.listener_name == "SSL")
    drained = [
        "_do_read__buffered" in vars(c.transport._ssl_protocol)  # type: ignore[union-attr]
        for c in ssl_network.connections
        if c.transport is not None
    ]
    assert drained and any(drained) == compiled
    consumer = Consumer(
        {**conf, "group.id": topic, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        while len(got) < len(values):
            message = consumer.poll(30)
            assert message is not None, f"only {len(got)} of {len(values)} records came back"
            assert message.error() is None, message.error()
            got.append(bytes(message.value()))
    finally:
        consumer.close()
    assert got == values


@pytest.mark.skipif(not COMPILED, reason="no compiled TLS drain here")
def test_a_broken_record_is_left_to_pythons_read_to_raise(tmp_path: Path) -> None:
    drain = tls_read._drain_module().drain
    client, server, wire, incoming = _pair(write_dev_certs(tmp_path))
    client.write(b"fine")
    record = bytearray(wire.read())
    record[-1] ^= 0xFF  # the tag no longer matches
    incoming.write(bytes(record))
    assert drain(server._sslobj, memoryview(bytearray(1024))) == (0, 3)
    with pytest.raises(ssl.SSLError):  # what asyncio's own read, called next, raises
        server.read(1024)
