"""Refusals: each refused cleanly — the right error, one log line, the connection closed —
while the broker keeps serving everyone else (issue 23)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer as CKProducer

from riverlog.client.connection import Connection
from riverlog.client.security import AuthenticationError, ClientSecurity
from riverlog.protocol.framing import encode_request
from riverlog.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from tests.security.conftest import SecuredBroker, start_secured

pytestmark = pytest.mark.timeout(60)


def _sasl(
    secured: SecuredBroker, listener: str, mechanism: str, user: str, password: str
) -> ClientSecurity:
    context = None
    if listener == "SASL_SSL":
        context = ssl.create_default_context(cafile=str(secured.certs.ca))
    return ClientSecurity(listener, context, mechanism, user, password)


async def _still_serves(secured: SecuredBroker) -> None:
    """A good SCRAM client over SASL_SSL gets metadata."""
    security = _sasl(secured, "SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret")
    conn = await Connection.open("127.0.0.1", secured.ports["SASL_SSL"], security=security)
    try:
        response = await conn.send(MetadataRequest(topics=None), timeout_s=10)
        assert isinstance(response, MetadataResponse) and response.brokers
        assert response.brokers[0].port == secured.ports["SASL_SSL"]  # the listener we came in on
    finally:
        await conn.close()


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and text in r.getMessage()
    ]


@pytest.mark.parametrize(
    ("listener", "mechanism", "user", "password"),
    [
        ("SASL_PLAINTEXT", "PLAIN", "alice", "wrong"),
        ("SASL_PLAINTEXT", "PLAIN", "mallory", "alice-secret"),
        ("SASL_SSL", "SCRAM-SHA-256", "bob", "wrong"),
        ("SASL_SSL", "SCRAM-SHA-512", "mallory", "bob-secret"),
    ],
    ids=[
        "plain-wrong-password",
        "plain-unknown-user",
        "scram-wrong-password",
        "scram-unknown-user",
    ],
)
async def test_bad_logins_are_refused(
    secured: SecuredBroker,
    caplog: pytest.LogCaptureFixture,
    listener: str,
    mechanism: str,
    user: str,
    password: str,
) -> None:
    caplog.set_level(logging.WARNING)
    security = _sasl(secured, listener, mechanism, user, password)
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        await Connection.open("127.0.0.1", secured.ports[listener], security=security)
    assert len(_warnings(caplog, "authentication failed")) == 1
    await _still_serves(secured)


async def test_garbage_sasl_tokens_and_requests_before_login_close_the_connection(
    secured: SecuredBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    port = secured.ports["SASL_PLAINTEXT"]
    conn = await Connection.open("127.0.0.1", port)  # no login: ApiVersions is allowed
    with pytest.raises(ConnectionError):
        await conn.send(MetadataRequest(topics=None), timeout_s=10)
    assert _warnings(caplog, "before SASL authentication completed")

    conn = await Connection.open(
        "127.0.0.1",
        secured.ports["SASL_SSL"],
        security=ClientSecurity("SSL", ssl.create_default_context(cafile=str(secured.certs.ca))),
    )
    await conn.send(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1)
    answer = await conn.send(SaslAuthenticateRequest(auth_bytes=b"\xff\x00garbage"), timeout_s=10)
    assert isinstance(answer, SaslAuthenticateResponse)
    assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
    await asyncio.wait_for(conn._protocol.lost, 10)  # closed after the answer

    # v0 handshake, then raw garbage where a token belongs
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 0, 1, "raw"))
        size = int.from_bytes(_read(raw, 4), "big")
        _read(raw, size)
        raw.sendall(len(b"garbage").to_bytes(4, "big") + b"garbage")
        assert raw.recv(100) == b""  # closed
    await _still_serves(secured)


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


async def test_plaintext_on_a_tls_port_and_tls_on_a_plaintext_port(
    secured: SecuredBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=10) as raw:
        raw.sendall(encode_request(ApiVersionsRequest(), 0, 1, "plain"))
        with contextlib.suppress(ConnectionResetError):  # closed, perhaps after an alert
            assert raw.recv(100) in (b"", b"\x15\x03\x03\x00\x02\x02\x32")
    context = ssl.create_default_context(cafile=str(secured.certs.ca))
    plaintext = ("127.0.0.1", secured.ports["PLAINTEXT"])
    with (
        socket.create_connection(plaintext, timeout=10) as raw,
        pytest.raises((ssl.SSLError, ConnectionError, OSError)),
    ):
        context.wrap_socket(raw, server_hostname="127.0.0.1")
    # one line each: the TLS port's for the plaintext bytes, the plaintext port's for TLS
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(_warnings(caplog, "closing")) < 2:
        await asyncio.sleep(0.05)
    assert len(_warnings(caplog, "TLS handshake failed")) == 1
    assert len(_warnings(caplog, "closing")) == 2
    await _still_serves(secured)
    conn = await Connection.open("127.0.0.1", secured.ports["PLAINTEXT"])
    await conn.close()


async def test_expired_sessions_are_closed_and_clients_reauthenticate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    secured = start_secured(tmp_path, **{"connections.max.reauth.ms": "600"})
    try:
        security = _sasl(secured, "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
        port = secured.ports["SASL_PLAINTEXT"]
        # riverlog's client logs in again before its session ends and keeps working
        keeps = await Connection.open("127.0.0.1", port, security=security)
        # a client that never re-authenticates (its lifetime ignored) is closed on its
        # first request after the session expired
        lapses = await Connection.open("127.0.0.1", port, security=security)
        lapses._reauth_at = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not lapses.closed:
            try:
                await lapses.send(MetadataRequest(topics=None), timeout_s=5)
                await keeps.send(MetadataRequest(topics=None), timeout_s=5)
            except ConnectionError:
                break
            await asyncio.sleep(0.1)
        assert lapses.closed
        assert _warnings(caplog, "SASL session expired")
        response = await keeps.send(MetadataRequest(topics=None), timeout_s=5)
        assert isinstance(response, MetadataResponse)
        await keeps.close()
        await lapses.close()
        # librdkafka re-authenticates too (KIP-368): a producer outliving several sessions
        # sees no error
        caplog.clear()
        producer = CKProducer(
            {
                "bootstrap.servers": secured.address("SASL_SSL"),
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(secured.certs.ca),
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "bob",
                "sasl.password": "bob-secret",
            }
        )
        errors: list[object] = []
        until = time.monotonic() + 2.5
        while time.monotonic() < until:
            producer.produce("reauth", b"x", on_delivery=lambda e, _: e and errors.append(e))
            producer.poll(0.05)
        assert producer.flush(10) == 0
        assert errors == [] and not _warnings(caplog, "SASL session expired")
    finally:
        secured.embedded.stop()
