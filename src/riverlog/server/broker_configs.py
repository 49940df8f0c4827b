"""Dynamic broker configs, and where every config value comes from (Kafka's config sources).

A broker's effective config is, key by key, the first of: its own dynamic config
(`/config/brokers/<id>`), the cluster's dynamic default (`/config/brokers/<default>`), its
static config (`server.properties`, `--override`), the built-in default. The znodes hold
Kafka's `{"version":1,"config":{...}}`; whoever changes one announces `brokers/<id>` or
`brokers/<default>` on `/config/changes` (`server/config_changes.py`), and each broker it
concerns re-reads both nodes and applies the result without a restart: log defaults
(retention, segment size, min ISR, cleanup policy, ...) reach every log not overriding them,
and everyone reading `broker.config` sees the new values (unclean leader election, the
replication throttle rates, the connection limits for new connections, whether partition
leaders verify transactions, KIP-890). Only `DYNAMIC_KEYS`
may be set dynamically: Kafka's dynamic keys that riverlog applies. Kafka's other dynamic
keys (per-listener TLS stores, `sasl.kerberos.*`, thread counts, ...) get the answer Kafka
gives a key it cannot update dynamically, so nothing is stored that is not applied.

DescribeConfigs reports each value with its source and its synonyms (`synonyms`): for a
broker key, the keys that may set it (log.retention.ms, .minutes, .hours), source by source
in precedence order; for a topic key, its own override then the broker key it defaults to.

`DynamicBrokerConfigs` does the store I/O; the synonym functions are pure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from riverlog.metadata import layout
from riverlog.metadata.store import MetadataStore, NodeExistsError, NoNodeError
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.server.config import BROKER_KEYS, BrokerConfig, ConfigError
from riverlog.storage.log_config import InvalidConfigError, LogConfig

log = logging.getLogger(__name__)

DEFAULT_ENTITY = "<default>"
ENTITY_PREFIX = "brokers/"

# ConfigSource of DescribeConfigs v1+.
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
SOURCE_NAMES = {
    DYNAMIC_TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG",
    DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG",
    DEFAULT_CONFIG: "DEFAULT_CONFIG",
}

DYNAMIC_KEYS = frozenset(
    {
        "log.retention.ms",
        "log.retention.bytes",
        "log.segment.bytes",
        "log.roll.ms",
        "log.cleanup.policy",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.message.timestamp.type",
        "message.max.bytes",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "log.message.timestamp.difference.max.ms",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "compression.type",
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "log.cleaner.backoff.ms",
        "log.cleaner.threads",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "transaction.partition.verification.enable",
    }
)
"""Kafka's cluster-wide (and per-broker) dynamic broker configs that riverlog has."""

_RETENTION = ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
_ROLL = ["log.roll.ms", "log.roll.hours"]
BROKER_SYNONYMS = {name: names for names in (_RETENTION, _ROLL) for name in names}
"""Broker keys set by more than one key, most precise first (Kafka's synonyms)."""

TOPIC_TO_BROKER = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.type": "compression.type",
}
"""Topic configs and the broker configs they default to (what `topic_defaults` derives)."""

BUILT_IN = {key: default for key, (_, default) in BROKER_KEYS.items() if default != ""}


@dataclass(frozen=True)
class Synonym:
    source: int
    name: str
    value: str

    def __str__(self) -> str:
        return f"{SOURCE_NAMES.get(self.source, 'UNKNOWN')}:{self.name}={self.value}"


@dataclass(frozen=True)
class Layers:
    """Where broker config values come from, in precedence order."""

    per_broker: Mapping[str, str]
    cluster_default: Mapping[str, str]
    static: Mapping[str, str]


def broker_synonyms(name: str, layers: Layers) -> list[Synonym]:
    """Kafka's synonym list of a broker key: each source in precedence order, within it each
    synonym; the list starts at the first entry for `name` itself (a more precise synonym set
    elsewhere is not this key's)."""
    names = BROKER_SYNONYMS.get(name, [name])
    sources = [
        (DYNAMIC_BROKER_CONFIG, layers.per_broker),
        (DYNAMIC_DEFAULT_BROKER_CONFIG, layers.cluster_default),
        (STATIC_BROKER_CONFIG, layers.static),
        (DEFAULT_CONFIG, BUILT_IN),
    ]
    found = [
        Synonym(source, n, values[n]) for source, values in sources for n in names if n in values
    ]
    while found and found[0].name != name:
        found.pop(0)
    return found


def topic_synonyms(name: str, overrides: Mapping[str, str], layers: Layers) -> list[Synonym]:
    """A topic key: its override, then the broker key it defaults to and that key's."""
    found = [Synonym(DYNAMIC_TOPIC_CONFIG, name, overrides[name])] if name in overrides else []
    broker_key = TOPIC_TO_BROKER.get(name)
    if broker_key is not None:
        found += broker_synonyms(broker_key, layers)
    return found


def source_of(synonyms: list[Synonym]) -> int:
    return synonyms[0].source if synonyms else DEFAULT_CONFIG


def entity_name(resource_name: str) -> str:
    """The znode name of a BROKER resource: "" is the cluster default."""
    return resource_name or DEFAULT_ENTITY


class DynamicBrokerConfigs:
    """One broker's view of `/config/brokers`: its own and the cluster default overrides."""

    def __init__(self, static: BrokerConfig, store: MetadataStore) -> None:
        self.static = static
        self.store = store
        self.broker_id = static.broker_id
        self.per_broker: dict[str, str] = {}
        self.cluster_default: dict[str, str] = {}

    @property
    def layers(self) -> Layers:
        return Layers(self.per_broker, self.cluster_default, self.static.given)

    def read(self, entity: str) -> dict[str, str]:
        try:
            return layout.topic_config_from_json(
                self.store.get(layout.broker_config_path(entity)).data
            )
        except NoNodeError:
            return {}

    def reload(self) -> BrokerConfig:
        """Re-read both nodes; the effective config. A stored value this broker cannot use
        (written by hand, or by a newer version) is logged and left out."""
        self.per_broker = self._usable(self.read(str(self.broker_id)))
        self.cluster_default = self._usable(self.read(DEFAULT_ENTITY))
        return self.effective(self.per_broker, self.cluster_default)

    def _usable(self, config: dict[str, str]) -> dict[str, str]:
        out = {}
        for key, value in config.items():
            try:
                check_value(key, value)
            except KafkaError as e:
                log.warning("dynamic broker config %s=%r ignored: %s", key, value, e)
                continue
            out[key] = value
        return out

    def effective(
        self, per_broker: Mapping[str, str], cluster_default: Mapping[str, str]
    ) -> BrokerConfig:
        return BrokerConfig.from_properties({**self.static.given, **cluster_default, **per_broker})

    def validate(self, entity: str, config: Mapping[str, str]) -> None:
        """Raise INVALID_REQUEST unless `config` may become `entity`'s dynamic config."""
        for key, value in config.items():
            check_value(key, value)
        per_broker = config if entity != DEFAULT_ENTITY else self.per_broker
        default = config if entity == DEFAULT_ENTITY else self.cluster_default
        try:
            effective = self.effective(per_broker, default)
            LogConfig.from_map(effective.topic_defaults())
            effective.connection_overrides()
        except (InvalidConfigError, ConfigError) as e:
            raise KafkaError(error_codes.INVALID_REQUEST, f"Invalid config value: {e}") from None

    def write(self, entity: str, config: Mapping[str, str]) -> None:
        """Replace `entity`'s dynamic config in the store (creating its node)."""
        path = layout.broker_config_path(entity)
        data = layout.topic_config_json(dict(config))
        try:
            self.store.set(path, data)
        except NoNodeError:
            try:
                self.store.create(path, data)
            except NodeExistsError:  # created meanwhile: ours is the later write
                self.store.set(path, data)


def check_value(key: str, value: str) -> None:
    """A key that may be set dynamically, with a value of its type (else INVALID_REQUEST,
    as Kafka answers)."""
    if key not in DYNAMIC_KEYS:
        raise KafkaError(
            error_codes.INVALID_REQUEST, f"Cannot update these configs dynamically: Set({key})"
        )
    try:
        BROKER_KEYS[key][0](value)
    except (ConfigError, ValueError) as e:
        raise KafkaError(
            error_codes.INVALID_REQUEST, f"Invalid value {value} for configuration {key}: {e}"
        ) from None
