"""Broker configuration with Kafka's names: `server.properties` files and `--override k=v`.

`BrokerConfig.from_properties(mapping)` validates every key it knows (type, range) and keeps
unknown keys aside (`unknown`) so that a typo is reported, not silently ignored. Log defaults
for topics come from the `log.*` keys, mapped to topic-level names by `topic_defaults()` the
way Kafka maps `log.retention.hours` → `retention.ms`.

Defaults are Kafka's, except where riverlog's single-node default differs and says so
(`offsets.topic.replication.factor` and `transaction.state.log.replication.factor` are 1,
and `transaction.state.log.min.isr` 1: a one-broker cluster cannot hold three replicas).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riverlog.properties import parse_properties
from riverlog.server.replication.replica_selector import SELECTORS


class ConfigError(ValueError):
    """A configuration value that is missing, malformed or out of range."""


def _int(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError(f"expected an integer, got {text!r}") from None
        if low is not None and value < low:
            raise ConfigError(f"{value} is below the minimum {low}")
        if high is not None and value > high:
            raise ConfigError(f"{value} is above the maximum {high}")
        return value

    return parse


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError(f"expected true or false, got {text!r}")


def _str(text: str) -> str:
    return text.strip()


def _list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _replica_selector(text: str) -> str:
    """KIP-392's `replica.selector.class`: none, or a selector riverlog implements."""
    name = text.strip()
    if name and name not in SELECTORS:
        raise ConfigError(f"riverlog implements only {', '.join(sorted(SELECTORS))}")
    return name


def _metrics_listener(text: str) -> str:
    """`http://HOST:PORT` of the Prometheus endpoint (`server/metrics/endpoint.py`), or ""."""
    from riverlog.metrics_http import parse_listener

    try:
        parse_listener(text.strip())
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return text.strip()


INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

SECURITY_KEYS = frozenset(
    {
        "listener.security.protocol.map",
        "inter.broker.listener.name",
        "security.inter.broker.protocol",
        "sasl.enabled.mechanisms",
        "sasl.mechanism.inter.broker.protocol",
        "connections.max.reauth.ms",
        "authorizer.class.name",
        "super.users",
        "allow.everyone.if.no.acl.found",
    }
)
SECURITY_KEY_PREFIXES = ("ssl.", "sasl.", "listener.name.")
"""Settings `riverlog.security` reads (many per listener, so not in `BROKER_KEYS`): known,
not reported as unknown; security validates them itself and refuses what it cannot
honour."""

# name: (parser, default as Kafka writes it)
BROKER_KEYS: dict[str, tuple[Callable[[str], Any], str]] = {
    "broker.id": (_int(-1), "0"),
    "listeners": (_list, "PLAINTEXT://127.0.0.1:9092"),
    "advertised.listeners": (_list, ""),
    "log.dirs": (_list, "/tmp/riverlog-logs"),
    "log.dir": (_list, ""),
    "num.partitions": (_int(1), "1"),
    "default.replication.factor": (_int(1), "1"),
    "auto.create.topics.enable": (_bool, "true"),
    "delete.topic.enable": (_bool, "true"),
    "socket.request.max.bytes": (_int(1), str(100 * 1024 * 1024)),
    "queued.max.request.bytes": (_int(-1), "-1"),
    "max.connections": (_int(0), str(INT32_MAX)),
    "max.connections.per.ip": (_int(0), str(INT32_MAX)),
    "max.connections.per.ip.overrides": (_str, ""),
    "connections.max.idle.ms": (_int(1), "600000"),
    "message.max.bytes": (_int(0), "1048588"),
    "log.segment.bytes": (_int(14), str(1024**3)),
    "log.roll.ms": (_int(1), ""),
    "log.roll.hours": (_int(1), "168"),
    "log.retention.ms": (_int(-1), ""),
    "log.retention.minutes": (_int(-1), ""),
    "log.retention.hours": (_int(-1), "168"),
    "log.retention.bytes": (_int(-1), "-1"),
    "log.retention.check.interval.ms": (_int(1), "300000"),
    "log.cleanup.policy": (_list, "delete"),
    "log.cleaner.enable": (_bool, "true"),
    "log.cleaner.delete.retention.ms": (_int(0), "86400000"),
    "log.cleaner.min.cleanable.ratio": (float, "0.5"),
    "log.cleaner.backoff.ms": (_int(0), "15000"),
    "log.cleaner.threads": (_int(0), "1"),
    "log.cleaner.min.compaction.lag.ms": (_int(0), "0"),
    "log.cleaner.max.compaction.lag.ms": (_int(1), str(2**63 - 1)),
    "log.index.interval.bytes": (_int(0), "4096"),
    "log.index.size.max.bytes": (_int(4), str(10 * 1024 * 1024)),
    "log.flush.interval.messages": (_int(1), str(INT64_MAX)),
    "log.flush.interval.ms": (_int(0), ""),
    "log.flush.scheduler.interval.ms": (_int(0), str(INT64_MAX)),
    "log.flush.offset.checkpoint.interval.ms": (_int(0), "60000"),
    "log.message.timestamp.type": (_str, "CreateTime"),
    "log.message.timestamp.before.max.ms": (_int(0), str(INT64_MAX)),
    "log.message.timestamp.after.max.ms": (_int(0), str(INT64_MAX)),
    "log.message.timestamp.difference.max.ms": (_int(0), str(INT64_MAX)),
    "min.insync.replicas": (_int(1), "1"),
    "unclean.leader.election.enable": (_bool, "false"),
    "compression.type": (_str, "producer"),
    "offsets.topic.num.partitions": (_int(1), "50"),
    "offsets.topic.replication.factor": (_int(1), "1"),
    "offsets.retention.minutes": (_int(1), "10080"),
    "group.min.session.timeout.ms": (_int(0), "6000"),
    "group.max.session.timeout.ms": (_int(0), "1800000"),
    "group.initial.rebalance.delay.ms": (_int(0), "3000"),
    "group.max.size": (_int(1), "2147483647"),
    "offsets.retention.check.interval.ms": (_int(1), "600000"),
    "offsets.topic.segment.bytes": (_int(14), "104857600"),
    "offsets.load.buffer.size": (_int(1), "5242880"),
    "offsets.commit.timeout.ms": (_int(1), "5000"),
    "offset.metadata.max.bytes": (_int(0), "4096"),
    "transaction.state.log.num.partitions": (_int(1), "50"),
    "transaction.state.log.replication.factor": (_int(1), "1"),
    "transaction.state.log.min.isr": (_int(1), "1"),
    "transaction.state.log.segment.bytes": (_int(14), "104857600"),
    "transaction.max.timeout.ms": (_int(1), "900000"),
    "transactional.id.expiration.ms": (_int(1), "604800000"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (_int(1), "10000"),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (_int(1), "3600000"),
    "transaction.partition.verification.enable": (_bool, "true"),
    "zookeeper.connect": (_str, ""),
    "zookeeper.session.timeout.ms": (_int(1), "18000"),
    "zookeeper.connection.timeout.ms": (_int(1), ""),
    "broker.rack": (_str, ""),
    "metrics.listener": (_metrics_listener, ""),
    "quota.window.num": (_int(1), "11"),
    "quota.window.size.seconds": (_int(1), "1"),
    "replica.lag.time.max.ms": (_int(1), "30000"),
    "replica.fetch.backoff.ms": (_int(0), "1000"),
    "replica.fetch.max.bytes": (_int(0), "1048576"),
    "replica.fetch.response.max.bytes": (_int(0), "10485760"),
    "replica.fetch.min.bytes": (_int(1), "1"),
    "replica.fetch.wait.max.ms": (_int(0), "500"),
    "replica.selector.class": (_replica_selector, ""),
    "controlled.shutdown.enable": (_bool, "true"),
    "auto.leader.rebalance.enable": (_bool, "true"),
    "leader.imbalance.check.interval.seconds": (_int(1), "300"),
    "leader.imbalance.per.broker.percentage": (_int(0), "10"),
    "controlled.shutdown.max.retries": (_int(0), "3"),
    "controlled.shutdown.retry.backoff.ms": (_int(0), "5000"),
    "num.network.threads": (_int(1), "3"),
    "num.io.threads": (_int(1), "8"),
    "leader.replication.throttled.rate": (_int(0), str(INT64_MAX)),
    "follower.replication.throttled.rate": (_int(0), str(INT64_MAX)),
}


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listener(text: str) -> Listener:
    """`PLAINTEXT://host:port` (an empty host means all interfaces) or plain `host:port`."""
    name, sep, rest = text.partition("://")
    if not sep:
        name, rest = "PLAINTEXT", text
    host, colon, port = rest.rpartition(":")
    if not colon:
        raise ConfigError(f"listener {text!r} has no port")
    try:
        port_number = int(port)
    except ValueError:
        raise ConfigError(f"listener {text!r} has a bad port") from None
    return Listener(name.upper(), host.strip("[]"), port_number)


def parse_overrides(items: list[str]) -> dict[str, str]:
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects key=value, got {item!r}")
        result[key.strip()] = value.strip()
    return result


@dataclass
class BrokerConfig:
    """Validated broker settings; `values` holds every known key, parsed."""

    values: dict[str, Any]
    unknown: dict[str, str] = field(default_factory=dict)
    given: dict[str, str] = field(default_factory=dict)
    """The known keys as set (file, `--override`, dynamic configs), before defaults."""

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        values: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        for key, (parser, default) in BROKER_KEYS.items():
            text = props.get(key, default)
            if text == "" and key not in props:
                values[key] = None
                continue
            try:
                values[key] = parser(text)
            except (ConfigError, ValueError) as e:
                raise ConfigError(f"{key}: {e}") from None
        for key, text in props.items():
            if key not in BROKER_KEYS:
                unknown[key] = text
        if values["replica.fetch.wait.max.ms"] >= values["replica.lag.time.max.ms"]:
            raise ConfigError(  # Kafka's check: else followers idle out of the ISR
                "replica.fetch.wait.max.ms should always be less than replica.lag.time.max.ms"
            )
        given = {k: v for k, v in props.items() if k in BROKER_KEYS}
        config = cls(values, unknown, given)
        config.connection_overrides()  # the per-IP overrides parse
        return config

    def unknown_key_warnings(self) -> list[str]:
        """Kafka's warning for each key it does not know (logged at start-up)."""
        return [
            f"The configuration '{key}' was supplied but isn't a known config."
            for key in sorted(self.unknown)
            if key not in SECURITY_KEYS and not key.startswith(SECURITY_KEY_PREFIXES)
        ]

    def connection_overrides(self) -> dict[str, int]:
        """`max.connections.per.ip.overrides` (`host:count,...`) as host → count."""
        out: dict[str, int] = {}
        for item in _list(self.values["max.connections.per.ip.overrides"] or ""):
            host, sep, count = item.rpartition(":")
            try:
                if not sep or not host:
                    raise ValueError
                out[host.strip("[]")] = _int(0)(count)
            except (ValueError, ConfigError):
                raise ConfigError(
                    f"max.connections.per.ip.overrides: expected host:count, got {item!r}"
                ) from None
        return out

    @classmethod
    def load(cls, path: Path | None, overrides: list[str]) -> BrokerConfig:
        props = parse_properties(path.read_text()) if path is not None else {}
        props.update(parse_overrides(overrides))
        return cls.from_properties(props)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def as_strings(self) -> dict[str, str]:
        """Every known key as Kafka would print it (DescribeConfigs of the broker)."""
        out: dict[str, str] = {}
        for key, value in self.values.items():
            if value is None:
                continue
            if isinstance(value, bool):
                out[key] = str(value).lower()
            elif isinstance(value, list):
                out[key] = ",".join(str(v) for v in value)
            else:
                out[key] = str(value)
        return out

    @property
    def broker_id(self) -> int:
        return int(self.values["broker.id"])

    @property
    def listeners(self) -> list[Listener]:
        return [parse_listener(item) for item in self.values["listeners"]]

    @property
    def advertised_listeners(self) -> list[Listener]:
        advertised = self.values["advertised.listeners"]
        return [parse_listener(item) for item in advertised] if advertised else self.listeners

    @property
    def data_dir(self) -> Path:
        return self.log_dirs[0]

    @property
    def log_dirs(self) -> list[Path]:
        """Every configured log directory (`log.dir` wins over `log.dirs`, as in Kafka)."""
        return [Path(d) for d in self.values["log.dir"] or self.values["log.dirs"]]

    def topic_defaults(self) -> dict[str, str]:
        """Topic-level config defaults derived from the broker's `log.*` keys."""
        v = self.values
        retention_ms = v["log.retention.ms"]
        if retention_ms is None and v["log.retention.minutes"] is not None:
            retention_ms = v["log.retention.minutes"] * 60_000
        if retention_ms is None:
            retention_ms = v["log.retention.hours"] * 3_600_000
        roll_ms = v["log.roll.ms"]
        if roll_ms is None:
            roll_ms = v["log.roll.hours"] * 3_600_000
        defaults = {
            "segment.bytes": v["log.segment.bytes"],
            "segment.ms": roll_ms,
            "retention.ms": retention_ms,
            "retention.bytes": v["log.retention.bytes"],
            "cleanup.policy": ",".join(v["log.cleanup.policy"]),
            "delete.retention.ms": v["log.cleaner.delete.retention.ms"],
            "min.cleanable.dirty.ratio": v["log.cleaner.min.cleanable.ratio"],
            "min.compaction.lag.ms": v["log.cleaner.min.compaction.lag.ms"],
            "max.compaction.lag.ms": v["log.cleaner.max.compaction.lag.ms"],
            "index.interval.bytes": v["log.index.interval.bytes"],
            "segment.index.bytes": v["log.index.size.max.bytes"],
            "flush.messages": v["log.flush.interval.messages"],
            "max.message.bytes": v["message.max.bytes"],
            "message.timestamp.type": v["log.message.timestamp.type"],
            "message.timestamp.before.max.ms": v["log.message.timestamp.before.max.ms"],
            "message.timestamp.after.max.ms": v["log.message.timestamp.after.max.ms"],
            "message.timestamp.difference.max.ms": v["log.message.timestamp.difference.max.ms"],
            "min.insync.replicas": v["min.insync.replicas"],
            "unclean.leader.election.enable": v["unclean.leader.election.enable"],
            "compression.type": v["compression.type"],
        }
        if v["log.flush.interval.ms"] is not None:
            defaults["flush.ms"] = v["log.flush.interval.ms"]
        return {
            key: str(value).lower() if isinstance(value, bool) else str(value)
            for key, value in defaults.items()
        }
