"""TLS contexts from Kafka's `ssl.*` keys (PEM only), and principals from certificates.

Server side (`server_context`), per listener with `listener.name.<name>.ssl.*` overrides:
- key and certificate chain: `ssl.keystore.type=PEM` with `ssl.keystore.location` (one PEM file
  holding the key and the chain) or `ssl.keystore.certificate.chain` + `ssl.keystore.key`
  (PEM text in the config); `ssl.key.password` decrypts the key;
- trusted CAs: `ssl.truststore.type=PEM` with `ssl.truststore.location` or
  `ssl.truststore.certificates` (PEM text);
- `ssl.client.auth` none / requested / required; `ssl.enabled.protocols` (TLSv1.2, TLSv1.3);
  `ssl.cipher.suites` in Kafka's (IANA) names or OpenSSL's: exactly the suites listed are
  enabled, TLS 1.3's included (`tls_suites`), the broker preferring them in the order listed.
JKS and PKCS12 stores stop start-up: riverlog cannot read them (fail closed).

Client side (`client_context`): the same keys, plus librdkafka's `ssl.ca.location`,
`ssl.certificate.location`, `ssl.key.location`, `ssl.key.password`, and
`ssl.endpoint.identification.algorithm` (`https`, the default, checks the host name; empty
turns the check off).

Principals (`principal_from_subject`): the certificate subject as an RFC 2253 distinguished
name (most specific first, as Java's X500Principal prints it), mapped by
`ssl.principal.mapping.rules` (`RULE:pattern/replacement/[LU]`, ..., `DEFAULT`).
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from riverlog.security import tls_suites
from riverlog.security.errors import SecurityConfigError as ConfigError

_PROTOCOL_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


def _openssl_cipher(name: str) -> str:
    """Kafka's (IANA) name of a TLS 1.2 suite in OpenSSL's spelling."""
    if not name.startswith("TLS_"):
        return name  # already OpenSSL's
    body = name[4:]
    kx, sep, cipher = body.partition("_WITH_")
    if not sep:
        raise ConfigError(f"ssl.cipher.suites: {name} is not a cipher suite")
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    cipher = cipher.replace("_CBC_SHA", "_SHA").replace("_CBC", "")
    return f"{kx}_{cipher}".replace("_", "-")


def _apply_protocols(ctx: ssl.SSLContext, enabled: str | None, ciphers: str | None) -> None:
    """`ssl.enabled.protocols`, then `ssl.cipher.suites`: as in Kafka, the suites listed are
    the only ones enabled, TLS 1.3's included (`tls_suites`), in order of preference. A
    protocol left without a suite is not offered; none left stops start-up."""
    versions = list(_PROTOCOL_VERSIONS.values())
    if enabled:
        versions = []
        for item in (v.strip() for v in enabled.split(",") if v.strip()):
            if item not in _PROTOCOL_VERSIONS:
                raise ConfigError(f"ssl.enabled.protocols: {item} is not supported")
            versions.append(_PROTOCOL_VERSIONS[item])
    tls13 = ssl.TLSVersion.TLSv1_3
    if ciphers and ciphers.strip():
        listed = [c.strip() for c in ciphers.split(",") if c.strip()]
        tls13_names = [c for c in listed if tls_suites.is_tls13_suite(c)]
        older = [_openssl_cipher(c) for c in listed if not tls_suites.is_tls13_suite(c)]
        if older:
            try:
                ctx.set_ciphers(":".join(older))
            except ssl.SSLError:
                raise ConfigError(f"ssl.cipher.suites: none of {ciphers!r} is available") from None
        else:  # no TLS 1.2 suite listed: TLS 1.2 cannot be negotiated
            versions = [v for v in versions if v == tls13]
        if tls13 in versions:
            if tls13_names:
                tls_suites.set_tls13_suites(ctx, tls13_names)
            else:  # no TLS 1.3 suite listed: TLS 1.3 cannot be negotiated
                versions.remove(tls13)
        if not versions:
            raise ConfigError(
                f"ssl.cipher.suites: no suite of {ciphers!r} is usable with the protocols of "
                f"ssl.enabled.protocols ({enabled or 'TLSv1.2,TLSv1.3'})"
            )
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)


@contextlib.contextmanager
def _pem_file(text: str) -> Iterator[str]:
    """PEM text given inline, as a private temporary file (ssl loads chains from files)."""
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text.replace("\\n", "\n"))
        yield path
    finally:
        os.unlink(path)


def _check_type(props: Mapping[str, str], key: str) -> None:
    kind = (props.get(key) or "PEM").strip().upper()
    if kind != "PEM":
        raise ConfigError(f"{key}={kind}: riverlog reads PEM stores only (set {key}=PEM)")


def _load_key_and_chain(
    ctx: ssl.SSLContext,
    location: str | None,
    chain: str | None,
    key: str | None,
    password: str | None,
    prefix: str,
) -> None:
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
        elif chain and key:
            with _pem_file(chain) as chain_path, _pem_file(key) as key_path:
                ctx.load_cert_chain(chain_path, key_path, password=password)
        elif chain or key:
            raise ConfigError(
                f"{prefix}: ssl.keystore.certificate.chain and ssl.keystore.key "
                "must be set together"
            )
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"{prefix}: cannot load the key store: {e}") from None


def _load_trust(ctx: ssl.SSLContext, location: str | None, inline: str | None, prefix: str) -> bool:
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
            return True
        if inline:
            ctx.load_verify_locations(cadata=inline.replace("\\n", "\n"))
            return True
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"{prefix}: cannot load the trust store: {e}") from None
    return False


def listener_key(props: Mapping[str, str], listener: str, key: str) -> str | None:
    """`listener.name.<listener>.<key>` if set, else `key`, else None."""
    value = props.get(f"listener.name.{listener.lower()}.{key}")
    return value if value is not None else props.get(key)


def server_context(props: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The TLS context of `listener`; ConfigError when its settings cannot be honoured."""

    def get(key: str) -> str | None:
        return listener_key(props, listener, key)

    prefix = f"listener {listener}"
    for store_type in ("ssl.keystore.type", "ssl.truststore.type"):
        kind = get(store_type)
        if kind is not None:
            _check_type({store_type: kind}, store_type)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if not (location or (chain and key)):
        raise ConfigError(
            f"{prefix}: a TLS listener needs ssl.keystore.location or "
            "ssl.keystore.certificate.chain and ssl.keystore.key"
        )
    _load_key_and_chain(ctx, location, chain, key, get("ssl.key.password"), prefix)
    has_trust = _load_trust(
        ctx, get("ssl.truststore.location"), get("ssl.truststore.certificates"), prefix
    )
    auth = (get("ssl.client.auth") or "none").strip().lower()
    if auth not in _CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth: expected none, requested or required, got {auth!r}")
    if auth != "none" and not has_trust:
        raise ConfigError(f"{prefix}: ssl.client.auth={auth} needs a trust store")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    _apply_protocols(ctx, get("ssl.enabled.protocols"), get("ssl.cipher.suites"))
    return ctx


def client_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """A client's TLS context from Kafka's or librdkafka's keys."""
    for store_type in ("ssl.keystore.type", "ssl.truststore.type"):
        _check_type(props, store_type)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    trusted = _load_trust(
        ctx,
        props.get("ssl.truststore.location") or props.get("ssl.ca.location"),
        props.get("ssl.truststore.certificates"),
        "client",
    )
    if not trusted:
        ctx.load_default_certs()
    location = props.get("ssl.keystore.location")
    chain = props.get("ssl.keystore.certificate.chain")
    key = props.get("ssl.keystore.key")
    password = props.get("ssl.key.password")
    if props.get("ssl.certificate.location") and props.get("ssl.key.location"):
        try:
            ctx.load_cert_chain(
                props["ssl.certificate.location"], props["ssl.key.location"], password=password
            )
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"client: cannot load the certificate: {e}") from None
    else:
        _load_key_and_chain(ctx, location, chain, key, password, "client")
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    ctx.check_hostname = algorithm == "https"
    _apply_protocols(ctx, props.get("ssl.enabled.protocols"), props.get("ssl.cipher.suites"))
    return ctx


# --- principals from certificates -------------------------------------------------------

_ATTRIBUTE_NAMES = {
    "commonName": "CN",
    "organizationalUnitName": "OU",
    "organizationName": "O",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def subject_dn(cert: Mapping[str, Any]) -> str:
    """The subject of a peer certificate (`SSLObject.getpeercert()`) in RFC 2253 form."""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        parts = []
        for name, value in rdn:
            label = _ATTRIBUTE_NAMES.get(name, name)
            escaped = re.sub(r'([,+"\\<>;])', r"\\\1", str(value))
            parts.append(f"{label}={escaped}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str


_RULE = re.compile(r"RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)")


def parse_mapping_rules(text: str | None) -> list[_Rule]:
    """`ssl.principal.mapping.rules`; ConfigError for a malformed list."""
    rules: list[_Rule] = []
    rest = (text or "DEFAULT").strip()
    while rest:
        if rest.startswith("DEFAULT"):
            rules.append(_Rule(None, "", ""))
            rest = rest[len("DEFAULT") :]
        else:
            match = _RULE.match(rest)
            if match is None:
                raise ConfigError(f"ssl.principal.mapping.rules: invalid rule at {rest!r}")
            pattern = match.group(1).replace("\\/", "/")
            replacement = re.sub(r"\$(\d)", r"\\\1", match.group(2).replace("\\/", "/"))
            try:
                rules.append(_Rule(re.compile(pattern), replacement, match.group(3)))
            except re.error as e:
                raise ConfigError(f"ssl.principal.mapping.rules: {e}") from None
            rest = rest[match.end() :]
        rest = rest.lstrip()
        if rest.startswith(","):
            rest = rest[1:].lstrip()
        elif rest:
            raise ConfigError(f"ssl.principal.mapping.rules: expected ',' at {rest!r}")
    return rules


def principal_name(dn: str, rules: list[_Rule]) -> str:
    """The user name a distinguished name maps to (the DN itself when no rule matches)."""
    for rule in rules:
        if rule.pattern is None:
            return dn
        if rule.pattern.fullmatch(dn):
            name = rule.pattern.sub(rule.replacement, dn)
            return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
    return dn
