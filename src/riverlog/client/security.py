"""A client's security settings with Kafka's (and librdkafka's) names, and its SASL login.

    security.protocol      PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    ssl.*                  see riverlog.security.tls.client_context (ssl.ca.location too)
    sasl.mechanism         PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    sasl.username, sasl.password   or   sasl.jaas.config (username="..." password="...")

`authenticate` runs SaslHandshake v1 then SaslAuthenticate rounds on a fresh connection
(PLAIN: one token; SCRAM: scramp's RFC 5802 client, two rounds, the server's signature
checked); a refusal raises `AuthenticationError` with the broker's message. It returns the
session lifetime the broker gave (KIP-368), 0 for none.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scramp import ScramClient, ScramException

from riverlog.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from riverlog.security import jaas
from riverlog.security.errors import SecurityConfigError
from riverlog.security.tls import client_context

if TYPE_CHECKING:
    from riverlog.client.connection import Connection

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KEYS_PREFIXES = ("security.protocol", "ssl.", "sasl.")


class AuthenticationError(ConnectionError):
    """The broker refused the login (a ConnectionError: the connection is closed)."""


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_config(cls, props: Mapping[str, str]) -> ClientSecurity:
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol: unknown protocol {protocol!r}")
        context = client_context(props) if protocol in ("SSL", "SASL_SSL") else None
        if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return cls(protocol, context)
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in MECHANISMS:
            raise SecurityConfigError(
                f"sasl.mechanism: {mechanism} is not supported (one of {', '.join(MECHANISMS)})"
            )
        username, password = props.get("sasl.username"), props.get("sasl.password")
        if (username is None or password is None) and props.get("sasl.jaas.config"):
            options = jaas.parse(props["sasl.jaas.config"])[0].options
            username, password = options.get("username"), options.get("password")
        if username is None or password is None:
            raise SecurityConfigError(
                "SASL needs sasl.username and sasl.password (or sasl.jaas.config)"
            )
        return cls(protocol, context, mechanism, username, password)

    @property
    def uses_sasl(self) -> bool:
        return self.mechanism is not None


PLAINTEXT_SECURITY = ClientSecurity()


def is_security_key(key: str) -> bool:
    """Whether a client config key is a security setting (`security.protocol`, `ssl.*`,
    `sasl.*`)."""
    return key.startswith(KEYS_PREFIXES)


async def authenticate(conn: Connection, security: ClientSecurity) -> int:
    """Log in on `conn`; the session lifetime in ms (0: none). AuthenticationError if refused."""
    mechanism, username, password = security.mechanism, security.username, security.password
    assert mechanism is not None and username is not None and password is not None
    handshake = await conn.send(SaslHandshakeRequest(mechanism=mechanism), 1)
    assert isinstance(handshake, SaslHandshakeResponse)
    if handshake.error_code != 0:
        raise AuthenticationError(
            f"SASL mechanism {mechanism} refused by the broker (error "
            f"{handshake.error_code}; enabled: {handshake.mechanisms})"
        )
    if mechanism == "PLAIN":
        response = await _step(conn, f"\0{username}\0{password}".encode())
        return int(response.session_lifetime_ms)
    client = ScramClient([mechanism], username, password)
    first = await _step(conn, client.get_client_first().encode())
    try:
        client.set_server_first(first.auth_bytes.decode())
        final = await _step(conn, client.get_client_final().encode())
        client.set_server_final(final.auth_bytes.decode())
    except (ScramException, UnicodeDecodeError) as e:
        raise AuthenticationError(f"SCRAM exchange failed: {e}") from None
    return int(final.session_lifetime_ms)


async def _step(conn: Connection, token: bytes) -> SaslAuthenticateResponse:
    response = await conn.send(SaslAuthenticateRequest(auth_bytes=token))
    assert isinstance(response, SaslAuthenticateResponse)
    if response.error_code != 0:
        raise AuthenticationError(response.error_message or f"SASL error {response.error_code}")
    return response
