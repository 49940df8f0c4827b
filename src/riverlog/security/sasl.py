"""The broker's side of one connection's SASL exchange: a small pure state machine.

States: `handshake` (a SaslHandshake must come first) → `authenticating` (tokens of the
chosen mechanism, one per SaslAuthenticate or, after a v0 handshake, one per raw frame) →
`authenticated`, or `failed` (the connection is then closed by the caller). Re-authentication
(KIP-368) starts over from `handshake` on an authenticated connection; the principal may not
change, as Kafka requires.

Mechanisms: PLAIN (`authzid NUL user NUL password`, checked against the JAAS users in
constant time) and SCRAM-SHA-256/512 (scramp's RFC 5802 server over the stored credentials,
looked up per login). Every failure is `SaslFailure(error, message)` with Kafka's error and
message, never an exception escaping to the network layer.

Session lifetime: with `reauth_ms` > 0 (`connections.max.reauth.ms`), a login is valid until
`now_ms + reauth_ms`; `expired(now_ms)` says whether the connection must re-authenticate
before it may send anything else.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scramp import ScramException, ScramMechanism

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import ErrorCode
from riverlog.security.scram_credentials import ScramCredential

PLAIN = "PLAIN"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SUPPORTED = (PLAIN, *SCRAM_MECHANISMS)

CredentialLookup = Callable[[str, str], "ScramCredential | None"]
"""(user, mechanism) → the stored SCRAM credential, None when there is none."""


@dataclass(frozen=True)
class SaslFailure(Exception):
    error: ErrorCode
    message: str


def _invalid(mechanism: str) -> SaslFailure:
    return SaslFailure(
        error_codes.SASL_AUTHENTICATION_FAILED,
        f"Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}",
    )


class SaslServer:
    def __init__(
        self,
        enabled: Sequence[str],
        *,
        plain_users: Mapping[str, str],
        scram_lookup: CredentialLookup,
        reauth_ms: int = 0,
    ) -> None:
        self.enabled = list(enabled)
        self.plain_users = plain_users
        self.scram_lookup = scram_lookup
        self.reauth_ms = reauth_ms
        self.state = "handshake"
        self.mechanism: str | None = None
        self.principal: str | None = None
        """`User:<name>` once authenticated (kept while re-authenticating)."""
        self.raw_tokens = False
        """After a v0 handshake tokens come as raw length-prefixed frames."""
        self.expires_ms: int | None = None
        self._scram: object | None = None  # scramp's ScramServer (untyped library)
        self._user: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.state == "authenticated"

    def expired(self, now_ms: int) -> bool:
        return self.expires_ms is not None and now_ms >= self.expires_ms

    def handshake(self, mechanism: str, *, raw_tokens: bool) -> ErrorCode:
        """A SaslHandshake: NONE, UNSUPPORTED_SASL_MECHANISM or ILLEGAL_SASL_STATE."""
        if self.state not in ("handshake", "authenticated"):
            self.state = "failed"
            return error_codes.ILLEGAL_SASL_STATE
        if mechanism not in self.enabled:
            self.state = "failed"
            return error_codes.UNSUPPORTED_SASL_MECHANISM
        if self.state == "authenticated" and mechanism != self.mechanism:
            self.state = "failed"  # KIP-368: re-authenticate with the same mechanism
            return error_codes.ILLEGAL_SASL_STATE
        self.mechanism = mechanism
        self.raw_tokens = raw_tokens
        self.state = "authenticating"
        self._scram = None
        return error_codes.NONE

    def authenticate(self, token: bytes, now_ms: int) -> bytes:
        """One token from the client; the token to answer. Raises SaslFailure (the state is
        then `failed`)."""
        if self.state != "authenticating" or self.mechanism is None:
            self.state = "failed"
            raise SaslFailure(
                error_codes.ILLEGAL_SASL_STATE, "SaslAuthenticate before a successful SaslHandshake"
            )
        try:
            if self.mechanism == PLAIN:
                return self._plain(token, now_ms)
            return self._scram_step(token, now_ms)
        except SaslFailure:
            self.state = "failed"
            raise

    def _complete(self, user: str, now_ms: int) -> None:
        principal = f"User:{user}"
        if self.principal is not None and self.principal != principal:
            raise SaslFailure(
                error_codes.SASL_AUTHENTICATION_FAILED,
                "Cannot change principals during re-authentication from "
                f"{self.principal}: {principal}",
            )
        self.principal = principal
        self.state = "authenticated"
        self.expires_ms = now_ms + self.reauth_ms if self.reauth_ms > 0 else None

    def _plain(self, token: bytes, now_ms: int) -> bytes:
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise SaslFailure(
                error_codes.SASL_AUTHENTICATION_FAILED,
                "Invalid SASL/PLAIN response: expected 3 tokens",
            )
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise _invalid(PLAIN) from None
        if authzid and authzid != user:
            raise SaslFailure(
                error_codes.SASL_AUTHENTICATION_FAILED,
                "Authentication failed: Client requested an authorization id "
                "that is different from username",
            )
        expected = self.plain_users.get(user)
        if (
            not user
            or expected is None
            or not hmac.compare_digest(expected.encode(), password.encode())
        ):
            raise _invalid(PLAIN)
        self._complete(user, now_ms)
        return b""

    def _scram_step(self, token: bytes, now_ms: int) -> bytes:
        mechanism = self.mechanism
        assert mechanism is not None
        try:
            text = bytes(token).decode()
        except UnicodeDecodeError:
            raise _invalid(mechanism) from None
        try:
            if self._scram is None:
                return self._scram_first(mechanism, text)
            server = self._scram
            _accept_librdkafka_nonce(server, text)
            server.set_client_final(text)  # type: ignore[attr-defined]
            final = str(server.get_server_final())  # type: ignore[attr-defined]
        except ScramException:
            raise _invalid(mechanism) from None
        except (ValueError, KeyError, IndexError):  # malformed messages
            raise _invalid(mechanism) from None
        assert self._user is not None
        self._complete(self._user, now_ms)
        return final.encode()

    def _scram_first(self, mechanism: str, text: str) -> bytes:
        def credentials(user: str) -> tuple[bytes, bytes, bytes, int]:
            found = self.scram_lookup(_decode_saslname(user), mechanism)
            if found is None:
                raise ScramException("unknown user")
            self._user = _decode_saslname(user)
            return found.salt, found.stored_key, found.server_key, found.iterations

        server = ScramMechanism(mechanism).make_server(credentials)
        server.set_client_first(text)
        self._scram = server
        return str(server.get_server_first()).encode()


def _accept_librdkafka_nonce(server: Any, client_final: str) -> None:
    """librdkafka before 2.6.1 answers with the client nonce prepended once more to the
    server's nonce (librdkafka#4895); Kafka 3.8.1-3.9 accept that form (the nonce must end
    with the server's), and so does riverlog, which follows Kafka 3.9 — only that exact form,
    anything else is still refused. The proof is checked over the message as sent."""
    for part in client_final.split(","):
        if part.startswith("r="):
            nonce, expected = part[2:], str(server.nonce)
            client_nonce = expected[: len(expected) - len(str(server.s_nonce))]
            if nonce == client_nonce + expected:
                server.nonce = type(server.nonce)(nonce)  # scramp.core.Nonce
            return


def _decode_saslname(name: str) -> str:
    """RFC 5802 saslname: `=2C` is ',' and `=3D` is '='."""
    return name.replace("=2C", ",").replace("=3D", "=")
