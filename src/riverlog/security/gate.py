"""Which requests a SASL connection may send, and raw (v0) SASL tokens.

Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate pass; after it,
everything, until the session expires (`connections.max.reauth.ms`, KIP-368): from then on
only a re-authentication passes, anything else closes the connection, as Kafka does.
"""

from __future__ import annotations

from riverlog.protocol.messages import (
    ApiVersionsRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from riverlog.security.sasl import SaslFailure, SaslServer

_BEFORE_LOGIN = frozenset(
    (ApiVersionsRequest.API_KEY, SaslHandshakeRequest.API_KEY, SaslAuthenticateRequest.API_KEY)
)


def admit(sasl: SaslServer, api_key: int, now_ms: int) -> str | None:
    """None when the request may be handled, else why the connection is closed."""
    if api_key in _BEFORE_LOGIN:
        return None
    if sasl.state != "authenticated":
        return f"request (API key {api_key}) before SASL authentication completed"
    if sasl.expired(now_ms):
        return (
            "SASL session expired (connections.max.reauth.ms); the client did not re-authenticate"
        )
    return None


def raw_token(sasl: SaslServer, token: bytes, now_ms: int) -> bytes | None:
    """The answer to a raw token after a v0 handshake; None when authentication failed."""
    try:
        return sasl.authenticate(token, now_ms)
    except SaslFailure:
        return None
