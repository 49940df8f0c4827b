"""The topic registry: topics, their ids, partition assignments and config overrides.

The truth lives in the metadata store under the design docs' layout (`/brokers/topics/T`,
`/config/topics/T`); this class keeps a cache for the request path and writes those nodes for
the admin APIs (create, add partitions, configs); the controller elects leaders for what it
writes and deletes topics, and brokers refresh from its UpdateMetadata. Topic names follow
Kafka's rules: 1-249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.

Errors are `KafkaError`s with the code a CreateTopics/DeleteTopics/CreatePartitions response
carries: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT.

Used from the event loop thread only.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from riverlog.metadata import layout
from riverlog.metadata.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError
from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError

_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_NAME_LENGTH = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def refuse_client_append(topic: str) -> None:
    """Kafka's ReplicaManager check: clients cannot produce to an internal topic (its
    records belong to the coordinators, which append through the replica manager)."""
    if topic in INTERNAL_TOPICS:
        raise KafkaError(
            error_codes.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic}"
        )


@dataclass(frozen=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, list[int]]
    config: dict[str, str]

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


def validate_topic_name(name: str) -> None:
    problem = None
    if not name:
        problem = "Topic name is illegal, it can't be empty"
    elif name in (".", ".."):
        problem = 'Topic name cannot be "." or ".."'
    elif len(name) > MAX_NAME_LENGTH:
        problem = f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters"
    elif not _LEGAL_NAME.match(name):
        problem = (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    if problem is not None:
        raise KafkaError(error_codes.INVALID_TOPIC_EXCEPTION, problem)


class TopicRegistry:
    """Topics by name and by id, backed by the metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}

    def load(self) -> None:
        """(Re)read every topic from the store."""
        self._by_name.clear()
        self._by_id.clear()
        if not self._store.exists(layout.TOPICS):
            return
        for name in self._store.children(layout.TOPICS):
            self._cache(self._read(name))

    def _read(self, name: str) -> Topic:
        assignment = layout.TopicAssignment.from_json(self._store.get(layout.topic_path(name)).data)
        try:
            config = layout.topic_config_from_json(
                self._store.get(layout.topic_config_path(name)).data
            )
        except NoNodeError:
            config = {}
        return Topic(name, assignment.topic_id, assignment.partitions, config)

    def refresh(self, name: str) -> Topic | None:
        """Re-read one topic from the store (created or changed by another broker)."""
        try:
            topic = self._read(name)
        except NoNodeError:
            self.forget(name)
            return None
        self.forget(name)
        self._cache(topic)
        return topic

    def forget(self, name: str) -> None:
        """Drop a topic from the cache (deleted by the controller)."""
        topic = self._by_name.pop(name, None)
        if topic is not None:
            self._by_id.pop(topic.topic_id, None)

    def _cache(self, topic: Topic) -> None:
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    def get(self, name: str) -> Topic | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def all(self) -> list[Topic]:
        return [self._by_name[n] for n in sorted(self._by_name)]

    def create(
        self,
        name: str,
        assignment: dict[int, list[int]],
        config: dict[str, str],
        *,
        validate_only: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> Topic:
        """Register a new topic; with `validate_only` check everything and write nothing."""
        validate_topic_name(name)
        if name in self._by_name:
            raise KafkaError(error_codes.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if not assignment:
            raise KafkaError(
                error_codes.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
            )
        if sorted(assignment) != list(range(len(assignment))):
            raise KafkaError(
                error_codes.INVALID_REPLICA_ASSIGNMENT,
                "Partitions should be a consecutive 0-based integer sequence",
            )
        topic = Topic(name, topic_id or uuid.uuid4(), dict(assignment), dict(config))
        if validate_only:
            return topic
        if self._store.exists(layout.topic_path(name)):  # created by another broker
            raise KafkaError(error_codes.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if config:
            self._write(layout.topic_config_path(name), layout.topic_config_json(config))
        try:
            self._store.create(
                layout.topic_path(name),
                layout.TopicAssignment(topic.topic_id, topic.partitions).to_json(),
            )
        except NodeExistsError:
            raise KafkaError(
                error_codes.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            ) from None
        self._cache(topic)
        return topic

    def add_partitions(
        self, name: str, new_partitions: dict[int, list[int]], *, validate_only: bool = False
    ) -> Topic:
        """Grow a topic: read from the store (the controller changes assignments by
        reassignment), refused while a reassignment moves its replicas, as Kafka does."""
        self._require(name)
        node = self._store.get(layout.topic_path(name))
        stored = layout.TopicAssignment.from_json(node.data)
        if stored.adding_replicas or stored.removing_replicas:
            raise KafkaError(
                error_codes.REASSIGNMENT_IN_PROGRESS,
                f"A partition reassignment of topic '{name}' is in progress.",
            )
        topic = self.refresh(name) or self._require(name)
        expected_first = len(topic.partitions)
        if not new_partitions or min(new_partitions) != expected_first:
            raise KafkaError(
                error_codes.INVALID_PARTITIONS,
                f"Topic currently has {expected_first} partitions, which is higher than or "
                "equal to the requested count.",
            )
        updated = Topic(name, topic.topic_id, {**topic.partitions, **new_partitions}, topic.config)
        if not validate_only:
            try:
                self._store.set(
                    layout.topic_path(name),
                    layout.TopicAssignment(updated.topic_id, updated.partitions).to_json(),
                    expected_version=node.version,
                )
            except BadVersionError:
                raise KafkaError(
                    error_codes.REASSIGNMENT_IN_PROGRESS,
                    f"Topic '{name}' changed meanwhile; try again.",
                ) from None
            self._cache(updated)
        return updated

    def set_config(self, name: str, config: dict[str, str]) -> Topic:
        """Replace the topic's config overrides."""
        topic = self._require(name)
        self._write(layout.topic_config_path(name), layout.topic_config_json(config))
        updated = Topic(name, topic.topic_id, topic.partitions, dict(config))
        self._cache(updated)
        return updated

    def _require(self, name: str) -> Topic:
        topic = self._by_name.get(name)
        if topic is None:
            raise KafkaError(
                error_codes.UNKNOWN_TOPIC_OR_PARTITION,
                "This server does not host this topic-partition.",
            )
        return topic

    def _write(self, path: str, data: bytes) -> None:
        if self._store.exists(path):
            self._store.set(path, data)
        else:
            self._store.create(path, data)
