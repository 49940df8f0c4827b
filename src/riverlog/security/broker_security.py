"""The broker's security settings, validated at start-up, and what each part needs of them.

From the broker's properties (Kafka's names):
- listeners and protocols (`security.listeners`);
- per TLS listener, its server context (`security.tls.server_context`) and the principal
  mapping (`ssl.principal.mapping.rules`);
- per SASL listener, `sasl.enabled.mechanisms` (Kafka's default is GSSAPI, which riverlog
  does not offer: such a listener stops start-up), PLAIN users from
  `listener.name.<l>.plain.sasl.jaas.config` and `connections.max.reauth.ms`;
- the inter-broker client: the inter-broker listener's protocol, a client TLS context from
  that listener's key and trust stores, `sasl.mechanism.inter.broker.protocol` and the
  broker's own login (`username`/`password` of the listener's JAAS entry for that mechanism).

Any setting that cannot be honoured raises ConfigError (fail closed).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from riverlog.client.security import ClientSecurity
from riverlog.metadata.store import MetadataStore
from riverlog.security import jaas, scram_credentials, tls
from riverlog.security.errors import SecurityConfigError
from riverlog.security.listeners import Listeners, ListenerSpec
from riverlog.security.sasl import SUPPORTED, SaslServer
from riverlog.server.config import BrokerConfig, ConfigError


def raw_properties(config: BrokerConfig) -> dict[str, str]:
    """Every property as given (known and unknown keys), for the security settings, many of
    which are per-listener (`listener.name.<l>.*`) and so not in the broker's fixed table."""
    return {**config.unknown, **config.given}


@dataclass
class ListenerSecurity:
    spec: ListenerSpec
    ssl_context: ssl.SSLContext | None = None
    mechanisms: list[str] = field(default_factory=list)
    plain_users: dict[str, str] = field(default_factory=dict)
    principal_of_certificate: Callable[[dict[str, object]], str] | None = None


class BrokerSecurity:
    def __init__(self, props: Mapping[str, str]) -> None:
        try:
            self.listeners = Listeners.from_properties(props)
            self.reauth_ms = int(props.get("connections.max.reauth.ms", "0"))
            self.per_listener = {s.name: self._listener(props, s) for s in self.listeners.bound}
            self.inter_broker = self._inter_broker(props)
        except (SecurityConfigError, ValueError) as e:
            raise ConfigError(str(e)) from None
        self.store: MetadataStore | None = None
        """Where SCRAM credentials are read; set by the broker once its store is open."""

    def _listener(self, props: Mapping[str, str], spec: ListenerSpec) -> ListenerSecurity:
        found = ListenerSecurity(spec)
        if spec.uses_tls:
            found.ssl_context = tls.server_context(props, spec.name)
            rules = tls.parse_mapping_rules(
                tls.listener_key(props, spec.name, "ssl.principal.mapping.rules")
            )

            def principal(cert: dict[str, object]) -> str:
                return f"User:{tls.principal_name(tls.subject_dn(cert), rules)}"

            found.principal_of_certificate = principal
        if spec.uses_sasl:
            text = tls.listener_key(props, spec.name, "sasl.enabled.mechanisms") or "GSSAPI"
            mechanisms = [m.strip().upper() for m in text.split(",") if m.strip()]
            for mechanism in mechanisms:
                if mechanism not in SUPPORTED:
                    raise ConfigError(
                        f"listener {spec.name}: SASL mechanism {mechanism} is not supported "
                        f"(sasl.enabled.mechanisms; riverlog offers {', '.join(SUPPORTED)})"
                    )
            found.mechanisms = mechanisms
            if "PLAIN" in mechanisms:
                entry = self._jaas(props, spec.name, "PLAIN")
                if entry is None:
                    raise ConfigError(
                        f"listener {spec.name}: PLAIN needs "
                        f"listener.name.{spec.name.lower()}.plain.sasl.jaas.config"
                    )
                found.plain_users = jaas.module(entry, jaas.PLAIN_MODULE).users()
        return found

    @staticmethod
    def _jaas(props: Mapping[str, str], listener: str, mechanism: str) -> str | None:
        return props.get(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")

    def _inter_broker(self, props: Mapping[str, str]) -> ClientSecurity:
        spec = self.listeners.spec(self.listeners.inter_broker)
        context = None
        if spec.uses_tls:
            keys = {
                k: v
                for k in _CLIENT_SSL_KEYS
                if (v := tls.listener_key(props, spec.name, k)) is not None
            }
            check = props.get("ssl.endpoint.identification.algorithm", "https")
            keys.setdefault("ssl.endpoint.identification.algorithm", check)
            context = tls.client_context(keys)
        if not spec.uses_sasl:
            return ClientSecurity(spec.protocol, context)
        mechanism = props.get("sasl.mechanism.inter.broker.protocol", "GSSAPI").strip().upper()
        if mechanism not in self.per_listener[spec.name].mechanisms:
            raise ConfigError(
                f"sasl.mechanism.inter.broker.protocol={mechanism} is not enabled "
                f"on the inter-broker listener {spec.name}"
            )
        entry = self._jaas(props, spec.name, mechanism)
        module = jaas.PLAIN_MODULE if mechanism == "PLAIN" else jaas.SCRAM_MODULE
        options = jaas.module(entry, module).options if entry else {}
        username, password = options.get("username"), options.get("password")
        if username is None or password is None:
            raise ConfigError(
                f"the inter-broker login needs username and password in "
                f"listener.name.{spec.name.lower()}.{mechanism.lower()}"
                ".sasl.jaas.config"
            )
        return ClientSecurity(spec.protocol, context, mechanism, username, password)

    def new_sasl(self, listener: str) -> Callable[[], SaslServer] | None:
        """A factory of the SASL exchanges of `listener`'s connections (None without SASL)."""
        found = self.per_listener[listener]
        if not found.spec.uses_sasl:
            return None

        def lookup(user: str, mechanism: str) -> scram_credentials.ScramCredential | None:
            assert self.store is not None
            return scram_credentials.lookup(self.store, user, mechanism)

        mechanisms, users, reauth_ms = found.mechanisms, found.plain_users, self.reauth_ms
        return lambda: SaslServer(
            mechanisms, plain_users=users, scram_lookup=lookup, reauth_ms=reauth_ms
        )


_CLIENT_SSL_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
)
