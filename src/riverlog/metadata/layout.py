"""The znode layout of the design docs, and the JSON each node holds.

    /brokers/ids/N                             broker registration (ephemeral)
    /brokers/topics/T                          replica assignment + topic id
    /brokers/topics/T/partitions/P/state       leader, leader_epoch, isr, controller_epoch
    /config/topics/T                           per-topic config overrides
    /config/brokers/N, /config/brokers/<default>  dynamic broker configs (one broker, all)
    /config/changes/config_change_NNNNNNNNNN   "topic T's config changed" (sequential)
    /controller, /controller_epoch             (with the cluster)
    /admin/delete_topics/T                     pending deletions (with the cluster)
    /admin/preferred_replica_election          partitions to give back to their preferred
                                               replica (written by tools, deleted by the
                                               controller once done)
    /admin/reassign_partitions                 pending partition reassignments (targets)
    /isr_change_notification/isr_change_N      leaders' ISR changes, for the controller
    /log_dir_event_notification/log_dir_event_NNNNNNNNNN
                                               a broker's log directory failed (KIP-112;
                                               sequential, read and deleted by the controller)

JSON formats follow Kafka's (field names, `"version"` numbers, topic ids as Kafka's 22-char
URL-safe base64), so tools that read a Kafka ZooKeeper tree read ours.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
CLUSTER_ID = "/cluster/id"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = f"{CONFIG_CHANGES}/config_change_"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = f"{LOG_DIR_EVENT_NOTIFICATION}/log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1
PRODUCER_ID_BLOCK = "/latest_producer_id_block"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS}/{topic}"


def broker_config_path(entity: str) -> str:
    """`entity`: a broker id, or `<default>` for the cluster-wide default."""
    return f"{BROKER_CONFIGS}/{entity}"


def encode_uuid(value: uuid.UUID) -> str:
    """Kafka's string form of a Uuid: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def decode_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _dump(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int

    def url(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    timestamp_ms: int = 0
    protocols: dict[str, str] = field(default_factory=dict)
    """Listener name → security protocol of every endpoint (one not given is named after
    its protocol, Kafka's default map; filled in on construction)."""
    broker_epoch: int = -1
    """The registration node's czxid (KIP-380's broker epoch) when read from the store;
    not part of the JSON."""

    def __post_init__(self) -> None:
        filled = {e.listener: self.protocols.get(e.listener, e.listener) for e in self.endpoints}
        object.__setattr__(self, "protocols", filled)

    def protocol(self, listener: str) -> str:
        return self.protocols.get(listener, listener)

    def to_json(self) -> bytes:
        # Kafka's "host"/"port" are those of the PLAINTEXT endpoint, or null/-1 without one
        plain = [e for e in self.endpoints if self.protocol(e.listener) == "PLAINTEXT"]
        return _dump(
            {
                "version": 5,
                "host": plain[0].host if plain else None,
                "port": plain[0].port if plain else -1,
                "endpoints": [e.url() for e in self.endpoints],
                "listener_security_protocol_map": {
                    e.listener: self.protocol(e.listener) for e in self.endpoints
                },
                "rack": self.rack,
                "jmx_port": -1,
                "timestamp": str(self.timestamp_ms),
            }
        )

    @classmethod
    def from_json(cls, broker_id: int, data: bytes) -> BrokerRegistration:
        raw = json.loads(data)
        endpoints = []
        for url in raw.get("endpoints", []):
            listener, _, rest = url.partition("://")
            host, _, port = rest.rpartition(":")
            endpoints.append(Endpoint(listener, host, int(port)))
        protocols = {
            str(k): str(v) for k, v in (raw.get("listener_security_protocol_map") or {}).items()
        }
        return cls(
            broker_id, tuple(endpoints), raw.get("rack"), int(raw.get("timestamp", 0)), protocols
        )


@dataclass(frozen=True)
class TopicAssignment:
    """Replica assignment of a topic: partition → replica broker ids (preferred leader first)."""

    topic_id: uuid.UUID
    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return _dump(
            {
                "version": 3,
                "topic_id": encode_uuid(self.topic_id),
                "partitions": {str(p): r for p, r in sorted(self.partitions.items())},
                "adding_replicas": {str(p): r for p, r in sorted(self.adding_replicas.items())},
                "removing_replicas": {str(p): r for p, r in sorted(self.removing_replicas.items())},
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> TopicAssignment:
        raw = json.loads(data)
        return cls(
            decode_uuid(raw["topic_id"]),
            {int(p): list(r) for p, r in raw["partitions"].items()},
            {int(p): list(r) for p, r in raw.get("adding_replicas", {}).items()},
            {int(p): list(r) for p, r in raw.get("removing_replicas", {}).items()},
        )


@dataclass(frozen=True)
class PartitionState:
    """Leader and ISR of one partition, as the controller writes it."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int

    def to_json(self) -> bytes:
        return _dump(
            {
                "version": 1,
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": self.isr,
                "controller_epoch": self.controller_epoch,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> PartitionState:
        raw = json.loads(data)
        return cls(raw["leader"], raw["leader_epoch"], list(raw["isr"]), raw["controller_epoch"])


def topic_config_json(config: dict[str, str]) -> bytes:
    """A `/config/topics/T` or `/config/brokers/B` node: Kafka's {"version":1,"config":{}}."""
    return _dump({"version": 1, "config": config})


def topic_config_from_json(data: bytes) -> dict[str, str]:
    return {str(k): str(v) for k, v in json.loads(data).get("config", {}).items()}


@dataclass(frozen=True)
class ConfigChange:
    """A `/config/changes` notification: Kafka's `{"version": 2, "entity_path": "topics/T"}`,
    plus the writer's clock (`riverlog_time_ms`), by which old notifications are purged."""

    entity_path: str
    time_ms: int

    def to_json(self) -> bytes:
        return _dump(
            {"version": 2, "entity_path": self.entity_path, "riverlog_time_ms": self.time_ms}
        )

    @classmethod
    def from_json(cls, data: bytes) -> ConfigChange:
        raw = json.loads(data)
        return cls(str(raw["entity_path"]), int(raw.get("riverlog_time_ms", 0)))


def preferred_replica_election_json(partitions: list[tuple[str, int]]) -> bytes:
    """Kafka's `{"version":1,"partitions":[{"topic":"t","partition":0},...]}`."""
    return _dump(
        {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]}
    )


def preferred_replica_election_from_json(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a preferred replica election, in order, each once; ValueError when
    the JSON is not Kafka's format."""
    try:
        raw = json.loads(data)
        entries = raw["partitions"]
        found = [(str(e["topic"]), int(e["partition"])) for e in entries]
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"not a preferred replica election: {e!r}") from None
    return list(dict.fromkeys(found))


def reassignments_json(targets: dict[tuple[str, int], list[int]]) -> bytes:
    """`/admin/reassign_partitions`: Kafka's
    `{"version":1,"partitions":[{"topic":T,"partition":P,"replicas":[...]}]}`."""
    return _dump(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r)}
                for (t, p), r in sorted(targets.items())
            ],
        }
    )


def reassignments_from_json(data: bytes) -> dict[tuple[str, int], list[int]]:
    """The targets of `/admin/reassign_partitions` (Kafka's optional `log_dirs` ignored);
    ValueError when it is not that format."""
    try:
        raw = json.loads(data) if data else {"partitions": []}
        return {
            (str(e["topic"]), int(e["partition"])): [int(r) for r in e["replicas"]]
            for e in raw["partitions"]
        }
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"not a partition reassignment: {e!r}") from None


def log_dir_event_to_json(broker_id: int) -> bytes:
    """Kafka's LogDirEventNotification: a log directory of `broker_id` failed."""
    return json.dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT}).encode()


def log_dir_event_broker(data: bytes) -> int | None:
    """The broker of a log directory failure event (None: not one riverlog understands)."""
    try:
        raw = json.loads(data)
        if raw.get("event") != LOG_DIR_FAILURE_EVENT:
            return None
        return int(raw["broker"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
