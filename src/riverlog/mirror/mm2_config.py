"""MirrorMaker 2's one properties file, read into flows (pure logic).

Syntax as Kafka's `connect-mirror-maker.properties`: `clusters = a, b`; per cluster
`a.bootstrap.servers` and client settings (`a.client.id`, or `a.consumer.X`, `a.producer.X`,
`a.admin.X` for one kind of client); a flow a->b runs when `a->b.enabled = true`; every flow
setting (`topics`, `groups`, `replication.policy.class`, `emit.checkpoints.interval.seconds`,
...) is read from `a->b.<key>` first, then `<key>`, then Kafka's default.

Exactly-once, as Kafka 3.5+'s dedicated MirrorMaker 2 switches it on: `exactly.once.source.support
= enabled` for the target cluster (`b.exactly.once.source.support`, or top-level for every
target, or per flow `a->b.exactly.once.source.support`); the connector-level
`exactly.once.support` is `requested` (default) or `required` (then the target must have it
enabled). A transaction per poll (`transaction.boundary = poll`, Kafka Connect's default) or
every `transaction.boundary.interval.ms` (`transaction.boundary = interval`; default
`offset.flush.interval.ms`). Its source offsets go to `offset.storage.topic` on the target (default
`mm2-offsets.<source>.internal`, `offset.storage.partitions` 25,
`offset.storage.replication.factor` 3). Clusters take Kafka's client security settings
(`a.security.protocol`, `a.ssl.*`, `a.sasl.*`, for every client of that cluster).
`metrics.listener = http://HOST:PORT` (top level) serves the process's metrics.

Invariant (fail closed): a key riverlog does not know, or a setting it cannot honour
(`exactly.once.source.support` other than enabled/disabled, `exactly.once.support=required`
without it, `sync.topic.acls.enabled` or `emit.heartbeats.enabled` true), raises ValueError
naming it. Settings that only configure a Kafka Connect worker's own storage are accepted and
unused (`UNUSED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from riverlog.client.security import is_security_key
from riverlog.metrics_http import parse_listener
from riverlog.mirror.policy import DEFAULT_POLICY, NameFilter, ReplicationPolicy, regex_list

DEFAULTS: dict[str, str] = {
    "enabled": "false",
    "topics": ".*",
    "topics.exclude": r".*[\-\.]internal, .*\.replica, __.*",
    "groups": ".*",
    "groups.exclude": "console-consumer-.*, connect-.*, __.*",
    "replication.policy.class": DEFAULT_POLICY,
    "replication.policy.separator": ".",
    "sync.topic.configs.enabled": "true",
    "sync.topic.configs.interval.seconds": "600",
    "emit.checkpoints.enabled": "true",
    "emit.checkpoints.interval.seconds": "60",
    "sync.group.offsets.enabled": "false",
    "sync.group.offsets.interval.seconds": "60",
    "refresh.topics.enabled": "true",
    "refresh.topics.interval.seconds": "600",
    "refresh.groups.interval.seconds": "600",
    "replication.factor": "2",
    "offset-syncs.topic.replication.factor": "3",
    "checkpoints.topic.replication.factor": "3",
    "offset.lag.max": "100",
    "tasks.max": "1",
    "offset.flush.interval.ms": "60000",
    "config.properties.exclude": (
        r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
        r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
        r"unclean\.leader\.election\.enable, min\.insync\.replicas"
    ),
    "exactly.once.support": "requested",
    "exactly.once.source.support": "disabled",
    "offset.storage.topic": "",
    "offset.storage.partitions": "25",
    "offset.storage.replication.factor": "3",
    "transaction.boundary": "poll",
    "transaction.boundary.interval.ms": "",
    "sync.topic.acls.enabled": "false",
    "emit.heartbeats.enabled": "false",
}
RENAMED = {"topics.blacklist": "topics.exclude", "groups.blacklist": "groups.exclude"}
UNUSED = {
    "status.storage.replication.factor",
    "config.storage.replication.factor",
    "heartbeats.topic.replication.factor",
    "status.storage.topic",
    "config.storage.topic",
    "key.converter",
    "value.converter",
    "header.converter",
    "clusters",
}
CLIENT_KINDS = ("consumer.", "producer.", "admin.")
PROCESS_KEYS = {"metrics.listener"}
"""Settings of the whole process (top level only)."""
CLUSTER_WORKER_KEYS = {"exactly.once.source.support"}
"""Per-cluster settings of the (target) worker, not of a client."""
COMMON_CLIENT_KEYS = {
    "bootstrap.servers",
    "client.id",
    "request.timeout.ms",
    "metadata.max.age.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "retry.backoff.ms",
    "socket.connection.setup.timeout.ms",
}


@dataclass(frozen=True)
class ClusterClients:
    """Client configs (Kafka keys) for one cluster alias."""

    alias: str
    common: dict[str, str]
    consumer: dict[str, str]
    producer: dict[str, str]
    admin: dict[str, str]
    worker: dict[str, str] = field(default_factory=dict)

    def consumer_config(self) -> dict[str, str]:
        return {**self.common, **self.consumer}

    def producer_config(self) -> dict[str, str]:
        return {**self.common, **self.producer}

    def admin_config(self) -> dict[str, str]:
        return {**self.common, **self.admin}


@dataclass(frozen=True)
class Flow:
    """One enabled replication flow source->target and its settings."""

    source: ClusterClients
    target: ClusterClients
    settings: dict[str, str]
    policy: ReplicationPolicy
    topics: NameFilter
    groups: NameFilter
    config_exclude: NameFilter

    @property
    def name(self) -> str:
        return f"{self.source.alias}->{self.target.alias}"

    def flag(self, key: str) -> bool:
        return self.settings[key].strip().lower() == "true"

    def number(self, key: str) -> int:
        return int(self.settings[key])

    def seconds(self, key: str) -> float:
        return float(self.settings[key])

    @property
    def exactly_once(self) -> bool:
        return self.settings["exactly.once.source.support"].strip().lower() == "enabled"

    @property
    def transaction_interval_ms(self) -> int:
        """How often an exactly-once flow commits: 0 after every poll (Kafka Connect's
        default `transaction.boundary=poll`), else `transaction.boundary.interval.ms`
        (default `offset.flush.interval.ms`)."""
        if self.settings["transaction.boundary"].strip().lower() == "poll":
            return 0
        interval = self.settings["transaction.boundary.interval.ms"].strip()
        return int(interval or self.settings["offset.flush.interval.ms"])

    @property
    def offsets_topic(self) -> str:
        return self.settings["offset.storage.topic"] or f"mm2-offsets.{self.source.alias}.internal"


def _bool_setting(key: str, value: str) -> None:
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"{key}: expected true or false, got {value!r}")


def _check(key: str, value: str) -> None:
    base = key.rsplit("->", 1)[-1].split(".", 1)[-1] if "->" in key else key
    if base.endswith((".enabled", ".enable")):
        _bool_setting(key, value)
    if base == "exactly.once.source.support" and value.strip().lower() not in (
        "enabled",
        "disabled",
    ):
        raise ValueError(f"{key}={value}: expected enabled or disabled")
    if base == "transaction.boundary" and value.strip().lower() not in ("poll", "interval"):
        raise ValueError(f"{key}={value}: riverlog's mirror takes poll or interval")
    if base == "exactly.once.support" and value.strip().lower() not in ("requested", "required"):
        raise ValueError(f"{key}={value}: expected requested or required")
    if base in ("sync.topic.acls.enabled", "emit.heartbeats.enabled") and value.strip() == "true":
        raise ValueError(f"{key}=true: riverlog's mirror does not do this; set it to false")
    numeric = ("interval.seconds", "replication.factor", ".max", ".ms", ".partitions")
    if base.endswith(numeric):
        try:
            number = float(value) if base.endswith("seconds") else int(value)
        except ValueError:
            raise ValueError(f"{key}: expected a number, got {value!r}") from None
        if number <= 0 and not base.endswith("replication.factor"):
            raise ValueError(f"{key}: expected a positive number, got {value!r}")


def parse(props: Mapping[str, str]) -> list[Flow]:
    """The enabled flows of an MM2 properties file (already split into key/values)."""
    aliases = [a.strip() for a in props.get("clusters", "").split(",") if a.strip()]
    if not aliases:
        raise ValueError("clusters: list the cluster aliases, e.g. clusters = a, b")
    props = {RENAMED.get(k, k): v for k, v in props.items()}
    flow_names = {f"{s}->{t}" for s in aliases for t in aliases if s != t}
    top: dict[str, str] = {}
    per_flow: dict[str, dict[str, str]] = {name: {} for name in flow_names}
    clients = {a: ClusterClients(a, {}, {}, {}, {}) for a in aliases}
    for key, value in props.items():
        prefix, _, rest = key.partition(".")
        if prefix in per_flow:
            rest = RENAMED.get(rest, rest)
            if rest not in DEFAULTS:
                raise ValueError(f"unknown setting {key!r} for flow {prefix}")
            _check(key, value)
            per_flow[prefix][rest] = value
        elif "->" in prefix:
            raise ValueError(f"{key}: {prefix} is not a flow between the listed clusters")
        elif prefix in clients:
            _client_key(clients[prefix], key, rest, value)
        elif key in PROCESS_KEYS:
            parse_listener(value)
        elif key in DEFAULTS:
            _check(key, value)
            top[key] = value
        elif key not in UNUSED:
            raise ValueError(f"unknown or unsupported setting {key!r}")
    for alias, c in clients.items():
        if "bootstrap.servers" not in c.common:
            raise ValueError(f"{alias}.bootstrap.servers is required")
    flows = []
    for name in sorted(flow_names):
        source, target = name.split("->")
        settings = {**DEFAULTS, **top, **clients[target].worker, **per_flow[name]}
        if settings["enabled"].strip().lower() != "true":
            continue
        eos = settings["exactly.once.source.support"].strip().lower() == "enabled"
        if settings["exactly.once.support"].strip().lower() == "required" and not eos:
            raise ValueError(
                f"{name}: exactly.once.support=required but {target}.exactly.once.source.support "
                "is not enabled"
            )
        flows.append(
            Flow(
                clients[source],
                clients[target],
                settings,
                ReplicationPolicy.named(
                    settings["replication.policy.class"], settings["replication.policy.separator"]
                ),
                NameFilter(regex_list(settings["topics"]), regex_list(settings["topics.exclude"])),
                NameFilter(regex_list(settings["groups"]), regex_list(settings["groups.exclude"])),
                NameFilter(regex_list(".*"), regex_list(settings["config.properties.exclude"])),
            )
        )
    if not flows:
        raise ValueError("no flow is enabled: set e.g. a->b.enabled = true")
    return flows


def _client_key(clients: ClusterClients, key: str, rest: str, value: str) -> None:
    for kind in CLIENT_KINDS:
        if rest.startswith(kind):
            getattr(clients, kind[:-1])[rest[len(kind) :]] = value
            return
    if rest in CLUSTER_WORKER_KEYS:
        _check(rest, value)
        clients.worker[rest] = value
    elif rest in COMMON_CLIENT_KEYS or is_security_key(rest):
        clients.common[rest] = value
    elif rest not in UNUSED:
        raise ValueError(f"unknown or unsupported cluster setting {key!r}")


def metrics_listener(props: Mapping[str, str]) -> str:
    """The process's `metrics.listener` ("" for none); ValueError if malformed."""
    value = props.get("metrics.listener", "").strip()
    parse_listener(value)
    return value
