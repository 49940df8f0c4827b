"""`ssl.cipher.suites` as Kafka means it: exactly the suites listed, TLS 1.3's included, in
the broker's order of preference; settings that cannot be honoured stop start-up. Real
handshakes between the broker's and the client's contexts, in memory (MemoryBIO)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from riverlog.security import tls, tls_suites
from riverlog.security.dev_certs import DevCerts, write_dev_certs
from riverlog.security.errors import SecurityConfigError

CHACHA = "TLS_CHACHA20_POLY1305_SHA256"
AES128 = "TLS_AES_128_GCM_SHA256"
AES256 = "TLS_AES_256_GCM_SHA384"
ECDHE_AES128 = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"  # trustme keys are ECDSA


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    return write_dev_certs(Path(tmp_path_factory.mktemp("suites")) / "certs")


def _server(certs: DevCerts, **props: str) -> ssl.SSLContext:
    return tls.server_context({"ssl.keystore.location": str(certs.broker), **props}, "SSL")


def _client(certs: DevCerts, **props: str) -> ssl.SSLContext:
    return tls.client_context({"ssl.ca.location": str(certs.ca), **props})


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> tuple[str, str]:
    """(suite, protocol) the two contexts agree on; ssl.SSLError when they cannot."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    near = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    far = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        done = 0
        for side in (near, far):
            try:
                side.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if done == 2:
            break
    cipher = far.cipher()
    assert cipher is not None
    return cipher[0], cipher[1]


def test_the_order_listed_is_the_brokers_preference(certs: DevCerts) -> None:
    client = _client(certs)  # offers OpenSSL's defaults: AES-256-GCM first
    assert _handshake(_server(certs), client) == (AES256, "TLSv1.3")
    server = _server(certs, **{"ssl.cipher.suites": f"{CHACHA},{AES256}"})
    assert tls_suites.tls13_suites(server) == [CHACHA, AES256]
    assert _handshake(server, client) == (CHACHA, "TLSv1.3")
    per_listener = _server(certs, **{"listener.name.ssl.ssl.cipher.suites": AES128})
    assert _handshake(per_listener, client) == (AES128, "TLSv1.3")


def test_only_the_suites_listed_are_negotiated(certs: DevCerts) -> None:
    server = _server(certs, **{"ssl.cipher.suites": AES128})
    with pytest.raises(ssl.SSLError):  # the client offers only a suite the broker left out
        _handshake(server, _client(certs, **{"ssl.cipher.suites": CHACHA}))
    assert _handshake(server, _client(certs, **{"ssl.cipher.suites": f"{CHACHA},{AES128}"})) == (
        AES128,
        "TLSv1.3",
    )
    tls12_only = _server(certs, **{"ssl.cipher.suites": ECDHE_AES128})
    assert _handshake(tls12_only, _client(certs)) == ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2")
    with pytest.raises(ssl.SSLError):  # no TLS 1.2 suite listed: TLS 1.2 is not offered
        _handshake(
            _server(certs, **{"ssl.cipher.suites": AES128}),
            _client(certs, **{"ssl.enabled.protocols": "TLSv1.2"}),
        )


def test_suites_that_cannot_be_honoured_stop_start_up(
    certs: DevCerts, monkeypatch: pytest.MonkeyPatch
) -> None:
    for props in (
        {"ssl.cipher.suites": "TLS_NO_SUCH_SUITE"},
        {"ssl.cipher.suites": ECDHE_AES128, "ssl.enabled.protocols": "TLSv1.3"},
        {"ssl.cipher.suites": AES128, "ssl.enabled.protocols": "TLSv1.2"},
    ):
        with pytest.raises(SecurityConfigError):
            _server(certs, **props)
    # Where OpenSSL's TLS 1.3 call cannot be reached, a TLS 1.3 list is refused, not widened.
    monkeypatch.setattr(tls_suites, "_libssl", lambda: "unreachable here")
    with pytest.raises(SecurityConfigError, match="unreachable here"):
        _server(certs, **{"ssl.cipher.suites": CHACHA})
    with pytest.raises(SecurityConfigError):
        _client(certs, **{"ssl.cipher.suites": f"{AES128},{ECDHE_AES128}"})
    # What needs no reaching still works: TLS 1.2 suites only (TLS 1.3 switched off).
    assert _server(certs, **{"ssl.cipher.suites": ECDHE_AES128, "ssl.enabled.protocols": "TLSv1.2"})
