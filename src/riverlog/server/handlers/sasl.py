"""SaslHandshake (v0, v1) and SaslAuthenticate (v0-v2): the connection's SASL exchange.

The exchange itself is `security.sasl.SaslServer` (pure); these handlers feed it the
client's messages and answer with Kafka's errors. A v0 handshake switches the connection to
raw tokens (network.py); v1 expects SaslAuthenticate requests. A failed login is answered
with SASL_AUTHENTICATION_FAILED (or ILLEGAL_SASL_STATE), logged once, and the connection
closed after the answer. On listeners without SASL both APIs answer ILLEGAL_SASL_STATE.
`session_lifetime_ms` (v1+) tells the client when to re-authenticate (KIP-368).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from riverlog.protocol import error_codes
from riverlog.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from riverlog.security.sasl import SaslFailure
from riverlog.server.dispatch import RequestContext

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

log = logging.getLogger(__name__)


def handle_sasl_handshake(broker: Broker, ctx: RequestContext) -> SaslHandshakeResponse:
    request = ctx.request.body
    assert isinstance(request, SaslHandshakeRequest)
    conn = ctx.connection
    sasl = conn.sasl if conn is not None else None
    if conn is None or sasl is None:
        return SaslHandshakeResponse(error_code=error_codes.ILLEGAL_SASL_STATE.code, mechanisms=[])
    error = sasl.handshake(request.mechanism, raw_tokens=ctx.version == 0)
    if error is not error_codes.NONE:
        log.warning(
            "closing %s (listener %s): SASL handshake for %r: %s",
            conn.peer,
            conn.listener,
            request.mechanism,
            error.name,
        )
        conn.close_after_answers()
    return SaslHandshakeResponse(error_code=error.code, mechanisms=list(sasl.enabled))


def handle_sasl_authenticate(broker: Broker, ctx: RequestContext) -> SaslAuthenticateResponse:
    request = ctx.request.body
    assert isinstance(request, SaslAuthenticateRequest)
    conn = ctx.connection
    sasl = conn.sasl if conn is not None else None
    if conn is None or sasl is None:
        return SaslAuthenticateResponse(
            error_code=error_codes.ILLEGAL_SASL_STATE.code,
            error_message="SASL is not enabled on this listener",
        )
    now_ms = int(time.time() * 1000)
    try:
        token = sasl.authenticate(request.auth_bytes, now_ms)
    except SaslFailure as e:
        log.warning(
            "closing %s (listener %s): SASL %s authentication failed: %s",
            conn.peer,
            conn.listener,
            sasl.mechanism,
            e.message,
        )
        conn.close_after_answers()
        return SaslAuthenticateResponse(error_code=e.error.code, error_message=e.message)
    lifetime = 0
    if sasl.authenticated:
        assert sasl.principal is not None
        conn.principal = sasl.principal
        if sasl.expires_ms is not None:
            lifetime = max(1, sasl.expires_ms - now_ms)
    return SaslAuthenticateResponse(
        error_code=0, error_message=None, auth_bytes=token, session_lifetime_ms=lifetime
    )
