"""Listeners with Kafka's names: `listeners`, `advertised.listeners`,
`listener.security.protocol.map`, `inter.broker.listener.name` / `security.inter.broker.protocol`.

A listener is `NAME://host:port`; its security protocol comes from the map (default: each of
the four protocol names maps to itself, as Kafka's default). Invariants checked at start-up
(fail closed, Kafka's messages): every listener name is in the map, no name or port is used
twice, advertised listeners name configured listeners, and the inter-broker listener exists.
Only one of `inter.broker.listener.name` and `security.inter.broker.protocol` may be set.

Per-listener settings (`listener.name.<name lower-case>.<key>`) are looked up by
`security.tls.listener_key`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from riverlog.server.config import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str
    host: str
    port: int
    protocol: str

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_protocol_map(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in _split(text):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ConfigError(f"listener.security.protocol.map: bad entry {item!r}")
        if protocol not in PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: unknown protocol {protocol!r}")
        if name in result:
            raise ConfigError(f"listener.security.protocol.map: {name} appears twice")
        result[name] = protocol
    return result


def _parse(text: str, protocols: Mapping[str, str], key: str) -> list[ListenerSpec]:
    specs: list[ListenerSpec] = []
    for item in _split(text):
        name, sep, rest = item.partition("://")
        if not sep:  # riverlog's `--listen host:port` shorthand
            name, rest = "PLAINTEXT", item
        name = name.upper()
        host, colon, port = rest.rpartition(":")
        if not colon or not port.isdigit():
            raise ConfigError(f"{key}: listener {item!r} has no valid port")
        if name not in protocols:
            raise ConfigError(
                f"{key}: no security protocol defined for listener {name} "
                "(listener.security.protocol.map)"
            )
        specs.append(ListenerSpec(name, host.strip("[]"), int(port), protocols[name]))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{key}: each listener must have a different name, got {text!r}")
    return specs


@dataclass(frozen=True)
class Listeners:
    """The broker's listeners, what it advertises for each, and the inter-broker one."""

    bound: tuple[ListenerSpec, ...]
    advertised: tuple[ListenerSpec, ...]
    inter_broker: str
    protocols: Mapping[str, str]

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> Listeners:
        protocols = parse_protocol_map(
            props.get("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP)
        )
        bound = _parse(props.get("listeners", DEFAULT_LISTENERS), protocols, "listeners")
        if not bound:
            raise ConfigError("listeners: at least one listener is required")
        ports = [s.port for s in bound if s.port]
        if len(set(ports)) != len(ports):
            raise ConfigError("listeners: each listener must have a different port")
        advertised_text = props.get("advertised.listeners", "")
        advertised = _parse(advertised_text, protocols, "advertised.listeners")
        names = {s.name for s in bound}
        for spec in advertised:
            if spec.name not in names:
                raise ConfigError(f"advertised.listeners: {spec.name} is not one of the listeners")
        by_name = {s.name: s for s in advertised}
        merged = tuple(by_name.get(s.name, s) for s in bound)
        inter_name = props.get("inter.broker.listener.name", "").strip().upper()
        inter_protocol = props.get("security.inter.broker.protocol", "").strip().upper()
        if inter_name and inter_protocol:
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol "
                "should be set."
            )
        if not inter_name:
            inter_name = inter_protocol or "PLAINTEXT"
            if inter_protocol and inter_protocol not in PROTOCOLS:
                raise ConfigError(f"security.inter.broker.protocol: unknown {inter_protocol!r}")
            if inter_name not in names and len(bound) == 1 and not inter_protocol:
                inter_name = bound[0].name  # one listener: it carries inter-broker traffic
        if inter_name not in names:
            raise ConfigError(
                f"inter.broker.listener.name must be a listener name defined in "
                f"advertised.listeners; {inter_name} is not (listeners: {sorted(names)})"
            )
        return cls(tuple(bound), merged, inter_name, protocols)

    def spec(self, name: str) -> ListenerSpec:
        for spec in self.bound:
            if spec.name == name:
                return spec
        raise KeyError(name)
