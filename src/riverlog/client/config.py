"""Client configuration with Kafka's key names: `bootstrap.servers`, `linger.ms`, `group.id`, ...

`ProducerConfig.parse(mapping)` / `ConsumerConfig.parse(mapping)` / `AdminConfig.parse(mapping)`
take a mapping of Kafka config keys to values (strings as in a `.properties` file, or Python
values) and return a typed, validated, frozen dataclass. Defaults are the Java client's
(Kafka 4.x: `linger.ms` 5, idempotence on). Invariant: a parsed config is always usable — an
unknown key, a value of the wrong type or out of range, or conflicting settings raise
`ValueError` naming the key, before any connection is made.

Idempotence follows the Java client: on by default, but silently off when the user set `acks`
to something other than `all` or `max.in.flight.requests.per.connection` above 5 without
asking for idempotence; asking for it explicitly with those settings is an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from riverlog.client.security import PLAINTEXT_SECURITY, ClientSecurity, is_security_key
from riverlog.protocol.records import compression

_T = TypeVar("_T")


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{key}: expected true or false, got {value!r}")


def _int(key: str, value: object, minimum: int = 0) -> int:
    if not isinstance(value, int | str):
        raise ValueError(f"{key}: expected an integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{key}: expected an integer, got {value!r}") from None
    if isinstance(value, bool) or number < minimum:
        raise ValueError(f"{key}: expected an integer ≥ {minimum}, got {value!r}")
    return number


def _acks(key: str, value: object) -> int:
    text = str(value).strip().lower()
    if text == "all":
        return -1
    if text in ("-1", "0", "1"):
        return int(text)
    raise ValueError(f"{key}: expected all, -1, 0 or 1, got {value!r}")


def _choice(*allowed: str) -> Callable[[str, object], str]:
    def parse(key: str, value: object) -> str:
        text = str(value).strip().lower()
        if text not in allowed:
            raise ValueError(f"{key}: expected one of {', '.join(allowed)}, got {value!r}")
        return text

    return parse


def _compression(key: str, value: object) -> int:
    try:
        return compression.codec_by_name(str(value).strip())
    except ValueError:
        raise ValueError(
            f"{key}: expected none, gzip, snappy, lz4 or zstd, got {value!r}"
        ) from None


def _text(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key}: expected a non-empty string, got {value!r}")
    return value.strip()


def _optional_text(key: str, value: object) -> str | None:
    return None if value is None or value == "" else _text(key, value)


def _strategies(key: str, value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"{key}: expected a comma-separated list of assignor names")
    names = tuple(str(i).strip() for i in items if str(i).strip())
    known = ("range", "roundrobin", "cooperative-sticky")
    for name in names:
        if name not in known:
            raise ValueError(f"{key}: unknown assignor {name!r} (known: {', '.join(known)})")
    return names


# Kafka key -> (dataclass field, parser). Shared by every client.
_COMMON: dict[str, tuple[str, Callable[[str, object], Any]]] = {
    "bootstrap.servers": ("bootstrap_servers", _text),
    "client.id": ("client_id", _text),
    "request.timeout.ms": ("request_timeout_ms", lambda k, v: _int(k, v, 1)),
    "metadata.max.age.ms": ("metadata_max_age_ms", lambda k, v: _int(k, v, 1)),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _int),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "socket.connection.setup.timeout.ms": (
        "connection_setup_timeout_ms",
        lambda k, v: _int(k, v, 1),
    ),
}


@dataclasses.dataclass(frozen=True)
class CommonConfig:
    bootstrap_servers: str = ""
    client_id: str = "riverlog"
    request_timeout_ms: int = 30_000
    metadata_max_age_ms: int = 300_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    retry_backoff_ms: int = 100
    connection_setup_timeout_ms: int = 10_000
    security: ClientSecurity = PLAINTEXT_SECURITY
    """From `security.protocol`, `ssl.*` and `sasl.*` (client/security.py)."""


def common_config(mapping: Mapping[str, object]) -> dict[str, object]:
    """The part of a config every client takes (for an admin client made from a producer's
    or a consumer's config)."""
    return {k: v for k, v in mapping.items() if k in _COMMON or is_security_key(k)}


def _parse(
    cls: type[_T],
    keys: dict[str, tuple[str, Callable[[str, object], Any]]],
    mapping: Mapping[str, object],
) -> tuple[_T, set[str]]:
    """The dataclass from `mapping`, and which keys the user set."""
    known = {**_COMMON, **keys}
    values: dict[str, Any] = {}
    security = {k: str(v) for k, v in mapping.items() if is_security_key(k)}
    if security:
        values["security"] = ClientSecurity.from_config(security)
    for key, raw in mapping.items():
        if key in security:
            continue
        if key not in known:
            raise ValueError(f"unknown config key {key!r} for {cls.__name__}")
        field_name, parser = known[key]
        values[field_name] = parser(key, raw)
    if not values.get("bootstrap_servers"):
        raise ValueError("bootstrap.servers is required")
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    assert set(values) <= names
    return cls(**values), set(mapping)


_PRODUCER: dict[str, tuple[str, Callable[[str, object], Any]]] = {
    "acks": ("acks", _acks),
    "linger.ms": ("linger_ms", _int),
    "batch.size": ("batch_size", lambda k, v: _int(k, v, 1)),
    "buffer.memory": ("buffer_memory", lambda k, v: _int(k, v, 1)),
    "max.block.ms": ("max_block_ms", _int),
    "max.request.size": ("max_request_size", lambda k, v: _int(k, v, 1)),
    "compression.type": ("compression_type", _compression),
    "enable.idempotence": ("enable_idempotence", _bool),
    "max.in.flight.requests.per.connection": ("max_in_flight", lambda k, v: _int(k, v, 1)),
    "retries": ("retries", _int),
    "delivery.timeout.ms": ("delivery_timeout_ms", lambda k, v: _int(k, v, 1)),
    "transactional.id": ("transactional_id", _optional_text),
    "transaction.timeout.ms": ("transaction_timeout_ms", lambda k, v: _int(k, v, 1)),
}


@dataclasses.dataclass(frozen=True)
class ProducerConfig(CommonConfig):
    acks: int = -1
    linger_ms: int = 5
    batch_size: int = 1_000_000
    """librdkafka's default, not Java's 16 KiB: per-request costs dominate in Python."""
    buffer_memory: int = 32 << 20
    max_block_ms: int = 60_000
    max_request_size: int = 1 << 20
    compression_type: int = compression.NONE
    enable_idempotence: bool = True
    max_in_flight: int = 5
    retries: int = 2_147_483_647
    delivery_timeout_ms: int = 120_000
    transactional_id: str | None = None
    """With it, the producer is transactional (`AsyncTransactionalProducer`)."""
    transaction_timeout_ms: int = 60_000

    @classmethod
    def parse(cls, mapping: Mapping[str, object]) -> ProducerConfig:
        config, given = _parse(cls, _PRODUCER, mapping)
        conflicts = config.acks != -1 or config.max_in_flight > 5
        if config.transactional_id is not None and (conflicts or not config.enable_idempotence):
            raise ValueError(
                "transactional.id needs idempotence: acks=all and "
                "max.in.flight.requests.per.connection ≤ 5"
            )
        if config.enable_idempotence and conflicts:
            if "enable.idempotence" in given:
                raise ValueError(
                    "enable.idempotence=true needs acks=all and "
                    "max.in.flight.requests.per.connection ≤ 5"
                )
            config = dataclasses.replace(config, enable_idempotence=False)
        return config


_CONSUMER: dict[str, tuple[str, Callable[[str, object], Any]]] = {
    "group.id": ("group_id", _optional_text),
    "group.instance.id": ("group_instance_id", _optional_text),
    "auto.offset.reset": ("auto_offset_reset", _choice("earliest", "latest", "none")),
    "enable.auto.commit": ("enable_auto_commit", _bool),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", lambda k, v: _int(k, v, 1)),
    "session.timeout.ms": ("session_timeout_ms", lambda k, v: _int(k, v, 1)),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", lambda k, v: _int(k, v, 1)),
    "max.poll.interval.ms": ("max_poll_interval_ms", lambda k, v: _int(k, v, 1)),
    "max.poll.records": ("max_poll_records", lambda k, v: _int(k, v, 1)),
    "partition.assignment.strategy": ("assignment_strategies", _strategies),
    "isolation.level": ("isolation_level", _choice("read_uncommitted", "read_committed")),
    "fetch.min.bytes": ("fetch_min_bytes", _int),
    "fetch.max.bytes": ("fetch_max_bytes", lambda k, v: _int(k, v, 1)),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", lambda k, v: _int(k, v, 1)),
    "check.crcs": ("check_crcs", _bool),
}


@dataclasses.dataclass(frozen=True)
class ConsumerConfig(CommonConfig):
    group_id: str | None = None
    group_instance_id: str | None = None
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    max_poll_records: int = 500
    assignment_strategies: tuple[str, ...] = ("range", "cooperative-sticky")
    isolation_level: str = "read_uncommitted"
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 << 20
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1 << 20
    check_crcs: bool = True

    @classmethod
    def parse(cls, mapping: Mapping[str, object]) -> ConsumerConfig:
        config, _ = _parse(cls, _CONSUMER, mapping)
        if config.group_instance_id is not None and config.group_id is None:
            raise ValueError("group.instance.id needs group.id")
        if config.heartbeat_interval_ms >= config.session_timeout_ms:
            raise ValueError("heartbeat.interval.ms must be lower than session.timeout.ms")
        return config


@dataclasses.dataclass(frozen=True)
class AdminConfig(CommonConfig):
    @classmethod
    def parse(cls, mapping: Mapping[str, object]) -> AdminConfig:
        config, _ = _parse(cls, {}, mapping)
        return config
